#include "node/channel/priority_assignment.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "node/channel/channel_gc.h"
#include "node/host/allocation_record.h"
#include "node/host/assignment_file.h"
#include "node/kubelet/device_catalog.h"
#include "shared_state/node_channel.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

using test::kUuid0;
using test::kUuid1;

DeviceCatalog two_gpus() {
  auto gpu = [](unsigned index, const char* uuid, unsigned minor) {
    GpuInfo g;
    g.index = index;
    g.uuid = uuid;
    g.name = "Test GPU";
    g.minor = minor;
    g.memory_total_bytes = 1ULL << 30;
    return g;
  };
  CatalogOptions options;
  options.vram_unit = 64ULL << 20;
  options.dev_root = "/nonexistent";
  return DeviceCatalog({gpu(0, kUuid0, 0), gpu(1, kUuid1, 1)}, options);
}

std::vector<std::string> ids(const std::string& prefix, int count) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

// What a container's records are believed at on `uuid`, read the way every reader of the node
// channel (the interposer) reads it.
shm::Assignment believed(const HostLayout& layout, const std::string& writer, const char* uuid) {
  shm::Assignment out;
  const int fd = ::open(layout.channel_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_TRUE(shm::NodeChannel::read_assignment(fd, writer.c_str(), uuid, &out)) << writer;
  ::close(fd);
  return out;
}

class PriorityAssignment : public ::testing::Test {
 protected:
  // A pod container's allocation of `resource`: the plan the device plugin hands the kubelet, and
  // the entry the kubelet then lists for it.
  std::string allocate(ResourceKind kind, const std::vector<std::string>& device_ids,
                       const PodContainer& owner) {
    const std::string resource = std::string("gpuslice.io/") + resource_suffix(kind);
    auto plan = plan_allocation(kind, device_ids, catalog_, layout_, resource);
    EXPECT_TRUE(plan.ok()) << plan.error();
    if (!plan.ok()) return "";
    listed_.push_back({resource, device_ids, owner});
    return plan->envs.at("GPUSLICE_NODE_WRITER");
  }

  test::TempDir dir_;
  HostLayout layout_{dir_ / "root"};
  DeviceCatalog catalog_ = two_gpus();
  std::vector<ListedDevices> listed_;
  PriorityPolicy policy_{{"serving"}, {{"gpu-critical", Priority::High}, {"batch-low", Priority::Low}}};
};

// A pod that asks for a priority and no `cores` (vram only) used to get no node channel at all: no
// writer directory, no assignment, so it took no part in priority sharing.
TEST_F(PriorityAssignment, AVramOnlyContainerGetsAWriterDirectoryAndAnAssignment) {
  auto plan = plan_allocation(ResourceKind::Vram, {"11111111-m0", "11111111-m1"}, catalog_, layout_,
                              "gpuslice.io/vram");
  ASSERT_TRUE(plan.ok()) << plan.error();
  ASSERT_EQ(plan->envs.count("GPUSLICE_NODE_WRITER"), 1u) << "a vram container is not on the node channel";
  const std::string writer = plan->envs.at("GPUSLICE_NODE_WRITER");
  EXPECT_EQ(plan->envs.at("GPUSLICE_NODE_DIR"), "/tmp/gpuslice-node");
  ASSERT_EQ(plan->mounts.size(), 5u);
  EXPECT_EQ(plan->mounts[3].container_path, "/tmp/gpuslice-node");
  EXPECT_EQ(plan->mounts[3].host_path, layout_.channel_dir());
  EXPECT_TRUE(plan->mounts[3].read_only);
  EXPECT_EQ(plan->mounts[4].container_path, "/tmp/gpuslice-node/" + writer);
  EXPECT_EQ(plan->mounts[4].host_path, layout_.channel_writer_dir(writer));
  EXPECT_FALSE(plan->mounts[4].read_only);
  EXPECT_EQ(std::filesystem::status(layout_.channel_writer_dir(writer)).permissions(),
            std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
  const shm::Assignment assigned = believed(layout_, writer, kUuid0);
  EXPECT_EQ(assigned.priority, Priority::Normal);
  EXPECT_EQ(assigned.compute_percent, 0u) << "no cores: no compute share, no turn";
  auto parsed = parse_assignment(test::read_file(layout_.channel_writer_dir(writer) + ".assigned"));
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed->resource, "gpuslice.io/vram");
  EXPECT_EQ(parsed->devices_sha256, devices_digest({"11111111-m1", "11111111-m0"}));
}

// The device plugin wrote `priority=normal` for every container: nothing ever assigned high on
// Kubernetes. The daemon now applies the operator's namespace policy to the pod the kubelet lists.
TEST_F(PriorityAssignment, APodInAHighNamespaceIsAssignedHighAndOthersStayNormal) {
  const std::string server =
      allocate(ResourceKind::Cores, ids("11111111-c", 30), {"serving", "llm-0", "main"});
  const std::string batch = allocate(ResourceKind::Cores, ids("11111111-c", 20), {"batch", "job-0", "main"});
  // Equal ids would make one digest: give the batch pod other units of the GPU.
  listed_[1].device_ids = ids("11111111-c", 20);
  for (auto& id : listed_[1].device_ids) id += "x";
  ReconcileOutcome outcome = reconcile_assignments(layout_.channel_dir(), listed_, policy_, {});
  EXPECT_EQ(outcome.errors, 0u);
  EXPECT_EQ(believed(layout_, server, kUuid0).priority, Priority::High);
  EXPECT_EQ(believed(layout_, server, kUuid0).compute_percent, 30u) << "the share is kept";
  EXPECT_EQ(believed(layout_, batch, kUuid0).priority, Priority::Normal);
  // Once right, a file is not rewritten every scan.
  EXPECT_EQ(reconcile_assignments(layout_.channel_dir(), listed_, policy_, {}).rewritten, 0u);
}

// The level comes from what the kubelet and the API server say about the pod (its namespace and
// spec.priorityClassName), never from anything the pod's author writes: a pod that bypassed the
// webhook with `gpuslice.io/priority: high` (or GPUSLICE_PRIORITY=high) in a namespace the operator
// did not name, and of no class mapped to high, stays at normal. A class mapped to high gives high.
TEST_F(PriorityAssignment, OnlyTheOperatorsNamespacesAndClassesGiveHigh) {
  const std::string forged = allocate(ResourceKind::Vram, {"11111111-m0"}, {"tenant", "sneaky", "main"});
  const std::string critical = allocate(ResourceKind::Vram, {"11111111-m1"}, {"tenant", "critical", "main"});
  const std::string low = allocate(ResourceKind::Vram, {"11111111-m2"}, {"tenant", "low", "main"});
  std::vector<std::string> asked;
  PriorityClassLookup classes = [&asked](const std::string& ns,
                                         const std::string& pod) -> Result<std::string> {
    asked.push_back(ns + "/" + pod);
    if (pod == "critical") return std::string("gpu-critical");
    if (pod == "low") return std::string("batch-low");
    return std::string("high");  // a class the tenant made up, named like the level
  };
  reconcile_assignments(layout_.channel_dir(), listed_, policy_, classes);
  EXPECT_EQ(believed(layout_, forged, kUuid0).priority, Priority::Normal);
  EXPECT_EQ(believed(layout_, critical, kUuid0).priority, Priority::High);
  EXPECT_EQ(believed(layout_, low, kUuid0).priority, Priority::Normal) << "the ceiling; it claims low itself";
  EXPECT_EQ(asked.size(), 3u);
}

// The API server does not answer: nothing is raised or lowered on a guess.
TEST_F(PriorityAssignment, AClassThatCannotBeLearntKeepsTheLevelAsItIs) {
  const std::string writer = allocate(ResourceKind::Vram, {"11111111-m0"}, {"tenant", "critical", "main"});
  PriorityClassLookup up = [](const std::string&, const std::string&) -> Result<std::string> {
    return std::string("gpu-critical");
  };
  PriorityClassLookup down = [](const std::string&, const std::string&) -> Result<std::string> {
    return make_error("connection refused");
  };
  reconcile_assignments(layout_.channel_dir(), listed_, policy_, down);
  EXPECT_EQ(believed(layout_, writer, kUuid0).priority, Priority::Normal);
  reconcile_assignments(layout_.channel_dir(), listed_, policy_, up);
  EXPECT_EQ(believed(layout_, writer, kUuid0).priority, Priority::High);
  EXPECT_EQ(reconcile_assignments(layout_.channel_dir(), listed_, policy_, down).rewritten, 0u);
  EXPECT_EQ(believed(layout_, writer, kUuid0).priority, Priority::High);
}

// A container with vram and cores has one writer directory per allocation, and the kubelet hands it
// the environment of one of them: both are believed alike, with the cores' share.
TEST_F(PriorityAssignment, AContainerWithVramAndCoresIsBelievedAlikeInBothWriters) {
  const PodContainer owner{"serving", "llm-0", "main"};
  const std::string vram = allocate(ResourceKind::Vram, {"22222222-m0"}, owner);
  const std::string cores = allocate(ResourceKind::Cores, ids("22222222-c", 40), owner);
  ASSERT_NE(vram, cores);
  reconcile_assignments(layout_.channel_dir(), listed_, policy_, {});
  for (const std::string& writer : {vram, cores}) {
    const shm::Assignment assigned = believed(layout_, writer, kUuid1);
    EXPECT_EQ(assigned.priority, Priority::High) << writer;
    EXPECT_EQ(assigned.compute_percent, 40u) << writer;
  }
}

// Writers of allocations the kubelet does not list (gone, or not yet listed) and files the daemon
// did not write are left alone.
TEST_F(PriorityAssignment, WritersTheKubeletDoesNotListAreLeftAlone) {
  const std::string listed = allocate(ResourceKind::Vram, {"11111111-m0"}, {"serving", "a", "main"});
  const std::string unlisted = allocate(ResourceKind::Vram, {"11111111-m1"}, {"serving", "b", "main"});
  listed_.pop_back();
  test::write_file(layout_.channel_dir() + "/by-hand.assigned", "priority=low\n");
  const ReconcileOutcome outcome = reconcile_assignments(layout_.channel_dir(), listed_, policy_, {});
  EXPECT_EQ(outcome.attributed, 1u);
  EXPECT_EQ(believed(layout_, listed, kUuid0).priority, Priority::High);
  EXPECT_EQ(believed(layout_, unlisted, kUuid0).priority, Priority::Normal);
  EXPECT_EQ(test::read_file(layout_.channel_dir() + "/by-hand.assigned"), "priority=low\n");
}

// A vram container without a priority or a compute limit writes no record, so its writer directory
// never changes: the channel's garbage collection took it for a gone container's after the grace
// period, and a priority set later was then published where nobody looked. While the kubelet lists
// the allocation the directory is kept; an unlisted one still goes.
TEST_F(PriorityAssignment, AListedWriterWithoutRecordsIsKeptFromTheChannelGc) {
  const std::string quiet = allocate(ResourceKind::Vram, {"11111111-m0"}, {"batch", "notebook", "main"});
  const std::string gone = allocate(ResourceKind::Vram, {"11111111-m1"}, {"batch", "finished", "main"});
  listed_.pop_back();
  const timespec long_ago[2] = {{1'000'000, 0}, {1'000'000, 0}};
  for (const std::string& writer : {quiet, gone})
    ASSERT_EQ(::utimensat(AT_FDCWD, layout_.channel_writer_dir(writer).c_str(), long_ago, 0), 0);
  reconcile_assignments(layout_.channel_dir(), listed_, policy_, {});
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const std::uint64_t now_ns = static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000ULL;
  EXPECT_EQ(remove_stale_writers(layout_.channel_dir(), 300'000'000'000ULL, now_ns + 1'000'000'000ULL), 1u);
  EXPECT_TRUE(std::filesystem::exists(layout_.channel_writer_dir(quiet))) << "listed: kept";
  EXPECT_TRUE(std::filesystem::exists(layout_.channel_writer_dir(quiet) + ".assigned"));
  EXPECT_FALSE(std::filesystem::exists(layout_.channel_writer_dir(gone))) << "not listed: removed";
}

TEST(WriterAssignment, RendersAndParsesTheDaemonsFormatOnly) {
  ChannelAssignment a;
  a.priority = Priority::High;
  a.compute[kUuid0] = 25;
  a.resource = "gpuslice.io/cores";
  a.devices_sha256 = "abc";
  auto text = render_assignment(a);
  ASSERT_TRUE(text.ok()) << text.error();
  auto back = parse_assignment(*text);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->priority, Priority::High);
  EXPECT_EQ(back->compute, a.compute);
  EXPECT_EQ(back->resource, a.resource);
  EXPECT_EQ(back->devices_sha256, a.devices_sha256);
  EXPECT_FALSE(parse_assignment("priority=urgent\n").ok());
  EXPECT_FALSE(parse_assignment("priority=high\nlevel=9\n").ok());
  EXPECT_FALSE(parse_assignment("priority=high\ncompute.GPU-1=0\n").ok());
  EXPECT_FALSE(parse_assignment("priority=high\ncompute.GPU-1=101\n").ok());
  EXPECT_FALSE(parse_assignment("compute.GPU-1=5\n").ok());
}

// The library reads at most shm::kMaxAssignmentBytes of an assignment, its '#' lines included, and
// believes nothing of a longer one. The daemon's writer had a limit of its own (16 KiB) and wrote
// such a file anyway: the container then ran at normal with no compute turn and nobody was told.
// The one writer refuses it, counting the allocation comment line against the limit.
TEST(WriterAssignment, AnAssignmentTooLargeForTheLibraryIsRefusedByTheWriter) {
  test::TempDir dir;
  const std::string channel = dir / "channel";
  ASSERT_TRUE(std::filesystem::create_directory(channel));
  ChannelAssignment a;
  a.priority = Priority::High;
  std::string last_uuid;
  for (unsigned gpu = 0; gpu < 19; ++gpu) {
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-%08x-aaaa-4000-8000-000000000000", 0x10000000u + gpu);
    a.compute[uuid] = 100;
    last_uuid = uuid;
  }
  // Without the comment line it fits, and the library believes all of it.
  auto fits = render_assignment(a);
  ASSERT_TRUE(fits.ok()) << fits.error();
  ASSERT_LE(fits->size(), shm::kMaxAssignmentBytes);
  ASSERT_TRUE(write_assignment(channel, "fits", a).ok());
  const int fd = ::open(channel.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  shm::Assignment read{};
  EXPECT_TRUE(shm::NodeChannel::read_assignment(fd, "fits", last_uuid, &read));
  EXPECT_EQ(read.priority, Priority::High);
  EXPECT_EQ(read.compute_percent, 100u);

  // The allocation comment takes it over the limit: refused, and no file is written.
  a.resource = "gpuslice.io/cores";
  a.devices_sha256 = std::string(64, 'f');
  auto over = render_assignment(a);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().find(std::to_string(shm::kMaxAssignmentBytes)), std::string::npos) << over.error();
  auto written = write_assignment(channel, "over", a);
  EXPECT_FALSE(written.ok());
  EXPECT_FALSE(std::filesystem::exists(channel + "/over.assigned"));
  // What the library would have made of it: nothing believed.
  std::string text = *fits;
  text.insert(0, "# allocation gpuslice.io/cores " + std::string(64, 'f') + "\n");
  ASSERT_GT(text.size(), shm::kMaxAssignmentBytes);
  test::write_file(channel + "/ignored.assigned", text);
  EXPECT_FALSE(shm::NodeChannel::read_assignment(fd, "ignored", last_uuid, &read));
  EXPECT_FALSE(parse_assignment(text).ok()) << "the parser reads what the library reads, no more";
  ::close(fd);
}

// What was found (issue 46): the library and the daemon parsed .assigned with two grammars (the
// library took `compute=N`, a share of 0 and unknown keys; the daemon refused them). The same files,
// written to disk, are fed to both: each accepts exactly what the other does, with the same level
// and share.
TEST(WriterAssignment, TheLibraryAndTheDaemonReadEveryAssignmentFileAlike) {
  test::TempDir dir;
  const std::string channel = dir / "channel";
  ASSERT_TRUE(std::filesystem::create_directory(channel));
  const std::string files[] = {
      "priority=high\n",
      "priority=low   # batch jobs\ncompute=30\n",
      "# allocation gpuslice.io/cores abc123\npriority=normal\ncompute." + std::string(kUuid0) + "=25\n",
      "priority = low\n\tcompute = 40\n",
      "priority=high\ncompute=30\ncompute." + std::string(kUuid0) + "=20\nfloor=10\nlight-share=8\n",
      "priority=high\r\ncompute=30\r\n",
      "compute=30\n",
      "priority=high\ncompute=0\n",
      "priority=high\nlevel=9\n",
      "Priority=high\n",
      "priority=\n",
      "priority=high\npriority=low\n",
      "priority=high\ncompute.GPU-1=5\ncompute.gpu-1=6\n",
      "priority=high\nfloor=101\n",
      "# allocation gpuslice.io/cores XYZ\npriority=high\n",
      std::string("priority=high\0\n", 15),
      "priority=high\n" + std::string(1100, '#') + "\n",
      "",
  };
  const int fd = ::open(channel.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  int n = 0;
  for (const std::string& text : files) {
    const std::string writer = "w" + std::to_string(n++);
    test::write_file(channel + "/" + writer + ".assigned", text);
    ::chmod((channel + "/" + writer + ".assigned").c_str(), 0644);
    const shm::Assignment library = shm::NodeChannel::read_assignment(fd, writer.c_str(), kUuid0);
    const auto daemon = parse_assignment(text);
    ASSERT_EQ(library.state == shm::Assignment::State::Believed, daemon.ok())
        << "file: " << text << (daemon.ok() ? "" : "\ndaemon: " + daemon.error());
    if (!daemon.ok()) {
      EXPECT_EQ(library.priority, Priority::Low) << "refused: the lowest level";
      EXPECT_EQ(library.compute_percent, 0u);
      continue;
    }
    EXPECT_EQ(library.priority, daemon->priority) << text;
    const auto gpu = daemon->compute.find(kUuid0);
    const unsigned share = gpu != daemon->compute.end() ? gpu->second : daemon->compute_all.value_or(0);
    EXPECT_EQ(library.compute_percent, share) << text;
    // What the daemon renders from it, the library reads the same.
    auto again = render_assignment(*daemon);
    ASSERT_TRUE(again.ok()) << again.error();
    EXPECT_EQ(shm::assignment_for_gpu(*again, kUuid0).priority, library.priority);
    EXPECT_EQ(shm::assignment_for_gpu(*again, kUuid0).compute_percent, library.compute_percent) << *again;
  }
  ::close(fd);
}

TEST(WriterAssignment, RendersOnlyWhatTheLibraryReads) {
  ChannelAssignment a;
  a.compute["GPU-1/2"] = 10;
  EXPECT_FALSE(render_assignment(a).ok()) << "a UUID that is not a plain name";
  a.compute = {{"GPU-1", 0}};
  EXPECT_FALSE(render_assignment(a).ok()) << "a share of 0";
  a.compute = {{"GPU-1", 101}};
  EXPECT_FALSE(render_assignment(a).ok()) << "a share over 100";
  a.compute = {{"GPU-1", 50}};
  a.resource = "gpuslice.io/cores";
  EXPECT_FALSE(render_assignment(a).ok()) << "an allocation without its digest";
  a.devices_sha256 = "ab cd\npriority=high";
  EXPECT_FALSE(render_assignment(a).ok()) << "a digest that is not hexadecimal";
  a.devices_sha256 = "abcd";
  auto text = render_assignment(a);
  ASSERT_TRUE(text.ok()) << text.error();
  EXPECT_EQ(*text, "# allocation gpuslice.io/cores abcd\npriority=normal\ncompute.GPU-1=50\n");
  EXPECT_FALSE(write_assignment(std::string("/nonexistent"), "../escape", a).ok());
}

}  // namespace
}  // namespace gpuslice::node
