#include "node/dra/slice_publisher.h"

#include <algorithm>
#include <ctime>
#include <map>
#include <optional>
#include <random>

#include "common/log.h"
#include "node/dra/node_event.h"

namespace gpuslice::node::dra {

using nlohmann::json;

namespace {

const std::string kSlices = "/apis/resource.k8s.io/v1/resourceslices";

std::string slice_path(const std::string& name) {
  std::string path = kSlices;
  path += '/';
  path += name;
  return path;
}

std::string field_selector(const SliceOptions& s) {
  return "fieldSelector=spec.nodeName%3D" + s.node_name + "%2Cspec.driver%3D" + s.driver;
}

std::string resource_version(const json& object) {
  if (!object.is_object() || !object.contains("metadata") || !object["metadata"].is_object()) return {};
  const auto& md = object["metadata"];
  return md.contains("resourceVersion") && md["resourceVersion"].is_string()
             ? md["resourceVersion"].get<std::string>()
             : std::string();
}

std::string status_error(const char* what, const ApiResponse& r) { return api_status_error(what, r); }

constexpr const char* kSpecDigestAnnotation = "gpuslice.io/spec-digest";

// A digest of the spec we want, without the pool generation (which we bump ourselves when the rest
// changes). Compared through an annotation: the API server rewrites quantities in canonical form
// ("85899345920" becomes "80Gi"), so the stored spec never equals ours byte for byte.
std::string spec_digest(json spec) {
  if (spec.is_object() && spec.contains("pool") && spec["pool"].is_object()) spec["pool"].erase("generation");
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : spec.dump()) h = (h ^ c) * 1099511628211ULL;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

std::string annotation(const json& object, const char* key) {
  if (!object.is_object() || !object.contains("metadata")) return {};
  const json& md = object["metadata"];
  if (!md.is_object() || !md.contains("annotations") || !md["annotations"].is_object()) return {};
  const json& a = md["annotations"];
  return a.contains(key) && a[key].is_string() ? a[key].get<std::string>() : std::string();
}

}  // namespace

std::string micro_time(std::chrono::system_clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[64];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long>(us % 1000000));
  return text;
}

std::optional<std::chrono::system_clock::time_point> parse_micro_time(const std::string& text) {
  std::tm tm{};
  long fraction = 0;
  char rest[16] = {};
  int n = std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%15s", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                      &tm.tm_hour, &tm.tm_min, &tm.tm_sec, rest);
  if (n < 6) return std::nullopt;
  if (rest[0] == '.') fraction = std::atol(rest + 1);  // microseconds as we write them
  (void)fraction;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t seconds = ::timegm(&tm);
  if (seconds == static_cast<std::time_t>(-1)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(seconds);
}

SlicePublisher::SlicePublisher(PublisherOptions options, ApiClient& api)
    : options_(std::move(options)), api_(api.options()) {
  status_.partitionable = options_.slice.partitionable;
  status_.layout = options_.slice.partitionable ? SliceLayout::SeparateCounters : SliceLayout::SharedOnly;
}

Error SlicePublisher::fail(const char* cause, std::string message) {
  cause_ = cause;
  return make_error(std::move(message));
}

SlicePublisher::~SlicePublisher() { halt(); }

std::string SlicePublisher::lease_name() const { return "gpuslice-dra-" + options_.slice.node_name; }

void SlicePublisher::set_gpus(std::vector<GpuInfo> gpus) {
  std::lock_guard lock(mutex_);
  // Health, identity or memory matter to the slice; utilisation and used memory do not.
  auto key = [](const std::vector<GpuInfo>& list) {
    std::vector<std::tuple<std::string, std::uint64_t, bool>> k;
    k.reserve(list.size());
    for (const auto& g : list) k.emplace_back(g.uuid, g.memory_total_bytes, g.healthy);
    return k;
  };
  if (key(gpus) == key(gpus_)) return;
  gpus_ = std::move(gpus);
  changed_ = true;
  cv_.notify_all();
}

PublisherStatus SlicePublisher::status() const {
  std::lock_guard lock(mutex_);
  return status_;
}

// True: created and ours. False: the server already had one (409).
Result<bool> SlicePublisher::create_lease(const std::string& path, json spec) {
  spec["acquireTime"] = spec["renewTime"];
  spec["leaseTransitions"] = 0;
  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", lease_name()}, {"namespace", options_.lease_namespace}}},
                {"spec", std::move(spec)}};
  auto created = api_.request("POST", path, lease);
  if (!created) return make_error(created.error());
  if (created->status == 409) return false;
  if (created->status / 100 != 2) return make_error(status_error("creating the lease", *created));
  std::lock_guard lock(mutex_);
  held_lease_ = created->body;
  return true;
}

Result<bool> SlicePublisher::hold_lease() {
  const std::string path = "/apis/coordination.k8s.io/v1/namespaces/" + options_.lease_namespace + "/leases";
  const auto now = std::chrono::system_clock::now();
  json spec = {{"holderIdentity", options_.identity},
               {"leaseDurationSeconds", options_.lease_duration.count()},
               {"renewTime", micro_time(now)}};
  auto got = api_.request("GET", path + "/" + lease_name());
  if (!got) return make_error(got.error());
  if (got->status == 404) {
    auto created = create_lease(path, spec);
    if (!created || *created) return created;
    // 409: another daemon created it first, or our own earlier try did, its answer lost to a
    // timeout and the retry refused. The lease as stored says which.
    got = api_.request("GET", path + "/" + lease_name());
    if (!got) return make_error(got.error());
  }
  if (got->status != 200 || !got->body.is_object())
    return make_error(status_error("reading the lease", *got));
  json lease = got->body;
  const json current = lease.value("spec", json::object());
  const std::string holder = current.value("holderIdentity", "");
  bool expired = true;
  if (current.contains("renewTime") && current["renewTime"].is_string()) {
    if (auto renewed = parse_micro_time(current["renewTime"].get<std::string>())) {
      const auto duration = std::chrono::seconds(current.value("leaseDurationSeconds", 15));
      expired = *renewed + duration < now;
    }
  }
  if (holder != options_.identity && !holder.empty() && !expired) {
    std::lock_guard lock(mutex_);
    held_lease_ = nullptr;
    return false;
  }
  if (holder != options_.identity) {
    spec["acquireTime"] = micro_time(now);
    spec["leaseTransitions"] = current.value("leaseTransitions", 0) + 1;
    GS_LOG(Info, "taking lease %s/%s from '%s'", options_.lease_namespace.c_str(), lease_name().c_str(),
           holder.c_str());
  } else {
    if (current.contains("acquireTime")) spec["acquireTime"] = current["acquireTime"];
    spec["leaseTransitions"] = current.value("leaseTransitions", 0);
  }
  lease["spec"] = spec;
  // The resourceVersion read above makes this a compare-and-swap: of two daemons, one gets 409.
  auto put = api_.request("PUT", path + "/" + lease_name(), lease);
  if (!put) return make_error(put.error());
  std::lock_guard lock(mutex_);
  if (put->status == 409) {
    held_lease_ = nullptr;
    return false;
  }
  if (put->status != 200) return make_error(status_error("renewing the lease", *put));
  held_lease_ = put->body;
  return true;
}

namespace {

// Whether the API server kept in `stored` (its answer to our write of `sent`) every field of the
// layout: with DRAPartitionableDevices off it drops sharedCounters and consumesCounters, with
// DRAConsumableCapacity off allowMultipleAllocations and the capacities' requestPolicy.
bool kept_fields(const json& sent, const json& stored) {
  const json spec = sent.value("spec", json::object());
  const json stored_spec = stored.is_object() ? stored.value("spec", json::object()) : json::object();
  if (spec.contains("sharedCounters")) {
    const json counters = stored_spec.value("sharedCounters", json());
    if (!counters.is_array() || counters.size() != spec["sharedCounters"].size()) return false;
  }
  const json devices = stored_spec.value("devices", json());
  for (const auto& d : spec.value("devices", json::array())) {
    if (!devices.is_array()) return false;
    const json* kept = nullptr;
    for (const auto& s : devices)
      if (s.is_object() && s.value("name", "") == d.value("name", "")) kept = &s;
    if (!kept) return false;
    if (d.contains("consumesCounters") && !kept->contains("consumesCounters")) return false;
    if (d.value("allowMultipleAllocations", false) && !kept->value("allowMultipleAllocations", false))
      return false;
    if (!d.contains("capacity") || !d["capacity"].is_object()) continue;
    const json kept_capacity = kept->value("capacity", json::object());
    for (const auto& [name, c] : d["capacity"].items()) {
      if (!c.is_object() || !c.contains("requestPolicy")) continue;
      if (!kept_capacity.is_object() || !kept_capacity.contains(name) || !kept_capacity[name].is_object() ||
          !kept_capacity[name].contains("requestPolicy"))
        return false;
    }
  }
  return true;
}

std::string pool_digest(const std::vector<json>& slices) {
  std::string all;
  for (const auto& d : slices)
    all += d["metadata"]["name"].get<std::string>() + "=" + spec_digest(d["spec"]) + ";";
  return spec_digest(json(all));
}

}  // namespace

// Overwrites the stored slice `name` with `slice`, at the version the server has now.
Result<ApiResponse> SlicePublisher::replace_slice(const std::string& name, json slice) {
  auto stored = api_.request("GET", slice_path(name));
  if (!stored) return stored;
  if (stored->status != 200 || !stored->body.is_object()) return stored;
  slice["metadata"]["resourceVersion"] = resource_version(stored->body);
  return api_.request("PUT", slice_path(name), slice);
}

Result<SliceLayout> SlicePublisher::detect_layout(const std::vector<GpuInfo>& gpus) {
  SliceOptions probe = options_.slice;
  std::vector<SliceLayout> candidates = {SliceLayout::SeparateCounters, SliceLayout::CountersBeside,
                                         SliceLayout::SharedOnly, SliceLayout::Exclusive};
  if (!options_.slice.partitionable || gpus.empty() || gpus.size() > kMaxPartitionableGpus)
    candidates.erase(candidates.begin(), candidates.begin() + 2);
  std::string refused;
  for (SliceLayout layout : candidates) {
    probe.layout = layout;
    bool whole = true;
    for (json slice : build_resource_slices(gpus, probe)) {
      // A name no slice has: a dry run of a create of an existing one would answer 409.
      slice["metadata"]["name"] = slice["metadata"]["name"].get<std::string>() + "-probe";
      auto answer = api_.request("POST", kSlices + "?dryRun=All", slice);
      if (!answer) return fail("unreachable", answer.error());
      if (answer->status == 422 || answer->status == 400) {
        refused += std::string(refused.empty() ? "" : "; ") + layout_name(layout) + ": " +
                   status_error("refused", *answer);
        whole = false;
        break;
      }
      if (answer->status / 100 != 2)
        return fail(answer->status == 401 || answer->status == 403 ? "forbidden" : "write-rejected",
                    status_error("dry-run create of a ResourceSlice", *answer));
      if (!kept_fields(slice, answer->body)) {
        whole = false;
        break;
      }
    }
    if (whole) return layout;
  }
  return fail("layout-refused", "the API server accepts no form of this node's ResourceSlice: " + refused);
}

namespace {

struct Degradation {
  const char* reason;  // of the Event on the Node; nullptr: the layout is what the operator asked for
  const char* message;
};

// What a layout costs against the one the operator asked for (`partitions`: whole-GPU devices and
// counters were wanted and fit).
Degradation degradation(SliceLayout layout, bool partitions) {
  if (layout == SliceLayout::Exclusive)
    return {"GpusliceFractionsNotEnforceable",
            "fractions of a GPU are not enforceable as scheduled: the API server keeps neither consumable "
            "capacity nor counters (DRAConsumableCapacity off), so gpuslice publishes each GPU of this node "
            "as one device for one claim and the scheduler drops the claims' capacity requests; a claim "
            "allocated without consumed capacity is prepared as gpuslice-node dra --dropped-capacity says "
            "(default: refused). Turn DRAConsumableCapacity on (API server and scheduler) or use "
            "Kubernetes 1.36; docs/kubernetes.md has the table"};
  if (layout == SliceLayout::SharedOnly && partitions)
    return {"GpusliceWholeGpuDevicesNotPublished",
            "the API server refuses or drops partitionable-device counters (DRAPartitionableDevices off), "
            "so gpuslice publishes only the shared gpu-N devices of this node: fractions are enforced as "
            "scheduled, but no gpu-N-whole device can be claimed and nothing keeps a whole-GPU claim "
            "apart from shares except its capacity request"};
  return {nullptr, nullptr};
}

}  // namespace

void SlicePublisher::announce_layout(SliceLayout layout, const std::vector<GpuInfo>& gpus) {
  const bool partitions =
      options_.slice.partitionable && !gpus.empty() && gpus.size() <= kMaxPartitionableGpus;
  const Degradation d = degradation(layout, partitions);
  const std::string reason = d.reason ? d.reason : "";
  // Once per change of layout (a re-probe that finds the same one says nothing again).
  if (!announced_layout_ || *announced_layout_ != layout) {
    if (layout == SliceLayout::Exclusive) {
      GS_LOG(Error, "ResourceSlice layout %s: %s", layout_name(layout), d.message);
    } else if (d.reason) {
      GS_LOG(Warn, "ResourceSlice layout %s: %s", layout_name(layout), d.message);
    } else if (announced_layout_ ||
               (layout != SliceLayout::SeparateCounters && options_.slice.partitionable)) {
      GS_LOG(Info, "ResourceSlice layout %s: the richest form this API server keeps", layout_name(layout));
    }
    announced_layout_ = layout;
  }
  {
    std::lock_guard lock(mutex_);
    status_.degraded_reason = reason;
    status_.degraded_message = d.message ? d.message : "";
  }
  // One Event on the Node per change of cause: a poorer layout, another poorer one, or back.
  if (reason == announced_reason_) return;
  const bool restored = reason.empty();
  NodeEvent event;
  event.node = options_.slice.node_name;
  event.type = restored ? "Normal" : "Warning";
  event.reason = restored ? "GpusliceSliceLayoutRestored" : reason;
  event.message = restored ? std::string("the API server keeps the ") + layout_name(layout) +
                                 " layout again: fractions of a GPU are enforced as scheduled"
                           : std::string(d.message);
  event.instance = options_.identity;
  event.at = std::chrono::system_clock::now();
  announced_reason_ = reason;
  auto posted = api_.request("POST", kNodeEventsPath, node_event_object(event));
  std::string error;
  if (!posted) {
    error = posted.error();
  } else if (posted->status / 100 != 2 && posted->status != 409) {  // 409: a retried create that landed
    error = status_error("creating an Event on the Node", *posted);
  }
  if (!error.empty())
    GS_LOG(Warn,
           "Event %s on Node %s not written (the chart's RBAC lets the daemon create events in namespace "
           "%s): %s",
           event.reason.c_str(), event.node.c_str(), kNodeEventNamespace, error.c_str());
  std::lock_guard lock(mutex_);
  status_.node_event_error = error;
  if (error.empty()) ++status_.node_events;
}

Result<std::string> SlicePublisher::reconcile_slices() {
  std::vector<GpuInfo> gpus;
  SliceOptions slice_options = options_.slice;
  bool known = false;
  {
    std::lock_guard lock(mutex_);
    gpus = gpus_;
    changed_ = false;
    known = status_.layout_known;
    slice_options.layout = status_.layout;
  }
  if (!known) {
    auto layout = detect_layout(gpus);
    if (!layout) return make_error(layout.error());
    const bool fractions = *layout != SliceLayout::Exclusive;
    {
      std::lock_guard lock(mutex_);
      status_.layout = *layout;
      status_.layout_known = true;
      status_.fractions_schedulable = fractions;
      slice_options.layout = *layout;
      status_.partitionable = publishes_partitions(gpus, slice_options);
    }
    announce_layout(*layout, gpus);
  }
  auto listed = api_.request("GET", kSlices + "?" + field_selector(options_.slice));
  if (!listed) return fail("unreachable", listed.error());
  if (listed->status != 200 || !listed->body.is_object() || !listed->body.contains("items") ||
      !listed->body["items"].is_array())
    return fail("list", status_error("listing ResourceSlices", *listed));
  const std::string list_version = resource_version(listed->body);
  std::vector<json> desired = build_resource_slices(gpus, slice_options);
  std::map<std::string, json> existing;
  std::uint64_t stored_generation = 0;
  for (const auto& item : listed->body["items"]) {
    const std::string name = item.value("metadata", json::object()).value("name", "");
    const json spec = item.value("spec", json::object());
    // The field selector is the server's promise; a lying server must not make us delete others' slices.
    if (spec.value("nodeName", "") != options_.slice.node_name ||
        spec.value("driver", "") != options_.slice.driver)
      continue;
    const json pool = spec.value("pool", json::object());
    if (pool.contains("generation") && pool["generation"].is_number_unsigned())
      stored_generation = std::max(stored_generation, pool["generation"].get<std::uint64_t>());
    bool wanted = false;
    for (const auto& d : desired) wanted = wanted || d["metadata"]["name"] == name;
    if (wanted) {
      existing[name] = item;
      continue;
    }
    if (!valid_object_name(name)) continue;
    if (own_slice_name(options_.slice, name)) {
      GS_LOG(Info, "deleting ResourceSlice %s: not part of the pool in layout %s", name.c_str(),
             layout_name(slice_options.layout));
    } else {
      GS_LOG(Info, "deleting ResourceSlice %s of this node and driver: not a slice this daemon publishes",
             name.c_str());
    }
    auto deleted = api_.request("DELETE", slice_path(name));
    if (!deleted) return fail("unreachable", deleted.error());
  }
  // The pool changes as a whole: every slice gets the new generation once any of them differs (the
  // scheduler reads only the slices of a pool's newest generation).
  bool current = true;
  std::optional<std::uint64_t> one_generation;
  for (const auto& d : desired) {
    auto it = existing.find(d["metadata"]["name"]);
    if (it == existing.end() || annotation(it->second, kSpecDigestAnnotation) != spec_digest(d["spec"])) {
      current = false;
      continue;
    }
    const json pool = it->second["spec"].value("pool", json::object());
    const std::uint64_t g = pool.value("generation", std::uint64_t{0});
    if (one_generation && *one_generation != g) current = false;
    one_generation = g;
  }
  if (current) {
    std::lock_guard lock(mutex_);
    status_.generation = stored_generation;
    return list_version;
  }
  // A new generation only when a stored slice's content changes (slices merely missing are added
  // at the stored one), and one per change however many rounds it takes to write it.
  bool content_differs = false;
  for (const auto& d : desired) {
    auto it = existing.find(d["metadata"]["name"]);
    if (it != existing.end() && annotation(it->second, kSpecDigestAnnotation) != spec_digest(d["spec"]))
      content_differs = true;
  }
  const std::string digest = pool_digest(desired);
  std::uint64_t generation =
      content_differs ? stored_generation + 1 : std::max<std::uint64_t>(stored_generation, 1);
  if (digest == attempt_digest_ && attempt_generation_ >= stored_generation && attempt_generation_ > 0)
    generation = attempt_generation_;
  attempt_digest_ = digest;
  attempt_generation_ = generation;
  slice_options.pool_generation = generation;
  desired = build_resource_slices(gpus, slice_options);
  // Counter slices first: the devices that consume them are never published without them.
  if (desired.size() > 1 && slice_options.layout == SliceLayout::SeparateCounters)
    std::rotate(desired.begin(), desired.begin() + 1, desired.end());
  for (auto& d : desired) {
    const std::string name = d["metadata"]["name"];
    d["metadata"]["annotations"] = {{kSpecDigestAnnotation, spec_digest(d["spec"])}};
    auto it = existing.find(name);
    Result<ApiResponse> written = make_error("");
    if (it == existing.end()) {
      written = api_.request("POST", kSlices, d);
      if (!written) return fail("unreachable", written.error());
      if (written->status == 409) written = replace_slice(name, d);  // a retried POST that had landed
      if (!written) return fail("unreachable", written.error());
      if (written->status / 100 != 2) {
        std::lock_guard lock(mutex_);
        status_.layout_known = written->status != 422;  // the server may have changed: probe again
        return fail("write-rejected", status_error(("creating ResourceSlice " + name).c_str(), *written));
      }
    } else {
      d["metadata"]["resourceVersion"] = resource_version(it->second);
      written = api_.request("PUT", slice_path(name), d);
      if (!written) return fail("unreachable", written.error());
      if (written->status != 200) {
        std::lock_guard lock(mutex_);
        status_.layout_known = written->status != 422;
        return fail(written->status == 409 ? "conflict" : "write-rejected",
                    status_error(("updating ResourceSlice " + name).c_str(), *written));
      }
    }
    if (!kept_fields(d, written->body)) {
      GS_LOG(Warn, "the API server dropped fields of ResourceSlice %s (layout %s): probing its layout again",
             name.c_str(), layout_name(slice_options.layout));
      std::lock_guard lock(mutex_);
      status_.layout_known = false;
      return fail("fields-dropped", "the API server dropped fields of ResourceSlice " + name);
    }
  }
  {
    std::lock_guard lock(mutex_);
    status_.generation = generation;
  }
  GS_LOG(Info, "published ResourceSlices of pool %s: %zu GPU(s), %zu slice(s), generation %llu, layout %s",
         options_.slice.node_name.c_str(), gpus.size(), desired.size(),
         static_cast<unsigned long long>(generation), layout_name(slice_options.layout));
  return list_version;
}

Result<bool> SlicePublisher::round() {
  cause_.clear();
  auto leading = hold_lease();
  if (!leading) return fail("lease", leading.error());
  {
    std::lock_guard lock(mutex_);
    status_.leader = *leading;
    ++status_.rounds;
  }
  if (!*leading) return false;
  auto version = reconcile_slices();
  // A layout found wanting in a write is probed again at once (each probe steps down).
  for (int again = 0; again < 3 && !version && cause_ == "fields-dropped"; ++again)
    version = reconcile_slices();
  if (!version) return make_error(version.error());
  {
    std::lock_guard lock(mutex_);
    status_.published = true;
  }
  // Until the lease needs renewing: follow our slices, so a deleted or edited one is put back.
  const auto watch_for = std::chrono::duration_cast<std::chrono::seconds>(options_.lease_duration / 3);
  auto end = api_.watch(kSlices, field_selector(options_.slice), *version,
                        std::max(watch_for, std::chrono::seconds(1)), [](const WatchEvent& e) {
                          return e.type == "BOOKMARK";  // any change to our slices: reconcile now
                        });
  if (!end) return fail("unreachable", end.error());
  if (end->gone) {
    std::lock_guard lock(mutex_);
    ++status_.relists;
  }
  return true;
}

void SlicePublisher::loop() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    auto r = round();
    std::chrono::milliseconds wait{0};
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      if (!r) {
        const std::string cause = cause_.empty() ? "error" : cause_;
        // One line per change of cause; the same failure again only counts.
        if (status_.cause != cause)
          GS_LOG(Warn, "ResourceSlice publisher (%s): %s", cause.c_str(), r.error().c_str());
        status_.error = r.error();
        status_.cause = cause;
        ++status_.failures;
        ++status_.consecutive_failures;
        // Exponential backoff with jitter (50-100%), from `retry` up to `max_backoff`.
        const unsigned shift =
            static_cast<unsigned>(std::min<std::uint64_t>(status_.consecutive_failures - 1, 16));
        const auto full =
            std::min(options_.max_backoff, options_.retry * (std::chrono::milliseconds::rep{1} << shift));
        wait = std::chrono::milliseconds(
            std::uniform_int_distribution<long long>(full.count() / 2, full.count())(rng));
        status_.next_wait = wait;
      } else {
        if (!status_.cause.empty()) GS_LOG(Info, "ResourceSlice publisher: working again");
        status_.error.clear();
        status_.cause.clear();
        status_.consecutive_failures = 0;
        status_.next_wait = std::chrono::milliseconds(0);
        if (!*r) wait = options_.retry;  // not the leader: try again later
      }
    }
    if (wait.count() > 0) {
      std::unique_lock lock(mutex_);
      cv_.wait_for(lock, wait, [this] { return stopping_ || changed_; });
    }
  }
}

void SlicePublisher::start() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = false;
  }
  thread_ = std::thread([this] { loop(); });
}

void SlicePublisher::begin_stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (!thread_.joinable()) return;  // never started: no Lease to give up
  // Cut off before the release starts: a read of the Lease the loop sends from now on fails at
  // once, so it cannot see the released Lease and take it again; a renewal already on its way
  // carries the version before the release and is refused (409), or lands first and the release
  // finds out by its own 409.
  api_.set_cancelled(true);
  release_thread_ = std::thread([this] { released_ = release_lease(kLeaseReleaseBudget); });
}

void SlicePublisher::halt() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  api_.set_cancelled(true);
  if (thread_.joinable()) thread_.join();
  if (release_thread_.joinable()) release_thread_.join();
}

void SlicePublisher::stop() {
  begin_stop();
  halt();
  api_.set_cancelled(false);
  if (released_ && !*released_)
    GS_LOG(Warn, "the Lease was not given up (it expires by itself): %s", released_->error().c_str());
  released_.reset();
}

Result<bool> SlicePublisher::release_lease(std::chrono::milliseconds budget) {
  const auto end = std::chrono::steady_clock::now() + budget;
  const std::string path =
      "/apis/coordination.k8s.io/v1/namespaces/" + options_.lease_namespace + "/leases/" + lease_name();
  json lease;
  {
    std::lock_guard lock(mutex_);
    lease = held_lease_;
  }
  if (!lease.is_object() || !lease.contains("spec") || !lease["spec"].is_object())
    return false;  // not leading
  // A client of its own: not cut off by the loop's cancellation, no retries, and each request
  // given what is left of the budget.
  auto send = [&](const char* method, const std::optional<json>& body) -> std::optional<Result<ApiResponse>> {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    ApiServerOptions o = api_.options();
    o.retries = 0;
    o.timeout = left;
    ApiClient client(o);
    return client.request(method, path, body);
  };
  for (int attempt = 0; attempt < 2; ++attempt) {
    // As client-go releases a lease: no holder, a one-second duration.
    lease["spec"]["holderIdentity"] = "";
    lease["spec"]["leaseDurationSeconds"] = 1;
    lease["spec"]["renewTime"] = micro_time(std::chrono::system_clock::now());
    auto put = send("PUT", lease);
    if (!put) break;
    if (!*put) return make_error(put->error());
    if ((*put)->status == 200) {
      {
        std::lock_guard lock(mutex_);
        status_.leader = false;
        held_lease_ = nullptr;
      }
      GS_LOG(Info, "gave up lease %s/%s", options_.lease_namespace.c_str(), lease_name().c_str());
      return true;
    }
    if ((*put)->status != 409 || attempt > 0) return make_error(status_error("releasing the lease", **put));
    // Changed since our last write (a renewal that was in flight landed first): still ours?
    auto got = send("GET", std::nullopt);
    if (!got) break;
    if (!*got) return make_error(got->error());
    if ((*got)->status != 200 || !(*got)->body.is_object()) return false;
    lease = (*got)->body;
    if (lease.value("spec", json::object()).value("holderIdentity", "") != options_.identity)
      return false;  // not ours any more
  }
  return make_error("releasing the lease: no answer within " + std::to_string(budget.count()) + " ms");
}

}  // namespace gpuslice::node::dra
