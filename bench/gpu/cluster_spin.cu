// A device-bound kernel launched in thread-block clusters through cudaLaunchKernelEx (the runtime
// reaches cuLaunchKernelEx), for bench/gpu/compute_accuracy.py's `cluster` workload:
//
//   nvcc -O2 -arch=sm_90 -shared -Xcompiler -fPIC -o build/gpu/libcluster_spin.so bench/gpu/cluster_spin.cu
//
// cluster_spin(cycles, stream) queues one launch of two blocks per SM in clusters of two, each block
// spinning `cycles` SM clock cycles; returns the cudaError_t of the launch.
#include <cuda_runtime.h>

namespace {
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
}  // namespace

extern "C" int cluster_spin(long long cycles, void* stream) {
  static int sms = 0;
  if (sms == 0) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return -1;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return -1;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(2 * static_cast<unsigned>(sms), 1, 1);
  config.blockDim = dim3(128, 1, 1);
  config.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 2;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return static_cast<int>(cudaLaunchKernelEx(&config, spin, cycles));
}
