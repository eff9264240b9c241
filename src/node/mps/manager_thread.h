// The manager on its own thread, for gpuslice-node --mps: ticks every `period`, stops (quitting the
// daemon) when stopped or destroyed; report() is what the collector publishes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "node/mps/manager.h"

namespace gpuslice::node::mps {

// gpuslice-node --mps: the manager under `root` running `binary`, its MIG and compute-mode checks
// through NVML at `nvml_library` (empty: none, e.g. --fake-gpus).
ManagerOptions node_manager_options(const std::string& root, const std::string& binary,
                                    const std::string& nvml_library);

class ManagerThread {
 public:
  explicit ManagerThread(ManagerOptions options,
                         std::chrono::milliseconds period = std::chrono::milliseconds(500));
  ~ManagerThread();
  ManagerThread(const ManagerThread&) = delete;
  ManagerThread& operator=(const ManagerThread&) = delete;

  MpsReport report() const { return manager_.report(); }
  void stop();

 private:
  MpsManager manager_;
  std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace gpuslice::node::mps
