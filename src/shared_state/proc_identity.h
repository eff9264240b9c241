// Who this process is, for its slot: the host pid and a short command line. Reads /proc with
// open/read into stack buffers only, so it is usable in a fork child before anything else runs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shared_state/layout.h"

namespace gpuslice::shm {

// This process's pid as seen from the host (what NVML reports), or 0 when it cannot be known.
// In the initial PID namespace that is getpid(). In a nested namespace the NSpid line of
// /proc/self/status lists the pid in every namespace from the one that mounted /proc down to
// ours; with more than one entry the first is the outermost visible one. A container with its
// own /proc sees only its own pid there, so the answer is 0 and the interposer may set it later
// from NVML (Ledger::set_host_pid).
std::int32_t detect_host_pid();

// Pure part of detect_host_pid(), for tests: `status` is the text of /proc/self/status,
// `initial_namespace` whether /proc/self/ns/pid is the initial PID namespace.
std::int32_t host_pid_from_status(const char* status, std::size_t size, bool initial_namespace,
                                  std::int32_t own_pid);

// The command line (arguments separated by spaces, truncated) packed as the slot stores it.
void read_own_command(std::uint64_t (&words)[layout::kCommandWords]);

}  // namespace gpuslice::shm
