// Where the device plugin stands with the kubelet, per advertised resource: logged on every change,
// exported as gpuslice_device_plugin_* metrics and in GET /api/v1/status.
#pragma once

#include <cstdint>
#include <string>

#include "common/enum_names.h"

namespace gpuslice::node {

enum class RegistrationState {
  WaitingForKubelet,  // the kubelet's registration socket does not exist
  Registering,        // it exists; Register has not succeeded yet (retried every watch interval)
  Registered,
  Refused,  // not served: its device list would not fit the kubelet's message limit (a finer unit
            // than the node's VRAM allows); gpuslice_device_plugin_state{state="refused"} alerts
};

inline const char* registration_state_name(RegistrationState state) {
  static constexpr const char* kNames[] = {"waiting_for_kubelet", "registering", "registered", "refused"};
  return enum_name<RegistrationState::Refused>(state, kNames, "unknown");
}

inline constexpr RegistrationState kRegistrationStates[] = {
    RegistrationState::WaitingForKubelet, RegistrationState::Registering, RegistrationState::Registered,
    RegistrationState::Refused};

struct PluginRegistration {
  std::string resource;  // "gpuslice.io/vram"
  RegistrationState state = RegistrationState::WaitingForKubelet;
  unsigned registrations = 0;    // successful Register calls since start; >1 after a kubelet restart
  std::uint64_t unit_bytes = 0;  // bytes per device of a vram resource (0 for the others)
};

}  // namespace gpuslice::node
