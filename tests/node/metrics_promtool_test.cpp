// The exposition checked by Prometheus's own linter (`promtool check metrics`, Debian package
// `prometheus`): snake_case names and labels, counters ending in _total, base units, HELP on every
// family. Every family is populated so every name and label is linted.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "node/metrics.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

NodeView full_view() {
  NodeView view;
  view.node = "gpu-node-1";
  view.podresources = AttributionState::Up;
  view.containers_removed = 3;
  view.device_plugin = true;
  view.plugins = {{"gpuslice.io/vram", RegistrationState::Registered, 2},
                  {"gpuslice.io/cores", RegistrationState::WaitingForKubelet, 0}};
  GpuInfo gpu;
  gpu.index = 0;
  gpu.uuid = "GPU-11111111-aaaa-4000-8000-000000000000";
  gpu.name = "NVIDIA H100 80GB HBM3";
  gpu.memory_total_bytes = 80ULL << 30;
  gpu.memory_used_bytes = 3ULL << 30;
  gpu.utilization_percent = 42;
  view.gpus.push_back(gpu);
  ContainerView c;
  c.id = "alloc-3f9a0c1d2e4b5a69";
  c.owner = {"ml", "trainer-0", "worker"};
  c.has_state = true;
  ContainerDevice d;
  d.uuid = gpu.uuid;
  d.gpu = 0;
  d.quota_bytes = 8ULL << 30;
  d.used_bytes = 1ULL << 30;
  d.compute_limit = 30;
  d.refused_allocations = 2;
  d.utilization_ratio = 0.25;
  c.devices.push_back(d);
  c.processes.push_back({});
  view.containers.push_back(c);
  ContainerView broken;
  broken.id = "alloc-0000000000000bad";
  broken.state = ContainerState::Error;
  broken.error = "truncated";
  view.containers.push_back(broken);
  return view;
}

TEST(MetricsLint, PromtoolCheckMetricsFindsNothingToComplainAbout) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    if (std::getenv("CI"))
      FAIL() << "promtool is missing in CI (Debian package prometheus, Makefile TEST_PACKAGES)";
    GTEST_SKIP() << "promtool not installed (apt-get install prometheus); the exposition was not linted";
  }
  test::TempDir dir;
  const std::string file = dir / "metrics.txt";
  const std::string text = render_metrics(full_view(), "1.2.3");
  test::write_file(file, text);
  FILE* pipe = ::popen(("promtool check metrics < '" + file + "' 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output << "\n--- exposition ---\n" << text;
  EXPECT_EQ(output, "") << "promtool complains:\n" << output << "\n--- exposition ---\n" << text;
}

}  // namespace
}  // namespace gpuslice::node
