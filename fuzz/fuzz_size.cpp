// Fuzzes the scalar grammars: parse_size in every dialect, parse_percent, the log levels, the
// priority and the priority tunables' durations.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/priority.h"
#include "config/settings.h"
#include "fuzz_check.h"

using gpuslice::config::SizeDialect;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  const auto bytes = gpuslice::config::parse_size(text, SizeDialect::Bytes);
  for (SizeDialect dialect : {SizeDialect::Native, SizeDialect::Hcs, SizeDialect::Hami, SizeDialect::Bytes}) {
    const auto parsed = gpuslice::config::parse_size(text, dialect);
    if (parsed) {
      FUZZ_CHECK(*parsed > 0);
      // The value written back as plain bytes parses to itself.
      const auto again = gpuslice::config::parse_size(std::to_string(*parsed), SizeDialect::Bytes);
      FUZZ_CHECK(again && *again == *parsed);
    } else {
      FUZZ_CHECK(!parsed.error().empty());
    }
    // Plain bytes are valid in every dialect, with the same meaning.
    if (bytes) FUZZ_CHECK(parsed && *parsed == *bytes);
  }
  // Native and HCS share one grammar.
  const auto native = gpuslice::config::parse_size(text, SizeDialect::Native);
  const auto hcs = gpuslice::config::parse_size(text, SizeDialect::Hcs);
  FUZZ_CHECK(native.ok() == hcs.ok());
  if (native) FUZZ_CHECK(*native == *hcs);

  const auto percent = gpuslice::config::parse_percent(text);
  if (percent) {
    FUZZ_CHECK(*percent >= 1 && *percent <= 100);
    FUZZ_CHECK(bytes && *bytes == *percent);  // a percent is a plain number too
  }

  const auto level = gpuslice::config::parse_log_level(text);
  if (level) FUZZ_CHECK(static_cast<int>(*level) >= 0 && static_cast<int>(*level) <= 4);
  const auto libcuda = gpuslice::config::parse_libcuda_log_level(text);
  if (libcuda) FUZZ_CHECK(static_cast<int>(*libcuda) >= 0 && static_cast<int>(*libcuda) <= 3);

  const auto priority = gpuslice::config::parse_priority(text);
  if (priority) FUZZ_CHECK(gpuslice::config::parse_priority(gpuslice::config::priority_name(*priority)).ok());
  // GPUSLICE_PRIORITY_IN_FLIGHT's range; a value in range written back in ns parses to itself.
  const auto duration = gpuslice::config::parse_duration_ns(text, 100'000, 100'000'000);
  if (duration) {
    FUZZ_CHECK(*duration >= 100'000 && *duration <= 100'000'000);
    const auto again =
        gpuslice::config::parse_duration_ns(std::to_string(*duration) + "ns", 100'000, 100'000'000);
    FUZZ_CHECK(again && *again == *duration);
  } else {
    FUZZ_CHECK(!duration.error().empty());
  }
  return 0;
}
