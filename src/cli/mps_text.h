// The plain-text form of the node's MPS state: `gpuslice mps status` and `gpuslice status --node`.
#pragma once

#include <cstdio>

#include "node/mps/mps_state.h"

namespace gpuslice::cli {

// "MPS: running (control daemon pid 12, servers 40 41, restarts 0)" and its detail lines; tenant
// text cannot reach it (the report comes from the root-owned manager) but is escaped all the same.
void print_mps_text(const node::mps::MpsReport& report, std::FILE* out);

}  // namespace gpuslice::cli
