#include "config/mps_client.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "common/enum_names.h"
#include "config/text_util.h"

namespace gpuslice::config {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
// Small files only: a pid, a list of children, a GPU's information page.
constexpr std::size_t kMaxSmallFile = 4096;

std::optional<std::uint64_t> parse_u64(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

// A whole small file, without following a final symbolic link; empty when unreadable.
std::string read_small(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return {};
  std::string out;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > kMaxSmallFile) {
      out.clear();
      break;
    }
  }
  ::close(fd);
  return out;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string mebibytes(std::uint64_t bytes) {
  return std::to_string(std::max<std::uint64_t>(1, bytes / kMiB)) + "M";
}

// Under `threads`, the compute limit the client's SM share holds (percent), 0 when the GPU-time
// limiter holds it instead; `note` says why not where a limit exists. The variable holds every
// device of the client alike: one limit for all of them, or the GPU-time limiter.
unsigned compute_share(const MpsClientInputs& in, std::string* note) {
  if (!in.compute_by_ordinal) {
    if (in.compute_mode == MpsComputeMode::Threads)
      *note = std::string("compute limit by GPU time: ") + kMpsComputeKey +
              "=threads, but which GPUs this process sees is not known";
    return 0;
  }
  unsigned first = 0;
  bool uniform = true;
  bool any = false;
  for (std::size_t i = 0; i < in.compute_by_ordinal->size(); ++i) {
    const unsigned pct = (*in.compute_by_ordinal)[i] >= 100 ? 0 : (*in.compute_by_ordinal)[i];
    if (pct != 0) any = true;
    if (i == 0) first = pct;
    if (pct != first) uniform = false;
  }
  if (!any) return 0;
  if (in.compute_mode == MpsComputeMode::Time) {
    *note = std::string("compute limit by GPU time (") + kMpsComputeKey + "=time)";
    return 0;
  }
  if (!uniform) {
    *note = std::string("compute limit by GPU time: ") + kMpsComputeKey + "=threads, but the " +
            std::to_string(in.compute_by_ordinal->size()) +
            " GPUs this process sees have different compute limits (or some none), and " +
            kMpsThreadPercentVar + " holds all of them alike";
    return 0;
  }
  return first;
}

constexpr const char* kMpsComputeNames[] = {"time", "threads"};  // MpsComputeMode's order

}  // namespace

const char* mps_compute_mode_name(MpsComputeMode mode) {
  return enum_name<MpsComputeMode::Threads>(mode, kMpsComputeNames, "time");
}

std::optional<MpsComputeMode> parse_mps_compute_mode(std::string_view text) {
  return enum_value_from<MpsComputeMode::Time, MpsComputeMode::Threads>(text, kMpsComputeNames);
}

std::optional<std::vector<std::pair<int, std::uint64_t>>> parse_mps_pinned_limit(std::string_view text) {
  std::vector<std::pair<int, std::uint64_t>> out;
  text = text::trim(text);
  if (text.empty()) return std::nullopt;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text::trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos || out.size() >= 256) return std::nullopt;
    const auto ordinal = parse_u64(text::trim(item.substr(0, equals)));
    std::string_view size = text::trim(item.substr(equals + 1));
    if (!ordinal || *ordinal > 1023) return std::nullopt;
    if (!size.empty() && (size.back() == 'b' || size.back() == 'B')) size.remove_suffix(1);
    std::uint64_t unit = 1;
    if (!size.empty()) {
      switch (size.back()) {
        case 'g':
        case 'G':
          unit = kMiB << 10;
          break;
        case 'm':
        case 'M':
          unit = kMiB;
          break;
        case 'k':
        case 'K':
          unit = 1024;
          break;
        default:
          break;
      }
      if (unit != 1) size.remove_suffix(1);
    }
    const auto number = parse_u64(size);
    if (!number || *number > UINT64_MAX / unit) return std::nullopt;
    out.emplace_back(static_cast<int>(*ordinal), *number * unit);
  }
  return out;
}

std::optional<MpsYield> parse_mps_yield(std::string_view text) {
  if (text == "gate") return MpsYield::Gate;
  if (text == "server") return MpsYield::Server;
  return std::nullopt;
}

const char* mps_yield_name(MpsYield yield) { return yield == MpsYield::Server ? "server" : "gate"; }

MpsClientEnv derive_mps_client_env(const MpsClientInputs& in) {
  MpsClientEnv env;
  // Memory: the lower of the quota and the tenant's own limit, per ordinal.
  std::vector<std::pair<int, std::uint64_t>> limits = in.quota_by_ordinal;
  if (in.tenant_pinned) {
    const auto tenant = parse_mps_pinned_limit(*in.tenant_pinned);
    if (!tenant) env.tenant_lowered = !limits.empty();  // replaced by ours
    for (const auto& entry : tenant.value_or(std::vector<std::pair<int, std::uint64_t>>{})) {
      auto it =
          std::find_if(limits.begin(), limits.end(), [&](const auto& l) { return l.first == entry.first; });
      if (it == limits.end()) {
        limits.push_back(entry);
      } else if (entry.second < it->second) {
        it->second = entry.second;
      } else if (entry.second > it->second) {
        env.tenant_lowered = true;
      }
    }
  }
  if (!limits.empty() && (!in.quota_by_ordinal.empty() || env.tenant_lowered)) {
    std::sort(limits.begin(), limits.end());
    std::string text;
    for (const auto& [ordinal, bytes] : limits)
      text += (text.empty() ? "" : ",") + std::to_string(ordinal) + "=" + mebibytes(bytes);
    env.pinned = std::move(text);
  }
  // Priority: MPS has two levels; only `high` runs at the normal one.
  const unsigned ours = in.high ? 0 : 1;
  unsigned priority = ours;
  if (in.tenant_priority) {
    const auto tenant = parse_u64(text::trim(*in.tenant_priority));
    if (tenant && *tenant == 1) priority = 1;  // a tenant may lower itself
    if (!tenant || *tenant > 1 || *tenant < ours) env.tenant_lowered = true;
  }
  env.priority = std::to_string(priority);
  // Active threads: the lowest of the operator's share below `high`, the compute limit under
  // `threads`, and the tenant's own where it is lower.
  unsigned threads = 0;  // 0: nothing of ours to set
  if (!in.high && in.low_threads && *in.low_threads >= 1 && *in.low_threads <= 100) threads = *in.low_threads;
  const unsigned partition = compute_share(in, &env.compute_note);
  if (partition != 0 && (threads == 0 || partition < threads)) threads = partition;
  if (threads != 0) {
    if (in.tenant_threads) {
      const auto tenant = parse_u64(text::trim(*in.tenant_threads));
      if (tenant && *tenant >= 1 && *tenant < threads) {
        threads = static_cast<unsigned>(*tenant);
      } else if (!tenant || *tenant != threads) {
        env.tenant_lowered = true;
      }
    }
    env.threads = std::to_string(threads);
  }
  if (partition != 0) {
    env.sm_share = threads;
    env.compute_note = "compute limit " + std::to_string(partition) + "% as an SM share (" + kMpsComputeKey +
                       "=threads): " + kMpsThreadPercentVar + "=" + std::to_string(threads) +
                       ", the GPU-time limiter holds only a limit lowered below it while the process runs";
  }
  return env;
}

std::vector<std::string> machine_gpu_uuids(const std::string& gpus_dir) {
  std::vector<std::string> buses;
  if (DIR* dir = ::opendir(gpus_dir.c_str())) {
    while (const dirent* e = ::readdir(dir)) {
      if (e->d_name[0] != '.' && buses.size() < 256) buses.emplace_back(e->d_name);
    }
    ::closedir(dir);
  }
  std::sort(buses.begin(), buses.end());  // "0000:18:00.0": domain, bus, device, function
  std::vector<std::string> uuids;
  for (const std::string& bus : buses) {
    std::string path = gpus_dir;
    path.append("/").append(bus).append("/information");
    const std::string info = read_small(path);
    std::string uuid;
    const std::size_t at = info.find("GPU UUID:");
    if (at != std::string::npos) {
      std::string_view rest = std::string_view(info).substr(at + 9);
      rest = text::trim(rest.substr(0, rest.find('\n')));
      if (rest.size() < 64) uuid = lower(rest);
    }
    uuids.push_back(std::move(uuid));
  }
  return uuids;
}

std::vector<std::string> client_ordinal_uuids(const std::optional<std::string>& visible_devices,
                                              const std::vector<std::string>& machine) {
  if (!visible_devices) return machine;
  std::vector<std::string> out;
  std::string_view rest = *visible_devices;
  while (!rest.empty() && out.size() < 256) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = text::trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (const auto index = parse_u64(item)) {
      if (*index >= machine.size()) {
        // An index beyond the machine (or one we cannot see): CUDA stops at an invalid one; an
        // unreadable machine list leaves it unknown.
        if (!machine.empty()) break;
        out.emplace_back();
        continue;
      }
      out.push_back(machine[*index]);
    } else if (item.size() >= 4 && lower(item.substr(0, 4)) == "gpu-") {
      const std::string prefix = lower(item);
      std::string found;
      for (const std::string& uuid : machine)
        if (uuid.compare(0, prefix.size(), prefix) == 0) found = uuid;
      out.push_back(found.empty() && machine.empty() ? prefix : found);
    } else {
      break;  // MIG instances, junk: CUDA's own reading ends here or numbers them apart
    }
  }
  return out;
}

std::optional<uid_t> other_uid_mps_server(const std::string& proc_root, const std::string& pipe_dir,
                                          uid_t self) {
  const auto control = parse_u64(text::trim(read_small(pipe_dir + "/" + kMpsControlPidFile)));
  if (!control || *control == 0 || *control > 0x7fffffff) return std::nullopt;
  const std::string control_dir = proc_root + "/" + std::to_string(*control);
  // The pid is the daemon's only if this pid namespace sees it: then it is an MPS process.
  const auto is_mps = [](const std::string& dir) {
    return read_small(dir + "/comm").compare(0, 15, "nvidia-cuda-mps") == 0;
  };
  if (!is_mps(control_dir)) return std::nullopt;
  const std::string children = read_small(control_dir + "/task/" + std::to_string(*control) + "/children");
  std::string_view rest = children;
  while (!rest.empty()) {
    const std::size_t space = rest.find_first_of(" \n");
    const auto child = parse_u64(rest.substr(0, space));
    rest = space == std::string_view::npos ? std::string_view{} : rest.substr(space + 1);
    if (!child) continue;
    const std::string dir = proc_root + "/" + std::to_string(*child);
    struct stat st {};
    if (!is_mps(dir) || ::stat(dir.c_str(), &st) != 0) continue;
    if (st.st_uid != self) return st.st_uid;
  }
  return std::nullopt;
}

}  // namespace gpuslice::config
