// The buffers of a session, allocated by start() so that a flush never allocates.
#pragma once

#include <cstddef>
#include <cstdint>

#include "profiler/session.h"

namespace gpuslice::profiler::detail {

// Frees what an earlier session held, then allocates the buffers for `api_count` APIs and copies
// their names; false (everything freed, api_count 0) when memory ran out.
bool set_up_session_buffers(Session& s, const char* const* api_names, std::size_t api_count);

// The smallest power of two >= value (at least 2, at most 2^30).
std::uint64_t round_up_power_of_two(std::size_t value);

}  // namespace gpuslice::profiler::detail
