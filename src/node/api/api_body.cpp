#include "node/api/api_body.h"

#include <string>

#include "node/http/untrusted_json.h"

namespace gpuslice::node {

std::optional<ApiError> read_limits_body(std::string_view body, LimitsUpdate& out) {
  if (body.size() > kMaxApiBodyBytes) {
    return ApiError{413, "request body is larger than " + std::to_string(kMaxApiBodyBytes) + " bytes"};
  }
  nlohmann::json doc;
  if (auto err = parse_untrusted_json(body, doc)) return ApiError{400, "request body: " + *err};
  return parse_limits_request(body, out);
}

}  // namespace gpuslice::node
