// What the ResourceSlice publisher reports about itself: its status (slice_publisher.h keeps it), the
// same as Prometheus text (gpuslice_dra_*) and as the "dra" object of GET /api/v1/status. Its own
// header, so that the node view carries it without the publisher's threads and API client.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "node/dra/resource_slice.h"

namespace gpuslice::node::dra {

struct PublisherStatus {
  bool leader = false;
  bool published = false;  // the slice on the server equals the GPUs we see
  std::uint64_t rounds = 0;
  std::uint64_t relists = 0;  // lists forced by 410 Gone
  // Whole-GPU devices and counters are published: false once the API server dropped their fields
  // (until the daemon restarts), or when SliceOptions::partitionable was off from the start.
  bool partitionable = true;
  SliceLayout layout = SliceLayout::SeparateCounters;  // the form the API server keeps
  bool layout_known = false;
  // Claims can be given fractions of a GPU as scheduled (false with SliceLayout::Exclusive).
  bool fractions_schedulable = true;
  // The layout is poorer than the one the operator asked for: why (the reason of the Event on the
  // Node, e.g. GpusliceFractionsNotEnforceable) and what it means. Empty while it is not.
  std::string degraded_reason;
  std::string degraded_message;
  std::uint64_t node_events = 0;  // Events written on the Node since the daemon started
  std::string node_event_error;   // why the last one could not be written (empty: it was)
  std::uint64_t generation = 0;   // the pool generation last written
  std::string error;              // the last round's failure (API text escaped and bounded)
  std::string cause;              // its kind, a metric label: lease, list, write-rejected, unreachable, ...
  std::uint64_t failures = 0;     // rounds that failed since the daemon started
  std::uint64_t consecutive_failures = 0;
  std::chrono::milliseconds next_wait{0};  // the wait before the next round after a failure
};

// The publisher's state as Prometheus text (gpuslice_dra_*), labelled with `node`.
std::string render_publisher_metrics(const PublisherStatus& status, const std::string& node);

// The "dra" object of GET /api/v1/status (docs/api.md).
nlohmann::json publisher_status_json(const PublisherStatus& status);

}  // namespace gpuslice::node::dra
