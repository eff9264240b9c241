// The level of a container among the containers sharing a GPU (docs/priority.md). One type from
// where a level enters (annotation, environment, `gpuslice set`, the operator's assignment) to
// where the launch gate decides; the ledger and the node channel store its value as is, with 0
// (kNoPriority) meaning none set, so a zero-filled file reads as "not set".
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/enum_names.h"

namespace gpuslice {

enum class Priority : std::uint32_t { Low = 1, Normal = 2, High = 3 };
inline constexpr std::uint32_t kNoPriority = 0;

namespace detail {
inline constexpr const char* kPriorityNames[] = {"low", "normal", "high"};
}

constexpr const char* priority_name(Priority p) {
  return enum_name_from<Priority::Low, Priority::High>(p, detail::kPriorityNames, "normal");
}
// "high", "normal" or "low", case-insensitive; nullopt for anything else.
constexpr std::optional<Priority> priority_from_name(std::string_view text) {
  return enum_value_from<Priority::Low, Priority::High>(text, detail::kPriorityNames);
}
// A value read from shared state: nullopt for kNoPriority and for anything out of range.
constexpr std::optional<Priority> priority_from_value(std::uint32_t raw) {
  if (raw < static_cast<std::uint32_t>(Priority::Low) || raw > static_cast<std::uint32_t>(Priority::High))
    return std::nullopt;
  return static_cast<Priority>(raw);
}
constexpr std::uint32_t priority_value(Priority p) { return static_cast<std::uint32_t>(p); }
// The lower of two levels (a claim and the operator's assignment).
constexpr Priority lower_priority(Priority a, Priority b) {
  return priority_value(a) < priority_value(b) ? a : b;
}
// The level a container runs at: the lower of what it asks (a stored value, kNoPriority when it
// asks none) and what the operator assigned, and the assigned level when it asks none.
constexpr Priority resolved_priority(std::uint32_t asked, Priority assigned) {
  const auto level = priority_from_value(asked);
  return level ? lower_priority(*level, assigned) : assigned;
}

}  // namespace gpuslice
