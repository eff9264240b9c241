// A Kubernetes Event about this node (core/v1, involvedObject = the Node), as `kubectl describe node`
// and `kubectl get events` show it. The core/v1 form without eventTime is the one every API server
// from 1.20 on accepts; an Event about a cluster-scoped object must live in namespace "default"
// (or carry none), as the kubelet's own node events do.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace gpuslice::node::dra {

inline constexpr const char* kNodeEventNamespace = "default";
inline constexpr const char* kNodeEventsPath = "/api/v1/namespaces/default/events";
inline constexpr const char* kEventComponent = "gpuslice-dra";
inline constexpr std::size_t kMaxEventMessageChars = 1024;  // events.k8s.io's bound on a note

struct NodeEvent {
  std::string node;      // the Node's name
  std::string type;      // "Warning" or "Normal"
  std::string reason;    // UpperCamelCase, at most 128 characters
  std::string message;   // escaped and cut to kMaxEventMessageChars
  std::string instance;  // the daemon that reports it (the pod name)
  std::chrono::system_clock::time_point at;
};

// The Event object to POST to kNodeEventsPath. Its name is "<node>.<time in ns, hex>", as client-go
// names events, so a create retried after a lost answer is refused (409) rather than doubled.
nlohmann::json node_event_object(const NodeEvent& event);

}  // namespace gpuslice::node::dra
