#include "common/duration_scan.h"

#include "common/text.h"

namespace gpuslice::text {

DurationScan scan_duration(std::string_view text, std::span<const DurationUnit> units, Blanks blanks) {
  using Status = DurationScan::Status;
  DurationScan scan;
  if (blanks == Blanks::Skip) text = trim(text);
  std::uint64_t number = 0;
  while (scan.digits < text.size() && text[scan.digits] >= '0' && text[scan.digits] <= '9') {
    // Above a tenth of the bound, one more digit would pass it (the bound ends in 9).
    if (number > kMaxDurationNumber / 10) {
      scan.status = Status::NumberTooLarge;
      return scan;
    }
    number = number * 10 + static_cast<std::uint64_t>(text[scan.digits] - '0');
    ++scan.digits;
  }
  if (scan.digits == 0) return scan;  // Status::NoNumber
  std::string_view suffix = text.substr(scan.digits);
  if (blanks == Blanks::Skip) suffix = trim(suffix);
  for (const DurationUnit& unit : units) {
    if (suffix != unit.suffix) continue;
    if (unit.scale != 0 && number > UINT64_MAX / unit.scale) {
      scan.status = Status::ProductTooLarge;
      return scan;
    }
    scan.status = Status::Ok;
    scan.value = number * unit.scale;
    return scan;
  }
  scan.status = Status::UnknownUnit;
  return scan;
}

}  // namespace gpuslice::text
