#include "node/dra/kubelet_service.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "common/log.h"
#include "config/text_util.h"
#include "dra/v1/api.grpc.pb.h"
#include "dra/v1beta1/api.grpc.pb.h"

namespace gpuslice::node::dra {
namespace {

// The two API versions have the same messages under different packages: one handler for both.
template <class Api>
class DraService final : public Api::DRAPlugin::Service {
 public:
  explicit DraService(ClaimPreparer& preparer) : preparer_(preparer) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const typename Api::NodePrepareResourcesRequest* request,
                                    typename Api::NodePrepareResourcesResponse* out) override {
    if (request->claims_size() > kMaxClaimsPerCall)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "too many claims in one call");
    // One prepare per uid: a uid named twice under different names gets neither's devices.
    std::map<std::string, std::string> names;
    std::set<std::string> conflicting;
    for (const auto& claim : request->claims()) {
      const std::string name = claim.namespace_() + "/" + claim.name();
      if (!names.emplace(claim.uid(), name).second && names[claim.uid()] != name)
        conflicting.insert(claim.uid());
    }
    for (const auto& claim : request->claims()) {
      auto& answer = (*out->mutable_claims())[claim.uid()];
      if (conflicting.count(claim.uid())) {
        answer.clear_devices();
        answer.set_error("claim uid " + config::detail::printable(claim.uid(), 80) +
                         " is named under two claim names in one call");
        continue;
      }
      if (answer.devices_size() > 0) continue;  // named twice under one name: prepared once
      auto prepared = preparer_.prepare({claim.namespace_(), claim.name(), claim.uid()});
      if (!prepared) {
        // Kubelet text is escaped before it reaches the log (the error is already).
        GS_LOG(Error, "NodePrepareResources %s: %s",
               config::detail::printable(claim.namespace_() + "/" + claim.name(), 160).c_str(),
               prepared.error().c_str());
        answer.set_error(prepared.error());
        continue;
      }
      for (const auto& d : *prepared) {
        auto* device = answer.add_devices();
        for (const auto& r : d.requests) device->add_request_names(r);
        device->set_pool_name(d.pool);
        device->set_device_name(d.device);
        for (const auto& id : d.cdi_ids) device->add_cdi_device_ids(id);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const typename Api::NodeUnprepareResourcesRequest* request,
                                      typename Api::NodeUnprepareResourcesResponse* out) override {
    if (request->claims_size() > kMaxClaimsPerCall)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "too many claims in one call");
    for (const auto& claim : request->claims()) {
      auto& answer = (*out->mutable_claims())[claim.uid()];
      if (auto done = preparer_.unprepare(claim.uid()); !done) answer.set_error(done.error());
    }
    return grpc::Status::OK;
  }

 private:
  ClaimPreparer& preparer_;
};

// Our names for the two generated packages.
struct V1 {
  using DRAPlugin = ::k8s::io::kubelet::pkg::apis::dra::v1::DRAPlugin;
  using NodePrepareResourcesRequest = ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse = ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesResponse;
  using NodeUnprepareResourcesRequest = ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesResponse;
};
struct V1beta1 {
  using DRAPlugin = ::k8s::io::kubelet::pkg::apis::dra::v1beta1::DRAPlugin;
  using NodePrepareResourcesRequest =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesResponse;
  using NodeUnprepareResourcesRequest =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodeUnprepareResourcesResponse;
};

std::uint64_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

struct Socket {
  std::string path;
  std::unique_ptr<grpc::Server> server;
  std::uint64_t inode = 0;
};

}  // namespace

struct KubeletPlugin::Impl {
  KubeletPluginOptions options;
  RegistrationStatusBoard board;
  DraService<V1> v1;
  DraService<V1beta1> v1beta1;
  std::unique_ptr<grpc::Service> registration;
  Socket dra, reg;
  std::mutex mutex;
  std::condition_variable cv;
  bool stopping = false;
  std::thread watcher;

  Impl(KubeletPluginOptions o, ClaimPreparer& preparer)
      : options(std::move(o)), v1(preparer), v1beta1(preparer) {}

  // Binds under a hidden name beside the socket's (the kubelet's plugin watcher ignores dot files),
  // then renames it into place: gRPC removes the path it bound when the server shuts down, and that
  // path must never be the public one, which a newer instance may have taken over by then.
  Result<bool> serve(Socket& socket, const std::vector<grpc::Service*>& services) {
    const std::filesystem::path path(socket.path);
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) return make_error(socket.path + ": " + ec.message());
    const std::string bound =
        (path.parent_path() / ("." + path.filename().string() + "." + std::to_string(::getpid()))).string();
    ::unlink(bound.c_str());  // left by an earlier run of this pid
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + bound, grpc::InsecureServerCredentials());
    builder.SetMaxReceiveMessageSize(4 * 1024 * 1024);
    for (auto* s : services) builder.RegisterService(s);
    socket.server = builder.BuildAndStart();
    if (!socket.server) return make_error("cannot serve on " + bound);
    socket.inode = inode_of(bound);
    // Replaces a stale socket of an earlier run in one step.
    if (::rename(bound.c_str(), socket.path.c_str()) != 0) {
      const std::string why = socket.path + ": " + std::strerror(errno);
      shut(socket);
      return make_error(why);
    }
    return true;
  }

  // Stops serving, then removes the socket file only if it is still the one this instance bound
  // (a newer instance may have put its own there).
  void shut(Socket& socket) {
    if (!socket.server) return;
    // Calls in flight get a moment; a stopping daemon exits within a second.
    socket.server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    socket.server->Wait();
    socket.server.reset();
    if (socket.inode != 0 && inode_of(socket.path) == socket.inode) ::unlink(socket.path.c_str());
    socket.inode = 0;
  }

  // The DRA socket first: the kubelet calls it as soon as it has read GetInfo.
  Result<bool> serve_all() {
    if (auto r = serve(dra, {&v1, &v1beta1}); !r) return r;
    if (auto r = serve(reg, {registration.get()}); !r) return r;
    GS_LOG(Info, "DRA driver %s: serving %s, registering through %s", options.driver.c_str(),
           dra.path.c_str(), reg.path.c_str());
    return true;
  }

  // Serves the sockets again when they were removed (a kubelet restart cleans its plugin
  // directories); a socket replaced by another file belongs to a newer instance, which is left alone.
  void watch() {
    std::unique_lock lock(mutex);
    bool yielded = false;
    while (!cv.wait_for(lock, options.watch_interval, [this] { return stopping; })) {
      if (yielded) continue;
      const std::uint64_t d = inode_of(dra.path), r = inode_of(reg.path);
      if (d == dra.inode && r == reg.inode) continue;
      if ((d != 0 && d != dra.inode) || (r != 0 && r != reg.inode)) {
        // Not ours any more: never served over, and (by inode) never removed by shut().
        GS_LOG(Warn, "DRA plugin sockets were replaced by another instance: leaving them to it");
        yielded = true;
        continue;
      }
      GS_LOG(Warn, "DRA plugin sockets were removed (kubelet restart?): serving them again");
      shut(reg);
      shut(dra);
      if (auto r2 = serve_all(); !r2) GS_LOG(Error, "%s", r2.error().c_str());
    }
  }
};

KubeletPlugin::KubeletPlugin(KubeletPluginOptions options, ClaimPreparer& preparer)
    : impl_(std::make_unique<Impl>(std::move(options), preparer)) {
  impl_->dra.path = impl_->options.plugins_dir + "/" + impl_->options.driver + "/dra.sock";
  impl_->reg.path = impl_->options.registry_dir + "/" + impl_->options.driver + "-reg.sock";
  impl_->registration = make_registration_service({impl_->options.driver, impl_->dra.path}, impl_->board);
}

KubeletPlugin::~KubeletPlugin() { stop(); }

Result<bool> KubeletPlugin::start() {
  if (auto r = impl_->serve_all(); !r) {
    impl_->shut(impl_->dra);
    return r;
  }
  impl_->stopping = false;
  impl_->watcher = std::thread([this] { impl_->watch(); });
  return true;
}

void KubeletPlugin::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->watcher.joinable()) impl_->watcher.join();
  // Registration first, so the kubelet stops calling before the service goes.
  impl_->shut(impl_->reg);
  impl_->shut(impl_->dra);
}

std::string KubeletPlugin::dra_socket() const { return impl_->dra.path; }
std::string KubeletPlugin::registration_socket() const { return impl_->reg.path; }
const RegistrationStatusBoard& KubeletPlugin::status() const { return impl_->board; }

}  // namespace gpuslice::node::dra
