// The one way every hook opens. Its policy on initialisation: a hook brings gpuslice up on the
// first call of the process (and rebuilds it in a forked child) before anything else, and fails
// closed while the configuration is broken, so no limit is ever skipped. Then `real` is the real
// library's function; when it is missing the hook answers without calling anything:
// CUDA_ERROR_NOT_INITIALIZED when libcuda.so.1 itself could not be loaded, CUDA_ERROR_NOT_FOUND
// when this driver lacks the symbol (NVML: NVML_ERROR_DRIVER_NOT_LOADED / NVML_ERROR_FUNCTION_NOT_FOUND).
#pragma once

#include "interposer/hooks.h"
#include "interposer/lifecycle.h"

#define GS_CUDA_HOOK_PROLOGUE(sym)                                                                           \
  ::gpuslice::interposer::ProfileScope gs_scope(::gpuslice::interposer::HookId::sym);                        \
  if (CUresult gs_err = ::gpuslice::interposer::ensure_initialized(); gs_err != CUDA_SUCCESS) return gs_err; \
  auto real = REAL(sym);                                                                                     \
  if (real == nullptr) return ::gpuslice::interposer::missing_cuda_function()

#define GS_NVML_HOOK_PROLOGUE(sym)                                                                   \
  ::gpuslice::interposer::ProfileScope gs_scope(::gpuslice::interposer::HookId::sym);                \
  if (::gpuslice::interposer::ensure_initialized() != CUDA_SUCCESS) return NVML_ERROR_UNINITIALIZED; \
  auto real = REAL(sym);                                                                             \
  if (real == nullptr) return ::gpuslice::interposer::missing_nvml_function()

// Symbol lookups (cuGetProcAddress) initialise too but keep working under a broken configuration:
// the program then reaches our cuInit, which fails closed with the message, instead of a confusing
// "symbol not found".
#define GS_LOOKUP_HOOK_PROLOGUE(sym)                                                  \
  ::gpuslice::interposer::ProfileScope gs_scope(::gpuslice::interposer::HookId::sym); \
  (void)::gpuslice::interposer::ensure_initialized();                                 \
  auto real = REAL(sym);                                                              \
  if (real == nullptr) return ::gpuslice::interposer::missing_cuda_function()
