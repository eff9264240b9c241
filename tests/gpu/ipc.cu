// Memory shared between two processes on a real GPU, under libgpuslice.so (tests/gpu/ipc.py runs it).
//   ipc export BYTES   allocates BYTES with cudaMalloc (exported with cudaIpcGetMemHandle) and
//                      BYTES with cuMemCreate (exported as a POSIX file descriptor), then runs the
//                      importer as its child: this same program, `ipc import HANDLE FD BYTES`, with
//                      GPUSLICE_MEMORY_LIMIT / GPUSLICE_SHARED_DIR taken from IMPORTER_MEMORY_LIMIT /
//                      IMPORTER_SHARED_DIR (another container, a smaller quota; the same container
//                      when they name the exporter's and IMPORTER_SAME_CONTAINER=1).
// Every step prints `books <who> <step> free=<bytes> total=<bytes>` (cudaMemGetInfo: under a quota,
// the quota and what is left of it); checks print PASS/FAIL lines. The importer prints
// HOLDING_IPC / HOLDING_VMM and waits 1 s there, so that the script can ask nvidia-smi what the
// driver charges the importer for memory it did not allocate.
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

int g_failures = 0;

void check_rt(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::printf("FAIL %s: %s\n", what, cudaGetErrorString(e));
    std::fflush(stdout);
    std::exit(1);
  }
}

void check_drv(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    std::printf("FAIL %s: %s\n", what, name ? name : "?");
    std::fflush(stdout);
    std::exit(1);
  }
}

void expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what);
  if (!ok) ++g_failures;
}

size_t books(const char* who, const char* step) {
  size_t free_b = 0, total_b = 0;
  check_rt(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  std::printf("books %s %s free=%zu total=%zu used=%zu\n", who, step, free_b, total_b, total_b - free_b);
  std::fflush(stdout);
  return total_b - free_b;
}

void settle() { usleep(800 * 1000); }  // longer than gpuslice's 500 ms footprint reconciliation period

CUmemAllocationProp vmm_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

CUdeviceptr map_handle(CUmemGenericAllocationHandle h, size_t bytes) {
  CUdeviceptr va = 0;
  check_drv(cuMemAddressReserve(&va, bytes, 0, 0, 0), "cuMemAddressReserve");
  check_drv(cuMemMap(va, bytes, 0, h, 0), "cuMemMap");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check_drv(cuMemSetAccess(va, bytes, &access, 1), "cuMemSetAccess");
  return va;
}

bool bytes_are(const void* device, size_t bytes, unsigned char value) {
  unsigned char first = 0, last = 0;
  const auto* d = static_cast<const unsigned char*>(device);
  check_rt(cudaMemcpy(&first, d, 1, cudaMemcpyDeviceToHost), "read first byte");
  check_rt(cudaMemcpy(&last, d + bytes - 1, 1, cudaMemcpyDeviceToHost), "read last byte");
  return first == value && last == value;
}

std::string hex(const void* data, size_t n) {
  std::string out;
  char two[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(two, sizeof two, "%02x", static_cast<const unsigned char*>(data)[i]);
    out += two;
  }
  return out;
}

int run_importer(const char* handle_hex, int fd, size_t bytes) {
  check_rt(cudaSetDevice(0), "cudaSetDevice");
  check_rt(cudaFree(nullptr), "context");
  const size_t start = books("importer", "start");
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  // In another container the importer's quota is smaller than the buffer; in the same one (vLLM)
  // the quota is shared, and charging the importer would count the buffer twice.
  if (std::getenv("IMPORTER_SAME_CONTAINER") == nullptr)
    expect(bytes > total_b, "the shared buffer is bigger than the importer's quota");

  cudaIpcMemHandle_t handle{};
  for (size_t i = 0; i < sizeof handle.reserved; ++i)
    handle.reserved[i] =
        static_cast<char>(std::strtoul(std::string(handle_hex + 2 * i, 2).c_str(), nullptr, 16));
  void* p = nullptr;
  cudaError_t opened = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
  expect(opened == cudaSuccess, "importer opens the IPC handle (bigger than its quota)");
  if (opened == cudaSuccess) {
    expect(bytes_are(p, bytes, 0x5a), "importer reads the exporter's bytes through IPC");
    check_rt(cudaMemset(p, 0xa5, 1), "importer writes");
    check_rt(cudaDeviceSynchronize(), "sync");
    settle();
    std::printf("HOLDING_IPC pid=%d\n", getpid());
    std::fflush(stdout);
    const size_t holding = books("importer", "ipc_open");
    expect(holding < start + (64u << 20), "importer is not charged for the IPC buffer");
    // What was left of the quota is still left: half of it can be allocated with the buffer open.
    void* own = nullptr;
    expect(cudaMalloc(&own, free_b / 2) == cudaSuccess,
           "importer allocates half of what was free with the buffer open");
    if (own != nullptr) cudaFree(own);
    usleep(1000 * 1000);
    check_rt(cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle");
    settle();
    const size_t closed = books("importer", "ipc_closed");
    expect(closed + (64u << 20) > start && closed < start + (64u << 20),
           "closing gives back nothing of the importer's");
  }

  CUmemGenericAllocationHandle h = 0;
  CUresult imported = cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  expect(imported == CUDA_SUCCESS, "importer imports the VMM handle (bigger than its quota)");
  if (imported == CUDA_SUCCESS) {
    CUdeviceptr va = map_handle(h, bytes);
    expect(bytes_are(reinterpret_cast<void*>(va), bytes, 0x3c),
           "importer reads the creator's bytes through VMM");
    settle();
    std::printf("HOLDING_VMM pid=%d\n", getpid());
    std::fflush(stdout);
    const size_t holding = books("importer", "vmm_mapped");
    expect(holding < start + (64u << 20), "importer is not charged for the imported mapping");
    usleep(1000 * 1000);
    check_drv(cuMemUnmap(va, bytes), "cuMemUnmap");
    check_drv(cuMemAddressFree(va, bytes), "cuMemAddressFree");
    check_drv(cuMemRelease(h), "cuMemRelease (imported)");
    settle();
    const size_t released = books("importer", "vmm_released");
    expect(released + (64u << 20) > start && released < start + (64u << 20),
           "releasing an imported handle gives back nothing of the importer's");
  }
  return g_failures == 0 ? 0 : 1;
}

int run_exporter(size_t bytes) {
  check_rt(cudaSetDevice(0), "cudaSetDevice");
  check_rt(cudaFree(nullptr), "context");
  const size_t start = books("exporter", "start");
  void* p = nullptr;
  check_rt(cudaMalloc(&p, bytes), "cudaMalloc");
  check_rt(cudaMemset(p, 0x5a, bytes), "cudaMemset");
  cudaIpcMemHandle_t handle{};
  check_rt(cudaIpcGetMemHandle(&handle, p), "cudaIpcGetMemHandle");

  CUmemAllocationProp prop = vmm_prop();
  size_t granularity = 0;
  check_drv(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            "granularity");
  const size_t vmm_bytes = (bytes + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle h = 0;
  check_drv(cuMemCreate(&h, vmm_bytes, &prop, 0), "cuMemCreate");
  CUdeviceptr va = map_handle(h, vmm_bytes);
  check_rt(cudaMemset(reinterpret_cast<void*>(va), 0x3c, vmm_bytes), "cudaMemset (VMM)");
  check_rt(cudaDeviceSynchronize(), "sync");
  int fd = -1;
  check_drv(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "export fd");
  fcntl(fd, F_SETFD, 0);  // the importer inherits it
  settle();
  const size_t holding = books("exporter", "holding");
  expect(holding >= start + bytes + vmm_bytes - (2u << 20), "exporter is charged for both buffers");

  // The importer: another container (its own state directory) with a smaller quota.
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "GPUSLICE_MEMORY_LIMIT=", 22) == 0 ||
        std::strncmp(*e, "GPUSLICE_SHARED_DIR=", 20) == 0)
      continue;
    env_text.emplace_back(*e);
  }
  const char* limit = std::getenv("IMPORTER_MEMORY_LIMIT");
  const char* dir = std::getenv("IMPORTER_SHARED_DIR");
  env_text.push_back(std::string("GPUSLICE_MEMORY_LIMIT=") + (limit ? limit : "1Gi"));
  if (dir != nullptr) env_text.push_back(std::string("GPUSLICE_SHARED_DIR=") + dir);
  std::vector<char*> envp;
  for (auto& s : env_text) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string handle_hex = hex(handle.reserved, sizeof handle.reserved);
  std::string fd_text = std::to_string(fd), bytes_text = std::to_string(vmm_bytes);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 1;
  self[n] = '\0';
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    char* argv[] = {self,           const_cast<char*>("import"), handle_hex.data(),
                    fd_text.data(), bytes_text.data(),           nullptr};
    execve(self, argv, envp.data());
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "importer finished without failures");

  settle();
  const size_t after = books("exporter", "after_importer");
  expect(after + (2u << 20) >= holding && after <= holding + (2u << 20), "exporter is charged exactly once");
  unsigned char first = 0;
  check_rt(cudaMemcpy(&first, p, 1, cudaMemcpyDeviceToHost), "read first byte");
  expect(first == 0xa5, "the importer's write is visible to the exporter");
  check_rt(cudaFree(p), "cudaFree");
  check_drv(cuMemUnmap(va, vmm_bytes), "cuMemUnmap");
  check_drv(cuMemAddressFree(va, vmm_bytes), "cuMemAddressFree");
  check_drv(cuMemRelease(h), "cuMemRelease");
  close(fd);
  settle();
  const size_t end = books("exporter", "freed");
  expect(end < start + (64u << 20), "exporter's books return to where they started");
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 3 && std::strcmp(argv[1], "export") == 0)
    return run_exporter(std::strtoull(argv[2], nullptr, 10));
  if (argc == 5 && std::strcmp(argv[1], "import") == 0)
    return run_importer(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
  std::fprintf(stderr, "usage: ipc export BYTES | ipc import HANDLE FD BYTES\n");
  return 2;
}
