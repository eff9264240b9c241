#include <cstdio>
#include <cstdlib>

#include "config/settings.h"
#include "node/gpus/gpu_source.h"

namespace gpuslice::node {

Result<std::unique_ptr<GpuSource>> fake_gpu_source(const std::string& spec) {
  const std::size_t x = spec.find('x');
  if (x == std::string::npos || x == 0) return make_error("--fake-gpus: expected NxSIZE, e.g. 2x16Gi");
  const int count = std::atoi(spec.substr(0, x).c_str());
  auto size = config::parse_size(spec.substr(x + 1));
  if (count <= 0 || count > 64 || !size) return make_error("--fake-gpus: expected NxSIZE, e.g. 2x16Gi");
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = g.minor = static_cast<unsigned>(i);
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-fa4e0000-0000-4000-8000-%012d", i);
    g.uuid = uuid;
    g.name = "gpuslice fake GPU";
    g.memory_total_bytes = *size;
    gpus.push_back(g);
  }
  return std::unique_ptr<GpuSource>(new StaticGpuSource(std::move(gpus)));
}

}  // namespace gpuslice::node
