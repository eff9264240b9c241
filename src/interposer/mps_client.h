// MPS clients configured by gpuslice (docs/priority.md#mps-or-time-slices). When the driver will
// connect to an MPS control daemon (CUDA_MPS_PIPE_DIRECTORY set, or a daemon in NVIDIA's default
// pipe directory), the client's MPS variables are set from the container's limits before the
// driver reads them: the per-device pinned-memory limit from the quota (a backstop under the
// books), the client priority from the level, and the active-thread share: the operator's below
// `high`, and the compute limit itself where the operator chose SM partitioning (GPUSLICE_MPS_COMPUTE).
// MPS serves one user id at a time: a client of another user waits, so the server it would join is
// checked first and the first cuInit says so while it waits (GPUSLICE_MPS).
#pragma once

#include "config/settings.h"

namespace gpuslice::shm {
class Ledger;
}

namespace gpuslice::interposer::mps_client {

// From initialise(), the process's first hooked call, before any real driver call. `books`: the
// container's state (its devices' live compute limits), or null. False: fail closed
// (GPUSLICE_MPS=error and the server serves another user; said why).
bool prepare(const config::Settings& settings, const shm::Ledger* books);

// Whether this process's driver connects to an MPS control daemon (prepare() found one).
bool active();

// Under GPUSLICE_MPS_COMPUTE=threads, the SM share (percent) this process's compute limit holds as
// its active-thread percentage, the same on every device; 0 when a compute limit holds by GPU time.
// See config::partition_time_limit for a limit lowered while the process runs.
unsigned sm_share();

// Around the real cuInit: while the first one waits for an MPS server, a warning every 10 s.
void init_begin();
void init_end();

}  // namespace gpuslice::interposer::mps_client
