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
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "node/dra/api_client.h"
#include "node/dra/resource_slice.h"

namespace gpuslice::node::dra {

struct PublisherOptions {
  SliceOptions slice;
  std::string lease_namespace = "gpuslice-system";
  std::string identity;  // holderIdentity: the pod name (or host name and pid)
  std::chrono::seconds lease_duration{15};
  std::chrono::milliseconds retry{2000};  // between rounds when not leading or after an error
};

struct PublisherStatus {
  bool leader = false;
  bool published = false;  // the slice on the server equals the GPUs we see
  std::uint64_t rounds = 0;
  std::uint64_t relists = 0;  // lists forced by 410 Gone
  // Whole-GPU devices and counters are published: false once the API server dropped their fields
  // (until the daemon restarts), or when SliceOptions::partitionable was off from the start.
  bool partitionable = true;
  std::string error;  // the last round's failure
};

class SlicePublisher {
 public:
  SlicePublisher(PublisherOptions options, ApiClient& api);
  ~SlicePublisher();

  void set_gpus(std::vector<GpuInfo> gpus);  // wakes the loop when they changed
  void start();
  void stop();
  // One round, synchronously (tests; the loop calls it too).
  Result<bool> round();
  PublisherStatus status() const;

  std::string lease_name() const;

 private:
  Result<bool> hold_lease();
  Result<bool> create_lease(const std::string& path, nlohmann::json spec);
  Result<ApiResponse> replace_slice(const std::string& name, nlohmann::json slice);
  Result<std::string> reconcile_slices();  // returns the list's resourceVersion
  void loop();

  PublisherOptions options_;
  ApiClient& api_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<GpuInfo> gpus_;
  bool changed_ = false;
  bool stopping_ = false;
  PublisherStatus status_;
  std::uint64_t generation_ = 1;
  std::thread thread_;
};

// RFC 3339 with microseconds, as metav1.MicroTime is written.
std::string micro_time(std::chrono::system_clock::time_point t);
std::optional<std::chrono::system_clock::time_point> parse_micro_time(const std::string& text);

}  // namespace gpuslice::node::dra
