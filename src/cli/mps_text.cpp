#include "cli/mps_text.h"

#include <string>

#include "cli/terminal_text.h"

namespace gpuslice::cli {

void print_mps_text(const node::mps::MpsReport& r, std::FILE* out) {
  using node::mps::MpsState;
  std::string line = std::string("MPS: ") + node::mps::mps_state_name(r.state);
  if (r.state == MpsState::Refused || (r.state == MpsState::Restarting && !r.reason.empty()))
    line += ": " + r.reason;
  std::string detail;
  if (r.control_pid > 0) detail += "control daemon pid " + std::to_string(r.control_pid) + ", ";
  if (r.state == MpsState::Running) {
    detail += "servers";
    if (r.server_pids.empty()) detail += " none";
    for (int pid : r.server_pids) detail += " " + std::to_string(pid);
    detail += ", ";
  }
  detail += "restarts " + std::to_string(r.restarts);
  std::fprintf(out, "%s (%s)\n", terminal_text(line, 400).c_str(), detail.c_str());
  if (r.state == MpsState::Running && !r.reason.empty())
    std::fprintf(out, "  last check: %s\n", terminal_text(r.reason, 300).c_str());
  if (!r.pipe_dir.empty())
    std::fprintf(out, "  pipe directory: %s (CUDA_MPS_PIPE_DIRECTORY)\n",
                 terminal_text(r.pipe_dir, 300).c_str());
  if (r.state != MpsState::Off && r.state != MpsState::Refused)
    std::fprintf(out, "  %s\n", node::mps::kMpsFaultCaveat);
}

}  // namespace gpuslice::cli
