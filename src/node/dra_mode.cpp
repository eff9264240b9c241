#include "node/dra_mode.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "config/default_paths.h"
#include "config/settings.h"
#include "node/dra/api_client.h"
#include "node/dra/claim_attribution.h"
#include "node/dra/claim_preparer.h"
#include "node/dra/claim_reader.h"
#include "node/dra/kubelet_service.h"
#include "node/dra/slice_publisher.h"
#include "node/host/host_layout.h"
#include "node/node_view/collector.h"
#include "node/startup/run_mode.h"

namespace gpuslice::node {
namespace {

std::vector<Flag> dra_flags(DraModeOptions& out) {
  return joined({
      {{"root", "DIR", "GPUSLICE_NODE_ROOT", kDefaultRoot, "host directory of per-claim state",
        set_text(out.root)}},
      api_flags(out.api, "file holding the API's bearer token"),
      {{"nvml-library", "PATH", "GPUSLICE_NVML_LIBRARY", "libnvidia-ml.so.1", "NVML to dlopen",
        set_text(out.nvml_library)},
       {"fake-gpus", "NxSIZE", nullptr, nullptr, "no NVML: N identical GPUs of SIZE memory (demos, tests)",
        set_text(out.fake_gpus)},
       {"scan-interval", "DURATION", nullptr, "1s", "how often GPUs and state are read",
        set_duration(out.scan_interval)},
       {"node-name", "NAME", "NODE_NAME", nullptr,
        "this node's name: the ResourceSlice's node and pool (required)", set_text(out.node_name)}},
      mps_flags(out.mps),
      {{"driver-name", "NAME", nullptr, "gpuslice.io", "DRA driver name (DeviceClass selectors name it)",
        set_text(out.driver)},
       {"plugins-dir", "DIR", nullptr, "/var/lib/kubelet/plugins",
        "where the DRA socket is served (<dir>/<driver>/dra.sock)", set_text(out.plugins_dir)},
       {"registry-dir", "DIR", nullptr, "/var/lib/kubelet/plugins_registry",
        "the kubelet's plugin registration directory", set_text(out.registry_dir)},
       {"cdi-dir", "DIR", nullptr, "/var/run/cdi", "where CDI specs of prepared claims are written",
        set_text(out.cdi_dir)},
       {"dev-root", "DIR", nullptr, "/dev", "where /dev/nvidia* are found on the host",
        set_text(out.dev_root)},
       {"api-server", "URL", nullptr, nullptr,
        "Kubernetes API server (default: in-cluster, KUBERNETES_SERVICE_HOST)", set_text(out.api_server)},
       {"api-token-file", "FILE", nullptr, "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "service-account token for the API server (read again for every request)",
        set_text(out.api_token_file)},
       {"api-ca-file", "FILE", nullptr, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        "CA bundle the API server's certificate is checked against", set_text(out.api_ca_file)},
       {"api-timeout", "DURATION", nullptr, "10s", "deadline of one API request",
        set_duration(out.api_timeout)},
       {"no-publish", nullptr, nullptr, nullptr, "do not publish the ResourceSlices (another process does)",
        set_switch(out.publish, false)},
       {"no-partitionable-devices", nullptr, nullptr, nullptr,
        "publish only the shared gpu-N devices: no whole-GPU gpu-N-whole devices, no counters (where the "
        "scheduler lacks DRAPartitionableDevices; an API server that drops the fields is noticed anyway)",
        set_switch(out.partitionable, false)},
       {"dropped-capacity", "POLICY", "GPUSLICE_DRA_DROPPED_CAPACITY", "refuse",
        "a claim given a GPU without consumed capacity (the API server dropped its capacity request: "
        "DRAConsumableCapacity off) is refused, prepared with the whole GPU (whole), or with this memory "
        "limit (a size, e.g. 4Gi); a claim's own memory.limit applies in every case",
        [&out](const std::string& v) -> std::optional<std::string> {
          if (auto p = dra::parse_dropped_capacity(v); !p) return p.error();
          out.dropped_capacity = v;
          return std::nullopt;
        }},
       {"priority-high-namespaces", "NS[,NS...]", "GPUSLICE_DRA_PRIORITY_HIGH_NAMESPACES", "",
        "namespaces whose claims may ask for priority high (empty: none; elsewhere such a claim is "
        "refused at prepare)",
        set_namespace_list(out.priority_high_namespaces)},
       {"lease-namespace", "NAMESPACE", "POD_NAMESPACE", "gpuslice-system",
        "namespace of the Lease that keeps two daemons of one node from both publishing",
        set_text(out.lease_namespace)},
       {"lease-duration", "DURATION", nullptr, "15s",
        "how long the Lease holds without renewal (another daemon of the node waits this long)",
        set_duration(out.lease_duration)},
       {"identity", "NAME", "POD_NAME", nullptr, "holder identity in the Lease (default host name and pid)",
        set_text(out.identity)},
       log_level_flag(out.log_level)},
  });
}

const char* const kDraHead = "usage: gpuslice-node dra [flags]\n";

}  // namespace

ParseOutcome parse_dra_options(const std::vector<std::string>& args, const EnvLookup& env,
                               DraModeOptions& out) {
  ParseOutcome outcome = parse_mode_flags(args, env, dra_flags(out), kDraHead);
  if (!outcome.message.empty()) return outcome;
  if (out.node_name.empty()) return {false, "--node-name (or NODE_NAME) is required"};
  take_api_token(env, out.api.token);
  return outcome;
}

std::string usage_dra() { return mode_usage(kDraHead, dra_flags); }

namespace dra {

// From SIGTERM to the end of the driver's stop (sockets, Lease, publisher), at most: with the HTTP
// server's stop the process exits within a second (issue 44).
constexpr std::chrono::milliseconds kStopBound{950};
// What a kubelet call in flight is given before its API request is cut off (the sockets' own grace).
constexpr std::chrono::milliseconds kPrepareGrace{300};

int run_dra_mode(const std::vector<std::string>& args, const EnvLookup& env) {
  DraModeOptions options;
  if (auto code = begin_mode(parse_dra_options(args, env, options), "gpuslice-node dra", options.log_level))
    return *code;
  auto opened = open_gpus(options.nvml_library, options.fake_gpus);
  if (!opened) {
    // A malformed --fake-gpus is a usage error; NVML that cannot be opened is not.
    if (!options.fake_gpus.empty()) {
      std::fprintf(stderr, "gpuslice-node dra: %s\n", opened.error().c_str());
      return 2;
    }
    GS_LOG(Error, "%s", opened.error().c_str());
    return 1;
  }
  std::unique_ptr<GpuSource> source = std::move(opened).value();
  auto first = source->probe();
  if (!first) {
    GS_LOG(Error, "NVML: %s", first.error().c_str());
    return 1;
  }

  ApiServerOptions api_options = in_cluster_options(env);
  if (!options.api_server.empty()) api_options.url = options.api_server;
  api_options.token_file = options.api_token_file;
  api_options.ca_file = options.api_server.rfind("http://", 0) == 0 ? std::string() : options.api_ca_file;
  api_options.timeout = options.api_timeout;
  api_options.driver = options.driver;
  ApiClient api(api_options);

  PreparerOptions prep;
  prep.root = options.root;
  prep.cdi_dir = options.cdi_dir;
  prep.dev_root = options.dev_root;
  prep.node = {options.driver, options.node_name, *first, *parse_dropped_capacity(options.dropped_capacity)};
  prep.priority_high_namespaces = options.priority_high_namespaces;
  std::unique_ptr<mps::ManagerThread> mps_manager =
      start_mps(options.mps, options.nvml_library, options.fake_gpus, prep.mps_pipe_dir);
  ClaimPreparer preparer(prep, api);
  if (auto r = preparer.recover(); !r) {
    GS_LOG(Error, "DRA checkpoint: %s", r.error().c_str());
    return 1;
  }

  KubeletPluginOptions plugin_options;
  plugin_options.driver = options.driver;
  plugin_options.plugins_dir = options.plugins_dir;
  plugin_options.registry_dir = options.registry_dir;
  KubeletPlugin plugin(plugin_options, preparer);
  if (auto r = plugin.start(); !r) {
    GS_LOG(Error, "%s", r.error().c_str());
    return 1;
  }

  std::unique_ptr<SlicePublisher> publisher;
  if (options.publish) {
    PublisherOptions po;
    po.slice.driver = options.driver;
    po.slice.node_name = options.node_name;
    po.slice.partitionable = options.partitionable;
    po.lease_namespace = options.lease_namespace;
    po.identity = options.identity;
    po.lease_duration = std::max(std::chrono::seconds(3),
                                 std::chrono::duration_cast<std::chrono::seconds>(options.lease_duration));
    if (po.identity.empty()) {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      po.identity = std::string(host) + "-" + std::to_string(::getpid());
    }
    publisher = std::make_unique<SlicePublisher>(po, api);
    publisher->set_gpus(*first);
    publisher->start();
  }

  SystemClock clock;
  HostLayout layout(options.root);
  Collector collector(layout, source.get(), clock);
  collector.set_node_name(options.node_name);
  // Claims are labelled with their namespace, pod and name; their directories are removed by
  // unprepare, never by the collector (grace period 0).
  ClaimAttribution attribution(preparer);
  collector.set_attribution(&attribution, 0);
  collector.set_registration_source([&plugin, &options] {
    return std::vector<PluginRegistration>{plugin.status().snapshot(options.driver)};
  });
  if (mps_manager) collector.set_mps_source([&mps_manager] { return mps_manager->report(); });
  if (publisher) {
    collector.set_extra_metrics_source(
        [&publisher, &options] { return render_publisher_metrics(publisher->status(), options.node_name); });
    collector.set_dra_source([&publisher] { return publisher->status(); });
  }
  collector.refresh();
  options.api.version = GPUSLICE_VERSION;
  ApiServer http(options.api, layout, collector);
  if (auto port = http.start(); !port) {
    GS_LOG(Error, "%s", port.error().c_str());
    return 1;
  }

  while (!wait_for_stop(options.scan_interval)) {
    auto view = collector.refresh();
    if (publisher) publisher->set_gpus(view->gpus);
  }
  // The Lease is given up first, on a thread and a connection of its own, so that the next instance
  // publishes at once; meanwhile the kubelet's sockets stop (no new prepare starts) and are removed
  // where still ours. Each step is bounded, the whole within a second however slow the API server.
  GS_LOG(Info, "stopping");
  const auto stopping = std::chrono::steady_clock::now();
  // Each step of the driver's stop is bounded, but a connect the API server never answers (the
  // loop's, begun before the signal) cannot be interrupted: past kStopBound the process ends without
  // the steps left. The MPS control daemon's quit (--mps) comes after and takes what it takes.
  std::mutex stop_mutex;
  std::condition_variable stop_cv;
  bool driver_stopped = false;
  std::thread watchdog([&] {
    std::unique_lock lock(stop_mutex);
    if (stop_cv.wait_for(lock, kStopBound, [&] { return driver_stopped; })) return;
    GS_LOG(Warn, "the DRA driver did not stop within %lld ms: exiting (status 1) without the steps left",
           static_cast<long long>(kStopBound.count()));
    ::_exit(1);  // not a clean stop: say so to whatever restarts it
  });
  if (publisher) publisher->begin_stop();
  // A prepare in flight gets the sockets' grace; then its API request is cut off, so that its handler
  // returns and the gRPC server's shutdown, which waits for it, ends and the sockets are removed.
  bool sockets_closed = false;
  std::thread cut_off([&] {
    std::unique_lock lock(stop_mutex);
    if (!stop_cv.wait_for(lock, kPrepareGrace, [&] { return sockets_closed; })) api.set_cancelled(true);
  });
  plugin.stop();
  {
    std::lock_guard lock(stop_mutex);
    sockets_closed = true;
  }
  stop_cv.notify_all();
  cut_off.join();
  if (publisher) publisher->stop();
  collector.set_registration_source({});
  collector.set_extra_metrics_source({});
  collector.set_dra_source({});
  collector.set_mps_source({});
  {
    std::lock_guard lock(stop_mutex);
    driver_stopped = true;
  }
  stop_cv.notify_all();
  watchdog.join();
  if (mps_manager) mps_manager->stop();
  http.stop();
  GS_LOG(Info, "stopped in %lld ms",
         static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::steady_clock::now() - stopping)
                                    .count()));
  return 0;
}

}  // namespace dra
}  // namespace gpuslice::node
