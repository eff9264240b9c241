// /metrics scraped and parsed over loopback HTTP, the authenticated API, and setting limits.
#include "node/api/http_api.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "node/api/metrics.h"
#include "node/node_view/collector.h"
#include "shared_state/ledger.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

using nlohmann::json;

using test::kUuid0;
constexpr const char* kToken = "s3cret-token";

// A strict reader of the Prometheus text format 0.0.4: fails the test on any malformed line and
// returns every sample as "name{k="v",...}" (labels sorted) -> value.
std::map<std::string, double> parse_exposition(const std::string& text) {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  std::set<std::string> helped;
  static const std::regex name_re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  std::size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    EXPECT_NE(eol, std::string::npos) << "last line not terminated";
    if (eol == std::string::npos) break;
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::string rest = line.substr(7);
      std::string name = rest.substr(0, rest.find(' '));
      EXPECT_TRUE(std::regex_match(name, name_re)) << "line " << line_no << ": " << line;
      if (line[2] == 'T') {
        std::string type = rest.substr(name.size() + 1);
        EXPECT_TRUE(type == "gauge" || type == "counter") << "line " << line_no << ": " << line;
        EXPECT_EQ(types.count(name), 0u) << "TYPE given twice for " << name;
        types[name] = type;
      } else {
        EXPECT_TRUE(helped.insert(name).second) << "HELP given twice for " << name;
      }
      continue;
    }
    EXPECT_NE(line[0], '#') << "line " << line_no << ": unknown comment " << line;
    std::size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    std::string name = line.substr(0, i);
    EXPECT_TRUE(std::regex_match(name, name_re)) << "line " << line_no << ": " << line;
    EXPECT_EQ(types.count(name), 1u) << "line " << line_no << ": sample before its TYPE: " << line;
    std::map<std::string, std::string> labels;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::size_t eq = line.find('=', i);
        std::string label = line.substr(i, eq - i);
        EXPECT_TRUE(std::regex_match(label, std::regex("[a-z_][a-z0-9_]*"))) << "not snake_case: " << line;
        i = eq + 1;
        EXPECT_EQ(line[i], '"') << line;
        ++i;
        std::string value;
        for (; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\') {
            ++i;
            EXPECT_TRUE(line[i] == '\\' || line[i] == '"' || line[i] == 'n') << "bad escape in " << line;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        ++i;  // closing quote
        EXPECT_TRUE(labels.emplace(label, value).second) << "label repeated in " << line;
        if (line[i] == ',') ++i;
      }
      ++i;  // '}'
    }
    EXPECT_EQ(line[i], ' ') << line;
    std::string value_text = line.substr(i + 1);
    double value = 0;
    if (value_text == "NaN") {
      value = std::nan("");
    } else if (value_text == "+Inf" || value_text == "-Inf") {
      value = value_text[0] == '+' ? HUGE_VAL : -HUGE_VAL;
    } else {
      std::size_t used = 0;
      value = std::stod(value_text, &used);
      EXPECT_EQ(used, value_text.size()) << "trailing junk in " << line;
    }
    std::string key = name + "{";
    bool first = true;
    for (const auto& [k, v] : labels) {
      key += (first ? "" : ",") + k + "=\"" + v + "\"";
      first = false;
    }
    key += "}";
    EXPECT_TRUE(samples.emplace(key, value).second) << "duplicate series " << key;
  }
  for (const auto& [name, type] : types) EXPECT_EQ(helped.count(name), 1u) << name << " has no HELP";
  return samples;
}

class NodeApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GpuInfo g;
    g.index = 0;
    g.uuid = kUuid0;
    g.name = "Fake \"Tesla\" \\ GPU\nline2";  // every character that needs escaping
    g.memory_total_bytes = 1ULL << 30;
    g.memory_used_bytes = 300ULL << 20;
    g.utilization_percent = 37;
    gpus_ = std::make_unique<StaticGpuSource>(std::vector<GpuInfo>{g});

    // One container with a live process (this test), created through the Ledger API.
    std::filesystem::create_directories(layout_.config_dir("c1"));
    Limits limits;
    limits.memory = "536870912";
    ASSERT_TRUE(write_file_atomically(layout_.limits_file("c1"), render_limits(limits)).ok());
    auto opened = shm::Ledger::open(layout_.state_file("c1"), shm::Ledger::Mode::Process);
    ASSERT_TRUE(opened.ok()) << opened.error();
    ledger_ = std::move(opened).value();
    auto dev = ledger_->attach_device(kUuid0, 0, 1ULL << 30, 512ULL << 20, 30);
    ASSERT_TRUE(dev.ok()) << dev.error();
    dev_ = *dev;
    ASSERT_TRUE(ledger_->register_process().ok());
    ASSERT_TRUE(ledger_->try_reserve(dev_, 100ULL << 20));
    ledger_->count_refusal(dev_);
    ledger_->count_refusal(dev_);
    ledger_->init_priority(Priority::Low);  // low, held back 1.5 s so far
    ledger_->add_held_back_ns(1'500'000'000);
    // A container directory without any state yet.
    std::filesystem::create_directories(layout_.container_dir("c2-idle"));

    collector_ = std::make_unique<Collector>(layout_, gpus_.get(), clock_);
    collector_->set_node_name("node-1");
    collector_->refresh();
    ledger_->add_busy_ns(dev_, 250'000'000);
    clock_.advance_ns(1'000'000'000);
    collector_->refresh();

    ApiOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.token = kToken;
    options.limits.max_connections = 4;
    options.version = "9.9.9-test";
    server_ = std::make_unique<ApiServer>(options, layout_, *collector_);
    auto port = server_->start();
    ASSERT_TRUE(port.ok()) << port.error();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
  }

  void TearDown() override {
    client_.reset();
    server_.reset();
  }

  httplib::Headers auth(const std::string& token = kToken) { return {{"Authorization", "Bearer " + token}}; }

  test::TempDir dir_;
  HostLayout layout_{dir_ / "root"};
  test::FakeClock clock_;
  std::unique_ptr<StaticGpuSource> gpus_;
  std::unique_ptr<shm::Ledger> ledger_;
  int dev_ = -1;
  std::unique_ptr<Collector> collector_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(NodeApiTest, MetricsScrapeParsesAndHasTheExpectedSeries) {
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  auto samples = parse_exposition(res->body);

  const std::string gpu =
      std::string("{gpu=\"0\",model_name=\"Fake \"Tesla\" \\ GPU\nline2\",node=\"node-1\",uuid=\"") + kUuid0 +
      "\"}";
  // No kubelet in this test: the Kubernetes labels are there, empty.
  const std::string c1 = "container=\"\",gpuslice_allocation=\"c1\",namespace=\"\",node=\"node-1\",pod=\"\"";
  const std::string cdev =
      "{container=\"\",gpu=\"0\",gpuslice_allocation=\"c1\",namespace=\"\",node=\"node-1\",pod=\"\",uuid=\"" +
      std::string(kUuid0) + "\"}";
  const std::string c2 =
      "container=\"\",gpuslice_allocation=\"c2-idle\",namespace=\"\",node=\"node-1\",pod=\"\"";
  auto at = [&](const std::string& key) {
    EXPECT_EQ(samples.count(key), 1u) << "missing " << key << "\n" << res->body;
    return samples.count(key) ? samples.at(key) : -1;
  };
  EXPECT_EQ(at("gpuslice_gpu_memory_total_bytes" + gpu), 1073741824.0);
  EXPECT_EQ(at("gpuslice_gpu_memory_used_bytes" + gpu), 314572800.0);
  EXPECT_EQ(at("gpuslice_gpu_utilization_percent" + gpu), 37.0);
  EXPECT_EQ(at("gpuslice_gpu_healthy" + gpu), 1.0);
  EXPECT_EQ(at("gpuslice_container_memory_quota_bytes" + cdev), 536870912.0);
  EXPECT_EQ(at("gpuslice_container_memory_used_bytes" + cdev), 104857600.0);
  EXPECT_EQ(at("gpuslice_container_compute_limit_percent" + cdev), 30.0);
  EXPECT_EQ(at("gpuslice_container_refused_allocations_total" + cdev), 2.0);
  EXPECT_DOUBLE_EQ(at("gpuslice_container_compute_utilization_ratio" + cdev), 0.25);
  EXPECT_EQ(at("gpuslice_container_processes{" + c1 + "}"), 1.0);
  EXPECT_EQ(at("gpuslice_container_priority{" + c1 + "}"), 0.0);
  EXPECT_DOUBLE_EQ(at("gpuslice_container_held_back_seconds_total{" + c1 + "}"), 1.5);
  EXPECT_EQ(samples.count("gpuslice_container_priority{" + c2 + "}"), 0u) << "no state, no priority";
  EXPECT_EQ(at("gpuslice_container_state{" + c1 + ",state=\"ok\"}"), 1.0);
  EXPECT_EQ(at("gpuslice_container_state{" + c1 + ",state=\"error\"}"), 0.0);
  EXPECT_EQ(at("gpuslice_container_state{" + c1 + ",state=\"released\"}"), 0.0);
  EXPECT_EQ(at("gpuslice_container_state{" + c2 + ",state=\"ok\"}"), 1.0);
  EXPECT_EQ(samples.count("gpuslice_container_processes{" + c2 + "}"), 0u);
  EXPECT_EQ(at("gpuslice_build_info{node=\"node-1\",version=\"9.9.9-test\"}"), 1.0);
  EXPECT_EQ(at("gpuslice_nvml_up{node=\"node-1\"}"), 1.0);
  EXPECT_EQ(at("gpuslice_containers_removed_total{node=\"node-1\"}"), 0.0);
  EXPECT_EQ(samples.count("gpuslice_podresources_up{node=\"node-1\"}"), 0u) << "attribution is off";
  // The raw text escapes the label value as the format requires.
  EXPECT_NE(res->body.find(R"(model_name="Fake \"Tesla\" \\ GPU\nline2")"), std::string::npos);
}

TEST_F(NodeApiTest, ApiNeedsTheBearerToken) {
  for (const auto& headers :
       {httplib::Headers{}, auth("wrong"), httplib::Headers{{"Authorization", "Basic x"}}}) {
    auto res = client_->Get("/api/v1/status", headers);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
    auto body = json::parse(res->body);
    EXPECT_EQ(body["status"], 401);
    EXPECT_FALSE(body["error"].get<std::string>().empty());
  }
  auto put = client_->Put("/api/v1/containers/c1/limits", R"({"memory":"1Gi"})", "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 401);
  EXPECT_EQ(*read_limits_file(layout_.limits_file("c1"))->memory, "536870912")
      << "unchanged without the token";

  auto health = client_->Get("/healthz");  // open, for probes
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(NodeApiTest, StatusListsGpusAndContainers) {
  auto res = client_->Get("/api/v1/status", auth());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  auto body = json::parse(res->body);
  EXPECT_EQ(body["version"], "9.9.9-test");
  ASSERT_EQ(body["gpus"].size(), 1u);
  EXPECT_EQ(body["gpus"][0]["uuid"], kUuid0);
  ASSERT_EQ(body["containers"].size(), 2u);
  const auto& c1 = body["containers"][0];
  EXPECT_EQ(c1["id"], "c1");
  EXPECT_EQ(body["node"], "node-1");
  EXPECT_EQ(body["podresources"]["state"], "off") << "no PodResources client configured";
  EXPECT_TRUE(body["device_plugin"].is_null()) << "no device plugin in this test";
  EXPECT_EQ(body["containers_removed"], 0);
  EXPECT_EQ(c1["node"], "node-1");
  EXPECT_EQ(c1["state"], "ok");
  EXPECT_TRUE(c1["pod"]["name"].is_null()) << "no kubelet: unknown, not a made-up pod";
  EXPECT_TRUE(c1["pod"]["namespace"].is_null());
  EXPECT_TRUE(c1["pod"]["container"].is_null());
  EXPECT_EQ(c1["has_state"], true);
  EXPECT_EQ(c1["limits"]["memory"], "536870912");
  EXPECT_EQ(c1["priority"], "low");
  EXPECT_EQ(c1["held_back_ns"], 1'500'000'000u);
  EXPECT_TRUE(body["containers"][1]["priority"].is_null());
  ASSERT_EQ(c1["devices"].size(), 1u);
  EXPECT_EQ(c1["devices"][0]["used_bytes"], 104857600u);
  EXPECT_EQ(c1["devices"][0]["quota_bytes"], 536870912u);
  EXPECT_EQ(c1["devices"][0]["requested_quota_bytes"], 536870912u) << "the request, from the state file";
  EXPECT_TRUE(c1["devices"][0]["quota_cap_bytes"].is_null()) << "no process recorded a cap";
  EXPECT_EQ(c1["devices"][0]["refused_allocations"], 2u);
  ASSERT_EQ(c1["processes"].size(), 1u);
  EXPECT_EQ(c1["processes"][0]["pid"], static_cast<int>(getpid()));
  EXPECT_EQ(body["containers"][1]["has_state"], false);

  auto one = client_->Get("/api/v1/containers/c1", auth());
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body)["id"], "c1");
  auto none = client_->Get("/api/v1/containers/nope", auth());
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
}

TEST_F(NodeApiTest, SetLimitsWritesTheFileAndTheLiveState) {
  auto res = client_->Put("/api/v1/containers/c1/limits", auth(), R"({"memory":"256Mi","compute":20})",
                          "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  auto body = json::parse(res->body);
  EXPECT_EQ(body["limits"]["memory"], "256Mi");
  EXPECT_EQ(body["limits"]["compute"], "20");
  EXPECT_EQ(body["live_devices_updated"], 1);

  auto limits = read_limits_file(layout_.limits_file("c1"));
  ASSERT_TRUE(limits.ok());
  EXPECT_EQ(limits->memory, "256Mi");
  EXPECT_EQ(limits->compute, "20");
  EXPECT_EQ(ledger_->quota(dev_), 256ULL << 20);
  EXPECT_EQ(ledger_->compute_limit(dev_), 20u);

  // POST works too; a value keyed by UUID applies to that device; the other key is kept.
  auto post = client_->Post("/api/v1/containers/c1/limits", auth(),
                            std::string(R"({"memory":{")") + kUuid0 + R"(":"128Mi"}})", "application/json");
  ASSERT_TRUE(post);
  ASSERT_EQ(post->status, 200) << post->body;
  EXPECT_EQ(ledger_->quota(dev_), 128ULL << 20);
  EXPECT_EQ(read_limits_file(layout_.limits_file("c1"))->compute, "20");

  // A container without state: only the file is written.
  auto idle =
      client_->Put("/api/v1/containers/c2-idle/limits", auth(), R"({"compute":"50"})", "application/json");
  ASSERT_TRUE(idle);
  ASSERT_EQ(idle->status, 200) << idle->body;
  EXPECT_EQ(json::parse(idle->body)["live_devices_updated"], 0);
  EXPECT_EQ(read_limits_file(layout_.limits_file("c2-idle"))->compute, "50");
}

TEST_F(NodeApiTest, SetLimitsRejectsBadRequestsClearly) {
  struct Case {
    const char* path;
    const char* body;
    int status;
    const char* message_part;
  };
  const Case cases[] = {
      {"/api/v1/containers/c1/limits", "not json", 400, "not valid JSON"},
      {"/api/v1/containers/c1/limits", "[1]", 400, "JSON object"},
      {"/api/v1/containers/c1/limits", "{}", 400, "nothing to set"},
      {"/api/v1/containers/c1/limits", R"({"memory":"12 apples"})", 400, "'memory'"},
      {"/api/v1/containers/c1/limits", R"({"memory":-5})", 400, "'memory'"},
      {"/api/v1/containers/c1/limits", R"({"compute":150})", 400, "'compute'"},
      {"/api/v1/containers/c1/limits", R"({"compute":true})", 400, "'compute'"},
      {"/api/v1/containers/c1/limits", R"({"memroy":"1Gi"})", 400, "unknown field 'memroy'"},
      {"/api/v1/containers/ghost/limits", R"({"memory":"1Gi"})", 404, "no container 'ghost'"},
      {"/api/v1/containers/a%20b/limits", R"({"memory":"1Gi"})", 400, "invalid container id"},
  };
  for (const auto& c : cases) {
    auto res = client_->Put(c.path, auth(), c.body, "application/json");
    ASSERT_TRUE(res) << c.body;
    EXPECT_EQ(res->status, c.status) << c.path << " " << c.body << " -> " << res->body;
    auto body = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << res->body;
    EXPECT_NE(body["error"].get<std::string>().find(c.message_part), std::string::npos)
        << c.body << " -> " << res->body;
  }
  EXPECT_EQ(*read_limits_file(layout_.limits_file("c1"))->memory, "536870912");
  EXPECT_FALSE(read_limits_file(layout_.limits_file("c1"))->compute);
  EXPECT_EQ(ledger_->quota(dev_), 512ULL << 20);

  auto unknown = client_->Get("/api/v2/anything", auth());
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_TRUE(json::parse(unknown->body).contains("error"));
  auto wrong_method = client_->Get("/api/v1/containers/c1/limits", auth());
  ASSERT_TRUE(wrong_method);
  EXPECT_EQ(wrong_method->status, 405);
}

TEST_F(NodeApiTest, DuplicateJsonKeysAreRefused) {
  // The env parser refuses {"0":"1Gi","0":"2Gi"}; the API must not pick one of the two either.
  for (const char* body : {R"({"memory":"1Gi","memory":"64Gi"})", R"({"compute":10,"compute":90})",
                           R"({"memory":{"0":"1Gi","0":"64Gi"}})"}) {
    auto res = client_->Put("/api/v1/containers/c1/limits", auth(), body, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body;
    EXPECT_NE(res->body.find("duplicate key"), std::string::npos) << res->body;
  }
  EXPECT_EQ(read_limits_file(layout_.limits_file("c1"))->memory, "536870912");  // untouched
  EXPECT_EQ(ledger_->quota(dev_), 512ULL << 20);

  std::string deep = std::string(10000, '[') + std::string(10000, ']');
  auto nested =
      client_->Put("/api/v1/containers/c1/limits", auth(), R"({"memory":)" + deep + "}", "application/json");
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->status, 400);
}

// A Latin-1 argv in one container's ledger once made GET /api/v1/status a 500 for the whole node.
TEST(NodeApi, NonUtf8CommandLineDoesNotBreakStatus) {
  NodeView view;
  ContainerView c;
  c.id = "latin1";
  c.has_state = true;
  c.error = "bad \xe9tat \xff";
  ContainerProcess p;
  p.pid = 7;
  p.command = "python caf\xe9.py --na\xefve";
  c.processes.push_back(p);
  view.containers.push_back(c);
  std::string text;
  ASSERT_NO_THROW(text = status_json(view, "v\xfe"));
  auto doc = json::parse(text);
  EXPECT_EQ(doc["containers"][0]["processes"][0]["command"], "python caf\xef\xbf\xbd.py --na\xef\xbf\xbdve");
  EXPECT_EQ(doc["containers"][0]["id"], "latin1");
}

// Every member name in `doc`, at any depth.
void collect_members(const json& doc, std::set<std::string>& out) {
  if (doc.is_object()) {
    for (const auto& [key, value] : doc.items()) {
      out.insert(key);
      collect_members(value, out);
    }
  } else if (doc.is_array()) {
    for (const auto& value : doc) collect_members(value, out);
  }
}

// docs/api.md is the contract clients read: every member the daemon's GET /api/v1/status sends, at
// any depth, is named there (as `member`, `parent.member`, `member[]` or "member").
TEST(NodeApi, TheApiDocumentNamesEveryMemberTheDaemonSends) {
  NodeView view;
  view.node = "gpu-node-1";
  view.device_plugin = true;
  view.plugins = {{"gpuslice.io/vram", RegistrationState::Registered, 1}};
  view.podresources = AttributionState::Down;
  view.podresources_error = "no socket";
  view.containers_removed = 2;
  view.gpu_error = "probe failed";
  GpuInfo gpu;
  gpu.uuid = "GPU-11111111-aaaa-4000-8000-000000000000";
  gpu.utilization_percent = 3;
  view.gpus.push_back(gpu);
  ContainerView c;
  c.id = "alloc-1";
  c.owner = {"ml", "trainer-0", "main"};
  c.has_state = true;
  c.priority = Priority::Normal;
  c.limits.memory = "8Gi";
  ContainerDevice d;
  d.uuid = gpu.uuid;
  c.devices.push_back(d);
  ContainerProcess p;
  p.pid = 7;
  p.used_bytes = {1};
  c.processes.push_back(p);
  view.containers.push_back(c);
  mps::MpsReport mps_report;
  mps_report.state = mps::MpsState::Restarting;
  mps_report.reason = "control daemon pid 12 ended";
  mps_report.control_pid = 13;
  mps_report.manager_pid = 1;
  mps_report.server_pids = {14};
  view.mps = mps_report;
  std::set<std::string> members;
  collect_members(json::parse(status_json(view, "1.2.3")), members);

  const std::string doc = test::read_file(std::string(GPUSLICE_NODE_FIXTURES) + "/../../../docs/api.md");
  ASSERT_FALSE(doc.empty());
  for (const std::string& member : members) {
    const std::regex named("[`\".]" + member + "[`\"\\[.]");
    EXPECT_TRUE(std::regex_search(doc, named)) << "docs/api.md does not describe member '" << member << "'";
  }
}

TEST(NodeApi, WithoutATokenTheApiIsClosed) {
  test::TempDir dir;
  test::FakeClock clock;
  HostLayout layout(dir / "root");
  Collector collector(layout, nullptr, clock);
  ApiOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  ApiServer server(options, layout, collector);
  auto port = server.start();
  ASSERT_TRUE(port.ok());
  httplib::Client client("127.0.0.1", *port);
  auto res = client.Get("/api/v1/status", {{"Authorization", "Bearer "}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_NE(res->body.find("no token configured"), std::string::npos);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  parse_exposition(metrics->body);
}

TEST(NodeApi, ConstantTimeEquals) {
  EXPECT_TRUE(constant_time_equals("abc", "abc"));
  EXPECT_FALSE(constant_time_equals("abc", "abd"));
  EXPECT_FALSE(constant_time_equals("abc", "abcd"));
  EXPECT_FALSE(constant_time_equals("", "a"));
  EXPECT_TRUE(constant_time_equals("", ""));
}

TEST(Metrics, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escape_label_value("plain"), "plain");
}

// `gpuslice status --node` reads this API by default on a node: it must lose nothing the state file
// says, or the view shows "-" for the device and the share, and "device -: requested ..." lines.
TEST_F(NodeApiTest, StatusThroughTheApiKeepsTheDeviceRecordAndEachProcessShare) {
  auto res = client_->Get("/api/v1/status", auth());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const auto c1 = json::parse(res->body)["containers"][0];
  EXPECT_EQ(c1["devices"][0]["record"], dev_);
  const auto& pd = c1["processes"][0]["devices"][0];
  EXPECT_EQ(pd["record"], dev_);
  EXPECT_EQ(pd["busy_ns"], 250'000'000u);
  EXPECT_EQ(pd["compute_share"], 1.0) << "the only process holds all of the container's device time";
}

// The state file is the tenant's: a UUID carrying terminal escapes is that container's error, not
// a string the daemon relays to every operator's terminal.
TEST_F(NodeApiTest, AStateFileUuidWithTerminalEscapesIsThatContainersError) {
  std::filesystem::create_directories(layout_.config_dir("evil"));
  auto opened = shm::Ledger::open(layout_.state_file("evil"), shm::Ledger::Mode::Process);
  ASSERT_TRUE(opened.ok()) << opened.error();
  auto evil = std::move(opened).value();
  ASSERT_TRUE(evil->attach_device("\x1b]0;owned\x07\x1b[2J", 0, 1ULL << 30, 512ULL << 20, 0).ok());
  collector_->refresh();
  auto res = client_->Get("/api/v1/status", auth());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->body.find("owned"), std::string::npos) << res->body;
  bool seen = false;
  const json doc = json::parse(res->body);
  for (const auto& c : doc["containers"]) {
    if (c["id"] != "evil") continue;
    seen = true;
    EXPECT_EQ(c["state"], "error");
    EXPECT_TRUE(c["devices"].empty());
    ASSERT_TRUE(c["error"].is_string());
    EXPECT_NE(c["error"].get<std::string>().find("no valid GPU UUID"), std::string::npos) << c["error"];
  }
  EXPECT_TRUE(seen) << res->body;
}

// A container whose process had its node channel refused: a metric to alert on and a member of the
// status, where it was only a line in that process's log.
TEST_F(NodeApiTest, ARefusedNodeChannelIsAMetricAndInTheStatus) {
  const std::string c1 = "container=\"\",gpuslice_allocation=\"c1\",namespace=\"\",node=\"node-1\",pod=\"\"";
  auto scrape = [&] {
    auto metrics = client_->Get("/metrics");
    EXPECT_TRUE(metrics);
    return metrics ? parse_exposition(metrics->body) : std::map<std::string, double>{};
  };
  auto before = scrape();
  ASSERT_EQ(before.count("gpuslice_container_node_channel_refused{" + c1 + "}"), 1u);
  EXPECT_EQ(before["gpuslice_container_node_channel_refused{" + c1 + "}"], 0.0);
  ledger_->note_node_channel_refused();
  collector_->refresh();
  EXPECT_EQ(scrape()["gpuslice_container_node_channel_refused{" + c1 + "}"], 1.0);
  auto res = client_->Get("/api/v1/containers/c1", auth());
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["node_channel_refused"], true) << res->body;
  ledger_->note_assignment(Priority::Low, true);  // what the container's watcher found
  collector_->refresh();
  res = client_->Get("/api/v1/containers/c1", auth());
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["assignment_refused"], true) << res->body;
  EXPECT_EQ(json::parse(res->body)["assigned_priority"], "low") << res->body;
}

// A state file hard-linked to another container's: PUT /limits on the one changed the other's
// quota, and the view showed the other's use as its own.
TEST_F(NodeApiTest, AStateFileHardLinkedToAnotherContainersIsRefused) {
  std::filesystem::create_directories(std::filesystem::path(layout_.state_file("c2-idle")).parent_path());
  ASSERT_EQ(::link(layout_.state_file("c1").c_str(), layout_.state_file("c2-idle").c_str()), 0);
  auto res =
      client_->Put("/api/v1/containers/c2-idle/limits", auth(), R"({"memory":"64Mi"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(ledger_->quota(dev_), 512ULL << 20) << "c2-idle's PUT /limits changed c1's quota: " << res->body;
  EXPECT_NE(res->body.find("links"), std::string::npos) << res->body;
  EXPECT_EQ(json::parse(res->body)["live_devices_updated"], 0);

  collector_->refresh();
  auto status = client_->Get("/api/v1/containers/c2-idle", auth());
  ASSERT_TRUE(status);
  auto doc = json::parse(status->body);
  EXPECT_TRUE(doc["devices"].empty()) << status->body;
  ASSERT_TRUE(doc["error"].is_string()) << status->body;
  EXPECT_NE(doc["error"].get<std::string>().find("links"), std::string::npos) << status->body;
}

}  // namespace
}  // namespace gpuslice::node
