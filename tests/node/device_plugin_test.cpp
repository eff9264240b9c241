// The device plugin against a fake kubelet that speaks the real v1beta1 protocol over unix sockets.
#include "node/kubelet/device_plugin.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "node/api/metrics.h"
#include "node/host/allocation_record.h"
#include "node/host/limits_file.h"
#include "node/node_view/collector.h"
#include "node/serve_mode.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

namespace api = ::v1beta1;

// The kubelet's side: a Registration service on <dir>/kubelet.sock that records Register calls.
class FakeKubelet final : public api::Registration::Service {
 public:
  explicit FakeKubelet(std::string dir) : dir_(std::move(dir)) {}
  ~FakeKubelet() override { stop(); }

  void start() {
    const std::string socket = dir_ + "/kubelet.sock";
    ::unlink(socket.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_) << "fake kubelet cannot listen on " << socket;
  }

  void stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
    ::unlink((dir_ + "/kubelet.sock").c_str());
  }

  // What a real kubelet does when it restarts: its socket and every plugin socket disappear, then
  // a new kubelet.sock is served.
  void restart() {
    stop();
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      if (entry.path().extension() == ".sock") std::filesystem::remove(entry.path());
    }
    start();
  }

  grpc::Status Register(grpc::ServerContext*, const api::RegisterRequest* request, api::Empty*) override {
    std::lock_guard lock(mutex_);
    requests_.push_back(*request);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  bool wait_for(std::size_t count) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return requests_.size() >= count; });
  }
  std::vector<api::RegisterRequest> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  std::string dir_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<api::RegisterRequest> requests_;
};

using test::kUuid0;
using test::kUuid1;

std::vector<GpuInfo> inventory() {
  GpuInfo a;
  a.index = 0;
  a.uuid = kUuid0;
  a.name = "Test GPU";
  a.minor = 0;
  a.memory_total_bytes = 1ULL << 30;
  GpuInfo b = a;
  b.index = 1;
  b.uuid = kUuid1;
  b.minor = 1;
  b.memory_total_bytes = 512ULL << 20;
  return {a, b};
}

class DevicePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "plugins");
    test::write_file(dir_ / "dev/nvidiactl", "");
    test::write_file(dir_ / "dev/nvidia-uvm", "");
    test::write_file(dir_ / "dev/nvidia0", "");
    kubelet_ = std::make_unique<FakeKubelet>(dir_ / "plugins");
    kubelet_->start();
    options_.device_plugin_dir = dir_ / "plugins";
    options_.catalog.replicas = 2;
    options_.catalog.vram_unit = 64ULL << 20;
    options_.catalog.dev_root = dir_ / "dev";
    options_.watch_interval = std::chrono::milliseconds(20);
    manager_ = std::make_unique<DevicePluginManager>(options_, HostLayout(dir_ / "root"), inventory());
    auto started = manager_->start();
    ASSERT_TRUE(started.ok()) << started.error();
  }
  void TearDown() override {
    manager_.reset();
    kubelet_.reset();
  }

  std::unique_ptr<api::DevicePlugin::Stub> plugin(const std::string& resource) {
    auto channel = grpc::CreateChannel("unix://" + (dir_ / "plugins/gpuslice-") + resource + ".sock",
                                       grpc::InsecureChannelCredentials());
    return api::DevicePlugin::NewStub(channel);
  }

  static void deadline(grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }

  test::TempDir dir_;
  PluginOptions options_;
  std::unique_ptr<FakeKubelet> kubelet_;
  std::unique_ptr<DevicePluginManager> manager_;
};

TEST_F(DevicePluginTest, RegistersEveryResourceWithTheKubelet) {
  ASSERT_TRUE(kubelet_->wait_for(3));
  std::map<std::string, api::RegisterRequest> by_resource;
  for (const auto& r : kubelet_->requests()) by_resource[r.resource_name()] = r;
  ASSERT_EQ(by_resource.size(), 3u);
  for (const char* resource : {"gpu", "vram", "cores"}) {
    const auto& r = by_resource.at(std::string("gpuslice.io/") + resource);
    EXPECT_EQ(r.version(), "v1beta1");
    EXPECT_EQ(r.endpoint(), std::string("gpuslice-") + resource + ".sock");  // relative to the directory
    EXPECT_FALSE(r.options().pre_start_required());
    EXPECT_TRUE(r.options().get_preferred_allocation_available());
  }
  // The kubelet records the call before the plugin sees the reply.
  EXPECT_TRUE(test::wait_until([&] { return manager_->registrations() == 3u; }));

  grpc::ClientContext context;
  deadline(context);
  api::DevicePluginOptions options;
  ASSERT_TRUE(plugin("vram")->GetDevicePluginOptions(&context, api::Empty(), &options).ok());
  EXPECT_TRUE(options.get_preferred_allocation_available());
  EXPECT_FALSE(options.pre_start_required());
}

TEST_F(DevicePluginTest, ListAndWatchStreamsDevicesAndHealthChanges) {
  auto stub = plugin("vram");
  grpc::ClientContext context;
  deadline(context);
  auto stream = stub->ListAndWatch(&context, api::Empty());
  api::ListAndWatchResponse first;
  ASSERT_TRUE(stream->Read(&first));
  ASSERT_EQ(first.devices_size(), 16 + 8);  // 1 GiB and 512 MiB in 64 MiB units
  for (const auto& d : first.devices()) EXPECT_EQ(d.health(), "Healthy") << d.id();
  EXPECT_EQ(first.devices(0).id(), "11111111-m0");

  // NVML now fails for GPU 1: its devices turn Unhealthy on the open stream.
  auto gpus = inventory();
  gpus[1].healthy = false;
  manager_->update_health(gpus);
  api::ListAndWatchResponse second;
  ASSERT_TRUE(stream->Read(&second));
  ASSERT_EQ(second.devices_size(), 24);
  int unhealthy = 0;
  for (const auto& d : second.devices()) {
    const bool on_gpu1 = d.id().rfind("22222222-", 0) == 0;
    EXPECT_EQ(d.health(), on_gpu1 ? "Unhealthy" : "Healthy") << d.id();
    unhealthy += d.health() == "Unhealthy";
  }
  EXPECT_EQ(unhealthy, 8);

  // Recovery is streamed as well.
  manager_->update_health(inventory());
  api::ListAndWatchResponse recovered;
  ASSERT_TRUE(stream->Read(&recovered));
  for (const auto& d : recovered.devices()) EXPECT_EQ(d.health(), "Healthy") << d.id();

  // A GPU that NVML no longer lists at all is unhealthy too.
  manager_->update_health({inventory()[0]});
  api::ListAndWatchResponse missing;
  ASSERT_TRUE(stream->Read(&missing));
  for (const auto& d : missing.devices()) {
    EXPECT_EQ(d.health(), d.id().rfind("22222222-", 0) == 0 ? "Unhealthy" : "Healthy") << d.id();
  }
  context.TryCancel();
}

TEST_F(DevicePluginTest, AllocateReturnsEnvMountsAndDevices) {
  auto stub = plugin("vram");
  api::AllocateRequest request;
  auto* container = request.add_container_requests();
  for (const char* id : {"11111111-m0", "11111111-m1", "11111111-m2"}) container->add_devices_ids(id);
  grpc::ClientContext context;
  deadline(context);
  api::AllocateResponse response;
  grpc::Status status = stub->Allocate(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.container_responses_size(), 1);
  const auto& r = response.container_responses(0);
  const std::string bytes = std::to_string(3 * (64ULL << 20));
  EXPECT_EQ(r.envs().at("GPUSLICE_MEMORY_LIMIT"), bytes);
  EXPECT_EQ(r.envs().at("LD_PRELOAD"), "/usr/local/lib/gpuslice/libgpuslice.so");
  EXPECT_EQ(r.envs().at("GPUSLICE_SHARED_DIR"), "/tmp/gpuslice");
  EXPECT_EQ(r.envs().at("GPUSLICE_LIMITS_FILE"), "/etc/gpuslice/limits");
  EXPECT_EQ(r.envs().at("NVIDIA_VISIBLE_DEVICES"), kUuid0);
  const std::string id = r.envs().at("GPUSLICE_CONTAINER_ID");
  HostLayout layout(dir_ / "root");

  ASSERT_EQ(r.mounts_size(), 5);  // then the node channel and the container's writer directory
  EXPECT_EQ(r.mounts(0).container_path(), "/usr/local/lib/gpuslice/libgpuslice.so");
  EXPECT_EQ(r.mounts(0).host_path(), dir_ / "root/lib/libgpuslice.so");
  EXPECT_TRUE(r.mounts(0).read_only());
  EXPECT_EQ(r.mounts(1).container_path(), "/tmp/gpuslice");
  EXPECT_EQ(r.mounts(1).host_path(), layout.state_dir(id));
  EXPECT_FALSE(r.mounts(1).read_only());
  EXPECT_EQ(r.mounts(2).container_path(), "/etc/gpuslice");
  EXPECT_EQ(r.mounts(2).host_path(), layout.config_dir(id));
  EXPECT_TRUE(r.mounts(2).read_only());
  // A vram container is on the node channel too (priority sharing needs no cores).
  const std::string writer = r.envs().at("GPUSLICE_NODE_WRITER");
  EXPECT_EQ(r.envs().at("GPUSLICE_NODE_DIR"), "/tmp/gpuslice-node");
  EXPECT_EQ(r.mounts(3).host_path(), layout.channel_dir());
  EXPECT_TRUE(r.mounts(3).read_only());
  EXPECT_EQ(r.mounts(4).host_path(), layout.channel_writer_dir(writer));
  EXPECT_FALSE(r.mounts(4).read_only());
  EXPECT_TRUE(std::filesystem::exists(layout.channel_writer_dir(writer) + ".assigned"));

  ASSERT_EQ(r.devices_size(), 3);
  EXPECT_EQ(r.devices(0).container_path(), "/dev/nvidiactl");
  EXPECT_EQ(r.devices(1).container_path(), "/dev/nvidia-uvm");
  EXPECT_EQ(r.devices(2).container_path(), "/dev/nvidia0");
  EXPECT_EQ(r.devices(2).host_path(), dir_ / "dev/nvidia0");
  EXPECT_EQ(r.devices(2).permissions(), "rw");

  auto limits = read_limits_file(layout.limits_file(id));
  ASSERT_TRUE(limits.ok()) << limits.error();
  EXPECT_EQ(limits->memory, bytes);
  EXPECT_TRUE(std::filesystem::is_directory(layout.state_dir(id)));

  // Cores: the compute limit travels in the environment.
  api::AllocateRequest cores;
  auto* c = cores.add_container_requests();
  for (int i = 0; i < 25; ++i) c->add_devices_ids("22222222-c" + std::to_string(i));
  grpc::ClientContext cores_context;
  deadline(cores_context);
  api::AllocateResponse cores_response;
  ASSERT_TRUE(plugin("cores")->Allocate(&cores_context, cores, &cores_response).ok());
  EXPECT_EQ(cores_response.container_responses(0).envs().at("GPUSLICE_COMPUTE_LIMIT"), "25");
  EXPECT_EQ(cores_response.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), kUuid1);

  // An id this plugin never advertised is refused.
  api::AllocateRequest bad;
  bad.add_container_requests()->add_devices_ids("11111111-m99");
  grpc::ClientContext bad_context;
  deadline(bad_context);
  api::AllocateResponse bad_response;
  grpc::Status refused = stub->Allocate(&bad_context, bad, &bad_response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("11111111-m99"), std::string::npos);
}

TEST_F(DevicePluginTest, PreferredAllocationAndPreStart) {
  api::PreferredAllocationRequest request;
  auto* c = request.add_container_requests();
  for (int i = 0; i < 16; ++i) c->add_available_deviceids("11111111-m" + std::to_string(i));
  for (int i = 0; i < 8; ++i) c->add_available_deviceids("22222222-m" + std::to_string(i));
  c->add_must_include_deviceids("11111111-m7");
  c->set_allocation_size(3);
  grpc::ClientContext context;
  deadline(context);
  api::PreferredAllocationResponse response;
  ASSERT_TRUE(plugin("vram")->GetPreferredAllocation(&context, request, &response).ok());
  ASSERT_EQ(response.container_responses_size(), 1);
  const auto& ids = response.container_responses(0).deviceids();
  ASSERT_EQ(ids.size(), 3);
  EXPECT_EQ(ids[0], "11111111-m7");
  EXPECT_EQ(ids[1], "11111111-m0");
  EXPECT_EQ(ids[2], "11111111-m1");

  api::PreStartContainerRequest pre;
  pre.add_devices_ids("11111111-m0");
  grpc::ClientContext pre_context;
  deadline(pre_context);
  api::PreStartContainerResponse pre_response;
  EXPECT_TRUE(plugin("vram")->PreStartContainer(&pre_context, pre, &pre_response).ok());
}

TEST_F(DevicePluginTest, RegistersAgainAfterKubeletRestart) {
  ASSERT_TRUE(kubelet_->wait_for(3));
  kubelet_->restart();  // deletes kubelet.sock and our sockets, serves a new kubelet.sock
  ASSERT_TRUE(kubelet_->wait_for(6)) << "the plugin did not register with the restarted kubelet";
  auto requests = kubelet_->requests();
  std::set<std::string> again;
  for (std::size_t i = 3; i < requests.size(); ++i) again.insert(requests[i].resource_name());
  EXPECT_EQ(again, (std::set<std::string>{"gpuslice.io/gpu", "gpuslice.io/vram", "gpuslice.io/cores"}));

  // The plugin sockets are served again and answer.
  ASSERT_TRUE(test::wait_until([&] { return std::filesystem::exists(dir_ / "plugins/gpuslice-gpu.sock"); }));
  grpc::ClientContext context;
  deadline(context);
  auto stream = plugin("gpu")->ListAndWatch(&context, api::Empty());
  api::ListAndWatchResponse list;
  ASSERT_TRUE(stream->Read(&list));
  EXPECT_EQ(list.devices_size(), 4);
  context.TryCancel();
}

TEST_F(DevicePluginTest, ReportsWaitingForKubeletRegisteredAndReRegistered) {
  auto states = [&] {
    std::map<std::string, std::pair<RegistrationState, unsigned>> out;
    for (const auto& r : manager_->registration()) out[r.resource] = {r.state, r.registrations};
    return out;
  };
  auto all = [&](RegistrationState state, unsigned registrations) {
    auto now = states();
    if (now.size() != 3) return false;
    for (const auto& [resource, s] : now) {
      if (s.first != state || s.second != registrations) return false;
    }
    return true;
  };
  ASSERT_TRUE(test::wait_until([&] { return all(RegistrationState::Registered, 1); }));

  kubelet_->stop();  // kubelet.sock is gone
  ASSERT_TRUE(test::wait_until([&] { return all(RegistrationState::WaitingForKubelet, 1); }))
      << "the plugin does not say it waits for the kubelet";

  kubelet_->restart();
  ASSERT_TRUE(test::wait_until([&] { return all(RegistrationState::Registered, 2); }))
      << "not registered again after the kubelet came back";
  EXPECT_STREQ(registration_state_name(RegistrationState::WaitingForKubelet), "waiting_for_kubelet");
}

TEST_F(DevicePluginTest, AllocateRecordsTheDevicesForPodAttribution) {
  api::AllocateRequest request;
  auto* container = request.add_container_requests();
  for (const char* id : {"11111111-m4", "11111111-m2"}) container->add_devices_ids(id);
  grpc::ClientContext context;
  deadline(context);
  api::AllocateResponse response;
  ASSERT_TRUE(plugin("vram")->Allocate(&context, request, &response).ok());
  const std::string id = response.container_responses(0).envs().at("GPUSLICE_CONTAINER_ID");
  HostLayout layout(dir_ / "root");
  auto record = parse_allocation_record(test::read_file(layout.allocation_file(id)));
  ASSERT_TRUE(record.ok()) << record.error();
  EXPECT_EQ(record->resource, "gpuslice.io/vram");
  EXPECT_EQ(record->devices, 2u);
  EXPECT_EQ(record->devices_sha256, devices_digest({"11111111-m2", "11111111-m4"}))
      << "order does not matter";
  EXPECT_GT(record->allocated_at_ns, 0u);
  // Not inside what the container gets mounted.
  for (const auto& m : response.container_responses(0).mounts()) {
    EXPECT_NE(m.host_path(), layout.container_dir(id)) << "the record must not be writable by the container";
  }
}

TEST(DevicePlugin, CdiStrategyHandsOverCdiDeviceNamesInsteadOfTheEnvironment) {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "plugins");
  test::write_file(dir / "dev/nvidia0", "");
  test::write_file(dir / "dev/nvidiactl", "");
  PluginOptions options;
  options.device_plugin_dir = dir / "plugins";
  options.catalog.vram_unit = 64ULL << 20;
  options.catalog.dev_root = dir / "dev";
  options.catalog.cdi = true;
  options.watch_interval = std::chrono::milliseconds(20);
  DevicePluginManager manager(options, HostLayout(dir / "root"), inventory());
  ASSERT_TRUE(manager.start().ok());

  for (const char* resource : {"vram", "gpu"}) {
    auto channel = grpc::CreateChannel("unix://" + (dir / "plugins/gpuslice-") + resource + ".sock",
                                       grpc::InsecureChannelCredentials());
    auto stub = api::DevicePlugin::NewStub(channel);
    api::AllocateRequest request;
    auto* c = request.add_container_requests();
    if (std::string(resource) == "vram") {
      c->add_devices_ids("11111111-m0");
      c->add_devices_ids("22222222-m1");
    } else {
      c->add_devices_ids("11111111-r0");
      c->add_devices_ids("22222222-r0");
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    api::AllocateResponse response;
    grpc::Status status = stub->Allocate(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    const auto& r = response.container_responses(0);
    ASSERT_EQ(r.cdi_devices_size(), 2) << resource;
    EXPECT_EQ(r.cdi_devices(0).name(), std::string("nvidia.com/gpu=") + kUuid0);
    EXPECT_EQ(r.cdi_devices(1).name(), std::string("nvidia.com/gpu=") + kUuid1);
    EXPECT_EQ(r.envs().count("NVIDIA_VISIBLE_DEVICES"), 0u) << "the CDI spec sets it";
    EXPECT_EQ(r.devices_size(), 0) << "the CDI spec injects the device nodes";
    EXPECT_EQ(r.envs().at("LD_PRELOAD"), "/usr/local/lib/gpuslice/libgpuslice.so") << "still limited";
  }
}

// Eight 80 GiB GPUs whose UUIDs share their first 28 hex digits (as the simulated GPUs' do): long ids.
std::vector<GpuInfo> big_node() {
  std::vector<GpuInfo> big;
  for (unsigned i = 0; i < 8; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-40000000-aaaa-4000-8000-00000000000" + std::to_string(i);
    g.minor = i;
    g.memory_total_bytes = 80ULL << 30;
    big.push_back(g);
  }
  return big;
}

TEST(DevicePlugin, RefusesAVramListTheKubeletCouldNotRead) {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "plugins");
  PluginOptions options;
  options.device_plugin_dir = dir / "plugins";
  options.catalog.vram_unit = 1ULL << 20;  // 8 x 81920 ids: well over 4 MiB
  options.watch_interval = std::chrono::milliseconds(20);
  DevicePluginManager manager(options, HostLayout(dir / "root"), big_node());
  ASSERT_TRUE(manager.start().ok());
  EXPECT_EQ(manager.resource_names(), (std::vector<std::string>{"gpuslice.io/gpu", "gpuslice.io/cores"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "plugins/gpuslice-vram.sock"));
  // The refusal is not only a log line: it is a state the metrics export and an alert watches.
  bool refused = false;
  for (const auto& p : manager.registration()) {
    if (p.resource == "gpuslice.io/vram") refused = p.state == RegistrationState::Refused;
  }
  EXPECT_TRUE(refused);
  NodeView view;
  view.device_plugin = true;
  view.plugins = manager.registration();
  EXPECT_NE(render_metrics(view, "t").find(
                "gpuslice_device_plugin_state{node=\"\",resource=\"gpuslice.io/vram\",state=\"refused\"} 1"),
            std::string::npos);
}

// The default unit of old (1 MiB) left a node with more than about 80 GiB of VRAM without any
// gpuslice.io/vram: the auto unit (the default) always fits, and the catalog's size is exact.
TEST(DevicePlugin, EightEightyGigabyteGpusStillAdvertiseVramWithTheDefaultUnit) {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "plugins");
  PluginOptions options;
  ServeOptions defaults;
  ASSERT_EQ(parse_serve_options(
                {}, [](const char*) -> const char* { return nullptr; }, defaults)
                .message,
            "");
  options.catalog.vram_unit = defaults.plugin.catalog.vram_unit;
  options.device_plugin_dir = dir / "plugins";
  options.watch_interval = std::chrono::milliseconds(20);
  DevicePluginManager manager(options, HostLayout(dir / "root"), big_node());
  ASSERT_TRUE(manager.start().ok());
  EXPECT_EQ(manager.resource_names(),
            (std::vector<std::string>{"gpuslice.io/gpu", "gpuslice.io/vram", "gpuslice.io/cores"}));
  std::uint64_t unit = 0;
  for (const auto& p : manager.registration()) {
    if (p.resource == "gpuslice.io/vram") unit = p.unit_bytes;
  }
  ASSERT_GE(unit, 2ULL << 20);
  EXPECT_EQ(unit & (unit - 1), 0u) << "a power of two";
  {
    CatalogOptions finer;
    finer.vram_unit = unit / 2;
    EXPECT_GT(DeviceCatalog(big_node(), finer).list_bytes(ResourceKind::Vram), kMaxDeviceListBytes)
        << "the smallest unit that fits";
  }

  // What ListAndWatch sends is what the catalog computed, and it fits.
  auto channel = grpc::CreateChannel("unix://" + (dir / "plugins/gpuslice-vram.sock"),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1beta1::DevicePlugin::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1beta1::Empty empty;
  auto reader = stub->ListAndWatch(&context, empty);
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(reader->Read(&list));
  EXPECT_EQ(static_cast<std::uint64_t>(list.devices_size()), 8 * ((80ULL << 30) / unit));
  CatalogOptions catalog_options;
  catalog_options.vram_unit = unit;
  DeviceCatalog catalog(big_node(), catalog_options);
  EXPECT_LE(list.ByteSizeLong(), catalog.list_bytes(ResourceKind::Vram));
  for (auto& d : *list.mutable_devices()) d.set_health(kUnhealthy);
  EXPECT_EQ(list.ByteSizeLong(), catalog.list_bytes(ResourceKind::Vram));
  EXPECT_LE(list.ByteSizeLong(), kMaxDeviceListBytes);
  context.TryCancel();
  manager.stop();
}

TEST(DeviceCatalogUnit, AutoUnitIsOneMebibyteOnSmallNodes) {
  CatalogOptions options;
  options.vram_unit = kAutoVramUnit;
  GpuInfo g;
  g.uuid = "GPU-12345678-aaaa-4000-8000-000000000000";
  g.memory_total_bytes = 80ULL << 30;
  EXPECT_EQ(DeviceCatalog({g}, options).options().vram_unit, 1ULL << 20);
}

}  // namespace
}  // namespace gpuslice::node
