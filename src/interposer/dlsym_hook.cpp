// Path 2 of 3 to the driver: programs that dlopen libcuda.so.1 / libnvidia-ml.so.1 and dlsym
// functions (PyTorch's NVRTC paths, Triton, nvidia-smi). A lookup that would return the real
// library's address of a hooked symbol returns our hook instead.
#include <dlfcn.h>

#include "interposer/real_symbols.h"

namespace gpuslice::interposer {
namespace {
// dlopen inside real_address() can run constructors that call dlsym again; such nested lookups are
// answered by the real dlsym alone.
thread_local bool t_in_dlsym = false;
}  // namespace

void* route_dlsym(void* handle, const char* name) {
  DlsymFn real = real_dlsym();
  if (real == nullptr) return nullptr;
  void* p = real(handle, name);
  if (p == nullptr || t_in_dlsym) return p;
  int idx = find_hook(name);
  if (idx < 0) return p;
  const HookDescriptor& d = kHooks[idx];
  if (p == d.hook) return p;
  t_in_dlsym = true;
  // Only the real driver's symbol is swapped: a same-named function of another library (a second
  // copy of the driver loaded on purpose, a wrapper) is left alone.
  bool swap = is_real_address(static_cast<HookId>(idx), p);
  t_in_dlsym = false;
  return swap ? d.hook : p;
}

}  // namespace gpuslice::interposer

// Unversioned, so it also binds references to dlsym@GLIBC_2.34 and dlsym@GLIBC_2.2.5.
GS_EXPORT void* dlsym(void* handle, const char* name) {
  return gpuslice::interposer::route_dlsym(handle, name);
}
