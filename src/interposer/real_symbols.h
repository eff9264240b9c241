// Access to the real libcuda / libnvidia-ml and to the real dlsym, shared by the routing code.
#pragma once

#include "interposer/hooks.h"

namespace gpuslice::interposer {

// glibc's own dlsym, found with dlvsym so our exported override is never called by mistake.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym();

// Our handle of the real library (dlopen'ed once, never closed, so an application's dlclose cannot
// leave us with dangling function pointers). Null if the library cannot be loaded.
void* library_handle(Library lib);

// True if `p` is the real library's address of hook `id` (pointer identity, resolved lazily).
bool is_real_address(HookId id, void* p);

}  // namespace gpuslice::interposer
