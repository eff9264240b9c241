#include "node/channel/priority_assignment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <set>
#include <tuple>

#include "common/log.h"
#include "common/safe_file.h"
#include "node/host/allocation_record.h"
#include "shared_state/node_channel.h"

namespace gpuslice::node {
namespace {

constexpr std::string_view kSuffix = kAssignmentSuffix;
// A channel directory holds one writer per live vram/cores allocation; this bounds one pass.
constexpr std::size_t kMaxWriters = 8192;

bool valid_writer(std::string_view name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

using OwnerKey = std::tuple<std::string, std::string, std::string>;  // namespace, pod, container

// The channel's garbage collection (channel_gc.h) removes a writer directory nothing changed for its
// grace period. A vram container without a priority or a compute limit never writes a record, yet
// it may set a priority later: while the kubelet lists its allocation, its directory is kept by
// moving the directory's mtime forward (at most once a minute).
void keep_from_gc(int dirfd, const std::string& writer) {
  constexpr std::int64_t kEveryNs = 60'000'000'000LL;
  struct stat st {};
  if (::fstatat(dirfd, writer.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != 0)
    return;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const std::int64_t age = (static_cast<std::int64_t>(now.tv_sec) - st.st_mtim.tv_sec) * 1'000'000'000LL +
                           (now.tv_nsec - st.st_mtim.tv_nsec);
  if (age >= kEveryNs) ::utimensat(dirfd, writer.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
}

}  // namespace

Priority allowed_priority(const PodContainer& owner, const std::optional<std::string>& priority_class,
                          const PriorityPolicy& policy) {
  const auto& namespaces = policy.high_namespaces;
  if (std::find(namespaces.begin(), namespaces.end(), owner.namespace_name) != namespaces.end())
    return Priority::High;
  if (priority_class) {
    const auto mapped = policy.priority_classes.find(*priority_class);
    if (mapped != policy.priority_classes.end() && mapped->second == Priority::High) return Priority::High;
  }
  return Priority::Normal;
}

ReconcileOutcome reconcile_assignments(const std::string& channel_dir,
                                       const std::vector<ListedDevices>& listed, const PriorityPolicy& policy,
                                       const PriorityClassLookup& classes) {
  ReconcileOutcome outcome;
  std::map<std::string, const PodContainer*> owner_by_key;  // resource '\n' digest
  for (const ListedDevices& devices : listed)
    owner_by_key[devices.resource + '\n' + devices_digest(devices.device_ids)] = &devices.owner;
  if (owner_by_key.empty()) return outcome;

  // The channel directory is the daemon's (root-owned, read-only in every container).
  auto dirfd = fs::open_dir(channel_dir, fs::DirTrust::OwnerOnly);
  if (!dirfd) return outcome;  // no allocation made one yet
  fs::UniqueFd dir_guard(*dirfd);
  std::vector<std::string> writers;
  {
    const int listing_fd = ::dup(*dirfd);
    DIR* listing = listing_fd >= 0 ? ::fdopendir(listing_fd) : nullptr;
    if (listing == nullptr) {
      if (listing_fd >= 0) ::close(listing_fd);
      return outcome;
    }
    while (dirent* entry = ::readdir(listing)) {
      const std::string_view name = entry->d_name;
      if (name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix) continue;
      const std::string_view writer = name.substr(0, name.size() - kSuffix.size());
      if (valid_writer(writer)) writers.emplace_back(writer);
      if (writers.size() >= kMaxWriters) break;
    }
    ::closedir(listing);
  }

  struct Found {
    std::string writer;
    ChannelAssignment assignment;
  };
  std::map<OwnerKey, std::vector<Found>> by_owner;
  std::map<OwnerKey, const PodContainer*> owners;
  for (const std::string& writer : writers) {
    const std::string name = writer + std::string(kSuffix);
    auto fd = fs::open_in_dir(*dirfd, name.c_str(), O_RDONLY);
    if (!fd) {
      ++outcome.errors;
      continue;
    }
    fs::UniqueFd file_guard(*fd);
    // One byte more than the library reads: a longer file is parsed into its error, not cut short.
    auto text = fs::read_fd_bounded(*fd, shm::kMaxAssignmentBytes + 1);
    if (!text) {
      ++outcome.errors;
      continue;
    }
    auto parsed = parse_assignment(*text);
    if (!parsed) {
      GS_LOG(Warn, "%s/%s: %s (left as it is)", channel_dir.c_str(), name.c_str(), parsed.error().c_str());
      ++outcome.errors;
      continue;
    }
    if (parsed->resource.empty()) continue;  // written before allocations were named: left alone
    const auto owner = owner_by_key.find(parsed->resource + '\n' + parsed->devices_sha256);
    if (owner == owner_by_key.end()) continue;
    ++outcome.attributed;
    keep_from_gc(*dirfd, writer);
    const OwnerKey key{owner->second->namespace_name, owner->second->pod, owner->second->container};
    owners[key] = owner->second;
    by_owner[key].push_back({writer, std::move(parsed).value()});
  }

  std::map<std::pair<std::string, std::string>, std::optional<std::string>> class_of;  // one ask per pod
  for (auto& [key, found] : by_owner) {
    const PodContainer& owner = *owners[key];
    const bool by_namespace = std::find(policy.high_namespaces.begin(), policy.high_namespaces.end(),
                                        owner.namespace_name) != policy.high_namespaces.end();
    std::optional<std::string> klass;
    bool class_known = true;
    if (!by_namespace && !policy.priority_classes.empty()) {
      const auto pod = std::make_pair(owner.namespace_name, owner.pod);
      auto cached = class_of.find(pod);
      if (cached == class_of.end()) {
        std::optional<std::string> learnt;
        if (classes) {
          auto asked = classes(owner.namespace_name, owner.pod);
          if (asked) {
            learnt = *asked;
          } else {
            GS_LOG(Debug,
                   "priority of %s/%s: its PriorityClass cannot be learnt (%s); its level stays as it is",
                   owner.namespace_name.c_str(), owner.pod.c_str(), asked.error().c_str());
          }
        }
        cached = class_of.emplace(pod, learnt).first;
      }
      klass = cached->second;
      class_known = klass.has_value();
    }
    std::map<std::string, unsigned> compute;
    for (const Found& f : found) compute.insert(f.assignment.compute.begin(), f.assignment.compute.end());
    for (Found& f : found) {
      ChannelAssignment wanted = f.assignment;
      if (class_known) wanted.priority = allowed_priority(owner, klass, policy);
      wanted.compute = compute;
      if (wanted.priority == f.assignment.priority && wanted.compute == f.assignment.compute) continue;
      if (auto written = write_assignment(channel_dir, f.writer, wanted); !written) {
        GS_LOG(Error, "%s", written.error().c_str());
        ++outcome.errors;
        continue;
      }
      GS_LOG(Info, "node channel: %s/%s container %s is assigned priority %s (writer %s)",
             owner.namespace_name.c_str(), owner.pod.c_str(), owner.container.c_str(),
             priority_name(wanted.priority), f.writer.c_str());
      ++outcome.rewritten;
    }
  }
  return outcome;
}

}  // namespace gpuslice::node
