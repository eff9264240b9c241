#include "node/kubelet/device_plugin.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"

namespace gpuslice::node {
namespace {

namespace api = ::v1beta1;

// Health per GPU shared by all endpoints; a generation counter wakes ListAndWatch streams.
class HealthBoard {
 public:
  explicit HealthBoard(std::size_t gpus) : healthy_(gpus, true) {}

  bool set(const std::vector<bool>& healthy) {
    std::lock_guard lock(mutex_);
    if (healthy == healthy_) return false;
    healthy_ = healthy;
    ++generation_;
    changed_.notify_all();
    return true;
  }
  std::vector<bool> get(std::uint64_t& generation) const {
    std::lock_guard lock(mutex_);
    generation = generation_;
    return healthy_;
  }
  // Waits until the generation moves past `seen`, `stop` is set or `timeout` passes.
  void wait(std::uint64_t seen, const std::atomic<bool>& stop, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return generation_ != seen || stop.load(); });
  }
  void wake() {
    std::lock_guard lock(mutex_);
    changed_.notify_all();
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> healthy_;
  std::uint64_t generation_ = 0;
};

class PluginService final : public api::DevicePlugin::Service {
 public:
  PluginService(ResourceKind kind, std::string resource_name, const DeviceCatalog& catalog,
                const HostLayout& layout, HealthBoard& health)
      : kind_(kind),
        resource_name_(std::move(resource_name)),
        catalog_(catalog),
        layout_(layout),
        health_(health) {}

  void stop() {
    stopping_ = true;
    health_.wake();
  }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const api::Empty*,
                                      api::DevicePluginOptions* out) override {
    out->set_pre_start_required(false);
    out->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const api::Empty*,
                            grpc::ServerWriter<api::ListAndWatchResponse>* writer) override {
    std::uint64_t sent_generation = ~0ULL;
    while (!stopping_ && !context->IsCancelled()) {
      std::uint64_t generation = 0;
      std::vector<bool> healthy = health_.get(generation);
      if (generation != sent_generation) {
        if (!writer->Write(device_list(healthy))) break;  // the kubelet went away
        sent_generation = generation;
      }
      // Bounded wait: a cancelled stream has no condition variable to wake us.
      health_.wait(sent_generation, stopping_, std::chrono::milliseconds(200));
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*, const api::PreferredAllocationRequest* request,
                                      api::PreferredAllocationResponse* out) override {
    for (const auto& req : request->container_requests()) {
      if (req.allocation_size() < 0) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "negative allocation_size");
      }
      std::vector<std::string> available(req.available_deviceids().begin(), req.available_deviceids().end());
      std::vector<std::string> must(req.must_include_deviceids().begin(), req.must_include_deviceids().end());
      auto chosen =
          catalog_.preferred(kind_, available, must, static_cast<std::size_t>(req.allocation_size()));
      auto* resp = out->add_container_responses();
      for (auto& id : chosen) resp->add_deviceids(std::move(id));
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const api::AllocateRequest* request,
                        api::AllocateResponse* out) override {
    for (const auto& req : request->container_requests()) {
      std::vector<std::string> ids(req.devices_ids().begin(), req.devices_ids().end());
      auto plan = plan_allocation(kind_, ids, catalog_, layout_, resource_name_);
      if (!plan) {
        GS_LOG(Error, "Allocate %s: %s", resource_suffix(kind_), plan.error().c_str());
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, plan.error());
      }
      auto* resp = out->add_container_responses();
      for (const auto& [key, value] : plan->envs) (*resp->mutable_envs())[key] = value;
      for (const auto& m : plan->mounts) {
        auto* mount = resp->add_mounts();
        mount->set_container_path(m.container_path);
        mount->set_host_path(m.host_path);
        mount->set_read_only(m.read_only);
      }
      for (const auto& d : plan->devices) {
        auto* dev = resp->add_devices();
        dev->set_container_path(d.container_path);
        dev->set_host_path(d.host_path);
        dev->set_permissions(d.permissions);
      }
      for (const auto& name : plan->cdi_devices) resp->add_cdi_devices()->set_name(name);
      GS_LOG(Info, "Allocate %s: %zu device(s)%s%s", resource_suffix(kind_), ids.size(),
             plan->container_id.empty() ? "" : ", container directory ", plan->container_id.c_str());
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const api::PreStartContainerRequest*,
                                 api::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

  api::ListAndWatchResponse device_list(const std::vector<bool>& healthy) const {
    api::ListAndWatchResponse response;
    for (std::size_t g = 0; g < catalog_.gpus().size(); ++g) {
      const unsigned n = catalog_.units(kind_, g);
      const bool ok = g < healthy.size() ? healthy[g] : true;
      for (unsigned k = 0; k < n; ++k) {
        auto* dev = response.add_devices();
        dev->set_id(catalog_.id(kind_, g, k));
        dev->set_health(ok ? kHealthy : kUnhealthy);
      }
    }
    return response;
  }

 private:
  ResourceKind kind_;
  std::string resource_name_;
  const DeviceCatalog& catalog_;
  const HostLayout& layout_;
  HealthBoard& health_;
  std::atomic<bool> stopping_{false};
};

struct Endpoint {
  ResourceKind kind;
  std::string resource_name;
  std::string socket_path;
  std::unique_ptr<PluginService> service;
  std::unique_ptr<grpc::Server> server;
  std::uint64_t socket_inode = 0;
  bool registered = false;
  unsigned failed_registrations = 0;
  unsigned registrations = 0;
  RegistrationState state = RegistrationState::WaitingForKubelet;
  bool state_published = false;  // the watcher has looked at least once
  std::uint64_t unit_bytes = 0;  // vram only
};

std::uint64_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

}  // namespace

struct DevicePluginManager::Impl {
  PluginOptions options;
  HostLayout layout;
  DeviceCatalog catalog;
  HealthBoard health;
  std::vector<Endpoint> endpoints;
  std::vector<Endpoint> refused;  // not served (RegistrationState::Refused), reported only
  std::atomic<unsigned> registrations{0};
  mutable std::mutex status_mutex;
  std::vector<PluginRegistration> published;

  std::mutex watch_mutex;
  std::condition_variable watch_cv;
  bool stopping = false;
  std::thread watcher;

  Impl(PluginOptions o, HostLayout l, std::vector<GpuInfo> inventory)
      : options(std::move(o)),
        layout(std::move(l)),
        catalog(std::move(inventory), options.catalog),
        health(catalog.gpus().size()) {
    std::vector<bool> healthy;
    for (const auto& g : catalog.gpus()) healthy.push_back(g.healthy);
    health.set(healthy);
  }

  std::string kubelet_socket() const { return options.device_plugin_dir + "/" + options.kubelet_socket; }

  Result<bool> serve(Endpoint& ep) {
    ::unlink(ep.socket_path.c_str());  // a stale socket from an earlier run blocks bind(2)
    ep.service = std::make_unique<PluginService>(ep.kind, ep.resource_name, catalog, layout, health);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + ep.socket_path, grpc::InsecureServerCredentials());
    builder.RegisterService(ep.service.get());
    ep.server = builder.BuildAndStart();
    if (!ep.server) {
      ep.service.reset();
      return make_error("cannot serve " + ep.resource_name + " on " + ep.socket_path);
    }
    ep.socket_inode = inode_of(ep.socket_path);
    GS_LOG(Info, "device plugin %s serving on %s", ep.resource_name.c_str(), ep.socket_path.c_str());
    return true;
  }

  void shut(Endpoint& ep) {
    if (!ep.server) return;
    ep.service->stop();
    ep.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    ep.server->Wait();
    ep.server.reset();
    ep.service.reset();
    ::unlink(ep.socket_path.c_str());
    ep.registered = false;
  }

  bool register_with_kubelet(Endpoint& ep) {
    auto channel = grpc::CreateChannel("unix://" + kubelet_socket(), grpc::InsecureChannelCredentials());
    auto stub = api::Registration::NewStub(channel);
    api::RegisterRequest request;
    request.set_version(kDevicePluginVersion);
    request.set_endpoint(ep.socket_path.substr(ep.socket_path.rfind('/') + 1));
    request.set_resource_name(ep.resource_name);
    request.mutable_options()->set_pre_start_required(false);
    request.mutable_options()->set_get_preferred_allocation_available(true);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + options.register_timeout);
    api::Empty reply;
    grpc::Status status = stub->Register(&context, request, &reply);
    if (!status.ok()) {
      // Retried every watch interval: say it once, then once a minute or so.
      if (ep.failed_registrations++ % 60 == 0) {
        GS_LOG(Warn, "registering %s with the kubelet failed: %s", ep.resource_name.c_str(),
               status.error_message().c_str());
      }
      return false;
    }
    ep.failed_registrations = 0;
    ++registrations;
    if (ep.registrations++ == 0) {
      GS_LOG(Info, "registered %s with the kubelet (endpoint %s)", ep.resource_name.c_str(),
             request.endpoint().c_str());
    } else {
      GS_LOG(Info, "re-registered %s with the kubelet after it restarted (endpoint %s, registration %u)",
             ep.resource_name.c_str(), request.endpoint().c_str(), ep.registrations);
    }
    return true;
  }

  // Logs a change of `ep`'s state and publishes every endpoint's state.
  void publish_state(Endpoint& ep, RegistrationState state) {
    if ((state != ep.state || !ep.state_published) && state == RegistrationState::WaitingForKubelet) {
      GS_LOG(Warn, "%s: waiting for the kubelet (%s does not exist)", ep.resource_name.c_str(),
             kubelet_socket().c_str());
    }
    ep.state = state;
    ep.state_published = true;
    std::lock_guard lock(status_mutex);
    publish_locked();
  }

  void publish_locked() {
    published.clear();
    for (const auto* list : {&endpoints, &refused}) {
      for (const auto& e : *list)
        published.push_back({e.resource_name, e.state, e.registrations, e.unit_bytes});
    }
  }

  // One pass of the watcher: serve again what the kubelet deleted, register what is unregistered.
  void reconcile(std::uint64_t& kubelet_inode) {
    std::uint64_t inode = inode_of(kubelet_socket());
    if (inode == 0) {
      for (auto& ep : endpoints) {
        ep.registered = false;
        publish_state(ep, RegistrationState::WaitingForKubelet);
      }
      kubelet_inode = 0;
      return;
    }
    const bool kubelet_restarted = inode != kubelet_inode;
    for (auto& ep : endpoints) {
      if (inode_of(ep.socket_path) != ep.socket_inode || !ep.server) {
        // The kubelet removes every plugin socket when it starts.
        shut(ep);
        if (auto r = serve(ep); !r) {
          GS_LOG(Error, "%s", r.error().c_str());
          publish_state(ep, RegistrationState::Registering);
          continue;
        }
      }
      if (kubelet_restarted) ep.registered = false;
      if (!ep.registered) ep.registered = register_with_kubelet(ep);
      publish_state(ep, ep.registered ? RegistrationState::Registered : RegistrationState::Registering);
    }
    kubelet_inode = inode;
  }

  void watch() {
    std::uint64_t kubelet_inode = 0;
    std::unique_lock lock(watch_mutex);
    while (!stopping) {
      lock.unlock();
      reconcile(kubelet_inode);
      lock.lock();
      watch_cv.wait_for(lock, options.watch_interval, [this] { return stopping; });
    }
  }
};

DevicePluginManager::DevicePluginManager(PluginOptions options, HostLayout layout,
                                         std::vector<GpuInfo> inventory)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(layout), std::move(inventory))) {}

DevicePluginManager::~DevicePluginManager() { stop(); }

Result<bool> DevicePluginManager::start() {
  Impl& m = *impl_;
  for (ResourceKind kind : m.options.resources) {
    Endpoint ep;
    ep.kind = kind;
    ep.resource_name = m.options.resource_domain + "/" + resource_suffix(kind);
    ep.socket_path =
        m.options.device_plugin_dir + "/" + m.options.socket_prefix + "-" + resource_suffix(kind) + ".sock";
    if (kind == ResourceKind::Vram) {
      // The kubelet reads the whole list in one message; a too fine unit would make every update fail.
      ep.unit_bytes = m.catalog.options().vram_unit;
      const std::size_t bytes = m.catalog.list_bytes(kind);
      if (bytes > kMaxDeviceListBytes) {
        GS_LOG(Error,
               "not advertising %s: %zu devices of %llu bytes make a %zu-byte list, over the kubelet's "
               "4 MiB message limit; use --vram-unit=auto or a coarser unit",
               ep.resource_name.c_str(), m.catalog.ids(kind).size(),
               static_cast<unsigned long long>(ep.unit_bytes), bytes);
        ep.state = RegistrationState::Refused;
        m.refused.push_back(std::move(ep));
        continue;
      }
      GS_LOG(Info, "%s: one device per %llu MiB", ep.resource_name.c_str(),
             static_cast<unsigned long long>(ep.unit_bytes >> 20));
    }
    if (auto r = m.serve(ep); !r) {
      for (auto& started : m.endpoints) m.shut(started);
      m.endpoints.clear();
      return r;
    }
    m.endpoints.push_back(std::move(ep));
  }
  {
    std::lock_guard lock(m.status_mutex);
    m.publish_locked();
  }
  m.stopping = false;
  m.watcher = std::thread([&m] { m.watch(); });
  return true;
}

void DevicePluginManager::stop() {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.watch_mutex);
    m.stopping = true;
  }
  m.watch_cv.notify_all();
  if (m.watcher.joinable()) m.watcher.join();
  for (auto& ep : m.endpoints) m.shut(ep);
}

void DevicePluginManager::update_health(const std::vector<GpuInfo>& gpus) {
  Impl& m = *impl_;
  std::vector<bool> healthy;
  for (const auto& known : m.catalog.gpus()) {
    bool ok = false;  // a GPU NVML no longer lists is unhealthy
    for (const auto& g : gpus) {
      if (g.uuid == known.uuid) ok = g.healthy;
    }
    healthy.push_back(ok);
  }
  if (m.health.set(healthy)) {
    for (std::size_t i = 0; i < healthy.size(); ++i) {
      if (healthy[i]) {
        GS_LOG(Info, "GPU %s is healthy", m.catalog.gpus()[i].uuid.c_str());
      } else {
        GS_LOG(Warn, "GPU %s is unhealthy", m.catalog.gpus()[i].uuid.c_str());
      }
    }
  }
}

std::vector<std::string> DevicePluginManager::resource_names() const {
  std::vector<std::string> names;
  for (const auto& ep : impl_->endpoints) names.push_back(ep.resource_name);
  return names;
}

unsigned DevicePluginManager::registrations() const { return impl_->registrations.load(); }

std::vector<PluginRegistration> DevicePluginManager::registration() const {
  std::lock_guard lock(impl_->status_mutex);
  return impl_->published;
}

}  // namespace gpuslice::node
