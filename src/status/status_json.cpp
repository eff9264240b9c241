#include "status/status_json.h"

#include "shared_state/layout.h"

namespace gpuslice::status {
namespace {

using nlohmann::json;

template <class T>
json optional_json(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

// Negative indices mean "not known to this producer".
json index_json(int index) { return index >= 0 ? json(index) : json(nullptr); }

template <class T>
bool read_optional(const json& object, const char* key, std::optional<T>& out, std::string& error) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return true;
  try {
    out = it->get<T>();
    return true;
  } catch (const json::exception&) {
    error = std::string("member '") + key + "' has the wrong type";
    return false;
  }
}

template <class T>
bool read_required(const json& object, const char* key, T& out, std::string& error) {
  std::optional<T> value;
  if (!read_optional(object, key, value, error)) return false;
  if (!value) {
    error = std::string("member '") + key + "' is missing";
    return false;
  }
  out = *value;
  return true;
}

}  // namespace

json to_json(const ContainerStatus& s) {
  json devices = json::array();
  for (const DeviceStatus& d : s.devices) {
    devices.push_back({{"record", index_json(d.record)},
                       {"cuda_index", index_json(d.cuda_index)},
                       {"uuid", d.uuid},
                       {"gpu", optional_json(d.gpu)},
                       {"total_bytes", d.total_bytes},
                       {"quota_bytes", optional_json(d.quota_bytes)},
                       {"requested_quota_bytes", optional_json(d.requested_quota_bytes)},
                       {"quota_cap_bytes", optional_json(d.quota_cap_bytes)},
                       {"guarantee_bytes", optional_json(d.guarantee_bytes)},
                       {"used_bytes", d.used_bytes},
                       {"borrowed_bytes", d.borrowed_bytes},
                       {"on_host_bytes", d.on_host_bytes},
                       {"unmovable_bytes", unmovable_bytes(d)},
                       {"reclaim_episodes", d.reclaim_episodes},
                       {"reclaim_ns", d.reclaim_ns},
                       {"reclaim_bytes", d.reclaim_bytes},
                       {"compute_limit_percent", optional_json(d.compute_limit_percent)},
                       {"refused_allocations", d.refused_allocations},
                       {"busy_ns", optional_json(d.busy_ns)},
                       {"compute_utilization_ratio", optional_json(d.compute_utilization_ratio)},
                       {"refused_allocations_in_interval", optional_json(d.refused_in_interval)}});
  }
  json processes = json::array();
  for (const ProcessStatus& p : s.processes) {
    json per_device = json::array();
    for (const ProcessDeviceStatus& pd : p.devices) {
      per_device.push_back({{"record", index_json(pd.record)},
                            {"used_bytes", pd.used_bytes},
                            {"busy_ns", optional_json(pd.busy_ns)},
                            {"compute_share", optional_json(pd.compute_share)},
                            {"compute_utilization_ratio", optional_json(pd.compute_utilization_ratio)}});
    }
    processes.push_back({{"pid", p.pid},
                         {"host_pid", optional_json(p.host_pid)},
                         {"command", p.command},
                         {"devices", std::move(per_device)}});
  }
  return {
      {"schema_version", kSchemaVersion},
      {"id", optional_json(s.id)},
      {"path", optional_json(s.path)},
      {"pod",
       {{"namespace", optional_json(s.pod_namespace)},
        {"name", optional_json(s.pod_name)},
        {"container", optional_json(s.container_name)}}},
      {"layout_version", shm::layout::kLayoutVersion},
      {"has_state", s.has_state},
      {"error", optional_json(s.error)},
      {"limits", {{"memory", optional_json(s.memory_limit)}, {"compute", optional_json(s.compute_limit)}}},
      {"priority", optional_json(s.priority)},
      {"held_back_ns", s.held_back_ns},
      {"node_channel_refused", s.node_channel_refused},
      {"assigned_priority", optional_json(s.assigned_priority)},
      {"assignment_refused", s.assignment_refused},
      {"devices", std::move(devices)},
      {"processes", std::move(processes)}};
}

Result<ContainerStatus> container_from_json(const json& value) {
  if (!value.is_object()) return make_error("a container is not a JSON object");
  ContainerStatus s;
  std::string error;
  bool ok = read_optional(value, "id", s.id, error) && read_optional(value, "path", s.path, error) &&
            read_optional(value, "error", s.error, error) &&
            read_optional(value, "priority", s.priority, error);
  std::optional<std::uint64_t> held_back;
  ok = ok && read_optional(value, "held_back_ns", held_back, error);
  s.held_back_ns = held_back.value_or(0);
  std::optional<bool> channel_refused;
  ok = ok && read_optional(value, "node_channel_refused", channel_refused, error);
  s.node_channel_refused = channel_refused.value_or(false);
  ok = ok && read_optional(value, "assigned_priority", s.assigned_priority, error);
  std::optional<bool> assignment_refused;
  ok = ok && read_optional(value, "assignment_refused", assignment_refused, error);
  s.assignment_refused = assignment_refused.value_or(false);
  std::optional<bool> has_state;
  ok = ok && read_optional(value, "has_state", has_state, error);
  s.has_state = has_state.value_or(true);
  if (ok && value.contains("pod") && value["pod"].is_object()) {
    const json& pod = value["pod"];
    ok = read_optional(pod, "namespace", s.pod_namespace, error) &&
         read_optional(pod, "name", s.pod_name, error) &&
         read_optional(pod, "container", s.container_name, error);
  }
  if (ok && value.contains("limits") && value["limits"].is_object()) {
    const json& limits = value["limits"];
    ok = read_optional(limits, "memory", s.memory_limit, error) &&
         read_optional(limits, "compute", s.compute_limit, error);
  }
  if (!ok) return make_error(error);
  if (value.contains("devices")) {
    if (!value["devices"].is_array()) return make_error("member 'devices' is not an array");
    for (const json& dj : value["devices"]) {
      if (!dj.is_object()) return make_error("a device is not a JSON object");
      DeviceStatus d;
      std::optional<int> record, cuda_index;
      ok = read_optional(dj, "record", record, error) && read_optional(dj, "cuda_index", cuda_index, error) &&
           read_required(dj, "uuid", d.uuid, error) && read_optional(dj, "gpu", d.gpu, error) &&
           read_optional(dj, "quota_bytes", d.quota_bytes, error) &&
           read_optional(dj, "requested_quota_bytes", d.requested_quota_bytes, error) &&
           read_optional(dj, "quota_cap_bytes", d.quota_cap_bytes, error) &&
           read_optional(dj, "guarantee_bytes", d.guarantee_bytes, error) &&
           read_optional(dj, "compute_limit_percent", d.compute_limit_percent, error) &&
           read_optional(dj, "busy_ns", d.busy_ns, error) &&
           read_optional(dj, "compute_utilization_ratio", d.compute_utilization_ratio, error) &&
           read_optional(dj, "refused_allocations_in_interval", d.refused_in_interval, error);
      std::optional<std::uint64_t> total, used, refused, borrowed, on_host, episodes, reclaim_ns,
          reclaim_bytes;
      ok = ok && read_optional(dj, "total_bytes", total, error) &&
           read_optional(dj, "used_bytes", used, error) &&
           read_optional(dj, "refused_allocations", refused, error) &&
           read_optional(dj, "borrowed_bytes", borrowed, error) &&
           read_optional(dj, "on_host_bytes", on_host, error) &&
           read_optional(dj, "reclaim_episodes", episodes, error) &&
           read_optional(dj, "reclaim_ns", reclaim_ns, error) &&
           read_optional(dj, "reclaim_bytes", reclaim_bytes, error);
      if (!ok) return make_error("device: " + error);
      d.record = record.value_or(-1);
      d.cuda_index = cuda_index.value_or(-1);
      d.total_bytes = total.value_or(0);
      d.used_bytes = used.value_or(0);
      d.refused_allocations = refused.value_or(0);
      d.borrowed_bytes = borrowed.value_or(0);
      d.on_host_bytes = on_host.value_or(0);
      d.reclaim_episodes = episodes.value_or(0);
      d.reclaim_ns = reclaim_ns.value_or(0);
      d.reclaim_bytes = reclaim_bytes.value_or(0);
      s.devices.push_back(std::move(d));
    }
  }
  if (value.contains("processes")) {
    if (!value["processes"].is_array()) return make_error("member 'processes' is not an array");
    for (const json& pj : value["processes"]) {
      if (!pj.is_object()) return make_error("a process is not a JSON object");
      ProcessStatus p;
      ok = read_required(pj, "pid", p.pid, error) && read_optional(pj, "host_pid", p.host_pid, error);
      std::optional<std::string> command;
      ok = ok && read_optional(pj, "command", command, error);
      if (!ok) return make_error("process: " + error);
      p.command = command.value_or("");
      if (pj.contains("devices") && pj["devices"].is_array()) {
        for (const json& pdj : pj["devices"]) {
          if (!pdj.is_object()) return make_error("a process device is not a JSON object");
          ProcessDeviceStatus pd;
          std::optional<int> record;
          std::optional<std::uint64_t> used;
          ok = read_optional(pdj, "record", record, error) && read_optional(pdj, "used_bytes", used, error) &&
               read_optional(pdj, "busy_ns", pd.busy_ns, error) &&
               read_optional(pdj, "compute_share", pd.compute_share, error) &&
               read_optional(pdj, "compute_utilization_ratio", pd.compute_utilization_ratio, error);
          if (!ok) return make_error("process device: " + error);
          pd.record = record.value_or(-1);
          pd.used_bytes = used.value_or(0);
          p.devices.push_back(pd);
        }
      }
      s.processes.push_back(std::move(p));
    }
  }
  return s;
}

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace gpuslice::status
