// The node-wide view: GPUs from NVML plus every container's shared state under the host root, each
// container attributed to its pod through the kubelet's PodResources API. Refreshed periodically by
// one thread; readers (HTTP handlers) take the latest immutable view. A container that cannot be read
// is reported (state Error) and skipped, never fatal; nothing of a container is kept open between
// scans, so descriptors and mappings stay bounded; directories of allocations the kubelet no longer
// lists are removed once no process holds them (docs/metrics.md, "Garbage collection").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "node/dra/publisher_status.h"
#include "node/gpus/gpu_source.h"
#include "node/host/host_layout.h"
#include "node/host/limits_file.h"
#include "node/kubelet/plugin_registration.h"
#include "node/kubelet/podresources.h"
#include "node/mps/mps_state.h"
#include "shared_state/ledger.h"

namespace gpuslice::node {

struct ContainerDevice {
  int record = -1;  // the device record in the ledger (what `gpuslice set --device` takes)
  std::string uuid;
  std::optional<unsigned> gpu;  // host GPU index, when the UUID is one of this node's GPUs
  int cuda_index = -1;          // index inside the container
  std::uint64_t total_bytes = 0;
  std::optional<std::uint64_t> quota_bytes;            // absent = unlimited
  std::optional<std::uint64_t> requested_quota_bytes;  // environment / `gpuslice set`; absent = none
  std::optional<std::uint64_t> quota_cap_bytes;        // the read-only limits file; absent = no cap
  std::optional<std::uint64_t> guarantee_bytes;        // memory guarantee in force; absent = none
  unsigned compute_limit = 0;                          // percent, 0 = not limited
  std::uint64_t used_bytes = 0;
  // Reclaim (docs/quota.md, "Guarantees and borrowing"): of used_bytes, what is borrowed (movable);
  // borrowed memory moved to host memory; the container's reclaim episodes (ledger).
  std::uint64_t borrowed_bytes = 0;
  std::uint64_t on_host_bytes = 0;
  std::uint64_t reclaim_episodes = 0;
  std::uint64_t reclaim_ns = 0;
  std::uint64_t reclaim_bytes = 0;
  std::uint64_t refused_allocations = 0;
  std::uint64_t busy_ns = 0;                // sum over live processes
  std::optional<double> utilization_ratio;  // busy time / wall time since the previous refresh
};

struct ContainerProcess {
  std::int32_t pid = 0;
  std::int32_t host_pid = 0;
  std::string command;
  std::vector<std::uint64_t> used_bytes;  // per entry of ContainerView::devices
  std::vector<std::uint64_t> busy_ns;     // idem: device time of this process
};

enum class ContainerState {
  Ok,
  Error,     // something could not be read (see `error`); the container is skipped, the rest reported
  Released,  // the kubelet no longer lists its allocation; removed after the grace period
};
const char* container_state_name(ContainerState state);  // "ok", "error", "released"
inline constexpr ContainerState kContainerStates[] = {ContainerState::Ok, ContainerState::Error,
                                                      ContainerState::Released};

struct ContainerView {
  std::string id;
  PodContainer owner;  // empty while unknown
  ContainerState state = ContainerState::Ok;
  bool has_state = false;             // a state file exists (some process has used CUDA)
  std::string error;                  // why the state or limits could not be read, empty if fine
  Limits limits;                      // the read-only caps file
  std::optional<Priority> priority;   // priority sharing: the level asked for (ledger), unset if none
  std::uint64_t held_back_ns = 0;     // time its launches were held back by higher priorities (ledger)
  bool node_channel_refused = false;  // a process's node channel was refused (ledger)
  std::optional<Priority> assigned_priority;  // the operator's level, as its processes read it (ledger)
  bool assignment_refused = false;            // that assignment file is refused (ledger)
  std::vector<ContainerDevice> devices;
  std::vector<ContainerProcess> processes;
};

enum class AttributionState { Off, Up, Down };

struct NodeView {
  std::uint64_t taken_at_ns = 0;
  std::string node;  // Kubernetes node name
  AttributionState podresources = AttributionState::Off;
  std::string podresources_error;        // why the last List failed (Down)
  std::uint64_t containers_removed = 0;  // by garbage collection, since start
  // Why released directories are kept this scan although their grace period is over (empty: none
  // is held back): the kubelet's answer is empty or younger than the grace period.
  std::string gc_held_back;
  std::uint64_t gc_failures = 0;  // removals that failed since start (e.g. a tree too deep)
  bool device_plugin = false;     // `plugins` is meaningful
  std::vector<PluginRegistration> plugins;
  std::string extra_metrics;  // Prometheus text of a run mode's own families (the DRA publisher's)
  std::vector<GpuInfo> gpus;
  std::string gpu_error;  // NVML failure of the whole probe
  std::vector<ContainerView> containers;
  std::optional<mps::MpsReport> mps;  // the node's MPS control daemon, when this daemon manages it (--mps)
  std::optional<dra::PublisherStatus> dra;  // the ResourceSlice publisher's state (DRA mode)
};

using LedgerOpener = std::function<Result<std::unique_ptr<shm::Ledger>>(const std::string& path)>;

class Collector {
 public:
  // `gpus` may be null (no NVML); `clock` must outlive the collector.
  Collector(HostLayout layout, GpuSource* gpus, Clock& clock, LedgerOpener opener = {});

  // Also read the shared state of containers the webhook gave an emptyDir (ai.compute/vram pods):
  // <kubelet_pods_dir>/<pod uid>/volumes/kubernetes.io~empty-dir/gpuslice-state-*/shared/state, reported as
  // container "pod-<uid>-<c0|i0...>". Empty (the default) = do not look. Call before the first refresh.
  void set_kubelet_pods_dir(std::string dir) { kubelet_pods_dir_ = std::move(dir); }
  // Also read plain-host jobs' shared state: <root>/jobs/<name>/state, reported as container
  // "job-<name>" (never attributed to a pod nor removed).
  void set_host_jobs(bool on) { host_jobs_ = on; }
  // The node name every series and response carries.
  void set_node_name(std::string node) { node_ = std::move(node); }
  // Attribute containers to pods with `lister` (not owned; must outlive the collector) and remove the
  // directories of allocations it has not listed for `gc_grace_ns` (0: never remove). Nothing is
  // removed while the kubelet lists no gpuslice device at all, nor until the same kubelet has
  // answered for `gc_grace_ns` (a restarted kubelet lists no pod until the API server answers it).
  void set_attribution(AllocationLister* lister, std::uint64_t gc_grace_ns) {
    lister_ = lister;
    gc_grace_ns_ = gc_grace_ns;
  }
  // Called in each refresh with what the kubelet listed, when it answered (the node channel's
  // assignments follow the pods it names: priority_assignment.h).
  void set_listing_observer(std::function<void(const std::vector<ListedDevices>&)> observer) {
    listing_observer_ = std::move(observer);
  }
  // Where the device plugin's registration state comes from (called once per refresh).
  void set_registration_source(std::function<std::vector<PluginRegistration>()> source) {
    registration_source_ = std::move(source);
  }
  // Where the MPS control daemon's state comes from (--mps; called once per refresh).
  void set_mps_source(std::function<mps::MpsReport()> source) { mps_source_ = std::move(source); }

  // Where the DRA ResourceSlice publisher's state comes from (called once per refresh).
  void set_dra_source(std::function<dra::PublisherStatus()> source) { dra_source_ = std::move(source); }

  // Text appended to /metrics, rendered once per refresh (a run mode's own families).
  void set_extra_metrics_source(std::function<std::string()> source) {
    extra_metrics_source_ = std::move(source);
  }

  // Scans everything, reaps dead processes of every ledger, publishes and returns the new view.
  std::shared_ptr<const NodeView> refresh();
  // The latest published view (an empty one before the first refresh).
  std::shared_ptr<const NodeView> view() const;

 private:
  struct Source {
    std::string id;
    std::string state_file;
    std::string limits_file;          // empty: the container has none
    bool from_device_plugin = false;  // under <root>/containers: may carry an allocation record
  };
  std::vector<Source> sources() const;
  ContainerView read_container(const Source& source, std::uint64_t now_ns, const std::vector<GpuInfo>& gpus);
  // read_container that turns anything thrown into a container in state Error.
  ContainerView read_container_safely(const Source& source, std::uint64_t now_ns,
                                      const std::vector<GpuInfo>& gpus);
  // Pod attribution and garbage collection of one refresh; drops removed containers from `view`.
  void attribute_and_collect(NodeView& view, const std::vector<Source>& sources);

  struct BusySample {
    std::uint64_t busy_ns = 0;
    std::uint64_t at_ns = 0;
  };

  HostLayout layout_;
  GpuSource* gpus_;
  Clock& clock_;
  LedgerOpener opener_;
  std::string kubelet_pods_dir_;
  bool host_jobs_ = false;
  std::string node_;
  AllocationLister* lister_ = nullptr;
  std::uint64_t gc_grace_ns_ = 0;
  std::function<std::vector<PluginRegistration>()> registration_source_;
  std::function<mps::MpsReport()> mps_source_;
  std::function<std::string()> extra_metrics_source_;
  std::function<dra::PublisherStatus()> dra_source_;
  std::function<void(const std::vector<ListedDevices>&)> listing_observer_;
  std::mutex refresh_mutex_;                          // one refresh at a time; guards the members below
  std::map<std::string, BusySample> busy_;            // key: container id + '\n' + device uuid
  std::map<std::string, PodContainer> last_owner_;    // kept while the kubelet cannot be asked
  std::map<std::string, std::uint64_t> released_at_;  // when the kubelet was first seen not listing it
  std::uint64_t containers_removed_ = 0;
  std::uint64_t gc_failures_ = 0;
  std::uint64_t answers_since_ns_ = 0;  // start of the current run of answers from one kubelet; 0 none
  std::uint64_t kubelet_instance_ = 0;
  std::set<std::string> gc_failed_;  // containers whose removal failed (reported once each)
  mutable std::mutex view_mutex_;
  std::shared_ptr<const NodeView> view_;
};

}  // namespace gpuslice::node
