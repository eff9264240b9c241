// Prometheus text exposition (format 0.0.4) of a NodeView. Names and labels are those of
// docs/metrics.md (snake_case; Kubernetes namespace/pod/container/node labels).
#pragma once

#include <string>
#include <string_view>

#include "node/collector.h"

namespace gpuslice::node {

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// Escapes a label value: backslash, double quote and newline.
std::string escape_label_value(std::string_view value);

std::string render_metrics(const NodeView& view, std::string_view version);

}  // namespace gpuslice::node
