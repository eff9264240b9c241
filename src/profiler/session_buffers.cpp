// A session's buffers and API names: allocated once by start(), so flushing never allocates.
#include "profiler/session_buffers.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "profiler/text.h"

namespace gpuslice::profiler::detail {
namespace {

void release_session_buffers(Session& s) {
  std::free(s.name_storage);
  std::free(s.name_length);
  std::free(s.canonical);
  std::free(s.retired_count);
  std::free(s.retired_total);
  std::free(s.snapshot_count);
  std::free(s.snapshot_total);
  std::free(s.timeline_buffer);
  std::free(s.text_buffer);
  std::free(s.read_buffer);
  std::free(s.dirent_buffer);
  std::free(s.merged_count);
  std::free(s.merged_total);
  std::free(s.extra_names);
  s.name_storage = nullptr;
  s.name_length = nullptr;
  s.canonical = nullptr;
  s.retired_count = s.retired_total = s.snapshot_count = s.snapshot_total = nullptr;
  s.merged_count = s.merged_total = nullptr;
  s.timeline_buffer = s.text_buffer = s.read_buffer = s.dirent_buffer = s.extra_names = nullptr;
}

template <class T>
bool allocate_zeroed(T** out, std::size_t count) {
  *out = static_cast<T*>(std::calloc(count, sizeof(T)));
  return *out != nullptr;
}

bool allocate_session_buffers(Session& s, std::size_t api_count) {
  const std::size_t slots = api_count + kMaxExtraNames;
  s.text_capacity = slots * kLineSlack;
  s.dirent_buffer = static_cast<char*>(std::aligned_alloc(64, kDirentBufferBytes));
  return allocate_zeroed(&s.name_storage, api_count * kMaxNameBytes) &&
         allocate_zeroed(&s.name_length, api_count) && allocate_zeroed(&s.canonical, api_count) &&
         allocate_zeroed(&s.retired_count, api_count) && allocate_zeroed(&s.retired_total, api_count) &&
         allocate_zeroed(&s.snapshot_count, api_count) && allocate_zeroed(&s.snapshot_total, api_count) &&
         allocate_zeroed(&s.timeline_buffer, kTimelineBufferBytes) &&
         allocate_zeroed(&s.text_buffer, s.text_capacity) &&
         allocate_zeroed(&s.read_buffer, kReadBufferBytes) && s.dirent_buffer != nullptr &&
         allocate_zeroed(&s.merged_count, slots) && allocate_zeroed(&s.merged_total, slots) &&
         allocate_zeroed(&s.extra_names, kMaxExtraNames * kMaxNameBytes);
}

// Names go verbatim into "name:<api>" lines and space-separated timeline lines.
void copy_name(Session& s, std::size_t index, const char* name) {
  char* out = s.name_storage + index * kMaxNameBytes;
  std::size_t length = 0;
  if (name == nullptr || *name == '\0') {
    length = static_cast<std::size_t>(put_u64(put_str(out, "api_", 4), index) - out);
  } else {
    for (; name[length] != '\0' && length + 1 < kMaxNameBytes; ++length) {
      const char c = name[length];
      out[length] = (c == ' ' || c == '\t' || c == '\n' || c == '\r') ? '_' : c;
    }
  }
  out[length] = '\0';
  s.name_length[index] = length;
}

// Fills s.canonical with a hash table of the names (open addressing, FNV-1a); false on no memory.
bool find_canonical_ids(Session& s) {
  const std::uint64_t slots = round_up_power_of_two(2 * s.api_count);
  auto* table = static_cast<std::uint32_t*>(std::malloc(slots * sizeof(std::uint32_t)));
  if (table == nullptr) return false;
  constexpr std::uint32_t kEmpty = UINT32_MAX;
  for (std::uint64_t i = 0; i < slots; ++i) table[i] = kEmpty;
  for (std::size_t id = 0; id < s.api_count; ++id) {
    const char* name = s.name(id);
    std::uint64_t hash = 1469598103934665603ULL;
    for (std::size_t k = 0; k < s.name_length[id]; ++k)
      hash = (hash ^ static_cast<unsigned char>(name[k])) * 1099511628211ULL;
    for (std::uint64_t slot = hash & (slots - 1);; slot = (slot + 1) & (slots - 1)) {
      if (table[slot] == kEmpty) {
        table[slot] = static_cast<std::uint32_t>(id);
        s.canonical[id] = static_cast<std::uint32_t>(id);
        break;
      }
      const std::uint32_t other = table[slot];
      if (s.name_length[other] == s.name_length[id] &&
          std::memcmp(s.name(other), name, s.name_length[id]) == 0) {
        s.canonical[id] = other;
        break;
      }
    }
  }
  std::free(table);
  return true;
}

}  // namespace

bool set_up_session_buffers(Session& s, const char* const* api_names, std::size_t api_count) {
  release_session_buffers(s);
  bool allocated = allocate_session_buffers(s, api_count);
  if (allocated) {
    s.api_count = api_count;
    for (std::size_t i = 0; i < api_count; ++i) copy_name(s, i, api_names[i]);
    allocated = find_canonical_ids(s);
  }
  if (!allocated) {
    release_session_buffers(s);
    s.api_count = 0;
  }
  return allocated;
}

std::uint64_t round_up_power_of_two(std::size_t value) {
  std::uint64_t capacity = 2;
  while (capacity < value && capacity < (std::uint64_t{1} << 30)) capacity <<= 1;
  return capacity;
}

}  // namespace gpuslice::profiler::detail
