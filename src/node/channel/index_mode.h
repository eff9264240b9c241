// `gpuslice-node index`: keeps the writer index of a node directory users share on a plain host
// (node/channel/writer_indexer.h), for an operator who runs nothing else of the daemon.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "node/startup/flag_table.h"

namespace gpuslice::node {

struct IndexModeOptions {
  std::string node_dir;
  std::chrono::milliseconds refresh{0};
  std::chrono::milliseconds relist{0};
  std::string log_level;
};

// `args` excludes the program name and the mode. `env` looks up environment variables.
ParseOutcome parse_index_options(const std::vector<std::string>& args, const EnvLookup& env,
                                 IndexModeOptions& out);
std::string usage_index();

// Runs until SIGTERM or SIGINT (then removes the index); returns the process's exit code.
int run_index_mode(const std::vector<std::string>& args, const EnvLookup& env);

}  // namespace gpuslice::node
