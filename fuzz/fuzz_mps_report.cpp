// Fuzzes what the CLI reads back of the node's MPS state (the daemon's "mps" member, the manager's
// state file) and the control client's server list: no crash on any input; an accepted report dumps
// and reads back to the same report; every listed server is a positive pid.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "fuzz_check.h"
#include "node/mps/control_client.h"
#include "node/mps/mps_report_json.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice::node::mps;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  for (int pid : parse_server_list(text)) FUZZ_CHECK(pid > 0);
  FUZZ_CHECK(one_line(text, 50).size() <= 50);

  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) return 0;
  auto report = report_from_json(doc);
  if (!report) {
    FUZZ_CHECK(!report.error().empty());
    return 0;
  }
  const nlohmann::json again = report_json(*report);
  (void)again.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  auto back = report_from_json(again);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(back->state == report->state && back->reason == report->reason &&
             back->restarts == report->restarts && back->server_pids == report->server_pids &&
             back->control_pid == report->control_pid);
  return 0;
}
