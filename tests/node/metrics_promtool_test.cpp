// The exposition checked by Prometheus's own linter (`promtool check metrics`, Debian package
// `prometheus`): snake_case names and labels, counters ending in _total, base units, HELP on every
// family. Every family is populated so every name and label is linted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "node/api/metrics.h"
#include "shared_state/ledger.h"
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
  d.guarantee_bytes = 2ULL << 30;
  d.borrowed_bytes = 512ULL << 20;
  d.on_host_bytes = 256ULL << 20;
  d.reclaim_episodes = 1;
  d.reclaim_ns = 120'000'000;
  d.reclaim_bytes = 256ULL << 20;
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

bool have_promtool() { return std::system("command -v promtool >/dev/null 2>&1") == 0; }

// promtool's verdict on an exposition: its output, empty when it has nothing to complain about.
std::string promtool_check(const std::string& text, bool& passed) {
  test::TempDir dir;
  const std::string file = dir / "metrics.txt";
  test::write_file(file, text);
  FILE* pipe = ::popen(("promtool check metrics < '" + file + "' 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    passed = false;
    return "popen failed";
  }
  std::string output;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  passed = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return output;
}

TEST(MetricsLint, PromtoolCheckMetricsFindsNothingToComplainAbout) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    if (std::getenv("CI"))
      FAIL() << "promtool is missing in CI (Debian package prometheus, Makefile TEST_PACKAGES)";
    GTEST_SKIP() << "promtool not installed (apt-get install prometheus); the exposition was not linted";
  }
  const std::string text = render_metrics(full_view(), "1.2.3");
  bool passed = false;
  const std::string output = promtool_check(text, passed);
  EXPECT_TRUE(passed) << output << "\n--- exposition ---\n" << text;
  EXPECT_EQ(output, "") << "promtool complains:\n" << output << "\n--- exposition ---\n" << text;
}

// docs/metrics.md is the contract of the dashboard and the alert rules: every family the daemon
// exports (full_view populates them all) is named there in a table row.
TEST(MetricsDoc, TheMetricsDocumentNamesEveryFamilyTheDaemonExports) {
  const std::string text = render_metrics(full_view(), "1.2.3");
  const std::string doc = test::read_file(std::string(GPUSLICE_NODE_FIXTURES) + "/../../../docs/metrics.md");
  ASSERT_FALSE(doc.empty());
  std::size_t families = 0;
  for (std::size_t at = text.find("# TYPE "); at != std::string::npos; at = text.find("# TYPE ", at + 1)) {
    const std::size_t start = at + 7;
    const std::string name = text.substr(start, text.find(' ', start) - start);
    ++families;
    EXPECT_NE(doc.find("| `" + name + "` |"), std::string::npos) << "docs/metrics.md has no row for " << name;
  }
  EXPECT_GE(families, 20u) << text;
}

// Replaces the first occurrence of `from` in the file at `path` with `to` (same length), in place:
// what a tenant does to its own state file, which it may write.
bool patch_file(const std::string& path, const std::string& from, const std::string& to) {
  const std::string content = test::read_file(path);
  const std::size_t at = content.find(from);
  if (at == std::string::npos || from.size() != to.size()) return false;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok =
      ::pwrite(fd, to.data(), to.size(), static_cast<off_t>(at)) == static_cast<ssize_t>(to.size());
  ::close(fd);
  return ok;
}

// A tenant writes bytes that are not UTF-8 into its own state file (a device UUID, its command
// line): Prometheus rejects a whole scrape with one invalid label value, so every other
// container's series would go with it.
TEST(MetricsLint, NonUtf8UuidInAStateFileDoesNotBreakTheScrape) {
  if (!have_promtool()) {
    if (std::getenv("CI"))
      FAIL() << "promtool is missing in CI (Debian package prometheus, Makefile TEST_PACKAGES)";
    GTEST_SKIP() << "promtool not installed (apt-get install prometheus)";
  }
  test::TempDir dir;
  HostLayout layout(dir / "root");
  const std::string good_uuid = "GPU-11111111-aaaa-4000-8000-000000000000";
  auto good = shm::Ledger::open(layout.state_file("good"), shm::Ledger::Mode::Process);
  ASSERT_TRUE(good.ok()) << good.error();
  ASSERT_TRUE((*good)->attach_device(good_uuid, 0, 1ULL << 30, 512ULL << 20, 0).ok());
  ASSERT_TRUE((*good)->register_process().ok());

  const std::string evil_uuid = "GPU-\xff\xfe\xc0\xaf-\xed\xa0\x80-\"\\\n-\xf4\x90\x80\x80-\xe2\x82";
  auto evil = shm::Ledger::open(layout.state_file("evil"), shm::Ledger::Mode::Process);
  ASSERT_TRUE(evil.ok()) << evil.error();
  ASSERT_TRUE((*evil)->attach_device(evil_uuid, 0, 1ULL << 30, 256ULL << 20, 0).ok());
  ASSERT_TRUE((*evil)->register_process().ok());
  // Its command line (this test program's, as the library recorded it) becomes invalid UTF-8 too.
  const std::string own = (*evil)->snapshot().processes.at(0).command.substr(0, 8);
  ASSERT_EQ(own.size(), 8u);
  ASSERT_TRUE(patch_file(layout.state_file("evil"), own, "\xc3\x28\xa0\xa1\xe2\x28\xa1\xff"));

  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 2u);
  const std::string text = render_metrics(*view, "t");
  bool passed = false;
  const std::string output = promtool_check(text, passed);
  EXPECT_TRUE(passed) << "promtool rejects the exposition:\n" << output << "\n--- exposition ---\n" << text;

  // The neighbour's series are all there; the hostile one is an error (its UUID is no UUID), so
  // none of its device series is exported.
  EXPECT_NE(text.find("gpuslice_container_memory_quota_bytes{node=\"\",gpuslice_allocation=\"good\","
                      "namespace=\"\",pod=\"\",container=\"\",gpu=\"\",uuid=\"" +
                      good_uuid + "\"} 536870912"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpuslice_container_processes{node=\"\",gpuslice_allocation=\"good\""),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("uuid=\"GPU-\xef\xbf\xbd"), std::string::npos) << text;
}

TEST(MetricsLabels, ValuesAreValidUtf8AndBounded) {
  EXPECT_EQ(valid_utf8("plain ascii", 64), "plain ascii");
  EXPECT_EQ(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 64),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(valid_utf8("a\xff"
                       "b",
                       64),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(valid_utf8("\xc0\xaf", 64), "\xef\xbf\xbd\xef\xbf\xbd") << "overlong";
  EXPECT_EQ(valid_utf8("\xed\xa0\x80", 64), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd") << "surrogate";
  EXPECT_EQ(valid_utf8("\xf4\x90\x80\x80", 64), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd")
      << "above U+10FFFF";
  EXPECT_EQ(valid_utf8("\xe2\x82", 64), "\xef\xbf\xbd\xef\xbf\xbd") << "truncated sequence";
  // Cut at a character boundary, never inside one.
  EXPECT_EQ(valid_utf8("ab\xe2\x82\xac", 4), "ab");
  const std::string huge(100000, 'x');
  EXPECT_EQ(escape_label_value(huge).size(), kMaxLabelValueBytes);

  NodeView view = full_view();
  view.containers[0].owner.pod = std::string(5000, 'p') + "\xff";
  const std::string text = render_metrics(view, "1.2.3");
  EXPECT_EQ(text.find(std::string(kMaxLabelValueBytes + 1, 'p')), std::string::npos);
  EXPECT_NE(text.find("pod=\"" + std::string(kMaxLabelValueBytes, 'p') + "\""), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::node
