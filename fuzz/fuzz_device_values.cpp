// Fuzzes the per-device forms (single value, DEVICE=VALUE list, JSON object), the flat JSON parser
// and the merges. The first byte picks the value kind and size dialect; the rest is the text.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/json.h"
#include "config/settings.h"
#include "fuzz_check.h"

namespace {

using gpuslice::config::DeviceValues;
using gpuslice::config::SizeDialect;
using gpuslice::config::ValueKind;

std::string upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

void check_parsed(const DeviceValues& values, ValueKind kind) {
  auto in_range = [kind](std::uint64_t v) { return kind == ValueKind::Percent ? v >= 1 && v <= 100 : v > 0; };
  FUZZ_CHECK(values.fallbacks.empty());
  FUZZ_CHECK(values.by_index.size() + values.by_uuid.size() <= 256);
  if (values.all) {
    FUZZ_CHECK(in_range(*values.all));
    FUZZ_CHECK(values.by_index.empty() && values.by_uuid.empty());
  }
  for (std::size_t i = 0; i < values.by_index.size(); ++i) {
    const auto& [index, value] = values.by_index[i];
    FUZZ_CHECK(index >= 0 && index <= 1023);
    FUZZ_CHECK(in_range(value));
    for (std::size_t j = 0; j < i; ++j) FUZZ_CHECK(values.by_index[j].first != index);
    FUZZ_CHECK(values.lookup(index, "") == value);
  }
  for (std::size_t i = 0; i < values.by_uuid.size(); ++i) {
    const auto& [uuid, value] = values.by_uuid[i];
    FUZZ_CHECK(in_range(value));
    FUZZ_CHECK(uuid.rfind("gpu-", 0) == 0 || uuid.rfind("mig-", 0) == 0);
    for (char c : uuid) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'));
    for (std::size_t j = 0; j < i; ++j) FUZZ_CHECK(values.by_uuid[j].first != uuid);
    FUZZ_CHECK(values.lookup(-1, upper(uuid)) == value);
  }
}

// The precedence merge against its definition, on devices named by the parsed keys.
void check_merges(const DeviceValues& a, const DeviceValues& b) {
  const DeviceValues precedence = gpuslice::config::merge_by_precedence(a, b);
  auto check_device = [&](int index, std::string_view uuid) {
    const auto va = a.lookup(index, uuid);
    const auto vb = b.lookup(index, uuid);
    FUZZ_CHECK(precedence.lookup(index, uuid) == (va ? va : vb));
  };
  check_device(0, "");
  check_device(-1, "gpu-none");
  for (const DeviceValues* side : {&a, &b}) {
    for (const auto& [index, unused] : side->by_index) {
      check_device(index, "");
      for (const auto& [uuid, unused_too] : a.by_uuid) check_device(index, uuid);
      for (const auto& [uuid, unused_too] : b.by_uuid) check_device(index, uuid);
    }
    for (const auto& [uuid, unused] : side->by_uuid) check_device(7, uuid);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const ValueKind kind = (data[0] & 1) ? ValueKind::Percent : ValueKind::Size;
  const SizeDialect dialect = static_cast<SizeDialect>((data[0] >> 1) & 3);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const auto any_form = gpuslice::config::parse_device_values(text, kind, dialect);
  if (any_form) check_parsed(*any_form, kind);
  const auto json_form = gpuslice::config::parse_json_device_values(text, kind, dialect);
  if (json_form) {
    check_parsed(*json_form, kind);
    FUZZ_CHECK(!json_form->all);
    // Whatever the JSON-only entry point accepts, the general one accepts identically (the general
    // one also refuses over-long values before trimming).
    FUZZ_CHECK(any_form || text.size() > 65536);
  }
  if (json_form && any_form) {
    FUZZ_CHECK(any_form->by_index == json_form->by_index && any_form->by_uuid == json_form->by_uuid);
  }

  const auto members = gpuslice::config::json::parse_flat_object(text);
  if (members) {
    FUZZ_CHECK(members->size() <= gpuslice::config::json::kMaxMembers);
    for (const auto& member : *members) {
      FUZZ_CHECK(member.key.size() <= gpuslice::config::json::kMaxTokenBytes + 4);
      FUZZ_CHECK(member.value.size() <= gpuslice::config::json::kMaxTokenBytes + 4);
    }
  }

  if (any_form && json_form) check_merges(*any_form, *json_form);
  if (any_form) {
    DeviceValues other;
    other.by_index = {{0, 5}};
    other.by_uuid = {{"gpu-a", 7}};
    check_merges(*any_form, other);
    check_merges(other, *any_form);
  }
  return 0;
}
