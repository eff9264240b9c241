// The loader's side of reaching the real libcuda / libnvidia-ml, under the hook table (hooks.h):
// glibc's own dlsym, our handle of each library, and the driver functions we call but do not hook.
#pragma once

#include <cstdint>

namespace gpuslice::interposer {

enum class Library : std::uint8_t { Cuda, Nvml };

// glibc's own dlsym, found with dlvsym so our exported override is never called by mistake.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym();

// Our handle of the real library (dlopen'ed once, never closed, so an application's dlclose cannot
// leave us with dangling function pointers). Null if the library cannot be loaded.
void* library_handle(Library lib);

// Real driver functions we call but do not hook (cuCtxGetDevice, cuDeviceGetUuid, ...).
void* real_unhooked(Library lib, const char* symbol);

}  // namespace gpuslice::interposer

#define REAL_UNHOOKED(lib, sym)        \
  (reinterpret_cast<decltype(&::sym)>( \
      ::gpuslice::interposer::real_unhooked(::gpuslice::interposer::Library::lib, #sym)))
