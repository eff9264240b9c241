#include "node/mps/manager_thread.h"

namespace gpuslice::node::mps {

ManagerOptions node_manager_options(const std::string& root, const std::string& binary,
                                    const std::string& nvml_library) {
  ManagerOptions options;
  if (!root.empty()) options.paths.root = root;
  if (!binary.empty()) options.binary = binary;
  if (!nvml_library.empty()) options.device_modes = nvml_device_modes(nvml_library);
  return options;
}

ManagerThread::ManagerThread(ManagerOptions options, std::chrono::milliseconds period)
    : manager_(std::move(options)), period_(period) {
  thread_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      lock.unlock();
      manager_.tick();
      lock.lock();
      wake_.wait_for(lock, period_, [this] { return stopping_; });
    }
    lock.unlock();
    manager_.stop();
  });
}

void ManagerThread::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

ManagerThread::~ManagerThread() { stop(); }

}  // namespace gpuslice::node::mps
