#include "node/host/allocation_record.h"

#include <openssl/sha.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace gpuslice::node {

std::string devices_digest(std::vector<std::string> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::string joined;
  for (const auto& id : ids) {
    joined += id;
    joined += '\n';
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(joined.data()), joined.size(), digest);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : digest) {
    out += hex[b >> 4];
    out += hex[b & 0xf];
  }
  return out;
}

std::string render_allocation_record(const AllocationRecord& record) {
  nlohmann::json doc = {{"resource", record.resource},
                        {"devices", record.devices},
                        {"devices_sha256", record.devices_sha256},
                        {"allocated_at_ns", record.allocated_at_ns}};
  return doc.dump() + "\n";
}

Result<AllocationRecord> parse_allocation_record(std::string_view text) {
  if (text.size() > kMaxAllocationFileBytes) return make_error("allocation record too large");
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return make_error("allocation record is not a JSON object");
  AllocationRecord record;
  const auto resource = doc.find("resource");
  const auto devices = doc.find("devices");
  const auto digest = doc.find("devices_sha256");
  const auto at = doc.find("allocated_at_ns");
  if (resource == doc.end() || !resource->is_string() || devices == doc.end() ||
      !devices->is_number_unsigned() || digest == doc.end() || !digest->is_string() || at == doc.end() ||
      !at->is_number_unsigned()) {
    return make_error("allocation record lacks resource, devices, devices_sha256 or allocated_at_ns");
  }
  record.resource = resource->get<std::string>();
  record.devices = devices->get<std::uint64_t>();
  record.devices_sha256 = digest->get<std::string>();
  record.allocated_at_ns = at->get<std::uint64_t>();
  return record;
}

}  // namespace gpuslice::node
