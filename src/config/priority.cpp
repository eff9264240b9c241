#include "config/priority.h"

#include <cstdint>
#include <string>

#include "common/enum_names.h"
#include "config/text_util.h"

namespace gpuslice::config {

Result<Priority> parse_priority(std::string_view text) {
  const std::string_view word = detail::trim(text);
  for (const Priority p : {Priority::High, Priority::Normal, Priority::Low}) {
    if (detail::iequals(word, priority_name(p))) return p;
  }
  return make_error("expected high, normal or low");
}

Result<std::uint64_t> parse_duration_ns(std::string_view text, std::uint64_t min_ns, std::uint64_t max_ns) {
  const std::string_view word = detail::trim(text);
  const auto range = [&] {
    return "expected a duration from " + std::to_string(min_ns / 1000) + "us to " +
           std::to_string(max_ns / 1000) +
           "us, written as a whole number and ns, us, ms or s (e.g. 500us, 2ms)";
  };
  std::size_t digits = 0;
  std::uint64_t value = 0;
  while (digits < word.size() && word[digits] >= '0' && word[digits] <= '9') {
    if (value > (UINT64_MAX - 9) / 10) return make_error("number too large: " + range());
    value = value * 10 + static_cast<std::uint64_t>(word[digits] - '0');
    ++digits;
  }
  if (digits == 0) return make_error(range());
  const std::string_view unit = detail::trim(word.substr(digits));
  std::uint64_t scale = 0;
  if (unit == "ns")
    scale = 1;
  else if (unit == "us")
    scale = 1'000;
  else if (unit == "ms")
    scale = 1'000'000;
  else if (unit == "s")
    scale = 1'000'000'000;
  if (scale == 0) return make_error(range());
  if (value > max_ns / scale) return make_error(range());
  const std::uint64_t ns = value * scale;
  if (ns < min_ns || ns > max_ns) return make_error(range());
  return ns;
}

const char* priority_name(Priority priority) {
  static constexpr const char* kNames[] = {"low", "normal", "high"};
  return enum_name<Priority::High>(priority, kNames, "normal");
}

}  // namespace gpuslice::config
