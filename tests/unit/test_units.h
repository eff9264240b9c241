// Byte and time units of the unit tests, defined once: the tests are compiled in unity batches
// (GPUSLICE_UNITY_BUILD), where two files' own constants of one name would clash.
#pragma once

#include <cstdint>

namespace gpuslice::test_units {

inline constexpr std::uint64_t kMi = 1ULL << 20;
inline constexpr std::uint64_t kGi = 1ULL << 30;
inline constexpr std::uint64_t kMiB = kMi;
inline constexpr std::uint64_t kGiB = kGi;
inline constexpr std::uint64_t kMs = 1'000'000;  // nanoseconds

}  // namespace gpuslice::test_units
