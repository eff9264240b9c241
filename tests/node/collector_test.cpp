#include "node/collector.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "shared_state/ledger.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

constexpr const char* kUuid = "GPU-11111111-aaaa-4000-8000-000000000000";

std::unique_ptr<shm::Ledger> make_state(const std::string& path, int& dev) {
  auto opened = shm::Ledger::open(path, shm::Ledger::Mode::Process);
  EXPECT_TRUE(opened.ok()) << opened.error();
  if (!opened.ok()) return nullptr;
  auto ledger = std::move(opened).value();
  auto slot = ledger->attach_device(kUuid, 0, 1ULL << 30, shm::kUnlimited, 0);
  EXPECT_TRUE(slot.ok());
  dev = slot.ok() ? *slot : -1;
  EXPECT_TRUE(ledger->register_process().ok());
  return ledger;
}

TEST(Collector, UtilizationFromBusyTimeDeltas) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  int dev = -1;
  auto ledger = make_state(layout.state_file("a"), dev);
  ASSERT_TRUE(ledger);
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);

  auto first = collector.refresh();
  ASSERT_EQ(first->containers.size(), 1u);
  ASSERT_EQ(first->containers[0].devices.size(), 1u);
  EXPECT_FALSE(first->containers[0].devices[0].utilization_ratio) << "no interval yet";
  EXPECT_FALSE(first->containers[0].devices[0].quota_bytes) << "unlimited";
  EXPECT_FALSE(first->containers[0].devices[0].gpu) << "no NVML: host index unknown";

  ledger->add_busy_ns(dev, 600'000'000);
  clock.advance_ns(2'000'000'000);
  auto second = collector.refresh();
  ASSERT_TRUE(second->containers[0].devices[0].utilization_ratio);
  EXPECT_DOUBLE_EQ(*second->containers[0].devices[0].utilization_ratio, 0.3);
  EXPECT_EQ(collector.view(), second);

  clock.advance_ns(1'000'000'000);
  auto idle = collector.refresh();
  EXPECT_DOUBLE_EQ(*idle->containers[0].devices[0].utilization_ratio, 0.0);
}

TEST(Collector, ReportsUnreadableStateAndForgetsRemovedContainers) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  test::write_file(layout.state_file("broken"), "this is not a ledger");
  test::write_file(layout.limits_file("badlimits"), "no equals sign here\n");
  std::filesystem::create_directories(layout.containers_dir() + "/not valid!");
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 2u);  // the invalid name is skipped
  EXPECT_EQ(view->containers[0].id, "badlimits");
  EXPECT_NE(view->containers[0].error.find("line 1"), std::string::npos) << view->containers[0].error;
  EXPECT_EQ(view->containers[1].id, "broken");
  EXPECT_FALSE(view->containers[1].has_state);
  EXPECT_FALSE(view->containers[1].error.empty());

  std::filesystem::remove_all(layout.container_dir("broken"));
  EXPECT_EQ(collector.refresh()->containers.size(), 1u);
}

TEST(Collector, FindsWebhookPodsInTheKubeletPodsDirectory) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  const std::string volume =
      dir / "pods/0d9f6c1e-1111-2222-3333-444455556666/volumes/kubernetes.io~empty-dir";
  int dev = -1;
  auto ledger = make_state(volume + "/gpuslice-state-c0/state", dev);
  ASSERT_TRUE(ledger);
  std::filesystem::create_directories(volume + "/unrelated-volume");
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_kubelet_pods_dir(dir / "pods");
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 1u);
  EXPECT_EQ(view->containers[0].id, "pod-0d9f6c1e-1111-2222-3333-444455556666-c0");
  EXPECT_TRUE(view->containers[0].has_state);
  EXPECT_EQ(view->containers[0].processes.size(), 1u);
}

TEST(Collector, MapsContainerDevicesToHostGpusByUuid) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  int dev = -1;
  auto ledger = make_state(layout.state_file("a"), dev);
  ASSERT_TRUE(ledger);
  GpuInfo other, ours;
  other.index = 0;
  other.uuid = "GPU-99999999-aaaa-4000-8000-000000000000";
  ours.index = 1;
  ours.uuid = "gpu-11111111-AAAA-4000-8000-000000000000";  // case differs
  StaticGpuSource gpus({other, ours});
  test::FakeClock clock;
  Collector collector(layout, &gpus, clock);
  auto view = collector.refresh();
  ASSERT_EQ(view->gpus.size(), 2u);
  ASSERT_EQ(view->containers[0].devices.size(), 1u);
  EXPECT_EQ(view->containers[0].devices[0].gpu, 1u);
  EXPECT_EQ(view->containers[0].devices[0].cuda_index, 0);
}

}  // namespace
}  // namespace gpuslice::node
