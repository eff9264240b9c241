// The gpuslice command's default paths and addresses, all from config/default_paths.h, which the
// library and the daemon share.
#pragma once

#include "config/default_paths.h"

namespace gpuslice::cli {

// The daemon's host directory (GPUSLICE_NODE_ROOT), as gpuslice-node serve --root.
inline constexpr const char* kDefaultNodeRoot = config::kDefaultNodeRoot;
// The library `run` tries last: make install's default prefix, where the daemon also mounts it in
// containers.
inline constexpr const char* kDefaultLibrary = config::kContainerLibrary;
inline constexpr const char* kLibraryFileName = config::kLibraryFileName;
// gpuslice-node serve --listen (GPUSLICE_NODE_LISTEN) when unset.
inline constexpr const char* kDefaultNodeListen = config::kDefaultNodeListen;
// The token file the daemon's Debian package configures (GPUSLICE_NODE_TOKEN_FILE); in the
// DaemonSet's pod the variable is set.
inline constexpr const char* kDefaultNodeTokenFile = config::kDefaultNodeTokenFile;
// How long `status --node` waits for the daemon to accept before it reads the root itself: a
// daemon on loopback accepts at once, a missing one refuses at once.
inline constexpr int kNodeApiProbeConnectMs = 300;

}  // namespace gpuslice::cli
