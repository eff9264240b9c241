#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "node/gpus/gpu_source.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

TEST(Nvml, DiscoversGpusAndMarksFailingOnesUnhealthy) {
  auto source = open_nvml(GPUSLICE_NODE_FAKE_NVML);
  ASSERT_TRUE(source.ok()) << source.error();
  auto gpus = (*source)->probe();
  ASSERT_TRUE(gpus.ok()) << gpus.error();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[1].uuid, "GPU-bbbbbbbb-2222-4000-8000-000000000001");
  EXPECT_EQ((*gpus)[1].name, "Fake GPU B");
  EXPECT_EQ((*gpus)[1].memory_total_bytes, 16ULL << 30);
  EXPECT_EQ((*gpus)[1].memory_used_bytes, 1ULL << 30);
  EXPECT_EQ((*gpus)[1].minor, 11u);
  EXPECT_EQ((*gpus)[1].utilization_percent, 42u);
  EXPECT_TRUE((*gpus)[1].healthy);

  // Same handle as the daemon's (dlopen is reference counted): flip the fake's failure switch.
  void* handle = dlopen(GPUSLICE_NODE_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr);
  auto set_failing = reinterpret_cast<void (*)(int)>(dlsym(handle, "gpuslice_fake_nvml_set_failing"));
  ASSERT_NE(set_failing, nullptr);
  set_failing(1);
  auto failing = (*source)->probe();
  set_failing(-1);
  ASSERT_TRUE(failing.ok());
  ASSERT_EQ(failing->size(), 2u);
  EXPECT_TRUE((*failing)[0].healthy);
  EXPECT_FALSE((*failing)[1].healthy);
  EXPECT_EQ((*failing)[1].uuid, "GPU-bbbbbbbb-2222-4000-8000-000000000001") << "identity kept while failing";
  EXPECT_NE((*failing)[1].health_error.find("nvmlDeviceGetUUID"), std::string::npos)
      << (*failing)[1].health_error;
  EXPECT_TRUE((*(*source)->probe())[1].healthy) << "recovers";
  dlclose(handle);
}

TEST(Nvml, MissingLibraryIsAClearError) {
  auto source = open_nvml("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.error().find("cannot load /nonexistent/libnvidia-ml.so.1"), std::string::npos)
      << source.error();
}

#ifdef GPUSLICE_HAVE_MOCK_NVML
TEST(Nvml, ReadsTheSimulatedNvml) {
  test::TempDir dir;
  setenv("GPUSLICE_MOCK_DEVICES", "2", 1);
  setenv("GPUSLICE_MOCK_MEMORY", "0=2147483648,1=4294967296", 1);
  setenv("GPUSLICE_MOCK_STATE_DIR", dir.path().c_str(), 1);
  auto source = open_nvml(GPUSLICE_MOCK_NVML);
  unsetenv("GPUSLICE_MOCK_DEVICES");
  unsetenv("GPUSLICE_MOCK_MEMORY");
  unsetenv("GPUSLICE_MOCK_STATE_DIR");
  ASSERT_TRUE(source.ok()) << source.error();
  auto gpus = (*source)->probe();
  ASSERT_TRUE(gpus.ok()) << gpus.error();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].memory_total_bytes, 2147483648u);
  EXPECT_EQ((*gpus)[1].memory_total_bytes, 4294967296u);
  EXPECT_EQ((*gpus)[0].uuid.rfind("GPU-", 0), 0u);
  EXPECT_NE((*gpus)[0].uuid, (*gpus)[1].uuid);
  EXPECT_TRUE((*gpus)[0].healthy) << (*gpus)[0].health_error;
}
#endif

}  // namespace
}  // namespace gpuslice::node
