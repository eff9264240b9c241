#include "node/serve_mode.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "config/default_paths.h"
#include "config/settings.h"
#include "node/channel/channel_gc.h"
#include "node/channel/priority_assignment.h"
#include "node/channel/writer_indexer.h"
#include "node/dra/api_client.h"
#include "node/host/host_layout.h"
#include "node/kubelet/kubelet_paths.h"
#include "node/kubelet/podresources.h"
#include "node/node_view/collector.h"
#include "node/startup/run_mode.h"

namespace gpuslice::node {
namespace {

Apply set_resources(std::vector<ResourceKind>& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    std::vector<ResourceKind> kinds;
    std::stringstream list(v);
    std::string item;
    while (std::getline(list, item, ',')) {
      auto kind = parse_resource_kind(item);
      if (!kind) return "unknown resource '" + item + "' (expected gpu, vram, cores)";
      kinds.push_back(*kind);
    }
    if (kinds.empty()) return "no resources given";
    target = std::move(kinds);
    return std::nullopt;
  };
}

Apply set_size(std::uint64_t& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    auto size = config::parse_size(v, config::SizeDialect::Native);
    if (!size) return size.error();
    if (*size == 0) return "must be positive";
    target = *size;
    return std::nullopt;
  };
}

Apply set_vram_unit(std::uint64_t& target) {
  return [&target, size = set_size(target)](const std::string& v) -> std::optional<std::string> {
    if (v == "auto") {
      target = kAutoVramUnit;
      return std::nullopt;
    }
    return size(v);
  };
}

Apply set_placement(Placement& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    if (v == "binpack") {
      target = Placement::Binpack;
    } else if (v == "spread") {
      target = Placement::Spread;
    } else {
      return "expected binpack or spread";
    }
    return std::nullopt;
  };
}

Apply set_device_list_strategy(bool& cdi) {
  return [&cdi](const std::string& v) -> std::optional<std::string> {
    if (v != "envvar" && v != "cdi") return "expected envvar or cdi";
    cdi = v == "cdi";
    return std::nullopt;
  };
}

// vendor.com/class, as the CDI specification writes a kind.
Apply set_cdi_kind(std::string& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    const std::size_t slash = v.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == v.size() ||
        v.find('/', slash + 1) != std::string::npos ||
        v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/") !=
            std::string::npos) {
      return "expected a CDI kind like nvidia.com/gpu";
    }
    target = v;
    return std::nullopt;
  };
}

std::vector<Flag> serve_flags(ServeOptions& out) {
  return joined({
      {{"root", "DIR", "GPUSLICE_NODE_ROOT", kDefaultRoot, "host directory of per-container state",
        set_text(out.root)}},
      api_flags(out.api,
                "file holding the API's bearer token, read again when it changes (else the token itself "
                "from GPUSLICE_NODE_TOKEN; with neither, the API answers 401)"),
      {{"metrics-auth", nullptr, nullptr, nullptr, "require the token on /metrics too",
        set_switch(out.api.metrics_require_token, true)}},
      limit_flags(out.api.limits, {"http-threads", "http-connections-per-client", "http-request-timeout"},
                  "128"),
      {{"nvml-library", "PATH", "GPUSLICE_NVML_LIBRARY", "libnvidia-ml.so.1", "NVML to dlopen",
        set_text(out.nvml_library)},
       {"fake-gpus", "NxSIZE", nullptr, nullptr,
        "no NVML: N identical GPUs of SIZE memory, e.g. 2x16Gi (demos)", set_text(out.fake_gpus)},
       {"allow-no-gpu", nullptr, nullptr, nullptr, "keep serving /metrics when NVML cannot be loaded",
        set_switch(out.allow_no_gpu, true)},
       {"scan-interval", "DURATION", nullptr, "1s", "how often state and GPUs are read",
        set_duration(out.scan_interval)},
       {"no-device-plugin", nullptr, nullptr, nullptr, "do not serve the kubelet device plugin",
        set_switch(out.device_plugin, false)},
       {"device-plugin-dir", "DIR", nullptr, kKubeletDevicePluginDir, "kubelet device plugin directory",
        set_text(out.plugin.device_plugin_dir)},
       {"resources", "LIST", nullptr, "gpu,vram,cores", "resources to advertise, of gpu,vram,cores",
        set_resources(out.plugin.resources)},
       {"resource-domain", "NAME", nullptr, "gpuslice.io", "resource name prefix",
        set_text(out.plugin.resource_domain)},
       {"replicas", "N", nullptr, "4", "gpuslice.io/gpu slots per GPU",
        set_number(out.plugin.catalog.replicas, 1, 9999)},
       {"vram-unit", "SIZE|auto", nullptr, "auto",
        "memory per gpuslice.io/vram device; auto: the smallest power-of-two MiB whose device list fits "
        "the kubelet's message limit (1Mi up to about 150 GiB of VRAM per node)",
        set_vram_unit(out.plugin.catalog.vram_unit)},
       {"placement", "binpack|spread", nullptr, "binpack", "how GetPreferredAllocation picks GPUs",
        set_placement(out.plugin.catalog.placement)},
       {"dev-root", "DIR", nullptr, "/dev", "where /dev/nvidia* are found on the host",
        set_text(out.plugin.catalog.dev_root)},
       {"host-jobs", nullptr, nullptr, nullptr,
        "make ROOT/jobs (mode 1777) and report the jobs there: `gpuslice run --shared-dir ROOT/jobs/NAME`",
        set_switch(out.host_jobs, true)},
       {"index-node-dir", "DIR", nullptr, "",
        "keep DIR/.writers, the writer index of a node directory users share on this host (as `gpuslice-node "
        "index`, on a thread; empty: none)",
        set_text(out.index_node_dir)},
       {"kubelet-pods-dir", "DIR", nullptr, kKubeletPodsDir,
        "kubelet pods directory, for webhook-injected pods (empty to disable)",
        set_text(out.kubelet_pods_dir)},
       {"device-list-strategy", "envvar|cdi", nullptr, "envvar",
        "how GPUs reach a container: NVIDIA_VISIBLE_DEVICES and device nodes (NVIDIA runtime), or CDI "
        "device names <cdi-kind>=<GPU UUID> (CDI-enabled runtimes)",
        set_device_list_strategy(out.plugin.catalog.cdi)},
       {"cdi-kind", "KIND", nullptr, "nvidia.com/gpu", "CDI kind of the GPUs",
        set_cdi_kind(out.plugin.catalog.cdi_kind)},
       {"node-name", "NAME", "NODE_NAME", nullptr,
        "node label of metrics and API answers (default the host name)", set_text(out.node_name)}},
      mps_flags(out.mps),
      {{"podresources-socket", "PATH", nullptr, kDefaultPodResourcesSocket,
        "kubelet PodResources API, to label containers with their pod (empty to disable)",
        set_text(out.podresources_socket)},
       {"gc-grace-period", "DURATION", nullptr, "5m",
        "remove a container directory once the kubelet has not listed its allocation for this long and no "
        "process uses it (0: never)",
        set_duration_or_zero(out.gc_grace_period)},
       // The webhook's priority policy, applied again to the pods the kubelet lists (give both the
       // same values): the level written into each container's node-channel assignment.
       {"priority-high-namespaces", "NS[,NS...]", "GPUSLICE_WEBHOOK_PRIORITY_HIGH_NAMESPACES", "",
        "namespaces whose pods' containers are assigned priority high (as the webhook's flag; empty: none)",
        set_namespace_list(out.priority.high_namespaces)},
       {"priority-classes", "CLASS=LEVEL[,...]", "GPUSLICE_WEBHOOK_PRIORITY_CLASSES", "",
        "PriorityClass names and their level, as the webhook's flag: pods of a class mapped to high are "
        "assigned high (the daemon reads the pod's class from the API server)",
        set_priority_classes(out.priority)},
       log_level_flag(out.log_level)},
  });
}

const char* const kServeHead = "usage: gpuslice-node serve [flags]\n";

// The node name of metrics and API answers: the flag / NODE_NAME, else the host name.
std::string node_name(const std::string& configured) {
  if (!configured.empty()) return configured;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return {};
  return host;
}

// The level each listed pod container's node-channel records are believed at: the webhook's policy
// applied again here (priority_assignment.h). A PriorityClass is learnt from the API server (get
// pods), once per pod for kPriorityClassTtl: it cannot change while the pod lives.
class PodPriorityClasses {
 public:
  explicit PodPriorityClasses(const EnvLookup& env) {
    dra::ApiServerOptions api_options = dra::in_cluster_options(env);
    api_options.timeout = std::chrono::milliseconds(2000);  // the scan loop waits for it
    api_options.retries = 0;
    api_options.user_agent = "gpuslice-node";
    api_server_ = std::make_unique<dra::ApiClient>(api_options);
  }

  Result<std::string> learn(const std::string& ns, const std::string& pod) {
    constexpr std::uint64_t kPriorityClassTtl = 300'000'000'000ULL;
    constexpr std::uint64_t kRetryAfter = 60'000'000'000ULL;
    const std::uint64_t now = realtime_ns();
    const std::string key = ns + "/" + pod;
    if (auto hit = learnt_.find(key); hit != learnt_.end() && hit->second.at_ns + kPriorityClassTtl > now)
      return hit->second.name;
    if (auto failed = failed_at_.find(key); failed != failed_at_.end() && failed->second + kRetryAfter > now)
      return make_error("asked less than 60 s ago");
    auto learnt = [&]() -> Result<std::string> {
      if (!dra::valid_object_name(ns) || !dra::valid_object_name(pod))
        return make_error("not a valid pod name");
      if (api_server_->options().url.empty())
        return make_error("no API server (KUBERNETES_SERVICE_HOST is not set)");
      auto answer = api_server_->request("GET", "/api/v1/namespaces/" + ns + "/pods/" + pod);
      if (!answer) return make_error(answer.error());
      if (answer->status != 200)
        return make_error("GET pod answered " + std::to_string(answer->status) +
                          " (the daemon needs a token and 'get pods')");
      std::string klass;
      const auto& body = answer->body;
      if (body.is_object() && body.contains("spec") && body["spec"].is_object()) {
        const auto& spec = body["spec"];
        if (spec.contains("priorityClassName") && spec["priorityClassName"].is_string())
          klass = spec["priorityClassName"].get<std::string>();
      }
      return klass;
    }();
    if (learnt_.size() > 65536) learnt_.clear();
    if (failed_at_.size() > 65536) failed_at_.clear();
    if (!learnt) {
      if (failed_at_.count(key) == 0)
        GS_LOG(Warn, "priority of pod %s: its PriorityClass cannot be learnt (%s); its level stays as it is",
               key.c_str(), learnt.error().c_str());
      failed_at_[key] = now;
      return learnt;
    }
    failed_at_.erase(key);
    learnt_[key] = {*learnt, now};
    return learnt;
  }

 private:
  struct LearntClass {
    std::string name;
    std::uint64_t at_ns = 0;
  };
  std::unique_ptr<dra::ApiClient> api_server_;
  std::map<std::string, LearntClass> learnt_;       // "<ns>/<pod>"
  std::map<std::string, std::uint64_t> failed_at_;  // "<ns>/<pod>": said once, asked again after 60 s
};

}  // namespace

ParseOutcome parse_serve_options(const std::vector<std::string>& args, const EnvLookup& env,
                                 ServeOptions& out) {
  ParseOutcome outcome = parse_mode_flags(args, env, serve_flags(out), kServeHead);
  if (outcome.message.empty()) take_api_token(env, out.api.token);
  return outcome;
}

std::string usage_serve() { return mode_usage(kServeHead, serve_flags); }

int run_serve_mode(const std::vector<std::string>& args, const EnvLookup& env) {
  ServeOptions options;
  if (auto code =
          begin_mode(parse_serve_options(args, env, options), "gpuslice-node serve", options.log_level))
    return *code;
  options.api.version = GPUSLICE_VERSION;

  std::unique_ptr<GpuSource> gpus;
  auto opened = open_gpus(options.nvml_library, options.fake_gpus);
  if (opened) {
    gpus = std::move(opened).value();
  } else if (options.allow_no_gpu) {
    GS_LOG(Warn, "no GPUs: %s", opened.error().c_str());
  } else {
    GS_LOG(Error, "%s (use --allow-no-gpu to serve /metrics without GPUs)", opened.error().c_str());
    return 1;
  }

  SystemClock clock;
  HostLayout layout(options.root);
  Collector collector(layout, gpus.get(), clock);
  collector.set_kubelet_pods_dir(options.kubelet_pods_dir);
  if (options.host_jobs) {
    // Like /tmp: anyone makes a job directory, nobody replaces another's (the library checks owners).
    const std::string jobs = layout.jobs_dir();
    (void)::mkdir(layout.root().c_str(), 0755);
    if ((::mkdir(jobs.c_str(), 01777) != 0 && errno != EEXIST) || ::chmod(jobs.c_str(), 01777) != 0) {
      GS_LOG(Error, "--host-jobs: cannot make %s: %s", jobs.c_str(), std::strerror(errno));
      return 1;
    }
    collector.set_host_jobs(true);
  }
  collector.set_node_name(node_name(options.node_name));
  std::unique_ptr<PodResourcesClient> podresources;
  if (!options.podresources_socket.empty()) {
    PodResourcesOptions pr;
    pr.socket = options.podresources_socket;
    pr.resource_prefix = options.plugin.resource_domain + "/";
    podresources = std::make_unique<PodResourcesClient>(pr);
    collector.set_attribution(podresources.get(),
                              static_cast<std::uint64_t>(options.gc_grace_period.count()) * 1'000'000ULL);
  }
  std::unique_ptr<PodPriorityClasses> classes;
  PriorityClassLookup class_lookup;
  if (!options.priority.priority_classes.empty()) {
    classes = std::make_unique<PodPriorityClasses>(env);
    class_lookup = [&classes](const std::string& ns, const std::string& pod) {
      return classes->learn(ns, pod);
    };
  }
  if (options.device_plugin) {
    collector.set_listing_observer(
        [&layout, &options, &class_lookup](const std::vector<ListedDevices>& listed) {
          reconcile_assignments(layout.channel_dir(), listed, options.priority, class_lookup);
        });
  }
  std::unique_ptr<mps::ManagerThread> mps =
      start_mps(options.mps, options.nvml_library, options.fake_gpus, options.plugin.catalog.mps_pipe_dir);
  if (mps) collector.set_mps_source([&mps] { return mps->report(); });
  auto first = collector.refresh();
  if (!first->gpu_error.empty()) GS_LOG(Warn, "NVML: %s", first->gpu_error.c_str());
  if (options.api.token.empty() && options.api.token_file.empty())
    GS_LOG(Warn, "no API token configured: /api/v1 answers 401 (see --token-file)");

  ApiServer api(options.api, layout, collector);
  if (auto port = api.start(); !port) {
    GS_LOG(Error, "%s", port.error().c_str());
    return 1;
  }

  // A plain host's shared node directory: its writer index on a thread of its own (channel/index_mode.h).
  std::unique_ptr<WriterIndexer> indexer;
  std::atomic<bool> stop_indexing{false};
  std::thread indexing;
  if (!options.index_node_dir.empty()) {
    WriterIndexer::Options indexer_options;
    indexer_options.node_dir = options.index_node_dir;
    auto keeper = WriterIndexer::open(indexer_options);
    if (!keeper) {
      GS_LOG(Error, "--index-node-dir: %s", keeper.error().c_str());
      return 1;
    }
    indexer = std::move(keeper).value();
    indexing = std::thread([&indexer, &stop_indexing] {
      while (!stop_indexing.load()) indexer->step(std::chrono::milliseconds(200));
    });
  }
  struct StopIndexing {
    std::atomic<bool>& stop;
    std::thread& thread;
    std::unique_ptr<WriterIndexer>& indexer;
    ~StopIndexing() {
      stop = true;
      if (thread.joinable()) thread.join();
      if (indexer) indexer->remove_index();  // readers list at once rather than wait for it to go stale
    }
  } stop_indexing_at_exit{stop_indexing, indexing, indexer};

  std::unique_ptr<DevicePluginManager> plugins;
  if (options.device_plugin && gpus) {
    plugins = std::make_unique<DevicePluginManager>(options.plugin, layout, first->gpus);
    if (auto started = plugins->start(); !started) {
      GS_LOG(Error, "%s", started.error().c_str());
      return 1;
    }
    collector.set_registration_source([&plugins] { return plugins->registration(); });
  }

  while (!wait_for_stop(options.scan_interval)) {
    auto view = collector.refresh();
    remove_stale_writers(layout.channel_dir(),
                         static_cast<std::uint64_t>(options.gc_grace_period.count()) * 1'000'000ULL,
                         realtime_ns());
    if (plugins) plugins->update_health(view->gpus);  // a failed probe lists none: all unhealthy
  }
  GS_LOG(Info, "stopping");
  api.stop();
  collector.set_registration_source({});
  if (plugins) plugins->stop();
  collector.set_mps_source({});
  if (mps) mps->stop();  // quits the control daemon: gpuslice-node owns it
  return 0;
}

}  // namespace gpuslice::node
