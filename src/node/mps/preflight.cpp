#include "node/mps/preflight.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/safe_file.h"
#include "node/mps/mps_paths.h"

namespace gpuslice::node::mps {

namespace {

const char* compute_mode_name(DeviceMode::Compute mode) {
  switch (mode) {
    case DeviceMode::Compute::Default:
      return "default";
    case DeviceMode::Compute::ExclusiveThread:
      return "exclusive-thread";
    case DeviceMode::Compute::Prohibited:
      return "prohibited";
    case DeviceMode::Compute::ExclusiveProcess:
      return "exclusive-process";
  }
  return "unknown";
}

}  // namespace

std::optional<std::string> device_refusal(const std::vector<DeviceMode>& devices) {
  for (const DeviceMode& d : devices) {
    const std::string gpu = "GPU " + std::to_string(d.index);
    if (d.mig) return gpu + " has MIG mode on: gpuslice manages one MPS control daemon for whole GPUs only";
    if (d.compute == DeviceMode::Compute::Prohibited)
      return gpu + " is in compute mode 'prohibited': no CUDA context, hence no MPS server, can run on it";
    if ((d.compute == DeviceMode::Compute::ExclusiveProcess ||
         d.compute == DeviceMode::Compute::ExclusiveThread) &&
        !d.compute_pids.empty())
      return gpu + " is in compute mode '" + compute_mode_name(d.compute) + "' and held by process " +
             std::to_string(d.compute_pids.front()) + ": an MPS server could not open it";
  }
  return std::nullopt;
}

Result<std::string> find_binary(const std::string& name, const char* path_env) {
  auto executable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    return make_error(
        name +
        " is not an executable file (nvidia-cuda-mps-control ships with the NVIDIA driver's utilities)");
  }
  std::string_view path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    std::size_t colon = path.find(':');
    std::string dir(path.substr(0, colon));
    if (!dir.empty() && executable(dir + "/" + name)) return dir + "/" + name;
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  return make_error(
      name + " not found on PATH (" + std::string(path_env != nullptr ? path_env : "") +
      "): install the NVIDIA driver's utilities (nvidia-utils / nvidia-compute-utils) or give its path");
}

bool process_alive(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  // /proc/<pid>/stat: "pid (comm) S ..."; comm may hold spaces and parentheses, so take the last ')'.
  auto stat = fs::read_small_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!stat) return true;  // no /proc: kill(0) is all we know
  std::size_t close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return true;
  char state = (*stat)[close + 2];
  return state != 'Z' && state != 'X';
}

std::optional<int> live_control_pid(const std::string& pipe_dir) {
  auto text = fs::read_small_file(pipe_dir + "/" + kControlPidFile, 64);
  if (!text) return std::nullopt;
  int pid = 0;
  const char* begin = text->data();
  while (begin < text->data() + text->size() && (*begin == ' ' || *begin == '\n')) ++begin;
  auto [end, ec] = std::from_chars(begin, text->data() + text->size(), pid);
  if (ec != std::errc() || end == begin || pid <= 0) return std::nullopt;
  if (!process_alive(pid)) return std::nullopt;
  return pid;
}

}  // namespace gpuslice::node::mps
