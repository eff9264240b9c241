// What `gpuslice status`, `gpuslice top` and the daemon's /api/v1 report about one container: its
// devices (quota, use, compute limit, refusals) and processes, plus the rates between two looks.
// Plain data, filled from a ledger snapshot here or from the daemon's collector; status_json.h
// turns it into the one documented JSON shape (docs/api.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shared_state/ledger.h"

namespace gpuslice::status {

struct DeviceStatus {
  int record = -1;      // device record in the ledger (what `gpuslice set --device` takes)
  int cuda_index = -1;  // CUDA index in the process that created the record
  std::string uuid;
  std::optional<unsigned> gpu;  // host GPU index, when known (the daemon's NVML view)
  std::uint64_t total_bytes = 0;
  std::optional<std::uint64_t> quota_bytes;            // in force: min(requested, cap); absent = unlimited
  std::optional<std::uint64_t> requested_quota_bytes;  // environment / `gpuslice set`; absent = none
  std::optional<std::uint64_t> quota_cap_bytes;        // the read-only limits file; absent = no cap
  std::optional<std::uint64_t> guarantee_bytes;        // memory guarantee in force; absent = none
  // Reclaim (docs/quota.md, "Guarantees and borrowing"): borrowed memory on the device and moved to
  // host memory, what cannot move (used - borrowed on the device), and the reclaim episodes.
  std::uint64_t borrowed_bytes = 0;
  std::uint64_t on_host_bytes = 0;
  std::uint64_t reclaim_episodes = 0;
  std::uint64_t reclaim_ns = 0;
  std::uint64_t reclaim_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::optional<unsigned> compute_limit_percent;  // absent = no limit
  std::uint64_t refused_allocations = 0;          // since the ledger was created
  std::optional<std::uint64_t> busy_ns;           // device time of the live processes
  // Rates over the interval since the previous look (absent on the first look):
  std::optional<double> compute_utilization_ratio;  // busy time / wall time, 0-1
  std::optional<std::uint64_t> refused_in_interval;
};

struct ProcessDeviceStatus {
  int record = -1;
  std::uint64_t used_bytes = 0;
  std::optional<std::uint64_t> busy_ns;
  std::optional<double> compute_share;              // of the container's busy time on the device
  std::optional<double> compute_utilization_ratio;  // this process's busy time / wall time
};

struct ProcessStatus {
  std::int32_t pid = 0;
  std::optional<std::int32_t> host_pid;
  std::string command;
  std::vector<ProcessDeviceStatus> devices;  // one per ContainerStatus::devices entry, same order
};

struct ContainerStatus {
  std::optional<std::string> id;    // the node's container id (node views only)
  std::optional<std::string> path;  // the state file (the CLI's single-container view)
  std::optional<std::string> pod_namespace, pod_name, container_name;  // when known
  bool has_state = true;                                   // a state file exists (some process has used CUDA)
  std::optional<std::string> error;                        // why the state or limits could not be read
  std::optional<std::string> memory_limit, compute_limit;  // the read-only caps file, as written
  std::optional<std::string> priority;  // priority sharing: "high", "normal", "low"; absent = not set
  std::uint64_t held_back_ns = 0;       // time its launches were held back by higher priorities
  bool node_channel_refused = false;    // a process's node channel was refused: no turns, no priorities
  std::optional<std::string> assigned_priority;  // the operator's level (ceiling and default), when known
  bool assignment_refused = false;  // its assignment file is malformed or unreadable: runs at low
  std::vector<DeviceStatus> devices;
  std::vector<ProcessStatus> processes;
};

// Everything a ledger snapshot says (rates left empty); a GPU UUID that is not one
// (reject_bad_uuids) makes it an error.
ContainerStatus from_snapshot(const shm::Snapshot& snap);

// The state file is the tenant's to write: a device UUID that is not a GPU or MIG UUID
// (text::is_gpu_uuid) makes the container an error, its devices and processes dropped, so nothing
// of that file is shown or matched. Returns false when it did.
bool reject_bad_uuids(ContainerStatus& status);

// The figures of a ledger device row that DeviceStatus and the daemon's ContainerDevice name alike,
// read one way for both; a quota of shm::kUnlimited stays absent.
template <class Device>
void copy_row_figures(const shm::DeviceRow& row, Device& d) {
  d.uuid = row.uuid;
  d.cuda_index = row.index;
  d.total_bytes = row.total_bytes;
  if (row.quota != shm::kUnlimited) d.quota_bytes = row.quota;
  if (row.requested.quota != shm::kUnlimited) d.requested_quota_bytes = row.requested.quota;
  if (row.cap.quota != shm::kUnlimited) d.quota_cap_bytes = row.cap.quota;
  if (row.guarantee != 0) d.guarantee_bytes = row.guarantee;
  d.borrowed_bytes = row.borrowed_bytes;
  d.on_host_bytes = row.on_host_bytes;
  d.reclaim_episodes = row.reclaim_episodes;
  d.reclaim_ns = row.reclaim_ns;
  d.reclaim_bytes = row.reclaim_bytes;
  d.used_bytes = row.used;
  d.refused_allocations = row.refused_allocations;
}

// What no reclaim moves: the device's use less its borrowed memory (DeviceStatus and the daemon's
// ContainerDevice alike).
template <class Device>
std::uint64_t unmovable_bytes(const Device& d) {
  return d.used_bytes > d.borrowed_bytes ? d.used_bytes - d.borrowed_bytes : 0;
}

// Whether a device has reclaim figures to show: it has a guarantee (so it may borrow), or it
// borrowed, has memory in host memory or gave some back.
template <class Device>
bool reclaim_applies(const Device& d) {
  return d.guarantee_bytes || d.borrowed_bytes != 0 || d.on_host_bytes != 0 || d.reclaim_episodes != 0;
}

// Remembers the previous look at each container and fills in the rates of the next one. A busy
// time or refusal count that went down (a process left, a ledger was recreated) gives no rate for
// that interval.
class RateTracker {
 public:
  void update(ContainerStatus& status, std::uint64_t now_ns);

 private:
  struct Sample {
    std::uint64_t at_ns = 0;
    std::uint64_t busy_ns = 0;
    std::uint64_t refused = 0;
    std::map<std::int32_t, std::uint64_t> process_busy_ns;  // by pid
  };
  std::map<std::string, Sample> previous_;  // key: container key + '\n' + device uuid
};

}  // namespace gpuslice::status
