// Path 3 of 3 to the driver: cuGetProcAddress / cuGetProcAddress_v2. The CUDA 12/13 runtime
// obtains every driver entry point this way, whatever cudaVersion and flags it passes. The real
// driver resolves the name; proc_address_routing.h decides whether our hook is handed out instead.
#include "interposer/hook_prologue.h"
#include "interposer/proc_address_routing.h"

GS_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult* symbolStatus) {
  GS_LOOKUP_HOOK_PROLOGUE(cuGetProcAddress_v2);
  CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (r == CUDA_SUCCESS && pfn != nullptr)
    *pfn = gpuslice::interposer::route_proc_address(symbol, *pfn, cudaVersion, flags);
  return r;
}

GS_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  GS_LOOKUP_HOOK_PROLOGUE(cuGetProcAddress);
  CUresult r = real(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr)
    *pfn = gpuslice::interposer::route_proc_address(symbol, *pfn, cudaVersion, flags);
  return r;
}
