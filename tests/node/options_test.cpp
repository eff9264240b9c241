#include "node/options.h"

#include <gtest/gtest.h>

#include <map>

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
  EXPECT_EQ(o.api.token, "s3cret");  // the file wins over GPUSLICE_NODE_TOKEN, newline trimmed
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
  EXPECT_NE(parse_serve_options({"--token-file", "/nonexistent/x"}, env.fn(), o).message.find("cannot read"),
            std::string::npos);

  WebhookModeOptions w;
  Env wenv{{{"GPUSLICE_WEBHOOK_TLS_CERT", "/c.pem"}}};
  ASSERT_EQ(parse_webhook_options({"--listen", "[::]:8443", "--root", "/r"}, wenv.fn(), w).message, "");
  EXPECT_EQ(w.server.host, "::");
  EXPECT_EQ(w.server.tls_cert_file, "/c.pem");
  EXPECT_EQ(w.server.tls_key_file, "/etc/gpuslice/tls/tls.key");
  EXPECT_EQ(w.webhook.host_root, "/r");
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
