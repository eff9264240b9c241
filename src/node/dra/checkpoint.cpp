#include "node/dra/checkpoint.h"

#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "common/safe_file.h"
#include "node/limits_file.h"
#include "node/untrusted_json.h"

namespace gpuslice::node::dra {
namespace {

using nlohmann::json;

constexpr int kVersion = 1;

json to_json(const CheckpointEntry& e) {
  json devices = json::array();
  for (const auto& d : e.devices) {
    devices.push_back({{"requests", d.requests},
                       {"pool", d.pool},
                       {"device", d.device},
                       {"shareID", d.share_id},
                       {"cdiIds", d.cdi_ids},
                       {"uuid", d.gpu_uuid},
                       {"memory", d.memory_bytes},
                       {"compute", d.compute_percent}});
  }
  return {{"state", e.state == CheckpointEntry::State::Prepared ? "prepared" : "preparing"},
          {"namespace", e.ns},
          {"name", e.name},
          {"pod", e.pod},
          {"container", e.container_id},
          {"cdiFile", e.cdi_file},
          {"channelWriter", e.channel_writer},
          {"priority", e.priority},
          {"devices", devices}};
}

}  // namespace

Result<Checkpoint> read_checkpoint(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return Checkpoint{};
  auto read = fs::read_small_file(path, kMaxCheckpointBytes, fs::DirTrust::OwnerOnly);
  if (!read) return make_error(read.error());
  const std::string& text = *read;
  json doc;
  if (auto err = parse_untrusted_json(text, doc)) return make_error(path + ": " + *err);
  Checkpoint out;
  try {
    if (doc.at("version").get<int>() != kVersion) return make_error(path + ": unknown version");
    for (const auto& [uid, e] : doc.at("claims").items()) {
      CheckpointEntry entry;
      entry.state =
          e.at("state") == "prepared" ? CheckpointEntry::State::Prepared : CheckpointEntry::State::Preparing;
      entry.ns = e.at("namespace").get<std::string>();
      entry.name = e.at("name").get<std::string>();
      entry.pod = e.value("pod", "");
      entry.container_id = e.at("container").get<std::string>();
      entry.cdi_file = e.at("cdiFile").get<std::string>();
      entry.channel_writer = e.at("channelWriter").get<std::string>();
      entry.priority = e.at("priority").get<std::string>();
      for (const auto& d : e.at("devices")) {
        PreparedDevice dev;
        dev.requests = d.at("requests").get<std::vector<std::string>>();
        dev.pool = d.at("pool").get<std::string>();
        dev.device = d.at("device").get<std::string>();
        dev.share_id = d.value("shareID", "");
        dev.cdi_ids = d.at("cdiIds").get<std::vector<std::string>>();
        dev.gpu_uuid = d.at("uuid").get<std::string>();
        dev.memory_bytes = d.at("memory").get<std::uint64_t>();
        dev.compute_percent = d.at("compute").get<unsigned>();
        entry.devices.push_back(std::move(dev));
      }
      out.claims[uid] = std::move(entry);
    }
  } catch (const json::exception& e) {
    return make_error(path + ": malformed checkpoint: " + e.what());
  }
  return out;
}

Result<bool> write_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  json claims = json::object();
  for (const auto& [uid, e] : checkpoint.claims) claims[uid] = to_json(e);
  const json doc = {{"version", kVersion}, {"claims", claims}};
  return write_file_atomically(path, json_text(doc) + "\n", 0600);
}

}  // namespace gpuslice::node::dra
