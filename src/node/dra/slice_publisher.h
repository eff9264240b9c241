// Keeps this node's ResourceSlices (resource_slice.h) equal to the GPUs the daemon sees, and only while it
// holds the node's Lease (coordination.k8s.io/v1, "gpuslice-dra-<node>"): two daemons on one node (a rolling
// update, a second install) never write the same slice in turn. Each round lists the driver's
// slices of this node, creates, updates (optimistically, with resourceVersion) or deletes what
// differs, then watches them from the listed resourceVersion until something changes, the lease
// is due for renewal, or the server answers 410 Gone (the next round lists again).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "node/dra/api_client.h"
#include "node/dra/publisher_status.h"
#include "node/dra/resource_slice.h"

namespace gpuslice::node::dra {

struct PublisherOptions {
  SliceOptions slice;
  std::string lease_namespace = "gpuslice-system";
  std::string identity;  // holderIdentity: the pod name (or host name and pid)
  std::chrono::seconds lease_duration{15};
  std::chrono::milliseconds retry{2000};  // between rounds when not leading; first wait after an error
  std::chrono::milliseconds max_backoff{300000};  // waits after errors double up to this
};

// How long a stopping publisher gives the release of its Lease: the daemon exits within a second.
inline constexpr std::chrono::milliseconds kLeaseReleaseBudget{600};

class SlicePublisher {
 public:
  // Requests go through a client of the publisher's own with `api`'s options: cutting off the
  // publisher's watch when it stops does not cut off a claim's prepare in flight on `api`.
  SlicePublisher(PublisherOptions options, ApiClient& api);
  ~SlicePublisher();

  void set_gpus(std::vector<GpuInfo> gpus);  // wakes the loop when they changed
  void start();
  // The first step of a stop, returning at once: the loop ends (its request in flight is cut off,
  // none starts after) and the Lease is given up on a thread and a connection of its own, so that
  // neither waits for the other, for the loop, or for the caller's other steps.
  void begin_stop();
  // begin_stop() if it was not called, then waits for the loop and the release (within
  // kLeaseReleaseBudget) so that the next instance publishes without waiting for the Lease to expire.
  void stop();
  // Gives the Lease up if this publisher holds it (holder emptied, duration 1 s), within `budget`:
  // one write of the Lease as this publisher last wrote it, and only when that write is refused
  // because the Lease changed since (a renewal in flight landed), one read and one write more.
  Result<bool> release_lease(std::chrono::milliseconds budget = kLeaseReleaseBudget);
  // One round, synchronously (tests; the loop calls it too).
  Result<bool> round();
  PublisherStatus status() const;

  std::string lease_name() const;

 private:
  // Ends the loop (cutting off a request in flight) and waits for it and for the release begun by
  // begin_stop (the destructor's way: it gives nothing up by itself).
  void halt();
  Result<bool> hold_lease();
  Result<bool> create_lease(const std::string& path, nlohmann::json spec);
  Result<ApiResponse> replace_slice(const std::string& name, nlohmann::json slice);
  // The richest layout the server keeps whole, by dry-run creates that store nothing.
  Result<SliceLayout> detect_layout(const std::vector<GpuInfo>& gpus);
  Result<std::string> reconcile_slices();  // returns the list's resourceVersion
  // Says once per change what the detected layout costs: a log line, the status, an Event on the Node.
  void announce_layout(SliceLayout layout, const std::vector<GpuInfo>& gpus);
  Error fail(const char* cause, std::string message);
  void loop();

  PublisherOptions options_;
  ApiClient api_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<GpuInfo> gpus_;
  bool changed_ = false;
  bool stopping_ = false;
  PublisherStatus status_;
  // The Lease as the server answered this publisher's last write of it while leading (null when
  // not leading): what release_lease() writes back without reading it first.
  nlohmann::json held_lease_;
  std::string cause_;  // of the error being returned (set by fail)
  // The last write attempt: its content and generation, reused while the same content is retried
  // so that failing rounds do not churn the pool's generation.
  std::string attempt_digest_;
  std::uint64_t attempt_generation_ = 0;
  // The layout last logged and the cause of the last Event on the Node ("" = none, or restored):
  // the publisher's thread only.
  std::optional<SliceLayout> announced_layout_;
  std::string announced_reason_;
  std::thread thread_;
  std::thread release_thread_;            // begin_stop's release of the Lease
  std::optional<Result<bool>> released_;  // its outcome, once release_thread_ is joined
};

// RFC 3339 with microseconds, as metav1.MicroTime is written.
std::string micro_time(std::chrono::system_clock::time_point t);
std::optional<std::chrono::system_clock::time_point> parse_micro_time(const std::string& text);

}  // namespace gpuslice::node::dra
