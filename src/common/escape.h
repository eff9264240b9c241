// Escaping by a table of single characters: each format's rules read as one line of data.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace gpuslice::text {

// A character and what stands for it in the escaped text.
struct CharEscape {
  char c;
  std::string_view with;
};

// `text` with every character listed in `escapes` replaced by its escape; other bytes as they are.
inline std::string escape_chars(std::string_view text, std::initializer_list<CharEscape> escapes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const CharEscape* hit = nullptr;
    for (const CharEscape& e : escapes) {
      if (e.c == c) hit = &e;
    }
    if (hit) {
      out += hit->with;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace gpuslice::text
