// Memory shared between processes in the simulated libcuda: CUDA IPC handles of linear
// allocations and POSIX file-descriptor handles of VMM allocations.
//
// As on a GPU, the memory stays charged to the process that allocated it: opening or importing it
// elsewhere charges nothing there. An IPC handle carries the exporter's pid, device, size and
// address; opening it maps fresh memory of that size (contents are not shared across processes in
// the mock, only the accounting is simulated). A VMM handle is exported as a dup of its memfd, so an
// imported handle maps the same bytes.
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cuda_internal.h"

namespace gpuslice::mock {
namespace {

constexpr std::uint64_t kIpcMagic = 0x6370696b636f6dULL;  // "mockipc"

struct IpcHandleData {
  std::uint64_t magic;
  std::int32_t pid;
  std::uint32_t device;
  std::uint64_t bytes;
  std::uint64_t address;
};
static_assert(sizeof(IpcHandleData) <= sizeof(CUipcMemHandle));

bool process_alive(std::int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// GPUSLICE_MOCK_IPC_COUNTS_IMPORTER=1: what a process opens is also charged to it (its NVML
// per-process figure and the device's use), as a driver that counted imports would show it.
// Imports charged to this process that way, with their device (under Driver::mutex).
std::map<std::uintptr_t, unsigned>& counted_imports() {
  static std::map<std::uintptr_t, unsigned> counted;
  return counted;
}

bool importer_counts() {
  const char* value = std::getenv("GPUSLICE_MOCK_IPC_COUNTS_IMPORTER");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

}  // namespace
}  // namespace gpuslice::mock

using namespace gpuslice::mock;

extern "C" {

CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto found = state.allocations.find(static_cast<std::uintptr_t>(dptr));
  // Only the base of a cuMemAlloc allocation can be exported (stream-ordered ones need a pool).
  if (found == state.allocations.end() || found->second.pool != nullptr) return CUDA_ERROR_INVALID_VALUE;
  IpcHandleData data{kIpcMagic, static_cast<std::int32_t>(getpid()), found->second.device,
                     found->second.bytes, static_cast<std::uint64_t>(dptr)};
  std::memset(pHandle, 0, sizeof *pHandle);
  std::memcpy(pHandle->reserved, &data, sizeof data);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (pdptr == nullptr || (Flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  IpcHandleData data{};
  std::memcpy(&data, handle.reserved, sizeof data);
  if (data.magic != kIpcMagic || data.bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  // The driver refuses a handle of the calling process itself, and one whose exporter is gone.
  if (data.pid == static_cast<std::int32_t>(getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  if (!process_alive(data.pid)) return CUDA_ERROR_INVALID_HANDLE;
  void* memory =
      mmap(nullptr, data.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.ipc_imports.emplace(reinterpret_cast<std::uintptr_t>(memory), data.bytes);
  if (importer_counts() && state.shared.charge(data.device, data.bytes, false))
    counted_imports()[reinterpret_cast<std::uintptr_t>(memory)] = data.device;
  *pdptr = reinterpret_cast<CUdeviceptr>(memory);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto found = state.ipc_imports.find(static_cast<std::uintptr_t>(dptr));
  if (found == state.ipc_imports.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(found->first), found->second);
  auto counted = counted_imports().find(found->first);
  if (counted != counted_imports().end()) {
    state.shared.uncharge(counted->second, found->second, false);
    counted_imports().erase(counted);
  }
  state.ipc_imports.erase(found);
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType, unsigned long long flags) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (shareableHandle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto found = state.physical.find(handle);
  if (found == state.physical.end() || found->second.released) return CUDA_ERROR_INVALID_HANDLE;
  if (found->second.fd < 0) return CUDA_ERROR_NOT_SUPPORTED;
  if (found->second.host) return CUDA_ERROR_INVALID_VALUE;  // host allocations are not IPC capable
  int fd = dup(found->second.fd);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                        CUmemAllocationHandleType shHandleType) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  // The file descriptor travels in the pointer, as with the real driver.
  const int given = static_cast<int>(reinterpret_cast<std::intptr_t>(osHandle));
  struct stat st {};
  if (given < 0 || fstat(given, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
      static_cast<std::size_t>(st.st_size) % kVmmGranularity != 0)
    return CUDA_ERROR_INVALID_VALUE;
  int fd = dup(given);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  CUmemGenericAllocationHandle created = state.next_physical_handle++;
  PhysicalAllocation imported{fd, static_cast<std::size_t>(st.st_size), context->device, false, 0, false};
  imported.imported = true;
  state.physical.emplace(created, imported);
  *handle = created;
  return CUDA_SUCCESS;
}

}  // extern "C"
