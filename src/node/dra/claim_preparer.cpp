#include "node/dra/claim_preparer.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "common/errno_text.h"
#include "common/log.h"
#include "config/limits_file.h"
#include "config/text_util.h"
#include "node/dra/cdi_spec.h"
#include "node/dra/resource_slice.h"
#include "node/host/allocation_record.h"
#include "node/host/assignment_file.h"
#include "node/host/limits_file.h"
#include "node/http/untrusted_json.h"

namespace gpuslice::node::dra {
namespace {

using nlohmann::json;

constexpr const char* kIdPrefix = "dra-";

Result<bool> remove_tree(const std::string& path) {
  if (path.empty()) return true;
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // does not follow symlinks inside
  if (ec) return make_error("cannot remove " + path + ": " + ec.message());
  return true;
}

// One GPU: a plain value; several: a JSON object keyed by GPU UUID (indices inside the container
// depend on the order the runtime exposes the GPUs in).
template <class Value>
std::string per_gpu(const std::vector<std::pair<std::string, Value>>& values) {
  if (values.size() == 1) return std::to_string(values.front().second);
  json obj = json::object();
  for (const auto& [uuid, v] : values) obj[uuid] = v;
  return obj.dump();
}

}  // namespace

bool valid_claim_uid(const std::string& uid) {
  if (uid.empty() || uid.size() > 64) return false;
  for (char c : uid) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return false;
  }
  return true;
}

ClaimPreparer::ClaimPreparer(PreparerOptions options, ClaimSource& source)
    : options_(std::move(options)),
      source_(source),
      layout_(options_.root),
      store_(layout_.root() + "/dra", options_.max_checkpoint_bytes) {}

std::string ClaimPreparer::checkpoint_path() const { return store_.base_path(); }

std::uint64_t ClaimPreparer::checkpoint_bytes_written() const {
  std::lock_guard lock(mutex_);
  return store_.bytes_written();
}

// Every path of a claim follows from its uid; the checkpoint only says which claims exist.
CheckpointEntry ClaimPreparer::entry_paths(const std::string& uid) const {
  CheckpointEntry e;
  e.container_id = kIdPrefix + uid;
  e.cdi_file = options_.cdi_dir + "/" + cdi_spec_file_name(uid);
  return e;
}

std::optional<Result<std::vector<PreparedDevice>>> ClaimPreparer::prepared_before(const ClaimRef& ref) const {
  auto it = store_.state().claims.find(ref.uid);
  if (it == store_.state().claims.end() || it->second.state != CheckpointEntry::State::Prepared)
    return std::nullopt;
  if (it->second.ns != ref.ns || it->second.name != ref.name)
    return Result<std::vector<PreparedDevice>>(make_error("claim uid " + ref.uid + " is prepared for claim " +
                                                          it->second.ns + "/" + it->second.name + ", not " +
                                                          ref.ns + "/" + ref.name));
  return Result<std::vector<PreparedDevice>>(it->second.devices);  // the kubelet retries, or restarted
}

std::string ClaimPreparer::entry_mismatch(const std::string& uid, const CheckpointEntry& entry) const {
  if (!valid_claim_uid(uid)) return "its uid is not a Kubernetes uid";
  const CheckpointEntry want = entry_paths(uid);
  if (entry.container_id != want.container_id) return "its container directory is not the claim's";
  if (entry.cdi_file != want.cdi_file) return "its CDI spec is not the claim's";
  if (!entry.channel_writer.empty() && entry.channel_writer != want.container_id)
    return "its channel writer is not the claim's";
  if (!valid_object_name(entry.ns) || !valid_object_name(entry.name))
    return "its namespace or name is not an object name";
  if (!entry.pod.empty() && !valid_object_name(entry.pod)) return "its pod is not an object name";
  return "";
}

void ClaimPreparer::step(const char* name) const {
  if (options_.after_step) options_.after_step(name);
}

Result<bool> ClaimPreparer::remove_files(const std::string& uid, const CheckpointEntry& entry) {
  // The spec first: from then on no new container can be given the claim.
  if (!entry.cdi_file.empty() && ::unlink(entry.cdi_file.c_str()) != 0 && errno != ENOENT)
    return make_error("cannot remove " + entry.cdi_file + ": " + fs::errno_text(errno));
  if (!entry.channel_writer.empty()) {
    if (auto r = remove_assignment(layout_, entry.channel_writer); !r) return r;
    if (auto r = remove_tree(layout_.channel_writer_dir(entry.channel_writer)); !r) return r;
  }
  if (!entry.container_id.empty()) {
    if (auto r = remove_tree(layout_.container_dir(entry.container_id)); !r) return r;
  }
  (void)uid;
  return true;
}

Result<bool> ClaimPreparer::recover() {
  std::lock_guard lock(mutex_);
  if (auto r = make_host_dir(layout_.root() + "/dra", 0700); !r) return r;
  auto loaded = store_.load();
  if (!loaded) return make_error(loaded.error());
  // One unreadable entry costs that claim (its files go with the sweep below), not the others.
  bool changed = !loaded->skipped.empty();
  for (const auto& why : loaded->skipped)
    GS_LOG(Error, "DRA checkpoint: entry skipped (%s)", config::detail::printable(why, 300).c_str());
  for (const auto& [uid, entry] : loaded->checkpoint.claims) {
    if (const std::string why = entry_mismatch(uid, entry); !why.empty()) {
      // Paths come from the uid, never from the file: a planted "../../victim" removes nothing.
      GS_LOG(Error, "DRA checkpoint: claim %s skipped: %s", config::detail::printable(uid, 80).c_str(),
             why.c_str());
      if (auto r = store_.remove(uid); !r) return r;
      if (valid_claim_uid(uid) && entry.state == CheckpointEntry::State::Preparing)
        (void)remove_files(uid, entry_paths(uid));
      continue;
    }
    if (entry.state == CheckpointEntry::State::Preparing) {
      GS_LOG(Warn, "claim %s/%s (%s) was being prepared when the daemon stopped: removing its files",
             entry.ns.c_str(), entry.name.c_str(), uid.c_str());
      CheckpointEntry paths = entry_paths(uid);
      paths.channel_writer = entry.channel_writer;
      if (auto r = remove_files(uid, paths); !r) return r;
      if (auto r = store_.remove(uid); !r) return r;
    }
  }
  // Files of claims the checkpoint does not name (it was lost or replaced): nothing refers to them.
  std::set<std::string> known;
  for (const auto& [uid, e] : store_.state().claims) known.insert(e.container_id);
  for (const auto& id : layout_.list_containers()) {
    if (id.rfind(kIdPrefix, 0) != 0 || known.count(id) || !valid_claim_uid(id.substr(4))) continue;
    GS_LOG(Warn, "removing %s: no prepared claim owns it", layout_.container_dir(id).c_str());
    (void)remove_tree(layout_.container_dir(id));
    (void)remove_assignment(layout_, id);
    (void)remove_tree(layout_.channel_writer_dir(id));
    (void)::unlink((options_.cdi_dir + "/" + cdi_spec_file_name(id.substr(4))).c_str());
  }
  if (changed) {
    if (auto w = store_.compact(); !w) return w;
  }
  return true;
}

Result<std::vector<PreparedDevice>> ClaimPreparer::prepare(const ClaimRef& ref) {
  if (!valid_claim_uid(ref.uid)) return make_error("claim uid is not a Kubernetes uid");
  if (!valid_object_name(ref.ns) || !valid_object_name(ref.name))
    return make_error("claim namespace and name must be object names, not " +
                      config::detail::printable(ref.ns + "/" + ref.name, 80));
  {
    std::lock_guard lock(mutex_);
    if (auto done = prepared_before(ref)) return *done;
  }
  // Outside the lock: a slow API server must not hold every other claim up.
  auto claim = source_.get_claim(ref.ns, ref.name);
  if (!claim) return make_error("reading claim " + ref.ns + "/" + ref.name + ": " + claim.error());
  auto allocation = read_claim_allocation(*claim, ref, options_.node);
  if (!allocation) return make_error(allocation.error());
  if (allocation->priority == Priority::High &&
      std::find(options_.priority_high_namespaces.begin(), options_.priority_high_namespaces.end(), ref.ns) ==
          options_.priority_high_namespaces.end()) {
    const std::string why = "the claim's configuration asks for priority high, which namespace \"" +
                            config::detail::printable(ref.ns, 64) +
                            "\" may not have (the operator allows it with gpuslice-node dra "
                            "--priority-high-namespaces); ask for normal or low";
    GS_LOG(Warn, "claim %s/%s (%s) refused: %s", ref.ns.c_str(), ref.name.c_str(), ref.uid.c_str(),
           why.c_str());
    return make_error(why);
  }

  std::lock_guard lock(mutex_);
  if (auto done = prepared_before(ref)) return *done;

  const std::string id = kIdPrefix + ref.uid;
  CheckpointEntry entry;
  entry.ns = ref.ns;
  entry.name = ref.name;
  if (!allocation->pods.empty()) entry.pod = allocation->pods.front();
  entry.container_id = id;
  entry.cdi_file = options_.cdi_dir + "/" + cdi_spec_file_name(ref.uid);
  if (allocation->priority) entry.priority = config::priority_name(*allocation->priority);
  std::vector<std::pair<std::string, std::uint64_t>> memory;
  std::vector<std::pair<std::string, std::uint64_t>> guarantee;
  std::vector<std::pair<std::string, unsigned>> compute;
  std::string visible;
  for (const auto& d : allocation->devices) {
    if (!d.note.empty())
      GS_LOG(Warn, "claim %s/%s (%s): %s", ref.ns.c_str(), ref.name.c_str(), ref.uid.c_str(), d.note.c_str());
    PreparedDevice p;
    p.requests = {d.request};
    p.pool = d.pool;
    p.device = d.device;
    p.share_id = d.share_id;
    p.cdi_ids = {cdi_device_id(ref.uid)};
    p.gpu_uuid = d.gpu.uuid;
    p.memory_bytes = d.memory_bytes;
    p.guarantee_bytes = d.guarantee_bytes;
    p.compute_percent = d.compute.value_or(100);
    entry.devices.push_back(p);
    memory.emplace_back(d.gpu.uuid, d.memory_bytes);
    if (d.guarantee_bytes != 0) guarantee.emplace_back(d.gpu.uuid, d.guarantee_bytes);
    if (d.compute) compute.emplace_back(d.gpu.uuid, *d.compute);
    visible += (visible.empty() ? "" : ",") + d.gpu.uuid;
  }
  // Compute turns and priorities are taken through the node channel.
  if (!compute.empty() || allocation->priority) entry.channel_writer = id;
  ChannelAssignment assigned;
  assigned.priority = allocation->priority.value_or(Priority::Normal);
  // As the limits file takes them (per_gpu): the last share given for a GPU.
  for (const auto& [uuid, percent] : compute) assigned.compute[uuid] = percent;
  if (!entry.channel_writer.empty()) {
    if (auto text = render_assignment(assigned); !text) return make_error(text.error());
  }

  // Limits may overcommit a GPU; guarantees never do: with this claim's, what the claims prepared
  // here guarantee on each GPU stays within its memory.
  if (auto over = guarantees_exceed_memory(ref.uid, *allocation)) {
    GS_LOG(Warn, "claim %s/%s (%s) refused: %s", ref.ns.c_str(), ref.name.c_str(), ref.uid.c_str(),
           over->c_str());
    return make_error(*over);
  }

  // 1. Say what is about to be created before creating any of it. The entry as it will be once
  // prepared must fit: a claim the checkpoint could not hold is refused before anything exists.
  CheckpointEntry done = entry;
  done.state = CheckpointEntry::State::Prepared;
  if (!store_.fits(ref.uid, done)) {
    const std::string why = "this node has prepared as many claims as its DRA checkpoint holds (" +
                            std::to_string(options_.max_checkpoint_bytes) +
                            " bytes): the claim is refused until others are released";
    GS_LOG(Warn, "claim %s/%s (%s) refused: %s", ref.ns.c_str(), ref.name.c_str(), ref.uid.c_str(),
           why.c_str());
    return make_error(why);
  }
  if (auto w = store_.put(ref.uid, entry); !w) {
    (void)store_.remove(ref.uid);
    return make_error(w.error());
  }
  step("checkpointed");
  auto fail = [&](const std::string& why) -> Result<std::vector<PreparedDevice>> {
    (void)remove_files(ref.uid, entry);
    (void)store_.remove(ref.uid);
    return make_error(why);
  };

  // 2. The claim's directories: state writable by any uid of the container, config root's.
  if (auto r = make_host_dir(layout_.container_dir(id), 0755); !r) return fail(r.error());
  if (auto r = make_host_dir(layout_.state_dir(id), 01777); !r) return fail(r.error());
  if (auto r = make_host_dir(layout_.config_dir(id), 0755); !r) return fail(r.error());
  // Which claim the directory belongs to, for the metrics' pod labels (claim_attribution.h).
  AllocationRecord record;
  record.resource = kClaimResource;
  record.devices = 1;
  record.devices_sha256 = devices_digest({ref.uid});
  record.allocated_at_ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                          std::chrono::system_clock::now().time_since_epoch())
                                                          .count());
  if (auto r = write_file_atomically(layout_.allocation_file(id), render_allocation_record(record), 0644); !r)
    return fail(r.error());
  if (!entry.channel_writer.empty()) {
    if (auto r = make_host_dir(layout_.channel_dir(), 0755); !r) return fail(r.error());
    if (auto r = make_host_dir(layout_.channel_writer_dir(entry.channel_writer), 01777); !r)
      return fail(r.error());
    // What its records are believed at: the claim's level (at most what the operator allows) and
    // its compute share per GPU.
    if (auto r = write_assignment(layout_, entry.channel_writer, assigned); !r) return fail(r.error());
  }
  step("directories");

  // 3. The read-only limits: exactly what was scheduled (or the claim's tighter limit).
  Limits limits;
  limits.memory = per_gpu(memory);
  if (!compute.empty()) limits.compute = per_gpu(compute);
  // Keyed like the memory limit: one plain value only where the claim has one GPU.
  if (!guarantee.empty()) {
    json by_uuid = json::object();
    for (const auto& [uuid, bytes] : guarantee) by_uuid[uuid] = bytes;
    limits.guarantee = memory.size() == 1 ? per_gpu(guarantee) : by_uuid.dump();
  }
  limits.priority = allocation->priority;
  const std::string text = render_limits(limits);
  if (auto checked = config::parse_limits_file(text); !checked) return fail("limits: " + checked.error());
  if (auto r = write_file_atomically(layout_.limits_file(id), text, 0444); !r) return fail(r.error());
  step("limits");

  // 4. The CDI spec the runtime applies to every container of the claim.
  ContainerEdits edits;
  edits.env["LD_PRELOAD"] = kContainerLibrary;
  edits.env["NVIDIA_VISIBLE_DEVICES"] = visible;
  edits.env["GPUSLICE_SHARED_DIR"] = kContainerSharedDir;
  edits.env["GPUSLICE_LIMITS_FILE"] = kContainerLimitsFile;
  edits.env["GPUSLICE_CONTAINER_ID"] = id;
  edits.env[kMemoryLimitKey] = *limits.memory;
  if (limits.compute) edits.env[kComputeLimitKey] = *limits.compute;
  if (limits.guarantee) edits.env[config::kMemoryGuaranteeKey] = *limits.guarantee;
  if (!entry.priority.empty()) edits.env["GPUSLICE_PRIORITY"] = entry.priority;
  edits.mounts.push_back({layout_.library_path(), kContainerLibrary, true});
  edits.mounts.push_back({layout_.state_dir(id), kContainerSharedDir, false});
  edits.mounts.push_back({layout_.config_dir(id), kContainerConfigDir, true});
  if (!options_.mps_pipe_dir.empty()) {
    edits.env["CUDA_MPS_PIPE_DIRECTORY"] = options_.mps_pipe_dir;
    edits.mounts.push_back({options_.mps_pipe_dir, options_.mps_pipe_dir, false});
  }
  if (!entry.channel_writer.empty()) {
    edits.env["GPUSLICE_NODE_DIR"] = kContainerNodeDir;
    edits.env["GPUSLICE_NODE_WRITER"] = entry.channel_writer;
    edits.mounts.push_back({layout_.channel_dir(), kContainerNodeDir, true});
    edits.mounts.push_back({layout_.channel_writer_dir(entry.channel_writer),
                            std::string(kContainerNodeDir) + "/" + entry.channel_writer, false});
  }
  // Device nodes that exist on this host; a runtime refuses a spec naming a missing one.
  std::vector<std::string> nodes = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};
  for (const auto& d : allocation->devices) nodes.push_back("nvidia" + std::to_string(d.gpu.minor));
  for (const auto& name : nodes) {
    const std::string host = options_.dev_root + "/" + name;
    struct stat st {};
    if (::stat(host.c_str(), &st) == 0) edits.device_nodes.push_back({"/dev/" + name, host});
  }
  if (auto r = write_file_atomically(entry.cdi_file, json_text(build_cdi_spec(ref.uid, edits)) + "\n", 0644);
      !r)
    return fail(r.error());
  step("cdi");

  // 5. Done: the entry now says prepared.
  entry.state = CheckpointEntry::State::Prepared;
  if (auto w = store_.put(ref.uid, entry); !w) return fail(w.error());
  if (auto reported = source_.report_prepared(ref, entry.devices); !reported)
    GS_LOG(Warn, "claim %s/%s: device status not written: %s", ref.ns.c_str(), ref.name.c_str(),
           reported.error().c_str());
  GS_LOG(Info, "prepared claim %s/%s (%s): %zu device(s), memory %s%s%s", ref.ns.c_str(), ref.name.c_str(),
         ref.uid.c_str(), entry.devices.size(), limits.memory->c_str(), limits.compute ? ", compute " : "",
         limits.compute ? limits.compute->c_str() : "");
  return entry.devices;
}

std::optional<std::string> ClaimPreparer::guarantees_exceed_memory(const std::string& uid,
                                                                   const ClaimAllocation& allocation) const {
  std::map<std::string, std::uint64_t> wanted;  // by GPU UUID
  std::map<std::string, std::uint64_t> memory;
  for (const auto& d : allocation.devices) {
    if (d.guarantee_bytes == 0) continue;
    wanted[d.gpu.uuid] += d.guarantee_bytes;
    memory[d.gpu.uuid] = published_memory(d.gpu);
  }
  if (wanted.empty()) return std::nullopt;
  std::map<std::string, std::uint64_t> held;
  // Claims being prepared count too: a prepare that fails takes its entry away.
  for (const auto& [other, e] : store_.state().claims) {
    if (other == uid) continue;
    for (const auto& d : e.devices) held[d.gpu_uuid] += d.guarantee_bytes;
  }
  for (const auto& [uuid, bytes] : wanted) {
    if (held[uuid] + bytes <= memory[uuid]) continue;
    return "the claim's memory.request (" + std::to_string(bytes) + " bytes on " + uuid +
           ") with what the claims prepared on this node guarantee there (" + std::to_string(held[uuid]) +
           " bytes) is more than the GPU's " + std::to_string(memory[uuid]) +
           " bytes: guarantees never overcommit a GPU (limits may); ask for less, or release a claim";
  }
  return std::nullopt;
}

Result<bool> ClaimPreparer::unprepare(const std::string& uid) {
  if (!valid_claim_uid(uid)) return make_error("claim uid is not a Kubernetes uid");
  std::lock_guard lock(mutex_);
  auto it = store_.state().claims.find(uid);
  if (it == store_.state().claims.end()) return true;  // never prepared here, or unprepared before
  const CheckpointEntry removed = it->second;
  if (auto r = remove_files(uid, removed); !r) return r;
  // Failing, the entry stays: asked again, the removal is repeated.
  if (auto w = store_.remove(uid); !w) return w;
  GS_LOG(Info, "unprepared claim %s/%s (%s)", removed.ns.c_str(), removed.name.c_str(), uid.c_str());
  return true;
}

std::vector<ClaimSummary> ClaimPreparer::claims() const {
  std::lock_guard lock(mutex_);
  std::vector<ClaimSummary> out;
  for (const auto& [uid, e] : store_.state().claims) out.push_back({uid, e});
  return out;
}

}  // namespace gpuslice::node::dra
