#include "config/priority.h"

#include <cstdint>
#include <string>

#include "common/duration_scan.h"
#include "config/text_util.h"

namespace gpuslice::config {

Result<Priority> parse_priority(std::string_view text) {
  if (const auto p = priority_from_name(detail::trim(text))) return *p;
  return make_error("expected high, normal or low");
}

Result<std::uint64_t> parse_duration_ns(std::string_view text, std::uint64_t min_ns, std::uint64_t max_ns) {
  // A unit is required: with no "" suffix in the table, a bare number is malformed.
  static constexpr text::DurationUnit kUnits[] = {
      {"ns", 1}, {"us", 1'000}, {"ms", 1'000'000}, {"s", 1'000'000'000}};
  const auto range = [&] {
    return "expected a duration from " + std::to_string(min_ns / 1000) + "us to " +
           std::to_string(max_ns / 1000) +
           "us, written as a whole number and ns, us, ms or s (e.g. 500us, 2ms)";
  };
  const text::DurationScan scan = text::scan_duration(text, kUnits, text::Blanks::Skip);
  if (scan.status == text::DurationScan::Status::NumberTooLarge)
    return make_error("number too large: " + range());
  if (scan.status != text::DurationScan::Status::Ok || scan.value < min_ns || scan.value > max_ns)
    return make_error(range());
  return scan.value;
}

}  // namespace gpuslice::config
