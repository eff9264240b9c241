// A program built with --default-stream per-thread: its runtime reaches the driver's _ptsz entry
// points with stream 0, its thread's own default stream. It launches plain kernels, then captures
// a graph on that stream in global mode and replays it. A gate that took stream 0 for the legacy
// stream would query, record events on or synchronise the wrong stream in the middle of the
// capture, and the capture would fail.
//   per_thread_capture idle SECONDS   attach the GPU (one kernel), then sleep: a container that never works
//   per_thread_capture capture        plain launches, then capture 400 kernels and replay the graph 20 times
// Prints launches=, capture= and replay= (ok or the error's name); exit 0 only when all are ok.
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

bool report(const char* what, cudaError_t e) {
  std::printf("%s=%s\n", what, e == cudaSuccess ? "ok" : cudaGetErrorName(e));
  std::fflush(stdout);
  return e == cudaSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (std::strcmp(argv[1], "idle") != 0 && std::strcmp(argv[1], "capture") != 0)) {
    std::fprintf(stderr, "usage: per_thread_capture idle SECONDS | capture\n");
    return 2;
  }
  spin<<<1, 1>>>(1000);  // attaches the GPU: the library's record is published from here on
  if (!report("attach", cudaDeviceSynchronize())) return 1;
  if (std::strcmp(argv[1], "idle") == 0) {
    usleep(static_cast<useconds_t>(std::atof(argc > 2 ? argv[2] : "5") * 1e6));
    return 0;
  }
  usleep(300000);  // the library's watcher has looked at the node's records by then
  // Plain launches: a gate steps (waits for events on this thread's stream) as it would anywhere.
  for (int i = 0; i < 2000; ++i) {
    spin<<<1, 1>>>(20000);
    if (i % 500 == 499) cudaStreamSynchronize(cudaStreamPerThread);
  }
  bool ok = report("launches", cudaDeviceSynchronize());
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal);
  if (e == cudaSuccess) {
    for (int i = 0; i < 400; ++i) spin<<<1, 1>>>(20000);
    e = cudaStreamEndCapture(cudaStreamPerThread, &graph);
  }
  ok = report("capture", e) && ok;
  if (e != cudaSuccess) return 1;
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, graph, 0);
  for (int i = 0; i < 20 && e == cudaSuccess; ++i) e = cudaGraphLaunch(exec, cudaStreamPerThread);
  if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamPerThread);
  ok = report("replay", e) && ok;
  return ok ? 0 : 1;
}
