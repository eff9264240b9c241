// Survives SIGBUS while touching a mapping of a file someone else may truncate. Used only by
// observers (the CLI and the daemon, never the injected library) for the few stores they make into
// a tenant's state file: a truncated file then turns into an error instead of killing the observer.
#pragma once

namespace gpuslice::shm::detail {

// Runs `touch(context)`; returns false when it faulted with SIGBUS (the store may be lost).
// `touch` must only load/store mapped memory: on a fault it is abandoned mid-way without unwinding.
bool run_fault_guarded(void (*touch)(void* context), void* context);

}  // namespace gpuslice::shm::detail
