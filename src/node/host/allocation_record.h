// What the device plugin records about an allocation in <root>/containers/<id>/allocation, so the
// collector can tell which pod container the directory belongs to (by the device ids the kubelet lists
// for it) long after Allocate returned. The file sits outside what is mounted into the container, so
// the container cannot rewrite whom it is attributed to.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace gpuslice::node {

inline constexpr const char* kAllocationFileName = "allocation";
inline constexpr std::size_t kMaxAllocationFileBytes = 4096;

struct AllocationRecord {
  std::string resource;               // "gpuslice.io/vram"
  std::uint64_t devices = 0;          // how many device ids
  std::string devices_sha256;         // devices_digest() of the ids
  std::uint64_t allocated_at_ns = 0;  // CLOCK_REALTIME of Allocate: the newest of equal records wins
};

// A digest of a set of device ids, independent of their order (ids a vram allocation hands out run to
// tens of thousands, so the record keeps their digest, not the ids).
std::string devices_digest(std::vector<std::string> ids);

std::string render_allocation_record(const AllocationRecord& record);
Result<AllocationRecord> parse_allocation_record(std::string_view text);

}  // namespace gpuslice::node
