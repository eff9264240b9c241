// The per-thread event rings: record() writes to the calling thread's ring without a lock, and the
// flush reads every ring of the session through the registry list.
#pragma once

#include "profiler/session.h"

namespace gpuslice::profiler::detail {

// The head of the registry list, read under its lock; only a holder of g_flush_mutex frees rings,
// so such a holder may walk the list from here.
Ring* registry_head();
void unlink_ring(Ring* ring);
// Once per process: the thread-exit hook that hands a thread's ring to the flusher.
void create_thread_exit_key();
// In a forked child, where only the calling thread survived: frees every ring outright.
void free_rings_in_fork_child();

}  // namespace gpuslice::profiler::detail
