// Fuzzes review_admission, the webhook's handler of untrusted AdmissionReview bodies: it must never
// crash (deep nesting, invalid UTF-8, odd types), always answer a JSON document, and answer 200 only
// with a response that names the request's uid.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "fuzz_check.h"
#include "node/admission/webhook.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const gpuslice::node::WebhookReply reply = gpuslice::node::review_admission(body, {});
  FUZZ_CHECK(reply.http_status == 200 || reply.http_status == 400 || reply.http_status == 413);
  const auto answer = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!answer.is_discarded() && answer.is_object());
  if (reply.http_status == 200) {
    FUZZ_CHECK(answer.contains("response") && answer["response"].contains("uid"));
    FUZZ_CHECK(answer["response"]["uid"].is_string() &&
               !answer["response"]["uid"].get<std::string>().empty());
    FUZZ_CHECK(answer["response"]["allowed"].is_boolean());
  }
  return 0;
}
