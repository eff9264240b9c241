// The CUDA runtime's memsets and copies with a shape or between contexts, on the real driver:
//   memset_paths [MIB]
// Each writes a buffer of MIB MiB (default 64) allocated with cudaMalloc, and is read back:
// cudaMemset(Async), cudaMemset2D(Async), cudaMemset3D, cudaMemcpy2D(Async), cudaMemcpy3D(Async),
// cudaMemcpyPeer(Async), cudaMemcpy3DPeer. Under libgpuslice.so with GPUSLICE_PROFILE_DIR, the
// profile's metrics.log then says which hooks they reached (tests/gpu/reclaim_writes.sh); with a
// memory guarantee below MIB the buffer is borrowed (virtual memory), so these run on it.
// Prints PASS/FAIL per path; exit 1 on any FAIL.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

int g_failures = 0;

void expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what);
  if (!ok) ++g_failures;
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("FAIL %s: %s\n", what, cudaGetErrorString(e));
  ++g_failures;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64;
  const std::size_t n = mib << 20, pitch = 4096, rows = n / pitch;
  if (!ok(cudaSetDevice(0), "cudaSetDevice")) return 1;
  unsigned char *d = nullptr, *other = nullptr;
  if (!ok(cudaMalloc(&d, n), "cudaMalloc") || !ok(cudaMalloc(&other, n), "cudaMalloc")) return 1;
  cudaStream_t s = nullptr;
  if (!ok(cudaStreamCreate(&s), "cudaStreamCreate")) return 1;
  std::vector<unsigned char> host(n), seen(n), want(n);
  auto check = [&](const char* what) {
    bool good =
        ok(cudaDeviceSynchronize(), what) && ok(cudaMemcpy(seen.data(), d, n, cudaMemcpyDeviceToHost), what);
    expect(good && seen == want, what);
  };
  auto pattern = [&](unsigned seed) {
    std::uint64_t state = seed * 2654435761ULL + 1;
    for (std::size_t i = 0; i + 8 <= n; i += 8) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      std::memcpy(&host[i], &state, 8);
    }
  };
  ok(cudaMemset(d, 0x11, n), "cudaMemset");
  want.assign(n, 0x11);
  check("cudaMemset");
  ok(cudaMemsetAsync(d, 0x22, n, s), "cudaMemsetAsync");
  want.assign(n, 0x22);
  check("cudaMemsetAsync");
  ok(cudaMemset2D(d, pitch, 0x33, pitch, rows), "cudaMemset2D");
  want.assign(n, 0x33);
  check("cudaMemset2D");
  ok(cudaMemset2DAsync(d, pitch, 0x44, pitch, rows, s), "cudaMemset2DAsync");
  want.assign(n, 0x44);
  check("cudaMemset2DAsync");
  const cudaExtent extent = make_cudaExtent(pitch, 64, rows / 64);
  ok(cudaMemset3D(make_cudaPitchedPtr(d, pitch, pitch, 64), 0x55, extent), "cudaMemset3D");
  want.assign(n, 0x55);
  check("cudaMemset3D");
  pattern(1);
  ok(cudaMemcpy2D(d, pitch, host.data(), pitch, pitch, rows, cudaMemcpyHostToDevice), "cudaMemcpy2D");
  want = host;
  check("cudaMemcpy2D");
  pattern(2);
  ok(cudaMemcpy2DAsync(d, pitch, host.data(), pitch, pitch, rows, cudaMemcpyHostToDevice, s),
     "cudaMemcpy2DAsync");
  want = host;
  check("cudaMemcpy2DAsync");
  cudaMemcpy3DParms p3{};
  pattern(3);
  p3.srcPtr = make_cudaPitchedPtr(host.data(), pitch, pitch, 64);
  p3.dstPtr = make_cudaPitchedPtr(d, pitch, pitch, 64);
  p3.extent = extent;
  p3.kind = cudaMemcpyHostToDevice;
  ok(cudaMemcpy3D(&p3), "cudaMemcpy3D");
  want = host;
  check("cudaMemcpy3D");
  pattern(4);
  ok(cudaMemcpy3DAsync(&p3, s), "cudaMemcpy3DAsync");
  want = host;
  check("cudaMemcpy3DAsync");
  pattern(5);
  ok(cudaMemcpy(other, host.data(), n, cudaMemcpyHostToDevice), "cudaMemcpy to the peer source");
  ok(cudaMemcpyPeer(d, 0, other, 0, n), "cudaMemcpyPeer");
  want = host;
  check("cudaMemcpyPeer");
  ok(cudaMemset(other, 0x66, n), "cudaMemset of the peer source");
  ok(cudaMemcpyPeerAsync(d, 0, other, 0, n, s), "cudaMemcpyPeerAsync");
  want.assign(n, 0x66);
  check("cudaMemcpyPeerAsync");
  ok(cudaMemset(other, 0x77, n), "cudaMemset of the peer source");
  cudaMemcpy3DPeerParms pp{};
  pp.srcPtr = make_cudaPitchedPtr(other, pitch, pitch, 64);
  pp.srcDevice = 0;
  pp.dstPtr = make_cudaPitchedPtr(d, pitch, pitch, 64);
  pp.dstDevice = 0;
  pp.extent = extent;
  ok(cudaMemcpy3DPeer(&pp), "cudaMemcpy3DPeer");
  want.assign(n, 0x77);
  check("cudaMemcpy3DPeer");
  cudaFree(d);
  cudaFree(other);
  std::printf("failures=%d\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
