// The state of the node's MPS control daemon as gpuslice manages it: one value per concept, one name
// table (both directions), and the report every view shows (status, API, metrics, state file).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::node::mps {

enum class MpsState {
  Off,         // not managed (not asked for, or stopped)
  Starting,    // `nvidia-cuda-mps-control -d` launched, not yet answering
  Running,     // alive and answering get_server_list
  Restarting,  // it ended or could not start; the next attempt waits for its backoff
  Refused,     // MPS cannot run here; `reason` says why (checked again every recheck interval)
};

inline constexpr const char* kMpsStateNames[] = {"off", "starting", "running", "restarting", "refused"};

const char* mps_state_name(MpsState state);
std::optional<MpsState> parse_mps_state(std::string_view text);

// One line users see beside the state: what sharing a GPU through one MPS server costs in isolation.
// docs/mps.md carries the measured detail.
inline constexpr const char* kMpsFaultCaveat =
    "fault containment: a fatal GPU fault in one MPS client ends the other clients of the same GPU "
    "(measured on H200: an illegal address ended both; docs/mps.md)";

struct MpsReport {
  MpsState state = MpsState::Off;
  std::string reason;          // refused: why; restarting: what ended or failed last
  std::uint64_t restarts = 0;  // control daemons that ended and were started again, since start
  int control_pid = 0;         // the control daemon (0: none)
  std::vector<int> server_pids;
  std::string pipe_dir, log_dir;
  std::uint64_t since_ns = 0;  // wall clock of the last state change
  int manager_pid = 0;         // the process that manages it (the state file's writer)
};

}  // namespace gpuslice::node::mps
