// Fuzzes what the CLI reads back of the daemon's DRA driver (the API's "dra" member): no crash on
// any input; an accepted object writes and reads back to the same; its text view holds no terminal
// control byte but the line ends, whatever the API server's messages carried.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "cli/dra_text.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice::cli;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) return 0;
  auto dra = dra_from_json(doc);
  if (!dra) {
    FUZZ_CHECK(!dra.error().empty());
    return 0;
  }
  const nlohmann::json again = dra_json(*dra);
  auto back = dra_from_json(again);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(dra_json(*back) == again);

  char* printed = nullptr;
  std::size_t length = 0;
  std::FILE* out = open_memstream(&printed, &length);
  if (out == nullptr) return 0;
  print_dra_text(*dra, out);
  std::fclose(out);
  for (std::size_t i = 0; i < length; ++i) {
    const auto c = static_cast<unsigned char>(printed[i]);
    FUZZ_CHECK(c == '\n' || (c >= 0x20 && c != 0x7f));
  }
  std::free(printed);
  return 0;
}
