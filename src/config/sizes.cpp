// Scalar grammars: sizes in every dialect, percentages and log levels.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "config/parse_internal.h"
#include "config/settings.h"
#include "config/text_util.h"

namespace gpuslice::config {

namespace {

// Exact arithmetic for "<digits>.<digits><unit>": integer part < 2^64 times a unit <= 2^60, and a
// fraction of at most kMaxFractionDigits digits times the unit, both fit in 128 bits.
__extension__ typedef unsigned __int128 Wide;

constexpr std::uint64_t kMaxBytes = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t kMaxFractionDigits = 20;

struct Unit {
  std::string_view name;  // lower-case; matched case-insensitively
  std::uint64_t bytes;
};

constexpr std::uint64_t kKi = 1ULL << 10;
constexpr std::uint64_t kMi = 1ULL << 20;
constexpr std::uint64_t kGi = 1ULL << 30;
constexpr std::uint64_t kTi = 1ULL << 40;
constexpr std::uint64_t kPi = 1ULL << 50;
constexpr std::uint64_t kEi = 1ULL << 60;
constexpr std::uint64_t kK = 1000ULL;
constexpr std::uint64_t kM = kK * 1000;
constexpr std::uint64_t kG = kM * 1000;
constexpr std::uint64_t kT = kG * 1000;
constexpr std::uint64_t kP = kT * 1000;
constexpr std::uint64_t kE = kP * 1000;

// GPUSLICE_* and HCS_VRAM_QUOTA: IEC units are binary, SI units decimal, a trailing B optional.
constexpr Unit kNativeUnits[] = {
    {"", 1},      {"b", 1},    {"k", kK},    {"kb", kK},   {"ki", kKi},  {"kib", kKi}, {"m", kM},
    {"mb", kM},   {"mi", kMi}, {"mib", kMi}, {"g", kG},    {"gb", kG},   {"gi", kGi},  {"gib", kGi},
    {"t", kT},    {"tb", kT},  {"ti", kTi},  {"tib", kTi}, {"p", kP},    {"pb", kP},   {"pi", kPi},
    {"pib", kPi}, {"e", kE},   {"eb", kE},   {"ei", kEi},  {"eib", kEi},
};
// HAMi-core writes single letters and means powers of 1024 by them.
constexpr Unit kHamiUnits[] = {{"", 1}, {"k", kKi}, {"m", kMi}, {"g", kGi}, {"t", kTi}};
constexpr Unit kByteUnits[] = {{"", 1}};

template <std::size_t N>
const Unit* find_unit(const Unit (&units)[N], std::string_view name) {
  for (const Unit& unit : units) {
    if (detail::iequals(unit.name, name)) return &unit;
  }
  return nullptr;
}

const Unit* find_unit(SizeDialect dialect, std::string_view name) {
  switch (dialect) {
    case SizeDialect::Native:
    case SizeDialect::Hcs:
      return find_unit(kNativeUnits, name);
    case SizeDialect::Hami:
      return find_unit(kHamiUnits, name);
    case SizeDialect::Bytes:
      return find_unit(kByteUnits, name);
  }
  return nullptr;
}

const char* unit_hint(SizeDialect dialect) {
  switch (dialect) {
    case SizeDialect::Native:
    case SizeDialect::Hcs:
      return "use Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024) or K, M, G, T, P, E (powers of 1000), "
             "optionally followed by B, or plain bytes";
    case SizeDialect::Hami:
      return "use k, m, g or t (powers of 1024, any case) or plain bytes";
    case SizeDialect::Bytes:
      return "this variable takes plain bytes only";
  }
  return "";
}

std::string overflow_message() { return "larger than 18446744073709551615 bytes (2^64-1)"; }

}  // namespace

namespace detail {

Result<std::uint64_t> parse_size_value(std::string_view text, SizeDialect dialect, bool allow_zero) {
  const std::string_view t = trim(text);
  if (t.empty()) return make_error("empty value");
  if (t.front() == '-') return make_error("negative sizes are not allowed");
  if (t.front() == '+') return make_error("a '+' sign is not allowed");

  std::size_t pos = 0;
  Wide whole = 0;
  bool too_big = false;  // keep scanning: a grammar error is the more useful message
  while (pos < t.size() && is_digit(t[pos])) {
    if (!too_big) {
      whole = whole * 10 + static_cast<unsigned>(t[pos] - '0');
      too_big = whole > kMaxBytes;
    }
    ++pos;
  }
  if (pos == 0) {
    return make_error(t.front() == '.' ? "expected a digit before '.'" : "expected a number");
  }
  std::string_view fraction;
  if (pos < t.size() && t[pos] == '.') {
    const std::size_t start = ++pos;
    while (pos < t.size() && is_digit(t[pos])) ++pos;
    if (pos == start) return make_error("expected digits after '.'");
    fraction = t.substr(start, pos - start);
  }

  const std::string_view unit_text = t.substr(pos);
  if (!unit_text.empty() && is_space(unit_text.front())) {
    return make_error("no space is allowed between the number and its unit");
  }
  const Unit* unit = find_unit(dialect, unit_text);
  if (unit == nullptr) {
    return make_error("unknown unit '" + printable(unit_text, 32) + "' (" + unit_hint(dialect) + ")");
  }
  if (!fraction.empty() && dialect == SizeDialect::Bytes) {
    return make_error("fractions are not allowed: the value is a whole number of bytes");
  }
  if (too_big) return make_error(overflow_message());

  while (!fraction.empty() && fraction.back() == '0') fraction.remove_suffix(1);
  Wide total = whole * unit->bytes;
  if (!fraction.empty()) {
    if (fraction.size() > kMaxFractionDigits) return make_error("too many digits after '.'");
    Wide numerator = 0;
    Wide denominator = 1;
    for (char c : fraction) {
      numerator = numerator * 10 + static_cast<unsigned>(c - '0');
      denominator *= 10;
    }
    const Wide scaled = numerator * unit->bytes;
    if (scaled % denominator != 0) return make_error("not a whole number of bytes");
    total += scaled / denominator;
  }
  if (total > kMaxBytes) return make_error(overflow_message());
  // The ledger stores "no quota" as 2^64-1: accepting it as a size would silently mean unlimited.
  if (total == kMaxBytes) {
    return make_error(
        "18446744073709551615 bytes (2^64-1) means 'no limit' inside gpuslice; leave the "
        "variable unset for no limit");
  }
  if (total == 0 && !allow_zero) return make_error("must be greater than 0");
  return static_cast<std::uint64_t>(total);
}

Result<unsigned> parse_percent_value(std::string_view text, bool allow_zero) {
  const std::string_view t = trim(text);
  const char* const range =
      allow_zero ? "expected a whole number from 0 to 100" : "expected a whole number from 1 to 100";
  if (t.empty()) return make_error("empty value");
  if (t.front() == '-') return make_error("negative percentages are not allowed");
  std::size_t pos = 0;
  unsigned value = 0;
  while (pos < t.size() && is_digit(t[pos])) {
    if (value <= 100) value = value * 10 + static_cast<unsigned>(t[pos] - '0');
    ++pos;
  }
  if (pos == 0) return make_error(range);
  if (pos < t.size()) {
    if (t[pos] == '.') return make_error(std::string("fractions are not allowed: ") + range);
    return make_error(std::string("unexpected '") + printable(t.substr(pos), 32) + "': " + range);
  }
  if (value > 100 || (value == 0 && !allow_zero)) return make_error(std::string("out of range: ") + range);
  return value;
}

}  // namespace detail

Result<std::uint64_t> parse_size(std::string_view text, SizeDialect dialect) {
  return detail::parse_size_value(text, dialect, /*allow_zero=*/false);
}

Result<unsigned> parse_percent(std::string_view text) {
  return detail::parse_percent_value(text, /*allow_zero=*/false);
}

Result<log::Level> parse_log_level(std::string_view text) {
  struct Name {
    std::string_view name;
    log::Level level;
  };
  static constexpr Name kNames[] = {
      {"error", log::Level::Error}, {"warn", log::Level::Warn},   {"warning", log::Level::Warn},
      {"info", log::Level::Info},   {"debug", log::Level::Debug}, {"trace", log::Level::Trace},
  };
  const std::string_view t = detail::trim(text);
  for (const Name& entry : kNames) {
    if (detail::iequals(entry.name, t)) return entry.level;
  }
  if (t.size() == 1 && t[0] >= '0' && t[0] <= '4') return static_cast<log::Level>(t[0] - '0');
  return make_error("expected error, warn, info, debug, trace or a number 0-4");
}

Result<log::Level> parse_libcuda_log_level(std::string_view text) {
  static constexpr log::Level kByNumber[] = {log::Level::Error, log::Level::Warn, log::Level::Info,
                                             log::Level::Info, log::Level::Debug};
  const std::string_view t = detail::trim(text);
  if (t.size() == 1 && t[0] >= '0' && t[0] <= '4') return kByNumber[t[0] - '0'];
  return make_error("expected a number 0 (errors) to 4 (debug)");
}

}  // namespace gpuslice::config
