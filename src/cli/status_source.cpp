#include "cli/status_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "cli/node_api_client.h"
#include "common/errno_text.h"
#include "common/safe_file.h"
#include "shared_state/ledger.h"
#include "status/status_json.h"

namespace gpuslice::cli {
namespace {

constexpr std::size_t kMaxContainers = 4096;

bool valid_container_id(std::string_view id) {
  if (id.empty() || id.size() > 128 || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

status::ContainerStatus read_ledger(const std::string& path, bool* missing) {
  status::ContainerStatus out;
  out.path = path;
  if (missing != nullptr) *missing = false;
  // Refuse a FIFO, device or symlink before the ledger opens it (it would block or follow).
  auto checked = fs::open_for_reading(path);
  if (!checked) {
    const bool absent = errno == ENOENT;
    if (missing != nullptr) *missing = absent;
    out.has_state = false;
    if (!absent) out.error = checked.error();
    return out;
  }
  ::close(*checked);
  auto opened = shm::Ledger::open(path, shm::Ledger::Mode::Observer);
  if (!opened) {
    out.has_state = false;
    out.error = opened.error();
    return out;
  }
  opened.value()->reap_dead();
  out = status::from_snapshot(opened.value()->snapshot());
  return out;
}

StatusView read_node_root(const std::string& root) {
  StatusView view;
  std::string error;
  for (const std::string& id : list_node_containers(root, error)) {
    status::ContainerStatus c = read_ledger(root + "/containers/" + id + "/state/state", nullptr);
    c.id = id;
    auto limits = fs::read_small_file(root + "/containers/" + id + "/config/limits", 64 * 1024);
    if (limits) {
      // KEY=VALUE lines; only what the view shows.
      std::size_t pos = 0;
      while (pos < limits->size()) {
        std::size_t end = limits->find('\n', pos);
        if (end == std::string::npos) end = limits->size();
        std::string line = limits->substr(pos, end - pos);
        pos = end + 1;
        auto eq = line.find('=');
        if (eq == std::string::npos) continue;
        std::string key = line.substr(0, eq), value = line.substr(eq + 1);
        if (key == "GPUSLICE_MEMORY_LIMIT") c.memory_limit = value;
        if (key == "GPUSLICE_COMPUTE_LIMIT") c.compute_limit = value;
      }
    }
    view.containers.push_back(std::move(c));
  }
  view.error = error;
  return view;
}

}  // namespace

std::vector<std::string> list_node_containers(const std::string& root, std::string& error) {
  std::vector<std::string> ids;
  std::string dir = root + "/containers";
  auto fd = fs::open_dir(dir, fs::DirTrust::Any);
  if (!fd) {
    error = fd.error();
    return ids;
  }
  DIR* listing = ::fdopendir(*fd);
  if (listing == nullptr) {
    ::close(*fd);
    error = "cannot list " + dir + ": " + fs::errno_text(errno);
    return ids;
  }
  while (dirent* entry = ::readdir(listing)) {
    std::string name = entry->d_name;
    if (!valid_container_id(name)) continue;
    if (ids.size() >= kMaxContainers) {
      error =
          dir + " holds more than " + std::to_string(kMaxContainers) + " containers; the rest are not shown";
      break;
    }
    ids.push_back(std::move(name));
  }
  ::closedir(listing);
  std::sort(ids.begin(), ids.end());
  return ids;
}

StatusView read_status(const StatusSource& source) {
  switch (source.kind) {
    case StatusSource::Kind::StateFile: {
      StatusView view;
      bool missing = false;
      status::ContainerStatus c = read_ledger(source.path, &missing);
      if (missing) {
        view.error = "no state file " + source.path + " (no limited process has used it yet)";
      } else if (c.error) {
        view.error = *c.error;
      } else {
        view.containers.push_back(std::move(c));
      }
      return view;
    }
    case StatusSource::Kind::NodeRoot:
      return read_node_root(source.path);
    case StatusSource::Kind::Api:
      return read_node_api(source.api);
  }
  return {};
}

}  // namespace gpuslice::cli
