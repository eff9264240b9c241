// The node-wide view: GPUs from NVML plus every container's shared state under the host root.
// Refreshed periodically by one thread; readers (HTTP handlers) take the latest immutable view.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "node/gpu_source.h"
#include "node/host_layout.h"
#include "node/limits_file.h"
#include "shared_state/ledger.h"

namespace gpuslice::node {

struct ContainerDevice {
  std::string uuid;
  std::optional<unsigned> gpu;  // host GPU index, when the UUID is one of this node's GPUs
  int cuda_index = -1;          // index inside the container
  std::uint64_t total_bytes = 0;
  std::optional<std::uint64_t> quota_bytes;  // absent = unlimited
  unsigned compute_limit = 0;                // percent, 0 = not limited
  std::uint64_t used_bytes = 0;
  std::uint64_t refused_allocations = 0;
  std::uint64_t busy_ns = 0;                // sum over live processes
  std::optional<double> utilization_ratio;  // busy time / wall time since the previous refresh
};

struct ContainerProcess {
  std::int32_t pid = 0;
  std::int32_t host_pid = 0;
  std::string command;
  std::vector<std::uint64_t> used_bytes;  // per entry of ContainerView::devices
};

struct ContainerView {
  std::string id;
  bool has_state = false;  // a state file exists (some process has used CUDA)
  std::string error;       // why the state or limits could not be read, empty if fine
  Limits limits;           // the read-only caps file
  std::vector<ContainerDevice> devices;
  std::vector<ContainerProcess> processes;
};

struct NodeView {
  std::uint64_t taken_at_ns = 0;
  std::vector<GpuInfo> gpus;
  std::string gpu_error;  // NVML failure of the whole probe
  std::vector<ContainerView> containers;
};

using LedgerOpener = std::function<Result<std::unique_ptr<shm::Ledger>>(const std::string& path)>;

class Collector {
 public:
  // `gpus` may be null (no NVML); `clock` must outlive the collector.
  Collector(HostLayout layout, GpuSource* gpus, Clock& clock, LedgerOpener opener = {});

  // Also read the shared state of containers the webhook gave an emptyDir (ai.compute/vram pods):
  // <kubelet_pods_dir>/<pod uid>/volumes/kubernetes.io~empty-dir/gpuslice-state-*/state, reported as
  // container "pod-<uid>-<c0|i0...>". Empty (the default) = do not look. Call before the first refresh.
  void set_kubelet_pods_dir(std::string dir) { kubelet_pods_dir_ = std::move(dir); }

  // Scans everything, reaps dead processes of every ledger, publishes and returns the new view.
  std::shared_ptr<const NodeView> refresh();
  // The latest published view (an empty one before the first refresh).
  std::shared_ptr<const NodeView> view() const;

 private:
  struct Source {
    std::string id;
    std::string state_file;
    std::string limits_file;  // empty: the container has none
  };
  std::vector<Source> sources() const;
  ContainerView read_container(const Source& source, std::uint64_t now_ns, const std::vector<GpuInfo>& gpus);
  shm::Ledger* ledger_for(const Source& source, std::string& error);

  struct OpenLedger {
    std::unique_ptr<shm::Ledger> ledger;
    std::uint64_t inode = 0;
  };
  struct BusySample {
    std::uint64_t busy_ns = 0;
    std::uint64_t at_ns = 0;
  };

  HostLayout layout_;
  GpuSource* gpus_;
  Clock& clock_;
  LedgerOpener opener_;
  std::string kubelet_pods_dir_;
  std::mutex refresh_mutex_;  // one refresh at a time; guards the maps below
  std::map<std::string, OpenLedger> ledgers_;
  std::map<std::string, BusySample> busy_;  // key: container id + '\n' + device uuid
  mutable std::mutex view_mutex_;
  std::shared_ptr<const NodeView> view_;
};

}  // namespace gpuslice::node
