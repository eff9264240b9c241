#include "config/default_paths.h"

#include <unistd.h>

namespace gpuslice::config {

std::string default_shared_dir() { return "/tmp/gpuslice-" + std::to_string(::getuid()); }

}  // namespace gpuslice::config
