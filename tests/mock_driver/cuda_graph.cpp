// Graph memory of the simulated libcuda. Allocation nodes take nothing when added or instantiated;
// uploading or launching the executable graph backs them from the device's graph pool, which grows
// (charged to the process like any allocation, or CUDA_ERROR_OUT_OF_MEMORY) when what it holds is
// short. The mock's graphs free what they allocate before they end, as training graphs do, so the
// pool's used memory returns to 0 after a launch while it keeps its physical memory until
// cuDeviceGraphMemTrim. cuDeviceGetGraphMemAttribute reports the four figures of the real driver.
#include "cuda_internal.h"

namespace gpuslice::mock {
namespace {

// Backs an executable graph's allocations from its device's pool.
CUresult back_allocations_locked(Driver& state, const GraphExecRecord& exec) {
  GraphPool& pool = state.graph_pool[exec.device];
  const std::uint64_t needed = pool.used + exec.alloc_bytes;
  if (needed > pool.reserved) {
    if (!state.shared.charge(exec.device, needed - pool.reserved, false)) return CUDA_ERROR_OUT_OF_MEMORY;
    pool.reserved = needed;
    if (pool.reserved > pool.reserved_high) pool.reserved_high = pool.reserved;
  }
  if (needed > pool.used_high) pool.used_high = needed;
  return CUDA_SUCCESS;
}

GraphExecRecord* find_exec_locked(Driver& state, CUgraphExec exec) {
  auto found = state.graph_execs.find(reinterpret_cast<std::uintptr_t>(exec));
  return found == state.graph_execs.end() ? nullptr : &found->second;
}

}  // namespace

void reset_graph_pool_locked(Driver& state, unsigned device) {
  state.shared.uncharge(device, state.graph_pool[device].reserved, false);
  state.graph_pool[device] = GraphPool{};
}

// A graph launch: its allocations are backed first. An executable graph the mock did not create
// (a test's made-up handle) has none.
CUresult prepare_graph_launch(CUgraphExec exec) {
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  GraphExecRecord* record = find_exec_locked(state, exec);
  return record == nullptr ? CUDA_SUCCESS : back_allocations_locked(state, *record);
}

}  // namespace gpuslice::mock

using namespace gpuslice::mock;

extern "C" {

CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  const std::uintptr_t handle = state.next_graph_handle += 16;
  state.graphs.emplace(handle, GraphRecord{context->device, 0});
  *phGraph = reinterpret_cast<CUgraph>(handle);
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.graphs.erase(reinterpret_cast<std::uintptr_t>(hGraph)) == 1 ? CUDA_SUCCESS
                                                                           : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  (void)dependencies;
  (void)numDependencies;
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (phGraphNode == nullptr || nodeParams == nullptr || nodeParams->bytesize == 0)
    return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto graph = state.graphs.find(reinterpret_cast<std::uintptr_t>(hGraph));
  if (graph == state.graphs.end()) return CUDA_ERROR_INVALID_VALUE;
  // The driver refuses a node no device could ever back.
  if (nodeParams->bytesize > state.shared.total_bytes(graph->second.device)) return CUDA_ERROR_OUT_OF_MEMORY;
  graph->second.alloc_bytes += nodeParams->bytesize;
  // A virtual address for the allocation, reserved now and backed at upload or launch.
  nodeParams->dptr = static_cast<CUdeviceptr>(state.next_graph_handle += 16) << 8;
  *phGraphNode = reinterpret_cast<CUgraphNode>(state.next_graph_handle += 16);
  return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  (void)flags;
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (phGraphExec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto graph = state.graphs.find(reinterpret_cast<std::uintptr_t>(hGraph));
  if (graph == state.graphs.end()) return CUDA_ERROR_INVALID_VALUE;
  const std::uintptr_t handle = state.next_graph_handle += 16;
  state.graph_execs.emplace(handle, GraphExecRecord{graph->second.device, graph->second.alloc_bytes});
  *phGraphExec = reinterpret_cast<CUgraphExec>(handle);
  return CUDA_SUCCESS;
}

// The parameters (flags, upload stream, result) are not simulated: instantiated as with no flags.
CUresult cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  (void)instantiateParams;
  return cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  return cuGraphInstantiateWithParams(phGraphExec, hGraph, instantiateParams);
}

CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  (void)hStream;
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  GraphExecRecord* record = find_exec_locked(state, hGraphExec);
  if (record == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return back_allocations_locked(state, *record);
}

CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return cuGraphUpload(hGraphExec, hStream);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.graph_execs.erase(reinterpret_cast<std::uintptr_t>(hGraphExec)) == 1
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_VALUE;
}

// Both are asked from other threads at any time (a watcher): under the mutex, which the exit path
// holds while it lets go of the shared state.
CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) {
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (device < 0 || static_cast<unsigned>(device) >= state.shared.device_count())
    return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const GraphPool& pool = state.graph_pool[device];
  std::uint64_t figure = 0;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      figure = pool.used;
      break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      figure = pool.used_high;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      figure = pool.reserved;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      figure = pool.reserved_high;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  *static_cast<cuuint64_t*>(value) = figure;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGraphMemTrim(CUdevice device) {
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (device < 0 || static_cast<unsigned>(device) >= state.shared.device_count())
    return CUDA_ERROR_INVALID_DEVICE;
  GraphPool& pool = state.graph_pool[device];
  state.shared.uncharge(static_cast<unsigned>(device), pool.reserved - pool.used, false);
  pool.reserved = pool.used;
  return CUDA_SUCCESS;
}

}  // extern "C"
