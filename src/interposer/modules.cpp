// Module and library loading: refused while the container is at its quota, and what the driver's
// figure grew by across the load is charged (driver_reservations.h). Functions' code loaded lazily
// at first launch is charged by the next reconciliation. Without a memory quota: a branch and a forward.
#include "interposer/driver_reservations.h"
#include "interposer/hook_prologue.h"

namespace gs = gpuslice::interposer;

GS_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  GS_CUDA_HOOK_PROLOGUE(cuModuleLoad);
  return gs::load_module(nullptr, [&] { return real(module, fname); });
}

GS_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  GS_CUDA_HOOK_PROLOGUE(cuModuleLoadData);
  return gs::load_module(image, [&] { return real(module, image); });
}

GS_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                      CUjit_option* options, void** optionValues) {
  GS_CUDA_HOOK_PROLOGUE(cuModuleLoadDataEx);
  return gs::load_module(image, [&] { return real(module, image, numOptions, options, optionValues); });
}

GS_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  GS_CUDA_HOOK_PROLOGUE(cuModuleLoadFatBinary);
  return gs::load_module(fatCubin, [&] { return real(module, fatCubin); });
}

GS_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                     void** jitOptionsValues, unsigned int numJitOptions,
                                     CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                     unsigned int numLibraryOptions) {
  GS_CUDA_HOOK_PROLOGUE(cuLibraryLoadData);
  return gs::load_module(code, [&] {
    return real(library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                libraryOptionValues, numLibraryOptions);
  });
}

GS_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                                         void** jitOptionsValues, unsigned int numJitOptions,
                                         CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                         unsigned int numLibraryOptions) {
  GS_CUDA_HOOK_PROLOGUE(cuLibraryLoadFromFile);
  return gs::load_module(nullptr, [&] {
    return real(library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                libraryOptionValues, numLibraryOptions);
  });
}

// Handles may be reused once unloaded: the launch hooks' cached local sizes are forgotten.
GS_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  GS_CUDA_HOOK_PROLOGUE(cuModuleUnload);
  const CUresult r = real(hmod);
  if (r == CUDA_SUCCESS && gs::memory_active()) gs::forget_functions();
  return r;
}

GS_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
  GS_CUDA_HOOK_PROLOGUE(cuLibraryUnload);
  const CUresult r = real(library);
  if (r == CUDA_SUCCESS && gs::memory_active()) gs::forget_functions();
  return r;
}
