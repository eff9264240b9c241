// Fuzzes the HTTP API's request bodies (PUT /api/v1/containers/<id>/limits) and the untrusted-JSON
// reader under them: no crash on any input; what is accepted has no duplicate key, is within the
// depth bound, and carries values the library's own grammar accepts; what is parsed dumps back
// without throwing, even with invalid UTF-8 in a string.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "config/settings.h"
#include "fuzz_check.h"
#include "node/api/api_body.h"
#include "node/http/untrusted_json.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  const std::string_view body(reinterpret_cast<const char*>(data), size);

  node::LimitsUpdate update;
  if (auto err = node::read_limits_body(body, update)) {
    FUZZ_CHECK(err->status == 400 || err->status == 413);
    FUZZ_CHECK(!err->message.empty());
  } else {
    FUZZ_CHECK(update.memory || update.compute);
    if (update.memory) {
      FUZZ_CHECK(
          config::parse_device_values(*update.memory, config::ValueKind::Size, config::SizeDialect::Native)
              .ok());
    }
    if (update.compute) {
      FUZZ_CHECK(config::parse_device_values(*update.compute, config::ValueKind::Percent,
                                             config::SizeDialect::Native)
                     .ok());
    }
  }

  nlohmann::json doc;
  if (!node::parse_untrusted_json(body, doc)) {
    const std::string text = node::json_text(doc);  // bounded depth: no recursion runs away
    FUZZ_CHECK(nlohmann::json::parse(text, nullptr, false) == doc);
  }
  // A string of arbitrary bytes (as a command line read from a ledger) is written out, never thrown.
  const nlohmann::json raw = {{"command", std::string(body.substr(0, 256))}};
  FUZZ_CHECK(!nlohmann::json::parse(node::json_text(raw), nullptr, false).is_discarded());
  return 0;
}
