// Fuzzes what stands between a tenant's bytes and an operator's terminal: terminal_text() (a UTF-8
// decoder) and the GPU UUID check of state files.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cli/terminal_text.h"
#include "common/text.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::size_t width = size > 0 ? data[0] % 64 : 0;
  for (const std::string& out :
       {gpuslice::cli::terminal_text(text), gpuslice::cli::terminal_text(text, width)}) {
    // No control byte survives: no C0, no DEL, no C1 as a raw byte or as UTF-8 C2 80-9F.
    for (std::size_t i = 0; i < out.size(); ++i) {
      const auto c = static_cast<unsigned char>(out[i]);
      FUZZ_CHECK(c >= 0x20 && c != 0x7f);
      if (c == 0xC2 && i + 1 < out.size()) FUZZ_CHECK(static_cast<unsigned char>(out[i + 1]) >= 0xA0);
    }
    // What it returns is safe already: escaping it again changes nothing.
    FUZZ_CHECK(gpuslice::cli::terminal_text(out) == out);
  }
  const std::string cut = gpuslice::cli::terminal_text(text, width);
  FUZZ_CHECK(gpuslice::cli::terminal_columns(cut) <= width);
  FUZZ_CHECK(gpuslice::cli::terminal_columns(gpuslice::cli::terminal_text(text)) <= size);
  if (gpuslice::text::is_gpu_uuid(text)) {
    FUZZ_CHECK(gpuslice::cli::terminal_text(text) == text);  // a valid UUID is printable as it is
    FUZZ_CHECK(text.substr(0, 4) == "GPU-" || text.substr(0, 4) == "MIG-");
  }
  return 0;
}
