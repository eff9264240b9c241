// End to end: a compute limit caps the container's GPU time, read from the device's own timeline.
// Probe apps under the real libgpuslice.so on the simulated driver, whose timing events complete
// when the device reaches them: a launch-bound loop below its limit is not slowed, a device-bound
// one is held to its limit within 3 points.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "process.h"

namespace gpuslice::test {
namespace {

class ComputeE2E : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("gpuslice-compute-e2e"); }
  void TearDown() override { remove_tree(dir_); }

  // A container of its own (its own simulated GPU too, so side-by-side runs do not share a device).
  Env container(const std::string& name, const std::string& limit) const {
    Env env = mock_container_env(dir_ + "/" + name, 1, 0, GPUSLICE_MOCK_DIR, GPUSLICE_PRELOAD);
    if (!limit.empty()) env["GPUSLICE_COMPUTE_LIMIT"] = limit;
    return env;
  }

  // Runs the step loops side by side (same CPU contention for all) and returns their outputs.
  std::vector<Outcome> run_side_by_side(const std::vector<std::pair<Env, std::vector<std::string>>>& runs) {
    std::vector<std::unique_ptr<Background>> children;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      std::vector<std::string> argv = {GPUSLICE_PROBE_APP, "--scenario", "steps"};
      argv.insert(argv.end(), runs[i].second.begin(), runs[i].second.end());
      children.push_back(
          std::make_unique<Background>(argv, runs[i].first, dir_ + "/out" + std::to_string(i) + ".txt"));
    }
    std::vector<Outcome> outcomes;
    for (auto& child : children) {
      Outcome o;
      o.exit_code = child->wait();
      o.out = child->output();
      o.values = parse_values(o.out);
      outcomes.push_back(o);
    }
    return outcomes;
  }

  std::string dir_;
};

// 10 x 5 us kernels and 0.5 ms of host work per step keep the device busy under 10% of the time.
// Counting launch gaps under 1 ms as busy (the old definition), 50% held it to about half its steps.
TEST_F(ComputeE2E, LaunchBoundStepsUnderAHalfLimitRunAtFullSpeed) {
  const std::vector<std::string> loop = {"--kernel-us", "5",   "--kernels", "10",
                                         "--host-us",   "500", "--seconds", "3"};
  const auto outcomes = run_side_by_side({{container("free", ""), loop}, {container("limited", "50"), loop}});
  for (const Outcome& o : outcomes) ASSERT_EQ(o.exit_code, 0) << o.out;
  const long long free_steps = outcomes[0].num("steps");
  const long long limited_steps = outcomes[1].num("steps");
  ASSERT_GT(free_steps, 1000);
  EXPECT_GE(limited_steps * 10, free_steps * 9) << limited_steps << " of " << free_steps << " steps";
}

// Device-bound: 2 ms kernels back to back. From the second second on, the kernels launched occupy
// the device limit% of the time, within 3 points.
TEST_F(ComputeE2E, DeviceBoundWorkIsHeldWithinThreePoints) {
  const std::vector<std::string> loop = {"--kernel-us", "2000", "--kernels",         "1",   "--host-us", "0",
                                         "--seconds",   "4",    "--measure-from-ms", "1000"};
  const std::vector<int> limits = {20, 50, 80};
  std::vector<std::pair<Env, std::vector<std::string>>> runs;
  for (int limit : limits)
    runs.push_back({container("limit" + std::to_string(limit), std::to_string(limit)), loop});
  const auto outcomes = run_side_by_side(runs);
  for (std::size_t i = 0; i < limits.size(); ++i) {
    ASSERT_EQ(outcomes[i].exit_code, 0) << outcomes[i].out;
    const long long busy = outcomes[i].num("busy_permille");
    EXPECT_GE(busy, limits[i] * 10 - 30) << "limit " << limits[i] << "%: busy " << busy << " per mille";
    EXPECT_LE(busy, limits[i] * 10 + 30) << "limit " << limits[i] << "%: busy " << busy << " per mille";
  }
}

}  // namespace
}  // namespace gpuslice::test
