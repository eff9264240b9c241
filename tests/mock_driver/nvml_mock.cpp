// The simulated libnvidia-ml. It only reads the shared state file, so it reports every
// process's usage even in a process that never loaded the mock libcuda (nvidia-smi, the node
// daemon). Calls are serialised by one mutex: NVML is not a hot path.
#include <strings.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

#include "abi/nvml_abi.h"
#include "abi/nvml_export_table.h"
#include "mock_config.h"
#include "mock_log.h"
#include "mock_state.h"

struct nvmlDevice_st {
  unsigned index;
};

namespace gpuslice::mock {
namespace {

constexpr std::uint64_t kUtilizationWindowNs = 1'000'000'000;
constexpr unsigned kNotAvailable = 0xFFFFFFFFu;  // NVML_VALUE_NOT_AVAILABLE: no MIG instance
constexpr std::uint64_t kBar1BytesPerProcess = 2ULL << 20;

struct Nvml {
  std::mutex mutex;
  unsigned init_count = 0;
  MockConfig config;
  SharedState shared;
};

Nvml& nvml() {
  // Never destroyed (callers may run during exit), and not on the heap.
  alignas(Nvml) static unsigned char storage[sizeof(Nvml)];
  static Nvml* instance = new (storage) Nvml();
  return *instance;
}

nvmlDevice_st g_handles[kMaxDevices] = {{0}, {1}, {2},  {3},  {4},  {5},  {6},  {7},
                                        {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};

// Resolves a handle under the lock; NVML_SUCCESS with *index set, or the error to return.
nvmlReturn_t device_index(const Nvml& state, nvmlDevice_t device, unsigned* index) {
  if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  auto address = reinterpret_cast<std::uintptr_t>(device);
  auto first = reinterpret_cast<std::uintptr_t>(&g_handles[0]);
  if (device == nullptr || address < first || (address - first) % sizeof(nvmlDevice_st) != 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  unsigned position = static_cast<unsigned>((address - first) / sizeof(nvmlDevice_st));
  if (position >= state.shared.device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  *index = position;
  return NVML_SUCCESS;
}

nvmlReturn_t copy_string(const char* text, char* out, unsigned length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < std::strlen(text) + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::snprintf(out, length, "%s", text);
  return NVML_SUCCESS;
}

// One entry per pid (a process holding the mock twice, e.g. a benchmark's direct copy, has two
// slots).
unsigned usage_by_pid(const SharedState& shared, unsigned device, ProcessUsage* out) {
  ProcessUsage slots[kMaxProcesses];
  unsigned count = std::min(shared.processes_on(device, slots, kMaxProcesses), kMaxProcesses);
  unsigned merged = 0;
  for (unsigned i = 0; i < count; ++i) {
    unsigned j = 0;
    while (j < merged && out[j].pid != slots[i].pid) ++j;
    if (j == merged) {
      out[merged++] = slots[i];
    } else {
      out[j].used_bytes += slots[i].used_bytes;
      out[j].context_bytes += slots[i].context_bytes;
    }
  }
  return merged;
}

unsigned percent(std::uint64_t busy, std::uint64_t window) {
  if (window == 0) return 0;
  return static_cast<unsigned>(std::min<std::uint64_t>(100, (busy * 100 + window / 2) / window));
}

// The pid NVML shows for a process: its own, or shifted as if NVML saw host pids from a container.
unsigned reported_pid(const Nvml& state, std::int32_t pid) {
  return static_cast<unsigned>(pid) + static_cast<unsigned>(state.config.nvml_pid_offset);
}

// Every live process with a context on `device`, under NVML's size protocol: `*count` in is the
// caller's capacity; too small gives NVML_ERROR_INSUFFICIENT_SIZE with the number needed.
// `put(i, pid, used_bytes)` writes entry i in the caller's layout (pid as the caller sees it).
template <class Put>
nvmlReturn_t list_processes(nvmlDevice_t device, unsigned* count, bool has_buffer, Put put) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  unsigned index = 0;
  nvmlReturn_t status = device_index(state, device, &index);
  if (status != NVML_SUCCESS) return status;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  state.shared.reclaim_dead();
  ProcessUsage usage[kMaxProcesses];
  const unsigned n = usage_by_pid(state.shared, index, usage);
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (n > 0 && !has_buffer) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < n; ++i) put(i, reported_pid(state, usage[i].pid), usage[i].used_bytes);
  *count = n;
  return NVML_SUCCESS;
}

// The three running-process lists of every version: the simulated device shows each process with
// a context in all of them (a "C+G" process that is also an MPS client), so that tests can check
// every list. `Info` is one of the entry layouts; each starts with pid and usedGpuMemory.
template <class Info>
nvmlReturn_t running_processes(nvmlDevice_t device, unsigned* infoCount, Info* infos) {
  return list_processes(device, infoCount, infos != nullptr,
                        [infos](unsigned i, unsigned pid, std::uint64_t used) {
                          Info info{};
                          info.pid = pid;
                          info.usedGpuMemory = used;
                          if constexpr (sizeof(Info) > sizeof(nvmlProcessInfo_v1_t)) {
                            info.gpuInstanceId = kNotAvailable;
                            info.computeInstanceId = kNotAvailable;
                          }
                          infos[i] = info;
                        });
}

// nvidia-smi's internal process table (abi/nvml_export_table.h): slots 213-215 list the same
// processes as the lists above, in the entry layout nvidia-smi reads, named as
// nvmlSystemGetProcessName names them; every other slot does nothing and succeeds.
constexpr unsigned kExportSlots = 240;

nvmlReturn_t export_nothing(nvmlDevice_t, unsigned*, void*, void*) { return NVML_SUCCESS; }

void put_export_entry(unsigned char* entry, unsigned pid, std::uint64_t used) {
  namespace ex = gpuslice::nvml_export;
  std::memset(entry, 0, ex::kEntryStride);
  const std::uint32_t pid32 = pid;
  const std::uint32_t no_instance = kNotAvailable;
  const std::uint64_t protected_bytes = 0;
  std::memcpy(entry + ex::kPidOffset, &pid32, sizeof pid32);
  std::memcpy(entry + ex::kUsedMemoryOffset, &used, sizeof used);
  std::memcpy(entry + ex::kGpuInstanceOffset, &no_instance, sizeof no_instance);
  std::memcpy(entry + ex::kComputeInstanceOffset, &no_instance, sizeof no_instance);
  std::memcpy(entry + ex::kProtectedMemoryOffset, &protected_bytes, sizeof protected_bytes);
  std::snprintf(reinterpret_cast<char*>(entry + ex::kNameOffset), ex::kNameBytes, "process-%u", pid);
}

// `*count` in: the capacity of `entries` in entries; too small: NVML_ERROR_INSUFFICIENT_SIZE with the
// number needed, as the public lists answer (what the real driver does then is not known).
nvmlReturn_t export_process_list(nvmlDevice_t device, unsigned* count, void* entries, void*) {
  auto* out = static_cast<unsigned char*>(entries);
  return list_processes(device, count, out != nullptr, [out](unsigned i, unsigned pid, std::uint64_t used) {
    put_export_entry(out + static_cast<std::size_t>(i) * gpuslice::nvml_export::kEntryStride, pid, used);
  });
}

struct ExportTable {
  std::uint64_t words[kExportSlots + 1];
};

const ExportTable& process_export_table() {
  static const ExportTable table = [] {
    ExportTable t{};
    t.words[0] = sizeof t.words;
    for (unsigned slot = 1; slot <= kExportSlots; ++slot) {
      const bool list = slot >= gpuslice::nvml_export::kFirstProcessListSlot &&
                        slot <= gpuslice::nvml_export::kLastProcessListSlot;
      gpuslice::nvml_export::ProcessListFn fn = list ? &export_process_list : &export_nothing;
      t.words[slot] = reinterpret_cast<std::uintptr_t>(fn);
    }
    return t;
  }();
  return table;
}

nvmlReturn_t init() {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.init_count == 0) {
    if (!load_config(&state.config)) return NVML_ERROR_UNKNOWN;
    if (state.shared.attach(state.config, false) != SharedState::AttachError::None) {
      return NVML_ERROR_DRIVER_NOT_LOADED;
    }
  }
  ++state.init_count;
  return NVML_SUCCESS;
}

}  // namespace
}  // namespace gpuslice::mock

using namespace gpuslice::mock;

extern "C" {

nvmlReturn_t nvmlInit(void) { return init(); }
nvmlReturn_t nvmlInit_v2(void) { return init(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  (void)flags;  // NO_GPUS / NO_ATTACH change nothing for simulated devices
  return init();
}

nvmlReturn_t nvmlShutdown(void) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (--state.init_count == 0) state.shared.detach();
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    case NVML_ERROR_UNKNOWN:
      return "Unknown Error";
  }
  return "Unknown Error";
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  return copy_string(state.config.nvml_driver_version, version, length);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (deviceCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *deviceCount = state.shared.device_count();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= state.shared.device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_handles[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned index = 0; index < state.shared.device_count(); ++index) {
    if (strcasecmp(state.shared.uuid(index), uuid) == 0) {
      *device = &g_handles[index];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  unsigned position = 0;
  nvmlReturn_t status = device_index(state, device, &position);
  if (status != NVML_SUCCESS) return status;
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *index = position;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  unsigned index = 0;
  nvmlReturn_t status = device_index(state, device, &index);
  if (status != NVML_SUCCESS) return status;
  return copy_string(state.shared.uuid(index), uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  unsigned index = 0;
  nvmlReturn_t status = device_index(state, device, &index);
  if (status != NVML_SUCCESS) return status;
  return copy_string(kDeviceName, name, length);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  unsigned index = 0;
  nvmlReturn_t status = device_index(state, device, &index);
  if (status != NVML_SUCCESS) return status;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  state.shared.reclaim_dead();
  std::uint64_t total = state.shared.total_bytes(index);
  std::uint64_t used = std::min(total, state.shared.used_bytes(index));
  memory->total = total;
  memory->used = used;
  memory->free = total - used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  if (memory == nullptr || memory->version != GPUSLICE_NVML_MEMORY_V2) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlMemory_t plain{};
  nvmlReturn_t status = nvmlDeviceGetMemoryInfo(device, &plain);
  if (status != NVML_SUCCESS) return status;
  memory->total = plain.total;
  memory->reserved = 0;  // the simulated driver keeps nothing for itself
  memory->used = plain.used;
  memory->free = plain.free;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos) {
  return running_processes(device, infoCount, infos);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v2_t* infos) {
  return running_processes(device, infoCount, infos);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                  nvmlProcessInfo_v1_t* infos) {
  return running_processes(device, infoCount, infos);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_t* infos) {
  return running_processes(device, infoCount, infos);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_v2_t* infos) {
  return running_processes(device, infoCount, infos);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                   nvmlProcessInfo_v1_t* infos) {
  return running_processes(device, infoCount, infos);
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                        nvmlProcessInfo_t* infos) {
  return running_processes(device, infoCount, infos);
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                        nvmlProcessInfo_v2_t* infos) {
  return running_processes(device, infoCount, infos);
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v1_t* infos) {
  return running_processes(device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device, nvmlProcessDetailList_t* plist) {
  if (plist == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (plist->version != GPUSLICE_NVML_PROCESS_DETAIL_LIST_V1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (plist->mode > NVML_PROCESS_MODE_MPS) return NVML_ERROR_INVALID_ARGUMENT;
  return running_processes(device, &plist->numProcArrayEntries, plist->procArray);
}

nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t* bar1Memory) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  unsigned index = 0;
  nvmlReturn_t status = device_index(state, device, &index);
  if (status != NVML_SUCCESS) return status;
  if (bar1Memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  state.shared.reclaim_dead();
  ProcessUsage usage[kMaxProcesses];
  unsigned count = usage_by_pid(state.shared, index, usage);
  // A resizable BAR as on data-centre cards: the window spans the whole memory; each process with
  // a context keeps a few mappings in it.
  std::uint64_t total = state.shared.total_bytes(index);
  std::uint64_t used = std::min<std::uint64_t>(total, std::uint64_t{count} * kBar1BytesPerProcess);
  *bar1Memory = nvmlBAR1Memory_t{total, total - used, used};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  unsigned index = 0;
  nvmlReturn_t status = device_index(state, device, &index);
  if (status != NVML_SUCCESS) return status;
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::uint64_t now = state.shared.now_ns();
  std::uint64_t from = now > kUtilizationWindowNs ? now - kUtilizationWindowNs : 0;
  utilization->gpu = percent(state.shared.device_busy(index, from, now), now - from);
  utilization->memory = 0;  // memory traffic is not simulated
  return NVML_SUCCESS;
}

// The simulated video engines follow the SMs: a process busy x % of the last second keeps the
// encoder and the decoder x % busy too (per process in the samples, and for the card here).
static nvmlReturn_t video_utilization(nvmlDevice_t device, unsigned* utilization,
                                      unsigned* samplingPeriodUs) {
  if (utilization == nullptr || samplingPeriodUs == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlUtilization_t rates{};
  nvmlReturn_t status = nvmlDeviceGetUtilizationRates(device, &rates);
  if (status != NVML_SUCCESS) return status;
  *utilization = rates.gpu;
  *samplingPeriodUs = static_cast<unsigned>(kUtilizationWindowNs / 1000);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int* utilization,
                                             unsigned int* samplingPeriodUs) {
  return video_utilization(device, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int* utilization,
                                             unsigned int* samplingPeriodUs) {
  return video_utilization(device, utilization, samplingPeriodUs);
}

// One GPU-utilisation sample per call: the card's busy share over the last second, stamped now.
// The other kinds are not simulated.
nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                  unsigned long long lastSeenTimeStamp, nvmlValueType_t* sampleValType,
                                  unsigned int* sampleCount, nvmlSample_t* samples) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  unsigned index = 0;
  nvmlReturn_t status = device_index(state, device, &index);
  if (status != NVML_SUCCESS) return status;
  if (sampleValType == nullptr || sampleCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (type != NVML_GPU_UTILIZATION_SAMPLES) return NVML_ERROR_NOT_SUPPORTED;
  std::uint64_t stamp = state.shared.timestamp_us();
  if (stamp <= lastSeenTimeStamp) return NVML_ERROR_NOT_FOUND;
  *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
  if (samples == nullptr || *sampleCount < 1) {
    *sampleCount = 1;
    return samples == nullptr ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::uint64_t now = state.shared.now_ns();
  std::uint64_t from = now > kUtilizationWindowNs ? now - kUtilizationWindowNs : 0;
  samples[0].timeStamp = stamp;
  samples[0].sampleValue.uiVal = percent(state.shared.device_busy(index, from, now), now - from);
  *sampleCount = 1;
  return NVML_SUCCESS;
}

// Only the process table nvidia-smi uses (its id in abi/nvml_export_table.h); it does not need
// nvmlInit, its list slots do.
nvmlReturn_t nvmlInternalGetExportTable(const void** ppExportTable, const void* pExportTableId) {
  if (ppExportTable == nullptr || pExportTableId == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::memcmp(pExportTableId, gpuslice::nvml_export::kProcessTableId,
                  sizeof gpuslice::nvml_export::kProcessTableId) != 0) {
    *ppExportTable = nullptr;
    return NVML_ERROR_NOT_SUPPORTED;
  }
  *ppExportTable = process_export_table().words;
  return NVML_SUCCESS;
}

// Every pid has a name here (the real library reads /proc, which the simulated host pids may not be in).
nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length) {
  if (pid == 0 || name == nullptr || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::snprintf(name, length, "process-%u", pid);
  return NVML_SUCCESS;
}

// Accounting as if enabled: every live process with a context on the device.
nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int* count, unsigned int* pids) {
  return list_processes(device, count, pids != nullptr,
                        [pids](unsigned i, unsigned pid, std::uint64_t) { pids[i] = pid; });
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
  Nvml& state = nvml();
  std::lock_guard<std::mutex> lock(state.mutex);
  unsigned index = 0;
  nvmlReturn_t status = device_index(state, device, &index);
  if (status != NVML_SUCCESS) return status;
  if (processSamplesCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  // One sample per process, taken now over the last window; a caller that has already seen
  // "now" gets nothing new.
  std::uint64_t stamp = state.shared.timestamp_us();
  if (stamp <= lastSeenTimeStamp) return NVML_ERROR_NOT_FOUND;
  std::uint64_t now = state.shared.now_ns();
  std::uint64_t from = now > kUtilizationWindowNs ? now - kUtilizationWindowNs : 0;
  ProcessUsage slots[kMaxProcesses];
  unsigned slot_count = std::min(state.shared.processes_on(index, slots, kMaxProcesses), kMaxProcesses);
  nvmlProcessUtilizationSample_t samples[kMaxProcesses];
  unsigned count = 0;
  for (unsigned i = 0; i < slot_count; ++i) {
    std::uint64_t busy = state.shared.process_busy(slots[i].slot, index, from, now);
    if (busy == 0) continue;  // NVML lists only processes that used the SMs lately
    unsigned j = 0;
    unsigned pid = reported_pid(state, slots[i].pid);
    while (j < count && samples[j].pid != pid) ++j;
    if (j == count) samples[count++] = nvmlProcessUtilizationSample_t{pid, stamp, 0, 0, 0, 0};
    samples[j].smUtil = std::min(100u, samples[j].smUtil + percent(busy, now - from));
    samples[j].encUtil = samples[j].smUtil;  // the video engines follow the SMs
    samples[j].decUtil = samples[j].smUtil;
  }
  if (count == 0) return NVML_ERROR_NOT_FOUND;
  if (utilization == nullptr || *processSamplesCount < count) {
    *processSamplesCount = count;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(samples, samples + count, utilization);
  *processSamplesCount = count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                   nvmlProcessesUtilizationInfo_t* info) {
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (info->version != GPUSLICE_NVML_PROCESSES_UTILIZATION_INFO_V1)
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  nvmlProcessUtilizationSample_t samples[kMaxProcesses];
  unsigned count = kMaxProcesses;
  nvmlReturn_t status = nvmlDeviceGetProcessUtilization(device, samples, &count, info->lastSeenTimeStamp);
  if (status != NVML_SUCCESS) return status;
  if (info->procUtilArray == nullptr || info->processSamplesCount < count) {
    info->processSamplesCount = count;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < count; ++i) {
    info->procUtilArray[i] = nvmlProcessUtilizationInfo_v1_t{samples[i].timeStamp,
                                                             samples[i].pid,
                                                             samples[i].smUtil,
                                                             samples[i].memUtil,
                                                             samples[i].encUtil,
                                                             samples[i].decUtil,
                                                             0,
                                                             0};
  }
  info->processSamplesCount = count;
  return NVML_SUCCESS;
}

}  // extern "C"
