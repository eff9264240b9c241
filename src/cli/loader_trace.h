// Asks the system's dynamic loader itself whether it can load a library, as `ldd` does: only the
// loader knows its search rules (ld.so.cache, glibc-hwcaps directories, RUNPATH/RPATH with
// $ORIGIN, LD_LIBRARY_PATH) and which files it refuses, so a dependency it cannot find is found
// by asking it rather than by imitating it.
#pragma once

#include <string>

#include "common/result.h"

namespace gpuslice::cli {

// Tracing takes milliseconds; a loader that takes longer (a dependency that is a FIFO) would hang
// the command the same way.
inline constexpr int kLoaderTraceTimeoutMs = 5000;

// Runs the loader that started this program on `library` with LD_TRACE_LOADED_OBJECTS=1 (nothing of
// the library runs: it is mapped, not relocated or initialised) in this environment, without
// LD_PRELOAD and the loader's other debugging variables. Ok when it loads and finds every
// dependency, or when there is no loader to ask (no PT_INTERP, or it cannot be started): the
// caller's static checks stand alone then. Otherwise what is wrong, for "library X cannot be
// preloaded: ...".
Result<bool> trace_with_loader(const std::string& library);

}  // namespace gpuslice::cli
