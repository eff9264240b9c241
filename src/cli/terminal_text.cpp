#include "cli/terminal_text.h"

#include <cstdint>

namespace gpuslice::cli {
namespace {

// Length of the well-formed UTF-8 sequence at the start of `s` and its code point, or 0 (RFC 3629:
// no overlong forms, no surrogates, nothing above U+10FFFF).
std::size_t decode_utf8(std::string_view s, std::uint32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  std::size_t len = 0;
  std::uint32_t min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() < len) return 0;
  for (std::size_t i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// Code points a terminal or a reader takes for something other than a character: C1 controls
// (U+009B is CSI on terminals that read UTF-8), line and paragraph separators, bidirectional
// embeddings, overrides and isolates (they reorder what follows on the line).
bool is_control(std::uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F || cp == 0x061C || cp == 0xFEFF;
}

}  // namespace

std::string terminal_text(std::string_view text, std::size_t max_columns) {
  std::string out;
  out.reserve(text.size() < 256 ? text.size() : 256);
  std::size_t columns = 0;
  // Where the text is cut if it turns out longer than max_columns: room for "..." behind it.
  std::size_t cut_at = std::string::npos;
  const std::size_t keep = max_columns > 3 ? max_columns - 3 : max_columns;
  while (!text.empty()) {
    if (columns == keep && cut_at == std::string::npos) cut_at = out.size();
    if (columns == max_columns) {
      out.resize(cut_at);
      if (max_columns > 3) out += "...";
      return out;
    }
    const auto byte = static_cast<unsigned char>(text[0]);
    std::size_t used = 1;
    if (byte >= 0x20 && byte < 0x7F) {
      out += text[0];
    } else if (byte < 0x80) {
      out += '?';
    } else {
      std::uint32_t cp = 0;
      const std::size_t len = decode_utf8(text, cp);
      if (len == 0 || is_control(cp)) {
        out += '?';
        if (len != 0) used = len;
      } else {
        out.append(text.substr(0, len));
        used = len;
      }
    }
    text.remove_prefix(used);
    ++columns;
  }
  return out;
}

std::size_t terminal_columns(std::string_view safe_text) {
  std::size_t columns = 0;
  for (char c : safe_text) columns += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return columns;
}

}  // namespace gpuslice::cli
