// Before `gpuslice run` puts a library into LD_PRELOAD: the loader silently skips a file it cannot
// preload (the program then runs with no limit) and crashes on a truncated ELF, so check first
// that the file is a complete ELF shared object this build's programs can load, and ask the loader
// whether it finds the library's dependencies.
#pragma once

#include <string>

#include "common/result.h"

namespace gpuslice::cli {

// Ok if `path` has no space or ':' (LD_PRELOAD's separators) and is a regular file holding an ELF
// shared library (ET_DYN, not a program: no PT_INTERP, no DF_1_PIE) of this build's class, byte
// order, machine and an OS ABI the loader accepts, whose program headers and loadable segments lie
// inside the file, that names no audit module (DT_AUDIT, DT_DEPAUDIT: the dependency check would
// run them), and the system's loader finds its dependencies (loader_trace.h).
// Otherwise an error naming the file and the first thing that is wrong.
Result<bool> check_preloadable_library(const std::string& path);

}  // namespace gpuslice::cli
