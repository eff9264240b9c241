#include "config/text_util.h"

namespace gpuslice::config::detail {

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

std::string printable(std::string_view value, size_t max_chars) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(value.size() < max_chars ? value.size() : max_chars + 3);
  size_t shown = 0;
  for (char c : value) {
    if (shown == max_chars) {
      out += "...";
      break;
    }
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
    ++shown;
  }
  return out;
}

std::string variable_error(std::string_view name, std::string_view value, std::string_view reason) {
  std::string out(name);
  out += "='";
  out += printable(value);
  out += "': ";
  out += reason;
  return out;
}

}  // namespace gpuslice::config::detail
