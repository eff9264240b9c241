// A CUDA "application" for the reclaim end-to-end tests (reclaim_e2e_test.cpp), linked to libcuda
// like any -lcuda program. Roles:
//   borrower --count N --mib M --seconds S [--stop-file F]: N allocations of M MiB, each filled with
//     its own pattern, checked every 200 ms (20 with --rewrite) until S seconds passed or F exists, then
//     freed; prints allocated=, checks=, mismatches=, freed=. With --rewrite 1 each round writes new patterns
//     first.
//   asker --mib M --hold-ms H: one allocation of M MiB (timed), written and read back, held H ms,
//     freed; prints ask_code=, ask_ms=, ask_identical=, asker_freed=.
//   unmovable --mib M: pitched, managed and cuMemAlloc allocations of M MiB each, in that order,
//     printing each result code (pitch_code=, managed_code=, alloc_code=), then holds until killed.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "abi/cuda_abi.h"

namespace {

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void fill(std::vector<unsigned char>& bytes, unsigned seed) {
  std::uint64_t state = seed * 2654435761ULL + 1;
  for (std::size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    std::memcpy(&bytes[i], &state, 8);
  }
}

int borrower(int count, std::size_t bytes, int seconds, const std::string& stop_file, bool rewrite) {
  // The context's footprint is booked by the library's watcher within 100 ms: what is within the
  // guarantee then does not depend on how fast this process allocates.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<CUdeviceptr> ptrs;
  std::vector<std::vector<unsigned char>> patterns;
  for (int i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, bytes);
    if (r != CUDA_SUCCESS) {
      std::printf("alloc_code=%d at=%d\n", r, i);
      return 1;
    }
    patterns.emplace_back(bytes);
    fill(patterns.back(), static_cast<unsigned>(i));
    if (cuMemcpyHtoD_v2(p, patterns.back().data(), bytes) != CUDA_SUCCESS) return 1;
    ptrs.push_back(p);
  }
  std::printf("allocated=%d\n", count);
  std::fflush(stdout);
  std::vector<unsigned char> seen(bytes);
  long checks = 0, mismatches = 0;
  const long long end = now_ms() + seconds * 1000LL;
  unsigned round = 0;
  while (now_ms() < end && (stop_file.empty() || access(stop_file.c_str(), F_OK) != 0)) {
    // --rewrite: each round first writes every buffer anew (a write lost to a move shows below).
    for (int i = 0; rewrite && i < count; ++i) {
      auto& pattern = patterns[static_cast<std::size_t>(i)];
      fill(pattern, static_cast<unsigned>(i) + 1000U * ++round);
      if (cuMemcpyHtoD_v2(ptrs[static_cast<std::size_t>(i)], pattern.data(), bytes) != CUDA_SUCCESS)
        ++mismatches;
    }
    for (int i = 0; i < count; ++i) {
      if (cuMemcpyDtoH_v2(seen.data(), ptrs[static_cast<std::size_t>(i)], bytes) != CUDA_SUCCESS ||
          std::memcmp(seen.data(), patterns[static_cast<std::size_t>(i)].data(), bytes) != 0)
        ++mismatches;
      ++checks;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rewrite ? 20 : 200));
  }
  std::printf("checks=%ld\nmismatches=%ld\n", checks, mismatches);
  int freed = 0;
  for (CUdeviceptr p : ptrs) freed += cuMemFree_v2(p) == CUDA_SUCCESS ? 1 : 0;
  std::printf("freed=%d\n", freed);
  return 0;
}

int asker(std::size_t bytes, int hold_ms) {
  CUdeviceptr p = 0;
  const long long t0 = now_ms();
  const CUresult r = cuMemAlloc_v2(&p, bytes);
  std::printf("ask_code=%d\nask_ms=%lld\n", r, now_ms() - t0);
  std::fflush(stdout);
  if (r != CUDA_SUCCESS) return 0;
  std::vector<unsigned char> pattern(bytes), seen(bytes);
  fill(pattern, 99);
  cuMemcpyHtoD_v2(p, pattern.data(), bytes);
  cuMemcpyDtoH_v2(seen.data(), p, bytes);
  std::printf("ask_identical=%d\n", pattern == seen ? 1 : 0);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  std::printf("asker_freed=%d\n", cuMemFree_v2(p) == CUDA_SUCCESS ? 1 : 0);
  std::fflush(stdout);
  return 0;
}

int unmovable(std::size_t bytes) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // as borrower()
  CUdeviceptr pitched = 0, managed = 0, plain = 0;
  std::size_t pitch = 0;
  std::printf("pitch_code=%d\n", cuMemAllocPitch_v2(&pitched, &pitch, bytes / 1024, 1024, 4));
  std::printf("managed_code=%d\n", cuMemAllocManaged(&managed, bytes, 1));
  std::printf("alloc_code=%d\n", cuMemAlloc_v2(&plain, bytes));
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string role = argc > 1 ? argv[1] : "";
  std::string stop_file;
  bool rewrite = false;
  int count = 1, seconds = 1, hold_ms = 0;
  std::size_t mib = 64;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const long value = std::atol(argv[i + 1]);
    if (key == "--stop-file") stop_file = argv[i + 1];
    if (key == "--rewrite") rewrite = value != 0;
    if (key == "--count") count = static_cast<int>(value);
    if (key == "--mib") mib = static_cast<std::size_t>(value);
    if (key == "--seconds") seconds = static_cast<int>(value);
    if (key == "--hold-ms") hold_ms = static_cast<int>(value);
  }
  if (cuInit(0) != CUDA_SUCCESS) return 3;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
    return 3;
  const std::size_t bytes = mib << 20;
  if (role == "borrower") return borrower(count, bytes, seconds, stop_file, rewrite);
  if (role == "asker") return asker(bytes, hold_ms);
  if (role == "unmovable") return unmovable(bytes);
  std::fprintf(stderr, "usage: reclaim_app borrower|asker|unmovable [--count N] [--mib M] ...\n");
  return 2;
}
