// cuGetProcAddress of the simulated libcuda, error strings and the export-table probe.
//
// Like the real driver, it maps a base name and the caller's cudaVersion to the newest ABI
// version of the function that existed in that CUDA version, and returns the address of that
// EXPORTED symbol. The library is linked with -Bsymbolic-functions, so `&cuMemAlloc_v2` below is
// this library's own definition (what dlsym on its handle returns), never an interposer's.
#include <cstring>

#include "cuda_internal.h"
#include "legacy_abi.h"

namespace gpuslice::mock {
namespace {

struct ProcVersion {
  void* function = nullptr;
  int since = 0;               // CUDA version (1000 * major + 10 * minor) that introduced it
  void* per_thread = nullptr;  // _ptsz / _ptds variant for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
};

struct ProcEntry {
  const char* name;
  ProcVersion versions[4];  // oldest first
};

template <class Fn>
void* address(Fn* function) {
  return reinterpret_cast<void*>(function);
}

// Per-thread default stream variants exist from CUDA 7.0 on.
constexpr int kPerThreadStreamSince = 7000;

const ProcEntry* find_entry(const char* name) {
  static const ProcEntry kTable[] = {
      {"cuInit", {{address(&cuInit), 2000}}},
      {"cuDriverGetVersion", {{address(&cuDriverGetVersion), 2020}}},
      {"cuGetProcAddress", {{address(&cuGetProcAddress), 11030}, {address(&cuGetProcAddress_v2), 12000}}},
      {"cuGetErrorString", {{address(&cuGetErrorString), 6000}}},
      {"cuGetExportTable", {{address(&cuGetExportTable), 3000}}},
      {"cuDeviceGet", {{address(&cuDeviceGet), 2000}}},
      {"cuDeviceGetCount", {{address(&cuDeviceGetCount), 2000}}},
      {"cuDeviceGetName", {{address(&cuDeviceGetName), 2000}}},
      {"cuDeviceGetUuid", {{address(&cuDeviceGetUuid), 9020}, {address(&cuDeviceGetUuid_v2), 11040}}},
      {"cuDeviceTotalMem", {{address(&cuDeviceTotalMem), 2000}, {address(&cuDeviceTotalMem_v2), 3020}}},
      {"cuDevicePrimaryCtxRetain", {{address(&cuDevicePrimaryCtxRetain), 7000}}},
      {"cuDevicePrimaryCtxRelease",
       {{address(&cuDevicePrimaryCtxRelease), 7000}, {address(&cuDevicePrimaryCtxRelease_v2), 11000}}},
      {"cuCtxCreate",
       {{address(&cuCtxCreate), 2000},
        {address(&cuCtxCreate_v2), 3020},
        {address(&cuCtxCreate_v3), 11040},
        {address(&cuCtxCreate_v4), 12050}}},
      {"cuGreenCtxCreate", {{address(&cuGreenCtxCreate), 12040}}},
      {"cuGreenCtxDestroy", {{address(&cuGreenCtxDestroy), 12040}}},
      {"cuCtxDestroy", {{address(&cuCtxDestroy), 2000}, {address(&cuCtxDestroy_v2), 4000}}},
      {"cuCtxSetCurrent", {{address(&cuCtxSetCurrent), 4000}}},
      {"cuCtxGetCurrent", {{address(&cuCtxGetCurrent), 4000}}},
      {"cuCtxGetDevice", {{address(&cuCtxGetDevice), 2000}}},
      {"cuCtxGetId", {{address(&cuCtxGetId), 12000}}},
      {"cuCtxSynchronize", {{address(&cuCtxSynchronize), 2000}, {address(&cuCtxSynchronize_v2), 13000}}},
      {"cuMemGetInfo", {{address(&cuMemGetInfo), 2000}, {address(&cuMemGetInfo_v2), 3020}}},
      {"cuMemAlloc", {{address(&cuMemAlloc), 2000}, {address(&cuMemAlloc_v2), 3020}}},
      {"cuMemAllocPitch", {{address(&cuMemAllocPitch), 2000}, {address(&cuMemAllocPitch_v2), 3020}}},
      {"cuMemAllocManaged", {{address(&cuMemAllocManaged), 6000}}},
      {"cuMemFree", {{address(&cuMemFree), 2000}, {address(&cuMemFree_v2), 3020}}},
      {"cuMemAllocAsync", {{address(&cuMemAllocAsync), 11020, address(&cuMemAllocAsync_ptsz)}}},
      {"cuMemAllocFromPoolAsync",
       {{address(&cuMemAllocFromPoolAsync), 11020, address(&cuMemAllocFromPoolAsync_ptsz)}}},
      {"cuMemFreeAsync", {{address(&cuMemFreeAsync), 11020, address(&cuMemFreeAsync_ptsz)}}},
      {"cuMemPoolTrimTo", {{address(&cuMemPoolTrimTo), 11020}}},
      {"cuMemPoolCreate", {{address(&cuMemPoolCreate), 11020}}},
      {"cuMemPoolDestroy", {{address(&cuMemPoolDestroy), 11020}}},
      {"cuDeviceGetDefaultMemPool", {{address(&cuDeviceGetDefaultMemPool), 11020}}},
      {"cuMemCreate", {{address(&cuMemCreate), 10020}}},
      {"cuMemRelease", {{address(&cuMemRelease), 10020}}},
      {"cuMemExportToShareableHandle", {{address(&cuMemExportToShareableHandle), 10020}}},
      {"cuMemImportFromShareableHandle", {{address(&cuMemImportFromShareableHandle), 10020}}},
      {"cuIpcGetMemHandle", {{address(&cuIpcGetMemHandle), 4010}}},
      {"cuIpcOpenMemHandle",
       {{address(&cuIpcOpenMemHandle), 4010}, {address(&cuIpcOpenMemHandle_v2), 11000}}},
      {"cuIpcCloseMemHandle", {{address(&cuIpcCloseMemHandle), 4010}}},
      {"cuMemAddressReserve", {{address(&cuMemAddressReserve), 10020}}},
      {"cuMemAddressFree", {{address(&cuMemAddressFree), 10020}}},
      {"cuMemGetAllocationGranularity", {{address(&cuMemGetAllocationGranularity), 10020}}},
      {"cuMemMap", {{address(&cuMemMap), 10020}}},
      {"cuMemUnmap", {{address(&cuMemUnmap), 10020}}},
      {"cuMemSetAccess", {{address(&cuMemSetAccess), 10020}}},
      {"cuArrayCreate", {{address(&cuArrayCreate), 2000}, {address(&cuArrayCreate_v2), 3020}}},
      {"cuArray3DCreate", {{address(&cuArray3DCreate), 2000}, {address(&cuArray3DCreate_v2), 3020}}},
      {"cuArrayDestroy", {{address(&cuArrayDestroy), 2000}}},
      {"cuMipmappedArrayCreate", {{address(&cuMipmappedArrayCreate), 5000}}},
      {"cuMipmappedArrayDestroy", {{address(&cuMipmappedArrayDestroy), 5000}}},
      {"cuMemcpyHtoD",
       {{address(&cuMemcpyHtoD), 2000}, {address(&cuMemcpyHtoD_v2), 3020, address(&cuMemcpyHtoD_v2_ptds)}}},
      {"cuMemcpyDtoH",
       {{address(&cuMemcpyDtoH), 2000}, {address(&cuMemcpyDtoH_v2), 3020, address(&cuMemcpyDtoH_v2_ptds)}}},
      {"cuMemcpyDtoD",
       {{address(&cuMemcpyDtoD), 2000}, {address(&cuMemcpyDtoD_v2), 3020, address(&cuMemcpyDtoD_v2_ptds)}}},
      {"cuMemcpyHtoDAsync",
       {{address(&cuMemcpyHtoDAsync), 2000},
        {address(&cuMemcpyHtoDAsync_v2), 3020, address(&cuMemcpyHtoDAsync_v2_ptsz)}}},
      {"cuMemcpyDtoHAsync",
       {{address(&cuMemcpyDtoHAsync), 2000},
        {address(&cuMemcpyDtoHAsync_v2), 3020, address(&cuMemcpyDtoHAsync_v2_ptsz)}}},
      {"cuMemcpy", {{address(&cuMemcpy), 4000, address(&cuMemcpy_ptds)}}},
      {"cuMemcpyAsync", {{address(&cuMemcpyAsync), 4000, address(&cuMemcpyAsync_ptsz)}}},
      {"cuMemsetD8", {{address(&cuMemsetD8_v2), 3020, address(&cuMemsetD8_v2_ptds)}}},
      {"cuMemsetD16", {{address(&cuMemsetD16_v2), 3020, address(&cuMemsetD16_v2_ptds)}}},
      {"cuMemsetD32", {{address(&cuMemsetD32_v2), 3020, address(&cuMemsetD32_v2_ptds)}}},
      {"cuMemsetD2D8", {{address(&cuMemsetD2D8_v2), 3020, address(&cuMemsetD2D8_v2_ptds)}}},
      {"cuMemsetD2D16", {{address(&cuMemsetD2D16_v2), 3020, address(&cuMemsetD2D16_v2_ptds)}}},
      {"cuMemsetD2D32", {{address(&cuMemsetD2D32_v2), 3020, address(&cuMemsetD2D32_v2_ptds)}}},
      {"cuMemsetD8Async", {{address(&cuMemsetD8Async), 3020, address(&cuMemsetD8Async_ptsz)}}},
      {"cuMemsetD16Async", {{address(&cuMemsetD16Async), 3020, address(&cuMemsetD16Async_ptsz)}}},
      {"cuMemsetD32Async", {{address(&cuMemsetD32Async), 3020, address(&cuMemsetD32Async_ptsz)}}},
      {"cuMemsetD2D8Async", {{address(&cuMemsetD2D8Async), 3020, address(&cuMemsetD2D8Async_ptsz)}}},
      {"cuMemsetD2D16Async", {{address(&cuMemsetD2D16Async), 3020, address(&cuMemsetD2D16Async_ptsz)}}},
      {"cuMemsetD2D32Async", {{address(&cuMemsetD2D32Async), 3020, address(&cuMemsetD2D32Async_ptsz)}}},
      {"cuMemcpy2D", {{address(&cuMemcpy2D_v2), 3020, address(&cuMemcpy2D_v2_ptds)}}},
      {"cuMemcpy2DUnaligned",
       {{address(&cuMemcpy2DUnaligned_v2), 3020, address(&cuMemcpy2DUnaligned_v2_ptds)}}},
      {"cuMemcpy3D", {{address(&cuMemcpy3D_v2), 3020, address(&cuMemcpy3D_v2_ptds)}}},
      {"cuMemcpy2DAsync", {{address(&cuMemcpy2DAsync_v2), 3020, address(&cuMemcpy2DAsync_v2_ptsz)}}},
      {"cuMemcpy3DAsync", {{address(&cuMemcpy3DAsync_v2), 3020, address(&cuMemcpy3DAsync_v2_ptsz)}}},
      {"cuMemcpyPeer", {{address(&cuMemcpyPeer), 4000, address(&cuMemcpyPeer_ptds)}}},
      {"cuMemcpyPeerAsync", {{address(&cuMemcpyPeerAsync), 4000, address(&cuMemcpyPeerAsync_ptsz)}}},
      {"cuMemcpy3DPeer", {{address(&cuMemcpy3DPeer), 4000, address(&cuMemcpy3DPeer_ptds)}}},
      {"cuMemcpy3DPeerAsync", {{address(&cuMemcpy3DPeerAsync), 4000, address(&cuMemcpy3DPeerAsync_ptsz)}}},
      {"cuMemcpyBatchAsync",
       {{address(&cuMemcpyBatchAsync), 12080, address(&cuMemcpyBatchAsync_ptsz)},
        {address(&cuMemcpyBatchAsync_v2), 13000, address(&cuMemcpyBatchAsync_v2_ptsz)}}},
      {"cuMemcpy3DBatchAsync",
       {{address(&cuMemcpy3DBatchAsync), 12080, address(&cuMemcpy3DBatchAsync_ptsz)},
        {address(&cuMemcpy3DBatchAsync_v2), 13000, address(&cuMemcpy3DBatchAsync_v2_ptsz)}}},
      {"cuStreamWriteValue32",
       {{address(&cuStreamWriteValue32), 8000, address(&cuStreamWriteValue32_ptsz)},
        {address(&cuStreamWriteValue32_v2), 11070, address(&cuStreamWriteValue32_v2_ptsz)}}},
      {"cuStreamWriteValue64",
       {{address(&cuStreamWriteValue64), 9000, address(&cuStreamWriteValue64_ptsz)},
        {address(&cuStreamWriteValue64_v2), 11070, address(&cuStreamWriteValue64_v2_ptsz)}}},
      {"cuStreamBatchMemOp",
       {{address(&cuStreamBatchMemOp), 8000, address(&cuStreamBatchMemOp_ptsz)},
        {address(&cuStreamBatchMemOp_v2), 11070, address(&cuStreamBatchMemOp_v2_ptsz)}}},
      {"cuModuleLoadData", {{address(&cuModuleLoadData), 2000}}},
      {"cuModuleLoad", {{address(&cuModuleLoad), 2000}}},
      {"cuModuleLoadDataEx", {{address(&cuModuleLoadDataEx), 2010}}},
      {"cuModuleLoadFatBinary", {{address(&cuModuleLoadFatBinary), 2000}}},
      {"cuLibraryLoadData", {{address(&cuLibraryLoadData), 12000}}},
      {"cuLibraryLoadFromFile", {{address(&cuLibraryLoadFromFile), 12000}}},
      {"cuLibraryUnload", {{address(&cuLibraryUnload), 12000}}},
      {"cuModuleGetFunction", {{address(&cuModuleGetFunction), 2000}}},
      {"cuModuleUnload", {{address(&cuModuleUnload), 2000}}},
      {"cuLaunchKernel", {{address(&cuLaunchKernel), 4000, address(&cuLaunchKernel_ptsz)}}},
      {"cuLaunchKernelEx", {{address(&cuLaunchKernelEx), 11060, address(&cuLaunchKernelEx_ptsz)}}},
      {"cuLaunchCooperativeKernel",
       {{address(&cuLaunchCooperativeKernel), 9000, address(&cuLaunchCooperativeKernel_ptsz)}}},
      {"cuGraphLaunch", {{address(&cuGraphLaunch), 10000, address(&cuGraphLaunch_ptsz)}}},
      {"cuGraphCreate", {{address(&cuGraphCreate), 10000}}},
      {"cuGraphDestroy", {{address(&cuGraphDestroy), 10000}}},
      {"cuGraphAddMemAllocNode", {{address(&cuGraphAddMemAllocNode), 11040}}},
      {"cuGraphInstantiateWithFlags", {{address(&cuGraphInstantiateWithFlags), 11040}}},
      {"cuGraphInstantiate", {{address(&cuGraphInstantiateWithFlags), 12000}}},
      {"cuGraphInstantiateWithParams",
       {{address(&cuGraphInstantiateWithParams), 12000, address(&cuGraphInstantiateWithParams_ptsz)}}},
      {"cuGraphUpload", {{address(&cuGraphUpload), 11010, address(&cuGraphUpload_ptsz)}}},
      {"cuGraphExecDestroy", {{address(&cuGraphExecDestroy), 10000}}},
      {"cuDeviceGetGraphMemAttribute", {{address(&cuDeviceGetGraphMemAttribute), 11040}}},
      {"cuDeviceGraphMemTrim", {{address(&cuDeviceGraphMemTrim), 11040}}},
      {"cuDeviceGetAttribute", {{address(&cuDeviceGetAttribute), 2000}}},
      {"cuCtxSetLimit", {{address(&cuCtxSetLimit), 3010}}},
      {"cuCtxGetLimit", {{address(&cuCtxGetLimit), 3010}}},
      {"cuFuncGetAttribute", {{address(&cuFuncGetAttribute), 2020}}},
      {"cuFuncLoad", {{address(&cuFuncLoad), 12040}}},
      {"cuStreamCreate", {{address(&cuStreamCreate), 2000}}},
      {"cuStreamDestroy", {{address(&cuStreamDestroy), 2000}, {address(&cuStreamDestroy_v2), 4000}}},
      {"cuStreamSynchronize", {{address(&cuStreamSynchronize), 2000, address(&cuStreamSynchronize_ptsz)}}},
      {"cuStreamIsCapturing", {{address(&cuStreamIsCapturing), 10000, address(&cuStreamIsCapturing_ptsz)}}},
      {"cuStreamQuery", {{address(&cuStreamQuery), 2000}}},
      {"cuEventCreate", {{address(&cuEventCreate), 2000}}},
      {"cuEventRecord", {{address(&cuEventRecord), 2000}}},
      {"cuEventSynchronize", {{address(&cuEventSynchronize), 2000}}},
      {"cuEventQuery", {{address(&cuEventQuery), 2000}}},
      {"cuEventElapsedTime",
       {{address(&cuEventElapsedTime), 2000}, {address(&cuEventElapsedTime_v2), 12080}}},
      {"cuEventDestroy", {{address(&cuEventDestroy), 2000}, {address(&cuEventDestroy_v2), 4000}}},
  };
  for (const ProcEntry& entry : kTable) {
    if (std::strcmp(entry.name, name) == 0) return &entry;
  }
  return nullptr;
}

int driver_version() {
  if (check_ready() == CUDA_SUCCESS) return driver().config.driver_version;
  MockConfig config;  // callers resolve cuInit itself before calling it
  return load_config(&config) ? config.driver_version : kDefaultDriverVersion;
}

CUresult get_proc_address(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* symbolStatus) {
  if (symbolStatus != nullptr) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  constexpr cuuint64_t kKnownFlags =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~kKnownFlags) != 0 || flags == kKnownFlags) return CUDA_ERROR_INVALID_VALUE;
  if (cudaVersion > driver_version()) return CUDA_ERROR_INVALID_VALUE;
  const ProcEntry* entry = find_entry(symbol);
  if (entry == nullptr) return CUDA_ERROR_NOT_FOUND;
  const ProcVersion* chosen = nullptr;
  for (const ProcVersion& version : entry->versions) {
    if (version.function != nullptr && version.since <= cudaVersion) chosen = &version;
  }
  if (chosen == nullptr) {
    if (symbolStatus != nullptr) *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 &&
                          cudaVersion >= kPerThreadStreamSince && chosen->per_thread != nullptr;
  *pfn = per_thread ? chosen->per_thread : chosen->function;
  if (symbolStatus != nullptr) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gpuslice::mock

using namespace gpuslice::mock;

extern "C" {

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, nullptr);
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS:
      *pStr = "no error";
      break;
    case CUDA_ERROR_INVALID_VALUE:
      *pStr = "invalid argument";
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *pStr = "out of memory";
      break;
    case CUDA_ERROR_NOT_INITIALIZED:
      *pStr = "initialization error";
      break;
    case CUDA_ERROR_DEINITIALIZED:
      *pStr = "driver shutting down";
      break;
    case CUDA_ERROR_NO_DEVICE:
      *pStr = "no CUDA-capable device is detected";
      break;
    case CUDA_ERROR_INVALID_DEVICE:
      *pStr = "invalid device ordinal";
      break;
    case CUDA_ERROR_INVALID_IMAGE:
      *pStr = "device kernel image is invalid";
      break;
    case CUDA_ERROR_INVALID_CONTEXT:
      *pStr = "invalid device context";
      break;
    case CUDA_ERROR_FILE_NOT_FOUND:
      *pStr = "file not found";
      break;
    case CUDA_ERROR_INVALID_HANDLE:
      *pStr = "invalid resource handle";
      break;
    case CUDA_ERROR_NOT_FOUND:
      *pStr = "named symbol not found";
      break;
    case CUDA_ERROR_NOT_READY:
      *pStr = "device not ready";
      break;
    case CUDA_ERROR_LAUNCH_FAILED:
      *pStr = "unspecified launch failure";
      break;
    case CUDA_ERROR_NOT_PERMITTED:
      *pStr = "operation not permitted";
      break;
    case CUDA_ERROR_NOT_SUPPORTED:
      *pStr = "operation not supported";
      break;
    case CUDA_ERROR_UNKNOWN:
      *pStr = "unknown error";
      break;
    default:
      *pStr = nullptr;
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// The runtime's private interfaces are not simulated; callers probe and fall back.
CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  (void)pExportTableId;
  if (ppExportTable != nullptr) *ppExportTable = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // extern "C"
