// Per-device values: the three written forms, lookup, and the merge that implements precedence
// (compatibility dialects) exactly per device. Caps are not merged in: the ledger keeps request and
// cap apart (shm::effective_quota).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "config/json.h"
#include "config/parse_internal.h"
#include "config/settings.h"
#include "config/text_util.h"

namespace gpuslice::config {

namespace {

constexpr std::size_t kMaxUuidBytes = 96;

struct DeviceKey {
  int index = -1;    // >= 0 for an index key
  std::string uuid;  // lower-case, for a UUID key
};

// A key is a canonical decimal index ("0", "12"; no sign, no leading zeros) or a GPU/MIG UUID.
Result<DeviceKey> parse_device_key(std::string_view key) {
  const std::string shown = "'" + detail::printable(key, 64) + "'";
  if (!key.empty() && std::all_of(key.begin(), key.end(), detail::is_digit)) {
    if (key.size() > 1 && key.front() == '0')
      return make_error("device index " + shown + " has leading zeros");
    if (key.size() > 4) return make_error("device index " + shown + " is larger than 1023");
    int index = 0;
    for (char c : key) index = index * 10 + (c - '0');
    if (index > detail::kMaxDeviceIndex) return make_error("device index " + shown + " is larger than 1023");
    return DeviceKey{index, {}};
  }
  if (detail::istarts_with(key, "gpu-") || detail::istarts_with(key, "mig-")) {
    // MIG devices appear both as "MIG-<uuid>" and the older "MIG-GPU-<uuid>/<gi>/<ci>".
    const bool well_formed =
        key.size() > 4 && key.size() <= kMaxUuidBytes && std::all_of(key.begin(), key.end(), [](char c) {
          return detail::is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
                 c == '/';
        });
    if (well_formed) return DeviceKey{-1, detail::to_lower(key)};
    return make_error("malformed GPU UUID " + shown);
  }
  return make_error("device key " + shown + " is neither a device index (0-1023) nor a GPU-/MIG- UUID");
}

const std::uint64_t* find_index(const DeviceValues& values, int index) {
  for (const auto& [key, value] : values.by_index) {
    if (key == index) return &value;
  }
  return nullptr;
}

const std::uint64_t* find_uuid(const DeviceValues& values, std::string_view uuid) {
  for (const auto& [key, value] : values.by_uuid) {
    if (detail::iequals(key, uuid)) return &value;
  }
  return nullptr;
}

// Adds one entry, refusing a device named twice (UUIDs compare case-insensitively).
Result<bool> add_entry(DeviceValues& values, const DeviceKey& key, std::uint64_t value,
                       std::string_view raw_key) {
  const bool duplicate =
      key.index >= 0 ? find_index(values, key.index) != nullptr : find_uuid(values, key.uuid) != nullptr;
  if (duplicate) return make_error("device '" + detail::printable(raw_key, 64) + "' is given twice");
  if (values.by_index.size() + values.by_uuid.size() == detail::kMaxDeviceEntries) {
    return make_error("more than 256 device entries");
  }
  if (key.index >= 0) {
    values.by_index.emplace_back(key.index, value);
  } else {
    values.by_uuid.emplace_back(key.uuid, value);
  }
  return true;
}

Result<std::uint64_t> parse_scalar(std::string_view text, ValueKind kind, SizeDialect dialect) {
  if (kind == ValueKind::Percent) {
    auto percent = parse_percent(text);
    if (!percent) return make_error(percent.error());
    return static_cast<std::uint64_t>(*percent);
  }
  return parse_size(text, dialect);
}

// JSON numbers are bytes or percent as they stand; units belong in strings.
Result<std::uint64_t> parse_json_number(std::string_view number, ValueKind kind) {
  if (number.find_first_of(".eE") != std::string_view::npos) {
    return make_error("JSON number " + std::string(number) +
                      " is not a whole number (no fraction or exponent)");
  }
  return parse_scalar(number, kind, SizeDialect::Bytes);
}

std::string entry_error(std::string_view key, const std::string& why) {
  return "device '" + detail::printable(key, 64) + "': " + why;
}

Result<DeviceValues> parse_list(std::string_view text, ValueKind kind, SizeDialect dialect) {
  DeviceValues values;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view item = detail::trim(text.substr(0, comma));
    if (item.empty()) return make_error("empty entry in the DEVICE=VALUE list");
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      return make_error("entry '" + detail::printable(item, 64) + "' is not DEVICE=VALUE");
    }
    const std::string_view raw_key = detail::trim(item.substr(0, equals));
    auto key = parse_device_key(raw_key);
    if (!key) return make_error(key.error());
    auto value = parse_scalar(item.substr(equals + 1), kind, dialect);
    if (!value) return make_error(entry_error(raw_key, value.error()));
    auto added = add_entry(values, *key, *value, raw_key);
    if (!added) return make_error(added.error());
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return values;
}

bool is_flat(const DeviceValues& values) { return values.fallbacks.empty(); }

// True when every possible device gets a value, so nothing of lower precedence can matter.
bool covers_every_device(const DeviceValues& values) {
  if (values.all) return true;
  for (const DeviceValues& fallback : values.fallbacks) {
    if (covers_every_device(fallback)) return true;
  }
  return false;
}

}  // namespace

std::optional<std::uint64_t> DeviceValues::lookup(int index, std::string_view uuid) const {
  std::optional<std::uint64_t> value;
  if (!uuid.empty()) {
    if (const std::uint64_t* v = find_uuid(*this, uuid)) value = *v;
  }
  if (!value && index >= 0) {
    if (const std::uint64_t* v = find_index(*this, index)) value = *v;
  }
  if (!value) value = all;
  for (auto it = fallbacks.begin(); !value && it != fallbacks.end(); ++it) value = it->lookup(index, uuid);
  return value;
}

Result<DeviceValues> parse_json_device_values(std::string_view text, ValueKind kind, SizeDialect dialect) {
  auto members = json::parse_flat_object(detail::trim(text));
  if (!members) return make_error(members.error());
  DeviceValues values;
  for (const json::Member& member : *members) {
    auto key = parse_device_key(member.key);
    if (!key) return make_error(key.error());
    auto value =
        member.is_string ? parse_scalar(member.value, kind, dialect) : parse_json_number(member.value, kind);
    if (!value) return make_error(entry_error(member.key, value.error()));
    auto added = add_entry(values, *key, *value, member.key);
    if (!added) return make_error(added.error());
  }
  return values;
}

Result<DeviceValues> parse_device_values(std::string_view text, ValueKind kind, SizeDialect dialect) {
  if (text.size() > detail::kMaxValueBytes) return make_error("value longer than 65536 bytes");
  const std::string_view t = detail::trim(text);
  if (t.empty()) return make_error("empty value");
  if (t.front() == '{') return parse_json_device_values(t, kind, dialect);
  if (t.find('=') != std::string_view::npos) return parse_list(t, kind, dialect);
  auto value = parse_scalar(t, kind, dialect);
  if (!value) return make_error(value.error());
  DeviceValues values;
  values.all = *value;
  return values;
}

DeviceValues merge_by_precedence(DeviceValues higher, DeviceValues lower) {
  if (lower.empty() || covers_every_device(higher)) return higher;
  if (higher.empty()) return lower;
  if (is_flat(higher) && is_flat(lower)) {
    // One table answers exactly unless a device could match `higher` by index and `lower` by a
    // UUID that lookup() would then prefer.
    const bool lower_adds_uuids =
        std::any_of(lower.by_uuid.begin(), lower.by_uuid.end(),
                    [&](const auto& entry) { return find_uuid(higher, entry.first) == nullptr; });
    if (!(lower_adds_uuids && !higher.by_index.empty())) {
      for (const auto& entry : lower.by_index) {
        if (find_index(higher, entry.first) == nullptr) higher.by_index.push_back(entry);
      }
      for (auto& entry : lower.by_uuid) {
        if (find_uuid(higher, entry.first) == nullptr) higher.by_uuid.push_back(std::move(entry));
      }
      higher.all = lower.all;
      return higher;
    }
  }
  higher.fallbacks.push_back(std::move(lower));
  return higher;
}

std::optional<std::string> guarantee_above_limit(const DeviceValues& guarantee, const DeviceValues& limit) {
  // Every key named by either side, each looked up in both exactly as a device with that key would be.
  const auto above = [&](int index, std::string_view uuid) {
    auto g = guarantee.lookup(index, uuid);
    auto l = limit.lookup(index, uuid);
    return g && l && *g > *l;
  };
  if (above(-1, {})) return std::string("every device");
  for (const DeviceValues* side : {&guarantee, &limit}) {
    for (const auto& [index, unused] : side->by_index) {
      if (above(index, {})) return "device " + std::to_string(index);
    }
    for (const auto& [uuid, unused] : side->by_uuid) {
      if (above(-1, uuid)) return detail::printable(uuid, 96);
    }
  }
  return std::nullopt;
}

}  // namespace gpuslice::config
