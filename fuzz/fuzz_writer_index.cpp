// Fuzzes the writer index of a shared node directory (shared_state/writer_index.h), which every
// container's node channel reads from a file in a directory others can write (only the operator's
// copy is believed, but it is parsed before that is known to matter): an accepted text names
// exactly `count` plain, strictly ascending names, and written back in the keeper's form it is the
// same text byte for byte (one file, one meaning); a refused one yields no name.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "shared_state/assignment_text.h"
#include "shared_state/writer_index.h"

namespace {

void collect(void* context, std::string_view name) {
  static_cast<std::vector<std::string_view>*>(context)->push_back(name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::size_t count = 0;
  const char* error = gpuslice::shm::writer_index_error(text, &count);
  std::vector<std::string_view> names;
  gpuslice::shm::for_each_indexed_writer(text, collect, &names);
  if (error != nullptr) {
    FUZZ_CHECK(names.empty() && count == 0);
    return 0;
  }
  FUZZ_CHECK(text.size() <= gpuslice::shm::kMaxWriterIndexBytes);
  FUZZ_CHECK(names.size() == count);
  std::string rendered(gpuslice::shm::kWriterIndexHeader);
  for (std::size_t i = 0; i < names.size(); ++i) {
    FUZZ_CHECK(gpuslice::shm::assignment_plain_name(names[i]));
    FUZZ_CHECK(i == 0 || names[i - 1] < names[i]);
    rendered += std::string(names[i]) + "\n";
  }
  rendered += "end " + std::to_string(count) + "\n";
  FUZZ_CHECK(rendered == text);
  return 0;
}
