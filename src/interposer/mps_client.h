// MPS clients configured by gpuslice (docs/priority.md#mps-or-time-slices). When the driver will
// connect to an MPS control daemon (CUDA_MPS_PIPE_DIRECTORY set, or a daemon in NVIDIA's default
// pipe directory), the client's MPS variables are set from the container's limits before the
// driver reads them: the per-device pinned-memory limit from the quota (a backstop under the
// books), the client priority from the level, and the operator's active-thread share below `high`.
// MPS serves one user id at a time: a client of another user waits, so the server it would join is
// checked first and the first cuInit says so while it waits (GPUSLICE_MPS).
#pragma once

#include "config/settings.h"

namespace gpuslice::interposer::mps_client {

// From initialise(), the process's first hooked call, before any real driver call. False: fail
// closed (GPUSLICE_MPS=error and the server serves another user; said why).
bool prepare(const config::Settings& settings);

// Whether this process's driver connects to an MPS control daemon (prepare() found one).
bool active();

// Around the real cuInit: while the first one waits for an MPS server, a warning every 10 s.
void init_begin();
void init_end();

}  // namespace gpuslice::interposer::mps_client
