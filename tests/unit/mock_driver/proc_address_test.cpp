// cuGetProcAddress of the simulated libcuda: versions, per-thread variants, statuses, and that
// the pointers are the library's exported symbols.
#include <dlfcn.h>

#include <string>

#include "mock_fixture.h"

namespace gpuslice::mock::testing {
namespace {

class ProcAddressTest : public MockDriverTest {
 protected:
  void SetUp() override {
    MockDriverTest::SetUp();
    self_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(self_, nullptr) << "the test links the mock libcuda.so.1";
  }
  void TearDown() override {
    if (self_ != nullptr) dlclose(self_);
    MockDriverTest::TearDown();
  }

  void* exported(const char* symbol) const { return dlsym(self_, symbol); }

  static void* resolve(const char* name, int version, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
    void* function = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_EQ(cuGetProcAddress_v2(name, &function, version, flags, &status), CUDA_SUCCESS)
        << name << "@" << version;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
    return function;
  }

  void* self_ = nullptr;
};

struct Expectation {
  const char* name;
  int version;
  const char* symbol;
};

TEST_F(ProcAddressTest, ReturnsTheExportedSymbolOfTheRequestedVersion) {
  const Expectation cases[] = {
      {"cuMemAlloc", 3000, "cuMemAlloc"},
      {"cuMemAlloc", 3020, "cuMemAlloc_v2"},
      {"cuMemAlloc", 13000, "cuMemAlloc_v2"},
      {"cuMemFree", 12000, "cuMemFree_v2"},
      {"cuMemGetInfo", 3010, "cuMemGetInfo"},
      {"cuMemGetInfo", 12000, "cuMemGetInfo_v2"},
      {"cuDeviceTotalMem", 12000, "cuDeviceTotalMem_v2"},
      {"cuMemAllocPitch", 12000, "cuMemAllocPitch_v2"},
      {"cuArrayCreate", 3000, "cuArrayCreate"},
      {"cuArray3DCreate", 12000, "cuArray3DCreate_v2"},
      {"cuMemcpyHtoD", 3000, "cuMemcpyHtoD"},
      {"cuMemcpyDtoH", 12000, "cuMemcpyDtoH_v2"},
      {"cuMemcpyDtoD", 12000, "cuMemcpyDtoD_v2"},
      {"cuCtxCreate", 3020, "cuCtxCreate_v2"},
      {"cuCtxCreate", 11030, "cuCtxCreate_v2"},
      {"cuCtxCreate", 12040, "cuCtxCreate_v3"},
      {"cuCtxCreate", 12050, "cuCtxCreate_v4"},
      {"cuCtxDestroy", 3020, "cuCtxDestroy"},
      {"cuCtxDestroy", 4000, "cuCtxDestroy_v2"},
      {"cuDevicePrimaryCtxRelease", 10020, "cuDevicePrimaryCtxRelease"},
      {"cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2"},
      {"cuGetProcAddress", 11030, "cuGetProcAddress"},
      {"cuGetProcAddress", 12000, "cuGetProcAddress_v2"},
      {"cuEventElapsedTime", 12060, "cuEventElapsedTime"},
      {"cuEventElapsedTime", 12080, "cuEventElapsedTime_v2"},
      {"cuStreamDestroy", 3020, "cuStreamDestroy"},
      {"cuStreamDestroy", 4000, "cuStreamDestroy_v2"},
      {"cuEventDestroy", 13000, "cuEventDestroy_v2"},
      {"cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2"},
      {"cuInit", 2000, "cuInit"},
      {"cuLaunchKernel", 13000, "cuLaunchKernel"},
      {"cuStreamSynchronize", 13000, "cuStreamSynchronize"},
  };
  for (const Expectation& expected : cases) {
    void* symbol = exported(expected.symbol);
    ASSERT_NE(symbol, nullptr) << expected.symbol << " is not exported";
    EXPECT_EQ(resolve(expected.name, expected.version), symbol)
        << expected.name << "@" << expected.version << " should be " << expected.symbol;
  }
}

TEST_F(ProcAddressTest, PerThreadFlagSelectsPtszAndPtdsVariants) {
  constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const Expectation cases[] = {
      {"cuMemcpyHtoD", 13000, "cuMemcpyHtoD_v2_ptds"},
      {"cuMemcpyDtoH", 13000, "cuMemcpyDtoH_v2_ptds"},
      {"cuMemcpyDtoD", 13000, "cuMemcpyDtoD_v2_ptds"},
      {"cuMemcpy", 13000, "cuMemcpy_ptds"},
      {"cuMemcpyAsync", 13000, "cuMemcpyAsync_ptsz"},
      {"cuMemcpyHtoDAsync", 13000, "cuMemcpyHtoDAsync_v2_ptsz"},
      {"cuMemcpyDtoHAsync", 13000, "cuMemcpyDtoHAsync_v2_ptsz"},
      {"cuLaunchKernel", 13000, "cuLaunchKernel_ptsz"},
      {"cuLaunchKernelEx", 13000, "cuLaunchKernelEx_ptsz"},
      {"cuLaunchCooperativeKernel", 13000, "cuLaunchCooperativeKernel_ptsz"},
      {"cuGraphLaunch", 13000, "cuGraphLaunch_ptsz"},
      {"cuMemAllocAsync", 13000, "cuMemAllocAsync_ptsz"},
      {"cuMemAllocFromPoolAsync", 13000, "cuMemAllocFromPoolAsync_ptsz"},
      {"cuMemFreeAsync", 13000, "cuMemFreeAsync_ptsz"},
      {"cuStreamSynchronize", 13000, "cuStreamSynchronize_ptsz"},
      {"cuMemAlloc", 13000, "cuMemAlloc_v2"},      // no per-thread variant exists
      {"cuLaunchKernel", 6050, "cuLaunchKernel"},  // before CUDA 7 there was no per-thread stream
      {"cuMemcpyHtoD", 3000, "cuMemcpyHtoD"},      // the v1 has no _ptds
  };
  for (const Expectation& expected : cases) {
    EXPECT_EQ(resolve(expected.name, expected.version, kPerThread), exported(expected.symbol))
        << expected.name << "@" << expected.version << " should be " << expected.symbol;
  }
  EXPECT_EQ(resolve("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), exported("cuLaunchKernel"));
}

TEST_F(ProcAddressTest, ReportsMissingSymbolsAndInsufficientVersions) {
  void* function = reinterpret_cast<void*>(&cuInit);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(cuGetProcAddress_v2("cuNoSuchFunction", &function, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(function, nullptr);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc_v2", &function, 13000, 0, &status),
            CUDA_ERROR_NOT_FOUND);  // base names only
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAllocAsync", &function, 11010, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(cuGetProcAddress_v2("cuGetProcAddress", &function, 11020, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(cuGetProcAddress_v2("cuInit", &function, 13010, 0, &status),
            CUDA_ERROR_INVALID_VALUE);  // newer than the driver
  EXPECT_EQ(cuGetProcAddress_v2("cuInit", &function, 13000, 4, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2(nullptr, &function, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2("cuInit", nullptr, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2("cuInit", &function, 13000, 0, nullptr), CUDA_SUCCESS);  // status is optional
}

TEST_F(ProcAddressTest, DriverVersionIsConfigurable) {
  set_env({{"GPUSLICE_MOCK_DRIVER_VERSION", "12040"}});
  void* function = nullptr;
  CUdriverProcAddressQueryResult status{};
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &function, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(resolve("cuCtxCreate", 12040), exported("cuCtxCreate_v3"));
  int version = 0;
  ASSERT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);  // works before cuInit
  EXPECT_EQ(version, 12040);
}

TEST_F(ProcAddressTest, FirstVersionAgreesAndResolvedPointersWork) {
  void* function = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuMemAlloc", &function, 12000, 0), CUDA_SUCCESS);
  EXPECT_EQ(function, exported("cuMemAlloc_v2"));
  EXPECT_EQ(cuGetProcAddress("cuMemAllocAsync", &function, 11000, 0), CUDA_ERROR_NOT_FOUND);

  auto init = reinterpret_cast<decltype(&cuInit)>(resolve("cuInit", 13000));
  ASSERT_EQ(init(0), CUDA_SUCCESS);
  auto get_count = reinterpret_cast<decltype(&cuDeviceGetCount)>(resolve("cuDeviceGetCount", 13000));
  int count = 0;
  ASSERT_EQ(get_count(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
}

TEST_F(ProcAddressTest, LegacyAllocatorsRefuseBecauseAddressesExceed32Bits) {
  start({{"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  auto legacy_alloc =
      reinterpret_cast<CUresult (*)(unsigned int*, unsigned int)>(resolve("cuMemAlloc", 3000));
  unsigned int pointer = 0;
  EXPECT_EQ(legacy_alloc(&pointer, 4096), CUDA_ERROR_NOT_SUPPORTED);
  auto legacy_info =
      reinterpret_cast<CUresult (*)(unsigned int*, unsigned int*)>(resolve("cuMemGetInfo", 3000));
  unsigned int free = 0;
  unsigned int total = 0;
  ASSERT_EQ(legacy_info(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 0xFFFFFFFFu);  // 80 GiB clamped to what 32 bits can say
}

// ctest runs this suite a second time with a fake interposer preloaded (see CMakeLists.txt).
TEST_F(ProcAddressTest, HandsOutItsOwnDefinitionsWhenAnInterposerExportsTheSameNames) {
  void* global = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  if (global == exported("cuMemAlloc_v2")) GTEST_SKIP() << "no interposer preloaded";
  EXPECT_EQ(resolve("cuMemAlloc", 13000), exported("cuMemAlloc_v2"));
  EXPECT_EQ(resolve("cuLaunchKernel", 13000), exported("cuLaunchKernel"));
  EXPECT_NE(resolve("cuLaunchKernel", 13000), dlsym(RTLD_DEFAULT, "cuLaunchKernel"));
  // The mock's own internal calls stay inside the mock, as the real driver's do.
  start({{"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  CUdeviceptr pointer = 0;
  EXPECT_EQ(cuMemAllocAsync_ptsz(&pointer, 4096, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(pointer, nullptr), CUDA_SUCCESS);
}

TEST_F(ProcAddressTest, ExportTablesAreNotSupported) {
  const void* table = &table;
  CUuuid id{};
  EXPECT_EQ(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(table, nullptr);
}

TEST_F(ProcAddressTest, ErrorStrings) {
  const char* text = nullptr;
  ASSERT_EQ(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "out of memory");
  EXPECT_EQ(cuGetErrorString(static_cast<CUresult>(12345), &text), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(text, nullptr);
}

TEST_F(ProcAddressTest, DirectCopyResolvesToItsOwnSymbols) {
  void* direct = dlopen(GPUSLICE_TEST_MOCK_DIR "/libgpuslice-mockcuda-direct.so", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(direct, nullptr) << dlerror();
  auto get_proc_address =
      reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(direct, "cuGetProcAddress_v2"));
  ASSERT_NE(get_proc_address, nullptr);
  EXPECT_NE(reinterpret_cast<void*>(get_proc_address), exported("cuGetProcAddress_v2"));
  void* function = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(get_proc_address("cuMemAlloc", &function, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(function, dlsym(direct, "cuMemAlloc_v2"));
  EXPECT_NE(function, exported("cuMemAlloc_v2"));
  dlclose(direct);
}

}  // namespace
}  // namespace gpuslice::mock::testing
