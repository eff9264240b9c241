// Every default path of gpuslice, in one place: the library, the CLI and the node daemon agree on
// them. Defaults that would be shared by every user of a host are private per uid instead, so that
// one local user can neither read nor pre-create another's state (see docs/security.md).
#pragma once

#include <string>

namespace gpuslice::config {

// Container-wide state when GPUSLICE_SHARED_DIR is unset: /tmp/gpuslice-<uid>, created 0700.
std::string default_shared_dir();
inline constexpr const char* kStateFileName = "state";
// Read-only caps written by the node daemon or an operator (GPUSLICE_LIMITS_FILE).
inline constexpr const char* kDefaultLimitsFile = "/etc/gpuslice/limits";
// Where the Kubernetes device plugin mounts the node channel inside containers.
inline constexpr const char* kDefaultNodeDir = "/tmp/gpuslice-node";
// The node channel when GPUSLICE_NODE_DIR is unset (a plain host): /tmp/gpuslice-node-<euid>, one per
// user, so whoever runs first cannot lock everyone else out; containers of different users meet
// only in a directory the operator shares (GPUSLICE_NODE_DIR, root-owned, 01777).
std::string default_node_dir();

// The node daemon's host directory and where its per-container files appear inside containers.
// The daemon always sets GPUSLICE_SHARED_DIR / GPUSLICE_LIMITS_FILE / GPUSLICE_NODE_DIR to these,
// so the in-container paths need not match the library's defaults above.
inline constexpr const char* kDefaultNodeRoot = "/var/lib/gpuslice";
inline constexpr const char* kContainerSharedDir = "/tmp/gpuslice";
inline constexpr const char* kContainerNodeDir = kDefaultNodeDir;
inline constexpr const char* kContainerConfigDir = "/etc/gpuslice";
inline constexpr const char* kContainerLimitsFile = kDefaultLimitsFile;
inline constexpr const char* kContainerLibraryDir = "/usr/local/lib/gpuslice";
inline constexpr const char* kLibraryFileName = "libgpuslice.so";
inline constexpr const char* kContainerLibrary = "/usr/local/lib/gpuslice/libgpuslice.so";
// The daemon's /metrics and API address (gpuslice-node serve --listen), which `gpuslice status
// --node` also asks first, and the token file its Debian package configures.
inline constexpr const char* kDefaultNodeListen = "0.0.0.0:9410";
inline constexpr const char* kDefaultNodeTokenFile = "/etc/gpuslice/node-token";

}  // namespace gpuslice::config
