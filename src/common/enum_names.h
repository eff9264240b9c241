// A name (or letter) per value of a small enum, from one table instead of a switch per enum, and
// the value a name stands for from the same table (both directions, one table per concept).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>

namespace gpuslice {

// `names[v - First]` for value v of an enum whose values run First..Last in order; `fallback` for
// any other (a corrupt or newer value read from outside). The table must name every value.
template <auto First, auto Last, class Name, std::size_t N>
constexpr Name enum_name_from(decltype(Last) value, const Name (&names)[N],
                              std::type_identity_t<Name> fallback) {
  static_assert(std::is_enum_v<decltype(Last)> && std::is_same_v<decltype(First), decltype(Last)>);
  static_assert(N == static_cast<std::size_t>(Last) - static_cast<std::size_t>(First) + 1,
                "one name per value, in the enum's order");
  const auto raw = static_cast<std::size_t>(value);
  const auto first = static_cast<std::size_t>(First);
  return raw >= first && raw - first < N ? names[raw - first] : fallback;
}

// The same for an enum whose values run 0..Last.
template <auto Last, class Name, std::size_t N>
constexpr Name enum_name(decltype(Last) value, const Name (&names)[N], std::type_identity_t<Name> fallback) {
  return enum_name_from<static_cast<decltype(Last)>(0), Last>(value, names, fallback);
}

// The value the table names `text` (ASCII case-insensitive, exact otherwise); nullopt for any other.
template <auto First, auto Last, std::size_t N>
constexpr std::optional<decltype(Last)> enum_value_from(std::string_view text,
                                                        const char* const (&names)[N]) {
  static_assert(N == static_cast<std::size_t>(Last) - static_cast<std::size_t>(First) + 1,
                "one name per value, in the enum's order");
  const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  for (std::size_t i = 0; i < N; ++i) {
    const std::string_view name = names[i];
    if (name.size() != text.size()) continue;
    bool same = true;
    for (std::size_t j = 0; j < name.size() && same; ++j) same = lower(name[j]) == lower(text[j]);
    if (same) return static_cast<decltype(Last)>(static_cast<std::size_t>(First) + i);
  }
  return std::nullopt;
}

}  // namespace gpuslice
