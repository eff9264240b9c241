// Which pod container holds which device plugin devices, from the kubelet's PodResources API v1
// (List on the kubelet's pod-resources socket, kDefaultPodResourcesSocket by default).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "node/kubelet_paths.h"

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
};

struct PodResourcesOptions {
  std::string socket = kDefaultPodResourcesSocket;
  std::chrono::milliseconds timeout{2000};
  std::size_t max_message_bytes = 16u << 20;  // a node with many pods and fine-grained vram ids
  std::string resource_prefix;                // keep only resources starting with this ("" = all)
};

class PodResourcesClient final : public AllocationLister {
 public:
  explicit PodResourcesClient(PodResourcesOptions options);
  ~PodResourcesClient() override;
  Result<std::vector<ListedDevices>> list() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::node
