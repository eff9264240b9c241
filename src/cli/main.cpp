// gpuslice: run programs under limits and inspect or change a running container's limits.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cli/args.h"
#include "cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"run", gpuslice::cli::cmd_run, "run a command under a memory/compute limit"},
    {"status", gpuslice::cli::cmd_status, "show quotas, usage and processes of a container"},
    {"top", gpuslice::cli::cmd_top, "live view of status (status --watch)"},
    {"set", gpuslice::cli::cmd_set, "change the limits of a running container"},
    {"profile", gpuslice::cli::cmd_profile, "summarise per-API profile files (metrics.log, timeline.log)"},
    {"mps", gpuslice::cli::cmd_mps, "run, inspect or stop the node's MPS control daemon"},
    {"version", gpuslice::cli::cmd_version, "print the version"},
};

void print_help(std::FILE* out) {
  std::fprintf(out,
               "Usage: gpuslice COMMAND [options]\n\nShares NVIDIA GPUs between processes and containers.\n\n"
               "Commands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-8s  %s\n", c.name, c.summary);
  std::fprintf(out, "\nRun 'gpuslice COMMAND --help' for a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_help(stderr);
    return gpuslice::cli::kExitUsage;
  }
  std::string_view name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    if (name == "help" && argc > 2) {
      for (const Command& c : kCommands) {
        if (std::strcmp(argv[2], c.name) == 0) {
          char help_flag[] = "--help";
          char* forwarded[] = {argv[2], help_flag, nullptr};
          return c.run(2, forwarded);
        }
      }
      std::fprintf(stderr, "gpuslice: unknown command '%s'\n", argv[2]);
      return gpuslice::cli::kExitUsage;
    }
    print_help(stdout);
    return gpuslice::cli::kExitOk;
  }
  if (name == "--version" || name == "-V") return gpuslice::cli::cmd_version(1, argv + 1);
  for (const Command& c : kCommands) {
    if (name == c.name) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "gpuslice: unknown command '%s'\n", argv[1]);
  print_help(stderr);
  return gpuslice::cli::kExitUsage;
}
