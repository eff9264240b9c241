// NVML hooks: the running-process lists (compute, graphics, MPS; every version, and the detail list
// that newer nvidia-smi reads) show only the container's own processes on a device of its slice.
// The caller's size protocol applies to the filtered list: too small a buffer gets
// NVML_ERROR_INSUFFICIENT_SIZE with the number of the container's entries, never the card's.
#include "interposer/hook_prologue.h"
#include "interposer/nvml_slice.h"

namespace gs = gpuslice::interposer;

namespace {

// The whole list from the real library in entries of the caller's own layout, then the filter.
template <class Info, class Real>
nvmlReturn_t own_processes(Real real, nvmlDevice_t device, unsigned* infoCount, Info* infos) {
  if (gs::nvml_slice_record(device) < 0) return real(device, infoCount, infos);
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  gs::NvmlList<Info> all;
  nvmlReturn_t r = all.fill([&](Info* buffer, unsigned* count) { return real(device, count, buffer); });
  if (r != NVML_SUCCESS) return r;
  gs::OwnPids own;
  own.collect();
  return gs::hand_out_own(all, own, infoCount, infos, [](const Info& e) { return e; });
}

}  // namespace

GS_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                            nvmlProcessInfo_v1_t* infos) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetComputeRunningProcesses);
  return own_processes(real, device, infoCount, infos);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                               nvmlProcessInfo_v2_t* infos) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetComputeRunningProcesses_v2);
  return own_processes(real, device, infoCount, infos);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                               nvmlProcessInfo_t* infos) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetComputeRunningProcesses_v3);
  return own_processes(real, device, infoCount, infos);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                             nvmlProcessInfo_v1_t* infos) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetGraphicsRunningProcesses);
  return own_processes(real, device, infoCount, infos);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                                nvmlProcessInfo_v2_t* infos) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetGraphicsRunningProcesses_v2);
  return own_processes(real, device, infoCount, infos);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                                nvmlProcessInfo_t* infos) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetGraphicsRunningProcesses_v3);
  return own_processes(real, device, infoCount, infos);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                               nvmlProcessInfo_v1_t* infos) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetMPSComputeRunningProcesses);
  return own_processes(real, device, infoCount, infos);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                  unsigned int* infoCount,
                                                                  nvmlProcessInfo_v2_t* infos) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetMPSComputeRunningProcesses_v2);
  return own_processes(real, device, infoCount, infos);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                  unsigned int* infoCount,
                                                                  nvmlProcessInfo_t* infos) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetMPSComputeRunningProcesses_v3);
  return own_processes(real, device, infoCount, infos);
}

// The detail list carries its version, mode and array in one struct: the real library is asked
// with a copy pointing at our buffer, so it still checks the version and mode itself.
GS_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                             nvmlProcessDetailList_t* plist) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetRunningProcessDetailList);
  if (plist == nullptr || gs::nvml_slice_record(device) < 0) return real(device, plist);
  gs::NvmlList<nvmlProcessDetail_v1_t> all;
  nvmlReturn_t r = all.fill([&](nvmlProcessDetail_v1_t* buffer, unsigned* count) {
    nvmlProcessDetailList_t ask = *plist;
    ask.numProcArrayEntries = *count;
    ask.procArray = buffer;
    nvmlReturn_t answer = real(device, &ask);
    *count = ask.numProcArrayEntries;
    return answer;
  });
  if (r != NVML_SUCCESS) return r;
  gs::OwnPids own;
  own.collect();
  return gs::hand_out_own(all, own, &plist->numProcArrayEntries, plist->procArray,
                          [](const nvmlProcessDetail_v1_t& e) { return e; });
}

// Accounting (when the administrator enabled it) keeps the pids of processes that ran: the
// container's only, like the lists above. Stats of another tenant's pid are found through that pid,
// which the list no longer reveals.
GS_EXPORT nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int* count,
                                                   unsigned int* pids) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetAccountingPids);
  if (count == nullptr || gs::nvml_slice_record(device) < 0) return real(device, count, pids);
  gs::NvmlList<unsigned> all;
  nvmlReturn_t r = all.fill([&](unsigned* buffer, unsigned* n) { return real(device, n, buffer); });
  if (r != NVML_SUCCESS) return r;
  gs::OwnPids own;
  own.collect();
  unsigned kept = 0;
  for (unsigned pid : all)
    if (own.contains(pid)) ++kept;
  if (*count < kept) {
    *count = kept;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (kept > 0 && pids == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned i = 0;
  for (unsigned pid : all)
    if (i < kept && own.contains(pid)) pids[i++] = pid;
  *count = i;
  return NVML_SUCCESS;
}

// nvidia-smi (535 and later) reads its process table through NVML's internal export table, which
// no hook sees, and then asks each pid's name here: inside a slice another tenant's pid has no
// name, as it has no place in the lists above.
GS_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length) {
  GS_NVML_HOOK_PROLOGUE(nvmlSystemGetProcessName);
  if (!gs::nvml_slice_active()) return real(pid, name, length);
  gs::OwnPids own;
  own.collect();
  if (!own.contains(pid)) return NVML_ERROR_NOT_FOUND;
  return real(pid, name, length);
}
