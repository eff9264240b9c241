// The DRA plugin against a fake kubelet that speaks the kubelet's own protos: the plugin watcher's
// registration handshake (pluginregistration.Registration) and the DRA service in both versions the
// kubelets of 1.32-1.35 call (v1beta1 up to 1.33, v1 from 1.34).
#include <google/protobuf/descriptor.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <thread>

#include "../test_util.h"
#include "dra/v1/api.grpc.pb.h"
#include "dra/v1beta1/api.grpc.pb.h"
#include "dra_test_util.h"
#include "node/dra/claim_preparer.h"
#include "node/dra/kubelet_service.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace gpuslice::node::dra {
namespace {

namespace v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace v1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
namespace reg = ::pluginregistration;

// What the kubelet's plugin watcher does with a socket that appears in plugins_registry.
struct FakeKubelet {
  reg::PluginInfo info;
  grpc::Status discover(const std::string& registration_socket) {
    auto channel = grpc::CreateChannel("unix://" + registration_socket, grpc::InsecureChannelCredentials());
    auto stub = reg::Registration::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto status = stub->GetInfo(&ctx, reg::InfoRequest(), &info);
    if (!status.ok()) return status;
    reg::RegistrationStatus accepted;
    accepted.set_plugin_registered(true);
    reg::RegistrationStatusResponse ignored;
    grpc::ClientContext ctx2;
    return stub->NotifyRegistrationStatus(&ctx2, accepted, &ignored);
  }
  template <class Api, class Stub = typename Api::DRAPlugin::Stub>
  std::unique_ptr<Stub> dra() {
    return Api::DRAPlugin::NewStub(
        grpc::CreateChannel("unix://" + info.endpoint(), grpc::InsecureChannelCredentials()));
  }
};

struct V1 {
  using DRAPlugin = v1::DRAPlugin;
  using PrepareRequest = v1::NodePrepareResourcesRequest;
  using PrepareResponse = v1::NodePrepareResourcesResponse;
  using UnprepareRequest = v1::NodeUnprepareResourcesRequest;
  using UnprepareResponse = v1::NodeUnprepareResourcesResponse;
};
struct V1beta1 {
  using DRAPlugin = v1beta1::DRAPlugin;
  using PrepareRequest = v1beta1::NodePrepareResourcesRequest;
  using PrepareResponse = v1beta1::NodePrepareResourcesResponse;
  using UnprepareRequest = v1beta1::NodeUnprepareResourcesRequest;
  using UnprepareResponse = v1beta1::NodeUnprepareResourcesResponse;
};

class DraKubelet : public ::testing::Test, protected test::PreparerFixture {
 protected:
  std::unique_ptr<KubeletPlugin> plugin;

  void SetUp() override {
    start_preparer(preparer_options());
    if (HasFatalFailure()) return;
    KubeletPluginOptions k;
    k.plugins_dir = tmp / "plugins";
    k.registry_dir = tmp / "registry";
    k.watch_interval = std::chrono::milliseconds(50);
    plugin = std::make_unique<KubeletPlugin>(k, *preparer);
    ASSERT_TRUE(plugin->start());
  }
  void TearDown() override {
    if (plugin) plugin->stop();
  }

  // Outside the template below: GCC 12 fails on test::Result's initialisers inside it.
  void add_claims() {
    claims.claims["team-a/train-gpu"] = test::allocated_claim("uid-1", {{}});
    test::Result foreign;
    foreign.pool = "node-b";
    claims.claims["team-a/foreign"] = test::allocated_claim("uid-2", {foreign}, nullptr, "team-a", "foreign");
  }

  template <class Api>
  void prepare_and_unprepare() {
    add_claims();
    FakeKubelet kubelet;
    ASSERT_TRUE(kubelet.discover(plugin->registration_socket()).ok());
    auto stub = kubelet.dra<Api>();
    typename Api::PrepareRequest request;
    auto* c = request.add_claims();
    c->set_namespace_("team-a");
    c->set_name("train-gpu");
    c->set_uid("uid-1");
    auto* f = request.add_claims();
    f->set_namespace_("team-a");
    f->set_name("foreign");
    f->set_uid("uid-2");
    typename Api::PrepareResponse response;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->NodePrepareResources(&ctx, request, &response).ok());
    ASSERT_EQ(response.claims().size(), 2u) << "every claim of the request has an answer";
    const auto& ok = response.claims().at("uid-1");
    EXPECT_EQ(ok.error(), "");
    ASSERT_EQ(ok.devices_size(), 1);
    EXPECT_EQ(ok.devices(0).pool_name(), "node-a");
    EXPECT_EQ(ok.devices(0).device_name(), "gpu-0");
    EXPECT_EQ(ok.devices(0).request_names(0), "gpu");
    EXPECT_EQ(ok.devices(0).cdi_device_ids(0), "gpuslice.io/claim=uid-1");
    EXPECT_NE(response.claims().at("uid-2").error().find("another node"), std::string::npos);
    EXPECT_EQ(access((tmp / "root/containers/dra-uid-1/config/limits").c_str(), F_OK), 0);

    typename Api::UnprepareRequest un;
    *un.add_claims() = *c;
    typename Api::UnprepareResponse unresponse;
    grpc::ClientContext ctx2;
    ASSERT_TRUE(stub->NodeUnprepareResources(&ctx2, un, &unresponse).ok());
    EXPECT_EQ(unresponse.claims().at("uid-1").error(), "");
    EXPECT_NE(access((tmp / "root/containers/dra-uid-1").c_str(), F_OK), 0);
  }
};

TEST_F(DraKubelet, TheRegistrationHandshakeNamesTheDriverSocketAndBothServices) {
  FakeKubelet kubelet;
  ASSERT_TRUE(kubelet.discover(plugin->registration_socket()).ok());
  EXPECT_EQ(kubelet.info.type(), "DRAPlugin");
  EXPECT_EQ(kubelet.info.name(), "gpuslice.io");
  EXPECT_EQ(kubelet.info.endpoint(), tmp / "plugins/gpuslice.io/dra.sock");
  std::vector<std::string> versions(kubelet.info.supported_versions().begin(),
                                    kubelet.info.supported_versions().end());
  EXPECT_EQ(versions, (std::vector<std::string>{"v1.DRAPlugin", "v1beta1.DRAPlugin"}));
  EXPECT_EQ(plugin->registration_socket(), tmp / "registry/gpuslice.io-reg.sock");
  EXPECT_TRUE(plugin->status().registered());
}

TEST_F(DraKubelet, AKubelet134PreparesAndUnpreparesThroughV1) { prepare_and_unprepare<V1>(); }

TEST_F(DraKubelet, AKubelet132PreparesAndUnpreparesThroughV1beta1) { prepare_and_unprepare<V1beta1>(); }

TEST_F(DraKubelet, ARefusedRegistrationIsReported) {
  auto channel =
      grpc::CreateChannel("unix://" + plugin->registration_socket(), grpc::InsecureChannelCredentials());
  auto stub = reg::Registration::NewStub(channel);
  reg::RegistrationStatus refused;
  refused.set_plugin_registered(false);
  refused.set_error("version not supported \x1b[2J");
  reg::RegistrationStatusResponse ignored;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->NotifyRegistrationStatus(&ctx, refused, &ignored).ok());
  EXPECT_FALSE(plugin->status().registered());
  EXPECT_EQ(plugin->status().snapshot("gpuslice.io").state, RegistrationState::Registering);
}

TEST_F(DraKubelet, RemovedSocketsAreServedAgain) {
  const std::string socket = plugin->registration_socket();
  ASSERT_EQ(::unlink(socket.c_str()), 0);
  ASSERT_EQ(::unlink(plugin->dra_socket().c_str()), 0);
  for (int i = 0; i < 100 && ::access(socket.c_str(), F_OK) != 0; ++i) ::usleep(20000);
  FakeKubelet kubelet;
  EXPECT_TRUE(kubelet.discover(socket).ok());
}

TEST_F(DraKubelet, TooManyClaimsInOneCallAreRefused) {
  FakeKubelet kubelet;
  ASSERT_TRUE(kubelet.discover(plugin->registration_socket()).ok());
  auto stub = kubelet.dra<V1>();
  v1::NodePrepareResourcesRequest request;
  for (int i = 0; i <= kMaxClaimsPerCall; ++i) request.add_claims()->set_uid("u" + std::to_string(i));
  v1::NodePrepareResourcesResponse response;
  grpc::ClientContext ctx;
  EXPECT_EQ(stub->NodePrepareResources(&ctx, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// The wire contract, transcribed from the kubelet's published protos (k8s.io/kubelet/pkg/apis/dra/
// {v1,v1beta1}/api.proto, .../pluginregistration/v1/api.proto): full service names and every field's
// number and type. A drift in our .proto files fails here, not in a cluster.
TEST(DraProtos, FieldNumbersMatchTheKubeletsProtos) {
  using google::protobuf::FieldDescriptor;
  struct Field {
    const char* message;
    const char* field;
    int number;
    FieldDescriptor::Type type;
    bool repeated;
  };
  const Field dra_fields[] = {
      {"NodePrepareResourcesRequest", "claims", 1, FieldDescriptor::TYPE_MESSAGE, true},
      {"NodePrepareResourcesResponse", "claims", 1, FieldDescriptor::TYPE_MESSAGE, true},
      {"NodePrepareResourceResponse", "devices", 1, FieldDescriptor::TYPE_MESSAGE, true},
      {"NodePrepareResourceResponse", "error", 2, FieldDescriptor::TYPE_STRING, false},
      {"Device", "request_names", 1, FieldDescriptor::TYPE_STRING, true},
      {"Device", "pool_name", 2, FieldDescriptor::TYPE_STRING, false},
      {"Device", "device_name", 3, FieldDescriptor::TYPE_STRING, false},
      {"Device", "cdi_device_ids", 4, FieldDescriptor::TYPE_STRING, true},
      {"NodeUnprepareResourcesRequest", "claims", 1, FieldDescriptor::TYPE_MESSAGE, true},
      {"NodeUnprepareResourcesResponse", "claims", 1, FieldDescriptor::TYPE_MESSAGE, true},
      {"NodeUnprepareResourceResponse", "error", 1, FieldDescriptor::TYPE_STRING, false},
      {"Claim", "namespace", 1, FieldDescriptor::TYPE_STRING, false},
      {"Claim", "uid", 2, FieldDescriptor::TYPE_STRING, false},
      {"Claim", "name", 3, FieldDescriptor::TYPE_STRING, false},
  };
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const char* package : {"k8s.io.kubelet.pkg.apis.dra.v1", "k8s.io.kubelet.pkg.apis.dra.v1beta1"}) {
    const auto* service = pool->FindServiceByName(std::string(package) + ".DRAPlugin");
    ASSERT_NE(service, nullptr) << package;
    EXPECT_NE(service->FindMethodByName("NodePrepareResources"), nullptr);
    EXPECT_NE(service->FindMethodByName("NodeUnprepareResources"), nullptr);
    EXPECT_EQ(service->method_count(), 2);
    for (const auto& f : dra_fields) {
      const auto* message = pool->FindMessageTypeByName(std::string(package) + "." + f.message);
      ASSERT_NE(message, nullptr) << f.message;
      const auto* field = message->FindFieldByName(f.field);
      ASSERT_NE(field, nullptr) << f.message << "." << f.field;
      EXPECT_EQ(field->number(), f.number) << f.message << "." << f.field;
      EXPECT_EQ(field->type(), f.type) << f.message << "." << f.field;
      EXPECT_EQ(field->is_repeated(), f.repeated) << f.message << "." << f.field;
    }
    // The two maps are keyed by claim uid (string).
    const auto* map = pool->FindMessageTypeByName(std::string(package) + ".NodePrepareResourcesResponse")
                          ->FindFieldByName("claims");
    EXPECT_TRUE(map->is_map());
    EXPECT_EQ(map->message_type()->FindFieldByName("key")->type(), FieldDescriptor::TYPE_STRING);
  }
  const Field reg_fields[] = {
      {"PluginInfo", "type", 1, FieldDescriptor::TYPE_STRING, false},
      {"PluginInfo", "name", 2, FieldDescriptor::TYPE_STRING, false},
      {"PluginInfo", "endpoint", 3, FieldDescriptor::TYPE_STRING, false},
      {"PluginInfo", "supported_versions", 4, FieldDescriptor::TYPE_STRING, true},
      {"RegistrationStatus", "plugin_registered", 1, FieldDescriptor::TYPE_BOOL, false},
      {"RegistrationStatus", "error", 2, FieldDescriptor::TYPE_STRING, false},
  };
  ASSERT_NE(pool->FindServiceByName("pluginregistration.Registration"), nullptr);
  EXPECT_NE(pool->FindServiceByName("pluginregistration.Registration")->FindMethodByName("GetInfo"), nullptr);
  for (const auto& f : reg_fields) {
    const auto* field =
        pool->FindMessageTypeByName(std::string("pluginregistration.") + f.message)->FindFieldByName(f.field);
    ASSERT_NE(field, nullptr) << f.message << "." << f.field;
    EXPECT_EQ(field->number(), f.number);
    EXPECT_EQ(field->type(), f.type);
    EXPECT_EQ(field->is_repeated(), f.repeated);
  }
}

}  // namespace
}  // namespace gpuslice::node::dra

namespace gpuslice::node::dra {
namespace {

std::uint64_t inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

// A rolling update: the new instance binds its sockets over the old one's. The old instance's
// watcher must not serve over them, and stopping it must not remove them (compared by inode).
TEST_F(DraKubelet, ASocketTakenOverByANewerInstanceIsNeitherServedOverNorRemoved) {
  KubeletPluginOptions k;
  k.plugins_dir = tmp / "plugins";
  k.registry_dir = tmp / "registry";
  k.watch_interval = std::chrono::milliseconds(20);
  KubeletPlugin newer(k, *preparer);
  ASSERT_TRUE(newer.start());
  const std::uint64_t dra = inode(newer.dra_socket()), registration = inode(newer.registration_socket());
  ASSERT_NE(dra, 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // many turns of the old watcher
  EXPECT_EQ(inode(newer.dra_socket()), dra) << "the old instance served over the newer one's socket";
  EXPECT_EQ(inode(newer.registration_socket()), registration);
  plugin->stop();
  plugin.reset();
  EXPECT_EQ(inode(newer.dra_socket()), dra) << "the old instance removed the newer one's socket";
  EXPECT_EQ(inode(newer.registration_socket()), registration);
  FakeKubelet kubelet;
  EXPECT_TRUE(kubelet.discover(newer.registration_socket()).ok()) << "the newer instance still serves";
  newer.stop();
  EXPECT_EQ(inode(k.plugins_dir + "/gpuslice.io/dra.sock"), 0u) << "its own sockets go with it";
}

// One NodePrepareResources call that names one uid under two claim names prepares neither.
TEST_F(DraKubelet, OneUidUnderTwoNamesInOneCallGetsNoDevices) {
  add_claims();
  FakeKubelet kubelet;
  ASSERT_TRUE(kubelet.discover(plugin->registration_socket()).ok());
  auto stub = kubelet.dra<V1>();
  V1::PrepareRequest request;
  for (const char* name : {"train-gpu", "someone-elses"}) {
    auto* c = request.add_claims();
    c->set_namespace_("team-a");
    c->set_name(name);
    c->set_uid("uid-1");
  }
  V1::PrepareResponse response;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->NodePrepareResources(&ctx, request, &response).ok());
  const auto& answer = response.claims().at("uid-1");
  EXPECT_EQ(answer.devices_size(), 0);
  EXPECT_NE(answer.error().find("two claim names"), std::string::npos) << answer.error();
}

}  // namespace
}  // namespace gpuslice::node::dra
