// Where status and top get their containers from: one state file (a container's own view), a node
// root (<root>/containers/<id>/state/state, what the daemon reads), or the daemon's HTTP API.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/dra_text.h"
#include "common/result.h"
#include "node/mps/mps_state.h"
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
  // The node's MPS control daemon: the API's "mps" (absent when the daemon does not manage it), or
  // for a node root the manager's state file ($GPUSLICE_MPS_DIR/state.json), when there is one.
  std::optional<node::mps::MpsReport> mps;
  // The daemon's DRA driver: the API's "dra" (absent unless it runs `gpuslice-node dra` and publishes).
  std::optional<DraSummary> dra;
  std::string error;  // the source as a whole could not be read (no containers then)
};

// One look. Reaps dead processes of each ledger first (as the daemon does), so freed memory shows.
StatusView read_status(const StatusSource& source);

// `--node` without ROOT: the daemon's API at $GPUSLICE_NODE_LISTEN (0.0.0.0 and :: mean loopback)
// when the token file ($GPUSLICE_NODE_TOKEN_FILE, else cli/defaults.h's) is readable and the daemon
// accepts within kNodeApiProbeConnectMs; else the node root `root`, without a word when no daemon
// answered. The API's pod names and GPUs are what the root lacks.
struct NodeSourceChoice {
  StatusSource source;
  std::optional<StatusView> first;  // the daemon's answer: the first refresh, so it is asked once
  std::string note;                 // why a daemon that answered is not used (its error)
};
NodeSourceChoice choose_node_source(const std::string& root);

// The containers of a node root, sorted by id. Exposed for tests.
std::vector<std::string> list_node_containers(const std::string& root, std::string& error);

}  // namespace gpuslice::cli
