// Allocation-free text helpers for the profiler's files (usable from a signal handler).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuslice::profiler::detail {

// Each writes at `out` and returns the end of what it wrote (no NUL).
char* put_u64(char* out, std::uint64_t value);
char* put_str(char* out, const char* text, std::size_t length);
char* put_str(char* out, const char* text);
// <dir>/<name> into `out` (PATH_MAX bytes); false if it does not fit.
bool join_path(char* out, const char* dir, const char* name);
bool write_all(int fd, const char* data, std::size_t length);
// Decimal digits only, no overflow; false otherwise.
bool parse_u64(const char* text, const char* end, std::uint64_t* value);
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b);

}  // namespace gpuslice::profiler::detail
