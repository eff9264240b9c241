// The routing of cuGetProcAddress answers to our hooks (proc_address_routing.cpp).
#pragma once

#include "abi/cuda_abi.h"

namespace gpuslice::interposer {

// The function to hand out for `symbol` when the driver answered `real_pfn`: a hook's address for
// a hooked entry point, `real_pfn` itself otherwise (and for null).
void* route_proc_address(const char* symbol, void* real_pfn, int cuda_version, cuuint64_t flags);

}  // namespace gpuslice::interposer
