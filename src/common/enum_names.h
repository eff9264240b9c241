// A name (or letter) per value of a small enum, from a table instead of a switch per enum.
#pragma once

#include <cstddef>
#include <type_traits>

namespace gpuslice {

// `names[v]` for value v of an enum whose values run 0..Last in order; `fallback` for any other
// (a corrupt or newer value read from outside). The table must name every value up to Last.
template <auto Last, class Name, std::size_t N>
constexpr Name enum_name(decltype(Last) value, const Name (&names)[N], std::type_identity_t<Name> fallback) {
  static_assert(std::is_enum_v<decltype(Last)>);
  static_assert(N == static_cast<std::size_t>(Last) + 1, "one name per value, in the enum's order");
  const auto index = static_cast<std::size_t>(value);
  return index < N ? names[index] : fallback;
}

}  // namespace gpuslice
