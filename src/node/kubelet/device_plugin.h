// Kubelet device plugin API v1beta1 over unix sockets: one plugin endpoint per advertised resource
// (<dir>/gpuslice-<resource>.sock), registered with the kubelet's Registration service on
// <dir>/kubelet.sock. A watcher notices a kubelet restart (kubelet.sock replaced, our sockets removed)
// and serves and registers again; health changes are streamed through ListAndWatch.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "node/gpus/gpu_source.h"
#include "node/host/host_layout.h"
#include "node/kubelet/device_catalog.h"
#include "node/kubelet/kubelet_paths.h"
#include "node/kubelet/plugin_registration.h"

namespace gpuslice::node {

inline constexpr const char* kDevicePluginVersion = "v1beta1";
inline constexpr const char* kHealthy = "Healthy";
inline constexpr const char* kUnhealthy = "Unhealthy";

struct PluginOptions {
  std::string device_plugin_dir = kKubeletDevicePluginDir;
  std::string kubelet_socket = "kubelet.sock";  // file name inside device_plugin_dir
  std::string socket_prefix = "gpuslice";       // our sockets: <prefix>-<resource>.sock
  std::string resource_domain = "gpuslice.io";
  std::vector<ResourceKind> resources = {ResourceKind::Gpu, ResourceKind::Vram, ResourceKind::Cores};
  CatalogOptions catalog;
  std::chrono::milliseconds watch_interval{1000};
  std::chrono::milliseconds register_timeout{5000};
};

class DevicePluginManager {
 public:
  DevicePluginManager(PluginOptions options, HostLayout layout, std::vector<GpuInfo> inventory);
  ~DevicePluginManager();
  DevicePluginManager(const DevicePluginManager&) = delete;
  DevicePluginManager& operator=(const DevicePluginManager&) = delete;

  // Serves every enabled resource and starts the watcher, which registers with the kubelet as soon
  // as it is up (and again after each kubelet restart). Fails if a socket cannot be served.
  Result<bool> start();
  void stop();

  // New health per GPU (matched by UUID); ListAndWatch streams send the new list on a change.
  void update_health(const std::vector<GpuInfo>& gpus);

  // Full names of the resources being served ("gpuslice.io/vram", ...).
  std::vector<std::string> resource_names() const;
  // Successful Register calls since start (a kubelet restart adds one per resource).
  unsigned registrations() const;
  // Registration state of every served resource, as of the watcher's last pass.
  std::vector<PluginRegistration> registration() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::node
