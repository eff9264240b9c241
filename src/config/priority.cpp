#include "config/priority.h"

#include <string>

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
  switch (priority) {
    case Priority::Low:
      return "low";
    case Priority::Normal:
      return "normal";
    case Priority::High:
      return "high";
  }
  return "normal";
}

}  // namespace gpuslice::config
