#include "node/dra/slice_publisher.h"

#include <algorithm>
#include <ctime>
#include <map>

#include "common/log.h"

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

std::string status_error(const char* what, const ApiResponse& r) {
  std::string message;
  if (r.body.is_object() && r.body.contains("message") && r.body["message"].is_string())
    message = ": " + r.body["message"].get<std::string>().substr(0, 200);
  return std::string(what) + ": HTTP " + std::to_string(r.status) + message;
}

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
    : options_(std::move(options)), api_(api) {
  status_.partitionable = options_.slice.partitionable;
}

SlicePublisher::~SlicePublisher() { stop(); }

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
  if (holder != options_.identity && !holder.empty() && !expired) return false;
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
  if (put->status == 409) return false;
  if (put->status != 200) return make_error(status_error("renewing the lease", *put));
  return true;
}

namespace {

// Whether the API server kept what partitionable devices need in `stored` (its answer to our write
// of `sent`): with DRAPartitionableDevices off it drops sharedCounters and consumesCounters.
bool kept_partitions(const json& sent, const json& stored) {
  const json spec = sent.value("spec", json::object());
  const json stored_spec = stored.is_object() ? stored.value("spec", json::object()) : json::object();
  if (spec.contains("sharedCounters")) {
    const json counters = stored_spec.value("sharedCounters", json());
    return counters.is_array() && counters.size() == spec["sharedCounters"].size();
  }
  const json devices = stored_spec.value("devices", json());
  if (!devices.is_array()) return false;
  for (const auto& d : spec.value("devices", json::array())) {
    if (!d.contains("consumesCounters")) continue;
    bool found = false;
    for (const auto& s : devices) {
      if (s.is_object() && s.value("name", "") == d.value("name", "") && s.contains("consumesCounters"))
        found = true;
    }
    if (!found) return false;
  }
  return true;
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

Result<std::string> SlicePublisher::reconcile_slices() {
  std::vector<GpuInfo> gpus;
  SliceOptions slice_options = options_.slice;
  {
    std::lock_guard lock(mutex_);
    gpus = gpus_;
    changed_ = false;
    slice_options.partitionable = status_.partitionable;
  }
  auto listed = api_.request("GET", kSlices + "?" + field_selector(options_.slice));
  if (!listed) return make_error(listed.error());
  if (listed->status != 200 || !listed->body.is_object() || !listed->body.contains("items") ||
      !listed->body["items"].is_array())
    return make_error(status_error("listing ResourceSlices", *listed));
  const std::string list_version = resource_version(listed->body);
  std::vector<json> desired = build_resource_slices(gpus, slice_options);
  std::map<std::string, json> existing;
  for (const auto& item : listed->body["items"]) {
    const std::string name = item.value("metadata", json::object()).value("name", "");
    const json spec = item.value("spec", json::object());
    // The field selector is the server's promise; a lying server must not make us delete others' slices.
    if (spec.value("nodeName", "") != options_.slice.node_name ||
        spec.value("driver", "") != options_.slice.driver)
      continue;
    bool wanted = false;
    for (const auto& d : desired) wanted = wanted || d["metadata"]["name"] == name;
    if (wanted) {
      existing[name] = item;
      continue;
    }
    if (!valid_object_name(name)) continue;
    GS_LOG(Info, "deleting ResourceSlice %s: not this daemon's", name.c_str());
    auto deleted = api_.request("DELETE", slice_path(name));
    if (!deleted) return make_error(deleted.error());
  }
  // The pool changes as a whole: every slice gets the new generation once any of them differs (the
  // scheduler reads only the slices of a pool's newest generation).
  bool current = true;
  for (const auto& d : desired) {
    auto it = existing.find(d["metadata"]["name"]);
    if (it == existing.end() || annotation(it->second, kSpecDigestAnnotation) != spec_digest(d["spec"]))
      current = false;
  }
  for (const auto& [name, e] : existing) {
    const json pool = e.value("spec", json::object()).value("pool", json::object());
    if (pool.contains("generation") && pool["generation"].is_number_unsigned())
      generation_ = std::max(generation_, pool["generation"].get<std::uint64_t>());
  }
  if (current) return list_version;
  if (!existing.empty()) ++generation_;
  slice_options.pool_generation = generation_;
  desired = build_resource_slices(gpus, slice_options);
  // Counter slices first: the devices that consume them are never published without them, and the
  // server's answer shows whether it keeps counters at all before any whole-GPU device is out.
  std::rotate(desired.begin(), desired.begin() + 1, desired.end());
  for (auto& d : desired) {
    const std::string name = d["metadata"]["name"];
    d["metadata"]["annotations"] = {{kSpecDigestAnnotation, spec_digest(d["spec"])}};
    auto it = existing.find(name);
    Result<ApiResponse> written = make_error("");
    if (it == existing.end()) {
      written = api_.request("POST", kSlices, d);
      if (!written) return make_error(written.error());
      if (written->status == 409) written = replace_slice(name, d);  // a retried POST that had landed
      if (!written) return make_error(written.error());
      if (written->status / 100 != 2)
        return make_error(status_error(("creating ResourceSlice " + name).c_str(), *written));
    } else {
      d["metadata"]["resourceVersion"] = resource_version(it->second);
      written = api_.request("PUT", slice_path(name), d);
      if (!written) return make_error(written.error());
      if (written->status != 200)
        return make_error(status_error(("updating ResourceSlice " + name).c_str(), *written));
    }
    if (slice_options.partitionable && !kept_partitions(d, written->body)) {
      GS_LOG(Warn,
             "the API server dropped the partitionable-device fields of ResourceSlice %s "
             "(DRAPartitionableDevices off?): publishing shared devices only, without whole-GPU devices",
             name.c_str());
      {
        std::lock_guard lock(mutex_);
        status_.partitionable = false;
      }
      return reconcile_slices();
    }
  }
  GS_LOG(Info, "published ResourceSlices of pool %s: %zu GPU(s), %zu slice(s), generation %llu%s",
         options_.slice.node_name.c_str(), gpus.size(), desired.size(),
         static_cast<unsigned long long>(generation_),
         publishes_partitions(gpus, slice_options) ? ", whole-GPU devices with counters" : "");
  return list_version;
}

Result<bool> SlicePublisher::round() {
  auto leading = hold_lease();
  if (!leading) return make_error(leading.error());
  {
    std::lock_guard lock(mutex_);
    status_.leader = *leading;
    ++status_.rounds;
  }
  if (!*leading) return false;
  auto version = reconcile_slices();
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
  if (!end) return make_error(end.error());
  if (end->gone) {
    std::lock_guard lock(mutex_);
    ++status_.relists;
  }
  return true;
}

void SlicePublisher::loop() {
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    auto r = round();
    bool wait = true;
    {
      std::lock_guard lock(mutex_);
      if (!r) {
        if (status_.error != r.error()) GS_LOG(Warn, "ResourceSlice publisher: %s", r.error().c_str());
        status_.error = r.error();
      } else {
        status_.error.clear();
        wait = !*r;  // not the leader: try again later
      }
    }
    if (wait) {
      std::unique_lock lock(mutex_);
      cv_.wait_for(lock, options_.retry, [this] { return stopping_ || changed_; });
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

void SlicePublisher::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace gpuslice::node::dra
