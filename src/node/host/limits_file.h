// The read-only limits file of a container, as the daemon writes it. Parsing and rendering are
// config/limits_file.h's (the library's own reader), so the daemon accepts exactly the files the
// library accepts; this adds the daemon's side: text values, atomic replacement and a writer lock.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "config/limits_file.h"

namespace gpuslice::node {

using config::kComputeLimitKey;
using config::kMemoryLimitKey;

struct Limits {
  std::optional<std::string> memory;     // value as written: "8589934592", "8Gi", "0=8Gi,1=4Gi", JSON
  std::optional<std::string> compute;    // "30", "0=30,1=50", JSON
  std::optional<Priority> priority;      // the operator's ceiling (GPUSLICE_PRIORITY); absent: none
  std::optional<std::string> guarantee;  // GPUSLICE_MEMORY_GUARANTEE as written; absent: none
  // The operator's MPS keys (GPUSLICE_MPS_LOW_THREADS, _COMPUTE, _PRIORITY): kept as they are
  // through a read-modify-write, so a PUT /limits of the caps does not drop them.
  std::optional<unsigned> mps_low_threads;
  std::optional<config::MpsComputeMode> mps_compute;
  std::optional<config::MpsYield> mps_yield;

  bool empty() const { return !memory && !compute; }
};

// Parses the text of a limits file with the library's parser (unknown keys, bad values and
// repeated keys are errors naming the line).
Result<Limits> parse_limits(std::string_view text);
// Renders `limits` as the library's renderer does (values are written as given: check them with
// config::parse_limit_value first, as update_limits_file does).
std::string render_limits(const Limits& limits);

// A missing file reads as empty limits; an unreadable, non-regular or malformed one is an error.
Result<Limits> read_limits_file(const std::string& path);

// Writes through a temporary file in the same directory and rename(2), so a reader sees either the
// old or the new content, never a partial one. Creates the directory if needed. The new file's mtime
// is always later than the one it replaces (readers notice a change by mtime and size, and two writes
// within one tick of the filesystem clock would otherwise look alike).
Result<bool> write_file_atomically(const std::string& path, std::string_view content, unsigned mode = 0644);

// Read-modify-write of the limits file at `path` under an exclusive flock on its directory, so
// concurrent writers (two PUT /limits) serialise and none loses an acknowledged update. `change`
// edits the current limits; `written` (optional) runs after the write, still under the lock, so what it
// derives from the file (the ledger's caps) lands in the same order as the writes. The result is what
// was written.
Result<Limits> update_limits_file(const std::string& path, const std::function<void(Limits&)>& change,
                                  const std::function<void(const Limits&)>& written = {});

}  // namespace gpuslice::node
