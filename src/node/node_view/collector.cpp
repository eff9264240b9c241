#include "node/node_view/collector.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "common/enum_names.h"
#include "common/errno_text.h"
#include "common/log.h"
#include "common/safe_file.h"
#include "common/text.h"
#include "node/host/allocation_record.h"
#include "status/container_status.h"

namespace gpuslice::node {
namespace {

// Depth of a container directory tree garbage collection descends (the state directory is the
// container's to fill; a deeper tree is left for the operator and reported).
constexpr int kMaxRemoveDepth = 32;

// Reads <dir>/<name> up to `max_bytes` through the safe-open helpers: the container directory is
// the tenant's to fill, so a symlink is never followed and a FIFO or device node is never opened.
Result<std::string> read_small_regular_file(const std::string& dir, const char* name, std::size_t max_bytes) {
  auto dirfd = fs::open_dir(dir, fs::DirTrust::Any);
  if (!dirfd) return make_error(dirfd.error());
  fs::UniqueFd dir_guard(*dirfd);
  auto fd = fs::open_in_dir(*dirfd, name, O_RDONLY);
  if (!fd) return make_error(dir + "/" + fd.error());
  fs::UniqueFd file_guard(*fd);
  auto text = fs::read_fd_bounded(*fd, max_bytes);
  if (!text) return make_error(dir + "/" + name + ": " + text.error());
  return text;
}

// True while some process holds a lock on the ledger `path` (every live process of the container
// holds one on its slot). Unknown counts as held: a directory is never removed on a guess.
bool ledger_held(const std::string& path) {
  std::string dir, name;
  if (!fs::split_path(path, &dir, &name)) return true;
  fs::UniqueFd dirfd(fs::open_dir_raw(dir.c_str(), fs::DirTrust::Any));
  if (!dirfd.valid()) return errno != ENOENT && errno != ELOOP && errno != ENOTDIR;
  fs::UniqueFd fd(fs::open_in_dir_raw(dirfd.get(), name.c_str(), O_RDONLY));
  if (!fd.valid()) {
    // A link, FIFO, device node or directory is not a ledger: no library process uses it.
    return errno != ENOENT && errno != ELOOP && errno != EINVAL && errno != EISDIR;
  }
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;  // the whole file
  if (::fcntl(fd.get(), F_OFD_GETLK, &fl) != 0) return true;
  return fl.l_type != F_UNLCK;
}

// Removes `name` in `dirfd` with everything below it, never following a symlink: entries are reached
// through directory descriptors opened with O_NOFOLLOW, so a link planted in the tree is removed, not
// followed.
bool remove_tree_at(int dirfd, const std::string& name, int depth, std::string& error) {
  if (::unlinkat(dirfd, name.c_str(), 0) == 0 || errno == ENOENT) return true;
  if (errno != EISDIR && errno != EPERM) {
    error = name + ": " + fs::errno_text(errno);
    return false;
  }
  if (depth <= 0) {
    error = name + ": directory tree too deep";
    return false;
  }
  int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    error = name + ": " + fs::errno_text(errno);
    return false;
  }
  DIR* dir = ::fdopendir(fd);
  if (!dir) {
    ::close(fd);
    error = name + ": " + fs::errno_text(errno);
    return false;
  }
  std::vector<std::string> children;
  while (dirent* entry = ::readdir(dir)) {
    if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0)
      children.emplace_back(entry->d_name);
  }
  bool ok = true;
  for (const auto& child : children) ok = remove_tree_at(::dirfd(dir), child, depth - 1, error) && ok;
  ::closedir(dir);
  if (!ok) return false;
  if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    error = name + ": " + fs::errno_text(errno);
    return false;
  }
  return true;
}

bool same_uuid(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string describe(const PodContainer& owner) {
  return owner.namespace_name + "/" + owner.pod + " container " + owner.container;
}

}  // namespace

const char* container_state_name(ContainerState state) {
  static constexpr const char* kNames[] = {"ok", "error", "released"};
  return enum_name<ContainerState::Released>(state, kNames, "unknown");
}

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
    out.push_back({id, layout_.state_file(id), layout_.limits_file(id), true});
  }
  if (host_jobs_) {
    std::error_code jec;
    for (const auto& job : std::filesystem::directory_iterator(layout_.jobs_dir(), jec)) {
      std::error_code sec;
      if (!job.is_directory(sec) || job.is_symlink(sec)) continue;  // a link may point anywhere
      std::string id = "job-" + job.path().filename().string();
      if (!valid_container_id(id)) continue;
      out.push_back({id, (job.path() / kStateFileName).string(), "", false});
    }
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
      out.push_back({id, (vol.path() / kEmptyDirSharedSubdir / kStateFileName).string(), "", false});
    }
  }
  return out;
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

  // Opened for this scan only: nothing of a container stays open between scans.
  struct stat st {};
  if (::lstat(source.state_file.c_str(), &st) != 0) return view;  // no process has used CUDA yet
  auto opened = opener_(source.state_file);
  if (!opened) {
    view.error = opened.error();
    return view;
  }
  std::unique_ptr<shm::Ledger> ledger = std::move(opened).value();
  view.has_state = true;
  ledger->reap_dead();
  shm::Snapshot snap = ledger->snapshot();
  // Truncated or replaced since it was opened: this container's error, never the daemon's crash.
  if (!snap.error.empty()) view.error = snap.error;
  ledger.reset();
  view.priority = snap.priority;
  view.held_back_ns = snap.held_back_ns;
  view.node_channel_refused = snap.node_channel_refused;
  view.assigned_priority = snap.assigned_priority;
  view.assignment_refused = snap.assignment_refused;

  for (std::size_t d = 0; d < snap.devices.size(); ++d) {
    const shm::DeviceRow& row = snap.devices[d];
    // The state file is the tenant's: a UUID that is not one is this container's error.
    if (!text::is_gpu_uuid(row.uuid)) {
      view.error = "device record " + std::to_string(row.record) + " of the state file has no valid GPU UUID";
      view.devices.clear();
      return view;
    }
    ContainerDevice dev;
    dev.record = row.record;
    status::copy_row_figures(row, dev);
    dev.compute_limit = row.compute_limit;
    for (const GpuInfo& gpu : gpus) {
      if (same_uuid(gpu.uuid, row.uuid)) dev.gpu = gpu.index;
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
    p.busy_ns = proc.busy_ns_by_device;
    p.busy_ns.resize(snap.devices.size());
    view.processes.push_back(std::move(p));
  }
  return view;
}

ContainerView Collector::read_container_safely(const Source& source, std::uint64_t now_ns,
                                               const std::vector<GpuInfo>& gpus) {
  std::string failure;
  try {
    ContainerView view = read_container(source, now_ns, gpus);
    if (!view.error.empty()) view.state = ContainerState::Error;
    return view;
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown failure";
  }
  ContainerView view;
  view.id = source.id;
  view.state = ContainerState::Error;
  view.error = "cannot read container: " + failure;
  return view;
}

void Collector::attribute_and_collect(NodeView& view, const std::vector<Source>& sources) {
  if (!lister_) return;
  auto listed = lister_->list();
  view.podresources = listed ? AttributionState::Up : AttributionState::Down;
  // How long the same kubelet has answered: a kubelet that restarted (new socket) or could not be
  // asked starts the clock again.
  if (!listed) {
    answers_since_ns_ = 0;
  } else if (answers_since_ns_ == 0 || lister_->kubelet_instance() != kubelet_instance_) {
    answers_since_ns_ = view.taken_at_ns;
    kubelet_instance_ = lister_->kubelet_instance();
  }
  if (!listed) {
    view.podresources_error = listed.error();
    if (view_->podresources != AttributionState::Down)
      GS_LOG(Warn, "pod attribution: %s (keeping the last known pods; removing nothing)",
             listed.error().c_str());
  } else if (view_->podresources == AttributionState::Down) {
    GS_LOG(Info, "pod attribution: the kubelet's PodResources API answers again");
  }
  if (listed && listing_observer_) listing_observer_(*listed);

  // What each directory's allocation record says, and which directory is the newest for each set of
  // devices: device ids are handed out again once a pod is gone, so an old directory can record the
  // same ids as a live one.
  struct Recorded {
    std::string key;  // resource '\n' digest
    std::uint64_t at_ns = 0;
  };
  std::map<std::string, Recorded> recorded;   // by container id
  std::map<std::string, std::string> newest;  // key -> container id
  for (const Source& source : sources) {
    if (!source.from_device_plugin) continue;
    auto text = read_small_regular_file(layout_.container_dir(source.id), kAllocationFileName,
                                        kMaxAllocationFileBytes);
    if (!text) continue;  // made before allocation records existed, or by hand: never attributed
    auto record = parse_allocation_record(*text);
    if (!record) continue;
    Recorded r{record->resource + '\n' + record->devices_sha256, record->allocated_at_ns};
    auto it = newest.find(r.key);
    if (it == newest.end() || recorded[it->second].at_ns < r.at_ns ||
        (recorded[it->second].at_ns == r.at_ns && it->second < source.id)) {
      newest[r.key] = source.id;
    }
    recorded[source.id] = std::move(r);
  }

  std::map<std::string, PodContainer> owner_by_key;
  if (listed) {
    for (const ListedDevices& devices : *listed) {
      owner_by_key[devices.resource + '\n' + devices_digest(devices.device_ids)] = devices.owner;
    }
  }

  const std::uint64_t now = view.taken_at_ns;
  // An empty or young answer may come from a kubelet that does not know its pods yet (restarted while
  // the API server is away): removing on it would take a live pod's directory.
  if (listed && listed->empty()) {
    view.gc_held_back = "the kubelet lists no device of gpuslice's resources";
  } else if (listed && now - answers_since_ns_ < gc_grace_ns_) {
    view.gc_held_back = "the kubelet's answers are younger than the grace period";
  }
  std::set<std::string> removed;
  for (ContainerView& c : view.containers) {
    auto rec = recorded.find(c.id);
    if (rec == recorded.end()) continue;
    if (!listed) {
      if (auto last = last_owner_.find(c.id); last != last_owner_.end()) c.owner = last->second;
      continue;
    }
    auto owner = owner_by_key.find(rec->second.key);
    if (owner != owner_by_key.end() && newest[rec->second.key] == c.id) {
      c.owner = owner->second;
      last_owner_[c.id] = owner->second;
      released_at_.erase(c.id);
      continue;
    }
    // The kubelet does not list it (any more).
    auto [since, first] = released_at_.emplace(c.id, now);
    if (first) {
      auto last = last_owner_.find(c.id);
      GS_LOG(Info, "container %s: its allocation%s is no longer listed by the kubelet", c.id.c_str(),
             last == last_owner_.end() ? "" : (" (" + describe(last->second) + ")").c_str());
    }
    c.state = ContainerState::Released;
    if (gc_grace_ns_ == 0 || now - since->second < gc_grace_ns_) continue;
    if (!view.gc_held_back.empty()) continue;
    if (ledger_held(layout_.state_file(c.id))) continue;
    fs::UniqueFd root(
        ::open(layout_.containers_dir().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    std::string error;
    if (root.get() >= 0 && remove_tree_at(root.get(), c.id, kMaxRemoveDepth, error)) {
      GS_LOG(Info, "removed container directory %s: not listed by the kubelet and unused", c.id.c_str());
      ++containers_removed_;
      removed.insert(c.id);
    } else {
      c.error = "cannot remove released container directory: " +
                (root.get() < 0 ? layout_.containers_dir() + ": " + fs::errno_text(errno) : error);
      c.state = ContainerState::Error;
      // Counted and logged once per directory: the metric's alert tells the operator to look.
      if (gc_failed_.insert(c.id).second) {
        ++gc_failures_;
        GS_LOG(Error, "container %s: %s", c.id.c_str(), c.error.c_str());
      }
    }
  }
  if (removed.empty()) return;
  view.containers.erase(std::remove_if(view.containers.begin(), view.containers.end(),
                                       [&](const ContainerView& c) { return removed.count(c.id) > 0; }),
                        view.containers.end());
}

std::shared_ptr<const NodeView> Collector::refresh() {
  std::lock_guard lock(refresh_mutex_);
  auto view = std::make_shared<NodeView>();
  view->taken_at_ns = clock_.now_ns();
  view->node = node_;
  if (gpus_) {
    auto probed = gpus_->probe();
    if (probed) {
      view->gpus = std::move(probed).value();
    } else {
      view->gpu_error = probed.error();
    }
  }
  const std::vector<Source> all = sources();
  for (const Source& source : all) {
    ContainerView c = read_container_safely(source, view->taken_at_ns, view->gpus);
    if (c.state == ContainerState::Error && !c.error.empty()) {
      GS_LOG(Debug, "container %s skipped: %s", c.id.c_str(), c.error.c_str());
    }
    view->containers.push_back(std::move(c));
  }
  attribute_and_collect(*view, all);
  view->containers_removed = containers_removed_;
  view->gc_failures = gc_failures_;
  if (registration_source_) {
    view->device_plugin = true;
    view->plugins = registration_source_();
  }
  if (mps_source_) view->mps = mps_source_();
  if (extra_metrics_source_) view->extra_metrics = extra_metrics_source_();
  if (dra_source_) view->dra = dra_source_();

  // Forget what belonged to containers that are gone.
  std::set<std::string> seen;
  for (const auto& c : view->containers) seen.insert(c.id);
  for (auto it = busy_.begin(); it != busy_.end();) {
    it = seen.count(it->first.substr(0, it->first.find('\n'))) ? std::next(it) : busy_.erase(it);
  }
  for (auto it = last_owner_.begin(); it != last_owner_.end();) {
    it = seen.count(it->first) ? std::next(it) : last_owner_.erase(it);
  }
  for (auto it = released_at_.begin(); it != released_at_.end();) {
    it = seen.count(it->first) ? std::next(it) : released_at_.erase(it);
  }
  for (auto it = gc_failed_.begin(); it != gc_failed_.end();) {
    it = seen.count(*it) ? std::next(it) : gc_failed_.erase(it);
  }
  {
    std::lock_guard view_lock(view_mutex_);
    view_ = view;
  }
  return view;
}

}  // namespace gpuslice::node
