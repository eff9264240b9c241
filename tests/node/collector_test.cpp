#include "node/node_view/collector.h"

#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "node/api/http_api.h"
#include "node/api/metrics.h"
#include "node/host/allocation_record.h"
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

TEST(Collector, TruncatedStateFileDoesNotCrashTheDaemon) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  int dev = -1;
  auto ledger = make_state(layout.state_file("a"), dev);
  ASSERT_TRUE(ledger);
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  ASSERT_EQ(collector.refresh()->containers.size(), 1u);
  ledger.reset();  // the tenant's own processes would fault on their mapping; only the daemon is tested
  // The tenant truncates its own state file while the daemon keeps it open.
  ASSERT_EQ(::truncate(layout.state_file("a").c_str(), 0), 0);
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 1u);
  EXPECT_TRUE(view->containers[0].devices.empty());
  EXPECT_NE(view->containers[0].error.find("truncated"), std::string::npos) << view->containers[0].error;
}

TEST(Collector, FindsWebhookPodsInTheKubeletPodsDirectory) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  const std::string volume =
      dir / "pods/0d9f6c1e-1111-2222-3333-444455556666/volumes/kubernetes.io~empty-dir";
  int dev = -1;
  // A kubelet makes the emptyDir 0777 without the sticky bit: the library refuses it as its shared
  // directory (a real kubelet's hcs pod failed every CUDA call), and keeps its state one level down.
  std::filesystem::create_directories(volume + "/gpuslice-state-c0");
  ASSERT_EQ(::chmod((volume + "/gpuslice-state-c0").c_str(), 0777), 0);
  auto refused = shm::Ledger::open(volume + "/gpuslice-state-c0/state", shm::Ledger::Mode::Process);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("without the sticky bit"), std::string::npos) << refused.error();
  auto ledger = make_state(volume + "/gpuslice-state-c0/shared/state", dev);
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

// A `gpuslice run` job on a plain host keeps its state in /tmp/gpuslice-<uid> by default, which the
// packaged daemon (PrivateTmp) never sees; jobs run with --shared-dir <root>/jobs/<name> are reported.
TEST(Collector, PlainHostJobsUnderTheJobsDirectoryAreReported) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  int dev = -1;
  auto ledger = make_state(layout.jobs_dir() + "/train/state", dev);
  ASSERT_TRUE(ledger);
  std::filesystem::create_directories(dir / "elsewhere");
  std::filesystem::create_directory_symlink(dir / "elsewhere", layout.jobs_dir() + "/link");
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  EXPECT_TRUE(collector.refresh()->containers.empty()) << "only with --host-jobs";
  collector.set_host_jobs(true);
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 1u) << "the link is skipped";
  EXPECT_EQ(view->containers[0].id, "job-train");
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

// Memory that follows priority: what a borrowing container's ledger says (its guarantee, borrowed and
// on-host bytes, reclaim episodes) reaches /metrics and GET /api/v1/status as written there.
TEST(Collector, ReclaimFiguresOfALedgerReachTheMetricsAndTheApi) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  int dev = -1;
  auto ledger = make_state(layout.state_file("borrower"), dev);
  ASSERT_TRUE(ledger);
  constexpr std::uint64_t kMiB = 1ULL << 20;
  ledger->set_guarantee(dev, 64 * kMiB);
  ASSERT_TRUE(ledger->try_reserve(dev, 200 * kMiB));
  ledger->set_reclaim_figures(dev, 144 * kMiB, 48 * kMiB);
  ledger->add_reclaim_episode(dev, 250'000'000, 32 * kMiB);
  ledger->add_reclaim_episode(dev, 500'000'000, 16 * kMiB);
  // A container without a guarantee that never borrowed has no reclaim series.
  int plain_dev = -1;
  auto plain = make_state(layout.state_file("plain"), plain_dev);
  ASSERT_TRUE(plain);

  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  auto view = collector.refresh();
  const std::string text = render_metrics(*view, "t");
  const std::string labels =
      "{node=\"\",gpuslice_allocation=\"borrower\",namespace=\"\",pod=\"\",container=\"\",gpu=\"\",uuid=\"" +
      std::string(kUuid) + "\"} ";
  for (const std::string& line : {
           "gpuslice_container_memory_guarantee_bytes" + labels + std::to_string(64 * kMiB),
           "gpuslice_container_memory_used_bytes" + labels + std::to_string(200 * kMiB),
           "gpuslice_container_memory_borrowed_bytes" + labels + std::to_string(144 * kMiB),
           "gpuslice_container_memory_on_host_bytes" + labels + std::to_string(48 * kMiB),
           "gpuslice_container_memory_unmovable_bytes" + labels + std::to_string(56 * kMiB),
           "gpuslice_container_reclaim_episodes_total" + labels + "2",
           "gpuslice_container_reclaim_bytes_total" + labels + std::to_string(48 * kMiB),
           "gpuslice_container_reclaim_seconds_total" + labels + "0.75",
       }) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << "missing: " << line << "\n" << text;
  }
  EXPECT_EQ(text.find("gpuslice_container_memory_borrowed_bytes{node=\"\",gpuslice_allocation=\"plain\""),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("gpuslice_container_memory_guarantee_bytes{node=\"\",gpuslice_allocation=\"plain\""),
            std::string::npos)
      << text;

  // The daemon's API: the same figures as `gpuslice status --json` reads from the ledger.
  const auto doc = nlohmann::json::parse(status_json(*view, "t"));
  nlohmann::json device;
  for (const auto& c : doc["containers"]) {
    if (c["id"] == "borrower") device = c["devices"][0];
  }
  ASSERT_TRUE(device.is_object()) << doc.dump();
  EXPECT_EQ(device["guarantee_bytes"], 64 * kMiB);
  EXPECT_EQ(device["borrowed_bytes"], 144 * kMiB);
  EXPECT_EQ(device["on_host_bytes"], 48 * kMiB);
  EXPECT_EQ(device["unmovable_bytes"], 56 * kMiB);
  EXPECT_EQ(device["reclaim_episodes"], 2);
  EXPECT_EQ(device["reclaim_ns"], 750'000'000);
  EXPECT_EQ(device["reclaim_bytes"], 48 * kMiB);
}

// The kubelet as the collector sees it: whatever the test lists, or an error.
class FakeLister final : public AllocationLister {
 public:
  Result<std::vector<ListedDevices>> list() override {
    if (!error.empty()) return make_error(error);
    return listed;
  }
  std::uint64_t kubelet_instance() const override { return instance; }
  std::vector<ListedDevices> listed;
  std::string error;
  std::uint64_t instance = 1;
};

// Another pod of the node that keeps the kubelet's answer non-empty (an empty one removes nothing).
void another_pod(FakeLister& kubelet) {
  kubelet.listed.push_back({"gpuslice.io/vram", {"k-m99"}, {"ml", "other", "c"}});
}

// A container directory as the device plugin makes it, with its allocation record.
std::string allocate(const HostLayout& layout, const std::string& id, const std::vector<std::string>& ids,
                     std::uint64_t at_ns = 1) {
  std::filesystem::create_directories(layout.state_dir(id));
  std::filesystem::create_directories(layout.config_dir(id));
  AllocationRecord record{"gpuslice.io/vram", ids.size(), devices_digest(ids), at_ns};
  test::write_file(layout.allocation_file(id), render_allocation_record(record));
  return id;
}

std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

constexpr std::uint64_t kGrace = 10'000'000'000ULL;

TEST(CollectorGc, DescriptorsAndMappingsStayBoundedAndReturnWhenDirectoriesGo) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  constexpr int kContainers = 64;
  for (int i = 0; i < kContainers; ++i) {
    int dev = -1;
    auto ledger = make_state(layout.state_file("c" + std::to_string(i)), dev);  // closed again at once
    ASSERT_TRUE(ledger);
  }
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  const std::size_t before = open_fds();
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), static_cast<std::size_t>(kContainers));
  for (const auto& c : view->containers) EXPECT_TRUE(c.has_state) << c.id << ": " << c.error;
  EXPECT_EQ(open_fds(), before) << "a descriptor per container is kept between scans";
  collector.refresh();
  EXPECT_EQ(open_fds(), before);

  std::filesystem::remove_all(layout.containers_dir());
  EXPECT_TRUE(collector.refresh()->containers.empty());
  EXPECT_EQ(open_fds(), before);
}

TEST(CollectorGc, ADirectoryALiveProcessHoldsIsKeptAndRemovedOnceItExits) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  const std::string held = allocate(layout, "alloc-held", {"k-m0"});
  const std::string idle = allocate(layout, "alloc-idle", {"k-m1"});
  int dev = -1;
  auto process = make_state(layout.state_file(held), dev);  // a live process of the container
  ASSERT_TRUE(process);
  {
    int idle_dev = -1;
    ASSERT_TRUE(make_state(layout.state_file(idle), idle_dev));  // used once, process gone
  }
  FakeLister kubelet;  // lists neither: both pods are gone
  another_pod(kubelet);
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_attribution(&kubelet, kGrace);
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 2u);
  for (const auto& c : view->containers) EXPECT_EQ(c.state, ContainerState::Released) << c.id;

  clock.advance_ns(kGrace);
  view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 1u);
  EXPECT_EQ(view->containers[0].id, held) << "a directory whose ledger a live process holds is kept";
  EXPECT_FALSE(std::filesystem::exists(layout.container_dir(idle)));
  EXPECT_EQ(view->containers_removed, 1u);

  process.reset();  // the process exits: its lock goes
  view = collector.refresh();
  EXPECT_TRUE(view->containers.empty());
  EXPECT_FALSE(std::filesystem::exists(layout.container_dir(held)));
  EXPECT_EQ(view->containers_removed, 2u);
}

// The daemon's node-channel assignments follow what the kubelet lists (priority_assignment.h): each
// refresh hands the observer the kubelet's answer, and nothing when the kubelet cannot be asked.
TEST(Collector, TheListingObserverSeesEachAnswerOfTheKubelet) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  FakeLister kubelet;
  kubelet.listed.push_back({"gpuslice.io/cores", {"k-c0", "k-c1"}, {"serving", "llm-0", "main"}});
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_attribution(&kubelet, kGrace);
  std::vector<std::vector<ListedDevices>> seen;
  collector.set_listing_observer(
      [&seen](const std::vector<ListedDevices>& listed) { seen.push_back(listed); });
  collector.refresh();
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_EQ(seen[0].size(), 1u);
  EXPECT_EQ(seen[0][0].owner.namespace_name, "serving");
  EXPECT_EQ(seen[0][0].device_ids.size(), 2u);
  kubelet.error = "connection refused";
  collector.refresh();
  EXPECT_EQ(seen.size(), 1u) << "no answer: nothing to follow";
}

TEST(CollectorGc, NothingIsRemovedWhileTheKubeletCannotBeAsked) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  const std::string id = allocate(layout, "alloc-a", {"k-m0"});
  FakeLister kubelet;
  kubelet.listed.push_back({"gpuslice.io/vram", {"k-m0"}, {"ml", "p", "c"}});
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_attribution(&kubelet, kGrace);
  EXPECT_EQ(collector.refresh()->containers[0].owner.pod, "p");

  kubelet.error = "no kubelet PodResources socket";
  clock.advance_ns(10 * kGrace);
  auto view = collector.refresh();
  EXPECT_EQ(view->podresources, AttributionState::Down);
  ASSERT_EQ(view->containers.size(), 1u);
  EXPECT_EQ(view->containers[0].state, ContainerState::Ok);
  EXPECT_EQ(view->containers[0].owner.pod, "p") << "the last known pod is kept while the kubelet is away";
  EXPECT_TRUE(std::filesystem::exists(layout.container_dir(id)));
  EXPECT_NE(render_metrics(*view, "t").find("gpuslice_podresources_up{node=\"\"} 0"), std::string::npos);
}

TEST(CollectorGc, OfTwoDirectoriesWithTheSameDevicesTheNewestIsTheListedOne) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  // Device ids are handed out again once a pod is gone.
  allocate(layout, "alloc-old", {"k-m0", "k-m1"}, 100);
  allocate(layout, "alloc-new", {"k-m1", "k-m0"}, 200);
  FakeLister kubelet;
  kubelet.listed.push_back({"gpuslice.io/vram", {"k-m0", "k-m1"}, {"ml", "second", "c"}});
  kubelet.listed.push_back({"gpuslice.io/cores", {"k-m0", "k-m1"}, {"ml", "other", "c"}});
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_attribution(&kubelet, kGrace);
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 2u);
  EXPECT_EQ(view->containers[0].id, "alloc-new");
  EXPECT_EQ(view->containers[0].owner.pod, "second");
  EXPECT_EQ(view->containers[0].state, ContainerState::Ok);
  EXPECT_EQ(view->containers[1].id, "alloc-old");
  EXPECT_TRUE(view->containers[1].owner.pod.empty());
  EXPECT_EQ(view->containers[1].state, ContainerState::Released);
}

TEST(CollectorGc, DirectoriesWithoutAnAllocationRecordAreNeverRemoved) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  std::filesystem::create_directories(layout.state_dir("alloc-legacy"));
  FakeLister kubelet;
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_attribution(&kubelet, kGrace);
  collector.refresh();
  clock.advance_ns(2 * kGrace);
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 1u);
  EXPECT_EQ(view->containers[0].state, ContainerState::Ok);
  EXPECT_TRUE(std::filesystem::exists(layout.container_dir("alloc-legacy")));
}

TEST(CollectorGc, RemovalDoesNotFollowALinkPlantedInTheStateDirectory) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  const std::string id = allocate(layout, "alloc-a", {"k-m0"});
  test::write_file(dir / "outside/keep", "precious");
  std::filesystem::create_directory_symlink(dir / "outside", layout.state_dir(id) + "/link");
  std::filesystem::create_directories(layout.state_dir(id) + "/deep/er");
  test::write_file(layout.state_dir(id) + "/deep/er/file", "x");
  FakeLister kubelet;
  another_pod(kubelet);
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_attribution(&kubelet, kGrace);
  collector.refresh();
  clock.advance_ns(kGrace);
  EXPECT_TRUE(collector.refresh()->containers.empty());
  EXPECT_FALSE(std::filesystem::exists(layout.container_dir(id)));
  EXPECT_EQ(test::read_file(dir / "outside/keep"), "precious");
}

// A kubelet restarted while the API server is down lists no pod at all until it hears from it: a
// live pod's directory (its container restarting, so no process holds the ledger) must survive.
TEST(CollectorGc, AKubeletRestartedWithoutTheApiServerListsNoPodAndNothingIsRemoved) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  const std::string id = allocate(layout, "alloc-live", {"k-m0"});
  FakeLister kubelet;
  kubelet.listed.push_back({"gpuslice.io/vram", {"k-m0"}, {"ml", "p", "c"}});
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_attribution(&kubelet, kGrace);
  EXPECT_EQ(collector.refresh()->containers[0].owner.pod, "p");

  kubelet.listed.clear();  // restarted, the API server away: an empty answer, for a long time
  kubelet.instance = 2;
  for (int i = 0; i < 10; ++i) {
    clock.advance_ns(kGrace);
    auto view = collector.refresh();
    ASSERT_EQ(view->containers.size(), 1u);
    EXPECT_FALSE(view->gc_held_back.empty());
  }
  EXPECT_TRUE(std::filesystem::exists(layout.container_dir(id)));
  auto view = collector.refresh();
  EXPECT_EQ(view->containers_removed, 0u);
  EXPECT_NE(render_metrics(*view, "t").find("gpuslice_gc_held_back{node=\"\"} 1"), std::string::npos);

  kubelet.listed.push_back({"gpuslice.io/vram", {"k-m0"}, {"ml", "p", "c"}});  // the API server is back
  view = collector.refresh();
  EXPECT_EQ(view->containers[0].state, ContainerState::Ok);
  EXPECT_EQ(view->containers[0].owner.pod, "p");
}

// After a restart the kubelet may list some pods (static ones, or those it has heard of) before the
// rest: nothing is removed until the same kubelet has answered for the whole grace period.
TEST(CollectorGc, AYoungKubeletAnswerRemovesNothingUntilItIsAsOldAsTheGracePeriod) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  const std::string id = allocate(layout, "alloc-a", {"k-m0"});
  FakeLister kubelet;
  another_pod(kubelet);
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_attribution(&kubelet, kGrace);
  collector.refresh();  // not listed: released from now on
  clock.advance_ns(kGrace - 1);
  kubelet.instance = 2;  // restarted just before the grace period ends
  collector.refresh();
  clock.advance_ns(kGrace / 2);
  auto view = collector.refresh();
  EXPECT_TRUE(std::filesystem::exists(layout.container_dir(id))) << "removed on a young answer";
  EXPECT_FALSE(view->gc_held_back.empty());
  kubelet.error = "connection refused";  // and could not be asked once: the clock starts again
  collector.refresh();
  kubelet.error.clear();
  collector.refresh();
  clock.advance_ns(kGrace - 1);
  collector.refresh();
  EXPECT_TRUE(std::filesystem::exists(layout.container_dir(id)));
  clock.advance_ns(1);
  view = collector.refresh();
  EXPECT_TRUE(view->gc_held_back.empty());
  EXPECT_FALSE(std::filesystem::exists(layout.container_dir(id)));
  EXPECT_EQ(view->containers_removed, 1u);
}

// A tenant nests directories deeper than garbage collection descends: the directory stays, and that
// is reported (log, container state error, gpuslice_gc_failures_total), not silently kept.
TEST(CollectorGc, ATreeDeeperThanThirtyTwoLevelsIsReportedNotSilentlyKept) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  const std::string id = allocate(layout, "alloc-deep", {"k-m0"});
  std::string deep = layout.state_dir(id);
  for (int i = 0; i < 40; ++i) deep += "/d";
  std::filesystem::create_directories(deep);
  FakeLister kubelet;
  another_pod(kubelet);
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_attribution(&kubelet, kGrace);
  collector.refresh();
  clock.advance_ns(kGrace);
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 1u);
  EXPECT_EQ(view->containers[0].state, ContainerState::Error);
  EXPECT_NE(view->containers[0].error.find("too deep"), std::string::npos) << view->containers[0].error;
  EXPECT_EQ(view->gc_failures, 1u);
  const std::string text = render_metrics(*view, "t");
  EXPECT_NE(text.find("gpuslice_gc_failures_total{node=\"\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("state=\"error\"} 1"), std::string::npos);
  clock.advance_ns(kGrace);
  EXPECT_EQ(collector.refresh()->gc_failures, 1u) << "one failure per directory, not one per scan";
}

// Counts IN_OPEN events on the files it watches: opening a planted FIFO or device node can block
// or act, so the daemon must refuse them without opening them at all.
class OpenWatch {
 public:
  OpenWatch() : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {}
  ~OpenWatch() { ::close(fd_); }
  OpenWatch(const OpenWatch&) = delete;
  OpenWatch& operator=(const OpenWatch&) = delete;
  bool watch(const std::string& path) {
    const int wd = ::inotify_add_watch(fd_, path.c_str(), IN_OPEN | IN_DONT_FOLLOW);
    if (wd >= 0) names_[wd] = path;
    return wd >= 0;
  }
  // The watched paths opened since the last call.
  std::vector<std::string> opened() {
    std::vector<std::string> out;
    alignas(inotify_event) char buf[4096];
    for (;;) {
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) break;
      for (ssize_t at = 0; at < n;) {
        const auto* event = reinterpret_cast<const inotify_event*>(buf + at);
        if (event->mask & IN_OPEN) out.push_back(names_[event->wd]);
        at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      }
    }
    return out;
  }

 private:
  int fd_;
  std::map<int, std::string> names_;
};

// A tenant plants, in its own state directory, a FIFO or a device node as its ledger or a link to
// another file; the allocation record is replaced by a FIFO. Attribution and garbage collection
// read both: neither may open anything but a regular file, nor follow the link.
TEST(CollectorGc, FifoAndSymlinkPlantedInAContainerDirectoryAreNeverOpened) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  OpenWatch watch;

  const std::string fifo_ledger = allocate(layout, "alloc-fifo", {"k-m0"});
  ASSERT_EQ(::mkfifo(layout.state_file(fifo_ledger).c_str(), 0666), 0);
  ASSERT_TRUE(watch.watch(layout.state_file(fifo_ledger)));

  const std::string fifo_record = allocate(layout, "alloc-record", {"k-m1"});
  ASSERT_EQ(::unlink(layout.allocation_file(fifo_record).c_str()), 0);
  ASSERT_EQ(::mkfifo(layout.allocation_file(fifo_record).c_str(), 0666), 0);
  ASSERT_TRUE(watch.watch(layout.allocation_file(fifo_record)));

  const std::string linked = allocate(layout, "alloc-link", {"k-m2"});
  int dev = -1;
  auto elsewhere = make_state(dir / "elsewhere", dev);  // a live ledger somebody holds
  ASSERT_TRUE(elsewhere);
  std::filesystem::create_symlink(dir / "elsewhere", layout.state_file(linked));
  ASSERT_TRUE(watch.watch(dir / "elsewhere"));

  const std::string device = allocate(layout, "alloc-dev", {"k-m3"});
  const bool have_device = ::mknod(layout.state_file(device).c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
  if (have_device) {
    ASSERT_TRUE(watch.watch(layout.state_file(device)));
  }
  watch.opened();

  FakeLister kubelet;  // lists none of them: every one is a candidate for removal
  another_pod(kubelet);
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_attribution(&kubelet, kGrace);
  collector.refresh();
  clock.advance_ns(kGrace);
  auto view = collector.refresh();
  EXPECT_EQ(watch.opened(), std::vector<std::string>{}) << "the daemon opened a file a tenant planted";

  // Not ledgers, so nothing holds them: removed as unused, without following the link.
  EXPECT_FALSE(std::filesystem::exists(layout.container_dir(fifo_ledger)));
  EXPECT_FALSE(std::filesystem::exists(layout.container_dir(linked)));
  EXPECT_TRUE(std::filesystem::exists(dir / "elsewhere"));
  if (have_device) {
    EXPECT_FALSE(std::filesystem::exists(layout.container_dir(device)));
  }
  // Without a readable record the directory is never attributed, so never removed.
  EXPECT_TRUE(std::filesystem::exists(layout.container_dir(fifo_record)));
  ASSERT_EQ(view->containers.size(), 1u);
  EXPECT_EQ(view->containers[0].id, fifo_record);
}

TEST(CollectorErrors, OneContainerThatFailsToReadIsReportedAndSkippedNotFatal) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  int dev = -1;
  auto good = make_state(layout.state_file("good"), dev);
  ASSERT_TRUE(good);
  auto bad = make_state(layout.state_file("bad"), dev);
  ASSERT_TRUE(bad);
  test::FakeClock clock;
  // Whatever goes wrong reading one container (here: the reader throws) stays with that container.
  Collector collector(layout, nullptr, clock,
                      [](const std::string& path) -> Result<std::unique_ptr<shm::Ledger>> {
                        if (path.find("/bad/") != std::string::npos)
                          throw std::runtime_error("mapping vanished");
                        return shm::Ledger::open(path, shm::Ledger::Mode::Observer);
                      });
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 2u);
  EXPECT_EQ(view->containers[0].id, "bad");
  EXPECT_EQ(view->containers[0].state, ContainerState::Error);
  EXPECT_NE(view->containers[0].error.find("mapping vanished"), std::string::npos);
  EXPECT_EQ(view->containers[1].id, "good");
  EXPECT_EQ(view->containers[1].state, ContainerState::Ok);
  EXPECT_EQ(view->containers[1].processes.size(), 1u);
  const std::string text = render_metrics(*view, "t");
  EXPECT_NE(
      text.find("gpuslice_allocation=\"bad\",namespace=\"\",pod=\"\",container=\"\",state=\"error\"} 1"),
      std::string::npos)
      << text;
}

TEST(Collector, TheMpsStateReachesTheApiAndTheMetricsOnlyWhenManaged) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  auto off = collector.refresh();
  EXPECT_EQ(render_metrics(*off, "t").find("gpuslice_mps_"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(status_json(*off, "t")).contains("mps"));

  mps::MpsReport report;
  report.state = mps::MpsState::Refused;
  report.reason = "GPU 0 has MIG mode on";
  report.restarts = 2;
  collector.set_mps_source([&report] { return report; });
  auto refused = collector.refresh();
  std::string text = render_metrics(*refused, "t");
  EXPECT_NE(text.find("gpuslice_mps_state{node=\"\",state=\"refused\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("gpuslice_mps_state{node=\"\",state=\"running\"} 0"), std::string::npos);
  EXPECT_NE(text.find("gpuslice_mps_restarts_total{node=\"\"} 2"), std::string::npos);
  auto doc = nlohmann::json::parse(status_json(*refused, "t"));
  EXPECT_EQ(doc["mps"]["state"], "refused");
  EXPECT_EQ(doc["mps"]["reason"], "GPU 0 has MIG mode on");
  EXPECT_EQ(doc["mps"]["fault_containment"], mps::kMpsFaultCaveat);

  report = {};
  report.state = mps::MpsState::Running;
  report.control_pid = 12;
  report.server_pids = {40, 41};
  auto running = collector.refresh();
  text = render_metrics(*running, "t");
  EXPECT_NE(text.find("gpuslice_mps_state{node=\"\",state=\"running\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("gpuslice_mps_servers{node=\"\"} 2"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(status_json(*running, "t"))["mps"]["server_pids"],
            nlohmann::json({40, 41}));
}

}  // namespace
}  // namespace gpuslice::node
