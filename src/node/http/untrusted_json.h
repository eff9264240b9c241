// JSON from the network, read without trusting it: a streaming (non-recursive) pass bounds the
// nesting depth and refuses duplicate keys before a document is built, so nothing later (dump(),
// a recursive walk) can be driven into a stack overflow; and JSON written back out never throws
// on invalid UTF-8 (strings that came from files, such as command lines, are replaced, not fatal).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace gpuslice::node {

inline constexpr std::size_t kMaxJsonDepth = 64;  // a Pod's spec is about 10 deep

// Parses `text` into `out`. On failure returns why (no exception): not JSON, nested deeper than
// `max_depth`, or an object with a key given twice.
std::optional<std::string> parse_untrusted_json(std::string_view text, nlohmann::json& out,
                                                std::size_t max_depth = kMaxJsonDepth);

// dump() that replaces invalid UTF-8 with U+FFFD instead of throwing.
std::string json_text(const nlohmann::json& value);

}  // namespace gpuslice::node
