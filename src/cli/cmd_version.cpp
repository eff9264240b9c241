#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "shared_state/layout.h"

#ifndef GPUSLICE_VERSION
#define GPUSLICE_VERSION "unknown"
#endif

namespace gpuslice::cli {

int cmd_version(int argc, char** argv) {
  static const CommandSpec spec{
      "version", "", "Print the gpuslice version and the shared-state layout version.", "", {}};
  ParsedArgs args;
  if (auto done = parse_command(spec, argc, argv, args)) return *done;
  if (!args.positionals.empty())
    return usage_error(spec, "unexpected argument '" + args.positionals[0] + "'");
  std::printf("gpuslice %s (shared-state layout %u)\n", GPUSLICE_VERSION,
              static_cast<unsigned>(shm::layout::kLayoutVersion));
  return kExitOk;
}

}  // namespace gpuslice::cli
