// cuCtxSetLimit: the heap, stack, printf FIFO and pending-launch reservations it makes are charged
// before the driver makes them (driver_reservations.h). Without a memory quota: a branch and a forward.
#include "interposer/driver_reservations.h"
#include "interposer/hook_prologue.h"

namespace gs = gpuslice::interposer;

GS_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  GS_CUDA_HOOK_PROLOGUE(cuCtxSetLimit);
  if (!gs::memory_active()) return real(limit, value);
  return gs::set_limit_charged(limit, value, real);
}
