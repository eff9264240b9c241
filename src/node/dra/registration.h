// The plugin-registration side of the DRA plugin: the Registration service the kubelet's plugin
// watcher calls on <plugins_registry>/<driver>-reg.sock. GetInfo names the driver, the socket of the
// DRA service and the gRPC services served there; NotifyRegistrationStatus says whether the kubelet
// accepted it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "node/kubelet/plugin_registration.h"

namespace grpc {
class Service;
}

namespace gpuslice::node::dra {

// The gRPC services of the DRA API this plugin serves, as the kubelet looks them up in
// supported_versions: kubelets 1.34+ prefer v1, 1.32-1.33 know only v1beta1.
inline const std::vector<std::string> kSupportedServices = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};
inline constexpr const char* kPluginType = "DRAPlugin";

struct RegistrationInfo {
  std::string driver;
  std::string endpoint;  // absolute path of the DRA service's socket
};

// What the kubelet last said (registered, or why not); shared with metrics and the API.
class RegistrationStatusBoard {
 public:
  void set(bool registered, std::string error);
  PluginRegistration snapshot(const std::string& name) const;
  bool registered() const;

 private:
  mutable std::mutex mutex_;
  bool registered_ = false;
  unsigned registrations_ = 0;
  std::string error_;
  bool heard_ = false;
};

// The pluginregistration.Registration service for the registration socket.
std::unique_ptr<grpc::Service> make_registration_service(RegistrationInfo info,
                                                         RegistrationStatusBoard& board);

}  // namespace gpuslice::node::dra
