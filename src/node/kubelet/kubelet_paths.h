// Where the kubelet keeps what gpuslice-node talks to. The one home of these paths: the defaults of
// the daemon's flags (serve_mode.cpp), PluginOptions and PodResourcesOptions all refer to them.
#pragma once

namespace gpuslice::node {

// Device plugin sockets and the kubelet's registration socket (kubelet.sock).
inline constexpr const char* kKubeletDevicePluginDir = "/var/lib/kubelet/device-plugins";
// One directory per pod (<uid>/volumes/...), for the state of webhook-injected pods.
inline constexpr const char* kKubeletPodsDir = "/var/lib/kubelet/pods";
// The PodResources API v1, which says which pod container holds which devices.
inline constexpr const char* kDefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock";

}  // namespace gpuslice::node
