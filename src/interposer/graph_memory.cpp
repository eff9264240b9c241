// Graph memory: allocation nodes are noted per graph (and refused when they could never fit), an
// executable graph inherits them, and uploading or launching it first makes room in the graph pool
// within the quota (driver_reservations.h). The launches themselves are in launch.cpp.
#include "interposer/devices.h"
#include "interposer/driver_reservations.h"
#include "interposer/hook_prologue.h"

namespace gs = gpuslice::interposer;

namespace {
// The device an allocation node's pool properties name (CUmemLocation at byte 8), else the current one.
int node_device(const CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  int type = 0, id = 0;
  __builtin_memcpy(&type, params->poolProps + 8, sizeof type);
  __builtin_memcpy(&id, params->poolProps + 12, sizeof id);
  if (type == CU_MEM_LOCATION_TYPE_DEVICE) return id;
  CUdevice dev = -1;
  gs::current_device_state(&dev);
  return dev;
}
constexpr unsigned long long kInstantiateUpload = 2;  // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
}  // namespace

GS_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                          const CUgraphNode* dependencies, size_t numDependencies,
                                          CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  GS_CUDA_HOOK_PROLOGUE(cuGraphAddMemAllocNode);
  if (!gs::memory_active() || nodeParams == nullptr)
    return real(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
  if (!gs::note_graph_allocation(hGraph, node_device(nodeParams), nodeParams->bytesize))
    return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = real(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
  if (r != CUDA_SUCCESS) gs::note_graph_allocation(hGraph, node_device(nodeParams), 0);
  return r;
}

GS_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                               unsigned long long flags) {
  GS_CUDA_HOOK_PROLOGUE(cuGraphInstantiateWithFlags);
  if (!gs::memory_active()) return real(phGraphExec, hGraph, flags);
  const CUresult r = real(phGraphExec, hGraph, flags);
  if (r != CUDA_SUCCESS || phGraphExec == nullptr) return r;
  gs::note_graph_instantiated(*phGraphExec, hGraph);
  // Uploaded at instantiation: the pool grew already; its charge follows (the next launch checks).
  if ((flags & kInstantiateUpload) != 0) gs::graph_pool_settle(*phGraphExec);
  return r;
}

// The parameters may ask for an upload at instantiation too: the charge follows the pool either way.
#define GS_GRAPH_INSTANTIATE_WITH_PARAMS(sym)                                                               \
  GS_EXPORT CUresult sym(CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) { \
    GS_CUDA_HOOK_PROLOGUE(sym);                                                                             \
    const CUresult r = real(phGraphExec, hGraph, params);                                                   \
    if (r == CUDA_SUCCESS && phGraphExec != nullptr && gs::memory_active()) {                               \
      gs::note_graph_instantiated(*phGraphExec, hGraph);                                                    \
      gs::graph_pool_settle(*phGraphExec);                                                                  \
    }                                                                                                       \
    return r;                                                                                               \
  }
GS_GRAPH_INSTANTIATE_WITH_PARAMS(cuGraphInstantiateWithParams)
GS_GRAPH_INSTANTIATE_WITH_PARAMS(cuGraphInstantiateWithParams_ptsz)

#define GS_GRAPH_UPLOAD(sym)                                               \
  GS_EXPORT CUresult sym(CUgraphExec hGraphExec, CUstream hStream) {       \
    GS_CUDA_HOOK_PROLOGUE(sym);                                            \
    if (!gs::memory_active()) return real(hGraphExec, hStream);            \
    if (!gs::graph_pool_fits(hGraphExec)) return CUDA_ERROR_OUT_OF_MEMORY; \
    const CUresult r = real(hGraphExec, hStream);                          \
    gs::graph_pool_settle(hGraphExec);                                     \
    return r;                                                              \
  }
GS_GRAPH_UPLOAD(cuGraphUpload)
GS_GRAPH_UPLOAD(cuGraphUpload_ptsz)

GS_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  GS_CUDA_HOOK_PROLOGUE(cuGraphExecDestroy);
  if (gs::memory_active()) gs::forget_graph(hGraphExec);
  return real(hGraphExec);
}

GS_EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
  GS_CUDA_HOOK_PROLOGUE(cuGraphDestroy);
  if (gs::memory_active()) gs::forget_graph(hGraph);
  return real(hGraph);
}

GS_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
  GS_CUDA_HOOK_PROLOGUE(cuDeviceGraphMemTrim);
  const CUresult r = real(device);
  if (r == CUDA_SUCCESS && gs::memory_active()) {
    if (gs::DeviceState* d = gs::device_state_if_attached(device)) gs::sync_graph_charge(*d);
  }
  return r;
}
