// gpuslice-node: `serve` (DaemonSet: NVML, /metrics, HTTP API, device plugin), `dra` (the DRA
// kubelet plugin instead of the device plugin) and `webhook`
// (admission webhook). Invoked as gpuslice-webhook it runs the webhook.
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "config/settings.h"
#include "node/admission/webhook_server.h"
#include "node/api/http_api.h"
#include "node/channel/channel_gc.h"
#include "node/channel/priority_assignment.h"
#include "node/dra/api_client.h"
#include "node/dra_mode.h"
#include "node/kubelet/device_plugin.h"
#include "node/kubelet/podresources.h"
#include "node/mps/manager_thread.h"
#include "node/node_view/collector.h"
#include "node/startup/flag_table.h"

#ifndef GPUSLICE_VERSION
#define GPUSLICE_VERSION "dev"
#endif

namespace gs = gpuslice::node;

namespace {

const char* lookup_env(const char* name) { return std::getenv(name); }

void apply_log_level(const std::string& text) {
  gpuslice::log::set_level(gpuslice::log::Level::Info);
  if (text.empty()) return;
  if (auto level = gpuslice::config::parse_log_level(text)) gpuslice::log::set_level(*level);
}

// Signals are blocked in every thread and taken synchronously by the main loop.
sigset_t block_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Returns true when a stop signal arrived within `timeout`.
bool wait_for_stop(const sigset_t& set, std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000),
              static_cast<long>((timeout.count() % 1000) * 1000000)};
  int sig = sigtimedwait(&set, nullptr, &ts);
  return sig == SIGINT || sig == SIGTERM;
}

gpuslice::Result<std::unique_ptr<gs::GpuSource>> fake_gpus(const std::string& spec) {
  std::size_t x = spec.find('x');
  if (x == std::string::npos || x == 0)
    return gpuslice::make_error("--fake-gpus: expected NxSIZE, e.g. 2x16Gi");
  int count = std::atoi(spec.substr(0, x).c_str());
  auto size = gpuslice::config::parse_size(spec.substr(x + 1));
  if (count <= 0 || count > 64 || !size)
    return gpuslice::make_error("--fake-gpus: expected NxSIZE, e.g. 2x16Gi");
  std::vector<gs::GpuInfo> gpus;
  for (int i = 0; i < count; ++i) {
    gs::GpuInfo g;
    g.index = static_cast<unsigned>(i);
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-fa4e0000-0000-4000-8000-%012d", i);
    g.uuid = uuid;
    g.name = "gpuslice fake GPU";
    g.minor = g.index;
    g.memory_total_bytes = *size;
    gpus.push_back(g);
  }
  return std::unique_ptr<gs::GpuSource>(new gs::StaticGpuSource(gpus));
}

// The node name of metrics and API answers: the flag / NODE_NAME, else the host name.
std::string node_name(const std::string& configured) {
  if (!configured.empty()) return configured;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return {};
  return host;
}

// Exit code of a parse that ends the program (help: 0, a usage error: 2), none to run on.
std::optional<int> stop_after(const gs::ParseOutcome& outcome, const char* who) {
  if (outcome.help) {
    std::fputs(outcome.message.c_str(), stdout);
    return 0;
  }
  if (!outcome.message.empty()) {
    std::fprintf(stderr, "%s: %s\n", who, outcome.message.c_str());
    return 2;
  }
  return std::nullopt;
}

int serve(const std::vector<std::string>& args) {
  gs::ServeOptions options;
  if (auto code = stop_after(gs::parse_serve_options(args, lookup_env, options), "gpuslice-node serve"))
    return *code;
  apply_log_level(options.log_level);
  options.api.version = GPUSLICE_VERSION;
  sigset_t stop_signals = block_signals();

  std::unique_ptr<gs::GpuSource> gpus;
  auto opened =
      options.fake_gpus.empty() ? gs::open_nvml(options.nvml_library) : fake_gpus(options.fake_gpus);
  if (opened) {
    gpus = std::move(opened).value();
  } else if (options.allow_no_gpu) {
    GS_LOG(Warn, "no GPUs: %s", opened.error().c_str());
  } else {
    GS_LOG(Error, "%s (use --allow-no-gpu to serve /metrics without GPUs)", opened.error().c_str());
    return 1;
  }

  gpuslice::SystemClock clock;
  gs::HostLayout layout(options.root);
  gs::Collector collector(layout, gpus.get(), clock);
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
  std::unique_ptr<gs::PodResourcesClient> podresources;
  if (!options.podresources_socket.empty()) {
    gs::PodResourcesOptions pr;
    pr.socket = options.podresources_socket;
    pr.resource_prefix = options.plugin.resource_domain + "/";
    podresources = std::make_unique<gs::PodResourcesClient>(pr);
    collector.set_attribution(podresources.get(),
                              static_cast<std::uint64_t>(options.gc_grace_period.count()) * 1'000'000ULL);
  }
  // The level each listed pod container's node-channel records are believed at: the webhook's
  // policy applied again here (priority_assignment.h). A PriorityClass is learnt from the API server
  // (get pods), once per pod for kPriorityClassTtl: it cannot change while the pod lives.
  std::unique_ptr<gs::dra::ApiClient> api_server;
  struct LearntClass {
    std::string name;
    std::uint64_t at_ns = 0;
  };
  std::map<std::string, LearntClass> learnt_classes;     // "<ns>/<pod>"
  std::map<std::string, std::uint64_t> class_failed_at;  // "<ns>/<pod>": said once, asked again after 60 s
  gs::PriorityClassLookup class_lookup;
  if (!options.priority.priority_classes.empty()) {
    gs::dra::ApiServerOptions api_options = gs::dra::in_cluster_options(lookup_env);
    api_options.timeout = std::chrono::milliseconds(2000);  // the scan loop waits for it
    api_options.retries = 0;
    api_options.user_agent = "gpuslice-node";
    api_server = std::make_unique<gs::dra::ApiClient>(api_options);
    class_lookup = [&api_server, &learnt_classes, &class_failed_at](
                       const std::string& ns, const std::string& pod) -> gpuslice::Result<std::string> {
      constexpr std::uint64_t kPriorityClassTtl = 300'000'000'000ULL;
      constexpr std::uint64_t kRetryAfter = 60'000'000'000ULL;
      const std::uint64_t now = gpuslice::realtime_ns();
      const std::string key = ns + "/" + pod;
      if (auto hit = learnt_classes.find(key);
          hit != learnt_classes.end() && hit->second.at_ns + kPriorityClassTtl > now)
        return hit->second.name;
      if (auto failed = class_failed_at.find(key);
          failed != class_failed_at.end() && failed->second + kRetryAfter > now)
        return gpuslice::make_error("asked less than 60 s ago");
      auto learnt = [&]() -> gpuslice::Result<std::string> {
        if (!gs::dra::valid_object_name(ns) || !gs::dra::valid_object_name(pod))
          return gpuslice::make_error("not a valid pod name");
        if (api_server->options().url.empty())
          return gpuslice::make_error("no API server (KUBERNETES_SERVICE_HOST is not set)");
        auto answer = api_server->request("GET", "/api/v1/namespaces/" + ns + "/pods/" + pod);
        if (!answer) return gpuslice::make_error(answer.error());
        if (answer->status != 200)
          return gpuslice::make_error("GET pod answered " + std::to_string(answer->status) +
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
      if (learnt_classes.size() > 65536) learnt_classes.clear();
      if (class_failed_at.size() > 65536) class_failed_at.clear();
      if (!learnt) {
        if (class_failed_at.count(key) == 0)
          GS_LOG(Warn,
                 "priority of pod %s: its PriorityClass cannot be learnt (%s); its level stays as it is",
                 key.c_str(), learnt.error().c_str());
        class_failed_at[key] = now;
        return learnt;
      }
      class_failed_at.erase(key);
      learnt_classes[key] = {*learnt, now};
      return learnt;
    };
  }
  if (options.device_plugin) {
    collector.set_listing_observer(
        [&layout, &options, &class_lookup](const std::vector<gs::ListedDevices>& listed) {
          gs::reconcile_assignments(layout.channel_dir(), listed, options.priority, class_lookup);
        });
  }
  std::unique_ptr<gs::mps::ManagerThread> mps;
  if (options.mps.enabled) {
    auto mps_options = gs::mps::node_manager_options(options.mps.root, options.mps.binary,
                                                     options.fake_gpus.empty() ? options.nvml_library : "");
    options.plugin.catalog.mps_pipe_dir = mps_options.paths.pipe_dir();
    mps = std::make_unique<gs::mps::ManagerThread>(std::move(mps_options));
    collector.set_mps_source([&mps] { return mps->report(); });
  }
  auto first = collector.refresh();
  if (!first->gpu_error.empty()) GS_LOG(Warn, "NVML: %s", first->gpu_error.c_str());
  if (options.api.token.empty() && options.api.token_file.empty())
    GS_LOG(Warn, "no API token configured: /api/v1 answers 401 (see --token-file)");

  gs::ApiServer api(options.api, layout, collector);
  if (auto port = api.start(); !port) {
    GS_LOG(Error, "%s", port.error().c_str());
    return 1;
  }

  std::unique_ptr<gs::DevicePluginManager> plugins;
  if (options.device_plugin && gpus) {
    plugins = std::make_unique<gs::DevicePluginManager>(options.plugin, layout, first->gpus);
    if (auto started = plugins->start(); !started) {
      GS_LOG(Error, "%s", started.error().c_str());
      return 1;
    }
    collector.set_registration_source([&plugins] { return plugins->registration(); });
  }

  while (!wait_for_stop(stop_signals, options.scan_interval)) {
    auto view = collector.refresh();
    gs::remove_stale_writers(layout.channel_dir(),
                             static_cast<std::uint64_t>(options.gc_grace_period.count()) * 1'000'000ULL,
                             gpuslice::realtime_ns());
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

int webhook(const std::vector<std::string>& args) {
  gs::WebhookModeOptions options;
  if (auto code = stop_after(gs::parse_webhook_options(args, lookup_env, options), "gpuslice-webhook"))
    return *code;
  apply_log_level(options.log_level);
  sigset_t stop_signals = block_signals();
  gs::WebhookServer server(options.server, options.webhook);
  if (auto port = server.start(); !port) {
    GS_LOG(Error, "%s", port.error().c_str());
    return 1;
  }
  while (!wait_for_stop(stop_signals, std::chrono::seconds(3600))) {
  }
  GS_LOG(Info, "stopping");
  server.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string program = argv[0];
  program = program.substr(program.rfind('/') + 1);
  if (program == "gpuslice-webhook") return webhook(args);

  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(gs::usage_main().c_str(), args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "serve") return serve(args);
  if (command == "webhook") return webhook(args);
  if (command == "dra") return gs::dra::run_dra_mode(args, lookup_env);
  if (command == "version" || command == "--version") {
    std::printf("gpuslice-node %s\n", GPUSLICE_VERSION);
    return 0;
  }
  std::fprintf(stderr, "gpuslice-node: unknown command '%s'\n\n%s", command.c_str(),
               gs::usage_main().c_str());
  return 2;
}
