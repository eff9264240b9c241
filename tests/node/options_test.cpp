#include <gtest/gtest.h>

#include <map>

#include "node/serve_mode.h"
#include "node/startup/flag_table.h"
#include "node/webhook_mode.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

struct Env {
  std::map<std::string, std::string> vars;
  std::function<const char*(const char*)> fn() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

TEST(Options, ServeFlagsOverrideEnvironment) {
  test::TempDir dir;
  test::write_file(dir / "token", "s3cret\n");
  Env env{{{"GPUSLICE_NODE_ROOT", "/from/env"},
           {"GPUSLICE_NODE_LISTEN", "127.0.0.1:1"},
           {"GPUSLICE_NODE_TOKEN", "envtok"}}};
  ServeOptions o;
  auto r = parse_serve_options({"--root", "/x", "--listen=:9999", "--token-file", dir / "token",
                                "--resources", "vram,cores", "--vram-unit", "256Mi", "--replicas=8",
                                "--placement", "spread", "--scan-interval", "250ms", "--no-device-plugin"},
                               env.fn(), o);
  ASSERT_FALSE(r.help);
  ASSERT_EQ(r.message, "");
  EXPECT_EQ(o.root, "/x");
  EXPECT_EQ(o.api.host, "0.0.0.0");
  EXPECT_EQ(o.api.port, 9999);
  EXPECT_EQ(o.api.token_file, dir / "token");  // the file wins over GPUSLICE_NODE_TOKEN (ApiToken)
  ASSERT_EQ(o.plugin.resources.size(), 2u);
  EXPECT_EQ(o.plugin.resources[0], ResourceKind::Vram);
  EXPECT_EQ(o.plugin.catalog.vram_unit, 256ULL << 20);
  EXPECT_EQ(o.plugin.catalog.replicas, 8u);
  EXPECT_EQ(o.plugin.catalog.placement, Placement::Spread);
  EXPECT_EQ(o.scan_interval, std::chrono::milliseconds(250));
  EXPECT_FALSE(o.device_plugin);

  ServeOptions from_env;
  ASSERT_EQ(parse_serve_options({}, env.fn(), from_env).message, "");
  EXPECT_EQ(from_env.root, "/from/env");
  EXPECT_EQ(from_env.api.host, "127.0.0.1");
  EXPECT_EQ(from_env.api.port, 1);
  EXPECT_EQ(from_env.api.token, "envtok");
}

TEST(Options, MpsIsOffUnlessAskedForAndItsDirectoryComesFromTheFlagOrTheEnvironment) {
  Env env{{{"GPUSLICE_MPS_DIR", "/run/env-mps"}}};
  Env none;
  ServeOptions defaults;
  ASSERT_EQ(parse_serve_options({}, none.fn(), defaults).message, "");
  EXPECT_FALSE(defaults.mps.enabled);
  EXPECT_EQ(defaults.mps.root, "/run/gpuslice/mps");
  EXPECT_EQ(defaults.mps.binary, "nvidia-cuda-mps-control");
  ServeOptions from_env;
  ASSERT_EQ(parse_serve_options({"--mps"}, env.fn(), from_env).message, "");
  EXPECT_TRUE(from_env.mps.enabled);
  EXPECT_EQ(from_env.mps.root, "/run/env-mps");
  ServeOptions flags;
  ASSERT_EQ(
      parse_serve_options({"--mps", "--mps-dir=/run/x", "--mps-binary", "/opt/mps-control"}, env.fn(), flags)
          .message,
      "");
  EXPECT_EQ(flags.mps.root, "/run/x");
  EXPECT_EQ(flags.mps.binary, "/opt/mps-control");
}

TEST(Options, PodAttributionCdiAndNodeNameFlags) {
  Env env{{{"NODE_NAME", "gpu-node-7"}}};
  ServeOptions defaults;
  ASSERT_EQ(parse_serve_options({}, env.fn(), defaults).message, "");
  EXPECT_EQ(defaults.node_name, "gpu-node-7") << "NODE_NAME, which the DaemonSet sets";
  EXPECT_EQ(defaults.podresources_socket, "/var/lib/kubelet/pod-resources/kubelet.sock");
  EXPECT_EQ(defaults.gc_grace_period, std::chrono::minutes(5));
  EXPECT_FALSE(defaults.plugin.catalog.cdi);
  EXPECT_EQ(defaults.plugin.catalog.cdi_kind, "nvidia.com/gpu");

  ServeOptions o;
  ASSERT_EQ(parse_serve_options({"--node-name", "n1", "--podresources-socket=", "--gc-grace-period", "0",
                                 "--device-list-strategy", "cdi", "--cdi-kind", "example.com/gpu"},
                                env.fn(), o)
                .message,
            "");
  EXPECT_EQ(o.node_name, "n1");
  EXPECT_EQ(o.podresources_socket, "");
  EXPECT_EQ(o.gc_grace_period, std::chrono::milliseconds(0));
  EXPECT_TRUE(o.plugin.catalog.cdi);
  EXPECT_EQ(o.plugin.catalog.cdi_kind, "example.com/gpu");

  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--device-list-strategy", "volume-mounts"},
                                             {"--cdi-kind", "gpu"},
                                             {"--cdi-kind", "nvidia.com/gpu=0"},
                                             {"--gc-grace-period", "-1s"}}) {
    ServeOptions refused;
    EXPECT_NE(parse_serve_options(bad, env.fn(), refused).message, "") << bad[0] << " " << bad[1];
  }
}

TEST(Options, ErrorsAndHelp) {
  Env env;
  ServeOptions o;
  EXPECT_TRUE(parse_serve_options({"--help"}, env.fn(), o).help);
  EXPECT_NE(parse_serve_options({"--bogus"}, env.fn(), o).message.find("unknown flag --bogus"),
            std::string::npos);
  EXPECT_NE(
      parse_serve_options({"--resources", "gpu,ram"}, env.fn(), o).message.find("unknown resource 'ram'"),
      std::string::npos);
  EXPECT_NE(parse_serve_options({"--listen", "localhost"}, env.fn(), o).message.find("HOST:PORT"),
            std::string::npos);
  EXPECT_NE(parse_serve_options({"--vram-unit", "lots"}, env.fn(), o).message, "");
  EXPECT_NE(parse_serve_options({"--root"}, env.fn(), o).message.find("needs a value"), std::string::npos);
  // A token file may appear after the daemon started (a Secret created later): not an error.
  EXPECT_EQ(parse_serve_options({"--token-file", "/nonexistent/x"}, env.fn(), o).message, "");

  WebhookModeOptions w;
  Env wenv{{{"GPUSLICE_WEBHOOK_TLS_CERT", "/c.pem"}}};
  ASSERT_EQ(parse_webhook_options({"--listen", "[::]:8443", "--root", "/r"}, wenv.fn(), w).message, "");
  EXPECT_EQ(w.server.host, "::");
  EXPECT_EQ(w.server.tls_cert_file, "/c.pem");
  EXPECT_EQ(w.server.tls_key_file, "/etc/gpuslice/tls/tls.key");
  EXPECT_EQ(w.webhook.host_root, "/r");
}

TEST(Options, BadValuesAreRefusedNamingTheFlagOrVariable) {
  Env env;
  const std::string range = "expected a whole number from 1 to 4096";
  for (const char* bad : {"0", "abc", "-1", "4097", "99999999999", "", "1.5", " 8"}) {
    ServeOptions o;
    auto r = parse_serve_options({"--http-threads", bad}, env.fn(), o);
    EXPECT_EQ(r.message, "--http-threads: " + range) << "'" << bad << "'";
  }
  ServeOptions o;
  EXPECT_EQ(parse_serve_options({"--replicas=0"}, env.fn(), o).message,
            "--replicas: expected a whole number from 1 to 9999");
  EXPECT_NE(parse_serve_options({"--scan-interval", "1h"}, env.fn(), o).message.find("--scan-interval: "),
            std::string::npos);
  EXPECT_NE(parse_serve_options({"--http-request-timeout", "0s"}, env.fn(), o).message.find("positive"),
            std::string::npos);
  EXPECT_NE(parse_serve_options({"--placement", "random"}, env.fn(), o).message.find("binpack or spread"),
            std::string::npos);
  EXPECT_EQ(parse_serve_options({"--metrics-auth=yes"}, env.fn(), o).message,
            "--metrics-auth takes no value");
  EXPECT_NE(parse_serve_options({"--vram-unit", "0"}, env.fn(), o).message.find("--vram-unit: "),
            std::string::npos);
  ASSERT_EQ(parse_serve_options({"--vram-unit", "auto"}, env.fn(), o).message, "");
  EXPECT_EQ(o.plugin.catalog.vram_unit, kAutoVramUnit);

  Env loud{{{"GPUSLICE_LOG_LEVEL", "loud"}}};
  EXPECT_EQ(parse_serve_options({}, loud.fn(), o).message.rfind("GPUSLICE_LOG_LEVEL: ", 0), 0u);
  Env bad_listen{{{"GPUSLICE_NODE_LISTEN", "127.0.0.1:70000"}}};
  EXPECT_NE(
      parse_serve_options({}, bad_listen.fn(), o).message.find("GPUSLICE_NODE_LISTEN: port out of range"),
      std::string::npos);

  WebhookModeOptions w;
  EXPECT_EQ(parse_webhook_options({"--threads", "0"}, env.fn(), w).message,
            "--threads: expected a whole number from 1 to 4096");
  EXPECT_EQ(parse_webhook_options({"--threads", "12"}, env.fn(), w).message, "");
  EXPECT_EQ(w.server.limits.max_connections, 12u);
}

TEST(Options, DefaultsComeFromTheSameTableAsTheUsageText) {
  Env env;
  ServeOptions o;
  ASSERT_EQ(parse_serve_options({}, env.fn(), o).message, "");
  const std::string usage = usage_serve();
  EXPECT_NE(usage.find("--root DIR"), std::string::npos) << usage;
  EXPECT_NE(usage.find("(GPUSLICE_NODE_ROOT, default " + o.root + ")"), std::string::npos) << usage;
  EXPECT_EQ(o.root, kDefaultRoot);
  EXPECT_NE(usage.find("(GPUSLICE_NODE_LISTEN, default 0.0.0.0:9410)"), std::string::npos) << usage;
  EXPECT_EQ(o.api.port, 9410);
  EXPECT_NE(usage.find("(default 128)"), std::string::npos) << usage;
  EXPECT_EQ(o.api.limits.max_connections, 128u);
  EXPECT_EQ(o.scan_interval, std::chrono::milliseconds(1000));
  EXPECT_EQ(o.plugin.catalog.replicas, 4u);
  EXPECT_EQ(o.plugin.catalog.vram_unit, kAutoVramUnit) << "derived from the node's VRAM by default";
  EXPECT_EQ(o.plugin.resources.size(), 3u);
  EXPECT_EQ(o.kubelet_pods_dir, "/var/lib/kubelet/pods");
  EXPECT_TRUE(o.device_plugin);
  // Every flag the parser knows is in the usage text, and nothing else is.
  for (const char* flag : {"--token-file FILE", "--metrics-auth", "--no-device-plugin", "--allow-no-gpu",
                           "--fake-gpus NxSIZE", "--http-request-timeout DURATION", "--log-level LEVEL"}) {
    EXPECT_NE(usage.find(flag), std::string::npos) << flag;
  }

  WebhookModeOptions w;
  ASSERT_EQ(parse_webhook_options({}, env.fn(), w).message, "");
  EXPECT_EQ(w.server.port, 8443);
  EXPECT_EQ(w.server.tls_cert_file, "/etc/gpuslice/tls/tls.crt");
  EXPECT_NE(usage_webhook().find("(GPUSLICE_WEBHOOK_TLS_CERT, default /etc/gpuslice/tls/tls.crt)"),
            std::string::npos)
      << usage_webhook();
}

// Each flag's default is declared once, in the flag table: a second copy as a member initialiser
// can drift from the table (and from the usage text printed from it) without any test noticing.
TEST(Options, ServeOptionsHoldNoDefaultsOfTheirOwn) {
  const ServeOptions bare;
  EXPECT_EQ(bare.root, "");
  EXPECT_EQ(bare.nvml_library, "");
  EXPECT_EQ(bare.scan_interval, std::chrono::milliseconds(0));
  EXPECT_EQ(bare.kubelet_pods_dir, "");
  EXPECT_EQ(bare.podresources_socket, "");
  EXPECT_EQ(bare.gc_grace_period, std::chrono::milliseconds(0));

  Env env;
  ServeOptions o;
  ASSERT_EQ(parse_serve_options({}, env.fn(), o).message, "");
  EXPECT_EQ(o.nvml_library, "libnvidia-ml.so.1");
  EXPECT_EQ(o.gc_grace_period, std::chrono::minutes(5));
}

// The kubelet's paths have one home (node/kubelet_paths.h), which the flag table, PluginOptions and
// PodResourcesOptions share.
TEST(Options, KubeletPathsHaveOneHome) {
  Env env;
  ServeOptions o;
  ASSERT_EQ(parse_serve_options({}, env.fn(), o).message, "");
  EXPECT_EQ(o.kubelet_pods_dir, kKubeletPodsDir);
  EXPECT_EQ(o.podresources_socket, kDefaultPodResourcesSocket);
  EXPECT_EQ(o.plugin.device_plugin_dir, kKubeletDevicePluginDir);
  EXPECT_EQ(PluginOptions{}.device_plugin_dir, kKubeletDevicePluginDir);
  EXPECT_EQ(PodResourcesOptions{}.socket, kDefaultPodResourcesSocket);
  const std::string usage = usage_serve();
  for (const char* path : {kKubeletPodsDir, kDefaultPodResourcesSocket, kKubeletDevicePluginDir}) {
    EXPECT_NE(usage.find(std::string("default ") + path + ")"), std::string::npos) << path << "\n" << usage;
  }
}

// The daemon takes the webhook's priority policy under the same flags and variables, so one setting
// feeds both (priority_assignment.h).
TEST(Options, ServeTakesTheWebhooksPriorityPolicy) {
  Env env;
  env.vars["GPUSLICE_WEBHOOK_PRIORITY_HIGH_NAMESPACES"] = "serving,prod";
  ServeOptions o;
  ASSERT_EQ(parse_serve_options({"--priority-classes", "gpu-critical=high,batch=low"}, env.fn(), o).message,
            "");
  EXPECT_EQ(o.priority.high_namespaces, (std::vector<std::string>{"serving", "prod"}));
  ASSERT_EQ(o.priority.priority_classes.size(), 2u);
  EXPECT_EQ(o.priority.priority_classes.at("gpu-critical"), Priority::High);
  ServeOptions bad;
  EXPECT_NE(parse_serve_options({"--priority-classes", "x=urgent"}, env.fn(), bad).message, "");
}

TEST(Options, Durations) {
  EXPECT_EQ(*parse_duration("2s"), std::chrono::milliseconds(2000));
  EXPECT_EQ(*parse_duration("1m"), std::chrono::milliseconds(60000));
  EXPECT_EQ(*parse_duration("5"), std::chrono::milliseconds(5000));
  EXPECT_FALSE(parse_duration("0s").ok());
  EXPECT_FALSE(parse_duration("1h").ok());
  EXPECT_FALSE(parse_duration("s").ok());
}

}  // namespace
}  // namespace gpuslice::node
