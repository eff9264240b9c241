// load_settings: every variable of docs/configuration.md, precedence between dialects, and error messages.
#include "config/settings.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../test_units.h"
#include "config/default_paths.h"

namespace gpuslice::config {
namespace {

using test_units::kGi;
using test_units::kMi;
const char* const kUuid = "GPU-3430f778-7a25-704c-9090-8b0bb2478114";

using Env = std::map<std::string, std::string>;

// As the library loads: every variable present is also listed by name.
Settings load(const Env& env) {
  std::vector<std::string> names;
  for (const auto& [name, value] : env) names.push_back(name);
  return load_settings(
      [&env](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      names);
}

Settings load_ok(const Env& env) {
  Settings s = load(env);
  EXPECT_TRUE(s.ok()) << (s.errors.empty() ? "" : s.errors[0]);
  return s;
}

// Exactly one error, and it is the expected "VAR='value': ..." line.
void expect_single_error(const Env& env, const std::string& prefix, const std::string& reason_part = "") {
  Settings s = load(env);
  ASSERT_EQ(s.errors.size(), 1u) << (s.errors.empty() ? "(none)" : s.errors[0]);
  EXPECT_EQ(s.errors[0].rfind(prefix, 0), 0u) << s.errors[0];
  EXPECT_NE(s.errors[0].find(reason_part), std::string::npos) << s.errors[0];
}

TEST(LoadSettings, DefaultsWithEmptyEnvironment) {
  Settings s = load_ok({});
  EXPECT_TRUE(s.memory.empty());
  EXPECT_TRUE(s.compute.empty());
  EXPECT_EQ(s.log_level, log::Level::Warn);
  const std::string private_dir = "/tmp/gpuslice-" + std::to_string(::getuid());
  EXPECT_EQ(s.shared_dir, private_dir) << "no world-shared default";
  EXPECT_EQ(s.shared_file, private_dir + "/state");
  EXPECT_EQ(s.node_dir, "/tmp/gpuslice-node-" + std::to_string(geteuid())) << "one per user on a plain host";
  EXPECT_EQ(s.profile_dir, "");
  EXPECT_EQ(s.limits_file, "/etc/gpuslice/limits");
}

TEST(LoadSettings, NullLookupBehavesLikeEmptyEnvironment) {
  Settings s = load_settings(EnvLookup{});
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.shared_dir, default_shared_dir());
}

TEST(LoadSettings, EmptyVariablesCountAsUnset) {
  Settings s = load_ok({{"GPUSLICE_MEMORY_LIMIT", ""},
                        {"GPUSLICE_COMPUTE_LIMIT", ""},
                        {"GPUSLICE_LOG_LEVEL", ""},
                        {"GPUSLICE_SHARED_DIR", ""},
                        {"HCS_VRAM_QUOTA", "2Gi"},
                        {"PFLOG", ""}});
  EXPECT_EQ(s.memory.lookup(0, ""), 2 * kGi);
  EXPECT_TRUE(s.compute.empty());
  EXPECT_EQ(s.shared_dir, default_shared_dir());
  EXPECT_EQ(s.profile_dir, "");
}

TEST(LoadSettings, NativeMemoryInAllThreeForms) {
  EXPECT_EQ(load_ok({{"GPUSLICE_MEMORY_LIMIT", "8Gi"}}).memory.lookup(3, kUuid), 8 * kGi);
  Settings list = load_ok({{"GPUSLICE_MEMORY_LIMIT", "0=8Gi,1=4Gi"}});
  EXPECT_EQ(list.memory.lookup(1, ""), 4 * kGi);
  EXPECT_EQ(list.memory.lookup(2, ""), std::nullopt);
  Settings json =
      load_ok({{"GPUSLICE_MEMORY_LIMIT", std::string(R"({"1": "1.5Gi", ")") + kUuid + R"(": 1024})"}});
  EXPECT_EQ(json.memory.lookup(0, "gpu-3430F778-7a25-704c-9090-8b0bb2478114"), 1024u);
  EXPECT_EQ(json.memory.lookup(1, ""), 1610612736u);
}

TEST(LoadSettings, NativeComputeInAllThreeForms) {
  EXPECT_EQ(load_ok({{"GPUSLICE_COMPUTE_LIMIT", "30"}}).compute.lookup(0, ""), 30u);
  EXPECT_EQ(load_ok({{"GPUSLICE_COMPUTE_LIMIT", "0=30,1=50"}}).compute.lookup(1, ""), 50u);
  EXPECT_EQ(load_ok({{"GPUSLICE_COMPUTE_LIMIT", R"({"0": "25", "1": 75})"}}).compute.lookup(1, ""), 75u);
}

TEST(LoadSettings, HcsQuota) {
  EXPECT_EQ(load_ok({{"HCS_VRAM_QUOTA", "16Gi"}}).memory.lookup(0, ""), 16 * kGi);
  EXPECT_EQ(load_ok({{"HCS_VRAM_QUOTA", "4G"}}).memory.lookup(0, ""), 4000000000u);
  EXPECT_EQ(load_ok({{"HCS_VRAM_QUOTA", "1024Mi"}}).memory.lookup(0, ""), kGi);
  expect_single_error({{"HCS_VRAM_QUOTA", "0=1Gi"}}, "HCS_VRAM_QUOTA='0=1Gi': ");
}

TEST(LoadSettings, HamiMemoryVariables) {
  EXPECT_EQ(load_ok({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}}).memory.lookup(0, ""), kGi);
  EXPECT_EQ(load_ok({{"CUDA_DEVICE_MEMORY_LIMIT", "1024m"}}).memory.lookup(0, ""), kGi);
  EXPECT_EQ(load_ok({{"CUDA_DEVICE_MEMORY_LIMIT", "1048576k"}}).memory.lookup(0, ""), kGi);
  EXPECT_EQ(load_ok({{"CUDA_DEVICE_MEMORY_LIMIT", "1073741824"}}).memory.lookup(0, ""), kGi);
  Settings s = load_ok({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"},
                        {"CUDA_DEVICE_MEMORY_LIMIT_1", "512m"},
                        {"CUDA_DEVICE_MEMORY_LIMIT_63", "3G"}});
  EXPECT_EQ(s.memory.lookup(0, ""), 2 * kGi);
  EXPECT_EQ(s.memory.lookup(1, ""), 512 * kMi);
  EXPECT_EQ(s.memory.lookup(63, ""), 3 * kGi);
}

TEST(LoadSettings, HamiZeroMeansNotSetAsInHamiCore) {
  Settings s = load_ok({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}, {"CUDA_DEVICE_MEMORY_LIMIT_0", "0"}});
  EXPECT_EQ(s.memory.lookup(0, ""), 2 * kGi);
  EXPECT_TRUE(load_ok({{"CUDA_DEVICE_MEMORY_LIMIT", "0"}}).memory.empty());
  EXPECT_TRUE(load_ok({{"CUDA_DEVICE_SM_LIMIT", "0"}}).compute.empty());
  Settings sm = load_ok(
      {{"CUDA_DEVICE_SM_LIMIT", "40"}, {"CUDA_DEVICE_SM_LIMIT_1", "0"}, {"CUDA_DEVICE_SM_LIMIT_2", "10"}});
  EXPECT_EQ(sm.compute.lookup(1, ""), 40u);
  EXPECT_EQ(sm.compute.lookup(2, ""), 10u);
}

TEST(LoadSettings, HamiErrorsNameTheIndexedVariable) {
  expect_single_error({{"CUDA_DEVICE_MEMORY_LIMIT_3", "1Gi"}},
                      "CUDA_DEVICE_MEMORY_LIMIT_3='1Gi': ", "unknown unit");
  expect_single_error({{"CUDA_DEVICE_MEMORY_LIMIT", "-1g"}}, "CUDA_DEVICE_MEMORY_LIMIT='-1g': ", "negative");
  expect_single_error({{"CUDA_DEVICE_SM_LIMIT", "150"}}, "CUDA_DEVICE_SM_LIMIT='150': ", "0 to 100");
  expect_single_error({{"CUDA_DEVICE_SM_LIMIT_0", "x"}}, "CUDA_DEVICE_SM_LIMIT_0='x': ");
}

TEST(LoadSettings, TensorFusionJson) {
  Settings s = load_ok(
      {{"TENSOR_FUSION_CUDA_MEM_LIMIT", R"({"gpu-3430f778-7a25-704c-9090-8b0bb2478114": 1073741824})"},
       {"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"GPU-3430F778-7A25-704C-9090-8B0BB2478114": 10})"}});
  EXPECT_EQ(s.memory.lookup(0, kUuid), kGi);
  EXPECT_EQ(s.compute.lookup(0, kUuid), 10u);
  EXPECT_EQ(s.memory.lookup(0, "gpu-other"), std::nullopt);

  Settings by_index = load_ok({{"TENSOR_FUSION_CUDA_MEM_LIMIT", R"({"0": "2147483648", "1": 1024})"},
                               {"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"0": "20"})"}});
  EXPECT_EQ(by_index.memory.lookup(0, ""), 2 * kGi);
  EXPECT_EQ(by_index.memory.lookup(1, ""), 1024u);
  EXPECT_EQ(by_index.compute.lookup(0, ""), 20u);
  EXPECT_TRUE(load_ok({{"TENSOR_FUSION_CUDA_MEM_LIMIT", "{}"}}).memory.empty());
}

TEST(LoadSettings, TensorFusionRefusesOtherForms) {
  expect_single_error({{"TENSOR_FUSION_CUDA_MEM_LIMIT", "1073741824"}},
                      "TENSOR_FUSION_CUDA_MEM_LIMIT='1073741824': ", "expected '{'");
  expect_single_error({{"TENSOR_FUSION_CUDA_MEM_LIMIT", R"({"0": "1Gi"})"}},
                      "TENSOR_FUSION_CUDA_MEM_LIMIT=", "plain bytes only");
  expect_single_error({{"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"0": 101})"}},
                      "TENSOR_FUSION_CUDA_UP_LIMIT=", "1 to 100");
  expect_single_error({{"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"0": 10,})"}},
                      "TENSOR_FUSION_CUDA_UP_LIMIT=", "trailing comma");
}

TEST(LoadSettings, VcudaBytes) {
  EXPECT_EQ(load_ok({{"VCUDA_MEMORY_LIMIT", "1073741824"}}).memory.lookup(0, ""), kGi);
  expect_single_error({{"VCUDA_MEMORY_LIMIT", "1g"}}, "VCUDA_MEMORY_LIMIT='1g': ", "plain bytes only");
}

TEST(LoadSettings, MemoryPrecedenceAcrossDialects) {
  Env env = {{"GPUSLICE_MEMORY_LIMIT", "0=1Gi"},  {"TENSOR_FUSION_CUDA_MEM_LIMIT", R"({"0": 2, "1": 2})"},
             {"CUDA_DEVICE_MEMORY_LIMIT_2", "3"}, {"CUDA_DEVICE_MEMORY_LIMIT_1", "3"},
             {"CUDA_DEVICE_MEMORY_LIMIT", "4"},   {"HCS_VRAM_QUOTA", "5"},
             {"VCUDA_MEMORY_LIMIT", "6"}};
  Settings s = load_ok(env);
  EXPECT_EQ(s.memory.lookup(0, ""), kGi);  // native
  EXPECT_EQ(s.memory.lookup(1, ""), 2u);   // TENSOR_FUSION over HAMi per-device
  EXPECT_EQ(s.memory.lookup(2, ""), 3u);   // HAMi per-device over HAMi all
  EXPECT_EQ(s.memory.lookup(3, ""), 4u);   // HAMi all over HCS and vcuda

  env.erase("CUDA_DEVICE_MEMORY_LIMIT");
  EXPECT_EQ(load_ok(env).memory.lookup(3, ""), 5u);
  env.erase("HCS_VRAM_QUOTA");
  EXPECT_EQ(load_ok(env).memory.lookup(3, ""), 6u);
  env["GPUSLICE_MEMORY_LIMIT"] = "7";
  Settings native_all = load_ok(env);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(native_all.memory.lookup(i, ""), 7u);
}

TEST(LoadSettings, PerDeviceMergeAcrossIndexAndUuid) {
  // The native variable names device 0 by index; TENSOR_FUSION names it by UUID. Native wins.
  Settings s = load_ok(
      {{"GPUSLICE_MEMORY_LIMIT", "0=1Gi"},
       {"TENSOR_FUSION_CUDA_MEM_LIMIT", std::string(R"({")") + kUuid + R"(": 2, "gpu-other-1": 3})"}});
  EXPECT_EQ(s.memory.lookup(0, kUuid), kGi);
  EXPECT_EQ(s.memory.lookup(1, "GPU-OTHER-1"), 3u);
  EXPECT_EQ(s.memory.lookup(2, "gpu-none"), std::nullopt);
}

TEST(LoadSettings, ComputePrecedence) {
  Env env = {{"GPUSLICE_COMPUTE_LIMIT", "0=10"},
             {"TENSOR_FUSION_CUDA_UP_LIMIT", R"({"0": 20, "1": 20})"},
             {"CUDA_DEVICE_SM_LIMIT_2", "30"},
             {"CUDA_DEVICE_SM_LIMIT", "40"}};
  Settings s = load_ok(env);
  EXPECT_EQ(s.compute.lookup(0, ""), 10u);
  EXPECT_EQ(s.compute.lookup(1, ""), 20u);
  EXPECT_EQ(s.compute.lookup(2, ""), 30u);
  EXPECT_EQ(s.compute.lookup(3, ""), 40u);
}

TEST(LoadSettings, LogLevelPrecedenceAndDialects) {
  EXPECT_EQ(load_ok({{"GPUSLICE_LOG_LEVEL", "trace"}, {"HCS_LOG_LEVEL", "error"}}).log_level,
            log::Level::Trace);
  EXPECT_EQ(load_ok({{"GPUSLICE_LOG_LEVEL", "2"}}).log_level, log::Level::Info);
  EXPECT_EQ(load_ok({{"HCS_LOG_LEVEL", "debug"}, {"LIBCUDA_LOG_LEVEL", "0"}}).log_level, log::Level::Debug);
  EXPECT_EQ(load_ok({{"LIBCUDA_LOG_LEVEL", "3"}, {"VCUDA_LOG_LEVEL", "trace"}}).log_level, log::Level::Info);
  EXPECT_EQ(load_ok({{"LIBCUDA_LOG_LEVEL", "4"}}).log_level, log::Level::Debug);
  EXPECT_EQ(load_ok({{"VCUDA_LOG_LEVEL", "error"}}).log_level, log::Level::Error);
}

TEST(LoadSettings, EveryMalformedLogLevelIsReportedEvenWhenOverridden) {
  Settings s = load({{"GPUSLICE_LOG_LEVEL", "info"}, {"HCS_LOG_LEVEL", "loud"}, {"LIBCUDA_LOG_LEVEL", "9"}});
  ASSERT_EQ(s.errors.size(), 2u);
  EXPECT_EQ(s.errors[0].rfind("HCS_LOG_LEVEL='loud': ", 0), 0u);
  EXPECT_EQ(s.errors[1].rfind("LIBCUDA_LOG_LEVEL='9': ", 0), 0u);
  EXPECT_EQ(s.log_level, log::Level::Info);
}

TEST(LoadSettings, EachMalformedVariableYieldsOneMessage) {
  Settings s = load({{"GPUSLICE_MEMORY_LIMIT", "8Gx"},
                     {"GPUSLICE_COMPUTE_LIMIT", "0=200"},
                     {"HCS_VRAM_QUOTA", "-1Gi"},
                     {"VCUDA_MEMORY_LIMIT", "1.5"},
                     {"CUDA_DEVICE_MEMORY_LIMIT", "abc"},
                     {"TENSOR_FUSION_CUDA_MEM_LIMIT", "{"},
                     {"GPUSLICE_SHARED_DIR", "relative/dir"}});
  ASSERT_EQ(s.errors.size(), 7u);
  for (const char* prefix :
       {"GPUSLICE_MEMORY_LIMIT='8Gx': ", "GPUSLICE_COMPUTE_LIMIT='0=200': ", "HCS_VRAM_QUOTA='-1Gi': ",
        "VCUDA_MEMORY_LIMIT='1.5': ", "CUDA_DEVICE_MEMORY_LIMIT='abc': ",
        "TENSOR_FUSION_CUDA_MEM_LIMIT='{': ", "GPUSLICE_SHARED_DIR='relative/dir': "}) {
    int matches = 0;
    for (const std::string& e : s.errors) matches += e.rfind(prefix, 0) == 0;
    EXPECT_EQ(matches, 1) << prefix;
  }
  EXPECT_FALSE(s.ok());
}

TEST(LoadSettings, MalformedHigherSourceDoesNotSilentlyFallBack) {
  // The fallback value exists, but the error is what the interposer acts on (fail closed).
  Settings s = load({{"GPUSLICE_MEMORY_LIMIT", "lots"}, {"HCS_VRAM_QUOTA", "1Gi"}});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.errors.size(), 1u);
}

TEST(LoadSettings, ZeroMemoryIsRefusedOutsideHami) {
  expect_single_error({{"GPUSLICE_MEMORY_LIMIT", "0"}}, "GPUSLICE_MEMORY_LIMIT='0': ", "greater than 0");
  expect_single_error({{"HCS_VRAM_QUOTA", "0Gi"}}, "HCS_VRAM_QUOTA='0Gi': ", "greater than 0");
  expect_single_error({{"VCUDA_MEMORY_LIMIT", "0"}}, "VCUDA_MEMORY_LIMIT='0': ");
  expect_single_error({{"GPUSLICE_COMPUTE_LIMIT", "0"}}, "GPUSLICE_COMPUTE_LIMIT='0': ");
}

TEST(LoadSettings, ErrorValuesArePrintableAndBounded) {
  Settings s = load({{"GPUSLICE_MEMORY_LIMIT", "8G\n[gpuslice 1] ERROR: forged"}});
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].find('\n'), std::string::npos);
  EXPECT_NE(s.errors[0].find("8G\\x0a[gpuslice"), std::string::npos) << s.errors[0];
  Settings long_value = load({{"GPUSLICE_MEMORY_LIMIT", std::string(100000, '9') + "x"}});
  ASSERT_EQ(long_value.errors.size(), 1u);
  EXPECT_LT(long_value.errors[0].size(), 400u);
}

TEST(LoadSettings, SharedDirAndState) {
  Settings s = load_ok({{"GPUSLICE_SHARED_DIR", "/run/gs/"}});
  EXPECT_EQ(s.shared_dir, "/run/gs");
  EXPECT_EQ(s.shared_file, "/run/gs/state");
  Settings root = load_ok({{"GPUSLICE_SHARED_DIR", "/"}});
  EXPECT_EQ(root.shared_file, "/state");
}

TEST(LoadSettings, HamiSharedCacheIsTheStateFile) {
  Settings s = load_ok({{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/vgpu/cudevshr.cache"}});
  EXPECT_EQ(s.shared_file, "/tmp/vgpu/cudevshr.cache");
  EXPECT_EQ(s.shared_dir, "/tmp/vgpu");
  Settings top = load_ok({{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/cudevshr.cache"}});
  EXPECT_EQ(top.shared_dir, "/");
  Settings native_wins = load_ok(
      {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/cudevshr.cache"}, {"GPUSLICE_SHARED_DIR", "/srv/gs"}});
  EXPECT_EQ(native_wins.shared_file, "/srv/gs/state");
  expect_single_error({{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "cache"}},
                      "CUDA_DEVICE_MEMORY_SHARED_CACHE='cache': ", "absolute");
  expect_single_error({{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/dir/"}},
                      "CUDA_DEVICE_MEMORY_SHARED_CACHE=", "directory");
}

TEST(LoadSettings, ProfileDirectory) {
  EXPECT_EQ(load_ok({{"PFLOG", "/tmp/prof"}}).profile_dir, "/tmp/prof");
  EXPECT_EQ(load_ok({{"PFLOG", "/tmp/prof"}, {"GPUSLICE_PROFILE_DIR", "/tmp/native"}}).profile_dir,
            "/tmp/native");
  EXPECT_EQ(load_ok({{"GPUSLICE_PROFILE_DIR", "out"}}).profile_dir, "out");
}

TEST(LoadSettings, LimitsFilePath) {
  EXPECT_EQ(load_ok({{"GPUSLICE_LIMITS_FILE", "/srv/limits"}}).limits_file, "/srv/limits");
  EXPECT_FALSE(load_ok({}).limits_file_required);
  EXPECT_TRUE(load_ok({{"GPUSLICE_LIMITS_REQUIRED", "1"}}).limits_file_required);
  EXPECT_FALSE(load_ok({{"GPUSLICE_LIMITS_REQUIRED", "0"}}).limits_file_required);
  expect_single_error({{"GPUSLICE_LIMITS_REQUIRED", "yes"}}, "GPUSLICE_LIMITS_REQUIRED=", "1 or 0");
  expect_single_error({{"GPUSLICE_LIMITS_FILE", "/" + std::string(5000, 'a')}},
                      "GPUSLICE_LIMITS_FILE=", "PATH_MAX");
}

// HAMi-core per-device variables whose suffix names no ordinal used to be ignored silently, leaving
// the device unlimited: each is now an error naming the variable.
TEST(LoadSettings, PerDeviceVariableWithALeadingZeroIsAnError) {
  expect_single_error({{"CUDA_DEVICE_MEMORY_LIMIT_00", "1g"}},
                      "CUDA_DEVICE_MEMORY_LIMIT_00='1g': ", "not a device index");
  expect_single_error({{"CUDA_DEVICE_SM_LIMIT_01", "20"}}, "CUDA_DEVICE_SM_LIMIT_01='20': ");
}

TEST(LoadSettings, PerDeviceVariableBeyondTheLastOrdinalIsAnError) {
  expect_single_error({{"CUDA_DEVICE_MEMORY_LIMIT_64", "1g"}}, "CUDA_DEVICE_MEMORY_LIMIT_64='1g': ", "0-63");
  expect_single_error({{"CUDA_DEVICE_SM_LIMIT_1000", "20"}}, "CUDA_DEVICE_SM_LIMIT_1000='20': ");
  expect_single_error({{"CUDA_DEVICE_MEMORY_LIMIT_x", "1g"}}, "CUDA_DEVICE_MEMORY_LIMIT_x='1g': ");
  expect_single_error({{"CUDA_DEVICE_MEMORY_LIMIT_", "1g"}}, "CUDA_DEVICE_MEMORY_LIMIT_='1g': ");
}

TEST(LoadSettings, PerDeviceVariablesOfRealOrdinalsStillWork) {
  Settings s = load_ok({{"CUDA_DEVICE_MEMORY_LIMIT_0", "1g"},
                        {"CUDA_DEVICE_SM_LIMIT_63", "20"},
                        {"CUDA_DEVICE_MEMORY_LIMIT_SOMETHING_ELSE_OK", ""}});
  EXPECT_EQ(s.memory.lookup(0, ""), kGi);
  EXPECT_EQ(s.compute.lookup(63, ""), 20u);
}

TEST(LoadSettings, TheProcessEnvironmentIsListedForPerDeviceVariables) {
  ASSERT_EQ(::setenv("CUDA_DEVICE_MEMORY_LIMIT_07", "1g", 1), 0);
  Settings s = load_settings_from_environment();
  ::unsetenv("CUDA_DEVICE_MEMORY_LIMIT_07");
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].rfind("CUDA_DEVICE_MEMORY_LIMIT_07='1g': ", 0), 0u) << s.errors[0];
}

TEST(LoadSettings, AnAllOnesSizeIsAnErrorNotUnlimited) {
  expect_single_error({{"GPUSLICE_MEMORY_LIMIT", "18446744073709551615"}},
                      "GPUSLICE_MEMORY_LIMIT=", "no limit");
  expect_single_error({{"VCUDA_MEMORY_LIMIT", "18446744073709551615"}}, "VCUDA_MEMORY_LIMIT=", "no limit");
  expect_single_error({{"TENSOR_FUSION_CUDA_MEM_LIMIT", "{\"0\": 18446744073709551615}"}},
                      "TENSOR_FUSION_CUDA_MEM_LIMIT=", "no limit");
}

TEST(LoadSettings, ComputeBusyIsEventsByDefaultOrLaunchesWhenAsked) {
  EXPECT_TRUE(load_ok({}).compute_busy_events);
  EXPECT_TRUE(load_ok({{"GPUSLICE_COMPUTE_BUSY", "events"}}).compute_busy_events);
  EXPECT_FALSE(load_ok({{"GPUSLICE_COMPUTE_BUSY", "launches"}}).compute_busy_events);
  expect_single_error({{"GPUSLICE_COMPUTE_BUSY", "gpu"}}, "GPUSLICE_COMPUTE_BUSY='gpu'",
                      "expected events or launches");
}

TEST(LoadSettings, TheGuaranteeTakesTheFormsOfTheLimit) {
  Settings s = load_ok({{"GPUSLICE_MEMORY_LIMIT", "8Gi"}, {"GPUSLICE_MEMORY_GUARANTEE", "2Gi"}});
  EXPECT_EQ(s.guarantee.lookup(0, ""), 2 * kGi);
  s = load_ok({{"GPUSLICE_MEMORY_LIMIT", "8Gi"}, {"GPUSLICE_MEMORY_GUARANTEE", "0=2Gi,1=4096Mi"}});
  EXPECT_EQ(s.guarantee.lookup(0, ""), 2 * kGi);
  EXPECT_EQ(s.guarantee.lookup(1, ""), 4 * kGi);
  EXPECT_EQ(s.guarantee.lookup(2, ""), std::nullopt);
  s = load_ok({{"GPUSLICE_MEMORY_LIMIT", "8Gi"},
               {"GPUSLICE_MEMORY_GUARANTEE", std::string("{\"") + kUuid + "\": \"3Gi\"}"}});
  EXPECT_EQ(s.guarantee.lookup(5, kUuid), 3 * kGi);
  EXPECT_TRUE(s.memory.lookup(0, "").has_value()) << "the limit is unchanged by a guarantee";
  s = load_ok({{"GPUSLICE_MEMORY_GUARANTEE", "1Gi"}});
  EXPECT_EQ(s.guarantee.lookup(0, ""), kGi) << "a guarantee without a limit is kept (nothing to exceed)";
}

TEST(LoadSettings, AMalformedGuaranteeFailsClosedLikeAMalformedLimit) {
  expect_single_error({{"GPUSLICE_MEMORY_LIMIT", "8Gi"}, {"GPUSLICE_MEMORY_GUARANTEE", "-1Gi"}},
                      "GPUSLICE_MEMORY_GUARANTEE='-1Gi'");
  expect_single_error({{"GPUSLICE_MEMORY_GUARANTEE", "lots"}}, "GPUSLICE_MEMORY_GUARANTEE='lots'");
  expect_single_error({{"GPUSLICE_MEMORY_GUARANTEE", "0=1Gi,0=2Gi"}},
                      "GPUSLICE_MEMORY_GUARANTEE='0=1Gi,0=2Gi'");
  expect_single_error({{"GPUSLICE_MEMORY_GUARANTEE", "0"}}, "GPUSLICE_MEMORY_GUARANTEE='0'");
}

TEST(LoadSettings, AGuaranteeAboveTheLimitNamesBothVariablesAndValues) {
  expect_single_error({{"GPUSLICE_MEMORY_LIMIT", "8Gi"}, {"GPUSLICE_MEMORY_GUARANTEE", "9Gi"}},
                      "GPUSLICE_MEMORY_GUARANTEE='9Gi'", "above GPUSLICE_MEMORY_LIMIT='8Gi' on every device");
  expect_single_error({{"GPUSLICE_MEMORY_LIMIT", "0=8Gi,1=1Gi"}, {"GPUSLICE_MEMORY_GUARANTEE", "2Gi"}},
                      "GPUSLICE_MEMORY_GUARANTEE='2Gi'", "on device 1");
  expect_single_error({{"GPUSLICE_MEMORY_LIMIT", "4Gi"}, {"GPUSLICE_MEMORY_GUARANTEE", "1=6Gi"}},
                      "GPUSLICE_MEMORY_GUARANTEE='1=6Gi'", "on device 1");
  expect_single_error({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"GPUSLICE_MEMORY_GUARANTEE", "2Gi"}},
                      "GPUSLICE_MEMORY_GUARANTEE='2Gi'", "the memory limit of the compatibility variables");
  Settings s = load({{"GPUSLICE_MEMORY_LIMIT", "8Gi"}, {"GPUSLICE_MEMORY_GUARANTEE", "9Gi"}});
  EXPECT_TRUE(s.guarantee.empty()) << "a refused guarantee is not kept";
  EXPECT_EQ(s.memory.lookup(0, ""), 8 * kGi);
  load_ok({{"GPUSLICE_MEMORY_LIMIT", "8Gi"}, {"GPUSLICE_MEMORY_GUARANTEE", "8Gi"}});
}

TEST(GuaranteeAboveLimit, LooksAtEveryKeyEitherSideNames) {
  const auto values = [](const char* text) {
    return *parse_device_values(text, ValueKind::Size, SizeDialect::Native);
  };
  EXPECT_EQ(guarantee_above_limit(values("1Gi"), values("2Gi")), std::nullopt);
  EXPECT_EQ(guarantee_above_limit(values("3Gi"), values("2Gi")), "every device");
  EXPECT_EQ(guarantee_above_limit(values("0=1Gi,7=3Gi"), values("2Gi")), "device 7");
  EXPECT_EQ(guarantee_above_limit(values("1Gi"), values("0=2Gi,3=512Mi")), "device 3");
  const std::string uuid_limit = std::string("{\"") + kUuid + "\": \"1Gi\"}";
  EXPECT_EQ(guarantee_above_limit(values("2Gi"), values(uuid_limit.c_str())),
            "gpu-3430f778-7a25-704c-9090-8b0bb2478114");
  EXPECT_EQ(guarantee_above_limit(values("0=4Gi"), values(uuid_limit.c_str())), std::nullopt)
      << "index against UUID: checked where the device is known";
}

// GPUSLICE_RECLAIM_DEADLINE: a duration from 1 us to 600 s, 2 s unset; anything else fails the start
// naming the variable (it was logged and replaced by the default).
TEST(LoadSettings, ReclaimDeadlineIsADurationAndAMalformedOneFailsClosed) {
  EXPECT_EQ(load_ok({}).reclaim_deadline_ns, 2'000'000'000u);
  EXPECT_EQ(load_ok({{"GPUSLICE_RECLAIM_DEADLINE", "500ms"}}).reclaim_deadline_ns, 500'000'000u);
  EXPECT_EQ(load_ok({{"GPUSLICE_RECLAIM_DEADLINE", "100us"}}).reclaim_deadline_ns, 100'000u);
  for (const char* bad : {"2", "0s", "601s", "soon", "-1s"})
    expect_single_error({{"GPUSLICE_RECLAIM_DEADLINE", bad}},
                        std::string("GPUSLICE_RECLAIM_DEADLINE='") + bad + "'");
}

}  // namespace
}  // namespace gpuslice::config
