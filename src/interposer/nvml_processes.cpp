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
  return gs::hand_out_own_list<Info>(
      [&](Info* buffer, unsigned* count) { return real(device, count, buffer); }, infoCount, infos);
}

}  // namespace

// One hook per list and version, each the same filter over its own entry layout. (Info is a type,
// which cannot be parenthesised.)
// NOLINTBEGIN(bugprone-macro-parentheses)
#define GS_OWN_PROCESS_LIST_HOOK(name, Info)                                               \
  GS_EXPORT nvmlReturn_t name(nvmlDevice_t device, unsigned int* infoCount, Info* infos) { \
    GS_NVML_HOOK_PROLOGUE(name);                                                           \
    return own_processes(real, device, infoCount, infos);                                  \
  }
// NOLINTEND(bugprone-macro-parentheses)

GS_OWN_PROCESS_LIST_HOOK(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
GS_OWN_PROCESS_LIST_HOOK(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
GS_OWN_PROCESS_LIST_HOOK(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
GS_OWN_PROCESS_LIST_HOOK(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
GS_OWN_PROCESS_LIST_HOOK(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t)
GS_OWN_PROCESS_LIST_HOOK(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
GS_OWN_PROCESS_LIST_HOOK(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
GS_OWN_PROCESS_LIST_HOOK(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
GS_OWN_PROCESS_LIST_HOOK(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)

#undef GS_OWN_PROCESS_LIST_HOOK

// The detail list carries its version, mode and array in one struct (hand_out_own_struct_list).
GS_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                             nvmlProcessDetailList_t* plist) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetRunningProcessDetailList);
  if (plist == nullptr || gs::nvml_slice_record(device) < 0) return real(device, plist);
  return gs::hand_out_own_struct_list(real, device, plist, &nvmlProcessDetailList_t::numProcArrayEntries,
                                      &nvmlProcessDetailList_t::procArray, &plist->numProcArrayEntries);
}

// Accounting (when the administrator enabled it) keeps the pids of processes that ran: the
// container's only, like the lists above. Stats of another tenant's pid are found through that pid,
// which the list no longer reveals.
GS_EXPORT nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int* count,
                                                   unsigned int* pids) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetAccountingPids);
  if (count == nullptr || gs::nvml_slice_record(device) < 0) return real(device, count, pids);
  return gs::hand_out_own_list<unsigned>(
      [&](unsigned* buffer, unsigned* n) { return real(device, n, buffer); }, count, pids);
}

// A pid's name: inside a slice another tenant's pid has none, as it has no place in the lists
// above. (nvidia-smi 580 takes its names from its own process table: nvml_internal_table.cpp.)
GS_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length) {
  GS_NVML_HOOK_PROLOGUE(nvmlSystemGetProcessName);
  if (!gs::nvml_slice_active()) return real(pid, name, length);
  gs::OwnPids own;
  own.collect();
  if (!own.contains(pid)) return NVML_ERROR_NOT_FOUND;
  return real(pid, name, length);
}
