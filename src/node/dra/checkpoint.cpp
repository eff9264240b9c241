#include "node/dra/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/errno_text.h"
#include "common/safe_file.h"
#include "config/text_util.h"
#include "node/host/limits_file.h"
#include "node/http/untrusted_json.h"

namespace gpuslice::node::dra {
namespace {

using nlohmann::json;

constexpr int kVersion = 1;
// The journal is folded into checkpoint.json once it is larger than this or than the state.
constexpr std::size_t kMinJournalBytes = std::size_t{64} * 1024;

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
                       {"guarantee", d.guarantee_bytes},
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

// Throws json::exception on a missing or mistyped field.
CheckpointEntry from_json(const json& e) {
  CheckpointEntry entry;
  const std::string state = e.at("state").get<std::string>();
  if (state != "prepared" && state != "preparing") throw std::invalid_argument("unknown state");
  entry.state = state == "prepared" ? CheckpointEntry::State::Prepared : CheckpointEntry::State::Preparing;
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
    dev.guarantee_bytes = d.value("guarantee", std::uint64_t{0});  // absent in checkpoints written before it
    dev.compute_percent = d.at("compute").get<unsigned>();
    entry.devices.push_back(std::move(dev));
  }
  return entry;
}

std::string shown(const std::string& text) { return "'" + config::detail::printable(text, 80) + "'"; }

// Reads `path` (missing: empty) of at most `max_bytes`.
Result<std::string> read_optional(const std::string& path, std::size_t max_bytes) {
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return std::string();
  return fs::read_small_file(path, max_bytes, fs::DirTrust::OwnerOnly);
}

}  // namespace

std::string checkpoint_entry_text(const std::string& uid, const CheckpointEntry& entry) {
  return json_text({{"uid", uid}, {"entry", to_json(entry)}});
}

CheckpointStore::CheckpointStore(std::string dir, std::size_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {}

void CheckpointStore::account(const std::string& uid, const CheckpointEntry* entry) {
  if (auto it = sizes_.find(uid); it != sizes_.end()) {
    total_ -= it->second;
    sizes_.erase(it);
  }
  if (!entry) return;
  const std::size_t size = checkpoint_entry_text(uid, *entry).size() + 1;
  sizes_[uid] = size;
  total_ += size;
}

Result<CheckpointStore::Loaded> CheckpointStore::load() {
  Loaded out;
  state_ = {};
  sizes_.clear();
  total_ = 0;
  journal_bytes_ = 0;
  auto keep = [&](const std::string& uid, const json& e, const std::string& where) {
    try {
      CheckpointEntry entry = from_json(e);
      state_.claims[uid] = entry;
      account(uid, &entry);
    } catch (const std::exception& ex) {
      out.skipped.push_back(where + ": " + ex.what());
    }
  };
  // The base holds at most the bounded state; the journal at most as much again before it is folded.
  auto base = read_optional(base_path(), max_bytes_ + kMinJournalBytes);
  if (!base) return make_error(base.error());
  if (!base->empty()) {
    json doc;
    if (auto err = parse_untrusted_json(*base, doc)) return make_error(base_path() + ": " + *err);
    if (!doc.is_object() || !doc.contains("version") || doc["version"] != kVersion ||
        !doc.contains("claims") || !doc["claims"].is_object())
      return make_error(base_path() + ": not a checkpoint of version " + std::to_string(kVersion));
    for (const auto& [uid, e] : doc["claims"].items()) keep(uid, e, "claim " + shown(uid));
  }
  auto journal = read_optional(journal_path(), 2 * max_bytes_ + 2 * kMinJournalBytes);
  if (!journal) return make_error(journal.error());
  journal_bytes_ = journal->size();
  std::size_t start = 0, line_no = 0;
  while (start < journal->size()) {
    std::size_t end = journal->find('\n', start);
    ++line_no;
    const std::string where = journal_path() + " line " + std::to_string(line_no);
    if (end == std::string::npos) {
      // A line without its end: the daemon stopped while appending it. Nothing was created yet for it.
      out.skipped.push_back(where + ": incomplete");
      break;
    }
    json record;
    if (auto err = parse_untrusted_json(journal->substr(start, end - start), record);
        err || !record.is_object() || !record.contains("uid") || !record["uid"].is_string()) {
      out.skipped.push_back(where + ": " + (err ? *err : std::string("not a record")));
    } else if (const std::string uid = record["uid"]; record.value("removed", false)) {
      state_.claims.erase(uid);
      account(uid, nullptr);
    } else if (record.contains("entry")) {
      keep(uid, record["entry"], where);
    } else {
      out.skipped.push_back(where + ": neither an entry nor a removal");
    }
    start = end + 1;
  }
  out.checkpoint = state_;
  return out;
}

bool CheckpointStore::fits(const std::string& uid, const CheckpointEntry& entry) const {
  std::size_t total = total_;
  if (auto it = sizes_.find(uid); it != sizes_.end()) total -= it->second;
  return total + checkpoint_entry_text(uid, entry).size() + 1 <= max_bytes_;
}

Result<bool> CheckpointStore::append(const std::string& line) {
  auto dir = fs::open_dir(dir_, fs::DirTrust::OwnerOnly);
  if (!dir) return make_error(dir.error());
  fs::UniqueFd dirfd(*dir);
  auto opened = fs::open_in_dir(dirfd.get(), "checkpoint.journal", O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (!opened) return make_error(opened.error());
  fs::UniqueFd fd(*opened);
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd.get(), line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error(journal_path() + ": " + fs::errno_text(errno));
    done += static_cast<std::size_t>(n);
  }
  if (::fdatasync(fd.get()) != 0) return make_error(journal_path() + ": " + fs::errno_text(errno));
  journal_bytes_ += line.size();
  bytes_written_ += line.size();
  return true;
}

Result<bool> CheckpointStore::put(const std::string& uid, const CheckpointEntry& entry) {
  if (!fits(uid, entry))
    return make_error("the DRA checkpoint would pass its bound of " + std::to_string(max_bytes_) + " bytes");
  if (auto r = append(checkpoint_entry_text(uid, entry) + "\n"); !r) return r;
  state_.claims[uid] = entry;
  account(uid, &entry);
  if (journal_bytes_ > std::max(kMinJournalBytes, total_)) return compact();
  return true;
}

Result<bool> CheckpointStore::remove(const std::string& uid) {
  if (auto r = append(json_text({{"uid", uid}, {"removed", true}}) + "\n"); !r) return r;
  state_.claims.erase(uid);
  account(uid, nullptr);
  if (journal_bytes_ > std::max(kMinJournalBytes, total_)) return compact();
  return true;
}

Result<bool> CheckpointStore::compact() {
  json claims = json::object();
  for (const auto& [uid, e] : state_.claims) claims[uid] = to_json(e);
  const std::string text = json_text({{"version", kVersion}, {"claims", claims}}) + "\n";
  // The base first: killed before the journal is emptied, the journal replays onto the same state.
  if (auto r = write_file_atomically(base_path(), text, 0600); !r) return r;
  bytes_written_ += text.size();
  if (::truncate(journal_path().c_str(), 0) != 0 && errno != ENOENT)
    return make_error(journal_path() + ": " + fs::errno_text(errno));
  journal_bytes_ = 0;
  return true;
}

}  // namespace gpuslice::node::dra
