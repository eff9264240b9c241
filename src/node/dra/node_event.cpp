#include "node/dra/node_event.h"

#include <cstdio>

#include "node/dra/api_client.h"

namespace gpuslice::node::dra {

nlohmann::json node_event_object(const NodeEvent& e) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(e.at.time_since_epoch()).count();
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, ".%llx", static_cast<unsigned long long>(ns));
  // An object name is at most 253 characters; a node's name may already be that long.
  std::string name = e.node.substr(0, 253 - std::string(suffix).size());
  while (!name.empty() && (name.back() == '-' || name.back() == '.'))
    name.pop_back();  // labels end alphanumeric
  name += suffix;
  const std::string when = rfc3339(e.at);
  nlohmann::json event = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"name", name}, {"namespace", kNodeEventNamespace}}},
      // The kubelet names its Node's uid by the node's name; `kubectl describe node` looks for that.
      {"involvedObject", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", e.node}, {"uid", e.node}}},
      {"type", e.type},
      {"reason", e.reason.substr(0, 128)},
      {"message", api_message(e.message, kMaxEventMessageChars - 8)},
      {"source", {{"component", kEventComponent}, {"host", e.node}}},
      {"firstTimestamp", when},
      {"lastTimestamp", when},
      {"count", 1}};
  if (!e.instance.empty()) {
    event["reportingComponent"] = kEventComponent;
    event["reportingInstance"] = api_message(e.instance, 120);
  }
  return event;
}

}  // namespace gpuslice::node::dra
