#include "node/kubelet/device_catalog.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "common/clock.h"
#include "common/enum_names.h"
#include "common/errno_text.h"
#include "node/host/allocation_record.h"
#include "node/host/assignment_file.h"
#include "node/host/limits_file.h"

namespace gpuslice::node {
namespace {

char kind_letter(ResourceKind kind) {
  static constexpr char kLetters[] = {'r', 'm', 'c'};
  return enum_name<ResourceKind::Cores>(kind, kLetters, '?');
}

std::string hex_of_uuid(const std::string& uuid) {
  std::string hex;
  std::string_view body = uuid;
  if (body.size() > 4 && (body.substr(0, 4) == "GPU-" || body.substr(0, 4) == "gpu-")) body.remove_prefix(4);
  for (char c : body) {
    if (std::isxdigit(static_cast<unsigned char>(c)))
      hex += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return hex;
}

}  // namespace

const char* resource_suffix(ResourceKind kind) {
  static constexpr const char* kSuffixes[] = {"gpu", "vram", "cores"};
  return enum_name<ResourceKind::Cores>(kind, kSuffixes, "?");
}

std::optional<ResourceKind> parse_resource_kind(std::string_view name) {
  for (ResourceKind kind : {ResourceKind::Gpu, ResourceKind::Vram, ResourceKind::Cores}) {
    if (name == resource_suffix(kind)) return kind;
  }
  return std::nullopt;
}

DeviceCatalog::DeviceCatalog(std::vector<GpuInfo> gpus, CatalogOptions options)
    : gpus_(std::move(gpus)), options_(std::move(options)) {
  // The shortest UUID prefix (at least 8 hex digits) that tells this node's GPUs apart.
  std::vector<std::string> hex;
  for (const auto& g : gpus_) hex.push_back(hex_of_uuid(g.uuid));
  std::size_t length = 8;
  for (;; length += 4) {
    std::set<std::string> seen;
    bool unique = true;
    for (const auto& h : hex) unique &= h.size() >= length && seen.insert(h.substr(0, length)).second;
    if (unique || length >= 32) break;
  }
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    std::string k =
        hex[i].size() >= length ? hex[i].substr(0, length) : "gpu" + std::to_string(gpus_[i].index);
    if (gpu_by_key_.count(k)) k = "gpu" + std::to_string(gpus_[i].index);
    keys_.push_back(k);
    gpu_by_key_[k] = i;
  }
  if (options_.vram_unit == kAutoVramUnit) {
    // Powers of two keep the unit a whole number of MiB that divides every larger one.
    options_.vram_unit = 1ULL << 20;
    while (list_bytes(ResourceKind::Vram) > kMaxDeviceListBytes && options_.vram_unit < (1ULL << 50))
      options_.vram_unit *= 2;
  }
}

std::size_t DeviceCatalog::list_bytes(ResourceKind kind) const {
  // Protobuf framing of ListAndWatchResponse{repeated Device devices = 1; Device{ID = 1; health = 2}}.
  auto varint = [](std::size_t n) {
    std::size_t bytes = 1;
    for (; n >= 0x80; n >>= 7) ++bytes;
    return bytes;
  };
  constexpr std::size_t kHealth = 2 + 9;  // "Unhealthy" with its tag and length
  std::size_t total = 0;
  for (std::size_t g = 0; g < gpus_.size(); ++g) {
    const unsigned n = units(kind, g);
    // Ids of one GPU differ only in their number: count them by number of digits.
    const std::size_t prefix = keys_[g].size() + 2;
    std::uint64_t from = 0;
    for (std::uint64_t digits = 1, limit = 10; from < n; ++digits, limit *= 10) {
      const std::uint64_t to = std::min<std::uint64_t>(n, limit);
      const std::size_t id = prefix + digits;
      const std::size_t inner = 1 + varint(id) + id + kHealth;
      total += static_cast<std::size_t>(to - from) * (1 + varint(inner) + inner);
      from = to;
    }
  }
  return total;
}

unsigned DeviceCatalog::units(ResourceKind kind, std::size_t gpu) const {
  switch (kind) {
    case ResourceKind::Gpu:
      return options_.replicas;
    case ResourceKind::Vram:
      return options_.vram_unit == 0
                 ? 0
                 : static_cast<unsigned>(gpus_[gpu].memory_total_bytes / options_.vram_unit);
    case ResourceKind::Cores:
      return 100;
  }
  return 0;
}

std::string DeviceCatalog::id(ResourceKind kind, std::size_t gpu, unsigned unit) const {
  std::string out = keys_[gpu];
  out += '-';
  out += kind_letter(kind);
  out += std::to_string(unit);
  return out;
}

std::vector<std::string> DeviceCatalog::ids(ResourceKind kind) const {
  std::vector<std::string> out;
  for (std::size_t g = 0; g < gpus_.size(); ++g) {
    const unsigned n = units(kind, g);
    for (unsigned k = 0; k < n; ++k) out.push_back(id(kind, g, k));
  }
  return out;
}

std::optional<std::size_t> DeviceCatalog::gpu_of(ResourceKind kind, std::string_view id) const {
  std::size_t dash = id.rfind('-');
  if (dash == std::string_view::npos || dash + 2 > id.size() || id[dash + 1] != kind_letter(kind))
    return std::nullopt;
  auto it = gpu_by_key_.find(id.substr(0, dash));
  if (it == gpu_by_key_.end()) return std::nullopt;
  std::string_view number = id.substr(dash + 2);
  if (number.empty() || number.size() > 9 || (number.size() > 1 && number[0] == '0')) return std::nullopt;
  unsigned value = 0;
  for (char c : number) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value >= units(kind, it->second)) return std::nullopt;
  return it->second;
}

std::vector<std::string> DeviceCatalog::preferred(ResourceKind kind,
                                                  const std::vector<std::string>& available,
                                                  const std::vector<std::string>& must_include,
                                                  std::size_t size) const {
  std::vector<std::string> chosen;
  std::set<std::string> taken;
  std::map<std::size_t, std::size_t> chosen_per_gpu;
  for (const auto& id : must_include) {
    if (chosen.size() >= size) break;
    if (taken.insert(id).second) {
      chosen.push_back(id);
      if (auto g = gpu_of(kind, id)) ++chosen_per_gpu[*g];
    }
  }
  std::map<std::size_t, std::vector<std::string>> free_by_gpu;
  for (const auto& id : available) {
    if (taken.count(id)) continue;
    if (auto g = gpu_of(kind, id)) free_by_gpu[*g].push_back(id);
  }
  // Ids in numeric order within a GPU, so answers are deterministic.
  for (auto& [gpu, list] : free_by_gpu) {
    std::sort(list.begin(), list.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
  }

  auto take_from = [&](std::size_t gpu, std::size_t count) {
    auto& list = free_by_gpu[gpu];
    std::size_t n = std::min(count, list.size());
    for (std::size_t i = 0; i < n; ++i) chosen.push_back(list[i]);
    list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(n));
    chosen_per_gpu[gpu] += n;
  };

  if (kind == ResourceKind::Gpu) {
    // Replicas: one per GPU, least used GPUs first, before doubling up anywhere.
    while (chosen.size() < size) {
      std::optional<std::size_t> best;
      for (const auto& [gpu, list] : free_by_gpu) {
        if (list.empty()) continue;
        if (!best || chosen_per_gpu[gpu] < chosen_per_gpu[*best] ||
            (chosen_per_gpu[gpu] == chosen_per_gpu[*best] && list.size() > free_by_gpu[*best].size())) {
          best = gpu;
        }
      }
      if (!best) break;
      take_from(*best, 1);
    }
    return chosen;
  }

  // vram / cores: stay on the GPU that already holds must_include ids when it has room.
  std::size_t need = size - std::min(size, chosen.size());
  for (const auto& [gpu, count] : chosen_per_gpu) {
    if (need && free_by_gpu[gpu].size() >= need) {
      take_from(gpu, need);
      need = 0;
    }
  }
  while (need > 0) {
    std::optional<std::size_t> best;
    for (const auto& [gpu, list] : free_by_gpu) {
      if (list.empty()) continue;
      if (!best) {
        best = gpu;
        continue;
      }
      const std::size_t have = list.size(), best_have = free_by_gpu[*best].size();
      const bool fits = have >= need, best_fits = best_have >= need;
      if (fits != best_fits) {
        if (fits) best = gpu;
      } else if (fits) {
        // Binpack: the tightest GPU that fits; spread: the emptiest.
        if (options_.placement == Placement::Binpack ? have < best_have : have > best_have) best = gpu;
      } else if (have > best_have) {
        best = gpu;  // nothing fits: fill from the largest first to touch as few GPUs as possible
      }
    }
    if (!best) break;
    std::size_t before = chosen.size();
    take_from(*best, need);
    need -= chosen.size() - before;
  }
  return chosen;
}

std::string new_container_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::uint64_t value = rng();
  std::string id = "alloc-";
  for (int i = 0; i < 16; ++i) id += digits[(value >> (60 - 4 * i)) & 0xf];
  return id;
}

Result<AllocationPlan> plan_allocation(ResourceKind kind, const std::vector<std::string>& ids,
                                       const DeviceCatalog& catalog, const HostLayout& layout,
                                       std::string_view resource_name) {
  if (ids.empty()) return make_error(std::string("no ") + resource_suffix(kind) + " devices in the request");
  std::map<std::size_t, unsigned> units_per_gpu;  // ordered by GPU position
  std::set<std::string> unique;
  for (const auto& id : ids) {
    auto gpu = catalog.gpu_of(kind, id);
    if (!gpu) return make_error("unknown " + std::string(resource_suffix(kind)) + " device id '" + id + "'");
    if (!unique.insert(id).second) return make_error("device id '" + id + "' requested twice");
    ++units_per_gpu[*gpu];
  }

  // What a vram or cores container's node-channel records are believed at (assignment_file.h):
  // `normal` until the daemon learns the pod and applies the operator's policy
  // (priority_assignment.h), its share on each GPU for cores, and which allocation it is. One the
  // library could not read (too many GPUs for its size limit) refuses the allocation here, before
  // anything is created, rather than leave a container whose share nobody believes.
  ChannelAssignment channel_assignment;
  if (kind == ResourceKind::Vram || kind == ResourceKind::Cores) {
    channel_assignment.resource = resource_name.empty() ? resource_suffix(kind) : std::string(resource_name);
    channel_assignment.devices_sha256 = devices_digest(ids);
    if (kind == ResourceKind::Cores) {
      for (const auto& [gpu, count] : units_per_gpu)
        channel_assignment.compute[catalog.gpus()[gpu].uuid] = count;
    }
    if (auto text = render_assignment(channel_assignment); !text) return make_error(text.error());
  }

  AllocationPlan plan;
  const bool cdi = catalog.options().cdi;
  std::string visible;
  for (const auto& [gpu, count] : units_per_gpu) {
    if (!visible.empty()) visible += ',';
    visible += catalog.gpus()[gpu].uuid;
    if (cdi) plan.cdi_devices.push_back(catalog.options().cdi_kind + "=" + catalog.gpus()[gpu].uuid);
  }
  // With CDI the runtime injects the GPUs, their device nodes and NVIDIA_VISIBLE_DEVICES from the spec.
  if (!cdi) plan.envs["NVIDIA_VISIBLE_DEVICES"] = visible;
  plan.envs["LD_PRELOAD"] = kContainerLibrary;
  plan.mounts.push_back({kContainerLibrary, layout.library_path(), true});
  // MPS clients connect through the pipe directory's sockets: read-write (root's 0755 directory
  // still keeps tenants from adding files to it).
  if (const std::string& pipe = catalog.options().mps_pipe_dir; !pipe.empty()) {
    plan.envs["CUDA_MPS_PIPE_DIRECTORY"] = pipe;
    plan.mounts.push_back({pipe, pipe, false});
  }

  // One GPU: a plain value. Several: a JSON object keyed by UUID, since indices inside the
  // container depend on the order the runtime exposes the GPUs in.
  auto per_gpu_value = [&](auto value_of) {
    if (units_per_gpu.size() == 1) return std::to_string(value_of(units_per_gpu.begin()->second));
    nlohmann::json obj = nlohmann::json::object();
    for (const auto& [gpu, count] : units_per_gpu) obj[catalog.gpus()[gpu].uuid] = value_of(count);
    return obj.dump();
  };

  if (kind == ResourceKind::Vram) {
    const std::uint64_t unit = catalog.options().vram_unit;
    const std::string memory = per_gpu_value([unit](unsigned count) { return std::uint64_t{count} * unit; });
    plan.container_id = new_container_id();
    const std::string& id = plan.container_id;
    if (auto r = make_host_dir(layout.container_dir(id), 0755); !r) return make_error(r.error());
    // Written by any user the container runs as.
    if (auto r = make_host_dir(layout.state_dir(id), 01777); !r) return make_error(r.error());
    if (auto r = make_host_dir(layout.config_dir(id), 0755); !r) return make_error(r.error());
    Limits limits;
    limits.memory = memory;
    // Each vram id is one unit of one GPU's memory, handed to one container: what a container got
    // is its own, so the whole allocation is its guarantee (the GPU's guarantees sum to at most its
    // memory), which GPUSLICE_MEMORY_GUARANTEE in its environment may lower, never raise.
    limits.guarantee = memory;
    if (auto r = write_file_atomically(layout.limits_file(id), render_limits(limits)); !r) {
      return make_error(r.error());
    }
    AllocationRecord record;
    record.resource = resource_name.empty() ? resource_suffix(kind) : std::string(resource_name);
    record.devices = ids.size();
    record.devices_sha256 = devices_digest(ids);
    record.allocated_at_ns = realtime_ns();
    if (auto r = write_file_atomically(layout.allocation_file(id), render_allocation_record(record), 0644);
        !r) {
      return make_error(r.error());
    }
    plan.envs[kMemoryLimitKey] = memory;
    plan.envs["GPUSLICE_SHARED_DIR"] = kContainerSharedDir;
    plan.envs["GPUSLICE_LIMITS_FILE"] = kContainerLimitsFile;
    // The file exists: a container that finds it missing (its directory was removed and the runtime
    // made an empty one) must fail closed, not run without its cap.
    plan.envs["GPUSLICE_LIMITS_REQUIRED"] = "1";
    plan.envs["GPUSLICE_CONTAINER_ID"] = id;
    plan.mounts.push_back({kContainerSharedDir, layout.state_dir(id), false});
    plan.mounts.push_back({kContainerConfigDir, layout.config_dir(id), true});
  } else if (kind == ResourceKind::Cores) {
    plan.envs[kComputeLimitKey] = per_gpu_value([](unsigned count) { return count; });
  }
  if (kind == ResourceKind::Vram || kind == ResourceKind::Cores) {
    // Every vram and cores container is on the node channel (docs/compute-limiter.md,
    // docs/priority.md): compute-limited containers take turns there, and any container with a
    // priority is seen by the others. It reads all records (read-only mount) and writes only in its
    // own writer directory (sticky: any uid of the container may add its record, none can replace
    // another's).
    const std::string writer = new_container_id();
    if (auto r = make_host_dir(layout.channel_dir(), 0755); !r) return make_error(r.error());
    if (auto r = make_host_dir(layout.channel_writer_dir(writer), 01777); !r) return make_error(r.error());
    // What the container's records are believed at (node_channel.h), beside its writer directory,
    // where it cannot change it: checked before anything was created.
    if (auto r = write_assignment(layout, writer, channel_assignment); !r) return make_error(r.error());
    plan.envs["GPUSLICE_NODE_DIR"] = kContainerNodeDir;
    plan.envs["GPUSLICE_NODE_WRITER"] = writer;
    plan.mounts.push_back({kContainerNodeDir, layout.channel_dir(), true});
    plan.mounts.push_back(
        {std::string(kContainerNodeDir) + "/" + writer, layout.channel_writer_dir(writer), false});
  }

  if (cdi) return plan;
  // Device nodes that exist on this host; the runtime refuses specs for missing ones.
  std::vector<std::string> nodes = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};
  for (const auto& [gpu, count] : units_per_gpu)
    nodes.push_back("nvidia" + std::to_string(catalog.gpus()[gpu].minor));
  for (const auto& name : nodes) {
    std::string host = catalog.options().dev_root + "/" + name;
    struct stat st {};
    if (::stat(host.c_str(), &st) == 0) plan.devices.push_back({"/dev/" + name, host, "rw"});
  }
  return plan;
}

}  // namespace gpuslice::node
