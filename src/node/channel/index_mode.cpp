#include "node/channel/index_mode.h"

#include "common/log.h"
#include "node/channel/writer_indexer.h"
#include "node/startup/run_mode.h"
#include "shared_state/writer_index.h"

namespace gpuslice::node {
namespace {

// Readers believe an index rewritten within shm::kWriterIndexFreshNs: the refresh stays well inside.
Apply set_refresh(std::chrono::milliseconds& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    auto d = parse_duration(v);
    if (!d) return d.error();
    const auto most = std::chrono::milliseconds(shm::kWriterIndexFreshNs / 1'000'000ULL / 2);
    if (*d < std::chrono::milliseconds(100) || *d > most)
      return "expected 100ms to " + std::to_string(most.count() / 1000) +
             "s (readers stop believing the index " +
             std::to_string(shm::kWriterIndexFreshNs / 1'000'000'000ULL) + " s after it was written)";
    target = *d;
    return std::nullopt;
  };
}

// A whole listing costs as much as the flood is large: not more often than once a second.
Apply set_relist(std::chrono::milliseconds& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    auto d = parse_duration(v);
    if (!d) return d.error();
    if (*d < std::chrono::seconds(1)) return "expected at least 1s";
    target = *d;
    return std::nullopt;
  };
}

std::vector<Flag> index_flags(IndexModeOptions& out) {
  return {
      {"node-dir", "DIR", "GPUSLICE_NODE_DIR", nullptr,
       "the node directory users share (root's, mode 01777): writes DIR/.writers (required)",
       set_text(out.node_dir)},
      {"refresh", "DURATION", nullptr, "10s",
       "rewrite the index at least this often (readers ignore it 30 s "
       "after it was last written)",
       set_refresh(out.refresh)},
      {"relist", "DURATION", nullptr, "60s",
       "list the whole directory this often besides following its changes (a safety net)",
       set_relist(out.relist)},
      log_level_flag(out.log_level),
  };
}

const char* const kIndexHead =
    "usage: gpuslice-node index --node-dir DIR [flags]\n"
    "\n"
    "Keeps DIR/.writers, the list of writer directories of a node directory users share, so that\n"
    "the node channel's readers in every container visit them by name instead of listing a directory\n"
    "any local user can fill (docs/priority.md). Removes it when stopped.\n";

}  // namespace

ParseOutcome parse_index_options(const std::vector<std::string>& args, const EnvLookup& env,
                                 IndexModeOptions& out) {
  ParseOutcome outcome = parse_mode_flags(args, env, index_flags(out), kIndexHead);
  if (outcome.message.empty() && out.node_dir.empty())
    outcome.message = "--node-dir (or GPUSLICE_NODE_DIR) is required";
  return outcome;
}

std::string usage_index() { return mode_usage(kIndexHead, index_flags); }

int run_index_mode(const std::vector<std::string>& args, const EnvLookup& env) {
  IndexModeOptions options;
  if (auto code =
          begin_mode(parse_index_options(args, env, options), "gpuslice-node index", options.log_level))
    return *code;
  WriterIndexer::Options indexer_options;
  indexer_options.node_dir = options.node_dir;
  indexer_options.refresh = options.refresh;
  indexer_options.relist = options.relist;
  auto indexer = WriterIndexer::open(indexer_options);
  if (!indexer) {
    GS_LOG(Error, "%s", indexer.error().c_str());
    return 1;
  }
  GS_LOG(Info, "indexing %s: %zu writer directories", options.node_dir.c_str(), (*indexer)->writers().size());
  while (!wait_for_stop(std::chrono::milliseconds(0))) (*indexer)->step(std::chrono::milliseconds(200));
  GS_LOG(Info, "stopping: %s/.writers removed (readers list the directory)", options.node_dir.c_str());
  (*indexer)->remove_index();
  return 0;
}

}  // namespace gpuslice::node
