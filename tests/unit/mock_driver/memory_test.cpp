// Devices, contexts and every allocation path of the simulated libcuda.
#include <sys/mman.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "mock_fixture.h"

namespace gpuslice::mock::testing {
namespace {

using MemoryTest = MockDriverTest;

TEST_F(MemoryTest, CallsBeforeCuInitReportNotInitialized) {
  int count = 0;
  CUdeviceptr pointer = 0;
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuMemAlloc_v2(&pointer, kMiB), CUDA_ERROR_NOT_INITIALIZED);
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc_v2(&pointer, kMiB), CUDA_ERROR_INVALID_CONTEXT);  // no current context yet
  EXPECT_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemoryTest, DevicesFollowTheEnvironment) {
  set_env({{"GPUSLICE_MOCK_DEVICES", "3"},
           {"GPUSLICE_MOCK_MEMORY", "0=1073741824,2=2147483648"},
           {"GPUSLICE_MOCK_UUIDS", "GPU-00000000-1111-2222-3333-444444444444"}});
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 3);
  size_t total = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, kGiB);
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, 1), CUDA_SUCCESS);
  EXPECT_EQ(total, 85899345920ULL);
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, 2), CUDA_SUCCESS);
  EXPECT_EQ(total, 2 * kGiB);
  EXPECT_EQ(cuDeviceTotalMem_v2(&total, 3), CUDA_ERROR_INVALID_DEVICE);

  char name[64] = {};
  ASSERT_EQ(cuDeviceGetName(name, sizeof(name), 1), CUDA_SUCCESS);
  EXPECT_STREQ(name, "gpuslice mock GPU");
  CUuuid uuid{};
  ASSERT_EQ(cuDeviceGetUuid_v2(&uuid, 0), CUDA_SUCCESS);
  const unsigned char given[16] = {0,    0,    0,    0,    0x11, 0x11, 0x22, 0x22,
                                   0x33, 0x33, 0x44, 0x44, 0x44, 0x44, 0x44, 0x44};
  EXPECT_EQ(std::memcmp(uuid.bytes, given, 16), 0);
  ASSERT_EQ(cuDeviceGetUuid(&uuid, 1), CUDA_SUCCESS);  // default: GPU-6d6f636b-0000-4000-8000-000000000001
  const unsigned char fallback[16] = {0x6d, 0x6f, 0x63, 0x6b, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 0x01};
  EXPECT_EQ(std::memcmp(uuid.bytes, fallback, 16), 0);
}

TEST_F(MemoryTest, MalformedEnvironmentRefusesToInitialise) {
  set_env({{"GPUSLICE_MOCK_MEMORY", "12Gi"}});
  EXPECT_EQ(cuInit(0), CUDA_ERROR_INVALID_VALUE);
  set_env({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_UUIDS", "GPU-not-a-uuid"}});
  EXPECT_EQ(cuInit(0), CUDA_ERROR_INVALID_VALUE);
  set_env({{"GPUSLICE_MOCK_UUIDS", ""}, {"GPUSLICE_MOCK_DEVICES", "0"}});
  EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
  set_env({{"GPUSLICE_MOCK_DEVICES", "17"}});
  EXPECT_EQ(cuInit(0), CUDA_ERROR_INVALID_VALUE);
}

// The first context's footprint once per process and device; each further context its own.
TEST_F(MemoryTest, ContextFootprintIsChargedOncePerProcessAndDevice) {
  CUcontext primary = start({{"GPUSLICE_MOCK_MEMORY", "1073741824"},
                             {"GPUSLICE_MOCK_CONTEXT_BYTES", "67108864"},
                             {"GPUSLICE_MOCK_FURTHER_CONTEXT_BYTES", "0"}});
  EXPECT_EQ(free_bytes(), kGiB - 64 * kMiB);
  EXPECT_EQ(nvml_used(0), 64 * kMiB);
  EXPECT_EQ(nvml_used(1), 0u);

  CUcontext created = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&created, 0, 0), CUDA_SUCCESS);
  CUcontext current = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, created);
  EXPECT_EQ(free_bytes(), kGiB - 64 * kMiB);
  ASSERT_EQ(cuCtxDestroy_v2(created), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);
  EXPECT_EQ(cuCtxDestroy_v2(primary), CUDA_ERROR_INVALID_CONTEXT);  // primary: release, not destroy

  CUcontext again = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  EXPECT_EQ(again, primary);
  ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(nvml_used(0), 64 * kMiB);
  ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(nvml_used(0), 0u);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSetCurrent(primary), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(MemoryTest, EveryFurtherContextTakesItsOwnFootprintUntilDestroyed) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"},
         {"GPUSLICE_MOCK_CONTEXT_BYTES", "67108864"},
         {"GPUSLICE_MOCK_FURTHER_CONTEXT_BYTES", "100663296"}});
  CUcontext created[3] = {};
  for (CUcontext& c : created) ASSERT_EQ(cuCtxCreate_v2(&c, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB - 64 * kMiB - 3 * 96 * kMiB);
  EXPECT_EQ(nvml_used(0), 64 * kMiB + 3 * 96 * kMiB);
  CUgreenCtx green = nullptr;
  ASSERT_EQ(cuGreenCtxCreate(&green, nullptr, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(nvml_used(0), 64 * kMiB + 4 * 96 * kMiB);
  ASSERT_EQ(cuGreenCtxDestroy(green), CUDA_SUCCESS);
  for (CUcontext c : created) ASSERT_EQ(cuCtxDestroy_v2(c), CUDA_SUCCESS);
  EXPECT_EQ(nvml_used(0), 64 * kMiB);
}

TEST_F(MemoryTest, ContextsArePerThread) {
  CUcontext context = start();
  CUcontext seen_by_other = context;
  CUdevice device_seen = -1;
  CUresult without_context = CUDA_SUCCESS;
  std::thread other([&] {
    cuCtxGetCurrent(&seen_by_other);
    without_context = cuCtxGetDevice(&device_seen);
    cuCtxSetCurrent(context);
    cuCtxGetDevice(&device_seen);
  });
  other.join();
  EXPECT_EQ(seen_by_other, nullptr);
  EXPECT_EQ(without_context, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(device_seen, 0);
}

TEST_F(MemoryTest, MemoryIsRealAndAccounted) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  CUdeviceptr pointer = 0;
  ASSERT_EQ(cuMemAlloc_v2(&pointer, 100 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB - 100 * kMiB);
  std::vector<unsigned char> written(4096), read(4096);
  for (size_t i = 0; i < written.size(); ++i) written[i] = static_cast<unsigned char>(i * 7);
  ASSERT_EQ(cuMemcpyHtoD_v2(pointer + 50 * kMiB, written.data(), written.size()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(read.data(), pointer + 50 * kMiB, read.size()), CUDA_SUCCESS);
  EXPECT_EQ(written, read);
  ASSERT_EQ(cuMemFree_v2(pointer), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB);
}

TEST_F(MemoryTest, InvalidFreesAreRejected) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  CUdeviceptr pointer = 0;
  ASSERT_EQ(cuMemAlloc_v2(&pointer, kMiB), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(pointer + 4096), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemFree_v2(pointer), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(pointer), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeAsync(pointer, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemRelease(12345), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAlloc_v2(&pointer, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(free_bytes(), kGiB);
}

// One allocation API under test: allocates `bytes` (or as close as its shape allows, reported
// through *charged) and frees what it allocated.
struct AllocationApi {
  const char* name;
  std::function<CUresult(std::uint64_t bytes, std::uintptr_t* handle)> allocate;
  std::function<CUresult(std::uintptr_t handle)> release;
};

class EveryAllocationApi : public MockDriverTest, public ::testing::WithParamInterface<AllocationApi> {};

CUmemoryPool g_pool = nullptr;  // created per test by the fixture body

std::vector<AllocationApi> allocation_apis() {
  auto free_linear = [](std::uintptr_t handle) { return cuMemFree_v2(handle); };
  auto free_async = [](std::uintptr_t handle) { return cuMemFreeAsync(handle, nullptr); };
  auto free_async_ptsz = [](std::uintptr_t handle) { return cuMemFreeAsync_ptsz(handle, nullptr); };
  auto destroy_array = [](std::uintptr_t handle) {
    return cuArrayDestroy(reinterpret_cast<CUarray>(handle));
  };
  return {
      {"cuMemAlloc_v2",
       [](std::uint64_t bytes, std::uintptr_t* handle) {
         CUdeviceptr pointer = 0;
         CUresult status = cuMemAlloc_v2(&pointer, bytes);
         *handle = pointer;
         return status;
       },
       free_linear},
      {"cuMemAllocPitch_v2",
       [](std::uint64_t bytes, std::uintptr_t* handle) {
         CUdeviceptr pointer = 0;
         size_t pitch = 0;
         CUresult status = cuMemAllocPitch_v2(&pointer, &pitch, kMiB, bytes / kMiB, 4);
         *handle = pointer;
         return status;
       },
       free_linear},
      {"cuMemAllocManaged",
       [](std::uint64_t bytes, std::uintptr_t* handle) {
         CUdeviceptr pointer = 0;
         CUresult status = cuMemAllocManaged(&pointer, bytes, 1);
         *handle = pointer;
         return status;
       },
       free_linear},
      {"cuMemAllocAsync",
       [](std::uint64_t bytes, std::uintptr_t* handle) {
         CUdeviceptr pointer = 0;
         CUresult status = cuMemAllocAsync(&pointer, bytes, nullptr);
         *handle = pointer;
         return status;
       },
       free_async},
      {"cuMemAllocAsync_ptsz",
       [](std::uint64_t bytes, std::uintptr_t* handle) {
         CUdeviceptr pointer = 0;
         CUresult status = cuMemAllocAsync_ptsz(&pointer, bytes, nullptr);
         *handle = pointer;
         return status;
       },
       free_async_ptsz},
      {"cuMemAllocFromPoolAsync",
       [](std::uint64_t bytes, std::uintptr_t* handle) {
         CUdeviceptr pointer = 0;
         CUresult status = cuMemAllocFromPoolAsync(&pointer, bytes, g_pool, nullptr);
         *handle = pointer;
         return status;
       },
       free_async},
      {"cuMemAllocFromPoolAsync_ptsz",
       [](std::uint64_t bytes, std::uintptr_t* handle) {
         CUdeviceptr pointer = 0;
         CUresult status = cuMemAllocFromPoolAsync_ptsz(&pointer, bytes, g_pool, nullptr);
         *handle = pointer;
         return status;
       },
       free_async},
      {"cuMemCreate",
       [](std::uint64_t bytes, std::uintptr_t* handle) {
         CUmemAllocationProp prop{};
         prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
         prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
         CUmemGenericAllocationHandle created = 0;
         CUresult status = cuMemCreate(&created, bytes, &prop, 0);
         *handle = created;
         return status;
       },
       [](std::uintptr_t handle) { return cuMemRelease(handle); }},
      {"cuArrayCreate_v2",
       [](std::uint64_t bytes, std::uintptr_t* handle) {
         CUDA_ARRAY_DESCRIPTOR description{kMiB / 16, bytes / kMiB, CU_AD_FORMAT_FLOAT, 4};  // 16-byte texels
         CUarray array = nullptr;
         CUresult status = cuArrayCreate_v2(&array, &description);
         *handle = reinterpret_cast<std::uintptr_t>(array);
         return status;
       },
       destroy_array},
      {"cuArray3DCreate_v2",
       [](std::uint64_t bytes, std::uintptr_t* handle) {
         CUDA_ARRAY3D_DESCRIPTOR description{kMiB / 2, 2, bytes / kMiB / 2, CU_AD_FORMAT_HALF, 1, 0};
         CUarray array = nullptr;
         CUresult status = cuArray3DCreate_v2(&array, &description);
         *handle = reinterpret_cast<std::uintptr_t>(array);
         return status;
       },
       destroy_array},
      {"cuMipmappedArrayCreate",
       [](std::uint64_t bytes, std::uintptr_t* handle) {
         // One level: the whole array; mip chains are covered by MipmapLevelsAreSummed.
         CUDA_ARRAY3D_DESCRIPTOR description{kMiB, bytes / kMiB, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
         CUmipmappedArray array = nullptr;
         CUresult status = cuMipmappedArrayCreate(&array, &description, 1);
         *handle = reinterpret_cast<std::uintptr_t>(array);
         return status;
       },
       [](std::uintptr_t handle) {
         return cuMipmappedArrayDestroy(reinterpret_cast<CUmipmappedArray>(handle));
       }},
  };
}

TEST_P(EveryAllocationApi, ChargesTheDeviceAndRefusesBeyondIt) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  struct PoolProps {
    CUmemAllocationType type;
    CUmemAllocationHandleType handle_types;
    CUmemLocation location;
    void* security;
    size_t max_size;
    unsigned short usage;
    unsigned char reserved[54];
  } props{CU_MEM_ALLOCATION_TYPE_PINNED,
          CU_MEM_HANDLE_TYPE_NONE,
          {CU_MEM_LOCATION_TYPE_DEVICE, 0},
          nullptr,
          0,
          0,
          {}};
  ASSERT_EQ(cuMemPoolCreate(&g_pool, reinterpret_cast<const CUmemPoolProps*>(&props)), CUDA_SUCCESS);

  const AllocationApi& api = GetParam();
  std::uintptr_t first = 0;
  ASSERT_EQ(api.allocate(768 * kMiB, &first), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), 256 * kMiB);
  EXPECT_EQ(nvml_used(0), 768 * kMiB);
  std::uintptr_t second = 0;
  EXPECT_EQ(api.allocate(512 * kMiB, &second), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(free_bytes(), 256 * kMiB);  // a refusal changes nothing
  ASSERT_EQ(api.allocate(256 * kMiB, &second), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), 0u);
  EXPECT_EQ(api.release(first), CUDA_SUCCESS);
  EXPECT_EQ(api.release(second), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB);
  EXPECT_NE(api.release(first), CUDA_SUCCESS);  // double free
  EXPECT_EQ(cuMemPoolDestroy(g_pool), CUDA_SUCCESS);
}

INSTANTIATE_TEST_SUITE_P(MockDriver, EveryAllocationApi, ::testing::ValuesIn(allocation_apis()),
                         [](const ::testing::TestParamInfo<AllocationApi>& param_info) {
                           return std::string(param_info.param.name);
                         });

TEST_F(MemoryTest, PitchIsRoundedTo512Bytes) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  CUdeviceptr pointer = 0;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch_v2(&pointer, &pitch, 1000, 100, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(free_bytes(), kGiB - 1024 * 100);
  EXPECT_EQ(cuMemAllocPitch_v2(&pointer, &pitch, 1000, 100, 3), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemoryTest, MipmapLevelsAreSummed) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  CUDA_ARRAY3D_DESCRIPTOR description{1024, 512, 0, CU_AD_FORMAT_FLOAT, 1, 0};
  CUmipmappedArray array = nullptr;
  ASSERT_EQ(cuMipmappedArrayCreate(&array, &description, 3), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB - 4 * (1024 * 512 + 512 * 256 + 256 * 128));
  ASSERT_EQ(cuMipmappedArrayDestroy(array), CUDA_SUCCESS);
  EXPECT_EQ(cuMipmappedArrayDestroy(array), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(free_bytes(), kGiB);
}

TEST_F(MemoryTest, DefaultPoolsBelongToTheirDevice) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  CUmemoryPool pool0 = nullptr;
  CUmemoryPool pool1 = nullptr;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool1, 1), CUDA_SUCCESS);
  EXPECT_NE(pool0, pool1);
  EXPECT_EQ(cuMemPoolDestroy(pool0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolTrimTo(pool1, 0), CUDA_SUCCESS);
  CUdeviceptr pointer = 0;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&pointer, 64 * kMiB, pool1, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB);  // device 0 is current; the pool put it on device 1
  EXPECT_EQ(nvml_used(1), 64 * kMiB);
  ASSERT_EQ(cuMemFreeAsync(pointer, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(nvml_used(1), 0u);
}

TEST_F(MemoryTest, VmmMappingsAliasAndStayChargedUntilUnmapped) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  constexpr size_t kChunk = 2 * kMiB;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(cuMemCreate(&handle, 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);  // below the granularity
  ASSERT_EQ(cuMemCreate(&handle, kChunk, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB - kChunk);

  CUdeviceptr base = 0;
  ASSERT_EQ(cuMemAddressReserve(&base, 3 * kChunk, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(base % kChunk, 0u);
  ASSERT_EQ(cuMemMap(base, kChunk, 0, handle, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(base + kChunk, kChunk, 0, handle, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(base, kChunk, 0, handle, 0), CUDA_ERROR_INVALID_VALUE);  // already mapped
  EXPECT_EQ(free_bytes(), kGiB - kChunk);  // physical memory is charged once, however often mapped

  const char message[] = "written through the first mapping";
  char read[sizeof(message)] = {};
  EXPECT_EQ(cuMemcpyHtoD_v2(base, message, sizeof(message)), CUDA_ERROR_INVALID_VALUE);  // no access yet
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, 3};
  ASSERT_EQ(cuMemSetAccess(base, 2 * kChunk, &access, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuMemSetAccess(base, 3 * kChunk, &access, 1), CUDA_ERROR_INVALID_VALUE);  // third chunk unmapped
  ASSERT_EQ(cuMemcpyHtoD_v2(base, message, sizeof(message)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(read, base + kChunk, sizeof(read)), CUDA_SUCCESS);
  EXPECT_STREQ(read, message);
  // A copy may run across adjacent mappings, not past them.
  std::vector<char> span(kChunk);
  EXPECT_EQ(cuMemcpyDtoH_v2(span.data(), base + kChunk / 2, span.size()), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyDtoH_v2(span.data(), base + 2 * kChunk - 8, 16), CUDA_ERROR_INVALID_VALUE);

  ASSERT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(handle), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(free_bytes(), kGiB - kChunk);                                   // still mapped
  EXPECT_EQ(cuMemAddressFree(base, 3 * kChunk), CUDA_ERROR_INVALID_VALUE);  // mappings remain
  ASSERT_EQ(cuMemUnmap(base, 2 * kChunk), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB);
  ASSERT_EQ(cuMemAddressFree(base, 3 * kChunk), CUDA_SUCCESS);
}

TEST_F(MemoryTest, HostLocatedVmmHandlesTakeNoDeviceMemory) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  constexpr size_t kChunk = 2 * kMiB;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  size_t granularity = 0;
  for (CUmemLocationType type :
       {CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA}) {
    prop.location = {type, 0};
    ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              CUDA_SUCCESS);
    EXPECT_EQ(granularity, kChunk);
    ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
              CUDA_SUCCESS);
    EXPECT_EQ(granularity, kChunk);
  }
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 7};
  EXPECT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMemGetAllocationGranularity(nullptr, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);

  CUmemGenericAllocationHandle host = 0;
  CUmemGenericAllocationHandle numa = 0;
  prop.location = {CU_MEM_LOCATION_TYPE_HOST, 42};  // the id of a HOST location is ignored
  ASSERT_EQ(cuMemCreate(&host, 4 * kChunk, &prop, 0), CUDA_SUCCESS);
  prop.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  ASSERT_EQ(cuMemCreate(&numa, kChunk, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB) << "host memory is no device's";
  EXPECT_EQ(nvml_used(0), 0u);
  CUmemGenericAllocationHandle refused = 0;
  prop.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 1};  // the mock's host has one NUMA node
  EXPECT_EQ(cuMemCreate(&refused, kChunk, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  prop.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0};
  EXPECT_EQ(cuMemCreate(&refused, kChunk, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  prop.location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // host memory is not IPC capable
  EXPECT_EQ(cuMemCreate(&refused, kChunk, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  int fd = -1;
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, host, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);

  // Mapped into a reserved range and made accessible to the device, it is device-addressable memory.
  CUdeviceptr base = 0;
  ASSERT_EQ(cuMemAddressReserve(&base, 4 * kChunk, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(base, 4 * kChunk, 0, host, 0), CUDA_SUCCESS);
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, 3};
  ASSERT_EQ(cuMemSetAccess(base, 4 * kChunk, &access, 1), CUDA_SUCCESS);
  CUdeviceptr other = 0;
  ASSERT_EQ(cuMemAlloc_v2(&other, kChunk), CUDA_SUCCESS);
  std::vector<unsigned char> fill(kChunk, 0x3c);
  ASSERT_EQ(cuMemcpyHtoD_v2(other, fill.data(), kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD_v2(base + kChunk, other, kChunk), CUDA_SUCCESS);
  unsigned char byte = 0;
  ASSERT_EQ(cuMemcpyDtoH_v2(&byte, base + 2 * kChunk - 1, 1), CUDA_SUCCESS);
  EXPECT_EQ(byte, 0x3c);
  EXPECT_EQ(free_bytes(), kGiB - kChunk) << "only the linear allocation is device memory";
  ASSERT_EQ(cuMemUnmap(base, 4 * kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(host), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(numa), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(other), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB) << "releasing host handles gives no device memory back that it never took";
  ASSERT_EQ(cuMemAddressFree(base, 4 * kChunk), CUDA_SUCCESS);
}

// What a reclaim does to a borrower's VMM-backed allocation: the same device address re-backed by host
// memory, then by device memory again, its contents copied each time. The simulated device keeps the
// contents of VMM memory (memfd), so the data must come back bitwise identical.
TEST_F(MemoryTest, AVmmRangeIsReBackedAtTheSameAddressAndKeepsItsData) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  constexpr size_t kSize = 2 * 2 * kMiB;
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, 3};
  const auto create = [](CUmemLocationType type) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {type, 0};
    CUmemGenericAllocationHandle handle = 0;
    EXPECT_EQ(cuMemCreate(&handle, kSize, &prop, 0), CUDA_SUCCESS);
    return handle;
  };
  // Moves the contents at `address` into `to`, through a staging window, and maps `to` at `address`.
  const auto rebind = [&](CUdeviceptr address, CUdeviceptr staging, CUmemGenericAllocationHandle from,
                          CUmemGenericAllocationHandle to) {
    ASSERT_EQ(cuMemMap(staging, kSize, 0, to, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemSetAccess(staging, kSize, &access, 1), CUDA_SUCCESS);
    ASSERT_EQ(cuMemcpyDtoD_v2(staging, address, kSize), CUDA_SUCCESS);
    ASSERT_EQ(cuMemUnmap(address, kSize), CUDA_SUCCESS);
    ASSERT_EQ(cuMemUnmap(staging, kSize), CUDA_SUCCESS);
    ASSERT_EQ(cuMemRelease(from), CUDA_SUCCESS);
    ASSERT_EQ(cuMemMap(address, kSize, 0, to, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemSetAccess(address, kSize, &access, 1), CUDA_SUCCESS);
  };

  CUdeviceptr address = 0;
  CUdeviceptr staging = 0;
  ASSERT_EQ(cuMemAddressReserve(&address, kSize, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressReserve(&staging, kSize, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle device = create(CU_MEM_LOCATION_TYPE_DEVICE);
  ASSERT_EQ(cuMemMap(address, kSize, 0, device, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemSetAccess(address, kSize, &access, 1), CUDA_SUCCESS);
  std::vector<unsigned char> pattern(kSize);
  std::mt19937 random(47);
  for (auto& b : pattern) b = static_cast<unsigned char>(random());
  ASSERT_EQ(cuMemcpyHtoD_v2(address, pattern.data(), kSize), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB - kSize);

  CUmemGenericAllocationHandle host = create(CU_MEM_LOCATION_TYPE_HOST);
  rebind(address, staging, device, host);
  EXPECT_EQ(free_bytes(), kGiB) << "moved to host: the device memory is free";
  std::vector<unsigned char> seen(kSize);
  ASSERT_EQ(cuMemcpyDtoH_v2(seen.data(), address, kSize), CUDA_SUCCESS);
  EXPECT_EQ(seen, pattern) << "same address, same data, host-backed";

  CUmemGenericAllocationHandle back = create(CU_MEM_LOCATION_TYPE_DEVICE);
  rebind(address, staging, host, back);
  EXPECT_EQ(free_bytes(), kGiB - kSize);
  std::fill(seen.begin(), seen.end(), 0);
  ASSERT_EQ(cuMemcpyDtoH_v2(seen.data(), address, kSize), CUDA_SUCCESS);
  EXPECT_EQ(seen, pattern) << "back on the device, bitwise identical";

  ASSERT_EQ(cuMemUnmap(address, kSize), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(back), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kGiB);
  ASSERT_EQ(cuMemAddressFree(address, kSize), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(staging, kSize), CUDA_SUCCESS);
}

TEST_F(MemoryTest, CopiesCheckTheDeviceSide) {
  start({{"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&b, 4096), CUDA_SUCCESS);
  unsigned char host[4096];
  std::memset(host, 0x5a, sizeof(host));
  EXPECT_EQ(cuMemcpyHtoD_v2(a + 1, host, sizeof(host)), CUDA_ERROR_INVALID_VALUE);  // one byte past the end
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(a, host, sizeof(host), nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD_v2(b, a, 4096), CUDA_SUCCESS);
  unsigned char back[4096] = {};
  ASSERT_EQ(cuMemcpyDtoHAsync_v2_ptsz(back, b, sizeof(back), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(host, back, sizeof(back)), 0);
  // Unified addressing: cuMemcpy takes host memory on either side.
  unsigned char unified[16] = {};
  ASSERT_EQ(cuMemcpy(reinterpret_cast<CUdeviceptr>(unified), b, sizeof(unified)), CUDA_SUCCESS);
  EXPECT_EQ(unified[15], 0x5a);
  EXPECT_EQ(cuMemcpyAsync(b + 4090, reinterpret_cast<CUdeviceptr>(unified), sizeof(unified), nullptr),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyDtoH_v2(back, a, 16), CUDA_ERROR_INVALID_VALUE);  // freed
}

// Memsets fill device memory row by row (1D: one row), under the copies' range check.
TEST_F(MemoryTest, MemsetsFillTheirRowsAndCheckTheDeviceSide) {
  start({{"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  CUdeviceptr a = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(a, 0x11, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32Async(a + 8, 0xa1b2c3d4U, 2, nullptr), CUDA_SUCCESS);
  // 2 rows of 3 16-bit values, 1024 bytes apart, from byte 1024 on.
  ASSERT_EQ(cuMemsetD2D16_v2_ptds(a + 1024, 1024, 0xbeef, 3, 2), CUDA_SUCCESS);
  unsigned char back[4096];
  ASSERT_EQ(cuMemcpyDtoH_v2(back, a, sizeof(back)), CUDA_SUCCESS);
  std::vector<unsigned char> want(4096, 0x11);
  const unsigned int word = 0xa1b2c3d4U;
  std::memcpy(&want[8], &word, 4);
  std::memcpy(&want[12], &word, 4);
  const unsigned short half = 0xbeef;
  for (std::size_t row : {1024u, 2048u}) {
    for (std::size_t i = 0; i < 3; ++i) std::memcpy(&want[row + 2 * i], &half, 2);
  }
  EXPECT_EQ(std::memcmp(back, want.data(), want.size()), 0);
  EXPECT_EQ(cuMemsetD8_v2(a + 1, 0, 4096), CUDA_ERROR_INVALID_VALUE);    // one byte past the end
  EXPECT_EQ(cuMemsetD2D8_v2(a, 8, 0, 16, 2), CUDA_ERROR_INVALID_VALUE);  // pitch below the width
  EXPECT_EQ(cuMemsetD32_v2(a + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);      // misaligned
  EXPECT_EQ(cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(back), 0, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
}

// Copies with a shape: rows and slices at their pitch and origin, between host and device
// memory; peer copies like device-to-device ones; arrays are not simulated.
TEST_F(MemoryTest, ShapedAndPeerCopiesMoveTheirRowsAndCheckBothSides) {
  CUcontext context = start({{"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&b, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(a, 0, 4096), CUDA_SUCCESS);
  unsigned char host[4096];
  for (std::size_t i = 0; i < sizeof(host); ++i) host[i] = static_cast<unsigned char>(i * 7);
  // 2D: 3 rows of 10 bytes from host (x 4, y 1, pitch 100) to device (x 2, y 0, pitch 64).
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = host;
  c.srcXInBytes = 4;
  c.srcY = 1;
  c.srcPitch = 100;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = a;
  c.dstXInBytes = 2;
  c.dstPitch = 64;
  c.WidthInBytes = 10;
  c.Height = 3;
  ASSERT_EQ(cuMemcpy2D_v2(&c), CUDA_SUCCESS);
  unsigned char back[4096];
  ASSERT_EQ(cuMemcpyDtoH_v2(back, a, sizeof(back)), CUDA_SUCCESS);
  for (std::size_t row = 0; row < 3; ++row) {
    EXPECT_EQ(std::memcmp(back + 2 + row * 64, host + 4 + (1 + row) * 100, 10), 0) << row;
    EXPECT_EQ(back[12 + row * 64], 0) << "beyond the width";
  }
  c.dstXInBytes = 4090;  // rows past the allocation's end
  EXPECT_EQ(cuMemcpy2DAsync_v2(&c, nullptr), CUDA_ERROR_INVALID_VALUE);
  c.dstXInBytes = 0;
  c.dstPitch = 8;  // below the width
  EXPECT_EQ(cuMemcpy2DUnaligned_v2(&c), CUDA_ERROR_INVALID_VALUE);
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  EXPECT_EQ(cuMemcpy2D_v2(&c), CUDA_ERROR_NOT_SUPPORTED);
  // 3D peer: 2 slices of 2 rows of 16 bytes, device to device, slices 4 rows apart at the source.
  CUDA_MEMCPY3D_PEER p{};
  p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = a;
  p.srcContext = context;
  p.srcPitch = 64;
  p.srcHeight = 4;
  p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.dstDevice = b;
  p.dstContext = context;
  p.dstPitch = 16;
  p.dstHeight = 2;
  p.WidthInBytes = 16;
  p.Height = 2;
  p.Depth = 2;
  ASSERT_EQ(cuMemcpy3DPeer(&p), CUDA_SUCCESS);
  unsigned char moved[64];
  ASSERT_EQ(cuMemcpyDtoH_v2(moved, b, sizeof(moved)), CUDA_SUCCESS);
  for (std::size_t slice = 0; slice < 2; ++slice) {
    for (std::size_t row = 0; row < 2; ++row)
      EXPECT_EQ(std::memcmp(moved + (slice * 2 + row) * 16, back + (slice * 4 + row) * 64, 16), 0);
  }
  ASSERT_EQ(cuMemcpyPeerAsync(b, context, a + 64, context, 32, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(moved, b, 32), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(moved, back + 64, 32), 0);
  EXPECT_EQ(cuMemcpyPeer(b + 4090, context, a, context, 16), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemoryTest, DestroyingAContextFreesItsMemory) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  CUcontext created = nullptr;
  ASSERT_EQ(cuCtxCreate_v4(&created, nullptr, 0, 1), CUDA_SUCCESS);
  CUdeviceptr pointer = 0;
  ASSERT_EQ(cuMemAlloc_v2(&pointer, 100 * kMiB), CUDA_SUCCESS);
  CUDA_ARRAY_DESCRIPTOR description{1024, 1024, CU_AD_FORMAT_UNSIGNED_INT8, 1};
  CUarray array = nullptr;
  ASSERT_EQ(cuArrayCreate_v2(&array, &description), CUDA_SUCCESS);
  EXPECT_EQ(nvml_used(1), 101 * kMiB);
  ASSERT_EQ(cuCtxDestroy_v2(created), CUDA_SUCCESS);
  EXPECT_EQ(nvml_used(1), 0u);
  EXPECT_EQ(cuArrayDestroy(array), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(MemoryTest, ConcurrentAllocationsKeepTheAccountingExact) {
  start({{"GPUSLICE_MOCK_MEMORY", "67108864"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});  // 64 MiB
  CUcontext context = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&context), CUDA_SUCCESS);
  std::atomic<int> refusals{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      cuCtxSetCurrent(context);
      std::vector<CUdeviceptr> held;
      for (int i = 0; i < 200; ++i) {
        CUdeviceptr pointer = 0;
        CUresult status = cuMemAlloc_v2(&pointer, 17 * kMiB);
        if (status == CUDA_SUCCESS) {
          held.push_back(pointer);
        } else if (status == CUDA_ERROR_OUT_OF_MEMORY) {
          refusals.fetch_add(1);
        }
        if (held.size() > 3 || (status != CUDA_SUCCESS && !held.empty())) {
          cuMemFree_v2(held.back());
          held.pop_back();
        }
      }
      for (CUdeviceptr pointer : held) cuMemFree_v2(pointer);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_GT(refusals.load(), 0);  // even one thread's 4 chunks of 17 MiB exceed 64 MiB
  EXPECT_EQ(free_bytes(), 64 * kMiB);
  EXPECT_EQ(nvml_used(0), 0u);
}

}  // namespace
}  // namespace gpuslice::mock::testing
