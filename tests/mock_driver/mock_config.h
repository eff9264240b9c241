// The simulated machine, read from GPUSLICE_MOCK_* variables (docs/mock-driver.md lists them).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuslice::mock {

inline constexpr unsigned kMaxDevices = 16;
inline constexpr std::size_t kUuidLength = 48;  // "GPU-" + 36 characters + NUL fits with room
inline constexpr std::uint64_t kDefaultMemoryBytes = 85899345920ULL;  // 80 GiB
inline constexpr std::uint64_t kDefaultContextBytes = 256ULL << 20;
inline constexpr std::uint64_t kDefaultKernelNs = 5000;
inline constexpr std::uint64_t kDefaultQueueDepth = 1024;
inline constexpr std::uint64_t kMaxQueueDepth = 1u << 20;
inline constexpr int kDefaultDriverVersion = 13000;
inline constexpr const char* kDeviceName = "gpuslice mock GPU";
inline constexpr int kMockSm = 90;  // compute capability 9.0, as an H100/H200

struct MockConfig {
  unsigned device_count = 2;
  std::uint64_t total_bytes[kMaxDevices] = {};
  char uuid[kMaxDevices][kUuidLength] = {};
  std::uint64_t context_bytes = kDefaultContextBytes;
  // What every further context of a process on a device takes (a real one did: 64 contexts took
  // 37.8 GiB on an H200, about 590 MiB each); unset: context_bytes.
  std::uint64_t further_context_bytes = ~0ULL;
  // What a context takes beyond that at its first launch (launch resources of its own: about
  // 140 MiB per context on an H200 with driver 580); given back when the context is destroyed.
  std::uint64_t first_launch_bytes = 0;
  std::uint64_t kernel_ns = kDefaultKernelNs;
  // A device-to-device copy takes bytes / this many seconds (0: at once), as a real one takes time
  // (about 1.5 TB/s on an H200): reclaim's moves can then be caught half-way.
  std::uint64_t dtod_bytes_per_s = 0;
  // GPUSLICE_MOCK_HOST_PIN_BYTES_PER_S: cuMemCreate of host memory takes its time (the driver
  // allocates and pins every page: about 2 GB/s on an H200 host); 0: instant.
  std::uint64_t host_pin_bytes_per_s = 0;
  // The resident-thread capacity the stack limit is reserved for (an H100 SXM: 132 x 2048).
  std::uint64_t sm_count = 132;
  std::uint64_t threads_per_sm = 2048;
  std::uint64_t queue_depth = kDefaultQueueDepth;  // kernels in flight per device before a launch blocks
  int driver_version = kDefaultDriverVersion;
  std::uint64_t fake_clock_start_ns = 0;  // 0: the real CLOCK_MONOTONIC
  // Added to every pid NVML reports: a process in a PID namespace whose NVML shows host pids.
  std::uint64_t nvml_pid_offset = 0;
  // What nvmlSystemGetDriverVersion reports (gpuslice reads nvidia-smi's process table only on 580).
  char nvml_driver_version[32] = "580.00.00-mock";
  char state_dir[1024] = {};
  // The calling thread's default stream says it is being captured into a graph (the mock captures
  // nothing): what a gate must then leave alone.
  bool per_thread_capturing = false;
  // An MPS client (docs/mock-driver.md): CUDA_MPS_PIPE_DIRECTORY names a directory holding a
  // `control` entry, as where a control daemon runs. The MPS variables it read at cuInit; the
  // pinned-memory limit is then enforced per process and device (0: none), as the MPS server does.
  bool mps = false;
  std::uint64_t mps_pinned_limit[kMaxDevices] = {};
  char mps_pipe_dir[512] = {};
  char mps_pinned_text[256] = {};
  char mps_priority[16] = {};
  char mps_threads[16] = {};
  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE as a share of the SMs (100: all): a kernel of an MPS client
  // runs 100/share times as long, as a kernel that would fill the GPU does on that share of its SMs.
  unsigned mps_thread_share = 100;
};

// Reads the environment. On a malformed variable it logs (if enabled) and returns false: the mock
// then refuses to initialise rather than simulate a machine nobody asked for.
bool load_config(MockConfig* config);

// "GPU-6d6f636b-0000-4000-8000-00000000000<i>": stable across runs so tests can hard-code it.
void default_uuid(unsigned index, char (&out)[kUuidLength]);

// Accepts exactly "GPU-" followed by 8-4-4-4-12 hex digits.
bool is_valid_uuid(const char* text);

// The 16 bytes behind a valid UUID string (CUuuid layout).
void uuid_bytes(const char* text, unsigned char (&out)[16]);

}  // namespace gpuslice::mock
