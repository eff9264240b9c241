// The observer's ledger (CLI, daemon): it never reads a tenant's state file through a mapping.
// Reads pread the whole file into a private copy and validate it; the few stores (limits, reaping)
// go through a short-lived mapping under a SIGBUS guard. A tenant that truncates or rewrites its
// file gets an error for that file, never a crashed observer.
#pragma once

#include <memory>
#include <string>

#include "shared_state/ledger.h"

namespace gpuslice::shm::detail {

// Takes ownership of `fd` (a regular file, already validated once).
std::unique_ptr<Ledger> make_observed_ledger(std::string path, int fd, bool writable);

}  // namespace gpuslice::shm::detail
