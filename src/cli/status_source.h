// Where status and top get their containers from: one state file (a container's own view), a node
// root (<root>/containers/<id>/state/state, what the daemon reads), or the daemon's HTTP API.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "status/container_status.h"

namespace gpuslice::cli {

struct NodeApi {
  std::string url;         // http://HOST:PORT (plain HTTP, as the daemon serves it)
  std::string token_file;  // bearer token, first line of the file
};

struct StatusSource {
  enum class Kind { StateFile, NodeRoot, Api } kind = Kind::StateFile;
  std::string path;  // state file or node root
  NodeApi api;
};

struct GpuSummary {
  std::string uuid, name;
  std::optional<unsigned> index;
  std::uint64_t memory_total_bytes = 0;
};

struct StatusView {
  std::vector<status::ContainerStatus> containers;
  std::vector<GpuSummary> gpus;  // from the daemon's API, when that is the source
  std::string error;             // the source as a whole could not be read (no containers then)
};

// One look. Reaps dead processes of each ledger first (as the daemon does), so freed memory shows.
StatusView read_status(const StatusSource& source);

// The containers of a node root, sorted by id. Exposed for tests.
std::vector<std::string> list_node_containers(const std::string& root, std::string& error);

}  // namespace gpuslice::cli
