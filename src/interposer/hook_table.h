// The one list of hooked entry points. Each row generates: the exported symbol (the hook function
// itself, typed by the prototype in src/abi so a wrong signature cannot compile), the dlsym routing
// table and the cuGetProcAddress routing table. Adding a hook is one row here plus its function.
//
// Row: X(symbol, base name as cuGetProcAddress is asked for it, cudaVersion it appeared in,
//        stream variant, profile name written to metrics.log)
#pragma once

// NOLINTBEGIN(cppcoreguidelines-macro-usage)
// A table, one row per hooked symbol, aligned for reading:
// clang-format off
#define GPUSLICE_CUDA_HOOKS(X)                                                      \
  /* initialisation and entry-point lookup (context.cpp, proc_address.cpp) */       \
  X(cuInit, cuInit, 2000, Plain, "cuInit")                                          \
  X(cuGetProcAddress, cuGetProcAddress, 11030, Plain, "cuGetProcAddress")           \
  X(cuGetProcAddress_v2, cuGetProcAddress, 12000, Plain, "cuGetProcAddress")        \
  X(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, Plain, "cuDeviceTotalMem")         \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, Plain, "cuDevicePrimaryCtxRetain") \
  X(cuCtxCreate_v2, cuCtxCreate, 3020, Plain, "cuCtxCreate")                        \
  X(cuCtxCreate_v3, cuCtxCreate, 11040, Plain, "cuCtxCreate")                       \
  X(cuCtxCreate_v4, cuCtxCreate, 12050, Plain, "cuCtxCreate")                       \
  X(cuGreenCtxCreate, cuGreenCtxCreate, 12040, Plain, "cuCtxCreate")                \
  X(cuCtxDestroy_v2, cuCtxDestroy, 4000, Plain, "cuCtxDestroy")                     \
  X(cuGreenCtxDestroy, cuGreenCtxDestroy, 12040, Plain, "cuCtxDestroy")             \
  X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, Plain, "cuCtxDestroy") \
  /* device memory (memory.cpp) */                                                  \
  X(cuMemGetInfo_v2, cuMemGetInfo, 3020, Plain, "cuMemGetInfo")                     \
  X(cuMemAlloc_v2, cuMemAlloc, 3020, Plain, "cuMemAlloc")                           \
  X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, Plain, "cuMemAllocPitch")            \
  X(cuMemAllocManaged, cuMemAllocManaged, 6000, Plain, "cuMemAllocManaged")         \
  X(cuMemFree_v2, cuMemFree, 3020, Plain, "cuMemFree")                              \
  X(cuMemAllocAsync, cuMemAllocAsync, 11020, Plain, "cuMemAllocAsync")              \
  X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, Ptsz, "cuMemAllocAsync")          \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, Plain, "cuMemAllocFromPoolAsync") \
  X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, Ptsz, "cuMemAllocFromPoolAsync") \
  X(cuMemFreeAsync, cuMemFreeAsync, 11020, Plain, "cuMemFreeAsync")                 \
  X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, Ptsz, "cuMemFreeAsync")             \
  X(cuMemCreate, cuMemCreate, 10020, Plain, "cuMemCreate")                          \
  X(cuMemRelease, cuMemRelease, 10020, Plain, "cuMemRelease")                       \
  X(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 4010, Plain, "cuIpcOpenMemHandle")      \
  X(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, 11000, Plain, "cuIpcOpenMemHandle")  \
  X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, Plain, "cuIpcCloseMemHandle")   \
  X(cuArrayCreate_v2, cuArrayCreate, 3020, Plain, "cuArrayCreate")                  \
  X(cuArray3DCreate_v2, cuArray3DCreate, 3020, Plain, "cuArray3DCreate")            \
  X(cuArrayDestroy, cuArrayDestroy, 2000, Plain, "cuArrayDestroy")                  \
  X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, Plain, "cuMipmappedArrayCreate") \
  X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, Plain, "cuMipmappedArrayDestroy") \
  /* copies, profiled by direction (memcpy.cpp) */                                  \
  X(cuMemcpyHtoD_v2, cuMemcpyHtoD, 3020, Plain, "cuMemcpyH2D")                      \
  X(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD, 7000, Ptds, "cuMemcpyH2D")                  \
  X(cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020, Plain, "cuMemcpyD2H")                      \
  X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH, 7000, Ptds, "cuMemcpyD2H")                  \
  X(cuMemcpyDtoD_v2, cuMemcpyDtoD, 3020, Plain, "cuMemcpyD2D")                      \
  X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD, 7000, Ptds, "cuMemcpyD2D")                  \
  X(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, 3020, Plain, "cuMemcpyH2D")            \
  X(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync, 7000, Ptsz, "cuMemcpyH2D")        \
  X(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, 3020, Plain, "cuMemcpyD2H")            \
  X(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync, 7000, Ptsz, "cuMemcpyD2H")        \
  X(cuMemcpy, cuMemcpy, 4000, Plain, "cuMemcpy")                                    \
  X(cuMemcpy_ptds, cuMemcpy, 7000, Ptds, "cuMemcpy")                                \
  X(cuMemcpyAsync, cuMemcpyAsync, 4000, Plain, "cuMemcpyAsync")                     \
  X(cuMemcpyAsync_ptsz, cuMemcpyAsync, 7000, Ptsz, "cuMemcpyAsync")                 \
  /* memsets, copies with a shape and between contexts (memset.cpp, memcpy.cpp) */  \
  X(cuMemsetD8_v2, cuMemsetD8, 3020, Plain, "cuMemset")                             \
  X(cuMemsetD8_v2_ptds, cuMemsetD8, 7000, Ptds, "cuMemset")                         \
  X(cuMemsetD16_v2, cuMemsetD16, 3020, Plain, "cuMemset")                           \
  X(cuMemsetD16_v2_ptds, cuMemsetD16, 7000, Ptds, "cuMemset")                       \
  X(cuMemsetD32_v2, cuMemsetD32, 3020, Plain, "cuMemset")                           \
  X(cuMemsetD32_v2_ptds, cuMemsetD32, 7000, Ptds, "cuMemset")                       \
  X(cuMemsetD2D8_v2, cuMemsetD2D8, 3020, Plain, "cuMemset")                         \
  X(cuMemsetD2D8_v2_ptds, cuMemsetD2D8, 7000, Ptds, "cuMemset")                     \
  X(cuMemsetD2D16_v2, cuMemsetD2D16, 3020, Plain, "cuMemset")                       \
  X(cuMemsetD2D16_v2_ptds, cuMemsetD2D16, 7000, Ptds, "cuMemset")                   \
  X(cuMemsetD2D32_v2, cuMemsetD2D32, 3020, Plain, "cuMemset")                       \
  X(cuMemsetD2D32_v2_ptds, cuMemsetD2D32, 7000, Ptds, "cuMemset")                   \
  X(cuMemsetD8Async, cuMemsetD8Async, 3020, Plain, "cuMemsetAsync")                 \
  X(cuMemsetD8Async_ptsz, cuMemsetD8Async, 7000, Ptsz, "cuMemsetAsync")             \
  X(cuMemsetD16Async, cuMemsetD16Async, 3020, Plain, "cuMemsetAsync")               \
  X(cuMemsetD16Async_ptsz, cuMemsetD16Async, 7000, Ptsz, "cuMemsetAsync")           \
  X(cuMemsetD32Async, cuMemsetD32Async, 3020, Plain, "cuMemsetAsync")               \
  X(cuMemsetD32Async_ptsz, cuMemsetD32Async, 7000, Ptsz, "cuMemsetAsync")           \
  X(cuMemsetD2D8Async, cuMemsetD2D8Async, 3020, Plain, "cuMemsetAsync")             \
  X(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async, 7000, Ptsz, "cuMemsetAsync")         \
  X(cuMemsetD2D16Async, cuMemsetD2D16Async, 3020, Plain, "cuMemsetAsync")           \
  X(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async, 7000, Ptsz, "cuMemsetAsync")       \
  X(cuMemsetD2D32Async, cuMemsetD2D32Async, 3020, Plain, "cuMemsetAsync")           \
  X(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async, 7000, Ptsz, "cuMemsetAsync")       \
  X(cuMemcpy2D_v2, cuMemcpy2D, 3020, Plain, "cuMemcpy2D")                           \
  X(cuMemcpy2D_v2_ptds, cuMemcpy2D, 7000, Ptds, "cuMemcpy2D")                       \
  X(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned, 3020, Plain, "cuMemcpy2D")         \
  X(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned, 7000, Ptds, "cuMemcpy2D")     \
  X(cuMemcpy3D_v2, cuMemcpy3D, 3020, Plain, "cuMemcpy3D")                           \
  X(cuMemcpy3D_v2_ptds, cuMemcpy3D, 7000, Ptds, "cuMemcpy3D")                       \
  X(cuMemcpy2DAsync_v2, cuMemcpy2DAsync, 3020, Plain, "cuMemcpy2DAsync")            \
  X(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync, 7000, Ptsz, "cuMemcpy2DAsync")        \
  X(cuMemcpy3DAsync_v2, cuMemcpy3DAsync, 3020, Plain, "cuMemcpy3DAsync")            \
  X(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync, 7000, Ptsz, "cuMemcpy3DAsync")        \
  X(cuMemcpyPeer, cuMemcpyPeer, 4000, Plain, "cuMemcpyPeer")                        \
  X(cuMemcpyPeer_ptds, cuMemcpyPeer, 7000, Ptds, "cuMemcpyPeer")                    \
  X(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 4000, Plain, "cuMemcpyPeerAsync")         \
  X(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync, 7000, Ptsz, "cuMemcpyPeerAsync")     \
  X(cuMemcpy3DPeer, cuMemcpy3DPeer, 4000, Plain, "cuMemcpyPeer")                    \
  X(cuMemcpy3DPeer_ptds, cuMemcpy3DPeer, 7000, Ptds, "cuMemcpyPeer")                \
  X(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync, 4000, Plain, "cuMemcpyPeerAsync")     \
  X(cuMemcpy3DPeerAsync_ptsz, cuMemcpy3DPeerAsync, 7000, Ptsz, "cuMemcpyPeerAsync") \
  /* batched copies (memcpy.cpp) and stream memory operations (stream_memops.cpp) */ \
  X(cuMemcpyBatchAsync, cuMemcpyBatchAsync, 12080, Plain, "cuMemcpyBatchAsync") \
  X(cuMemcpyBatchAsync_ptsz, cuMemcpyBatchAsync, 12080, Ptsz, "cuMemcpyBatchAsync") \
  X(cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync, 13000, Plain, "cuMemcpyBatchAsync") \
  X(cuMemcpyBatchAsync_v2_ptsz, cuMemcpyBatchAsync, 13000, Ptsz, "cuMemcpyBatchAsync") \
  X(cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync, 12080, Plain, "cuMemcpyBatchAsync") \
  X(cuMemcpy3DBatchAsync_ptsz, cuMemcpy3DBatchAsync, 12080, Ptsz, "cuMemcpyBatchAsync") \
  X(cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync, 13000, Plain, "cuMemcpyBatchAsync") \
  X(cuMemcpy3DBatchAsync_v2_ptsz, cuMemcpy3DBatchAsync, 13000, Ptsz, "cuMemcpyBatchAsync") \
  X(cuStreamWriteValue32, cuStreamWriteValue32, 8000, Plain, "cuStreamWriteValue") \
  X(cuStreamWriteValue32_ptsz, cuStreamWriteValue32, 8000, Ptsz, "cuStreamWriteValue") \
  X(cuStreamWriteValue32_v2, cuStreamWriteValue32, 11070, Plain, "cuStreamWriteValue") \
  X(cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32, 11070, Ptsz, "cuStreamWriteValue") \
  X(cuStreamWriteValue64, cuStreamWriteValue64, 9000, Plain, "cuStreamWriteValue") \
  X(cuStreamWriteValue64_ptsz, cuStreamWriteValue64, 9000, Ptsz, "cuStreamWriteValue") \
  X(cuStreamWriteValue64_v2, cuStreamWriteValue64, 11070, Plain, "cuStreamWriteValue") \
  X(cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64, 11070, Ptsz, "cuStreamWriteValue") \
  X(cuStreamBatchMemOp, cuStreamBatchMemOp, 8000, Plain, "cuStreamBatchMemOp") \
  X(cuStreamBatchMemOp_ptsz, cuStreamBatchMemOp, 8000, Ptsz, "cuStreamBatchMemOp") \
  X(cuStreamBatchMemOp_v2, cuStreamBatchMemOp, 11070, Plain, "cuStreamBatchMemOp") \
  X(cuStreamBatchMemOp_v2_ptsz, cuStreamBatchMemOp, 11070, Ptsz, "cuStreamBatchMemOp") \
  /* work submission, throttled by the compute limiter (launch.cpp) */              \
  X(cuLaunchKernel, cuLaunchKernel, 4000, Plain, "cuLaunchKernel")                  \
  X(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, Ptsz, "cuLaunchKernel")              \
  X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, Plain, "cuLaunchKernelEx")           \
  X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, Ptsz, "cuLaunchKernelEx")       \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, Plain, "cuLaunchCooperativeKernel") \
  X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, Ptsz, "cuLaunchCooperativeKernel") \
  X(cuGraphLaunch, cuGraphLaunch, 10000, Plain, "cuGraphLaunch")                    \
  X(cuGraphLaunch_ptsz, cuGraphLaunch, 10000, Ptsz, "cuGraphLaunch")              \
  /* the driver's own reservations (limits.cpp, graph_memory.cpp, modules.cpp) */  \
  X(cuCtxSetLimit, cuCtxSetLimit, 3010, Plain, "cuCtxSetLimit")                     \
  X(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, 11040, Plain, "cuGraphAddMemAllocNode") \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, Plain, "cuGraphInstantiate") \
  X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000, Plain, "cuGraphInstantiate") \
  X(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, 12000, Ptsz, "cuGraphInstantiate") \
  X(cuGraphUpload, cuGraphUpload, 11010, Plain, "cuGraphUpload")                    \
  X(cuGraphUpload_ptsz, cuGraphUpload, 11010, Ptsz, "cuGraphUpload")                \
  X(cuGraphExecDestroy, cuGraphExecDestroy, 10000, Plain, "cuGraphExecDestroy")     \
  X(cuGraphDestroy, cuGraphDestroy, 10000, Plain, "cuGraphDestroy")                 \
  X(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, 11040, Plain, "cuDeviceGraphMemTrim") \
  X(cuModuleLoad, cuModuleLoad, 2000, Plain, "cuModuleLoad")                        \
  X(cuModuleLoadData, cuModuleLoadData, 2000, Plain, "cuModuleLoad")                \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010, Plain, "cuModuleLoad")            \
  X(cuModuleLoadFatBinary, cuModuleLoadFatBinary, 2000, Plain, "cuModuleLoad")      \
  X(cuModuleUnload, cuModuleUnload, 2000, Plain, "cuModuleUnload")                  \
  X(cuLibraryLoadData, cuLibraryLoadData, 12000, Plain, "cuLibraryLoad")            \
  X(cuLibraryLoadFromFile, cuLibraryLoadFromFile, 12000, Plain, "cuLibraryLoad")    \
  X(cuLibraryUnload, cuLibraryUnload, 12000, Plain, "cuModuleUnload")               \
  /* host synchronisation: tells the compute limiter the queue drained (launch.cpp) */ \
  X(cuCtxSynchronize, cuCtxSynchronize, 2000, Plain, "cuCtxSynchronize")            \
  X(cuCtxSynchronize_v2, cuCtxSynchronize, 13000, Plain, "cuCtxSynchronize")        \
  X(cuStreamSynchronize, cuStreamSynchronize, 2000, Plain, "cuStreamSynchronize")   \
  X(cuStreamSynchronize_ptsz, cuStreamSynchronize, 7000, Ptsz, "cuStreamSynchronize") \
  X(cuEventSynchronize, cuEventSynchronize, 2000, Plain, "cuEventSynchronize")

#define GPUSLICE_NVML_HOOKS(X)                                                      \
  X(nvmlInit_v2, nvmlInit_v2, 0, Plain, "nvmlInit")                                 \
  X(nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo, 0, Plain, "nvmlDeviceGetMemoryInfo") \
  X(nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetMemoryInfo_v2, 0, Plain, "nvmlDeviceGetMemoryInfo") \
  X(nvmlDeviceGetBAR1MemoryInfo, nvmlDeviceGetBAR1MemoryInfo, 0, Plain, "nvmlDeviceGetBAR1MemoryInfo") \
  /* the tenant's view: own processes and own utilisation (nvml_processes.cpp, nvml_utilization.cpp) */ \
  X(nvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetComputeRunningProcesses, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  X(nvmlDeviceGetComputeRunningProcesses_v2, nvmlDeviceGetComputeRunningProcesses_v2, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  X(nvmlDeviceGetComputeRunningProcesses_v3, nvmlDeviceGetComputeRunningProcesses_v3, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  X(nvmlDeviceGetGraphicsRunningProcesses, nvmlDeviceGetGraphicsRunningProcesses, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  X(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlDeviceGetGraphicsRunningProcesses_v2, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  X(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlDeviceGetGraphicsRunningProcesses_v3, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  X(nvmlDeviceGetMPSComputeRunningProcesses, nvmlDeviceGetMPSComputeRunningProcesses, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  X(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlDeviceGetMPSComputeRunningProcesses_v2, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  X(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlDeviceGetMPSComputeRunningProcesses_v3, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  X(nvmlDeviceGetRunningProcessDetailList, nvmlDeviceGetRunningProcessDetailList, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  X(nvmlDeviceGetProcessUtilization, nvmlDeviceGetProcessUtilization, 0, Plain, "nvmlDeviceGetUtilization") \
  X(nvmlDeviceGetProcessesUtilizationInfo, nvmlDeviceGetProcessesUtilizationInfo, 0, Plain, "nvmlDeviceGetUtilization") \
  X(nvmlDeviceGetUtilizationRates, nvmlDeviceGetUtilizationRates, 0, Plain, "nvmlDeviceGetUtilization") \
  X(nvmlDeviceGetEncoderUtilization, nvmlDeviceGetEncoderUtilization, 0, Plain, "nvmlDeviceGetUtilization") \
  X(nvmlDeviceGetDecoderUtilization, nvmlDeviceGetDecoderUtilization, 0, Plain, "nvmlDeviceGetUtilization") \
  X(nvmlDeviceGetSamples, nvmlDeviceGetSamples, 0, Plain, "nvmlDeviceGetUtilization") \
  X(nvmlDeviceGetAccountingPids, nvmlDeviceGetAccountingPids, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  X(nvmlSystemGetProcessName, nvmlSystemGetProcessName, 0, Plain, "nvmlDeviceGetRunningProcesses") \
  /* nvidia-smi's route to the same lists (nvml_internal_table.cpp) */              \
  X(nvmlInternalGetExportTable, nvmlInternalGetExportTable, 0, Plain, "nvmlDeviceGetRunningProcesses")
// clang-format on
// NOLINTEND(cppcoreguidelines-macro-usage)
