#include "node/admission/webhook.h"

#include <openssl/evp.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/escape.h"
#include "common/log.h"
#include "config/priority.h"
#include "config/text_util.h"
#include "node/admission/quantity.h"
#include "node/http/untrusted_json.h"

namespace gpuslice::node {
namespace {

using nlohmann::json;

const json* member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// Whether `list` (absent or not a list: no) holds an object whose `key` equals `value`.
bool lists(const json* list, const char* key, const json& value) {
  if (!list || !list->is_array()) return false;
  for (const auto& item : *list) {
    const json* v = member(item, key);
    if (v && *v == value) return true;
  }
  return false;
}

// Patch operations appending `items` to the list at `path`, creating it where it is absent.
void append_to_list(json& patch, const std::string& path, const json* existing,
                    const std::vector<json>& items) {
  if (!existing || existing->is_null()) {
    if (!items.empty()) patch.push_back({{"op", "add"}, {"path", path}, {"value", items}});
  } else {
    for (const auto& item : items) patch.push_back({{"op", "add"}, {"path", path + "/-"}, {"value", item}});
  }
}

std::string base64(std::string_view data) {
  std::string out(4 * ((data.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(data.data()), static_cast<int>(data.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// JSON Pointer escaping of one reference token (RFC 6901).
std::string pointer_token(std::string_view token) {
  return text::escape_chars(token, {{'~', "~0"}, {'/', "~1"}});
}

using config::detail::printable;

WebhookReply structural_error(const std::string& message, int status = 400) {
  GS_LOG(Warn, "webhook: rejected malformed AdmissionReview: %s", printable(message, 256).c_str());
  return {status, json_text(json{{"error", "gpuslice-webhook: " + message}})};
}

json review_envelope(json response) {
  return {
      {"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"response", std::move(response)}};
}

WebhookReply allow(const std::string& uid) {
  return {200, json_text(review_envelope({{"uid", uid}, {"allowed", true}}))};
}

WebhookReply deny(const std::string& uid, const std::string& message) {
  // Both come from the request: escaped, so that they cannot forge log lines.
  GS_LOG(Warn, "webhook: denied %s: %s", printable(uid, 64).c_str(), printable(message, 256).c_str());
  json status = {
      {"code", 400}, {"reason", "BadRequest"}, {"status", "Failure"}, {"message", "gpuslice: " + message}};
  return {200, json_text(review_envelope({{"uid", uid}, {"allowed", false}, {"status", std::move(status)}}))};
}

struct ContainerNeeds {
  std::optional<std::uint64_t> hcs_bytes;  // ai.compute/vram
  bool device_plugin = false;              // <domain>/vram or <domain>/cores
  std::optional<std::string> priority;     // the pod's level, as the policy allowed it
  std::optional<std::uint64_t> guarantee;  // bytes, the pod's kMemoryGuaranteeAnnotation
  // The level the operator's policy gives the pod when it asks for none (what the daemon assigns):
  // written in place of a GPUSLICE_PRIORITY the container might take from envFrom, unjudged.
  std::string policy_level = "normal";
};

// Whether an envFrom entry (a ConfigMap's or Secret's keys, under its prefix) can define `name`.
bool env_from_may_define(const json& container, std::string_view name) {
  const json* sources = member(container, "envFrom");
  if (!sources || !sources->is_array()) return false;
  for (const json& source : *sources) {
    const json* prefix = member(source, "prefix");
    const std::string p = prefix && prefix->is_string() ? prefix->get<std::string>() : "";
    if (name.substr(0, p.size()) == p) return true;
  }
  return false;
}

// Reads one resource of a container from limits, else requests (extended resources must agree).
std::optional<std::string> read_resource(const json& container, const std::string& name, std::string& error) {
  const json* resources = member(container, "resources");
  for (const char* section : {"limits", "requests"}) {
    const json* values = resources ? member(*resources, section) : nullptr;
    const json* value = values ? member(*values, name.c_str()) : nullptr;
    if (!value) continue;
    if (value->is_string()) return value->get<std::string>();
    if (value->is_number_unsigned()) return std::to_string(value->get<std::uint64_t>());
    error = "resources." + std::string(section) + "[\"" + name + "\"] must be a quantity string";
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> container_needs(const json& container, const std::string& where,
                                           const WebhookOptions& options, ContainerNeeds& needs) {
  std::string error;
  if (auto text = read_resource(container, kHcsVramResource, error)) {
    auto bytes = parse_quantity(*text);
    if (!bytes) return where + ": " + kHcsVramResource + ": " + bytes.error();
    if (*bytes == 0) return where + ": " + kHcsVramResource + " must be greater than zero";
    needs.hcs_bytes = *bytes;
  }
  if (!error.empty()) return where + ": " + error;
  for (const char* suffix : {"vram", "cores"}) {
    const std::string name = options.resource_domain + "/" + suffix;
    if (auto text = read_resource(container, name, error)) {
      auto count = parse_quantity(*text);
      if (!count) return where + ": " + name + ": " + count.error();
      if (*count == 0) return where + ": " + name + " must be a positive whole number of devices";
      needs.device_plugin = true;
    }
    if (!error.empty()) return where + ": " + error;
  }
  if (needs.hcs_bytes && needs.device_plugin) {
    return where + " requests both " + kHcsVramResource + " and " + options.resource_domain +
           "/vram|cores; use one of them";
  }
  if (needs.guarantee && needs.hcs_bytes && *needs.guarantee > *needs.hcs_bytes) {
    return std::string("annotation ") + kMemoryGuaranteeAnnotation + " (" + std::to_string(*needs.guarantee) +
           " bytes) is above " + where + "'s " + kHcsVramResource + " (" + std::to_string(*needs.hcs_bytes) +
           " bytes): a guarantee is at most the limit";
  }
  return std::nullopt;
}

bool preload_has(std::string_view value, std::string_view library) {
  // ld.so separates LD_PRELOAD entries with ':' or spaces.
  std::size_t start = 0;
  while (start <= value.size()) {
    std::size_t end = value.find_first_of(": ", start);
    if (end == std::string_view::npos) end = value.size();
    if (value.substr(start, end - start) == library) return true;
    start = end + 1;
  }
  return false;
}

// Adds the env, mount and volume operations for one container to `patch`.
std::optional<std::string> mutate_container(const json& container, const std::string& path,
                                            const std::string& where, const ContainerNeeds& needs,
                                            const std::string& state_volume, json& patch,
                                            std::vector<std::string>& warnings) {
  const std::string library = std::string(kContainerLibrary);
  const json* env = member(container, "env");
  if (env && !env->is_array() && !env->is_null()) return where + ": env is not a list";

  std::vector<json> wanted;
  std::string preload = library;
  if (env && env->is_array()) {
    for (const auto& var : *env) {
      const json* name = member(var, "name");
      if (!name || !name->is_string() || name->get<std::string>() != "LD_PRELOAD") continue;
      if (member(var, "valueFrom")) {
        return where + " sets LD_PRELOAD from valueFrom; gpuslice cannot prepend its library to it";
      }
      const json* value = member(var, "value");
      std::string existing = value && value->is_string() ? value->get<std::string>() : "";
      preload = preload_has(existing, library) ? existing
                : existing.empty()             ? library
                                               : library + ":" + existing;
    }
  }
  wanted.push_back({{"name", "LD_PRELOAD"}, {"value", preload}});
  // The pod's own GPUSLICE_PRIORITY is replaced by the level the policy allowed (the same one the
  // pod's annotation or its own variable asked for).
  if (needs.hcs_bytes) {
    wanted.push_back({{"name", "GPUSLICE_MEMORY_LIMIT"}, {"value", std::to_string(*needs.hcs_bytes)}});
    // In the emptyDir below: without it the library keeps its state in /tmp/gpuslice-<uid>, which the
    // daemon never sees. One level down: the kubelet makes the emptyDir itself 0777 without the sticky
    // bit, which the library refuses (host_layout.h).
    wanted.push_back({{"name", "GPUSLICE_SHARED_DIR"},
                      {"value", std::string(kContainerSharedDir) + "/" + kEmptyDirSharedSubdir}});
  }
  if (needs.guarantee) {
    wanted.push_back({{"name", "GPUSLICE_MEMORY_GUARANTEE"}, {"value", std::to_string(*needs.guarantee)}});
  }
  if (needs.priority) {
    wanted.push_back({{"name", "GPUSLICE_PRIORITY"}, {"value", *needs.priority}});
  } else if (env_from_may_define(container, "GPUSLICE_PRIORITY")) {
    // A ConfigMap or Secret may carry a GPUSLICE_PRIORITY nobody judged: an explicit one wins over it.
    wanted.push_back({{"name", "GPUSLICE_PRIORITY"}, {"value", needs.policy_level}});
    warnings.push_back(
        where + " takes environment from envFrom, whose GPUSLICE_PRIORITY cannot be checked: " + "set to " +
        needs.policy_level + " (the operator's level for this pod); ask with the " + "annotation " +
        std::string(kPriorityAnnotation) + " instead");
  }

  if (!env || env->is_null()) {
    patch.push_back({{"op", "add"}, {"path", path + "/env"}, {"value", wanted}});
  } else {
    for (const auto& var : wanted) {
      std::optional<std::size_t> at;
      for (std::size_t j = 0; j < env->size(); ++j) {
        const json* name = member((*env)[j], "name");
        if (name && name->is_string() && *name == var["name"]) at = j;
      }
      if (at) {
        patch.push_back({{"op", "replace"}, {"path", path + "/env/" + std::to_string(*at)}, {"value", var}});
      } else {
        patch.push_back({{"op", "add"}, {"path", path + "/env/-"}, {"value", var}});
      }
    }
  }

  if (!needs.hcs_bytes) return std::nullopt;
  std::vector<json> mounts = {
      {{"name", kLibraryVolume}, {"mountPath", kContainerLibraryDir}, {"readOnly", true}},
      {{"name", state_volume}, {"mountPath", kContainerSharedDir}},
  };
  const json* existing = member(container, "volumeMounts");
  if (existing && !existing->is_array() && !existing->is_null())
    return where + ": volumeMounts is not a list";
  std::vector<json> to_add;
  for (const auto& mount : mounts) {
    if (lists(existing, "mountPath", mount["mountPath"])) {
      warnings.push_back(where + " already mounts " + mount["mountPath"].get<std::string>() +
                         "; left as it is");
    } else {
      to_add.push_back(mount);
    }
  }
  append_to_list(patch, path + "/volumeMounts", existing, to_add);
  return std::nullopt;
}

}  // namespace

Result<std::vector<std::string>> parse_namespace_list(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item =
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    if (item.empty() || item.size() > 63) return make_error("expected namespace names separated by commas");
    for (char c : item) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
        return make_error("namespace '" + printable(std::string(item), 64) + "' is not a namespace name");
    }
    out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<std::map<std::string, Priority>> parse_priority_classes(std::string_view text) {
  std::map<std::string, Priority> out;
  std::size_t start = 0;
  while (!text.empty()) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item =
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return make_error("expected CLASS=LEVEL pairs separated by commas (LEVEL: high, normal or low)");
    const auto level = priority_from_name(item.substr(eq + 1));
    if (!level)
      return make_error("'" + printable(std::string(item), 64) + "': the level must be high, normal or low");
    out[std::string(item.substr(0, eq))] = *level;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

namespace {

// The level the pod's gpuslice containers claim: its annotation, else its own GPUSLICE_PRIORITY
// (every container's, which must agree), else its PriorityClass's; high only where the policy
// allows it. An error denies the pod.
Result<std::optional<Priority>> pod_priority(const json& pod, const json* annotations, const json* request,
                                             const PriorityPolicy& policy, Priority* policy_level) {
  const json* spec = member(pod, "spec");
  const json* metadata = member(pod, "metadata");
  std::string ns;
  for (const json* holder : {request, metadata}) {
    const json* value = holder ? member(*holder, "namespace") : nullptr;
    if (value && value->is_string() && ns.empty()) ns = value->get<std::string>();
  }
  const json* class_value = spec ? member(*spec, "priorityClassName") : nullptr;
  const std::string klass = class_value && class_value->is_string() ? class_value->get<std::string>() : "";
  const auto mapped = policy.priority_classes.find(klass);
  const std::optional<Priority> class_level =
      mapped != policy.priority_classes.end() ? std::optional<Priority>(mapped->second) : std::nullopt;

  const bool allowed_ns = std::find(policy.high_namespaces.begin(), policy.high_namespaces.end(), ns) !=
                          policy.high_namespaces.end();
  *policy_level = allowed_ns ? Priority::High : class_level.value_or(Priority::Normal);
  std::optional<Priority> level;
  std::string source;
  if (const json* value = annotations ? member(*annotations, kPriorityAnnotation) : nullptr) {
    source = std::string("annotation ") + kPriorityAnnotation;
    if (!value->is_string()) return make_error(source + " must be a string: high, normal or low");
    auto parsed = config::parse_priority(value->get<std::string>());
    if (!parsed)
      return make_error(source + " \"" + printable(value->get<std::string>(), 64) + "\": " + parsed.error());
    level = *parsed;
  }
  for (const char* list : {"initContainers", "containers"}) {
    const json* containers = spec ? member(*spec, list) : nullptr;
    if (!containers || !containers->is_array()) continue;
    for (const json& container : *containers) {
      const json* env = member(container, "env");
      if (!env || !env->is_array()) continue;
      for (const json& var : *env) {
        const json* name = member(var, "name");
        if (!name || !name->is_string() || *name != "GPUSLICE_PRIORITY") continue;
        if (member(var, "valueFrom"))
          return make_error("GPUSLICE_PRIORITY from valueFrom cannot be checked; set the annotation " +
                            std::string(kPriorityAnnotation) + " instead");
        const json* value = member(var, "value");
        auto parsed = config::parse_priority(value && value->is_string() ? value->get<std::string>() : "");
        if (!parsed) return make_error("GPUSLICE_PRIORITY: " + parsed.error());
        if (!level) {
          level = *parsed;
          source = "GPUSLICE_PRIORITY";
        } else if (*level != *parsed && source == "GPUSLICE_PRIORITY") {
          return make_error("the containers' GPUSLICE_PRIORITY values disagree; set the annotation " +
                            std::string(kPriorityAnnotation) + " instead");
        }
      }
    }
  }
  if (!level && class_level) {
    level = class_level;
    source = "PriorityClass " + printable(klass, 64);
  }
  if (level != Priority::High) return level;
  if (allowed_ns || class_level == Priority::High) return level;
  return make_error(
      source + " asks for high priority, which namespace \"" + printable(ns, 64) +
      "\" may not have (the operator allows it by namespace or PriorityClass; docs/priority.md)");
}

}  // namespace

WebhookReply review_admission(std::string_view body, const WebhookOptions& options) {
  if (body.size() > kMaxReviewBytes) {
    return structural_error("request body is larger than " + std::to_string(kMaxReviewBytes) + " bytes", 413);
  }
  json review;
  if (auto err = parse_untrusted_json(body, review)) return structural_error("request body: " + *err);
  if (!review.is_object()) return structural_error("request body is not a JSON object");
  const json* api_version = member(review, "apiVersion");
  const json* kind = member(review, "kind");
  if (!api_version || *api_version != "admission.k8s.io/v1" || !kind || *kind != "AdmissionReview") {
    return structural_error(
        "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got " +
        (api_version ? printable(json_text(*api_version), 64) : std::string("no apiVersion")) + " / " +
        (kind ? printable(json_text(*kind), 64) : std::string("no kind")));
  }
  const json* request = member(review, "request");
  if (!request || !request->is_object()) return structural_error("AdmissionReview has no request object");
  const json* uid_value = member(*request, "uid");
  if (!uid_value || !uid_value->is_string() || uid_value->get<std::string>().empty()) {
    return structural_error("request.uid is missing or empty");
  }
  const std::string uid = uid_value->get<std::string>();

  const json* request_kind = member(*request, "kind");
  const json* kind_name = request_kind ? member(*request_kind, "kind") : nullptr;
  const json* operation = member(*request, "operation");
  if (!kind_name || *kind_name != "Pod") return allow(uid);  // only pods are ours
  if (operation && operation->is_string() && *operation != "CREATE") return allow(uid);

  const json* pod = member(*request, "object");
  if (!pod || !pod->is_object()) return deny(uid, "request.object is missing or not a Pod object");
  const json* metadata = member(*pod, "metadata");
  const json* annotations = metadata ? member(*metadata, "annotations") : nullptr;
  if (annotations && annotations->is_object()) {
    const json* opt = member(*annotations, kInjectAnnotation);
    if (opt && *opt == "false") return allow(uid);
    const json* done = member(*annotations, kInjectedAnnotation);
    if (done && *done == "true") return allow(uid);  // reinvocation: already mutated
  }
  // The level applies to every container gpuslice manages in the pod; a bad or forbidden one denies
  // the pod.
  std::optional<std::string> priority;
  Priority policy_level = Priority::Normal;
  auto level = pod_priority(*pod, annotations && annotations->is_object() ? annotations : nullptr, request,
                            options.priority, &policy_level);
  if (!level) return deny(uid, level.error());
  if (*level) priority = priority_name(**level);
  std::optional<std::uint64_t> guarantee;
  if (const json* value = annotations && annotations->is_object()
                              ? member(*annotations, kMemoryGuaranteeAnnotation)
                              : nullptr) {
    const std::string source = std::string("annotation ") + kMemoryGuaranteeAnnotation;
    if (!value->is_string()) return deny(uid, source + " must be a quantity string such as \"4Gi\"");
    auto bytes = parse_quantity(value->get<std::string>());
    if (!bytes)
      return deny(uid, source + " \"" + printable(value->get<std::string>(), 64) + "\": " + bytes.error());
    if (*bytes == 0) return deny(uid, source + " must be greater than zero");
    guarantee = *bytes;
  }
  const json* spec = member(*pod, "spec");
  if (!spec || !spec->is_object()) return deny(uid, "pod has no spec");

  json patch = json::array();
  std::vector<std::string> warnings;
  std::vector<std::string> state_volumes;
  bool mutated = false;
  for (const char* list : {"initContainers", "containers"}) {
    const json* containers = member(*spec, list);
    if (!containers || containers->is_null()) continue;
    if (!containers->is_array()) return deny(uid, std::string("spec.") + list + " is not a list");
    for (std::size_t i = 0; i < containers->size(); ++i) {
      const json& container = (*containers)[i];
      if (!container.is_object())
        return deny(uid, std::string("spec.") + list + "[" + std::to_string(i) + "] is not an object");
      const json* name = member(container, "name");
      const std::string where =
          "container \"" + (name && name->is_string() ? name->get<std::string>() : "?") + "\"";
      ContainerNeeds needs;
      needs.priority = priority;
      needs.guarantee = guarantee;
      needs.policy_level = priority_name(policy_level);
      if (auto err = container_needs(container, where, options, needs)) return deny(uid, *err);
      if (!needs.hcs_bytes && !needs.device_plugin) continue;
      const std::string volume =
          std::string(kStateVolumePrefix) + (list[0] == 'i' ? "i" : "c") + std::to_string(i);
      const std::string path = std::string("/spec/") + list + "/" + std::to_string(i);
      if (auto err = mutate_container(container, path, where, needs, volume, patch, warnings))
        return deny(uid, *err);
      if (needs.hcs_bytes) state_volumes.push_back(volume);
      mutated = true;
    }
  }
  if (!mutated) return allow(uid);

  if (!state_volumes.empty()) {
    std::vector<json> volumes = {
        {{"name", kLibraryVolume},
         {"hostPath", {{"path", options.host_root + "/lib"}, {"type", "Directory"}}}}};
    for (const auto& v : state_volumes) volumes.push_back({{"name", v}, {"emptyDir", json::object()}});
    const json* existing = member(*spec, "volumes");
    if (existing && !existing->is_array() && !existing->is_null())
      return deny(uid, "spec.volumes is not a list");
    std::vector<json> to_add;
    for (const auto& v : volumes) {
      if (!lists(existing, "name", v["name"])) to_add.push_back(v);
    }
    append_to_list(patch, "/spec/volumes", existing, to_add);
    // The library's hostPath exists only where gpuslice-node runs: schedule the pod there.
    const json* selector = member(*spec, "nodeSelector");
    if (selector && !selector->is_object() && !selector->is_null())
      return deny(uid, "spec.nodeSelector is not an object");
    json wanted = json::object();
    for (const auto& [key, value] : options.node_selector) {
      const json* have = selector && selector->is_object() ? member(*selector, key.c_str()) : nullptr;
      if (have && *have != value) {
        return deny(uid, "spec.nodeSelector " + key + "=" + printable(json_text(*have), 64) +
                             " excludes the nodes gpuslice runs on (" + key + "=" + value + ")");
      }
      if (!have) wanted[key] = value;
    }
    if (!wanted.empty() && (!selector || selector->is_null())) {
      patch.push_back({{"op", "add"}, {"path", "/spec/nodeSelector"}, {"value", wanted}});
    } else {
      for (const auto& [key, value] : wanted.items())
        patch.push_back(
            {{"op", "add"}, {"path", "/spec/nodeSelector/" + pointer_token(key)}, {"value", value}});
    }
  }
  if (!metadata || !metadata->is_object()) {
    patch.push_back({{"op", "add"},
                     {"path", "/metadata"},
                     {"value", {{"annotations", {{kInjectedAnnotation, "true"}}}}}});
  } else if (!annotations || annotations->is_null()) {
    patch.push_back(
        {{"op", "add"}, {"path", "/metadata/annotations"}, {"value", {{kInjectedAnnotation, "true"}}}});
  } else {
    patch.push_back({{"op", "add"},
                     {"path", "/metadata/annotations/" + pointer_token(kInjectedAnnotation)},
                     {"value", "true"}});
  }

  json response = {
      {"uid", uid}, {"allowed", true}, {"patchType", "JSONPatch"}, {"patch", base64(json_text(patch))}};
  if (!warnings.empty()) response["warnings"] = warnings;
  return {200, json_text(review_envelope(std::move(response)))};
}

}  // namespace gpuslice::node
