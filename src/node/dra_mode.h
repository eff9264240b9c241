// `gpuslice-node dra`: GPU discovery, the DRA kubelet plugin, the ResourceSlice publisher, and the
// daemon's /metrics and API over the claims' state. Returns the process's exit code.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace gpuslice::node::dra {

int run_dra_mode(const std::vector<std::string>& args, const std::function<const char*(const char*)>& env);

}  // namespace gpuslice::node::dra
