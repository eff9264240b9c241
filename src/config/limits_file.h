// The read-only limits file: an administrator's (or the node daemon's) caps that the container
// cannot raise. One parser and one renderer, used by the library, `gpuslice set` and the daemon's
// PUT /limits, so all three accept exactly the same files.
//
// Format: KEY=VALUE lines, '#' comments, blank lines; keys GPUSLICE_MEMORY_LIMIT and
// GPUSLICE_COMPUTE_LIMIT (each at most once), values in the grammar of those variables, optionally
// quoted, or `none`: no cap for that key; and GPUSLICE_PRIORITY (at most once, high|normal|low or
// `none`): the highest priority level the container may run at, and its level when it asks for none
// (docs/priority.md); and GPUSLICE_MPS_LOW_THREADS (at most once, 1-100 or `none`): under MPS, the
// active-thread percentage of the container while it runs below `high`; and GPUSLICE_MPS_PRIORITY (at
// most once, gate|server or `none`): under MPS, whether the host gate holds the container while a
// higher one is busy (gate, the default) or the MPS server's client priority alone ranks its kernels
// (server); and GPUSLICE_MPS_COMPUTE (at most once, threads|time or `none`): under MPS, whether a
// compute limit holds the container as its active-thread percentage (SM share) or by GPU time (the
// default); and GPUSLICE_MEMORY_GUARANTEE (at most once, the grammar of GPUSLICE_MEMORY_LIMIT, or
// `none`): the most memory the container may be guaranteed, and its guarantee when it asks for none;
// never above the file's GPUSLICE_MEMORY_LIMIT for any device either names. Anything else is an error
// naming the line. A file with no KEY=VALUE line at all is an error too: an empty file is what a tool
// that truncates before it writes leaves for a moment, so lifting caps takes an explicit `none`.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "config/priority.h"
#include "config/settings.h"

namespace gpuslice::config {

inline constexpr const char* kMemoryLimitKey = "GPUSLICE_MEMORY_LIMIT";
inline constexpr const char* kComputeLimitKey = "GPUSLICE_COMPUTE_LIMIT";
inline constexpr const char* kPriorityKey = "GPUSLICE_PRIORITY";
inline constexpr const char* kMemoryGuaranteeKey = "GPUSLICE_MEMORY_GUARANTEE";
// Under MPS, the active-thread percentage of containers below `high` (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
inline constexpr const char* kMpsLowThreadsKey = "GPUSLICE_MPS_LOW_THREADS";
// Under MPS, how a container below `high` yields: the host gate (gate) or the server alone (server).
inline constexpr const char* kMpsPriorityKey = "GPUSLICE_MPS_PRIORITY";
inline constexpr std::size_t kMaxLimitsFileBytes = std::size_t{1024} * 1024;

struct LimitValue {
  std::string text;     // as written ("8Gi", "0=8Gi,1=4Gi", a JSON object), rendered back unchanged
  DeviceValues values;  // parsed
};

inline constexpr const char* kNoCap = "none";

struct LimitsFile {
  std::optional<LimitValue> memory;           // bytes; absent: no cap (`none`, or the key left out)
  std::optional<LimitValue> compute;          // percent; idem
  std::optional<LimitValue> guarantee;        // bytes: the cap on the memory guarantee; absent: none
  std::optional<Priority> priority;           // the operator's ceiling; absent: none (`none`, or left out)
  std::optional<unsigned> mps_low_threads;    // percent 1-100; absent: none
  std::optional<MpsYield> mps_yield;          // absent: none (the gate)
  std::optional<MpsComputeMode> mps_compute;  // absent: `time`
  bool missing = false;                       // read_limits_file: there is no file at the path
  bool empty() const { return !memory && !compute; }
};

// Parses the text of a limits file; on the first problem returns "line N: problem".
Result<LimitsFile> parse_limits_file(std::string_view text);
// The canonical text of `limits`: both caps, `none` for an absent one, and the priority when there
// is one (parse_limits_file reads it back to the same values).
std::string render_limits_file(const LimitsFile& limits, std::string_view header_comment = {});
// Checks one value as the file would hold it (for writers building a file from other input).
Result<LimitValue> parse_limit_value(std::string_view key, std::string_view text);

// Reads `path`: a missing file is no caps with `missing` set (a process that starts without one
// runs uncapped; one that had caps keeps them: see the interposer's limits tick); a file that is
// not regular (a FIFO, a directory), larger than kMaxLimitsFileBytes, unreadable, empty or
// malformed is an error naming the file.
Result<LimitsFile> read_limits_file(const std::string& path);

}  // namespace gpuslice::config
