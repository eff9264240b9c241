// What a container's node-channel records are believed at on Kubernetes: <root>/channel/<writer>.assigned
// (shared_state/node_channel.h; its one format, writer and parser are assignment_file.h), beside the
// writer directory the device plugin makes for every vram and cores allocation. Allocate writes
// `priority=normal`, the compute shares of a cores allocation and which allocation the writer is (a
// comment the channel's readers skip). Allocate does not know the pod; the daemon learns it from the
// kubelet's PodResources answer and then rewrites the level to the one the operator's policy gives
// the pod (docs/priority.md): `high` only for a pod in one of
// --priority-high-namespaces or of a PriorityClass --priority-classes maps to high, `normal` for
// every other. The policy is applied here again, from what the kubelet and the API server say about
// the pod; nothing the pod's author writes (an annotation, an environment variable) is read, so a
// pod that never went through the webhook cannot raise its level by naming one.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/priority.h"
#include "common/result.h"
#include "node/admission/webhook.h"
#include "node/host/assignment_file.h"
#include "node/kubelet/podresources.h"

namespace gpuslice::node {

// The highest level the policy lets a pod container run at: high in an allowed namespace or for a
// PriorityClass mapped to high, else normal (anyone may ask for normal or low). `priority_class`
// is the pod's spec.priorityClassName, nullopt when it could not be learnt.
Priority allowed_priority(const PodContainer& owner, const std::optional<std::string>& priority_class,
                          const PriorityPolicy& policy);

// The pod's spec.priorityClassName ("" for none), or an error when it cannot be learnt now.
using PriorityClassLookup = std::function<Result<std::string>(const std::string& ns, const std::string& pod)>;

struct ReconcileOutcome {
  std::size_t attributed = 0;  // writers whose allocation the kubelet lists
  std::size_t rewritten = 0;   // assignment files changed
  std::size_t errors = 0;      // files that could not be read or written
};

// Brings every <writer>.assigned in `channel_dir` whose allocation `listed` names to the level the
// policy gives its pod container. A container holding vram and cores has two writer directories (one
// per allocation; the kubelet hands it the environment of one of them): both get the same level and
// the union of their compute shares, so whichever it writes in is believed alike. A pod whose
// PriorityClass matters and cannot be learnt (`classes` empty or failing) keeps its current level
// unless its namespace alone allows high. Writers the kubelet does not list are left alone; those it
// lists are kept from the channel's garbage collection (a container without records is alive too).
ReconcileOutcome reconcile_assignments(const std::string& channel_dir,
                                       const std::vector<ListedDevices>& listed, const PriorityPolicy& policy,
                                       const PriorityClassLookup& classes);

}  // namespace gpuslice::node
