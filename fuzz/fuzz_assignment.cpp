// Fuzzes the one grammar of the operator's .assigned file (shared_state/assignment_text.h) from
// both of its sides: the library's reading (assignment_for_gpu) believes exactly the files the
// daemon's parser accepts, with the same level; a refused file is the lowest level with no share;
// what the daemon renders from an accepted file reads back the same on both sides.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "node/host/assignment_file.h"
#include "shared_state/assignment_text.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kGpu = "GPU-11111111-aaaa-4000-8000-000000000000";
  gpuslice::shm::AssignmentSyntaxError error;
  const gpuslice::shm::Assignment library = gpuslice::shm::assignment_for_gpu(text, kGpu, &error);
  const auto daemon = gpuslice::node::parse_assignment(text);
  const bool believed = library.state == gpuslice::shm::Assignment::State::Believed;
  FUZZ_CHECK(believed == daemon.ok());
  if (!believed) {
    FUZZ_CHECK(library.state == gpuslice::shm::Assignment::State::Refused);
    FUZZ_CHECK(library.priority == gpuslice::Priority::Low && library.compute_percent == 0);
    FUZZ_CHECK(error.what != nullptr);
    return 0;
  }
  FUZZ_CHECK(library.priority == daemon->priority);
  FUZZ_CHECK(library.compute_percent <= 100);
  auto rendered = gpuslice::node::render_assignment(*daemon);
  if (!rendered) return 0;  // e.g. a UUID the renderer writes only in canonical form
  const gpuslice::shm::Assignment again = gpuslice::shm::assignment_for_gpu(*rendered, kGpu);
  FUZZ_CHECK(again.state == gpuslice::shm::Assignment::State::Believed);
  FUZZ_CHECK(again.priority == library.priority);
  FUZZ_CHECK(again.compute_percent == library.compute_percent);
  FUZZ_CHECK(again.floor_percent == library.floor_percent);
  FUZZ_CHECK(again.light_share_percent == library.light_share_percent);
  return 0;
}
