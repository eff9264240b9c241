// Which pod container holds which device plugin devices, from the kubelet's PodResources API v1
// (List on the kubelet's pod-resources socket, kDefaultPodResourcesSocket by default).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "node/kubelet/kubelet_paths.h"

namespace gpuslice::node {

struct PodContainer {
  std::string namespace_name;
  std::string pod;
  std::string container;
};

// One resource's devices of one container, as the kubelet lists them.
struct ListedDevices {
  std::string resource;  // "gpuslice.io/vram"
  std::vector<std::string> device_ids;
  PodContainer owner;
};

// What the collector asks; tests substitute their own.
class AllocationLister {
 public:
  virtual ~AllocationLister() = default;
  virtual Result<std::vector<ListedDevices>> list() = 0;
  // Which kubelet answered the last list() (its socket's inode): a new value means the kubelet
  // restarted, and a restarted kubelet may list no pods until it has heard from the API server.
  // 0 = unknown (never changes).
  virtual std::uint64_t kubelet_instance() const { return 0; }
};

struct PodResourcesOptions {
  std::string socket = kDefaultPodResourcesSocket;
  std::chrono::milliseconds timeout{2000};
  std::size_t max_message_bytes = 16u << 20;  // a node with many pods and fine-grained vram ids
  std::string resource_prefix;                // keep only resources starting with this ("" = all)
};

// The devices of resources starting with `resource_prefix` in a serialized ListPodResourcesResponse,
// read without decoding the rest: memory stays bounded by what is kept (bounded counts, names of at
// most 1 KiB), whatever the answer holds. Errors on malformed bytes or a bound exceeded.
Result<std::vector<ListedDevices>> parse_list_response(std::string_view bytes,
                                                       const std::string& resource_prefix);

class PodResourcesClient final : public AllocationLister {
 public:
  explicit PodResourcesClient(PodResourcesOptions options);
  ~PodResourcesClient() override;
  Result<std::vector<ListedDevices>> list() override;
  std::uint64_t kubelet_instance() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::node
