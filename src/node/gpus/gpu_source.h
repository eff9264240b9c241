// GPU discovery and health. The daemon reads GPUs through NVML loaded at run time with dlopen, so the
// same binary runs against the real driver and against the simulated libnvidia-ml.so.1 in CI.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace gpuslice::node {

struct GpuInfo {
  unsigned index = 0;
  std::string uuid;
  std::string name;
  unsigned minor = 0;  // /dev/nvidia<minor>
  std::uint64_t memory_total_bytes = 0;
  std::uint64_t memory_used_bytes = 0;
  std::optional<unsigned> utilization_percent;  // absent where NVML does not support it
  bool healthy = true;
  std::string health_error;        // why it is unhealthy
  std::string driver_version;      // "580.159.04"; empty where NVML does not say
  std::string compute_capability;  // "9.0"; empty where NVML does not say
};

class GpuSource {
 public:
  virtual ~GpuSource() = default;
  // The current state of every GPU known at start. A GPU whose NVML calls fail stays in the list,
  // marked unhealthy, so the device plugin can report it instead of silently dropping it.
  virtual Result<std::vector<GpuInfo>> probe() = 0;
};

// Loads `library` (default libnvidia-ml.so.1, found through the usual dlopen search) and initialises
// NVML; fails with a message naming the library or the NVML error.
Result<std::unique_ptr<GpuSource>> open_nvml(const std::string& library = "libnvidia-ml.so.1");

// A source that returns what it is given; for tests and for nodes without NVML (--fake-gpus).
class StaticGpuSource final : public GpuSource {
 public:
  explicit StaticGpuSource(std::vector<GpuInfo> gpus) : gpus_(std::move(gpus)) {}
  Result<std::vector<GpuInfo>> probe() override { return gpus_; }
  void set(std::vector<GpuInfo> gpus) { gpus_ = std::move(gpus); }

 private:
  std::vector<GpuInfo> gpus_;
};

// --fake-gpus NxSIZE ("2x16Gi"): N identical GPUs of SIZE memory, 1 <= N <= 64, without NVML (demos,
// tests); fails with a message naming the flag.
Result<std::unique_ptr<GpuSource>> fake_gpu_source(const std::string& spec);

}  // namespace gpuslice::node
