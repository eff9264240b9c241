// The on-disk record of the node channel (see node_channel.h): fixed size, little-endian host
// layout, FNV-1a checksum over every byte before `checksum`. A reader accepts a record only when
// kind, size, magic, version, GPU and checksum all match.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gpuslice::shm::detail {

struct PeerRecord {
  static constexpr char kMagic[8] = {'G', 'S', 'P', 'E', 'E', 'R', '0', '1'};
  // 2: priority holds a Priority's value (1 low .. 3 high).
  // 3: device_share_permille (88 bytes). Readers take version 2 records too (80 bytes, no share:
  // read as 0, not measured), so a container still on the previous library stays visible.
  // busy_period_us took the place of version 3's `reserved` (always written 0 before: unknown).
  static constexpr std::uint32_t kVersion = 3;
  static constexpr std::uint32_t kVersion2 = 2;
  static constexpr std::size_t kVersion2Size = 80;
  char magic[8];
  std::uint32_t version;
  std::uint32_t size;
  std::uint64_t sequence;
  std::uint64_t container_key;
  std::uint64_t uuid_hash;  // which GPU the record is about
  std::uint32_t compute_limit_percent;
  std::uint32_t priority;
  std::uint64_t heartbeat_ns;
  std::uint64_t busy_until_ns;
  std::uint64_t held_back_ns;
  // Priority: the share of its busy time the device ran this container's work (per mille), as its
  // own timing events measured it; 0 = not measured.
  std::uint32_t device_share_permille;
  // Priority: the mean length of its busy periods in microseconds (a server's request), 0 = unknown.
  std::uint32_t busy_period_us;
  std::uint64_t checksum;
};
static_assert(sizeof(PeerRecord) == 88, "the record size is part of the format");

std::uint64_t peer_checksum(const PeerRecord& record);
// Case-insensitive FNV-1a of a GPU UUID.
std::uint64_t uuid_hash(std::string_view uuid);
bool peer_record_valid(const PeerRecord& record, std::uint64_t uuid_hash);
// A record file's `size` bytes as a record of this version (a version 2 one converted), when they
// are one valid record of the GPU; false for anything else.
bool peer_record_from_bytes(const unsigned char* bytes, std::size_t size, std::uint64_t uuid_hash,
                            PeerRecord* out);

}  // namespace gpuslice::shm::detail
