// A tenant's process for the NVML view tests, in two roles:
//   nvml_view_app work --bytes N --seconds S [--busy]
//     holds N bytes on device 0 (a context, so NVML lists it), launching kernels back to back when
//     --busy; prints "ready=1" once listed. Linked to libcuda.so.1 like any CUDA program.
//   nvml_view_app query [PID...]
//     what nvidia-smi asks NVML about device 0, every list in every version, as key=value lines
//     (pid lists sorted, comma-separated; "<fn>_rc" the return code; "<fn>_count" the size query),
//     and "name_<PID>_rc" / "name_<PID>" for each PID given (nvmlSystemGetProcessName); then the
//     process lists of nvidia-smi's internal export table (slots 213-215) as "export<slot>..." keys,
//     the table found through the library's handle, and as "export_global<slot>..." through the
//     process's global scope (the preloaded library's export, when there is one).
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "abi/cuda_abi.h"
#include "abi/nvml_abi.h"
#include "abi/nvml_export_table.h"

namespace {

[[noreturn]] void die(const char* what, int code) {
  std::printf("error=%s code=%d\n", what, code);
  std::fflush(stdout);
  std::exit(3);
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) die(what, r);
}

int work(unsigned long long bytes, int seconds, bool busy) {
  check(cuInit(0), "cuInit");
  CUdevice dev = 0;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx = nullptr;
  check(cuCtxCreate_v2(&ctx, 0, dev), "cuCtxCreate");
  CUdeviceptr p = 0;
  check(cuMemAlloc_v2(&p, bytes), "cuMemAlloc");
  CUmodule mod = nullptr;
  static const char image[] = "mock-module";
  check(cuModuleLoadData(&mod, image), "cuModuleLoadData");
  CUfunction fn = nullptr;
  check(cuModuleGetFunction(&fn, mod, "sleep_5000us"), "cuModuleGetFunction");
  std::printf("pid=%d\nready=1\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (busy) {
      for (int i = 0; i < 4; ++i)
        check(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), "launch");
      check(cuCtxSynchronize(), "cuCtxSynchronize");
    } else {
      usleep(20000);
    }
  }
  return 0;
}

template <class Fn>
Fn load(void* h, const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(h, name));
  if (fn == nullptr) die(name, 0);
  return fn;
}

std::string joined(std::vector<unsigned> pids) {
  std::sort(pids.begin(), pids.end());
  std::string out;
  for (unsigned pid : pids) out += (out.empty() ? "" : ",") + std::to_string(pid);
  return out;
}

// One list function: the size query (count 0, no buffer), then the list itself.
template <class Info>
void list(void* h, nvmlDevice_t dev, const char* name) {
  using Fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned*, Info*);
  auto fn = load<Fn>(h, name);
  unsigned count = 0;
  nvmlReturn_t r = fn(dev, &count, nullptr);
  std::printf("%s_count_rc=%d\n%s_count=%u\n", name, r, name, count);
  Info infos[64] = {};
  unsigned n = 64;
  r = fn(dev, &n, infos);
  std::vector<unsigned> pids;
  std::string memory;
  for (unsigned i = 0; r == NVML_SUCCESS && i < n; ++i) pids.push_back(infos[i].pid);
  std::printf("%s_rc=%d\n%s=%s\n", name, r, name, joined(pids).c_str());
  if (r == NVML_SUCCESS && n > 0) std::printf("%s_used0=%llu\n", name, infos[0].usedGpuMemory);
  if (count > 0) {  // one entry short of what it asked for
    unsigned short_n = count - 1;
    r = fn(dev, &short_n, infos);
    std::printf("%s_short_rc=%d\n%s_short_count=%u\n", name, r, name, short_n);
  }
}

void detail_list(void* h, nvmlDevice_t dev, unsigned mode) {
  auto fn =
      load<decltype(&nvmlDeviceGetRunningProcessDetailList)>(h, "nvmlDeviceGetRunningProcessDetailList");
  nvmlProcessDetail_v1_t details[64] = {};
  nvmlProcessDetailList_t plist{GPUSLICE_NVML_PROCESS_DETAIL_LIST_V1, mode, 0, nullptr};
  nvmlReturn_t r = fn(dev, &plist);
  std::printf("detail%u_count_rc=%d\ndetail%u_count=%u\n", mode, r, mode, plist.numProcArrayEntries);
  plist = nvmlProcessDetailList_t{GPUSLICE_NVML_PROCESS_DETAIL_LIST_V1, mode, 64, details};
  r = fn(dev, &plist);
  std::vector<unsigned> pids;
  for (unsigned i = 0; r == NVML_SUCCESS && i < plist.numProcArrayEntries; ++i)
    pids.push_back(details[i].pid);
  std::printf("detail%u_rc=%d\ndetail%u=%s\n", mode, r, mode, joined(pids).c_str());
  plist = nvmlProcessDetailList_t{12345, mode, 64, details};
  std::printf("detail_bad_version_rc=%d\n", fn(dev, &plist));
}

// nvidia-smi's route to its process table: nvmlInternalGetExportTable, then the list slots with
// its capacity (250), and once with room for a single entry ("<slot>_short").
void export_table(void* scope, nvmlDevice_t dev, const char* prefix) {
  namespace ex = gpuslice::nvml_export;
  using GetTable = decltype(&nvmlInternalGetExportTable);
  auto get_table = reinterpret_cast<GetTable>(dlsym(scope, "nvmlInternalGetExportTable"));
  if (get_table == nullptr) {
    std::printf("%s_found=0\n", prefix);
    return;
  }
  const unsigned char other_id[16] = {0x01, 0x02, 0x03, 0x04};
  const void* table = nullptr;
  std::printf("%s_found=1\n%s_other_rc=%d\n", prefix, prefix, get_table(&table, other_id));
  nvmlReturn_t r = get_table(&table, ex::kProcessTableId);
  std::printf("%s_rc=%d\n", prefix, r);
  if (r != NVML_SUCCESS || table == nullptr) return;
  const auto* words = static_cast<const std::uint64_t*>(table);
  std::printf("%s_size=%llu\n", prefix, static_cast<unsigned long long>(words[0]));
  constexpr unsigned kCapacity = 250;
  std::vector<unsigned char> entries(kCapacity * ex::kEntryStride);
  for (unsigned slot = ex::kFirstProcessListSlot; slot <= ex::kLastProcessListSlot; ++slot) {
    auto list = reinterpret_cast<ex::ProcessListFn>(static_cast<std::uintptr_t>(words[slot]));
    unsigned count = kCapacity;
    r = list(dev, &count, entries.data(), nullptr);
    std::printf("%s%u_rc=%d\n%s%u_count=%u\n", prefix, slot, r, prefix, slot, count);
    std::vector<unsigned> pids;
    for (unsigned i = 0; r == NVML_SUCCESS && i < count && i < kCapacity; ++i) {
      const unsigned char* e = entries.data() + static_cast<std::size_t>(i) * ex::kEntryStride;
      std::uint32_t pid = 0;
      std::uint64_t used = 0;
      std::memcpy(&pid, e + ex::kPidOffset, sizeof pid);
      std::memcpy(&used, e + ex::kUsedMemoryOffset, sizeof used);
      pids.push_back(pid);
      std::printf("%s%u_name_%u=%.64s\n%s%u_used_%u=%llu\n", prefix, slot, pid,
                  reinterpret_cast<const char*>(e + ex::kNameOffset), prefix, slot, pid,
                  static_cast<unsigned long long>(used));
    }
    std::printf("%s%u=%s\n", prefix, slot, joined(pids).c_str());
    count = 1;
    r = list(dev, &count, entries.data(), nullptr);
    std::printf("%s%u_short_rc=%d\n%s%u_short_count=%u\n", prefix, slot, r, prefix, slot, count);
  }
}

int query(int npids, char** name_pids) {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) die("dlopen_nvml", 0);
  if (load<decltype(&nvmlInit_v2)>(h, "nvmlInit_v2")() != NVML_SUCCESS) die("nvmlInit_v2", 0);
  nvmlDevice_t dev = nullptr;
  if (load<decltype(&nvmlDeviceGetHandleByIndex_v2)>(h, "nvmlDeviceGetHandleByIndex_v2")(0, &dev) !=
      NVML_SUCCESS)
    die("handle", 0);
  list<nvmlProcessInfo_v1_t>(h, dev, "nvmlDeviceGetComputeRunningProcesses");
  list<nvmlProcessInfo_v2_t>(h, dev, "nvmlDeviceGetComputeRunningProcesses_v2");
  list<nvmlProcessInfo_t>(h, dev, "nvmlDeviceGetComputeRunningProcesses_v3");
  list<nvmlProcessInfo_v1_t>(h, dev, "nvmlDeviceGetGraphicsRunningProcesses");
  list<nvmlProcessInfo_v2_t>(h, dev, "nvmlDeviceGetGraphicsRunningProcesses_v2");
  list<nvmlProcessInfo_t>(h, dev, "nvmlDeviceGetGraphicsRunningProcesses_v3");
  list<nvmlProcessInfo_v1_t>(h, dev, "nvmlDeviceGetMPSComputeRunningProcesses");
  list<nvmlProcessInfo_v2_t>(h, dev, "nvmlDeviceGetMPSComputeRunningProcesses_v2");
  list<nvmlProcessInfo_t>(h, dev, "nvmlDeviceGetMPSComputeRunningProcesses_v3");
  for (unsigned mode = NVML_PROCESS_MODE_COMPUTE; mode <= NVML_PROCESS_MODE_MPS; ++mode)
    detail_list(h, dev, mode);

  auto samples_fn = load<decltype(&nvmlDeviceGetProcessUtilization)>(h, "nvmlDeviceGetProcessUtilization");
  nvmlProcessUtilizationSample_t samples[64] = {};
  unsigned n = 64;
  nvmlReturn_t r = samples_fn(dev, samples, &n, 0);
  std::vector<unsigned> pids;
  for (unsigned i = 0; r == NVML_SUCCESS && i < n; ++i) pids.push_back(samples[i].pid);
  std::printf("samples_rc=%d\nsamples=%s\n", r, joined(pids).c_str());

  auto info_fn =
      load<decltype(&nvmlDeviceGetProcessesUtilizationInfo)>(h, "nvmlDeviceGetProcessesUtilizationInfo");
  nvmlProcessUtilizationInfo_v1_t util_infos[64] = {};
  nvmlProcessesUtilizationInfo_t info{GPUSLICE_NVML_PROCESSES_UTILIZATION_INFO_V1, 64, 0, util_infos};
  r = info_fn(dev, &info);
  pids.clear();
  for (unsigned i = 0; r == NVML_SUCCESS && i < info.processSamplesCount; ++i)
    pids.push_back(util_infos[i].pid);
  std::printf("util_info_rc=%d\nutil_info=%s\n", r, joined(pids).c_str());

  auto accounting_fn = load<decltype(&nvmlDeviceGetAccountingPids)>(h, "nvmlDeviceGetAccountingPids");
  unsigned accounted_count = 0;
  r = accounting_fn(dev, &accounted_count, nullptr);
  std::printf("accounting_count_rc=%d\naccounting_count=%u\n", r, accounted_count);
  unsigned accounted[64] = {};
  n = 64;
  r = accounting_fn(dev, &n, accounted);
  pids.assign(accounted, accounted + (r == NVML_SUCCESS ? n : 0));
  std::printf("accounting_rc=%d\naccounting=%s\n", r, joined(pids).c_str());

  auto samples_of_card = load<decltype(&nvmlDeviceGetSamples)>(h, "nvmlDeviceGetSamples");
  nvmlSample_t card[8] = {};
  nvmlValueType_t value_type{};
  n = 8;
  r = samples_of_card(dev, NVML_GPU_UTILIZATION_SAMPLES, 0, &value_type, &n, card);
  std::printf("gpu_samples_rc=%d\n", r);
  if (r == NVML_SUCCESS && n > 0) std::printf("gpu_samples_last=%u\n", card[n - 1].sampleValue.uiVal);

  unsigned video = 0;
  unsigned period = 0;
  r = load<decltype(&nvmlDeviceGetEncoderUtilization)>(h, "nvmlDeviceGetEncoderUtilization")(dev, &video,
                                                                                             &period);
  std::printf("encoder_rc=%d\nencoder=%u\nencoder_period_us=%u\n", r, video, period);
  r = load<decltype(&nvmlDeviceGetDecoderUtilization)>(h, "nvmlDeviceGetDecoderUtilization")(dev, &video,
                                                                                             &period);
  std::printf("decoder_rc=%d\ndecoder=%u\n", r, video);

  nvmlUtilization_t util{};
  r = load<decltype(&nvmlDeviceGetUtilizationRates)>(h, "nvmlDeviceGetUtilizationRates")(dev, &util);
  std::printf("utilization_rc=%d\nutilization_gpu=%u\nutilization_memory=%u\n", r, util.gpu, util.memory);

  nvmlMemory_t m{};
  r = load<decltype(&nvmlDeviceGetMemoryInfo)>(h, "nvmlDeviceGetMemoryInfo")(dev, &m);
  std::printf("mem_rc=%d\nmem_total=%llu\nmem_used=%llu\nmem_free=%llu\n", r, m.total, m.used, m.free);
  auto mem2_fn = load<decltype(&nvmlDeviceGetMemoryInfo_v2)>(h, "nvmlDeviceGetMemoryInfo_v2");
  nvmlMemory_v2_t m2{};
  m2.version = GPUSLICE_NVML_MEMORY_V2;
  r = mem2_fn(dev, &m2);
  std::printf("mem2_rc=%d\nmem2_total=%llu\nmem2_reserved=%llu\nmem2_used=%llu\nmem2_free=%llu\n", r,
              m2.total, m2.reserved, m2.used, m2.free);
  nvmlMemory_v2_t bad{};
  bad.version = 1;
  std::printf("mem2_bad_version_rc=%d\n", mem2_fn(dev, &bad));
  nvmlBAR1Memory_t bar1{};
  r = load<decltype(&nvmlDeviceGetBAR1MemoryInfo)>(h, "nvmlDeviceGetBAR1MemoryInfo")(dev, &bar1);
  std::printf("bar1_rc=%d\nbar1_total=%llu\nbar1_used=%llu\nbar1_free=%llu\n", r, bar1.bar1Total,
              bar1.bar1Used, bar1.bar1Free);
  auto name_fn = load<decltype(&nvmlSystemGetProcessName)>(h, "nvmlSystemGetProcessName");
  for (int i = 0; i < npids; ++i) {
    char name[64] = {};
    const auto pid = static_cast<unsigned>(std::strtoul(name_pids[i], nullptr, 10));
    r = name_fn(pid, name, sizeof name);
    std::printf("name_%u_rc=%d\nname_%u=%s\n", pid, r, pid, name);
  }
  export_table(h, dev, "export");
  export_table(RTLD_DEFAULT, dev, "export_global");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc >= 2 && std::strcmp(argv[1], "query") == 0) return query(argc - 2, argv + 2);
  if (argc >= 2 && std::strcmp(argv[1], "work") == 0) {
    unsigned long long bytes = 1ULL << 20;
    int seconds = 20;
    bool busy = false;
    for (int i = 2; i < argc; ++i) {
      if (std::strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
        bytes = std::strtoull(argv[++i], nullptr, 10);
      else if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
        seconds = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--busy") == 0)
        busy = true;
    }
    return work(bytes, seconds, busy);
  }
  std::fprintf(stderr, "usage: nvml_view_app work [--bytes N] [--seconds S] [--busy] | query\n");
  return 2;
}
