// Fuzzes the DRA driver's claim parameters (the opaque `gpuslice.io` configuration) and the claim
// reader around them: no crash on any input; what is accepted is within its documented ranges
// (request <= limit, percentages 1-100, sizes above 0), and a claim carrying the same text as its
// configuration is either refused or yields limits within what the scheduler allocated.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "node/dra/claim_config.h"
#include "node/dra/claim_reader.h"
#include "node/http/untrusted_json.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice::node;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto config = dra::parse_claim_config(text);
  if (config) {
    if (config->memory_request && config->memory_limit)
      FUZZ_CHECK(*config->memory_request <= *config->memory_limit);
    if (config->memory_limit) FUZZ_CHECK(*config->memory_limit > 0);
    for (auto p : {config->compute_request, config->compute_limit}) {
      if (p) FUZZ_CHECK(*p >= 1 && *p <= 100);
    }
  } else {
    FUZZ_CHECK(!config.error().empty());
  }

  // The same bytes as the parameters of an allocated claim.
  nlohmann::json parameters;
  if (parse_untrusted_json(text, parameters, 8)) return 0;
  const nlohmann::json claim = {
      {"metadata", {{"namespace", "ns"}, {"name", "c"}, {"uid", "u1"}}},
      {"status",
       {{"allocation",
         {{"devices",
           {{"results",
             {{{"request", "gpu"},
               {"driver", "gpuslice.io"},
               {"pool", "node-a"},
               {"device", "gpu-0"},
               {"consumedCapacity", {{"memory", "8Gi"}, {"compute", "30"}}}}}},
            {"config",
             {{{"source", "FromClaim"},
               {"opaque", {{"driver", "gpuslice.io"}, {"parameters", parameters}}}}}}}}}}}}};
  dra::DriverNode node;
  node.driver = "gpuslice.io";
  node.pool = "node-a";
  GpuInfo gpu;
  gpu.uuid = "GPU-0";
  gpu.memory_total_bytes = 80ULL << 30;
  node.gpus = {gpu};
  auto allocation = dra::read_claim_allocation(claim, {"ns", "c", "u1"}, node);
  if (allocation) {
    FUZZ_CHECK(allocation->devices.size() == 1);
    FUZZ_CHECK(allocation->devices[0].memory_bytes <= (8ULL << 30));
    FUZZ_CHECK(allocation->devices[0].compute.value_or(100) <= 30);
  }
  return 0;
}
