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

class SlicePublisher {
 public:
  SlicePublisher(PublisherOptions options, ApiClient& api);
  ~SlicePublisher();

  void set_gpus(std::vector<GpuInfo> gpus);  // wakes the loop when they changed
  void start();
  // Ends the loop at once (an API request in flight is cut off), then gives the Lease up so that
  // the next instance publishes without waiting for it to expire.
  void stop();
  // Gives the Lease up if this publisher holds it (holder emptied, duration 1 s).
  Result<bool> release_lease();
  // One round, synchronously (tests; the loop calls it too).
  Result<bool> round();
  PublisherStatus status() const;

  std::string lease_name() const;

 private:
  // Ends the loop (cutting off a request in flight); false when it was not running.
  bool halt();
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
  ApiClient& api_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<GpuInfo> gpus_;
  bool changed_ = false;
  bool stopping_ = false;
  PublisherStatus status_;
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
};

// RFC 3339 with microseconds, as metav1.MicroTime is written.
std::string micro_time(std::chrono::system_clock::time_point t);
std::optional<std::chrono::system_clock::time_point> parse_micro_time(const std::string& text);

}  // namespace gpuslice::node::dra
