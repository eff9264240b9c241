// Paired, in-process overhead of libgpuslice.so on a real GPU. Run under LD_PRELOAD: each round
// times a block of calls through the hooked entry point (what every program gets: dlsym on the
// libcuda handle is routed to our hook) and a block through the driver's own symbol (read from its
// ELF symbol table), alternating the order. Blocks in one process share
// clocks, caches and GPU state, so the difference of the medians is the hook's cost, not noise
// between processes. Usage: paired ROUNDS
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

typedef int CUresult_t;
typedef CUresult_t (*LaunchFn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                               void**, void**);
typedef CUresult_t (*AllocFn)(unsigned long long*, size_t);
typedef CUresult_t (*FreeFn)(unsigned long long);

__global__ void empty_kernel() {}

// The driver's own address of `name`, read from its ELF symbol table (load base + st_value): no
// dlsym involved, so gpuslice's routing cannot intervene.
static void* direct_symbol(const char* name) {
  struct Found {
    const char* name;
    ElfW(Addr) base = 0;
    std::string path;
  } found{name};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* f = static_cast<Found*>(data);
        if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libcuda.so") != nullptr) {
          f->base = info->dlpi_addr;
          f->path = info->dlpi_name;
          return 1;
        }
        return 0;
      },
      &found);
  if (found.path.empty()) return nullptr;
  std::ifstream in(found.path, std::ios::binary);
  std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < sizeof(Elf64_Ehdr)) return nullptr;
  auto* eh = reinterpret_cast<const Elf64_Ehdr*>(file.data());
  auto* sh = reinterpret_cast<const Elf64_Shdr*>(file.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNSYM) continue;
    const char* strtab = file.data() + sh[sh[i].sh_link].sh_offset;
    auto* sym = reinterpret_cast<const Elf64_Sym*>(file.data() + sh[i].sh_offset);
    for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
      if (sym[k].st_value != 0 && std::strcmp(strtab + sym[k].st_name, name) == 0)
        return reinterpret_cast<void*>(found.base + sym[k].st_value);
    }
  }
  return nullptr;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 30;
  cudaFree(nullptr);
  void* fn = nullptr;
  if (cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&fn), reinterpret_cast<const void*>(empty_kernel)) !=
      cudaSuccess) {
    std::printf("error=cudaGetFuncBySymbol\n");
    return 1;
  }
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  LaunchFn launch_hooked = reinterpret_cast<LaunchFn>(dlsym(h, "cuLaunchKernel"));
  LaunchFn launch_direct = reinterpret_cast<LaunchFn>(direct_symbol("cuLaunchKernel"));
  AllocFn alloc_hooked = reinterpret_cast<AllocFn>(dlsym(h, "cuMemAlloc_v2"));
  AllocFn alloc_direct = reinterpret_cast<AllocFn>(direct_symbol("cuMemAlloc_v2"));
  FreeFn free_hooked = reinterpret_cast<FreeFn>(dlsym(h, "cuMemFree_v2"));
  FreeFn free_direct = reinterpret_cast<FreeFn>(direct_symbol("cuMemFree_v2"));
  Dl_info hi{}, di{};
  dladdr(reinterpret_cast<void*>(launch_hooked), &hi);
  dladdr(reinterpret_cast<void*>(launch_direct), &di);
  std::printf("hooked_from=%s direct_from=%s\n", hi.dli_fname ? hi.dli_fname : "?", di.dli_fname ? di.dli_fname : "?");
  if (!launch_direct || !alloc_direct || !free_direct || launch_direct == launch_hooked) {
    std::printf("error=no_direct_symbol\n");
    return 1;
  }
  using clock = std::chrono::steady_clock;
  const int launches = 256 * 40, allocs = 1000;
  std::vector<double> lh, ld, ah, ad;
  for (int r = 0; r < rounds + 2; ++r) {
    for (int pass = 0; pass < 2; ++pass) {
      bool hooked = (pass == 0) == (r % 2 == 0);
      LaunchFn launch = hooked ? launch_hooked : launch_direct;
      // Only the time inside the launch calls counts: blocks of 256 never fill the driver's queue,
      // so what is timed is the CPU cost of a launch (where a hook's cost shows), not the GPU's pace.
      double launch_ns_total = 0;
      for (int done = 0; done < launches; done += 256) {
        cudaDeviceSynchronize();
        auto t0 = clock::now();
        for (int i = 0; i < 256; ++i) launch(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
        launch_ns_total += std::chrono::duration<double, std::nano>(clock::now() - t0).count();
      }
      cudaDeviceSynchronize();
      double ns = launch_ns_total / (launches / 256 * 256);
      AllocFn alloc = hooked ? alloc_hooked : alloc_direct;
      FreeFn release = hooked ? free_hooked : free_direct;
      auto t1 = clock::now();
      for (int i = 0; i < allocs; ++i) {
        unsigned long long p = 0;
        alloc(&p, 1 << 20);
        release(p);
      }
      double ans = std::chrono::duration<double, std::nano>(clock::now() - t1).count() / allocs;
      if (r < 2) continue;  // warm-up rounds
      (hooked ? lh : ld).push_back(ns);
      (hooked ? ah : ad).push_back(ans);
    }
  }
  // Each round's hooked and direct blocks ran back to back: their difference is one paired
  // sample; the mean of the samples with a 95 % interval (t distribution) says what the hook adds.
  auto paired = [](const std::vector<double>& hooked, const std::vector<double>& direct, const char* name) {
    const size_t n = std::min(hooked.size(), direct.size());
    double mean = 0, sq = 0;
    for (size_t i = 0; i < n; ++i) mean += (hooked[i] - direct[i]) / n;
    for (size_t i = 0; i < n; ++i) sq += (hooked[i] - direct[i] - mean) * (hooked[i] - direct[i] - mean);
    const double sd = n > 1 ? std::sqrt(sq / (n - 1)) : 0;
    const double t = n >= 60 ? 2.0 : n >= 30 ? 2.045 : n >= 20 ? 2.093 : 2.262;
    std::printf("%s_added_mean_ns=%.1f %s_added_ci95_ns=%.1f %s_rounds=%zu\n", name, mean, name,
                t * sd / std::sqrt(static_cast<double>(n)), name, n);
  };
  paired(lh, ld, "launch");
  paired(ah, ad, "alloc_free");
  double mlh = median(lh), mld = median(ld), mah = median(ah), mad = median(ad);
  std::printf("launch_direct_ns=%.1f launch_hooked_ns=%.1f launch_added_ns=%.1f launch_ratio=%.4f\n", mld, mlh,
              mlh - mld, mlh / mld);
  std::printf("alloc_free_direct_ns=%.1f alloc_free_hooked_ns=%.1f alloc_free_added_ns=%.1f alloc_free_ratio=%.4f\n",
              mad, mah, mah - mad, mah / mad);
  std::printf("err=%s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}
