#include "node/admission/quantity.h"

#include <string>

namespace gpuslice::node {
namespace {

using u128 = unsigned __int128;
constexpr u128 kMax = ~static_cast<std::uint64_t>(0);
// Far above any uint64 result, yet products of two values below it cannot wrap when checked first.
constexpr u128 kSaturated = static_cast<u128>(1) << 126;

u128 mul_capped(u128 a, u128 b) {
  if (a >= kSaturated / b) return kSaturated;
  return a * b;
}

Error bad(std::string_view text, const char* why) {
  return make_error("quantity '" + std::string(text) + "': " + why);
}

}  // namespace

Result<std::uint64_t> parse_quantity(std::string_view text) {
  std::string_view s = text;
  if (s.empty()) return bad(text, "empty");
  if (s.front() == '-') return bad(text, "negative");
  if (s.front() == '+') s.remove_prefix(1);

  u128 mantissa = 0;
  int fraction_digits = 0;
  bool any_digit = false;
  bool in_fraction = false;
  bool mantissa_overflow = false;
  std::size_t i = 0;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '.') {
      if (in_fraction) return bad(text, "two decimal points");
      in_fraction = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    any_digit = true;
    if (mantissa > kMax * 1000) {
      // Trailing fraction zeros cannot change the value; anything else this long is out of range.
      if (c != '0' || !in_fraction) mantissa_overflow = true;
      continue;
    }
    mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
    if (in_fraction) ++fraction_digits;
  }
  if (!any_digit) return bad(text, "no digits");
  std::string_view suffix = s.substr(i);

  int pow2 = 0;
  int pow10 = -fraction_digits;
  if (suffix.empty()) {
  } else if (suffix.size() == 2 && suffix[1] == 'i') {
    const std::string_view binary = "KMGTPE";
    std::size_t at = binary.find(suffix[0]);
    if (at == std::string_view::npos) return bad(text, "unknown suffix");
    pow2 = 10 * static_cast<int>(at + 1);
  } else if (suffix.size() == 1 && std::string_view("numkMGTPE").find(suffix[0]) != std::string_view::npos) {
    switch (suffix[0]) {
      case 'n':
        pow10 -= 9;
        break;
      case 'u':
        pow10 -= 6;
        break;
      case 'm':
        pow10 -= 3;
        break;
      case 'k':
        pow10 += 3;
        break;
      case 'M':
        pow10 += 6;
        break;
      case 'G':
        pow10 += 9;
        break;
      case 'T':
        pow10 += 12;
        break;
      case 'P':
        pow10 += 15;
        break;
      default:
        pow10 += 18;
        break;  // 'E'
    }
  } else if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::string_view exp = suffix.substr(1);
    bool negative = false;
    if (!exp.empty() && (exp[0] == '+' || exp[0] == '-')) {
      negative = exp[0] == '-';
      exp.remove_prefix(1);
    }
    if (exp.empty() || exp.size() > 3) return bad(text, "bad exponent");
    int value = 0;
    for (char c : exp) {
      if (c < '0' || c > '9') return bad(text, "bad exponent");
      value = value * 10 + (c - '0');
    }
    pow10 += negative ? -value : value;
  } else {
    return bad(text, "unknown suffix");
  }

  if (mantissa == 0) return std::uint64_t{0};
  if (mantissa_overflow) return bad(text, "too large");
  u128 value = mantissa;
  for (int k = 0; k < pow2; ++k) value = mul_capped(value, 2);
  for (; pow10 > 0; --pow10) value = mul_capped(value, 10);
  for (; pow10 < 0; ++pow10) {
    if (value >= kSaturated) return bad(text, "too large");
    if (value % 10 != 0) return bad(text, "not a whole number");
    value /= 10;
  }
  if (value > kMax) return bad(text, "too large");
  return static_cast<std::uint64_t>(value);
}

}  // namespace gpuslice::node
