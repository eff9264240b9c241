// What a hook adds to cuLaunchKernel and to cuMemAlloc + cuMemFree on a real GPU, resolved to a
// few ns: one process under libgpuslice-ab.so, the same handed-out function on both sides.
//
//   taskset -c 4 env LD_PRELOAD=build/lib/libgpuslice-ab.so [GPUSLICE_...] build/gpu/launch_ab [ROUNDS] [aa]
//
// The program takes cuLaunchKernel, cuMemAlloc_v2 and cuMemFree_v2 with dlsym on the driver's
// handle, so gpuslice hands out its A/B stubs (src/interposer/ab_switch.h): each jumps to the hook
// or straight to the driver as gpuslice_ab_set_bypass() says. Both sides call the same address
// through the same stub; only the side differs. Each round runs one block per side, in ABBA order
// (round r: hooked then bypassed when r is even, the reverse when odd); the first rounds are
// warm-up. A block is 4 x 256 launches of an empty kernel, each launch timed on its own around the
// call (rdtsc, or CLOCK_MONOTONIC where the TSC is not invariant: the timer costs the same on both
// sides), with cuCtxSynchronize between the groups of 256 outside the timed part, so the launch
// queue never fills and what is timed is the CPU cost of a launch; then 64 timed 1 MiB
// cuMemAlloc + cuMemFree pairs. One sample is an ABBA quad (two rounds): the mean of its two
// hooked blocks minus the mean of its two bypassed blocks, which cancels a linear drift. Reported:
// the mean of the samples with a 95 % confidence interval (t distribution), for the mean cost per
// call and, less sensitive to interrupts and preemption, for the median call of each block.
// Then the same again in interleaved blocks (`launch_x`, `alloc_free_x`): the side flips before
// every call (untimed), so the two sides of each pair of calls meet the same queue, caches and
// machine; one sample is a block's hooked mean minus its bypassed mean. Block-to-block noise of a
// virtual machine (about +-100 ns per launch between ABBA blocks on an H100 guest) cancels there.
// `aa` is the control: both sides bypassed (the switch is flipped to the same value), so the
// difference must be 0 within its interval.
#include <cpuid.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <sched.h>
#include <time.h>
#include <x86intrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

typedef CUresult (*LaunchFn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
typedef CUresult (*AllocFn)(CUdeviceptr*, size_t);
typedef CUresult (*FreeFn)(CUdeviceptr);
typedef CUresult (*SyncFn)();
typedef CUresult (*MemInfoFn)(size_t*, size_t*);
typedef void (*SwitchFn)(int);

__global__ void empty_kernel() {}

namespace {

constexpr int kLaunchGroups = 4;        // groups per block, synchronized between (untimed)
constexpr int kLaunchesPerGroup = 256;  // far from the driver's launch-queue depth
constexpr int kAllocsPerBlock = 64;
constexpr size_t kAllocBytes = 1 << 20;

bool g_use_tsc = false;

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Timestamps around one call, in ticks (TSC) or ns. lfence keeps the call's instructions inside.
inline std::uint64_t stamp_begin() {
  if (g_use_tsc) {
    _mm_lfence();
    std::uint64_t t = __rdtsc();
    _mm_lfence();
    return t;
  }
  return monotonic_ns();
}
inline std::uint64_t stamp_end() {
  if (g_use_tsc) {
    unsigned aux = 0;
    std::uint64_t t = __rdtscp(&aux);
    _mm_lfence();
    return t;
  }
  return monotonic_ns();
}

bool invariant_tsc() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d & (1u << 8)) != 0;
}

// Student's t quantile for 95 % two-sided (Cornish-Fisher expansion; within 0.1 % from 5 df on).
double t95(double df) {
  const double z = 1.959963985;
  const double z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z, z9 = z7 * z * z;
  return z + (z3 + z) / (4 * df) + (5 * z5 + 16 * z3 + 3 * z) / (96 * df * df) +
         (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * df * df * df) +
         (79 * z9 + 776 * z7 + 1482 * z5 - 1920 * z3 - 945 * z) / (92160 * df * df * df * df);
}

struct BlockStats {
  double mean = 0;    // ticks per call
  double median = 0;  // ticks
};

BlockStats stats_of(std::vector<std::uint32_t>& ticks) {
  BlockStats s;
  double sum = 0;
  for (std::uint32_t t : ticks) sum += t;
  s.mean = sum / static_cast<double>(ticks.size());
  std::nth_element(ticks.begin(), ticks.begin() + ticks.size() / 2, ticks.end());
  s.median = ticks[ticks.size() / 2];
  return s;
}

// One operation's per-block figures, in the order the rounds ran: [round][side], side 0 = hooked.
struct Series {
  std::vector<BlockStats> side[2];
};

struct Summary {
  double hooked = 0, bypassed = 0, added = 0, ci95 = 0;
  size_t n = 0;
};

// ABBA quads of rounds (2q, 2q + 1): hooked minus bypassed, averaged over the quad. With
// `within_round`, each round's own pair instead (interleaved blocks: both sides ran in the same
// block, call by call, so the block itself is the pair).
Summary summarise(const Series& s, double ns_per_tick, bool use_median, bool within_round = false) {
  Summary out;
  const size_t rounds = s.side[0].size();
  std::vector<double> diffs;
  double sum_h = 0, sum_b = 0;
  for (size_t r = 0; r < rounds; ++r) {
    sum_h += use_median ? s.side[0][r].median : s.side[0][r].mean;
    sum_b += use_median ? s.side[1][r].median : s.side[1][r].mean;
  }
  auto v = [&](int side, size_t k) { return use_median ? s.side[side][k].median : s.side[side][k].mean; };
  if (within_round) {
    for (size_t r = 0; r < rounds; ++r) diffs.push_back(ns_per_tick * (v(0, r) - v(1, r)));
  } else {
    for (size_t r = 0; r + 1 < rounds; r += 2)
      diffs.push_back(ns_per_tick * (v(0, r) + v(0, r + 1) - v(1, r) - v(1, r + 1)) / 2);
  }
  out.n = diffs.size();
  out.hooked = ns_per_tick * sum_h / static_cast<double>(rounds);
  out.bypassed = ns_per_tick * sum_b / static_cast<double>(rounds);
  double mean = 0, sq = 0;
  for (double d : diffs) mean += d;
  mean /= static_cast<double>(out.n);
  for (double d : diffs) sq += (d - mean) * (d - mean);
  out.added = mean;
  out.ci95 = out.n > 1
                 ? t95(static_cast<double>(out.n - 1)) * std::sqrt(sq / static_cast<double>(out.n - 1)) /
                       std::sqrt(static_cast<double>(out.n))
                 : NAN;
  return out;
}

void report(const char* name, const Series& s, double ns_per_tick, bool within_round = false) {
  Summary m = summarise(s, ns_per_tick, false, within_round),
          md = summarise(s, ns_per_tick, true, within_round);
  std::printf(
      "%-10s hooked_ns=%.1f bypassed_ns=%.1f added_ns=%+.1f ci95_ns=%.1f added_pct=%+.3f ci95_pct=%.3f "
      "%s=%zu | "
      "median_call: hooked_ns=%.1f bypassed_ns=%.1f added_ns=%+.1f ci95_ns=%.1f\n",
      name, m.hooked, m.bypassed, m.added, m.ci95, 100 * m.added / m.bypassed, 100 * m.ci95 / m.bypassed,
      within_round ? "n_blocks" : "n_abba", m.n, md.hooked, md.bypassed, md.added, md.ci95);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 400;
  bool aa = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "aa") == 0)
      aa = true;
    else if (std::atoi(argv[i]) >= 4)
      rounds = std::atoi(argv[i]);
    else {
      std::fprintf(stderr, "usage: launch_ab [ROUNDS>=4] [aa]\n");
      return 2;
    }
  }
  rounds += rounds % 2;  // whole ABBA quads
  const int warmup = 8;

  auto set_bypass = reinterpret_cast<SwitchFn>(dlsym(RTLD_DEFAULT, "gpuslice_ab_set_bypass"));
  if (set_bypass == nullptr) {
    std::printf("error=no_ab_switch (run under LD_PRELOAD=libgpuslice-ab.so)\n");
    return 1;
  }
  set_bypass(0);
  if (cudaFree(nullptr) != cudaSuccess) {  // the primary context, outside everything timed
    std::printf("error=cuda_init\n");
    return 1;
  }
  CUfunction fn = nullptr;
  if (cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&fn),
                          reinterpret_cast<const void*>(empty_kernel)) != cudaSuccess) {
    std::printf("error=cudaGetFuncBySymbol\n");
    return 1;
  }
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto launch = reinterpret_cast<LaunchFn>(dlsym(h, "cuLaunchKernel"));
  auto alloc = reinterpret_cast<AllocFn>(dlsym(h, "cuMemAlloc_v2"));
  auto release = reinterpret_cast<FreeFn>(dlsym(h, "cuMemFree_v2"));
  auto sync = reinterpret_cast<SyncFn>(dlsym(h, "cuCtxSynchronize"));
  auto mem_info = reinterpret_cast<MemInfoFn>(dlsym(h, "cuMemGetInfo_v2"));
  if (!launch || !alloc || !release || !sync || !mem_info) {
    std::printf("error=dlsym\n");
    return 1;
  }
  // Every function must be one of gpuslice's stubs, or both sides would call the same code.
  for (void* p :
       {reinterpret_cast<void*>(launch), reinterpret_cast<void*>(alloc), reinterpret_cast<void*>(release)}) {
    Dl_info info{};
    if (dladdr(p, &info) == 0 || info.dli_fname == nullptr ||
        std::strstr(info.dli_fname, "gpuslice") == nullptr) {
      std::printf("error=not_a_stub from=%s\n", info.dli_fname ? info.dli_fname : "?");
      return 1;
    }
  }
  // The switch works: under a memory quota the hooked side reports the quota, the bypassed side
  // the card.
  size_t free_b = 0, total_hooked = 0, total_bypassed = 0;
  set_bypass(0);
  mem_info(&free_b, &total_hooked);
  set_bypass(1);
  mem_info(&free_b, &total_bypassed);
  set_bypass(0);
  const bool quota = std::getenv("GPUSLICE_MEMORY_LIMIT") != nullptr;
  std::printf("switch_check hooked_total=%zu bypassed_total=%zu %s\n", total_hooked, total_bypassed,
              !quota                           ? "(no quota: totals may be equal)"
              : total_hooked != total_bypassed ? "ok"
                                               : "FAIL");

  g_use_tsc = invariant_tsc();
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  sched_getaffinity(0, sizeof cpus, &cpus);
  std::printf(
      "launch_ab rounds=%d warmup=%d launches_per_block=%d allocs_per_block=%d timer=%s cpus=%d "
      "cpu_now=%d%s\n",
      rounds, warmup, kLaunchGroups * kLaunchesPerGroup, kAllocsPerBlock,
      g_use_tsc ? "rdtsc" : "clock_monotonic", CPU_COUNT(&cpus), sched_getcpu(), aa ? " control=aa" : "");
  if (CPU_COUNT(&cpus) != 1) std::printf("warning=not_pinned (run under taskset -c CPU)\n");

  std::vector<std::uint32_t> ticks(kLaunchGroups * kLaunchesPerGroup);
  std::vector<std::uint32_t> a_ticks(kAllocsPerBlock), f_ticks(kAllocsPerBlock), af_ticks(kAllocsPerBlock);
  Series s_launch, s_alloc, s_free, s_alloc_free;
  // Interleaved blocks: the side flips before every call (untimed), so both sides of a pair meet
  // the same driver, queue and machine state; the block's hooked mean minus its bypassed mean is
  // one sample. This is the figure that resolves tens of ns on a noisy virtual machine.
  Series x_launch, x_alloc_free;
  std::vector<std::uint32_t> x_ticks[2], x_af_ticks[2];
  int errors = 0;
  const std::uint64_t clock0 = monotonic_ns(), stamp0 = stamp_begin();
  for (int r = 0; r < warmup + rounds; ++r) {
    for (int pass = 0; pass < 2; ++pass) {
      const int side = (r % 2 == 0) ? pass : 1 - pass;  // 0 hooked, 1 bypassed; ABBA
      set_bypass(aa ? 1 : side);
      sync();
      for (int g = 0; g < kLaunchGroups; ++g) {
        for (int i = 0; i < kLaunchesPerGroup; ++i) {
          const std::uint64_t t0 = stamp_begin();
          CUresult rc = launch(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
          const std::uint64_t t1 = stamp_end();
          ticks[g * kLaunchesPerGroup + i] = static_cast<std::uint32_t>(t1 - t0);
          errors += rc != CUDA_SUCCESS;
        }
        sync();  // untimed: the queue drains before the next group
      }
      for (int i = 0; i < kAllocsPerBlock; ++i) {
        CUdeviceptr p = 0;
        const std::uint64_t t0 = stamp_begin();
        CUresult rc = alloc(&p, kAllocBytes);
        const std::uint64_t t1 = stamp_end();
        CUresult rc2 = release(p);
        const std::uint64_t t2 = stamp_end();
        a_ticks[i] = static_cast<std::uint32_t>(t1 - t0);
        f_ticks[i] = static_cast<std::uint32_t>(t2 - t1);
        af_ticks[i] = static_cast<std::uint32_t>(t2 - t0);
        errors += (rc != CUDA_SUCCESS) + (rc2 != CUDA_SUCCESS);
      }
      if (r < warmup) continue;
      s_launch.side[side].push_back(stats_of(ticks));
      s_alloc.side[side].push_back(stats_of(a_ticks));
      s_free.side[side].push_back(stats_of(f_ticks));
      s_alloc_free.side[side].push_back(stats_of(af_ticks));
    }
  }
  for (int r = 0; r < warmup + rounds; ++r) {
    for (auto* v : {&x_ticks[0], &x_ticks[1], &x_af_ticks[0], &x_af_ticks[1]}) v->clear();
    sync();
    for (int g = 0; g < kLaunchGroups; ++g) {
      for (int i = 0; i < kLaunchesPerGroup; ++i) {
        const int side = (i + g + r) % 2;  // alternating, starting on either side
        set_bypass(aa ? 1 : side);
        const std::uint64_t t0 = stamp_begin();
        CUresult rc = launch(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
        const std::uint64_t t1 = stamp_end();
        x_ticks[side].push_back(static_cast<std::uint32_t>(t1 - t0));
        errors += rc != CUDA_SUCCESS;
      }
      sync();
    }
    for (int i = 0; i < kAllocsPerBlock; ++i) {
      const int side = (i + r) % 2;
      set_bypass(aa ? 1 : side);
      CUdeviceptr p = 0;
      const std::uint64_t t0 = stamp_begin();
      CUresult rc = alloc(&p, kAllocBytes);
      CUresult rc2 = release(p);
      const std::uint64_t t2 = stamp_end();
      x_af_ticks[side].push_back(static_cast<std::uint32_t>(t2 - t0));
      errors += (rc != CUDA_SUCCESS) + (rc2 != CUDA_SUCCESS);
    }
    if (r < warmup) continue;
    for (int side = 0; side < 2; ++side) {
      x_launch.side[side].push_back(stats_of(x_ticks[side]));
      x_alloc_free.side[side].push_back(stats_of(x_af_ticks[side]));
    }
  }
  set_bypass(0);
  const std::uint64_t clock1 = monotonic_ns(), stamp1 = stamp_end();
  const double ns_per_tick =
      g_use_tsc ? static_cast<double>(clock1 - clock0) / static_cast<double>(stamp1 - stamp0) : 1.0;
  if (g_use_tsc)
    std::printf("tsc_ghz=%.4f run_s=%.1f\n", 1 / ns_per_tick, 1e-9 * static_cast<double>(clock1 - clock0));
  report("launch", s_launch, ns_per_tick);
  report("alloc_free", s_alloc_free, ns_per_tick);
  report("alloc", s_alloc, ns_per_tick);
  report("free", s_free, ns_per_tick);
  report("launch_x", x_launch, ns_per_tick, /*within_round=*/true);
  report("alloc_free_x", x_alloc_free, ns_per_tick, /*within_round=*/true);
  std::printf("errors=%d\n", errors);
  return errors == 0 ? 0 : 1;
}
