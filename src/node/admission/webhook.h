// gpuslice-webhook: a mutating admission webhook (AdmissionReview admission.k8s.io/v1).
//   ai.compute/vram (HCS dialect, a byte quantity such as "16Gi"): the container gets LD_PRELOAD, the
//     quota in GPUSLICE_MEMORY_LIMIT (bytes), the library mounted read-only from the host, its own
//     emptyDir at /tmp/gpuslice with GPUSLICE_SHARED_DIR=/tmp/gpuslice/shared, a directory the library
//     makes in it (which gpuslice-node finds under the kubelet's pods directory), and the daemon's node
//     selector.
//   <domain>/vram, <domain>/cores (device plugin resources): the container gets LD_PRELOAD composed
//     with its own; quota variables and mounts come from the device plugin's Allocate, the only place
//     that knows which GPUs were picked.
// Other pods pass untouched. Malformed reviews are refused with a message saying what is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/priority.h"
#include "common/result.h"
#include "node/host/host_layout.h"

namespace gpuslice::node {

inline constexpr const char* kHcsVramResource = "ai.compute/vram";
inline constexpr const char* kInjectAnnotation = "gpuslice.io/inject";      // "false" opts a pod out
inline constexpr const char* kInjectedAnnotation = "gpuslice.io/injected";  // set on mutated pods
// high | normal | low: GPUSLICE_PRIORITY of the pod's gpuslice containers (docs/priority.md); high
// only where WebhookOptions::priority allows it. A pod's own GPUSLICE_PRIORITY is judged the same way.
inline constexpr const char* kPriorityAnnotation = "gpuslice.io/priority";
// A quantity ("4Gi"): GPUSLICE_MEMORY_GUARANTEE (bytes) of the pod's gpuslice containers, at most each
// one's memory limit (an ai.compute/vram container's is known here and checked; a device plugin
// container's is checked by the library against its limits file). Guarantees on one GPU never sum past
// its memory: the device plugin's vram units and the DRA driver see to that, not this webhook, which
// does not know the GPU a pod will get.
inline constexpr const char* kMemoryGuaranteeAnnotation = "gpuslice.io/memory-guarantee";
inline constexpr const char* kStateVolumePrefix = "gpuslice-state-";  // + c<i> / i<i>
inline constexpr const char* kLibraryVolume = "gpuslice-lib";

// Who may run at `high` (docs/priority.md): a pod in one of `high_namespaces`, or one whose
// PriorityClass `priority_classes` maps to high. A PriorityClass mapped to a level gives pods of that
// class that level when they name none. Anyone may ask for normal or low.
struct PriorityPolicy {
  std::vector<std::string> high_namespaces;
  std::map<std::string, Priority> priority_classes;
};
// "NS[,NS...]" for the namespaces; "CLASS=LEVEL[,CLASS=LEVEL...]" for the classes.
Result<std::vector<std::string>> parse_namespace_list(std::string_view text);
Result<std::map<std::string, Priority>> parse_priority_classes(std::string_view text);

struct WebhookOptions {
  std::string host_root = kDefaultRoot;  // the library is <host_root>/lib on every node
  std::string resource_domain = "gpuslice.io";
  PriorityPolicy priority;
  // Where gpuslice-node runs (its DaemonSet's nodeSelector): ai.compute/vram pods get these labels
  // in their nodeSelector, so they land only where <host_root>/lib exists.
  std::vector<std::pair<std::string, std::string>> node_selector;
};

struct WebhookReply {
  int http_status = 200;
  std::string body;  // JSON
};

// The API server sends a Pod as it will be stored (etcd refuses objects over 1.5 MiB by default).
inline constexpr std::size_t kMaxReviewBytes = std::size_t{4} << 20;

// Answers one AdmissionReview request body. Never throws and never recurses on the input's nesting:
// malformed, too deep (kMaxJsonDepth), too large (413) or duplicate-key bodies are refused.
WebhookReply review_admission(std::string_view body, const WebhookOptions& options);

}  // namespace gpuslice::node
