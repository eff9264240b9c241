#include "config/default_paths.h"

#include <unistd.h>

namespace gpuslice::config {

std::string default_shared_dir() { return "/tmp/gpuslice-" + std::to_string(::getuid()); }

std::string default_node_dir() { return std::string(kDefaultNodeDir) + "-" + std::to_string(::geteuid()); }

}  // namespace gpuslice::config
