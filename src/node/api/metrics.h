// Prometheus text exposition (format 0.0.4) of a NodeView. Names and labels are those of
// docs/metrics.md (snake_case; Kubernetes namespace/pod/container/node labels).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "node/node_view/collector.h"

namespace gpuslice::node {

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// Longest label value rendered, in bytes before escaping. Values come from files a tenant writes
// (device UUIDs, pod names): one megabyte "UUID" must not become a megabyte per series.
inline constexpr std::size_t kMaxLabelValueBytes = 1024;

// `text` as valid UTF-8 of at most `max_bytes`: every byte that does not start a well-formed
// sequence (overlong, surrogate, above U+10FFFF, truncated, stray continuation) becomes U+FFFD, and
// the result is cut at a character boundary. Prometheus refuses a whole scrape over one invalid label.
std::string valid_utf8(std::string_view text, std::size_t max_bytes);

// A label value as the exposition carries it: valid_utf8(value, kMaxLabelValueBytes), then backslash,
// double quote and newline escaped.
std::string escape_label_value(std::string_view value);

std::string render_metrics(const NodeView& view, std::string_view version);

}  // namespace gpuslice::node
