// Pod attribution against a fake kubelet PodResources server that speaks the real v1 proto over a unix
// socket, end to end: device plugin allocation record -> List -> labelled metrics -> garbage collection.
#include "node/podresources.h"

#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "node/collector.h"
#include "node/device_catalog.h"
#include "node/metrics.h"
#include "podresources/v1/api.grpc.pb.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

// The kubelet's side: List answers whatever the test set last.
class FakePodResources final : public ::v1::PodResourcesLister::Service {
 public:
  explicit FakePodResources(std::string socket) : socket_(std::move(socket)) {}
  ~FakePodResources() override { stop(); }

  void start() {
    ::unlink(socket_.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_) << "cannot listen on " << socket_;
  }
  void stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
    ::unlink(socket_.c_str());
  }

  void set(::v1::ListPodResourcesResponse response) {
    std::lock_guard lock(mutex_);
    response_ = std::move(response);
  }

  grpc::Status List(grpc::ServerContext*, const ::v1::ListPodResourcesRequest*,
                    ::v1::ListPodResourcesResponse* out) override {
    std::lock_guard lock(mutex_);
    *out = response_;
    ++calls;
    return grpc::Status::OK;
  }

  int calls = 0;

 private:
  std::string socket_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mutex_;
  ::v1::ListPodResourcesResponse response_;
};

void add_container(::v1::ListPodResourcesResponse& response, const std::string& ns, const std::string& pod,
                   const std::string& container, const std::string& resource,
                   const std::vector<std::string>& ids) {
  ::v1::PodResources* p = nullptr;
  for (auto& existing : *response.mutable_pod_resources()) {
    if (existing.name() == pod && existing.namespace_() == ns) p = &existing;
  }
  if (!p) {
    p = response.add_pod_resources();
    p->set_name(pod);
    p->set_namespace_(ns);
  }
  auto* c = p->add_containers();
  c->set_name(container);
  auto* d = c->add_devices();
  d->set_resource_name(resource);
  for (const auto& id : ids) d->add_device_ids(id);
}

constexpr const char* kUuid = "GPU-11111111-aaaa-4000-8000-000000000000";

std::vector<GpuInfo> one_gpu() {
  GpuInfo g;
  g.index = 0;
  g.uuid = kUuid;
  g.name = "Test GPU";
  g.memory_total_bytes = 1ULL << 30;
  return {g};
}

TEST(PodResources, ListsEveryContainersDevicesAsTheKubeletSendsThem) {
  test::TempDir dir;
  FakePodResources kubelet(dir / "kubelet.sock");
  kubelet.start();
  ::v1::ListPodResourcesResponse response;
  add_container(response, "ml", "trainer-0", "worker", "gpuslice.io/vram", {"11111111-m0", "11111111-m1"});
  add_container(response, "ml", "trainer-0", "sidecar", "nvidia.com/gpu", {"GPU-x"});
  add_container(response, "web", "api-7", "app", "gpuslice.io/cores", {"11111111-c0"});
  // What a current kubelet also sends (cpu_ids = 3, memory = 4, dynamic_resources = 5) is skipped.
  auto* worker = response.mutable_pod_resources(0)->mutable_containers(0);
  auto* unknown = worker->GetReflection()->MutableUnknownFields(worker);
  unknown->AddVarint(3, 7);
  unknown->AddLengthDelimited(4, "\x0a\x06memory");
  kubelet.set(response);

  PodResourcesOptions options;
  options.socket = dir / "kubelet.sock";
  options.resource_prefix = "gpuslice.io/";
  PodResourcesClient client(options);
  auto listed = client.list();
  ASSERT_TRUE(listed.ok()) << listed.error();
  ASSERT_EQ(listed->size(), 2u) << "nvidia.com/gpu is not ours";
  EXPECT_EQ((*listed)[0].resource, "gpuslice.io/vram");
  EXPECT_EQ((*listed)[0].device_ids, (std::vector<std::string>{"11111111-m0", "11111111-m1"}));
  EXPECT_EQ((*listed)[0].owner.namespace_name, "ml");
  EXPECT_EQ((*listed)[0].owner.pod, "trainer-0");
  EXPECT_EQ((*listed)[0].owner.container, "worker");
  EXPECT_EQ((*listed)[1].owner.pod, "api-7");
  EXPECT_EQ((*listed)[1].resource, "gpuslice.io/cores");
}

TEST(PodResources, AnAbsentKubeletIsAnErrorNamingTheSocket) {
  test::TempDir dir;
  PodResourcesOptions options;
  options.socket = dir / "kubelet.sock";
  options.timeout = std::chrono::milliseconds(300);
  PodResourcesClient client(options);
  auto listed = client.list();
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.error().find(options.socket), std::string::npos) << listed.error();
}

TEST(PodResources, ContainersCarryTheirPodAndReleasedDirectoriesAreRemovedAfterTheGracePeriod) {
  test::TempDir dir;
  HostLayout layout(dir / "root");
  DeviceCatalog catalog(one_gpu(), CatalogOptions{4, 64ULL << 20, Placement::Binpack, dir / "dev"});
  auto plan = plan_allocation(ResourceKind::Vram, {"11111111-m0", "11111111-m1"}, catalog, layout,
                              "gpuslice.io/vram");
  ASSERT_TRUE(plan.ok()) << plan.error();
  const std::string id = plan->container_id;

  FakePodResources kubelet(dir / "kubelet.sock");
  kubelet.start();
  ::v1::ListPodResourcesResponse listed;
  // The kubelet lists ids in its own order.
  add_container(listed, "ml", "trainer-0", "worker", "gpuslice.io/vram", {"11111111-m1", "11111111-m0"});
  kubelet.set(listed);

  PodResourcesOptions options;
  options.socket = dir / "kubelet.sock";
  PodResourcesClient client(options);
  test::FakeClock clock;
  Collector collector(layout, nullptr, clock);
  collector.set_node_name("gpu-node-1");
  const std::uint64_t grace = 60'000'000'000ULL;
  collector.set_attribution(&client, grace);

  auto view = collector.refresh();
  EXPECT_EQ(view->podresources, AttributionState::Up);
  ASSERT_EQ(view->containers.size(), 1u);
  EXPECT_EQ(view->containers[0].owner.namespace_name, "ml");
  EXPECT_EQ(view->containers[0].owner.pod, "trainer-0");
  EXPECT_EQ(view->containers[0].owner.container, "worker");
  EXPECT_EQ(view->containers[0].state, ContainerState::Ok);
  const std::string metrics = render_metrics(*view, "test");
  const std::string labels = "{node=\"gpu-node-1\",gpuslice_allocation=\"" + id +
                             "\",namespace=\"ml\",pod=\"trainer-0\",container=\"worker\",state=\"ok\"} 1";
  EXPECT_NE(metrics.find("gpuslice_container_state" + labels), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("gpuslice_podresources_up{node=\"gpu-node-1\"} 1"), std::string::npos);

  // The pod is deleted: the kubelet lists nothing. Kept through the grace period, then removed.
  kubelet.set({});
  view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 1u);
  EXPECT_EQ(view->containers[0].state, ContainerState::Released);
  clock.advance_ns(grace - 1);
  EXPECT_EQ(collector.refresh()->containers.size(), 1u) << "removed before the grace period ended";
  EXPECT_TRUE(std::filesystem::exists(layout.container_dir(id)));
  clock.advance_ns(1);
  view = collector.refresh();
  EXPECT_TRUE(view->containers.empty());
  EXPECT_EQ(view->containers_removed, 1u);
  EXPECT_FALSE(std::filesystem::exists(layout.container_dir(id)));
  EXPECT_EQ(render_metrics(*view, "test").find(id), std::string::npos) << "its series must disappear";
}

}  // namespace
}  // namespace gpuslice::node
