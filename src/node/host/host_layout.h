// Where gpuslice keeps per-container files on a node, and where they appear inside containers.
// One directory per container under <root>/containers/<id>/:
//   state/          the container-wide shared directory (GPUSLICE_SHARED_DIR), holds the ledger "state"
//   config/limits   read-only caps (KEY=VALUE), the config/ directory is mounted read-only
//   allocation      which devices the kubelet allocated (node/allocation_record.h); not mounted
// The directory rather than the file is mounted so an atomic rename of the limits file is visible
// inside the container (a bind-mounted file keeps pointing at the replaced inode).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "config/default_paths.h"

namespace gpuslice::node {

// The paths themselves live with every other default path (config/default_paths.h).
using config::kContainerConfigDir;
using config::kContainerLibrary;
using config::kContainerLibraryDir;
using config::kContainerLimitsFile;
// Where every container sees the node channel (<root>/channel, read-only); its own writer directory
// <root>/channel/<writer> is mounted read-write over <kContainerNodeDir>/<writer>, so a container can
// change its own records only (src/shared_state/node_channel.h).
using config::kContainerNodeDir;
using config::kContainerSharedDir;
using config::kLibraryFileName;
using config::kStateFileName;
inline constexpr const char* kDefaultRoot = config::kDefaultNodeRoot;
// The webhook's emptyDir is mounted at kContainerSharedDir, but a kubelet makes every emptyDir mode 0777
// without the sticky bit, which the library refuses as a shared directory (anyone could replace the state
// file). The library's directory is one level down, made by the library itself (0700, owned by the
// container's user): GPUSLICE_SHARED_DIR=<kContainerSharedDir>/<kEmptyDirSharedSubdir>.
inline constexpr const char* kEmptyDirSharedSubdir = "shared";

class HostLayout {
 public:
  explicit HostLayout(std::string root = kDefaultRoot);

  const std::string& root() const { return root_; }
  std::string containers_dir() const { return root_ + "/containers"; }
  std::string container_dir(std::string_view id) const;
  std::string state_dir(std::string_view id) const;
  std::string state_file(std::string_view id) const;
  std::string config_dir(std::string_view id) const;
  std::string limits_file(std::string_view id) const;
  // What the device plugin recorded about the allocation (not mounted into the container).
  std::string allocation_file(std::string_view id) const;
  std::string library_dir() const { return root_ + "/lib"; }
  // Plain-host jobs (`gpuslice run --shared-dir <root>/jobs/<name>`), mode 1777 like /tmp: each job's
  // directory is its user's (the library refuses one another user owns). Seen with --host-jobs.
  std::string jobs_dir() const { return root_ + "/jobs"; }
  std::string channel_dir() const { return root_ + "/channel"; }
  std::string channel_writer_dir(std::string_view writer) const {
    return channel_dir() + "/" + std::string(writer);
  }
  std::string library_path() const { return library_dir() + "/" + kLibraryFileName; }

  // Ids of the container directories present now, sorted; skips names that are not valid ids.
  std::vector<std::string> list_containers() const;

 private:
  std::string root_;
};

// A container id is one path component: 1-128 characters of [A-Za-z0-9._-], not "." or "..".
bool valid_container_id(std::string_view id);

// Makes `path` and its missing parents, then gives `path` exactly `mode` (after mkdir: the process
// umask must not narrow what containers may write).
Result<bool> make_host_dir(const std::string& path, mode_t mode);

}  // namespace gpuslice::node
