// A CUDA "application" for the reclaim end-to-end tests (reclaim_e2e_test.cpp), linked to libcuda
// like any -lcuda program. Roles:
//   borrower --count N --mib M --seconds S [--stop-file F]: N allocations of M MiB, each filled with
//     its own pattern, checked every 200 ms (20 with --rewrite) until S seconds passed or F exists, then
//     freed; prints allocated=, checks=, mismatches=, freed=. With --rewrite 1 each round writes new patterns
//     first.
//   asker --mib M --hold-ms H: one allocation of M MiB (timed), written and read back, held H ms,
//     freed; prints ask_code=, ask_ms=, ask_identical=, asker_freed=.
//   writer --count N --mib M --seconds S [--stop-file F]: N allocations of M MiB; a second thread
//     rewrites them in epochs, each writing every 16 KiB stripe once by a memset (1D/2D,
//     8/16/32-bit, sync and stream-ordered), a 2D or 3D copy from host memory or a peer copy
//     (linear or 3D) from the next allocation, then reading all back; at the end every allocation
//     is checked once more; prints allocated=, writes=, kinds=, failed=, mismatches= (allocations
//     found wrong after an epoch), final_mismatches=, freed=.
//     --stripe-kib K (a multiple of 16, default 16) sets the stripe; --first-kind N writes only by
//     the kinds from N on (21: the stream memory operations and the batched copies).
//   filler --count N --mib M --seconds S [--stop-file F]: N allocations of M MiB, never written,
//     held until S seconds passed or F exists; prints filled=.
//   unmovable --mib M: pitched, managed and cuMemAlloc allocations of M MiB each, in that order,
//     printing each result code (pitch_code=, managed_code=, alloc_code=), then holds until killed.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "abi/cuda_abi.h"

namespace {

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void fill(std::vector<unsigned char>& bytes, unsigned seed) {
  std::uint64_t state = seed * 2654435761ULL + 1;
  for (std::size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    std::memcpy(&bytes[i], &state, 8);
  }
}

int borrower(int count, std::size_t bytes, int seconds, const std::string& stop_file, bool rewrite) {
  // The context's footprint is booked by the library's watcher within 100 ms: what is within the
  // guarantee then does not depend on how fast this process allocates.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<CUdeviceptr> ptrs;
  std::vector<std::vector<unsigned char>> patterns;
  for (int i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, bytes);
    if (r != CUDA_SUCCESS) {
      std::printf("alloc_code=%d at=%d\n", r, i);
      return 1;
    }
    patterns.emplace_back(bytes);
    fill(patterns.back(), static_cast<unsigned>(i));
    if (cuMemcpyHtoD_v2(p, patterns.back().data(), bytes) != CUDA_SUCCESS) return 1;
    ptrs.push_back(p);
  }
  std::printf("allocated=%d\n", count);
  std::fflush(stdout);
  std::vector<unsigned char> seen(bytes);
  long checks = 0, mismatches = 0;
  const long long end = now_ms() + seconds * 1000LL;
  unsigned round = 0;
  while (now_ms() < end && (stop_file.empty() || access(stop_file.c_str(), F_OK) != 0)) {
    // --rewrite: each round first writes every buffer anew (a write lost to a move shows below).
    for (int i = 0; rewrite && i < count; ++i) {
      auto& pattern = patterns[static_cast<std::size_t>(i)];
      fill(pattern, static_cast<unsigned>(i) + 1000U * ++round);
      if (cuMemcpyHtoD_v2(ptrs[static_cast<std::size_t>(i)], pattern.data(), bytes) != CUDA_SUCCESS)
        ++mismatches;
    }
    for (int i = 0; i < count; ++i) {
      if (cuMemcpyDtoH_v2(seen.data(), ptrs[static_cast<std::size_t>(i)], bytes) != CUDA_SUCCESS ||
          std::memcmp(seen.data(), patterns[static_cast<std::size_t>(i)].data(), bytes) != 0)
        ++mismatches;
      ++checks;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rewrite ? 20 : 200));
  }
  std::printf("checks=%ld\nmismatches=%ld\n", checks, mismatches);
  int freed = 0;
  for (CUdeviceptr p : ptrs) freed += cuMemFree_v2(p) == CUDA_SUCCESS ? 1 : 0;
  std::printf("freed=%d\n", freed);
  return 0;
}

// The writes of writer(): every memset, every copy with a shape, between contexts or batched, and
// every stream memory operation that the library holds during a move, each writing one 16 KiB
// stripe of an allocation (rows of 4096 bytes; a value write its first bytes): small, so that the
// epochs' checks (held during a move) take little of the writer's time.
constexpr int kWriteKinds = 26;
constexpr std::size_t kPitch = 4096;
std::size_t g_stripe = 16 * 1024;  // --stripe-kib (tests/gpu/reclaim_writes.sh writes larger ones)
std::size_t g_rows = g_stripe / kPitch;
int g_first_kind = 0;  // --first-kind: only the kinds from this one on

template <class T>
void expect_fill(unsigned char* expected, T value) {
  for (std::size_t i = 0; i + sizeof(T) <= g_stripe; i += sizeof(T))
    std::memcpy(expected + i, &value, sizeof(T));
}

CUDA_MEMCPY2D host_to_device_2d(const unsigned char* from, CUdeviceptr to) {
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = from;
  c.srcPitch = kPitch;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = to;
  c.dstPitch = kPitch;
  c.WidthInBytes = kPitch;
  c.Height = g_rows;
  return c;
}

// A stripe as 2 slices of 2 rows.
template <class Copy3D>
void stripe_shape(Copy3D& c) {
  c.srcPitch = c.dstPitch = c.WidthInBytes = kPitch;
  c.srcHeight = c.dstHeight = c.Height = g_rows / 2;
  c.Depth = 2;
}

CUDA_MEMCPY3D host_to_device_3d(const unsigned char* from, CUdeviceptr to) {
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = from;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = to;
  stripe_shape(c);
  return c;
}

CUDA_MEMCPY3D_PEER device_to_device_3d(CUcontext ctx, CUdeviceptr from, CUdeviceptr to) {
  CUDA_MEMCPY3D_PEER c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = from;
  c.srcContext = ctx;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = to;
  c.dstContext = ctx;
  stripe_shape(c);
  return c;
}

// Writes stripe `stripe` of allocation `i` by write kind `kind` (a peer copy takes it from the
// next allocation), and what it should then hold into `expected`.
CUresult write_stripe(int kind, unsigned seed, std::size_t i, std::size_t stripe,
                      const std::vector<CUdeviceptr>& ptrs, std::vector<std::vector<unsigned char>>& expected,
                      CUcontext ctx, CUstream stream) {
  const std::size_t at = stripe * g_stripe;
  const CUdeviceptr p = ptrs[i] + at;
  unsigned char* want = expected[i].data() + at;
  const auto v8 = static_cast<unsigned char>(seed * 31 + 1);
  const auto v16 = static_cast<unsigned short>(seed * 7919 + 3);
  const auto v32 = static_cast<unsigned int>(seed * 2654435761U + 5);
  const std::size_t next = (i + 1) % ptrs.size();
  CUresult r = CUDA_SUCCESS;
  switch (kind) {
    case 0:
      r = cuMemsetD8_v2(p, v8, g_stripe);
      expect_fill(want, v8);
      break;
    case 1:
      r = cuMemsetD16_v2(p, v16, g_stripe / 2);
      expect_fill(want, v16);
      break;
    case 2:
      r = cuMemsetD32_v2(p, v32, g_stripe / 4);
      expect_fill(want, v32);
      break;
    case 3:
      r = cuMemsetD2D8_v2(p, kPitch, v8, kPitch, g_rows);
      expect_fill(want, v8);
      break;
    case 4:
      r = cuMemsetD2D16_v2(p, kPitch, v16, kPitch / 2, g_rows);
      expect_fill(want, v16);
      break;
    case 5:
      r = cuMemsetD2D32_v2(p, kPitch, v32, kPitch / 4, g_rows);
      expect_fill(want, v32);
      break;
    case 6:
      r = cuMemsetD8Async(p, v8, g_stripe, stream);
      expect_fill(want, v8);
      break;
    case 7:
      r = cuMemsetD16Async(p, v16, g_stripe / 2, stream);
      expect_fill(want, v16);
      break;
    case 8:
      r = cuMemsetD32Async(p, v32, g_stripe / 4, stream);
      expect_fill(want, v32);
      break;
    case 9:
      r = cuMemsetD2D8Async(p, kPitch, v8, kPitch, g_rows, stream);
      expect_fill(want, v8);
      break;
    case 10:
      r = cuMemsetD2D16Async(p, kPitch, v16, kPitch / 2, g_rows, stream);
      expect_fill(want, v16);
      break;
    case 11:
      r = cuMemsetD2D32Async(p, kPitch, v32, kPitch / 4, g_rows, stream);
      expect_fill(want, v32);
      break;
    case 12:
    case 13:
    case 14:
    case 15:
    case 16: {
      std::vector<unsigned char> source(g_stripe);
      fill(source, seed);
      if (kind <= 14) {
        const CUDA_MEMCPY2D c = host_to_device_2d(source.data(), p);
        r = kind == 12   ? cuMemcpy2D_v2(&c)
            : kind == 13 ? cuMemcpy2DUnaligned_v2(&c)
                         : cuMemcpy2DAsync_v2(&c, stream);
      } else {
        const CUDA_MEMCPY3D c = host_to_device_3d(source.data(), p);
        r = kind == 15 ? cuMemcpy3D_v2(&c) : cuMemcpy3DAsync_v2(&c, stream);
      }
      std::memcpy(want, source.data(), g_stripe);
      break;
    }
    case 17:
    case 18:
    case 19:
    case 20: {
      const CUdeviceptr from = ptrs[next] + at;
      if (kind == 17) r = cuMemcpyPeer(p, ctx, from, ctx, g_stripe);
      if (kind == 18) r = cuMemcpyPeerAsync(p, ctx, from, ctx, g_stripe, stream);
      const CUDA_MEMCPY3D_PEER c = device_to_device_3d(ctx, from, p);
      if (kind == 19) r = cuMemcpy3DPeer(&c);
      if (kind == 20) r = cuMemcpy3DPeerAsync(&c, stream);
      std::memcpy(want, expected[next].data() + at, g_stripe);
      break;
    }
    case 21:
      r = cuStreamWriteValue32_v2(stream, p, v32, 0);
      std::memcpy(want, &v32, sizeof(v32));
      break;
    case 22: {
      const cuuint64_t v64 = (static_cast<cuuint64_t>(v32) << 32) | v16;
      r = cuStreamWriteValue64_v2(stream, p, v64, 0);
      std::memcpy(want, &v64, sizeof(v64));
      break;
    }
    case 23: {
      CUstreamBatchMemOpParams ops[2] = {};
      ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
      ops[0].writeValue.address = p;
      ops[0].writeValue.value = v32;
      ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
      ops[1].writeValue.address = p + 8;
      ops[1].writeValue.value64 = ~static_cast<cuuint64_t>(v32);
      r = cuStreamBatchMemOp_v2(stream, 2, ops, 0);
      std::memcpy(want, &ops[0].writeValue.value, sizeof(cuuint32_t));
      std::memcpy(want + 8, &ops[1].writeValue.value64, sizeof(cuuint64_t));
      break;
    }
    case 24:
    case 25: {  // batched copies from the next allocation (device to device: any platform)
      CUdeviceptr from = ptrs[next] + at;
      CUdeviceptr to = p;
      if (kind == 24) {
        size_t size = g_stripe, first = 0;
        CUmemcpyAttributes attrs{};
        attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        r = cuMemcpyBatchAsync_v2(&to, &from, &size, 1, &attrs, &first, 1, stream);
      } else {
        CUDA_MEMCPY3D_BATCH_OP op{};
        op.src.type = op.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
        op.src.op.ptr.ptr = from;
        op.dst.op.ptr.ptr = to;
        op.src.op.ptr.rowLength = op.dst.op.ptr.rowLength = kPitch;
        op.src.op.ptr.layerHeight = op.dst.op.ptr.layerHeight = g_rows / 2;
        op.src.op.ptr.locHint.type = op.dst.op.ptr.locHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
        op.extent = {kPitch, g_rows / 2, 2};
        op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        r = cuMemcpy3DBatchAsync_v2(1, &op, 0, stream);
      }
      std::memcpy(want, expected[next].data() + at, g_stripe);
      break;
    }
    default:
      break;
  }
  return r;
}

// Allocations whose contents differ from `expected` (or cannot be read).
long check_all(const std::vector<CUdeviceptr>& ptrs, const std::vector<std::vector<unsigned char>>& expected,
               const char* when) {
  long bad = 0;
  std::vector<unsigned char> seen(expected.empty() ? 0 : expected[0].size());
  for (std::size_t i = 0; i < ptrs.size(); ++i) {
    if (cuMemcpyDtoH_v2(seen.data(), ptrs[i], seen.size()) != CUDA_SUCCESS || seen != expected[i]) {
      ++bad;
      std::fprintf(stderr, "%s: allocation %zu does not hold what was written\n", when, i);
    }
  }
  return bad;
}

int writer(int count, std::size_t bytes, int seconds, const std::string& stop_file, CUcontext ctx) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // as borrower()
  std::vector<CUdeviceptr> ptrs;
  std::vector<std::vector<unsigned char>> expected;
  for (int i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    if (CUresult r = cuMemAlloc_v2(&p, bytes); r != CUDA_SUCCESS) {
      std::printf("alloc_code=%d at=%d\n", r, i);
      return 1;
    }
    expected.emplace_back(bytes, 0);
    if (cuMemsetD8_v2(p, 0, bytes) != CUDA_SUCCESS) return 1;
    ptrs.push_back(p);
  }
  std::printf("allocated=%d\n", count);
  std::fflush(stdout);
  std::atomic<bool> stop{false};
  long writes = 0, failed = 0, mismatches = 0;
  int kinds_seen = 0;
  // Epochs: each writes every stripe of every allocation once (so a write lost to a move is not
  // written over before the check), stripe by stripe across the allocations, then checks them all.
  std::thread writes_thread([&] {
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return;
    CUstream stream = nullptr;
    if (cuStreamCreate(&stream, 0) != CUDA_SUCCESS) return;
    bool used[kWriteKinds] = {};
    for (unsigned epoch = 1; !stop.load(); ++epoch) {
      for (std::size_t stripe = 0; stripe < bytes / g_stripe; ++stripe) {
        for (std::size_t i = 0; i < ptrs.size(); ++i) {
          const int kind =
              g_first_kind + static_cast<int>((epoch + stripe + i) % (kWriteKinds - g_first_kind));
          used[kind] = true;
          ++writes;
          const unsigned seed = epoch * 1000003U + static_cast<unsigned>(stripe * 131 + i);
          if (write_stripe(kind, seed, i, stripe, ptrs, expected, ctx, stream) != CUDA_SUCCESS) {
            ++failed;
            std::fprintf(stderr, "write kind %d to allocation %zu failed\n", kind, i);
          }
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (cuStreamSynchronize(stream) != CUDA_SUCCESS) ++failed;
      mismatches += check_all(ptrs, expected, "after an epoch");
    }
    for (bool u : used) kinds_seen += u ? 1 : 0;
  });
  const long long end = now_ms() + seconds * 1000LL;
  while (now_ms() < end && (stop_file.empty() || access(stop_file.c_str(), F_OK) != 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop = true;
  writes_thread.join();
  const long final_mismatches = check_all(ptrs, expected, "at the end");
  std::printf("writes=%ld\nkinds=%d\nfailed=%ld\nmismatches=%ld\nfinal_mismatches=%ld\n", writes, kinds_seen,
              failed, mismatches, final_mismatches);
  int freed = 0;
  for (CUdeviceptr p : ptrs) freed += cuMemFree_v2(p) == CUDA_SUCCESS ? 1 : 0;
  std::printf("freed=%d\n", freed);
  return 0;
}

int filler(int count, std::size_t bytes, int seconds, const std::string& stop_file) {
  std::vector<CUdeviceptr> ptrs;
  for (int i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    if (CUresult r = cuMemAlloc_v2(&p, bytes); r != CUDA_SUCCESS) {
      std::printf("alloc_code=%d at=%d\n", r, i);
      return 1;
    }
    ptrs.push_back(p);
  }
  std::printf("filled=%d\n", count);
  std::fflush(stdout);
  const long long end = now_ms() + seconds * 1000LL;
  while (now_ms() < end && (stop_file.empty() || access(stop_file.c_str(), F_OK) != 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (CUdeviceptr p : ptrs) cuMemFree_v2(p);
  return 0;
}

int asker(std::size_t bytes, int hold_ms) {
  CUdeviceptr p = 0;
  const long long t0 = now_ms();
  const CUresult r = cuMemAlloc_v2(&p, bytes);
  std::printf("ask_code=%d\nask_ms=%lld\n", r, now_ms() - t0);
  std::fflush(stdout);
  if (r != CUDA_SUCCESS) return 0;
  std::vector<unsigned char> pattern(bytes), seen(bytes);
  fill(pattern, 99);
  cuMemcpyHtoD_v2(p, pattern.data(), bytes);
  cuMemcpyDtoH_v2(seen.data(), p, bytes);
  std::printf("ask_identical=%d\n", pattern == seen ? 1 : 0);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  std::printf("asker_freed=%d\n", cuMemFree_v2(p) == CUDA_SUCCESS ? 1 : 0);
  std::fflush(stdout);
  return 0;
}

int unmovable(std::size_t bytes) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // as borrower()
  CUdeviceptr pitched = 0, managed = 0, plain = 0;
  std::size_t pitch = 0;
  std::printf("pitch_code=%d\n", cuMemAllocPitch_v2(&pitched, &pitch, bytes / 1024, 1024, 4));
  std::printf("managed_code=%d\n", cuMemAllocManaged(&managed, bytes, 1));
  std::printf("alloc_code=%d\n", cuMemAlloc_v2(&plain, bytes));
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string role = argc > 1 ? argv[1] : "";
  std::string stop_file;
  bool rewrite = false;
  int count = 1, seconds = 1, hold_ms = 0;
  std::size_t mib = 64;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const long value = std::atol(argv[i + 1]);
    if (key == "--stop-file") stop_file = argv[i + 1];
    if (key == "--rewrite") rewrite = value != 0;
    if (key == "--count") count = static_cast<int>(value);
    if (key == "--mib") mib = static_cast<std::size_t>(value);
    if (key == "--seconds") seconds = static_cast<int>(value);
    if (key == "--hold-ms") hold_ms = static_cast<int>(value);
    if (key == "--first-kind" && value >= 0 && value < kWriteKinds) g_first_kind = static_cast<int>(value);
    if (key == "--stripe-kib" && value >= 16 && value % 16 == 0) {
      g_stripe = static_cast<std::size_t>(value) << 10;
      g_rows = g_stripe / kPitch;
    }
  }
  if (cuInit(0) != CUDA_SUCCESS) return 3;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
    return 3;
  const std::size_t bytes = mib << 20;
  if (role == "borrower") return borrower(count, bytes, seconds, stop_file, rewrite);
  if (role == "asker") return asker(bytes, hold_ms);
  if (role == "unmovable") return unmovable(bytes);
  if (role == "writer") return writer(count, bytes, seconds, stop_file, ctx);
  if (role == "filler") return filler(count, bytes, seconds, stop_file);
  std::fprintf(stderr,
               "usage: reclaim_app borrower|asker|unmovable|writer|filler [--count N] [--mib M] ...\n");
  return 2;
}
