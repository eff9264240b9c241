// Configuration of gpuslice: the native GPUSLICE_* variables and every compatibility dialect
// (docs/configuration.md), parsed into one Settings value. Parsing never throws and never allocates after
// init; every malformed variable yields one message naming the variable and its value, and callers fail
// closed on any error (see docs/configuration.md for precedence and grammars).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/result.h"
#include "config/mps_client.h"
#include "config/priority.h"

namespace gpuslice::config {

// Size grammars differ between the systems we replace; each variable is parsed with its own.
enum class SizeDialect {
  Native,  // GPUSLICE_*: Ki/Mi/Gi/Ti(B) binary, K/M/G/T(B) decimal, case-insensitive, plain bytes
  Hcs,     // HCS_VRAM_QUOTA: same suffixes as Native, as HCS documents them
  Hami,    // CUDA_DEVICE_MEMORY_LIMIT*: single letters k/m/g/t (any case) are binary, plain bytes
  Bytes,   // VCUDA_MEMORY_LIMIT, TENSOR_FUSION_CUDA_MEM_LIMIT values: plain bytes only
};

// Parses a size; rejects negatives, fractions that are not whole bytes, overflow and junk.
// Fractions are allowed where they make whole bytes ("1.5Gi"). Zero is rejected too: a quota of
// 0 bytes would lock every allocation out, which is never what a typo'd limit meant.
Result<std::uint64_t> parse_size(std::string_view text, SizeDialect dialect = SizeDialect::Native);

// Parses a compute share in percent, an integer 1..100.
Result<unsigned> parse_percent(std::string_view text);

enum class ValueKind { Size, Percent };

// A value per device: one for all devices, plus overrides by CUDA device index or GPU UUID.
struct DeviceValues {
  std::optional<std::uint64_t> all;
  std::vector<std::pair<int, std::uint64_t>> by_index;
  std::vector<std::pair<std::string, std::uint64_t>> by_uuid;  // lower-case, as given ("gpu-…")
  // Filled only by merge_by_precedence when sources key devices differently (one by index, another
  // by UUID) so that no single table answers every device exactly; lookup() consults them. Read
  // limits through lookup(), not by walking the tables.
  std::vector<DeviceValues> fallbacks = {};  // lower-precedence sources, for devices without a value above

  bool empty() const { return !all && by_index.empty() && by_uuid.empty() && fallbacks.empty(); }
  // The value for a device, by UUID first (case-insensitive), then index, then `all`.
  std::optional<std::uint64_t> lookup(int index, std::string_view uuid) const;
};

// "8Gi" | "0=8Gi,1=4Gi" | JSON object keyed by index or UUID: {"0": "8Gi", "GPU-…": 4294967296}.
Result<DeviceValues> parse_device_values(std::string_view text, ValueKind kind, SizeDialect dialect);
// Only the JSON object form (TENSOR_FUSION_* variables).
Result<DeviceValues> parse_json_device_values(std::string_view text, ValueKind kind, SizeDialect dialect);

// Per device, the first of `higher`, `lower` that has a value for the device wins.
DeviceValues merge_by_precedence(DeviceValues higher, DeviceValues lower);

// Where a memory guarantee is above the memory limit, looking at every key either names (every
// device, an index, a UUID): "device 0", "every device", "GPU-…"; nullopt when nowhere. A device
// named by index in one and by UUID in the other cannot be matched here: the interposer checks
// each device again once it knows its index and UUID.
std::optional<std::string> guarantee_above_limit(const DeviceValues& guarantee, const DeviceValues& limit);

// Parses GPUSLICE_LOG_LEVEL / HCS_LOG_LEVEL / VCUDA_LOG_LEVEL names or 0-4 (error..trace).
Result<log::Level> parse_log_level(std::string_view text);
// LIBCUDA_LOG_LEVEL numbers as HAMi-core means them: 0 errors, 1 warnings, 2-3 info, 4 debug.
Result<log::Level> parse_libcuda_log_level(std::string_view text);

// CUDA ordinals a process can address: the interposer's device table and the per-device variables
// (CUDA_DEVICE_MEMORY_LIMIT_<i>) both stop here. The container ledger holds fewer device *records*
// (shm::layout::kMaxDevices): a process needs one only per limited device.
inline constexpr int kMaxCudaDevices = 64;

// A device ordinal named by a variable (CUDA_DEVICE_MEMORY_LIMIT_5, GPUSLICE_MEMORY_LIMIT=5=8Gi, a
// TENSOR_FUSION_* key): checked against the devices the process sees once the driver is up.
struct NamedOrdinal {
  std::string variable;
  std::string value;
  int ordinal = 0;
};

struct Settings {
  // What the process asks for (environment); `gpuslice set` changes the same value live.
  DeviceValues memory;   // bytes
  DeviceValues compute;  // percent 1..100
  // Caps from the read-only limits file. They never merge into the requests above: the limit
  // that applies is min(request, cap), computed where both are kept (shm::effective_quota).
  DeviceValues memory_cap;
  DeviceValues compute_cap;
  // Memory guarantee (GPUSLICE_MEMORY_GUARANTEE, bytes) and the limits file's cap on it: what the
  // container is promised below its limit (docs/quota.md, "Guarantees and borrowing").
  DeviceValues guarantee;
  DeviceValues guarantee_cap;
  // GPUSLICE_RECLAIM_DEADLINE: how long an allocation within its guarantee (or above a borrower's
  // priority) waits for borrowed memory to be given back before it fails with out-of-memory.
  std::uint64_t reclaim_deadline_ns = 2'000'000'000;
  log::Level log_level = log::Level::Warn;
  std::string shared_dir;   // container-wide state (GPUSLICE_SHARED_DIR, default default_shared_dir())
  std::string shared_file;  // the state file itself (<shared_dir>/state, or CUDA_DEVICE_MEMORY_SHARED_CACHE)
  std::string profile_dir;  // GPUSLICE_PROFILE_DIR or PFLOG; empty = profiling off
  std::string limits_file;  // GPUSLICE_LIMITS_FILE, default kDefaultLimitsFile; read-only caps
  bool limits_file_missing = false;  // apply_limits_file found no file at limits_file
  // GPUSLICE_LIMITS_REQUIRED=1 (set by the node daemon, which wrote the file): a missing limits file
  // is an error at start and keeps the previous caps later, instead of meaning "no cap".
  bool limits_file_required = false;
  std::string node_dir;           // GPUSLICE_NODE_DIR, default default_node_dir() (per user)
  bool node_dir_private = false;  // GPUSLICE_NODE_DIR unset: node_dir is this user's private default
  std::string node_writer;  // GPUSLICE_NODE_WRITER: our writer directory in node_dir; empty = "uid-<euid>"
  std::string visible_devices;       // CUDA_VISIBLE_DEVICES as given (NVML's view follows it)
  bool visible_devices_set = false;  // CUDA_VISIBLE_DEVICES is set (an empty value hides every GPU)
  std::optional<Priority> priority;  // GPUSLICE_PRIORITY; unset: the container takes no part in priorities
  PriorityTunables priority_tuning;  // GPUSLICE_PRIORITY_IN_FLIGHT, _RAMP, _GRACE, _FLOOR, _COST
  // GPUSLICE_COMPUTE_BUSY: the compute limit charges the time the device ran the container's
  // kernels, timed with events (true, `events`, the default), or the host's launch-to-drain
  // intervals (false, `launches`: no event in the application's streams).
  bool compute_busy_events = true;
  // MPS (config/mps_client.h): GPUSLICE_MPS; the client's own MPS variables as its environment has
  // them; the operator's active-thread percentage below `high` (limits file GPUSLICE_MPS_LOW_THREADS).
  MpsPolicy mps_policy = MpsPolicy::Wait;
  std::optional<std::string> mps_pipe_dir, mps_pinned, mps_priority, mps_threads;
  std::optional<unsigned> mps_low_threads;
  MpsYield mps_yield = MpsYield::Gate;  // limits file GPUSLICE_MPS_PRIORITY
  // Under MPS, how a compute limit holds (limits file GPUSLICE_MPS_COMPUTE; never the environment:
  // the operator's choice, not the tenant's).
  MpsComputeMode mps_compute = MpsComputeMode::Time;
  std::vector<NamedOrdinal> named_ordinals;  // every ordinal a limit variable names
  std::vector<std::string> errors;           // one line per malformed variable: "VAR='value': why"

  bool ok() const { return errors.empty(); }
  bool has_limits() const {
    return !memory.empty() || !compute.empty() || !memory_cap.empty() || !compute_cap.empty();
  }
};

using EnvLookup = std::function<const char*(const char*)>;

// Reads every variable through `getenv_fn` (tests pass a map-backed lookup). `names` lists the
// variables present where the caller can enumerate them: per-device variables whose suffix is not
// a device index (CUDA_DEVICE_MEMORY_LIMIT_00, _64) are then errors instead of being unseen.
// Neither loader reads the limits file: call apply_limits_file(s, s.limits_file) next.
Settings load_settings(const EnvLookup& getenv_fn, const std::vector<std::string>& names = {});
// The process environment; the only place the library reads it.
Settings load_settings_from_environment();

// Reads the read-only limits file (config/limits_file.h) into memory_cap / compute_cap, replacing
// what they held. A missing file is not an error (no caps, limits_file_missing set); an
// unreadable, empty or malformed one is (appended to errors, caps unchanged).
void apply_limits_file(Settings& settings, const std::string& path);

}  // namespace gpuslice::config
