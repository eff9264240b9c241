// Where gpuslice keeps per-container files on a node, and where they appear inside containers.
// One directory per container under <root>/containers/<id>/:
//   state/          the container-wide shared directory (GPUSLICE_SHARED_DIR), holds the ledger "state"
//   config/limits   read-only caps (KEY=VALUE), the config/ directory is mounted read-only
// The directory rather than the file is mounted so an atomic rename of the limits file is visible
// inside the container (a bind-mounted file keeps pointing at the replaced inode).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::node {

inline constexpr const char* kDefaultRoot = "/var/lib/gpuslice";
inline constexpr const char* kContainerSharedDir = "/tmp/gpuslice";
// Where every container sees the node-wide turn tables of the compute limiter.
inline constexpr const char* kContainerNodeDir = "/tmp/gpuslice-node";
inline constexpr const char* kContainerConfigDir = "/etc/gpuslice";
inline constexpr const char* kContainerLimitsFile = "/etc/gpuslice/limits";
inline constexpr const char* kContainerLibraryDir = "/usr/local/lib/gpuslice";
inline constexpr const char* kContainerLibrary = "/usr/local/lib/gpuslice/libgpuslice.so";
inline constexpr const char* kLibraryFileName = "libgpuslice.so";
inline constexpr const char* kStateFileName = "state";

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
  std::string library_dir() const { return root_ + "/lib"; }
  std::string library_path() const { return library_dir() + "/" + kLibraryFileName; }

  // Ids of the container directories present now, sorted; skips names that are not valid ids.
  std::vector<std::string> list_containers() const;

 private:
  std::string root_;
};

// A container id is one path component: 1-128 characters of [A-Za-z0-9._-], not "." or "..".
bool valid_container_id(std::string_view id);

}  // namespace gpuslice::node
