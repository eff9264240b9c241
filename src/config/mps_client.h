// An MPS client configured from the container's limits (docs/priority.md#mps-or-time-slices): the
// variables the CUDA driver reads when it connects to an MPS server, derived from the operator's
// values before the driver starts, and what the client can see of the server it would join.
// Pure functions over their inputs (the interposer's mps_client.cpp reads the environment and the
// files, then sets the variables); none allocates after start or reads the process environment.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuslice::config {

inline constexpr const char* kMpsPipeDirVar = "CUDA_MPS_PIPE_DIRECTORY";
inline constexpr const char* kMpsPinnedLimitVar = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
inline constexpr const char* kMpsClientPriorityVar = "CUDA_MPS_CLIENT_PRIORITY";
inline constexpr const char* kMpsThreadPercentVar = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
// Where the driver looks for the control daemon when CUDA_MPS_PIPE_DIRECTORY is not set.
inline constexpr const char* kMpsDefaultPipeDir = "/tmp/nvidia-mps";
// The control daemon's pid file in its pipe directory (NVIDIA's name).
inline constexpr const char* kMpsControlPidFile = "nvidia-cuda-mps-control.pid";

// GPUSLICE_MPS: what a client does when the MPS server it would join serves another user id (the
// control daemon then makes it wait, silently, until that server's clients have all ended).
enum class MpsPolicy {
  Wait,      // `wait` (default): wait as the driver does, saying so in the log at once and every 10 s
  Fallback,  // `fallback`: run without MPS (time-sliced), hiding the pipe directory from the driver
  Error,     // `error`: fail closed with a message naming the user id
};

// GPUSLICE_MPS_PRIORITY (the operator's limits file): how a container below `high` yields to a
// higher one under MPS.
enum class MpsYield {
  Gate,    // `gate` (default): the host gate holds its launches while a higher one is busy, as
           // without MPS (its in-flight bound 1 ms), besides the server's client priority
  Server,  // `server`: the server's client priority (and GPUSLICE_MPS_LOW_THREADS) alone: never held
};
std::optional<MpsYield> parse_mps_yield(std::string_view text);
const char* mps_yield_name(MpsYield yield);

// GPUSLICE_MPS_COMPUTE (limits file only: the operator's choice, never the tenant's): how a compute
// limit holds a client under MPS (docs/compute-limiter.md#under-mps-sm-partitioning-or-gpu-time).
enum class MpsComputeMode {
  Time,     // `time` (default): the GPU-time limiter, as without MPS
  Threads,  // `threads`: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = the limit; the GPU-time limiter steps aside
};

inline constexpr const char* kMpsComputeKey = "GPUSLICE_MPS_COMPUTE";
const char* mps_compute_mode_name(MpsComputeMode mode);
// `threads` or `time` (any case); nullopt otherwise.
std::optional<MpsComputeMode> parse_mps_compute_mode(std::string_view text);

// Under `threads`, the GPU-time limit (percent; 0: none) that holds a client whose SMs were capped
// at `share` percent when it started, once the container's live limit is `live` percent: none while
// the live limit is at least the share (the SMs hold it; a raise applies to processes started after
// it), else the share of its time that leaves it `live` percent of the device (live / share of its
// time on share percent of the SMs). `share` 0 (no SM share): `live` itself.
constexpr unsigned partition_time_limit(unsigned live, unsigned share) {
  if (share == 0) return live;
  if (live == 0 || live >= 100 || live >= share) return 0;
  const unsigned scaled = (live * 100 + share / 2) / share;
  return scaled < 1 ? 1 : (scaled > 99 ? 99 : scaled);
}

// What the client's variables are derived from.
struct MpsClientInputs {
  // The container's quota per device, keyed by the client's CUDA ordinals (after
  // CUDA_VISIBLE_DEVICES), only devices with a quota.
  std::vector<std::pair<int, std::uint64_t>> quota_by_ordinal;
  bool high = false;  // the container runs at `high` (asked for and assigned)
  // The operator's active-thread percentage for containers below `high` (limits file
  // GPUSLICE_MPS_LOW_THREADS); none: not set.
  std::optional<unsigned> low_threads;
  // The operator's GPUSLICE_MPS_COMPUTE, and the compute limit (percent, 0: none) of every device
  // the client can use, in its ordinals (nullopt: which devices it sees is not known).
  MpsComputeMode compute_mode = MpsComputeMode::Time;
  std::optional<std::vector<unsigned>> compute_by_ordinal;
  // The tenant's own values, as its environment has them (may be malformed).
  std::optional<std::string> tenant_pinned;
  std::optional<std::string> tenant_priority;
  std::optional<std::string> tenant_threads;
};

// The variables to set (an absent one is left as the tenant has it).
struct MpsClientEnv {
  std::optional<std::string> pinned;   // CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, e.g. "0=8192M,1=4096M"
  std::string priority;                // CUDA_MPS_CLIENT_PRIORITY: "0" (normal) or "1" (below normal)
  std::optional<std::string> threads;  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 1-100
  bool tenant_lowered = false;         // a value the tenant set was lowered or replaced
  // `threads` in force: the client's SM share in percent (the threads value), which holds its
  // compute limit in place of the GPU-time limiter (partition_time_limit); 0: limited by GPU time.
  unsigned sm_share = 0;
  // Which compute-limit mode applies and why, for the client's log line; empty without a limit.
  std::string compute_note;
};

// Per ordinal the lower of the quota and the tenant's own limit (written in MiB, "M", rounded
// down, at least 1M); ordinals only the tenant limits keep its value; a malformed tenant value is
// replaced. The priority is 0 at `high` and 1 below it, the tenant's 1 kept. Threads: the lowest of
// the operator's share below `high`, the compute limit under `threads` (at every level, where every
// device the client sees has the same limit: the variable holds all of them) and the tenant's own.
MpsClientEnv derive_mps_client_env(const MpsClientInputs& in);

// "0=8G,1=512M": ordinal=size, the size in bytes or with a unit G, M or K (binary, optionally
// followed by B, any case). Nullopt when malformed.
std::optional<std::vector<std::pair<int, std::uint64_t>>> parse_mps_pinned_limit(std::string_view text);

// The GPUs of the machine in CUDA's default order, before the driver starts: the UUIDs the kernel
// module lists under `gpus_dir` (/proc/driver/nvidia/gpus/<pci bus id>/information, "GPU UUID:"),
// in PCI bus order (the order NVML numbers them and this project assumes CUDA does; see
// interposer/nvml_slice.cpp). Lower-case. Empty when the directory cannot be read.
std::vector<std::string> machine_gpu_uuids(const std::string& gpus_dir);

// The client's ordinals: for each, the UUID (lower-case; empty when unknown), from
// CUDA_VISIBLE_DEVICES (indices into `machine`, UUIDs or their prefixes; up to the first invalid
// entry, as CUDA reads it) or, when it is unset, `machine` itself.
std::vector<std::string> client_ordinal_uuids(const std::optional<std::string>& visible_devices,
                                              const std::vector<std::string>& machine);

// Whether the MPS server this client would join serves another user: the control daemon's pid
// from <pipe_dir>/nvidia-cuda-mps-control.pid, checked to be an MPS process under `proc_root`
// (/proc: the pid is the host's when the daemon runs outside this pid namespace), and its child
// processes (the servers, from <proc>/<pid>/task/<pid>/children); the user id of the first one
// that is not `self`. Nullopt when none does or nothing can be seen.
std::optional<uid_t> other_uid_mps_server(const std::string& proc_root, const std::string& pipe_dir,
                                          uid_t self);

}  // namespace gpuslice::config
