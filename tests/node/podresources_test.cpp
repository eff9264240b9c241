// Pod attribution against a fake kubelet PodResources server that speaks the real v1 proto over a unix
// socket, end to end: device plugin allocation record -> List -> labelled metrics -> garbage collection.
#include "node/kubelet/podresources.h"

#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "node/api/metrics.h"
#include "node/kubelet/device_catalog.h"
#include "node/node_view/collector.h"
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

  // The pod is deleted: the kubelet lists only another pod. Kept through the grace period, then removed.
  ::v1::ListPodResourcesResponse other;
  add_container(other, "ml", "other", "worker", "gpuslice.io/vram", {"11111111-m5"});
  kubelet.set(other);
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

// A kubelet (or whatever answers on its socket) that sends fixed bytes as List's answer.
class RawPodResources final : public grpc::CallbackGenericService {
 public:
  RawPodResources(std::string socket, std::string answer)
      : socket_(std::move(socket)), answer_(std::move(answer)) {}
  ~RawPodResources() override {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_->Wait();
    }
  }
  void start() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterCallbackGenericService(this);
    builder.SetMaxSendMessageSize(64 << 20);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_);
  }
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(const std::string& answer) : answer_(answer) { StartRead(&request_); }
      void OnReadDone(bool) override {
        grpc::Slice slice(answer_.data(), answer_.size());
        response_ = grpc::ByteBuffer(&slice, 1);
        StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
      }
      void OnDone() override { delete this; }

     private:
      const std::string& answer_;
      grpc::ByteBuffer request_, response_;
    };
    return new Reactor(answer_);
  }

 private:
  std::string socket_;
  std::string answer_;
  std::unique_ptr<grpc::Server> server_;
};

// The process's peak resident memory in KiB (VmHWM), after `reset` cleared it to the current size.
std::size_t peak_rss_kib(bool reset) {
  if (reset) std::ofstream("/proc/self/clear_refs") << "5";
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6));
  }
  return 0;
}

// 16 MiB of pods with one-letter names (the largest answer the daemon accepts) decoded into
// 3 million messages and raised the daemon's peak memory by about 400 MB; only our devices are kept
// now, so what the answer costs is about its own bytes.
TEST(PodResources, SixteenMebibytesOfTinyPodsDoNotBlowUpTheDaemonsMemory) {
  test::TempDir dir;
  std::string answer;
  const std::string pod = std::string("\x0a\x03\x0a\x01") + "x";  // pod_resources { name: "x" }
  while (answer.size() + pod.size() < (16u << 20) - 4096) answer += pod;
  // ...and one container of ours, after them all.
  ::v1::ListPodResourcesResponse ours;
  add_container(ours, "ml", "p", "c", "gpuslice.io/vram", {"k-m0"});
  answer += ours.SerializeAsString();
  RawPodResources kubelet(dir / "kubelet.sock", answer);
  kubelet.start();

  PodResourcesOptions options;
  options.socket = dir / "kubelet.sock";
  options.timeout = std::chrono::seconds(30);
  options.resource_prefix = "gpuslice.io/";
  PodResourcesClient client(options);
  // No warm-up call: memory an earlier decode took stays in the allocator and would hide this one.
  const std::size_t before = peak_rss_kib(true);
  auto listed = client.list();
  const std::size_t peak = peak_rss_kib(false);
  ASSERT_TRUE(listed.ok()) << listed.error();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].owner.pod, "p");
  EXPECT_EQ((*listed)[0].device_ids, std::vector<std::string>{"k-m0"});
  // The answer's bytes pass through gRPC and one copy: a few times 16 MiB, not hundreds.
  EXPECT_LT(peak - before, 100u * 1024) << "peak grew by " << (peak - before) / 1024 << " MiB";
}

TEST(PodResources, AnswersBeyondTheBoundsOrMalformedAreErrorsNotPartialLists) {
  // 65,537 pods: one pod's bytes repeated (concatenated messages append their repeated fields), which
  // builds in milliseconds even under the sanitizers.
  ::v1::ListPodResourcesResponse one_pod;
  add_container(one_pod, "ml", "p", "c", "gpuslice.io/vram", {"k"});
  const std::string pod_bytes = one_pod.SerializeAsString();
  std::string many;
  many.reserve(pod_bytes.size() * ((1 << 16) + 1));
  for (int i = 0; i < (1 << 16) + 1; ++i) many += pod_bytes;
  auto listed = parse_list_response(many, "gpuslice.io/");
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.error().find("more than 65536"), std::string::npos) << listed.error();
  // Not ours: not kept, so not counted.
  EXPECT_TRUE(parse_list_response(many, "other.io/").ok());

  ::v1::ListPodResourcesResponse one;
  add_container(one, "ml", "p", "c", "gpuslice.io/vram", {"k-m0", "k-m1"});
  const std::string bytes = one.SerializeAsString();
  EXPECT_FALSE(parse_list_response(bytes.substr(0, bytes.size() - 1), "gpuslice.io/").ok());
  EXPECT_FALSE(parse_list_response(bytes + "\xff", "gpuslice.io/").ok());
  auto whole = parse_list_response(bytes, "gpuslice.io/");
  ASSERT_TRUE(whole.ok()) << whole.error();
  EXPECT_EQ((*whole)[0].device_ids, (std::vector<std::string>{"k-m0", "k-m1"}));
  ::v1::ListPodResourcesResponse long_name;
  add_container(long_name, "ml", std::string(2000, 'p'), "c", "gpuslice.io/vram", {"k"});
  EXPECT_FALSE(parse_list_response(long_name.SerializeAsString(), "gpuslice.io/").ok());
}

}  // namespace
}  // namespace gpuslice::node
