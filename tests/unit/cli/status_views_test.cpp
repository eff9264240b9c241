// status --json in the shared shape (with rates when watching), and the node-wide views: a node
// root read directly, and the daemon's API (a stand-in server that answers what the daemon would).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "shared_state/layout.h"

namespace {

using namespace gpuslice::cli_test;
using nlohmann::json;

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> docs;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) docs.push_back(json::parse(line));
  }
  return docs;
}

TEST_F(CliTest, StatusJsonWhenWatchingAddsTheRatesOfEachInterval) {
  auto ledger = make_state();
  ledger->count_refusal(0);
  Outcome o =
      run({"status", "--watch", "--json", "--file", state_, "--interval", "0.2", "--iterations", "2"});
  ASSERT_EQ(o.status, 0) << o.err;
  auto docs = json_lines(o.out);
  ASSERT_EQ(docs.size(), 2u) << o.out;
  EXPECT_EQ(docs[0]["schema_version"], 1);
  EXPECT_TRUE(docs[0]["devices"][0]["compute_utilization_ratio"].is_null()) << "no interval yet";
  EXPECT_TRUE(docs[0]["devices"][0]["refused_allocations_in_interval"].is_null());
  EXPECT_EQ(docs[1]["devices"][0]["refused_allocations"], 1);
  EXPECT_EQ(docs[1]["devices"][0]["refused_allocations_in_interval"], 0);
  EXPECT_DOUBLE_EQ(docs[1]["devices"][0]["compute_utilization_ratio"].get<double>(), 0.0);
  // The members status --json always had are still there.
  for (const char* key : {"record", "cuda_index", "uuid", "total_bytes", "quota_bytes", "used_bytes",
                          "compute_limit_percent", "refused_allocations"}) {
    EXPECT_TRUE(docs[1]["devices"][0].contains(key)) << key;
  }
  EXPECT_EQ(docs[1]["path"], state_);
  EXPECT_EQ(docs[1]["layout_version"], gpuslice::shm::layout::kLayoutVersion);
}

TEST_F(CliTest, SetPriorityIsShownByStatusWithTheHeldBackTime) {
  auto ledger = make_state();
  Outcome before = run({"status", "--json", "--file", state_});
  ASSERT_EQ(before.status, 0) << before.err;
  EXPECT_TRUE(json::parse(before.out)["priority"].is_null()) << "never set";
  EXPECT_FALSE(contains(run({"status", "--file", state_}).out, "Priority:"));

  Outcome set = run({"set", "--file", state_, "--priority", "HIGH"});
  ASSERT_EQ(set.status, 0) << set.err;
  EXPECT_TRUE(contains(set.out, "priority not set -> high")) << set.out;
  EXPECT_EQ(ledger->priority(), gpuslice::Priority::High);
  ledger->add_held_back_ns(2'500'000'000);
  Outcome text = run({"status", "--file", state_});
  EXPECT_TRUE(contains(text.out, "Priority: high, held back 2.500 s")) << text.out;
  json doc = json::parse(run({"status", "--json", "--file", state_}).out);
  EXPECT_EQ(doc["priority"], "high");
  EXPECT_EQ(doc["held_back_ns"], 2'500'000'000u);

  Outcome bad = run({"set", "--file", state_, "--priority", "urgent"});
  EXPECT_EQ(bad.status, 2) << bad.out << bad.err;
  EXPECT_TRUE(contains(bad.err, "--priority 'urgent'")) << bad.err;
  EXPECT_EQ(ledger->priority(), gpuslice::Priority::High) << "a refused value changes nothing";
}

class NodeStatusTest : public CliTest {
 protected:
  // <root>/containers/<id>/state/state with one device and `used` bytes held by this process.
  std::unique_ptr<Ledger> make_container(const std::string& id, std::uint64_t used) {
    std::string state_dir = dir_ + "/root/containers/" + id + "/state";
    std::filesystem::create_directories(state_dir);
    std::filesystem::create_directories(dir_ + "/root/containers/" + id + "/config");
    std::ofstream(dir_ + "/root/containers/" + id + "/config/limits") << "GPUSLICE_MEMORY_LIMIT=4Gi\n";
    auto ledger = std::move(Ledger::open(state_dir + "/state", Ledger::Mode::Process)).value();
    EXPECT_TRUE(ledger->register_process().ok());
    EXPECT_EQ(ledger->attach_device(kUuid0, 0, 80 * kGi, 4 * kGi, 0).value(), 0);
    EXPECT_TRUE(ledger->try_reserve(0, used));
    return ledger;
  }
};

TEST_F(NodeStatusTest, StatusNodeShowsEveryContainerOfANodeRoot) {
  auto a = make_container("alpha", kGi);
  auto b = make_container("beta", 2 * kGi);
  std::filesystem::create_directories(dir_ + "/root/containers/gamma");  // no process has used CUDA yet
  Outcome o = run({"status", "--node", dir_ + "/root", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  json doc = json::parse(o.out);
  ASSERT_EQ(doc["containers"].size(), 3u) << o.out;
  EXPECT_EQ(doc["containers"][0]["id"], "alpha");
  EXPECT_EQ(doc["containers"][0]["devices"][0]["used_bytes"], kGi);
  EXPECT_EQ(doc["containers"][0]["limits"]["memory"], "4Gi");
  EXPECT_EQ(doc["containers"][1]["id"], "beta");
  EXPECT_EQ(doc["containers"][1]["devices"][0]["used_bytes"], 2 * kGi);
  EXPECT_EQ(doc["containers"][2]["has_state"], false);

  Outcome text = run({"status", "--node=" + dir_ + "/root"});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "== Container alpha")) << text.out;
  EXPECT_TRUE(contains(text.out, "== Container beta")) << text.out;
  EXPECT_TRUE(contains(text.out, "2 GiB")) << text.out;
  EXPECT_TRUE(contains(text.out, "No state yet")) << text.out;

  Outcome env = run({"status", "--node", "--json"}, {"GPUSLICE_NODE_ROOT=" + dir_ + "/root"});
  ASSERT_EQ(env.status, 0) << env.err;
  EXPECT_EQ(json::parse(env.out)["containers"].size(), 3u);
}

TEST_F(NodeStatusTest, StatusNodeShowsTheMpsStateTheManagerWrote) {
  auto a = make_container("alpha", kGi);
  std::filesystem::create_directories(dir_ + "/mps");
  std::ofstream(dir_ + "/mps/state.json")
      << R"({"state":"refused","reason":"GPU 0 has MIG mode on","restarts":3,"server_pids":[],)"
      << R"("pipe_dir":"/run/gpuslice/mps/pipe","manager_pid":1})";
  const std::vector<std::string> env = {"GPUSLICE_MPS_DIR=" + dir_ + "/mps"};
  Outcome text = run({"status", "--node", dir_ + "/root"}, env);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "MPS: refused: GPU 0 has MIG mode on (restarts 3)")) << text.out;
  EXPECT_TRUE(contains(text.out, "== Container alpha")) << text.out;
  Outcome doc = run({"status", "--node", dir_ + "/root", "--json"}, env);
  ASSERT_EQ(doc.status, 0) << doc.err;
  EXPECT_EQ(json::parse(doc.out)["mps"]["reason"], "GPU 0 has MIG mode on");
  Outcome without = run({"status", "--node", dir_ + "/root"}, {"GPUSLICE_MPS_DIR=" + dir_ + "/none"});
  EXPECT_FALSE(contains(without.out, "MPS:")) << "no manager, no MPS line";

  // The manager that wrote a running state is gone (pid 2^30 - 1 does not run): said, exit 1.
  std::ofstream(dir_ + "/mps/state.json")
      << R"({"state":"running","control_pid":55,"manager_pid":1073741823})";
  Outcome stale = run({"mps", "status"}, env);
  EXPECT_EQ(stale.status, 1);
  EXPECT_TRUE(contains(stale.out, "MPS: running")) << stale.out;
  EXPECT_TRUE(contains(stale.out, "stale: the manager (pid 1073741823) that wrote this no longer runs"))
      << stale.out;
  Outcome none = run({"mps", "status", "--dir", dir_ + "/none"});
  EXPECT_EQ(none.status, 1);
  EXPECT_TRUE(contains(none.out, "MPS: off (no manager has written")) << none.out;
  EXPECT_EQ(run({"mps", "dance"}).status, 2);
}

TEST_F(NodeStatusTest, TopShowsTheWholeNodeWhenTheNodeRootIsReadable) {
  auto a = make_container("alpha", kGi);
  Outcome o = run({"top", "--iterations", "1"}, {"GPUSLICE_NODE_ROOT=" + dir_ + "/root"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(contains(o.out, "== Container alpha")) << o.out;
  Outcome own = run({"top", "--iterations", "1", "--file", state_}, {"GPUSLICE_NODE_ROOT=" + dir_ + "/root"});
  EXPECT_EQ(own.status, 1) << "--file names the container's own state, which does not exist: " << own.out;
}

TEST_F(NodeStatusTest, StatusNodeOfAMissingRootIsAnError) {
  Outcome o = run({"status", "--node", dir_ + "/nothing"});
  EXPECT_EQ(o.status, 1);
  EXPECT_TRUE(contains(o.err, dir_ + "/nothing/containers")) << o.err;
}

// The library and the daemon read the limits file with config::parse_limits_file (spaces around
// '=', quoted values): the node view must show what they enforce, not the raw text.
TEST_F(NodeStatusTest, StatusNodeReadsAQuotedLimitsFileAsTheLibraryDoes) {
  auto a = make_container("alpha", kGi);
  std::ofstream(dir_ + "/root/containers/alpha/config/limits")
      << "# caps\n  GPUSLICE_MEMORY_LIMIT = \"8Gi\"\nGPUSLICE_COMPUTE_LIMIT='30'\n";
  Outcome o = run({"status", "--node", dir_ + "/root", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  json doc = json::parse(o.out);
  EXPECT_EQ(doc["containers"][0]["limits"]["memory"], "8Gi") << o.out;
  EXPECT_EQ(doc["containers"][0]["limits"]["compute"], "30") << o.out;
  EXPECT_TRUE(doc["containers"][0]["error"].is_null()) << o.out;
}

// A limits file the library cannot parse makes its CUDA calls fail; the view says why instead of
// showing the malformed text as a cap.
TEST_F(NodeStatusTest, StatusNodeReportsAMalformedLimitsFile) {
  auto a = make_container("alpha", kGi);
  std::ofstream(dir_ + "/root/containers/alpha/config/limits") << "GPUSLICE_MEMORY_LIMIT=lots\n";
  Outcome o = run({"status", "--node", dir_ + "/root", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  json doc = json::parse(o.out);
  EXPECT_TRUE(doc["containers"][0]["limits"]["memory"].is_null()) << o.out;
  ASSERT_TRUE(doc["containers"][0]["error"].is_string()) << o.out;
  EXPECT_TRUE(contains(doc["containers"][0]["error"].get<std::string>(), "/config/limits")) << o.out;
}

// A one-request HTTP server on loopback answering `body`; records the request it got.
class FakeDaemon {
 public:
  explicit FakeDaemon(std::string body) : body_(std::move(body)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(fd_, 1);
    thread_ = std::thread([this] {
      int client = accept(fd_, nullptr, nullptr);
      if (client < 0) return;
      char buffer[8192];
      ssize_t n = recv(client, buffer, sizeof buffer, 0);
      if (n > 0) request_.assign(buffer, static_cast<std::size_t>(n));
      std::string response = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(body_.size()) + "\r\n\r\n" + body_;
      send(client, response.data(), response.size(), MSG_NOSIGNAL);
      close(client);
    });
  }
  ~FakeDaemon() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }
  std::string request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  std::string body_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::string request_;
};

TEST_F(NodeStatusTest, StatusApiReadsTheDaemonWithItsToken) {
  json container = {{"id", "ctr-1"},
                    {"has_state", true},
                    {"priority", "low"},
                    {"held_back_ns", 2'500'000'000ULL},
                    {"error", nullptr},
                    {"pod", {{"namespace", "ml"}, {"name", "trainer-0"}, {"container", "main"}}},
                    {"devices",
                     {{{"record", 0},
                       {"uuid", kUuid0},
                       {"total_bytes", 80 * kGi},
                       {"quota_bytes", 8 * kGi},
                       {"used_bytes", 3 * kGi},
                       {"compute_limit_percent", 30},
                       {"refused_allocations", 2},
                       {"compute_utilization_ratio", 0.25}}}},
                    {"processes",
                     {{{"pid", 12},
                       {"host_pid", 3456},
                       {"command", "python"},
                       {"devices", {{{"record", 0}, {"used_bytes", 3 * kGi}}}}}}}};
  json body = {
      {"version", "0.1.0"},
      {"gpus", {{{"index", 0}, {"uuid", kUuid0}, {"name", "NVIDIA H100"}, {"memory_total_bytes", 80 * kGi}}}},
      {"containers", {container}}};
  FakeDaemon daemon(body.dump());
  std::ofstream(dir_ + "/token") << "s3cret\n";
  Outcome o = run({"status", "--api", "http://127.0.0.1:" + std::to_string(daemon.port()), "--token-file",
                   dir_ + "/token"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(contains(daemon.request(), "Authorization: Bearer s3cret\r\n")) << daemon.request();
  EXPECT_TRUE(contains(daemon.request(), "GET /api/v1/status ")) << daemon.request();
  EXPECT_TRUE(contains(o.out, "== Container ctr-1  pod ml/trainer-0")) << o.out;
  EXPECT_TRUE(contains(o.out, "3 GiB")) << o.out;
  EXPECT_TRUE(contains(o.out, "3456")) << o.out;
  EXPECT_TRUE(contains(o.out, "Priority: low, held back 2.500 s")) << o.out;
}

std::string one_container_body(const std::string& id) {
  json container = {
      {"id", id}, {"has_state", false}, {"devices", json::array()}, {"processes", json::array()}};
  return json{{"version", "0.1.0"}, {"gpus", json::array()}, {"containers", {container}}}.dump();
}

// --node without ROOT reads the daemon's API when its token file is readable and it answers.
TEST_F(NodeStatusTest, StatusNodePrefersTheDaemonApiWithItsTokenFile) {
  auto a = make_container("on-disk", kGi);
  FakeDaemon daemon(one_container_body("from-api"));
  std::ofstream(dir_ + "/token") << "s3cret\n";
  Outcome o = run({"status", "--node", "--json"},
                  {"GPUSLICE_NODE_ROOT=" + dir_ + "/root", "GPUSLICE_NODE_TOKEN_FILE=" + dir_ + "/token",
                   "GPUSLICE_NODE_LISTEN=0.0.0.0:" + std::to_string(daemon.port())});
  ASSERT_EQ(o.status, 0) << o.err;
  json doc = json::parse(o.out);
  ASSERT_EQ(doc["source"], "http://127.0.0.1:" + std::to_string(daemon.port())) << o.out;
  ASSERT_EQ(doc["containers"].size(), 1u) << o.out;
  EXPECT_EQ(doc["containers"][0]["id"], "from-api");
  EXPECT_TRUE(contains(daemon.request(), "Authorization: Bearer s3cret\r\n")) << daemon.request();
}

// No daemon answers (or no token file): --node reads the root directly, as before.
TEST_F(NodeStatusTest, StatusNodeFallsBackToTheRootWhenTheDaemonDoesNotAnswer) {
  auto a = make_container("on-disk", kGi);
  std::ofstream(dir_ + "/token") << "s3cret\n";
  int closed_port = 0;
  {
    FakeDaemon gone(one_container_body("unused"));  // a port nothing listens on once it is closed
    closed_port = gone.port();
  }
  Outcome o = run({"status", "--node", "--json"},
                  {"GPUSLICE_NODE_ROOT=" + dir_ + "/root", "GPUSLICE_NODE_TOKEN_FILE=" + dir_ + "/token",
                   "GPUSLICE_NODE_LISTEN=127.0.0.1:" + std::to_string(closed_port)});
  ASSERT_EQ(o.status, 0) << o.err;
  json doc = json::parse(o.out);
  EXPECT_EQ(doc["source"], dir_ + "/root") << o.out;
  ASSERT_EQ(doc["containers"].size(), 1u) << o.out;
  EXPECT_EQ(doc["containers"][0]["id"], "on-disk");
  EXPECT_EQ(o.err, "") << "an absent daemon is no error";
}

TEST_F(NodeStatusTest, StatusApiWithoutATokenFileIsAUsageError) {
  Outcome o = run({"status", "--api", "http://127.0.0.1:1"});
  EXPECT_EQ(o.status, 2);
  EXPECT_TRUE(contains(o.err, "--token-file")) << o.err;
}

}  // namespace

// ---- a tenant's bytes on the operator's terminal ----

// What a terminal takes as a command: ESC (OSC title/clipboard, CSI clear), BEL, and the C1 CSI
// in either encoding (raw 0x9B, UTF-8 C2 9B).
bool has_terminal_control(const std::string& text) {
  return text.find('\x1b') != std::string::npos || text.find('\x07') != std::string::npos ||
         text.find('\x9b') != std::string::npos;
}

constexpr char kTitleAndClear[] = "\x1b]0;owned\x07\x1b[2J\x1b]52;c;cHduZWQ=\x07";

// The tenant writes its state file: a GPU UUID that set the operator's terminal title, cleared the
// screen and wrote the clipboard when `gpuslice status` printed it.
TEST_F(CliTest, StatusRefusesAStateFileUuidCarryingTerminalEscapes) {
  auto ledger = std::move(Ledger::open(state_, Ledger::Mode::Process)).value();
  ASSERT_TRUE(ledger->register_process().ok());
  ASSERT_TRUE(ledger->attach_device(kTitleAndClear, 0, 80 * kGi, 8 * kGi, 0).ok());
  Outcome o = run({"status", "--file", state_});
  EXPECT_EQ(o.status, 1) << o.out;
  EXPECT_FALSE(has_terminal_control(o.out + o.err)) << o.out << o.err;
  EXPECT_TRUE(contains(o.err, "no valid GPU UUID")) << o.err;
  Outcome top = run({"top", "--iterations", "1", "--file", state_});
  EXPECT_FALSE(has_terminal_control(top.out + top.err)) << top.out << top.err;
}

TEST_F(NodeStatusTest, StatusNodeShowsABadUuidAsThatContainersErrorAndTheOthersAsBefore) {
  auto good = make_container("alpha", kGi);
  std::filesystem::create_directories(dir_ + "/root/containers/evil/state");
  auto evil =
      std::move(Ledger::open(dir_ + "/root/containers/evil/state/state", Ledger::Mode::Process)).value();
  ASSERT_TRUE(evil->register_process().ok());
  ASSERT_TRUE(evil->attach_device(kTitleAndClear, 0, 80 * kGi, 8 * kGi, 0).ok());
  Outcome o = run({"status", "--node", dir_ + "/root"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_FALSE(has_terminal_control(o.out + o.err)) << o.out << o.err;
  EXPECT_TRUE(
      contains(o.out, "== Container evil\nerror: device record 0 of the state file has no valid GPU UUID"))
      << o.out;
  EXPECT_TRUE(contains(o.out, kUuid0)) << "the other container as before: " << o.out;
}

// The daemon's JSON escapes what a tenant wrote; the CLI decoded it and printed it raw again.
TEST_F(NodeStatusTest, StatusApiDoesNotPrintTheTerminalEscapesTheDaemonRelays) {
  const std::string c1_csi =
      "\xc2\x9b"
      "2J";  // U+009B: CSI on a UTF-8 terminal
  json container = {{"id", "ctr-1"},
                    {"has_state", true},
                    {"pod", {{"namespace", std::string("ml") + kTitleAndClear}, {"name", "p" + c1_csi}}},
                    {"priority", "low\x1b[31m"},
                    {"devices",
                     {{{"record", 0},
                       {"uuid", kUuid0},
                       {"total_bytes", 80 * kGi},
                       {"quota_bytes", 8 * kGi},
                       {"used_bytes", 3 * kGi}}}},
                    {"processes",
                     {{{"pid", 12},
                       {"command", std::string("python ") + kTitleAndClear + c1_csi},
                       {"devices", {{{"record", 0}, {"used_bytes", 3 * kGi}}}}}}}};
  json failed = {{"id", "ctr-2"}, {"has_state", true}, {"error", std::string("bad ") + kTitleAndClear}};
  json bad_uuid = {{"id", "ctr-3"},
                   {"has_state", true},
                   {"devices", {{{"record", 0}, {"uuid", kTitleAndClear}, {"used_bytes", 0}}}}};
  json body = {{"gpus", {{{"index", 0}, {"uuid", kUuid0}, {"name", std::string("H100") + kTitleAndClear}}}},
               {"containers", {container, failed, bad_uuid}}};
  FakeDaemon daemon(body.dump());
  std::ofstream(dir_ + "/token") << "s3cret\n";
  Outcome o = run({"status", "--api", "http://127.0.0.1:" + std::to_string(daemon.port()), "--token-file",
                   dir_ + "/token"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_FALSE(has_terminal_control(o.out + o.err)) << o.out << o.err;
  EXPECT_TRUE(contains(o.out, "python ?]0;owned??[2J?]52;c;cHduZWQ=??2J")) << o.out;
  EXPECT_TRUE(
      contains(o.out, "== Container ctr-3\nerror: device record 0 of the state file has no valid GPU UUID"))
      << o.out;
}

// The daemon's DRA driver (its API's "dra" object): its layout, why it is poorer than asked, its
// failing publishes and Events, in the text view with the API server's text escaped, and in --json
// as the API wrote it.
json degraded_dra() {
  return {{"leader", true},
          {"published", true},
          {"layout", "whole-gpus-only"},
          {"fractions_schedulable", false},
          {"whole_gpu_devices", false},
          {"degraded",
           {{"reason", "GpusliceFractionsNotEnforceable"},
            {"message", std::string("each GPU goes to one claim") + kTitleAndClear}}},
          {"node_events", 1},
          {"node_event_error", nullptr},
          {"pool_generation", 7},
          {"publishing",
           {{"failing", true},
            {"cause", "write-rejected"},
            {"error", std::string("creating ResourceSlice node-a-gpuslice-io: HTTP 422: bad\x1b[2J field")},
            {"failures", 4},
            {"consecutive_failures", 3},
            {"next_retry_ms", 8000}}}};
}

TEST_F(NodeStatusTest, StatusApiShowsTheDraDriversLayoutAndTroubleEscaped) {
  json body = json::parse(one_container_body("ctr-1"));
  body["dra"] = degraded_dra();
  std::ofstream(dir_ + "/token") << "s3cret\n";
  FakeDaemon text_daemon(body.dump());
  Outcome o = run({"status", "--api", "http://127.0.0.1:" + std::to_string(text_daemon.port()),
                   "--token-file", dir_ + "/token"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_FALSE(has_terminal_control(o.out + o.err)) << o.out << o.err;
  EXPECT_TRUE(
      contains(o.out,
               "DRA: leader, ResourceSlices published (pool generation 7), layout whole-gpus-only, no "
               "whole-GPU devices\n"))
      << o.out;
  EXPECT_TRUE(contains(o.out, "  degraded (GpusliceFractionsNotEnforceable): each GPU goes to one claim?]0;"))
      << o.out;
  EXPECT_TRUE(
      contains(o.out,
               "  publishing FAILING (write-rejected, 3 in a row, 4 in all; next try in 8.0 s): creating "
               "ResourceSlice node-a-gpuslice-io: HTTP 422: bad?[2J field\n"))
      << o.out;
  EXPECT_TRUE(contains(o.out, "  Events on the Node: 1 written\n")) << o.out;

  FakeDaemon json_daemon(body.dump());
  Outcome j = run({"status", "--json", "--api", "http://127.0.0.1:" + std::to_string(json_daemon.port()),
                   "--token-file", dir_ + "/token"});
  ASSERT_EQ(j.status, 0) << j.err;
  EXPECT_EQ(json::parse(j.out)["dra"], degraded_dra()) << j.out;
}

TEST_F(NodeStatusTest, StatusApiOfADaemonWithoutDraShowsNoDraLineAndAMalformedOneIsAnError) {
  std::ofstream(dir_ + "/token") << "s3cret\n";
  FakeDaemon plain(one_container_body("ctr-1"));
  Outcome o = run({"status", "--api", "http://127.0.0.1:" + std::to_string(plain.port()), "--token-file",
                   dir_ + "/token"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_FALSE(contains(o.out, "DRA:")) << o.out;

  json body = json::parse(one_container_body("ctr-1"));
  body["dra"] = degraded_dra();
  body["dra"]["publishing"]["failures"] = "four";
  FakeDaemon bad(body.dump());
  Outcome b = run(
      {"status", "--api", "http://127.0.0.1:" + std::to_string(bad.port()), "--token-file", dir_ + "/token"});
  EXPECT_NE(b.status, 0);
  EXPECT_TRUE(contains(b.err, "dra.publishing.failures is of the wrong type")) << b.err;
}

// The default node view goes through the daemon: what it sends is shown as the state file's view is.
TEST_F(NodeStatusTest, StatusApiShowsTheDeviceRecordAndEachProcessShare) {
  json container = {
      {"id", "ctr-1"},
      {"has_state", true},
      {"devices",
       {{{"record", 1},
         {"uuid", kUuid0},
         {"total_bytes", 80 * kGi},
         {"quota_bytes", 2 * kGi},
         {"requested_quota_bytes", 8 * kGi},
         {"quota_cap_bytes", 2 * kGi},
         {"used_bytes", kGi}}}},
      {"processes",
       {{{"pid", 12},
         {"command", "python"},
         {"devices", {{{"record", 1}, {"used_bytes", kGi}, {"busy_ns", 5}, {"compute_share", 0.5}}}}}}}};
  FakeDaemon daemon(json{{"gpus", json::array()}, {"containers", {container}}}.dump());
  std::ofstream(dir_ + "/token") << "s3cret\n";
  Outcome o = run({"status", "--api", "http://127.0.0.1:" + std::to_string(daemon.port()), "--token-file",
                   dir_ + "/token"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(contains(o.out, "device 1: requested 8 GiB, capped to 2 GiB")) << o.out;
  EXPECT_TRUE(contains(o.out, "\n 12         -    1  1 GiB    50%  python\n")) << o.out;
}

// A process whose node channel was refused says so in the state file: status shows it (it was only
// a line in that process's log).
TEST_F(CliTest, StatusSaysWhenANodeChannelWasRefused) {
  auto ledger = make_state();
  EXPECT_FALSE(contains(run({"status", "--file", state_}).out, "Node channel"));
  EXPECT_EQ(json::parse(run({"status", "--json", "--file", state_}).out)["node_channel_refused"], false);
  ledger->note_node_channel_refused();
  Outcome text = run({"status", "--file", state_});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "Node channel: REFUSED")) << text.out;
  EXPECT_EQ(json::parse(run({"status", "--json", "--file", state_}).out)["node_channel_refused"], true);
}

// `set --memory unlimited` under a cap: the request is kept, the cap stays enforced, and set says so,
// in its exit status too (3), so `gpuslice set --memory unlimited && big_job` does not go on as if
// it had been granted.
TEST_F(CliTest, SetUnlimitedUnderACapSaysTheCapHoldsItsRequest) {
  auto ledger = make_state();
  ledger->set_caps(0, {kGi, gpuslice::shm::kNoComputeLimit});  // as the container's processes record it
  Outcome o = run({"set", "--file", state_, "--device", "0", "--memory", "unlimited"});
  EXPECT_EQ(o.status, 3) << "a cap held the request: " << o.out << o.err;
  EXPECT_TRUE(contains(o.err, "gpuslice set: the container's limits file holds 1 of the limits asked for"))
      << o.err;
  EXPECT_TRUE(contains(o.out,
                       "memory quota 1 GiB -> 1 GiB (requested unlimited; the container's cap is 1 GiB, "
                       "so 1 GiB stays enforced)"))
      << o.out;
  EXPECT_EQ(ledger->quota(0), kGi);
}
