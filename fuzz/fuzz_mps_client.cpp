// Fuzzes what a tenant's environment gives the MPS client derivation (config/mps_client.h): its own
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, CUDA_MPS_CLIENT_PRIORITY, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
// CUDA_VISIBLE_DEVICES. Whatever they say, no derived value exceeds the operator's: a quota'd
// ordinal's limit stays at most its quota, the priority is 1 below high, the thread share at most
// the operator's, and under GPUSLICE_MPS_COMPUTE=threads the thread share stays at most the compute
// limit.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/mps_client.h"
#include "fuzz_check.h"

using namespace gpuslice::config;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // Four fields, split at the first three '\n'.
  std::string_view field[4];
  std::string_view rest = text;
  for (int i = 0; i < 3; ++i) {
    const std::size_t nl = rest.find('\n');
    field[i] = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
  }
  field[3] = rest;

  if (const auto parsed = parse_mps_pinned_limit(field[0])) {
    FUZZ_CHECK(!parsed->empty());
    for (const auto& [ordinal, bytes] : *parsed) FUZZ_CHECK(ordinal >= 0 && ordinal <= 1023);
  }
  for (const bool high : {false, true}) {
    MpsClientInputs in;
    in.quota_by_ordinal = {{0, std::uint64_t{8} << 30}, {3, std::uint64_t{1} << 20}};
    in.high = high;
    in.low_threads = 40;
    in.tenant_pinned = std::string(field[0]);
    in.tenant_priority = std::string(field[1]);
    in.tenant_threads = std::string(field[2]);
    const MpsClientEnv env = derive_mps_client_env(in);
    FUZZ_CHECK(env.pinned.has_value());
    const auto pinned = parse_mps_pinned_limit(*env.pinned);
    FUZZ_CHECK(pinned.has_value());
    for (const auto& [ordinal, bytes] : *pinned) {
      if (ordinal == 0) FUZZ_CHECK(bytes <= (std::uint64_t{8} << 30));
      if (ordinal == 3) FUZZ_CHECK(bytes <= (std::uint64_t{1} << 20));
    }
    FUZZ_CHECK(env.priority == "0" || env.priority == "1");
    if (!high) FUZZ_CHECK(env.priority == "1");
    if (!high) {
      FUZZ_CHECK(env.threads.has_value());
      const unsigned threads = static_cast<unsigned>(std::stoul(*env.threads));
      FUZZ_CHECK(threads >= 1 && threads <= 40);
    } else {
      FUZZ_CHECK(!env.threads.has_value());
    }
  }
  // GPUSLICE_MPS_COMPUTE=threads: the SM share is the lowest of the limit, the operator's low share
  // and the tenant's own, never above the limit, and it is the threads value the client gets.
  for (const bool high : {false, true}) {
    MpsClientInputs in;
    in.high = high;
    in.low_threads = 40;
    in.compute_mode = MpsComputeMode::Threads;
    in.compute_by_ordinal = std::vector<unsigned>{30, 30};
    in.tenant_threads = std::string(field[2]);
    const MpsClientEnv env = derive_mps_client_env(in);
    FUZZ_CHECK(env.threads.has_value());
    const unsigned threads = static_cast<unsigned>(std::stoul(*env.threads));
    FUZZ_CHECK(threads >= 1 && threads <= 30);
    FUZZ_CHECK(env.sm_share == threads);
    FUZZ_CHECK(partition_time_limit(threads, env.sm_share) == 0);
  }
  const auto ordinals = client_ordinal_uuids(std::string(field[3]), {"gpu-aaaa", "gpu-bbbb"});
  FUZZ_CHECK(ordinals.size() <= 256);
  return 0;
}
