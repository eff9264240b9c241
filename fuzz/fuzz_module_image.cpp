// Fuzzes the readers of module images (fatbin_image.h): a fat-binary container, an ELF cubin and
// PTX text, each given exactly the input's bytes. Every device architecture the chooser knows is
// tried; a read never leaves its bytes (ASan) and an understood image's choice is consistent.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "interposer/fatbin_image.h"
#include "interposer/module_image.h"
#include "interposer/ptx_globals.h"

namespace fb = gpuslice::interposer::fatbin;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (int sm : {0, 75, 80, 86, 90, 100, 120}) {
    const fb::Globals g = fb::container_globals(data, size, sm);
    if (!g.understood) FUZZ_CHECK(g.bytes == 0 && g.arch == 0);
    if (g.arch != 0 && sm != 0) FUZZ_CHECK(g.arch <= sm);
  }
  std::uint64_t bytes = 0;
  if (!fb::cubin_globals(data, size, &bytes)) FUZZ_CHECK(bytes == 0);
  // The in-memory entry points read a container's own span, or text up to its terminator.
  std::vector<unsigned char> text(data, data + size);
  text.push_back(0);
  (void)gpuslice::interposer::ptx_global_bytes(reinterpret_cast<const char*>(text.data()), text.size());
  if (size >= fb::kContainerHeaderSize && fb::container_span(data) != 0 && fb::container_span(data) <= size)
    (void)gpuslice::interposer::image_globals(data, 90);
  return 0;
}
