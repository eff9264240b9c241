// The scanner behind every duration gpuslice reads (the priority tunables, the node daemon's
// flags): a whole number and a unit suffix from the caller's table. Each caller keeps its own
// grammar (units, what a bare number means, blanks) and its own error wording; this only reads.
// No allocation and no exceptions: the injected library uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace gpuslice::text {

// One accepted unit: its suffix ("" lets a bare number through) and what one of it is worth in
// the caller's base unit.
struct DurationUnit {
  std::string_view suffix;
  std::uint64_t scale;
};

enum class Blanks {
  Skip,        // blanks around the number and the unit are ignored ("  2 ms\n")
  NotAllowed,  // a blank anywhere makes the text malformed
};

// The largest number read: UINT64_MAX rounded down to a whole ten, minus one. Ending in 9, it
// lets the digit loop refuse a number before it multiplies (the bound the priority tunables
// always had; no caller's range comes near it).
inline constexpr std::uint64_t kMaxDurationNumber = UINT64_MAX / 10 * 10 - 1;

struct DurationScan {
  enum class Status {
    Ok,
    NoNumber,         // no digit where the number should start (empty text, a sign, a unit alone)
    NumberTooLarge,   // the number is above kMaxDurationNumber
    UnknownUnit,      // what follows the number is not a suffix of the table (trailing garbage)
    ProductTooLarge,  // number x scale does not fit in 64 bits
  };
  Status status = Status::NoNumber;
  std::uint64_t value = 0;  // number x the unit's scale, when status is Ok
  std::size_t digits = 0;   // digits read, leading zeros included (a caller may cap them)
};

// Reads all of `text` as digits and then one suffix of `units` (compared exactly, so case
// matters). Nothing may follow the suffix but blanks, and those only under Blanks::Skip.
DurationScan scan_duration(std::string_view text, std::span<const DurationUnit> units, Blanks blanks);

}  // namespace gpuslice::text
