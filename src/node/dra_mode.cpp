#include "node/dra_mode.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"
#include "common/log.h"
#include "config/settings.h"
#include "node/api/http_api.h"
#include "node/dra/api_client.h"
#include "node/dra/claim_attribution.h"
#include "node/dra/claim_preparer.h"
#include "node/dra/kubelet_service.h"
#include "node/dra/slice_publisher.h"
#include "node/mps/manager_thread.h"
#include "node/node_view/collector.h"
#include "node/startup/flag_table.h"

namespace gpuslice::node::dra {
namespace {

int g_stop_pipe[2] = {-1, -1};

void note_stop(int) {
  const char byte = 1;
  const int saved = errno;
  (void)!::write(g_stop_pipe[1], &byte, 1);
  errno = saved;
}

Result<std::vector<GpuInfo>> fixed_gpus(const std::string& spec) {
  const std::size_t x = spec.find('x');
  const int count = x == std::string::npos ? 0 : std::atoi(spec.substr(0, x).c_str());
  auto size =
      x == std::string::npos ? Result<std::uint64_t>(make_error("")) : config::parse_size(spec.substr(x + 1));
  if (count <= 0 || count > 64 || !size) return make_error("--fake-gpus: expected NxSIZE, e.g. 2x16Gi");
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = g.minor = static_cast<unsigned>(i);
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-fa4e0000-0000-4000-8000-%012d", i);
    g.uuid = uuid;
    g.name = "gpuslice fake GPU";
    g.memory_total_bytes = *size;
    gpus.push_back(g);
  }
  return gpus;
}

}  // namespace

int run_dra_mode(const std::vector<std::string>& args, const std::function<const char*(const char*)>& env) {
  DraModeOptions options;
  const ParseOutcome parsed = parse_dra_options(args, env, options);
  if (parsed.help) {
    std::fputs(parsed.message.c_str(), stdout);
    return 0;
  }
  if (!parsed.message.empty()) {
    std::fprintf(stderr, "gpuslice-node dra: %s\n", parsed.message.c_str());
    return 2;
  }
  log::set_level(log::Level::Info);
  if (auto level = config::parse_log_level(options.log_level)) log::set_level(*level);
  // SIGTERM and SIGINT through a handler and a pipe, not a blocked mask: threads started before
  // this point (gRPC's, at static initialisation) do not block them, and one of them would take the
  // signal's default action and kill the daemon before it lets go of its sockets and Lease.
  if (::pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    GS_LOG(Error, "pipe2: %s", std::strerror(errno));
    return 1;
  }
  struct sigaction on_stop {};
  on_stop.sa_handler = note_stop;
  sigemptyset(&on_stop.sa_mask);
  on_stop.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &on_stop, nullptr);
  ::sigaction(SIGINT, &on_stop, nullptr);

  std::unique_ptr<GpuSource> source;
  if (options.fake_gpus.empty()) {
    auto opened = open_nvml(options.nvml_library);
    if (!opened) {
      GS_LOG(Error, "%s", opened.error().c_str());
      return 1;
    }
    source = std::move(opened).value();
  } else {
    auto gpus = fixed_gpus(options.fake_gpus);
    if (!gpus) {
      std::fprintf(stderr, "gpuslice-node dra: %s\n", gpus.error().c_str());
      return 2;
    }
    source = std::make_unique<StaticGpuSource>(*gpus);
  }
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
  std::unique_ptr<mps::ManagerThread> mps_manager;
  if (options.mps.enabled) {
    auto mps_options = mps::node_manager_options(options.mps.root, options.mps.binary,
                                                 options.fake_gpus.empty() ? options.nvml_library : "");
    prep.mps_pipe_dir = mps_options.paths.pipe_dir();
    mps_manager = std::make_unique<mps::ManagerThread>(std::move(mps_options));
  }
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
  }
  collector.refresh();
  options.api.version = GPUSLICE_VERSION;
  ApiServer http(options.api, layout, collector);
  if (auto port = http.start(); !port) {
    GS_LOG(Error, "%s", port.error().c_str());
    return 1;
  }

  while (true) {
    pollfd stop{g_stop_pipe[0], POLLIN, 0};
    const int ready = ::poll(&stop, 1, static_cast<int>(options.scan_interval.count()));
    if (ready > 0 && (stop.revents & POLLIN)) break;
    auto view = collector.refresh();
    if (publisher) publisher->set_gpus(view->gpus);
  }
  // The kubelet's sockets first (no new prepare starts), then the Lease is given up so that the next
  // instance publishes at once; each step is bounded, the whole within about a second.
  GS_LOG(Info, "stopping");
  plugin.stop();
  if (publisher) publisher->stop();
  collector.set_registration_source({});
  collector.set_extra_metrics_source({});
  collector.set_mps_source({});
  if (mps_manager) mps_manager->stop();
  http.stop();
  return 0;
}

}  // namespace gpuslice::node::dra
