#include "node/kubelet/device_catalog.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "node/host/allocation_record.h"
#include "node/host/assignment_file.h"
#include "node/host/limits_file.h"
#include "shared_state/node_channel.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

GpuInfo gpu(unsigned index, const char* uuid, std::uint64_t memory, unsigned minor) {
  GpuInfo g;
  g.index = index;
  g.uuid = uuid;
  g.name = "Test GPU";
  g.minor = minor;
  g.memory_total_bytes = memory;
  return g;
}

using test::kUuid0;
using test::kUuid1;

DeviceCatalog two_gpus(const std::string& dev_root = "/nonexistent",
                       Placement placement = Placement::Binpack) {
  CatalogOptions options;
  options.replicas = 2;
  options.vram_unit = 64ULL << 20;
  options.placement = placement;
  options.dev_root = dev_root;
  return DeviceCatalog({gpu(0, kUuid0, 1ULL << 30, 0), gpu(1, kUuid1, 512ULL << 20, 1)}, options);
}

TEST(DeviceCatalog, IdsPerResource) {
  DeviceCatalog c = two_gpus();
  EXPECT_EQ(c.key(0), "11111111");
  EXPECT_EQ(c.key(1), "22222222");
  auto vram = c.ids(ResourceKind::Vram);
  ASSERT_EQ(vram.size(), 16u + 8u);
  EXPECT_EQ(vram.front(), "11111111-m0");
  EXPECT_EQ(vram.back(), "22222222-m7");
  EXPECT_EQ(c.ids(ResourceKind::Gpu),
            (std::vector<std::string>{"11111111-r0", "11111111-r1", "22222222-r0", "22222222-r1"}));
  EXPECT_EQ(c.ids(ResourceKind::Cores).size(), 200u);
  std::set<std::string> unique(vram.begin(), vram.end());
  EXPECT_EQ(unique.size(), vram.size());
  for (const auto& id : vram) EXPECT_LE(id.size(), 63u);

  EXPECT_EQ(c.gpu_of(ResourceKind::Vram, "22222222-m7"), 1u);
  EXPECT_FALSE(c.gpu_of(ResourceKind::Vram, "22222222-m8"));   // beyond the GPU's memory
  EXPECT_FALSE(c.gpu_of(ResourceKind::Cores, "22222222-m1"));  // another resource's id
  EXPECT_FALSE(c.gpu_of(ResourceKind::Vram, "33333333-m1"));
  EXPECT_FALSE(c.gpu_of(ResourceKind::Vram, "11111111-m01"));
  EXPECT_FALSE(c.gpu_of(ResourceKind::Vram, "11111111-m"));
}

TEST(DeviceCatalog, UuidsSharingAPrefixGetLongerKeys) {
  DeviceCatalog c({gpu(0, "GPU-12345678-aaaa-4000-8000-000000000000", 1 << 30, 0),
                   gpu(1, "GPU-12345678-bbbb-4000-8000-000000000000", 1 << 30, 1)},
                  {});
  EXPECT_NE(c.key(0), c.key(1));
  EXPECT_EQ(c.gpu_of(ResourceKind::Gpu, c.key(1) + "-r0"), 1u);
}

TEST(DeviceCatalog, PreferredKeepsUnitsOnOneGpu) {
  DeviceCatalog c = two_gpus();
  auto all = c.ids(ResourceKind::Vram);
  // Binpack: the tightest GPU that fits (GPU 1 has 8 units).
  auto four = c.preferred(ResourceKind::Vram, all, {}, 4);
  EXPECT_EQ(four, (std::vector<std::string>{"22222222-m0", "22222222-m1", "22222222-m2", "22222222-m3"}));
  // Does not fit on GPU 1: all on GPU 0.
  auto ten = c.preferred(ResourceKind::Vram, all, {}, 10);
  ASSERT_EQ(ten.size(), 10u);
  for (const auto& id : ten) EXPECT_EQ(c.gpu_of(ResourceKind::Vram, id), 0u) << id;
  // must_include pins the GPU.
  auto pinned = c.preferred(ResourceKind::Vram, all, {"11111111-m5"}, 3);
  EXPECT_EQ(pinned, (std::vector<std::string>{"11111111-m5", "11111111-m0", "11111111-m1"}));
  // Spread: the emptiest GPU.
  auto spread = two_gpus("/x", Placement::Spread).preferred(ResourceKind::Vram, all, {}, 2);
  EXPECT_EQ(spread, (std::vector<std::string>{"11111111-m0", "11111111-m1"}));
  // Larger than any GPU: split, largest first.
  auto big = c.preferred(ResourceKind::Vram, all, {}, 20);
  ASSERT_EQ(big.size(), 20u);
  EXPECT_EQ(c.gpu_of(ResourceKind::Vram, big[0]), 0u);
  EXPECT_EQ(c.gpu_of(ResourceKind::Vram, big[19]), 1u);
  // Only what is available is offered.
  EXPECT_EQ(c.preferred(ResourceKind::Vram, {"11111111-m3"}, {}, 2),
            (std::vector<std::string>{"11111111-m3"}));
}

TEST(DeviceCatalog, PreferredSpreadsReplicasOverGpus) {
  DeviceCatalog c = two_gpus();
  auto two = c.preferred(ResourceKind::Gpu, c.ids(ResourceKind::Gpu), {}, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_NE(c.gpu_of(ResourceKind::Gpu, two[0]), c.gpu_of(ResourceKind::Gpu, two[1]));
  auto with_must = c.preferred(ResourceKind::Gpu, c.ids(ResourceKind::Gpu), {"22222222-r1"}, 2);
  EXPECT_EQ(with_must, (std::vector<std::string>{"22222222-r1", "11111111-r0"}));
}

TEST(DeviceCatalog, VramAllocationCreatesContainerDirectoryAndLimits) {
  test::TempDir dir;
  test::write_file(dir / "dev/nvidiactl", "");
  test::write_file(dir / "dev/nvidia0", "");
  HostLayout layout(dir / "root");
  DeviceCatalog c = two_gpus(dir / "dev");
  auto plan = plan_allocation(ResourceKind::Vram, {"11111111-m0", "11111111-m9"}, c, layout);
  ASSERT_TRUE(plan.ok()) << plan.error();
  const std::string id = plan->container_id;
  EXPECT_TRUE(valid_container_id(id));
  EXPECT_EQ(id.rfind("alloc-", 0), 0u);
  EXPECT_EQ(plan->envs.at("GPUSLICE_MEMORY_LIMIT"), std::to_string(2 * (64ULL << 20)));
  EXPECT_EQ(plan->envs.at("NVIDIA_VISIBLE_DEVICES"), kUuid0);
  EXPECT_EQ(plan->envs.at("GPUSLICE_CONTAINER_ID"), id);
  EXPECT_EQ(plan->envs.at("LD_PRELOAD"), "/usr/local/lib/gpuslice/libgpuslice.so");
  // The library, state and config, then the node channel and the container's writer directory.
  ASSERT_EQ(plan->mounts.size(), 5u);
  EXPECT_EQ(plan->mounts[1].host_path, layout.state_dir(id));
  EXPECT_FALSE(plan->mounts[1].read_only);
  EXPECT_EQ(plan->mounts[2].container_path, "/etc/gpuslice");
  EXPECT_TRUE(plan->mounts[2].read_only);
  ASSERT_EQ(plan->devices.size(), 2u);  // only the nodes that exist
  EXPECT_EQ(plan->devices[0].container_path, "/dev/nvidiactl");
  EXPECT_EQ(plan->devices[1].container_path, "/dev/nvidia0");
  EXPECT_EQ(plan->devices[1].host_path, dir / "dev/nvidia0");

  struct stat st {};
  ASSERT_EQ(::stat(layout.state_dir(id).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  auto limits = read_limits_file(layout.limits_file(id));
  ASSERT_TRUE(limits.ok()) << limits.error();
  EXPECT_EQ(limits->memory, std::to_string(2 * (64ULL << 20)));
  EXPECT_EQ(limits->guarantee, limits->memory) << "exclusive vram units: all of it is the container's";
  EXPECT_FALSE(limits->compute);
  EXPECT_EQ(plan->envs.count("GPUSLICE_MEMORY_GUARANTEE"), 0u)
      << "the environment is the tenant's to lower it";

  // Units on two GPUs: a JSON object keyed by UUID, and both GPUs visible.
  auto split = plan_allocation(ResourceKind::Vram, {"11111111-m0", "22222222-m0", "22222222-m1"}, c, layout);
  ASSERT_TRUE(split.ok()) << split.error();
  EXPECT_EQ(split->envs.at("GPUSLICE_MEMORY_LIMIT"),
            std::string("{\"") + kUuid0 + "\":67108864,\"" + kUuid1 + "\":134217728}");
  EXPECT_EQ(split->envs.at("NVIDIA_VISIBLE_DEVICES"), std::string(kUuid0) + "," + kUuid1);
  EXPECT_NE(split->container_id, id);
  auto split_limits = read_limits_file(layout.limits_file(split->container_id));
  ASSERT_TRUE(split_limits.ok()) << split_limits.error();
  EXPECT_EQ(split_limits->guarantee, split->envs.at("GPUSLICE_MEMORY_LIMIT"));
}

TEST(DeviceCatalog, TheGuaranteesHandedOutOnAGpuNeverExceedItsMemory) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  DeviceCatalog c = two_gpus();
  // Every vram unit of GPU 0, split over two containers: their guarantees add up to the GPU's units.
  const unsigned units = c.units(ResourceKind::Vram, 0);
  std::vector<std::string> first, second;
  for (unsigned k = 0; k < units; ++k)
    (k % 2 == 0 ? first : second).push_back(c.id(ResourceKind::Vram, 0, k));
  std::uint64_t guaranteed = 0;
  for (const auto* ids : {&first, &second}) {
    auto plan = plan_allocation(ResourceKind::Vram, *ids, c, layout);
    ASSERT_TRUE(plan.ok()) << plan.error();
    auto limits = read_limits_file(layout.limits_file(plan->container_id));
    ASSERT_TRUE(limits.ok() && limits->guarantee) << limits.error();
    guaranteed += std::stoull(*limits->guarantee);
  }
  EXPECT_EQ(guaranteed, std::uint64_t{units} * c.options().vram_unit);
  EXPECT_LE(guaranteed, c.gpus()[0].memory_total_bytes);
  // One unit more on that GPU would be an id the GPU does not have, or one handed out twice.
  EXPECT_FALSE(plan_allocation(ResourceKind::Vram, {c.id(ResourceKind::Vram, 0, units)}, c, layout).ok());
  EXPECT_FALSE(plan_allocation(ResourceKind::Vram, {first[0], first[0]}, c, layout).ok());
}

TEST(DeviceCatalog, CoresAndReplicaAllocationsCarryNoDirectory) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  DeviceCatalog c = two_gpus();
  std::vector<std::string> thirty;
  for (int i = 0; i < 30; ++i) thirty.push_back("22222222-c" + std::to_string(i));
  auto cores = plan_allocation(ResourceKind::Cores, thirty, c, layout);
  ASSERT_TRUE(cores.ok()) << cores.error();
  EXPECT_EQ(cores->envs.at("GPUSLICE_COMPUTE_LIMIT"), "30");
  EXPECT_EQ(cores->envs.at("NVIDIA_VISIBLE_DEVICES"), kUuid1);
  EXPECT_EQ(cores->envs.count("GPUSLICE_SHARED_DIR"), 0u);
  EXPECT_TRUE(cores->container_id.empty());
  // The library, the node channel read-only, and the container's own writer directory over it.
  ASSERT_EQ(cores->mounts.size(), 3u);
  EXPECT_EQ(cores->envs.at("GPUSLICE_NODE_DIR"), "/tmp/gpuslice-node");
  const std::string writer = cores->envs.at("GPUSLICE_NODE_WRITER");
  EXPECT_EQ(cores->mounts[1].container_path, "/tmp/gpuslice-node");
  EXPECT_EQ(cores->mounts[1].host_path, layout.channel_dir());
  EXPECT_TRUE(cores->mounts[1].read_only);
  EXPECT_EQ(cores->mounts[2].container_path, "/tmp/gpuslice-node/" + writer);
  EXPECT_EQ(cores->mounts[2].host_path, layout.channel_writer_dir(writer));
  EXPECT_FALSE(cores->mounts[2].read_only);
  EXPECT_EQ(std::filesystem::status(layout.channel_writer_dir(writer)).permissions(),
            std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
  EXPECT_FALSE(std::filesystem::exists(layout.containers_dir()));
  // Beside (not inside) the writer directory: the share and level its records are believed at.
  std::ifstream assigned(layout.channel_writer_dir(writer) + ".assigned");
  const std::string text((std::istreambuf_iterator<char>(assigned)), std::istreambuf_iterator<char>());
  auto parsed = parse_assignment(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error() << text;
  EXPECT_EQ(parsed->priority, Priority::Normal);
  EXPECT_EQ(parsed->compute, (std::map<std::string, unsigned>{{kUuid1, 30}}));
  EXPECT_EQ(parsed->resource, "cores");
  EXPECT_EQ(parsed->devices_sha256, devices_digest(thirty));
  EXPECT_EQ(std::filesystem::status(layout.channel_writer_dir(writer) + ".assigned").permissions(),
            std::filesystem::perms(0644));

  auto replica = plan_allocation(ResourceKind::Gpu, {"11111111-r1"}, c, layout);
  ASSERT_TRUE(replica.ok());
  EXPECT_EQ(replica->envs.count("GPUSLICE_COMPUTE_LIMIT"), 0u);
  EXPECT_EQ(replica->envs.at("NVIDIA_VISIBLE_DEVICES"), kUuid0);
}

// A cores allocation's assignment names a share on each of its GPUs; the library believes none of
// an assignment longer than it reads (shm::kMaxAssignmentBytes), so an allocation over more GPUs
// than fit is refused before anything is created, not handed out with a share nobody believes.
TEST(DeviceCatalog, ACoresAllocationWhoseAssignmentTheLibraryCouldNotReadIsRefused) {
  std::vector<GpuInfo> gpus;
  std::vector<std::string> uuids;
  for (unsigned g = 0; g < 18; ++g) {
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-%08x-aaaa-4000-8000-000000000000", 0x10000000u + (g << 20));
    uuids.push_back(uuid);
    gpus.push_back(gpu(g, uuid, 1ULL << 30, g));
  }
  CatalogOptions options;
  options.dev_root = "/nonexistent";
  const DeviceCatalog c(gpus, options);
  auto all_cores_of = [&c](std::size_t count) {
    std::vector<std::string> out;
    for (std::size_t g = 0; g < count; ++g)
      for (unsigned unit = 0; unit < 100; ++unit) out.push_back(c.id(ResourceKind::Cores, g, unit));
    return out;
  };

  test::TempDir dir;
  HostLayout fits_layout(dir / "fits");
  auto fits = plan_allocation(ResourceKind::Cores, all_cores_of(17), c, fits_layout, "gpuslice.io/cores");
  ASSERT_TRUE(fits.ok()) << fits.error();
  const std::string writer = fits->envs.at("GPUSLICE_NODE_WRITER");
  const std::string text = test::read_file(fits_layout.channel_writer_dir(writer) + ".assigned");
  EXPECT_LE(text.size(), shm::kMaxAssignmentBytes);
  const int fd = ::open(fits_layout.channel_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  shm::Assignment believed{};
  EXPECT_TRUE(shm::NodeChannel::read_assignment(fd, writer.c_str(), uuids[16], &believed));
  EXPECT_EQ(believed.compute_percent, 100u) << "the library reads the share of the last GPU";
  ::close(fd);

  HostLayout over_layout(dir / "over");
  auto over = plan_allocation(ResourceKind::Cores, all_cores_of(18), c, over_layout, "gpuslice.io/cores");
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().find(std::to_string(shm::kMaxAssignmentBytes)), std::string::npos) << over.error();
  EXPECT_FALSE(std::filesystem::exists(over_layout.channel_dir())) << "nothing created";
}

TEST(DeviceCatalog, AllocationRejectsForeignAndRepeatedIds) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  DeviceCatalog c = two_gpus();
  auto foreign = plan_allocation(ResourceKind::Vram, {"11111111-m0", "nope"}, c, layout);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.error().find("'nope'"), std::string::npos);
  EXPECT_FALSE(plan_allocation(ResourceKind::Vram, {"11111111-m0", "11111111-m0"}, c, layout).ok());
  EXPECT_FALSE(plan_allocation(ResourceKind::Vram, {}, c, layout).ok());
  EXPECT_FALSE(std::filesystem::exists(layout.containers_dir())) << "nothing created for a refused request";
}

TEST(DeviceCatalog, UnderMpsEveryAllocationMountsThePipeDirectoryAndNamesIt) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  CatalogOptions options;
  options.replicas = 2;
  options.vram_unit = 64ULL << 20;
  options.dev_root = "/nonexistent";
  options.mps_pipe_dir = "/run/gpuslice/mps/pipe";
  DeviceCatalog c({gpu(0, kUuid0, 1ULL << 30, 0)}, options);
  for (auto [kind, id] :
       {std::pair{ResourceKind::Vram, "11111111-m0"}, std::pair{ResourceKind::Gpu, "11111111-r1"}}) {
    auto plan = plan_allocation(kind, {id}, c, layout);
    ASSERT_TRUE(plan.ok()) << plan.error();
    EXPECT_EQ(plan->envs.at("CUDA_MPS_PIPE_DIRECTORY"), "/run/gpuslice/mps/pipe");
    bool mounted = false;
    for (const auto& m : plan->mounts)
      mounted |= m.host_path == "/run/gpuslice/mps/pipe" && m.container_path == "/run/gpuslice/mps/pipe";
    EXPECT_TRUE(mounted);
  }
  DeviceCatalog off = two_gpus();
  auto plan = plan_allocation(ResourceKind::Gpu, {"11111111-r1"}, off, layout);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->envs.count("CUDA_MPS_PIPE_DIRECTORY"), 0u) << "no MPS unless the daemon runs it";
}

}  // namespace
}  // namespace gpuslice::node
