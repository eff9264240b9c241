// Before `gpuslice run` puts a library into LD_PRELOAD: the loader silently skips a file it cannot
// preload (the program then runs with no limit) and crashes on a truncated ELF, so check first
// that the file is a complete ELF shared object this build's programs can load.
#pragma once

#include <string>

#include "common/result.h"

namespace gpuslice::cli {

// Ok if `path` is a regular file holding an ELF shared object (ET_DYN) of this build's class,
// byte order and machine, whose program headers and loadable segments lie inside the file.
// Otherwise an error naming the file and the first thing that is wrong.
Result<bool> check_preloadable_library(const std::string& path);

}  // namespace gpuslice::cli
