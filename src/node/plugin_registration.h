// Where the device plugin stands with the kubelet, per advertised resource: logged on every change,
// exported as gpuslice_device_plugin_* metrics and in GET /api/v1/status.
#pragma once

#include <string>

#include "common/enum_names.h"

namespace gpuslice::node {

enum class RegistrationState {
  WaitingForKubelet,  // the kubelet's registration socket does not exist
  Registering,        // it exists; Register has not succeeded yet (retried every watch interval)
  Registered,
};

inline const char* registration_state_name(RegistrationState state) {
  static constexpr const char* kNames[] = {"waiting_for_kubelet", "registering", "registered"};
  return enum_name<RegistrationState::Registered>(state, kNames, "unknown");
}

inline constexpr RegistrationState kRegistrationStates[] = {
    RegistrationState::WaitingForKubelet, RegistrationState::Registering, RegistrationState::Registered};

struct PluginRegistration {
  std::string resource;  // "gpuslice.io/vram"
  RegistrationState state = RegistrationState::WaitingForKubelet;
  unsigned registrations = 0;  // successful Register calls since start; >1 after a kubelet restart
};

}  // namespace gpuslice::node
