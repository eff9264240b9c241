// What the DRA plugin has prepared on this node, kept in <root>/dra/checkpoint.json (root-only,
// replaced atomically). An entry is written as `preparing` before the first file of a claim is
// created and becomes `prepared` once all are, so a daemon killed in between finds on restart
// exactly which claim's files to remove (the kubelet then asks again), and never leaks any.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"

namespace gpuslice::node::dra {

inline constexpr std::size_t kMaxCheckpointBytes = std::size_t{4} * 1024 * 1024;

struct PreparedDevice {
  std::vector<std::string> requests;
  std::string pool, device;
  std::string share_id;  // the allocation's shareID on a shared device
  std::vector<std::string> cdi_ids;
  std::string gpu_uuid;
  std::uint64_t memory_bytes = 0;
  unsigned compute_percent = 100;  // 100: no compute limit
};

struct CheckpointEntry {
  enum class State { Preparing, Prepared };
  State state = State::Preparing;
  std::string ns, name;
  std::string pod;             // the first pod the claim was reserved for (metrics' pod label)
  std::string container_id;    // <root>/containers/<id>
  std::string cdi_file;        // full path of its CDI spec
  std::string channel_writer;  // <root>/channel/<writer>, empty when the claim has no compute limit
  std::string priority;        // "" or high|normal|low
  std::vector<PreparedDevice> devices;
};

struct Checkpoint {
  std::map<std::string, CheckpointEntry> claims;  // by claim uid
};

Result<Checkpoint> read_checkpoint(const std::string& path);  // a missing file is empty
Result<bool> write_checkpoint(const std::string& path, const Checkpoint& checkpoint);

}  // namespace gpuslice::node::dra
