#include "cli/status_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "cli/args.h"
#include "cli/defaults.h"
#include "cli/node_api_client.h"
#include "common/errno_text.h"
#include "common/safe_file.h"
#include "common/text.h"
#include "config/limits_file.h"
#include "node/mps/mps_paths.h"
#include "node/mps/mps_report_json.h"
#include "shared_state/ledger.h"
#include "status/status_json.h"

namespace gpuslice::cli {
namespace {

constexpr std::size_t kMaxContainers = 4096;

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
    // The library's own reader (quotes, spaces, comments), so the view shows the caps it enforces;
    // a file it cannot read makes the container's CUDA calls fail, which the view says.
    const std::string limits_path = root + "/containers/" + id + "/config/limits";
    auto limits = config::read_limits_file(limits_path);
    if (limits) {
      if (limits->memory) c.memory_limit = limits->memory->text;
      if (limits->compute) c.compute_limit = limits->compute->text;
    } else {
      c.error = c.error ? *c.error + "; " + limits.error() : limits.error();
    }
    view.containers.push_back(std::move(c));
  }
  view.error = error;
  return view;
}

// http://HOST:PORT for a client of a daemon listening on `listen` (HOST:PORT, as the daemon
// parses it); nothing when it is malformed.
std::optional<std::string> local_api_url(std::string_view listen) {
  const std::size_t colon = listen.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view port = listen.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  std::string_view host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  // A daemon bound to every address is reached on loopback.
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  const bool v6 = host.find(':') != std::string_view::npos;
  return "http://" + std::string(v6 ? "[" : "") + std::string(host) + (v6 ? "]:" : ":") + std::string(port);
}

}  // namespace

NodeSourceChoice choose_node_source(const std::string& root) {
  NodeSourceChoice choice;
  choice.source.kind = StatusSource::Kind::NodeRoot;
  choice.source.path = root;
  const std::string token_file = env_or("GPUSLICE_NODE_TOKEN_FILE", kDefaultNodeTokenFile);
  auto url = local_api_url(env_or("GPUSLICE_NODE_LISTEN", kDefaultNodeListen));
  if (!url || ::access(token_file.c_str(), R_OK) != 0) return choice;
  NodeApi api{*url, token_file};
  bool unreachable = false;
  StatusView view = read_node_api(api, kNodeApiProbeConnectMs, &unreachable);
  if (unreachable) return choice;
  if (!view.error.empty()) {
    choice.note = "node daemon: " + view.error + "; reading " + root + " instead";
    return choice;
  }
  choice.source.kind = StatusSource::Kind::Api;
  choice.source.path.clear();
  choice.source.api = std::move(api);
  choice.first = std::move(view);
  return choice;
}

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
    if (!text::is_plain_name(name)) continue;
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
    case StatusSource::Kind::NodeRoot: {
      StatusView view = read_node_root(source.path);
      const char* dir = std::getenv(node::mps::kMpsRootEnv);
      const node::mps::MpsPaths paths{dir != nullptr && *dir != '\0' ? dir : node::mps::kDefaultMpsRoot};
      if (auto report = node::mps::read_state_file(paths.state_file())) view.mps = std::move(report).value();
      return view;
    }
    case StatusSource::Kind::Api:
      return read_node_api(source.api);
  }
  return {};
}

}  // namespace gpuslice::cli
