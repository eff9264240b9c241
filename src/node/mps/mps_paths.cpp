#include "node/mps/mps_paths.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "common/safe_file.h"

namespace gpuslice::node::mps {

namespace {

Result<bool> make_private_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    return make_error("cannot make " + path + ": " + std::strerror(errno));
  auto fd = fs::open_dir(path, fs::DirTrust::OwnerOnly);
  if (!fd) return make_error(fd.error());
  fs::UniqueFd closer(*fd);
  return true;
}

}  // namespace

Result<bool> prepare_dirs(const MpsPaths& paths) {
  if (paths.root.empty() || paths.root.front() != '/')
    return make_error("MPS directory must be an absolute path: '" + paths.root + "'");
  // The parent (e.g. /run/gpuslice) may not exist yet on a fresh host.
  std::string parent, base;
  if (fs::split_path(paths.root, &parent, &base) && parent != "/" && !parent.empty())
    (void)::mkdir(parent.c_str(), 0755);
  for (const std::string& dir : {paths.root, paths.pipe_dir(), paths.log_dir()}) {
    if (auto made = make_private_dir(dir); !made) return made;
  }
  return true;
}

}  // namespace gpuslice::node::mps
