// Profiles as Chrome trace-event JSON (the format Perfetto and chrome://tracing load): one complete
// ("X") event per timeline call, memcpy directions as their own category, refused allocations as
// instant events on a track of their own, and process/thread names as metadata events.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/profile_data.h"

namespace gpuslice::cli {

// The process id given to calls whose timeline line names no pid (beyond any real pid_max).
inline constexpr std::int64_t kTraceUnknownPid = 1LL << 30;
// Thread id of the refused-allocation track inside a process.
inline constexpr std::int64_t kTraceRefusalTid = (1LL << 30) + 1;

// Which track each call goes to: its pid/tid when the timeline recorded them, otherwise
// kTraceUnknownPid and a "lane": calls that overlap in time never share a lane, so each lane
// nests like a thread would (the timeline does not say which thread made a call).
struct CallTrack {
  std::int64_t pid = 0;
  std::int64_t tid = 0;
};
std::vector<CallTrack> assign_tracks(const ProfileData& data);

// The epoch time of the first call or refused allocation (0 when there is none): what the trace
// and the HTML page count their times from.
std::uint64_t trace_origin(const ProfileData& data);

// "H2D", "D2H", "D2D" for the profiler's copy names (cuMemcpyH2D...), empty otherwise.
std::string memcpy_direction(std::string_view api);

// The whole trace document. Timestamps are microseconds since the first event (the epoch time of
// that instant is in otherData.start_epoch_ns), so they keep nanosecond precision as doubles.
nlohmann::json chrome_trace(const ProfileData& data);

}  // namespace gpuslice::cli
