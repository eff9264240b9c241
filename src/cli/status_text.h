// The plain-text form of status: what `gpuslice status` prints and what `top` prints when stdout is
// not a terminal. One container as before; node views add a heading per container.
#pragma once

#include <cstdio>

#include "cli/status_source.h"

namespace gpuslice::cli {

void print_container_text(const status::ContainerStatus& c, std::FILE* out);
void print_view_text(const StatusView& view, bool node, std::FILE* out);

// "30%" or "-" (no whole), "none" for an absent limit; shared with the terminal view.
std::string percent_text(double ratio);
// A device record or CUDA index; "-" when the source does not know it (negative).
std::string index_text(int index);
// A GPU UUID in 14 characters: first 8 and last 4 hex digits ("6d6f636b..0001").
std::string short_uuid(const std::string& uuid);

}  // namespace gpuslice::cli
