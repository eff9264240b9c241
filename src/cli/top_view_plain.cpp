// Builds without ncurses: `gpuslice top` falls back to plain refreshes.
#include "cli/top_view.h"

namespace gpuslice::cli {

bool top_view_available() { return false; }
int run_top_view(const TopOptions&) { return 1; }

}  // namespace gpuslice::cli
