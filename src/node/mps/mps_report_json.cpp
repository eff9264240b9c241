#include "node/mps/mps_report_json.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/safe_file.h"

namespace gpuslice::node::mps {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxStateFileBytes = std::size_t{64} * 1024;
constexpr std::size_t kMaxServers = 1024;

}  // namespace

json report_json(const MpsReport& report) {
  json servers = json::array();
  for (int pid : report.server_pids) servers.push_back(pid);
  return {{"state", mps_state_name(report.state)},
          {"reason", report.reason.empty() ? json(nullptr) : json(report.reason)},
          {"restarts", report.restarts},
          {"control_pid", report.control_pid == 0 ? json(nullptr) : json(report.control_pid)},
          {"server_pids", std::move(servers)},
          {"pipe_dir", report.pipe_dir},
          {"log_dir", report.log_dir},
          {"since_ns", report.since_ns},
          {"manager_pid", report.manager_pid == 0 ? json(nullptr) : json(report.manager_pid)},
          {"fault_containment", kMpsFaultCaveat}};
}

Result<MpsReport> report_from_json(const json& doc) {
  if (!doc.is_object()) return make_error("mps: not an object");
  MpsReport r;
  auto member = [&doc](const char* name) -> const json* {
    auto it = doc.find(name);
    return it == doc.end() || it->is_null() ? nullptr : &*it;
  };
  const json* state = member("state");
  if (state == nullptr || !state->is_string()) return make_error("mps.state: missing or not a string");
  auto parsed = parse_mps_state(state->get<std::string>());
  if (!parsed) return make_error("mps.state: unknown state");
  r.state = *parsed;
  auto text = [&](const char* name, std::string& out) -> bool {
    const json* v = member(name);
    if (v == nullptr) return true;
    if (!v->is_string()) return false;
    out = v->get<std::string>();
    return true;
  };
  auto pid = [&](const char* name, int& out) -> bool {
    const json* v = member(name);
    if (v == nullptr) return true;
    if (!v->is_number_integer() || v->get<std::int64_t>() < 0 || v->get<std::int64_t>() > 0x3fffffff)
      return false;
    out = v->get<int>();
    return true;
  };
  auto count = [&](const char* name, std::uint64_t& out) -> bool {
    const json* v = member(name);
    if (v == nullptr) return true;
    if (!v->is_number_unsigned()) return false;
    out = v->get<std::uint64_t>();
    return true;
  };
  if (!text("reason", r.reason)) return make_error("mps.reason: not a string");
  if (!text("pipe_dir", r.pipe_dir)) return make_error("mps.pipe_dir: not a string");
  if (!text("log_dir", r.log_dir)) return make_error("mps.log_dir: not a string");
  if (!count("restarts", r.restarts)) return make_error("mps.restarts: not a count");
  if (!count("since_ns", r.since_ns)) return make_error("mps.since_ns: not a count");
  if (!pid("control_pid", r.control_pid)) return make_error("mps.control_pid: not a process id");
  if (!pid("manager_pid", r.manager_pid)) return make_error("mps.manager_pid: not a process id");
  if (const json* servers = member("server_pids")) {
    if (!servers->is_array() || servers->size() > kMaxServers)
      return make_error("mps.server_pids: not a list");
    for (const json& s : *servers) {
      if (!s.is_number_integer() || s.get<std::int64_t>() <= 0 || s.get<std::int64_t>() > 0x3fffffff)
        return make_error("mps.server_pids: not a process id");
      r.server_pids.push_back(s.get<int>());
    }
  }
  return r;
}

Result<bool> write_state_file(const std::string& path, const MpsReport& report) {
  std::string dir, base;
  if (!fs::split_path(path, &dir, &base)) return make_error("mps state file: bad path " + path);
  auto dirfd = fs::open_dir(dir, fs::DirTrust::OwnerOnly);
  if (!dirfd) return make_error(dirfd.error());
  fs::UniqueFd d(*dirfd);
  const std::string temp = "." + base + ".tmp";
  auto fd = fs::open_in_dir(d.get(), temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!fd) return make_error(fd.error());
  fs::UniqueFd f(*fd);
  const std::string text = report_json(report).dump(-1, ' ', true, json::error_handler_t::replace) + "\n";
  if (!fs::pwrite_exact(f.get(), text.data(), text.size(), 0) || ::fsync(f.get()) != 0)
    return make_error("mps state file " + path + ": " + std::strerror(errno));
  if (::renameat(d.get(), temp.c_str(), d.get(), base.c_str()) != 0)
    return make_error("mps state file " + path + ": " + std::strerror(errno));
  return true;
}

Result<MpsReport> read_state_file(const std::string& path) {
  auto text = fs::read_small_file(path, kMaxStateFileBytes, fs::DirTrust::OwnerOnly);
  if (!text) return make_error(text.error());
  json doc = json::parse(*text, nullptr, false);
  if (doc.is_discarded()) return make_error(path + ": not JSON");
  auto report = report_from_json(doc);
  if (!report) return make_error(path + ": " + report.error());
  return report;
}

}  // namespace gpuslice::node::mps
