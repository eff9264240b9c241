// What the device plugin advertises and hands out, independent of gRPC:
//   <domain>/gpu    `replicas` shareable slots per GPU              ids "<gpukey>-r<k>"
//   <domain>/vram   one device per `vram_unit` of each GPU's memory   ids "<gpukey>-m<k>"
//   <domain>/cores  100 per GPU, one per percent of its SM time       ids "<gpukey>-c<k>"
// <gpukey> is a short prefix of the GPU UUID (stable across reboots, unlike indices), kept short
// because a vram list holds tens of thousands of ids and the kubelet reads it in one message.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "node/gpus/gpu_source.h"
#include "node/host/host_layout.h"

namespace gpuslice::node {

enum class ResourceKind { Gpu, Vram, Cores };
enum class Placement { Binpack, Spread };

const char* resource_suffix(ResourceKind kind);  // "gpu", "vram", "cores"
std::optional<ResourceKind> parse_resource_kind(std::string_view name);

// The largest device list the kubelet reads: grpc-go's default 4 MiB receive limit, less a margin.
inline constexpr std::size_t kMaxDeviceListBytes = 4 * 1024 * 1024 - 64 * 1024;
// CatalogOptions::vram_unit meaning "derive it from the node's VRAM" (--vram-unit=auto).
inline constexpr std::uint64_t kAutoVramUnit = 0;

struct CatalogOptions {
  unsigned replicas = 4;
  // Bytes per gpuslice.io/vram device; kAutoVramUnit: the smallest power-of-two number of MiB whose
  // list fits kMaxDeviceListBytes (1 MiB up to about 150 GiB of VRAM per node).
  std::uint64_t vram_unit = 1ULL << 20;
  Placement placement = Placement::Binpack;
  std::string dev_root = "/dev";  // where the NVIDIA device nodes are looked up on the host
  // Hand GPUs to the runtime as CDI device names (<cdi_kind>=<GPU UUID>, as `nvidia-ctk cdi generate`
  // names them) instead of NVIDIA_VISIBLE_DEVICES and device nodes: for runtimes without the NVIDIA
  // default runtime but with CDI enabled (containerd >= 1.7, CRI-O).
  bool cdi = false;
  std::string cdi_kind = "nvidia.com/gpu";
  // The managed MPS control daemon's pipe directory (--mps): mounted at the same path into every
  // container, with CUDA_MPS_PIPE_DIRECTORY naming it. Empty: MPS is off.
  std::string mps_pipe_dir = {};
};

class DeviceCatalog {
 public:
  DeviceCatalog(std::vector<GpuInfo> gpus, CatalogOptions options);

  const std::vector<GpuInfo>& gpus() const { return gpus_; }
  const CatalogOptions& options() const { return options_; }
  const std::string& key(std::size_t gpu) const { return keys_[gpu]; }
  unsigned units(ResourceKind kind, std::size_t gpu) const;

  std::string id(ResourceKind kind, std::size_t gpu, unsigned unit) const;
  // Every id of `kind`, GPU by GPU.
  std::vector<std::string> ids(ResourceKind kind) const;
  // Size of the ListAndWatch answer listing every device of `kind` (all Unhealthy: the larger).
  std::size_t list_bytes(ResourceKind kind) const;
  // The GPU (position in gpus()) an id of `kind` belongs to; nullopt for a foreign or malformed id.
  std::optional<std::size_t> gpu_of(ResourceKind kind, std::string_view id) const;

  // GetPreferredAllocation: `size` ids from `available`, all of `must_include`, kept on as few GPUs
  // as possible (vram/cores) or spread over distinct GPUs (gpu replicas).
  std::vector<std::string> preferred(ResourceKind kind, const std::vector<std::string>& available,
                                     const std::vector<std::string>& must_include, std::size_t size) const;

 private:
  std::vector<GpuInfo> gpus_;
  CatalogOptions options_;
  std::vector<std::string> keys_;
  std::map<std::string, std::size_t, std::less<>> gpu_by_key_;
};

struct AllocationPlan {
  struct Mount {
    std::string container_path, host_path;
    bool read_only = false;
  };
  struct Device {
    std::string container_path, host_path, permissions;
  };
  std::map<std::string, std::string> envs;
  std::vector<Mount> mounts;
  std::vector<Device> devices;
  std::vector<std::string> cdi_devices;  // fully qualified CDI names (CatalogOptions::cdi)
  std::string container_id;              // the per-container directory created (vram only)
};

// What one container gets for `ids` of `kind`. For vram this creates <root>/containers/<id>/ with its
// state directory, the limits file (GPUSLICE_MEMORY_LIMIT in bytes) and the allocation record naming
// `resource_name` and the ids (empty name: "<suffix>"). Errors name the bad id.
Result<AllocationPlan> plan_allocation(ResourceKind kind, const std::vector<std::string>& ids,
                                       const DeviceCatalog& catalog, const HostLayout& layout,
                                       std::string_view resource_name = {});

// A fresh random container id ("alloc-" + 16 hex digits).
std::string new_container_id();

}  // namespace gpuslice::node
