// Alnair's metrics format: this process's metrics.<pid>.log and the directory-wide metrics.log, the
// sum of every process's file, rebuilt under .metrics.lock; and profiler.log's drop reports.
#pragma once

#include <cstddef>
#include <cstdint>

#include "profiler/session.h"

namespace gpuslice::profiler::detail {

// Formats `entries` APIs into s.text_buffer (three lines per API that was called); returns the length.
std::size_t format_metrics(const Session& s, const std::uint64_t* count, const std::uint64_t* total,
                           std::size_t entries);
void write_own_metrics(Session& s);
void write_merged_metrics(Session& s);
void report_dropped(Session& s, std::uint64_t dropped);

}  // namespace gpuslice::profiler::detail
