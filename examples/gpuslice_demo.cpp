// gpuslice-demo: fills a GPU with fixed-size allocations until the driver refuses, then shows
// that freeing one chunk lets the next allocation succeed again.
//
// It reaches the driver exactly like the CUDA runtime (libcudart) does, without the CUDA
// toolkit: dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2") once, and every other entry
// point through cuGetProcAddress_v2. So under `gpuslice run --memory 1Gi` it sees what a CUDA
// program sees, on a real GPU as on the mock driver.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "abi/cuda_abi.h"

namespace {

constexpr int kMaxChunks = 1024;
constexpr std::uint64_t kMiB = 1ULL << 20;

struct Options {
  std::uint64_t chunk_mib = 256;
  int device = 0;
  bool expect_refusal = true;
};

struct Driver {
  decltype(&cuInit) init = nullptr;
  decltype(&cuGetErrorString) get_error_string = nullptr;
  decltype(&cuDeviceGetCount) device_get_count = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetName) device_get_name = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&cuDevicePrimaryCtxRelease_v2) primary_ctx_release = nullptr;
  decltype(&cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&cuMemGetInfo_v2) mem_get_info = nullptr;
  decltype(&cuMemAlloc_v2) mem_alloc = nullptr;
  decltype(&cuMemFree_v2) mem_free = nullptr;
};

const char* error_name(CUresult status) {
  switch (status) {
    case CUDA_SUCCESS:
      return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE:
      return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED:
      return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_NO_DEVICE:
      return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE:
      return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_IMAGE:
      return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_INVALID_CONTEXT:
      return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_FILE_NOT_FOUND:
      return "CUDA_ERROR_FILE_NOT_FOUND";
    case CUDA_ERROR_INVALID_HANDLE:
      return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND:
      return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY:
      return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_LAUNCH_FAILED:
      return "CUDA_ERROR_LAUNCH_FAILED";
    case CUDA_ERROR_NOT_PERMITTED:
      return "CUDA_ERROR_NOT_PERMITTED";
    case CUDA_ERROR_NOT_SUPPORTED:
      return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_UNKNOWN:
      return "CUDA_ERROR_UNKNOWN";
  }
  return "CUDA_ERROR_(unlisted)";
}

void print_failure(const Driver& driver, const char* call, CUresult status) {
  const char* text = nullptr;
  if (driver.get_error_string == nullptr || driver.get_error_string(status, &text) != CUDA_SUCCESS)
    text = nullptr;
  std::printf("demo: %s failed: %s (%d%s%s)\n", call, error_name(status), static_cast<int>(status),
              text != nullptr ? ", " : "", text != nullptr ? text : "");
}

// The runtime asks for its own CUDA version; drivers older than that refuse it with
// CUDA_ERROR_INVALID_VALUE, so fall back to 12.0 like a CUDA 12 runtime would have asked.
template <class Fn>
bool resolve(decltype(&cuGetProcAddress_v2) get_proc_address, const char* name, Fn* out) {
  for (int version : {13000, 12000}) {
    void* function = nullptr;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult status = get_proc_address(name, &function, version, CU_GET_PROC_ADDRESS_DEFAULT, &found);
    if (status == CUDA_SUCCESS && found == CU_GET_PROC_ADDRESS_SUCCESS && function != nullptr) {
      *out = reinterpret_cast<Fn>(function);
      return true;
    }
  }
  std::fprintf(stderr, "demo: cuGetProcAddress_v2 cannot resolve %s\n", name);
  return false;
}

bool load_driver(Driver* driver) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "demo: cannot load libcuda.so.1: %s\n", dlerror());
    return false;
  }
  auto get_proc_address =
      reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(library, "cuGetProcAddress_v2"));
  if (get_proc_address == nullptr) {
    std::fprintf(stderr, "demo: libcuda.so.1 has no cuGetProcAddress_v2 (driver older than CUDA 12)\n");
    return false;
  }
  return resolve(get_proc_address, "cuInit", &driver->init) &&
         resolve(get_proc_address, "cuGetErrorString", &driver->get_error_string) &&
         resolve(get_proc_address, "cuDeviceGetCount", &driver->device_get_count) &&
         resolve(get_proc_address, "cuDeviceGet", &driver->device_get) &&
         resolve(get_proc_address, "cuDeviceGetName", &driver->device_get_name) &&
         resolve(get_proc_address, "cuDevicePrimaryCtxRetain", &driver->primary_ctx_retain) &&
         resolve(get_proc_address, "cuDevicePrimaryCtxRelease", &driver->primary_ctx_release) &&
         resolve(get_proc_address, "cuCtxSetCurrent", &driver->ctx_set_current) &&
         resolve(get_proc_address, "cuMemGetInfo", &driver->mem_get_info) &&
         resolve(get_proc_address, "cuMemAlloc", &driver->mem_alloc) &&
         resolve(get_proc_address, "cuMemFree", &driver->mem_free);
}

bool parse_number(const char* text, std::uint64_t max, std::uint64_t* out) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (*end != '\0' || value > max) return false;
  *out = value;
  return true;
}

void usage() {
  std::printf(
      "usage: gpuslice-demo [--chunk-mib N] [--device N] [--no-expect-refusal]\n"
      "Allocates N MiB chunks (default 256, at most %d) until the driver refuses, frees one chunk\n"
      "and retries. Exit status 0 when the refusal came and the retry after the free succeeded\n"
      "(or, with --no-expect-refusal, when no refusal came either), 1 otherwise.\n",
      kMaxChunks);
}

// 0: parsed, 1: bad arguments, 2: --help shown.
int parse_options(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg(argv[i]);
    std::uint64_t value = 0;
    if (arg == "--help" || arg == "-h") {
      usage();
      return 2;
    }
    if (arg == "--no-expect-refusal") {
      options->expect_refusal = false;
    } else if (arg == "--chunk-mib" &&
               parse_number(i + 1 < argc ? argv[i + 1] : nullptr, 1ULL << 20, &value) && value > 0) {
      options->chunk_mib = value;
      ++i;
    } else if (arg == "--device" && parse_number(i + 1 < argc ? argv[i + 1] : nullptr, 1024, &value)) {
      options->device = static_cast<int>(value);
      ++i;
    } else {
      std::fprintf(stderr, "demo: bad argument '%s'\n", argv[i]);
      usage();
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  int parsed = parse_options(argc, argv, &options);
  if (parsed != 0) return parsed == 2 ? 0 : 1;

  Driver driver;
  if (!load_driver(&driver)) return 1;
  CUresult status = driver.init(0);
  if (status != CUDA_SUCCESS) {
    print_failure(driver, "cuInit", status);
    return 1;
  }
  CUdevice device = 0;
  CUcontext context = nullptr;
  if ((status = driver.device_get(&device, options.device)) != CUDA_SUCCESS) {
    print_failure(driver, "cuDeviceGet", status);
    return 1;
  }
  char name[256] = {};
  if ((status = driver.device_get_name(name, sizeof(name), device)) != CUDA_SUCCESS) {
    print_failure(driver, "cuDeviceGetName", status);
    return 1;
  }
  if ((status = driver.primary_ctx_retain(&context, device)) != CUDA_SUCCESS) {
    print_failure(driver, "cuDevicePrimaryCtxRetain", status);
    return 1;
  }
  if ((status = driver.ctx_set_current(context)) != CUDA_SUCCESS) {
    print_failure(driver, "cuCtxSetCurrent", status);
    return 1;
  }
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if ((status = driver.mem_get_info(&free_bytes, &total_bytes)) != CUDA_SUCCESS) {
    print_failure(driver, "cuMemGetInfo_v2", status);
    return 1;
  }
  std::printf("demo: device %d \"%s\": free %llu MiB of %llu MiB\n", options.device, name,
              static_cast<unsigned long long>(free_bytes / kMiB),
              static_cast<unsigned long long>(total_bytes / kMiB));

  const std::uint64_t chunk_bytes = options.chunk_mib * kMiB;
  std::vector<CUdeviceptr> chunks;
  bool refused = false;
  bool unexpected_failure = false;
  for (int i = 0; i < kMaxChunks; ++i) {
    CUdeviceptr pointer = 0;
    status = driver.mem_alloc(&pointer, chunk_bytes);
    if (status != CUDA_SUCCESS) {
      refused = true;
      unexpected_failure = status != CUDA_ERROR_OUT_OF_MEMORY;
      std::printf("demo: chunk %zu of %llu MiB refused after %llu MiB allocated\n", chunks.size() + 1,
                  static_cast<unsigned long long>(options.chunk_mib),
                  static_cast<unsigned long long>(chunks.size() * options.chunk_mib));
      print_failure(driver, "cuMemAlloc_v2", status);
      break;
    }
    chunks.push_back(pointer);
  }
  const std::uint64_t refused_at = chunks.size() * chunk_bytes;

  bool retry_ok = false;
  if (refused && !unexpected_failure && !chunks.empty()) {
    if (driver.mem_get_info(&free_bytes, &total_bytes) == CUDA_SUCCESS) {
      std::printf("demo: when refused: free %llu MiB of %llu MiB\n",
                  static_cast<unsigned long long>(free_bytes / kMiB),
                  static_cast<unsigned long long>(total_bytes / kMiB));
    }
    if ((status = driver.mem_free(chunks.back())) != CUDA_SUCCESS) {
      print_failure(driver, "cuMemFree_v2", status);
    } else {
      chunks.pop_back();
      CUdeviceptr pointer = 0;
      status = driver.mem_alloc(&pointer, chunk_bytes);
      if (status == CUDA_SUCCESS) {
        chunks.push_back(pointer);
        retry_ok = true;
        std::printf("demo: after freeing one chunk, allocating it again succeeded\n");
      } else {
        print_failure(driver, "cuMemAlloc_v2 (retry after free)", status);
      }
    }
  }
  const std::size_t allocated_ok =
      refused ? static_cast<std::size_t>(refused_at / chunk_bytes) : chunks.size();

  bool frees_ok = true;
  for (CUdeviceptr pointer : chunks) {
    if ((status = driver.mem_free(pointer)) != CUDA_SUCCESS) {
      print_failure(driver, "cuMemFree_v2", status);
      frees_ok = false;
    }
  }
  if ((status = driver.primary_ctx_release(device)) != CUDA_SUCCESS) {
    print_failure(driver, "cuDevicePrimaryCtxRelease_v2", status);
  }

  const char* retry_text = retry_ok ? "ok" : (refused ? "failed" : "skipped");
  if (refused) {
    std::printf("demo: quota_total=%llu allocated_ok=%zu refused_at=%llu retry_after_free=%s\n",
                static_cast<unsigned long long>(total_bytes), allocated_ok,
                static_cast<unsigned long long>(refused_at), retry_text);
  } else {
    std::printf("demo: quota_total=%llu allocated_ok=%zu refused_at=none retry_after_free=%s\n",
                static_cast<unsigned long long>(total_bytes), allocated_ok, retry_text);
  }

  bool behaved = frees_ok && !unexpected_failure && (refused ? retry_ok : !options.expect_refusal);
  return behaved ? 0 : 1;
}
