// The library's own threads (the watcher, the MPS watch, the reclaim's host preparation): detached,
// with every signal blocked, since signals belong to the application's threads.
#pragma once

namespace gpuslice::interposer {

// Starts `main` on a new detached thread with all signals blocked; false when it could not start.
bool start_background_thread(void* (*main)(void*));

}  // namespace gpuslice::interposer
