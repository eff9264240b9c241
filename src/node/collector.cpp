#include "node/collector.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "common/log.h"

namespace gpuslice::node {
namespace {

std::uint64_t inode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_ino);
}

}  // namespace

Collector::Collector(HostLayout layout, GpuSource* gpus, Clock& clock, LedgerOpener opener)
    : layout_(std::move(layout)),
      gpus_(gpus),
      clock_(clock),
      opener_(std::move(opener)),
      view_(std::make_shared<NodeView>()) {
  if (!opener_) {
    opener_ = [](const std::string& path) { return shm::Ledger::open(path, shm::Ledger::Mode::Observer); };
  }
}

std::shared_ptr<const NodeView> Collector::view() const {
  std::lock_guard lock(view_mutex_);
  return view_;
}

std::vector<Collector::Source> Collector::sources() const {
  std::vector<Source> out;
  for (const std::string& id : layout_.list_containers()) {
    out.push_back({id, layout_.state_file(id), layout_.limits_file(id)});
  }
  if (kubelet_pods_dir_.empty()) return out;
  std::error_code ec;
  for (const auto& pod : std::filesystem::directory_iterator(kubelet_pods_dir_, ec)) {
    const std::string uid = pod.path().filename().string();
    std::error_code vec;
    for (const auto& vol :
         std::filesystem::directory_iterator(pod.path() / "volumes/kubernetes.io~empty-dir", vec)) {
      const std::string name = vol.path().filename().string();
      const std::string_view prefix = "gpuslice-state-";
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      std::string id = "pod-" + uid + "-" + name.substr(prefix.size());
      if (!valid_container_id(id)) continue;
      out.push_back({id, (vol.path() / kStateFileName).string(), ""});
    }
  }
  return out;
}

shm::Ledger* Collector::ledger_for(const Source& source, std::string& error) {
  const std::string& id = source.id;
  const std::string& path = source.state_file;
  std::uint64_t inode = inode_of(path);
  if (inode == 0) {
    ledgers_.erase(id);
    return nullptr;
  }
  auto it = ledgers_.find(id);
  // A new inode means the file was recreated: the old mapping shows a dead ledger.
  if (it != ledgers_.end() && it->second.inode == inode) return it->second.ledger.get();
  auto opened = opener_(path);
  if (!opened) {
    ledgers_.erase(id);
    error = opened.error();
    return nullptr;
  }
  OpenLedger& slot = ledgers_[id];
  slot.ledger = std::move(opened).value();
  slot.inode = inode;
  return slot.ledger.get();
}

ContainerView Collector::read_container(const Source& source, std::uint64_t now_ns,
                                        const std::vector<GpuInfo>& gpus) {
  const std::string& id = source.id;
  ContainerView view;
  view.id = id;
  if (!source.limits_file.empty()) {
    auto limits = read_limits_file(source.limits_file);
    if (limits) {
      view.limits = std::move(limits).value();
    } else {
      view.error = limits.error();
    }
  }

  std::string ledger_error;
  shm::Ledger* ledger = ledger_for(source, ledger_error);
  if (!ledger) {
    if (!ledger_error.empty()) view.error = ledger_error;
    return view;
  }
  view.has_state = true;
  ledger->reap_dead();
  shm::Snapshot snap = ledger->snapshot();

  for (std::size_t d = 0; d < snap.devices.size(); ++d) {
    const shm::DeviceRow& row = snap.devices[d];
    ContainerDevice dev;
    dev.uuid = row.uuid;
    dev.cuda_index = row.index;
    dev.total_bytes = row.total_bytes;
    if (row.quota != shm::kUnlimited) dev.quota_bytes = row.quota;
    dev.compute_limit = row.compute_limit;
    dev.used_bytes = row.used;
    dev.refused_allocations = row.refused_allocations;
    for (const GpuInfo& gpu : gpus) {
      if (gpu.uuid.size() == row.uuid.size() &&
          std::equal(gpu.uuid.begin(), gpu.uuid.end(), row.uuid.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
          })) {
        dev.gpu = gpu.index;
      }
    }
    for (const shm::ProcessRow& proc : snap.processes) {
      if (d < proc.busy_ns_by_device.size()) dev.busy_ns += proc.busy_ns_by_device[d];
    }
    // Utilization from the busy-time delta. A drop means a process left with its busy time, so this
    // interval has no trustworthy figure; the next one will.
    BusySample& prev = busy_[id + '\n' + row.uuid];
    if (prev.at_ns != 0 && now_ns > prev.at_ns && dev.busy_ns >= prev.busy_ns) {
      double ratio =
          static_cast<double>(dev.busy_ns - prev.busy_ns) / static_cast<double>(now_ns - prev.at_ns);
      dev.utilization_ratio = std::clamp(ratio, 0.0, 1.0);
    }
    prev.busy_ns = dev.busy_ns;
    prev.at_ns = now_ns;
    view.devices.push_back(std::move(dev));
  }
  for (const shm::ProcessRow& proc : snap.processes) {
    ContainerProcess p;
    p.pid = proc.pid;
    p.host_pid = proc.host_pid;
    p.command = proc.command;
    p.used_bytes = proc.used_by_device;
    p.used_bytes.resize(snap.devices.size());
    view.processes.push_back(std::move(p));
  }
  return view;
}

std::shared_ptr<const NodeView> Collector::refresh() {
  std::lock_guard lock(refresh_mutex_);
  auto view = std::make_shared<NodeView>();
  view->taken_at_ns = clock_.now_ns();
  if (gpus_) {
    auto probed = gpus_->probe();
    if (probed) {
      view->gpus = std::move(probed).value();
    } else {
      view->gpu_error = probed.error();
    }
  }
  std::set<std::string> seen;
  for (const Source& source : sources()) {
    seen.insert(source.id);
    view->containers.push_back(read_container(source, view->taken_at_ns, view->gpus));
  }
  // Forget containers whose directory is gone, so their mappings are released.
  for (auto it = ledgers_.begin(); it != ledgers_.end();) {
    it = seen.count(it->first) ? std::next(it) : ledgers_.erase(it);
  }
  for (auto it = busy_.begin(); it != busy_.end();) {
    it = seen.count(it->first.substr(0, it->first.find('\n'))) ? std::next(it) : busy_.erase(it);
  }
  {
    std::lock_guard view_lock(view_mutex_);
    view_ = view;
  }
  return view;
}

}  // namespace gpuslice::node
