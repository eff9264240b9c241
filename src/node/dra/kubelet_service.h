// The DRA kubelet plugin's sockets: the DRAPlugin service (v1 and v1beta1, same handlers) on
// <plugin dir>/<driver>/dra.sock and the Registration service on <registry dir>/<driver>-reg.sock.
// A watcher serves a socket again when it disappears (the kubelet's plugin watcher then finds it
// and registers the plugin anew).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/result.h"
#include "node/dra/claim_preparer.h"
#include "node/dra/registration.h"

namespace gpuslice::node::dra {

inline constexpr const char* kKubeletPluginsDir = "/var/lib/kubelet/plugins";
inline constexpr const char* kKubeletRegistryDir = "/var/lib/kubelet/plugins_registry";
// Claims in one NodePrepareResources call: a pod has a handful; more is not a kubelet.
inline constexpr int kMaxClaimsPerCall = 128;

struct KubeletPluginOptions {
  std::string driver = "gpuslice.io";
  std::string plugins_dir = kKubeletPluginsDir;
  std::string registry_dir = kKubeletRegistryDir;
  std::chrono::milliseconds watch_interval{1000};
};

class KubeletPlugin {
 public:
  KubeletPlugin(KubeletPluginOptions options, ClaimPreparer& preparer);
  ~KubeletPlugin();
  KubeletPlugin(const KubeletPlugin&) = delete;
  KubeletPlugin& operator=(const KubeletPlugin&) = delete;

  Result<bool> start();
  void stop();

  std::string dra_socket() const;
  std::string registration_socket() const;
  const RegistrationStatusBoard& status() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::node::dra
