#include "config/priority.h"

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

const char* priority_name(Priority priority) {
  static constexpr const char* kNames[] = {"low", "normal", "high"};
  return enum_name<Priority::High>(priority, kNames, "normal");
}

}  // namespace gpuslice::config
