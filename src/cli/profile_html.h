// A profile as one self-contained HTML page (no external URL: styles, script and data inline): the
// per-API table, a chart of the time per API and a timeline of the calls and refused allocations.
#pragma once

#include <string>

#include "cli/profile_data.h"

namespace gpuslice::cli {

// At most this many calls are drawn on the timeline (the longest ones when there are more).
inline constexpr std::size_t kHtmlMaxTimelineCalls = 20000;

std::string profile_html(const ProfileData& data);

}  // namespace gpuslice::cli
