// The API side against a fake API server on loopback (cpp-httplib) that validates every object it
// is sent against the pinned resource.k8s.io/v1 and coordination.k8s.io/v1 schemas (the Kubernetes
// API models the chart checks install), and that can be slow, flaky or lying on demand.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "../test_util.h"
#include "dra/v1/api.grpc.pb.h"
#include "dra_test_util.h"
#include "node/api/http_api.h"
#include "node/dra/api_client.h"
#include "node/dra/claim_preparer.h"
#include "node/dra/node_event.h"
#include "node/dra/slice_publisher.h"

namespace gpuslice::node::dra {
namespace {

using nlohmann::json;
namespace v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;

class FakeApiServer {
 public:
  std::mutex mutex;
  std::map<std::string, json> slices, leases, claims;
  std::vector<std::string> schema_failures;  // every object the schema refused
  std::vector<std::string> authorizations;
  std::vector<std::string> content_types;
  std::map<std::string, int> writes;  // "POST slices" -> count
  int version = 100;
  int fail_next = 0;        // answer 503 to this many requests
  int slow_ms = 0;          // wait before answering
  bool gone_watch = false;  // answer watches with a 410 ERROR event
  bool lie_huge = false;    // answer claims with a body larger than any claim
  // "POST leases", "POST slices": the next such request is carried out, and its answer cut off
  // after the headers (the connection closes), as a reply lost on the way: the client sees a
  // failed request however fast or slow the machine is.
  std::set<std::string> lose_answer;
  // Validate written objects against the pinned schemas where they are installed (a python process
  // per new object, about 0.3 s: harness time, not the API server's).
  std::atomic<bool> validate{true};
  // DRAPartitionableDevices of the API server: off, it drops sharedCounters and consumesCounters
  // from what it stores, as the API server drops the fields of a disabled feature.
  bool partitionable_gate = true;
  // DRAConsumableCapacity: off (the 1.34 default), it drops allowMultipleAllocations and the
  // capacities' requestPolicy.
  bool consumable_gate = true;
  // Kubernetes 1.34 with DRAPartitionableDevices: a device may consume only counter sets of its own
  // slice (422 otherwise), and devices and counter sets may share a slice. false: 1.35+ rules.
  bool counters_beside_only = false;
  // A 422 with this message (and the write's number, so that no two are alike) for every write of
  // the slice with this name (dry runs pass).
  std::string reject_slice, reject_message;
  int list_status = 0;  // answer lists of slices with this status (0: 200)
  // core/v1 Events as created, and the status to answer their creates with instead (0: as the API
  // server would: 201, or 422 for an Event its validation refuses).
  std::vector<json> events;
  int events_status = 0;
  std::atomic<int> requests{0};
  // Every GET (reads, lists, watches) waits this long before it is handled, without holding `mutex`:
  // an API server busy with reads, as a thundering herd of lists makes it. `reads_waiting` counts
  // the GETs waiting now.
  std::atomic<int> read_delay_ms{0};
  std::atomic<int> reads_waiting{0};
  std::vector<std::string> lease_requests;  // "GET", "PUT", "POST" of Leases, in order

  FakeApiServer() {
    server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      ++requests;
      if (req.method == "GET" && read_delay_ms > 0) {
        ++reads_waiting;
        std::unique_lock delay_lock(delay_mutex_);
        delay_cv_.wait_for(delay_lock, std::chrono::milliseconds(read_delay_ms.load()),
                           [this] { return closing_; });
        --reads_waiting;
      }
      std::lock_guard lock(mutex);
      authorizations.push_back(req.get_header_value("Authorization"));
      if (req.path.rfind("/apis/coordination.k8s.io/", 0) == 0) lease_requests.push_back(req.method);
      if (slow_ms) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
      if (fail_next > 0) {
        --fail_next;
        res.status = 503;
        res.set_content(R"({"kind":"Status","code":503,"message":"try later"})", "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    const std::string slices_path = "/apis/resource.k8s.io/v1/resourceslices";
    server_.Get(slices_path, [this](const httplib::Request& req, httplib::Response& res) {
      if (req.has_param("watch")) return watch(req, res);
      std::lock_guard lock(mutex);
      if (list_status != 0)
        return reply(res, list_status,
                     {{"kind", "Status"}, {"code", list_status}, {"message", "resourceslices is forbidden"}});
      json items = json::array();
      for (const auto& [name, s] : slices) items.push_back(s);
      reply(res, 200,
            {{"apiVersion", "resource.k8s.io/v1"},
             {"kind", "ResourceSliceList"},
             {"metadata", {{"resourceVersion", std::to_string(version)}}},
             {"items", items}});
    });
    server_.Post(slices_path, [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex);
      const bool dry = req.get_param_value("dryRun") == "All";
      json object = accept_slice(req, res, dry ? "DRYRUN slices" : "POST slices");
      if (object.is_null()) return;
      if (dry) return reply(res, 201, object);
      const std::string name = object["metadata"]["name"];
      if (slices.count(name)) return reply(res, 409, {{"kind", "Status"}, {"code", 409}});
      store(slices[name], object);
      reply_or_lose(res, "POST slices", 201, slices[name]);
    });
    server_.Get(slices_path + "/([a-z0-9.-]+)", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex);
      auto it = slices.find(req.matches[1]);
      if (it == slices.end()) return reply(res, 404, {{"kind", "Status"}, {"code", 404}});
      reply(res, 200, it->second);
    });
    server_.Put(slices_path + "/([a-z0-9.-]+)", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex);
      json object = accept_slice(req, res, "PUT slices");
      if (object.is_null()) return;
      update(slices, req.matches[1], object, res);
    });
    server_.Delete(slices_path + "/([a-z0-9.-]+)",
                   [this](const httplib::Request& req, httplib::Response& res) {
                     std::lock_guard lock(mutex);
                     ++writes["DELETE slices"];
                     slices.erase(req.matches[1]);
                     reply(res, 200, {{"kind", "Status"}, {"code", 200}});
                   });
    server_.Post("/api/v1/namespaces/([a-z0-9-]+)/events", [this](const httplib::Request& req,
                                                                  httplib::Response& res) {
      std::lock_guard lock(mutex);
      ++writes["POST events"];
      if (events_status != 0)
        return reply(res, events_status,
                     {{"kind", "Status"}, {"code", events_status}, {"message", "events is forbidden"}});
      json event = json::parse(req.body, nullptr, false);
      if (event.is_discarded() || !event.is_object())
        return reply(res, 400, {{"kind", "Status"}, {"code", 400}});
      const std::string broken = event_rule_errors(event, req.matches[1]);
      if (!broken.empty()) {
        schema_failures.push_back("POST events: " + broken);
        return reply(res, 422, {{"kind", "Status"}, {"code", 422}, {"message", broken}});
      }
      for (const auto& e : events)
        if (e["metadata"]["name"] == event["metadata"]["name"])
          return reply(res, 409, {{"kind", "Status"}, {"code", 409}});
      event["metadata"]["resourceVersion"] = std::to_string(++version);
      events.push_back(event);
      reply(res, 201, event);
    });
    const std::string leases_path = "/apis/coordination.k8s.io/v1/namespaces/([a-z0-9-]+)/leases";
    server_.Get(leases_path + "/([a-z0-9.-]+)", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex);
      auto it = leases.find(req.matches[2]);
      if (it == leases.end()) return reply(res, 404, {{"kind", "Status"}, {"code", 404}});
      reply(res, 200, it->second);
    });
    server_.Post(leases_path, [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex);
      json object = accept(req, res, "POST leases");
      if (object.is_null()) return;
      const std::string name = object["metadata"]["name"];
      if (leases.count(name)) return reply(res, 409, {{"kind", "Status"}, {"code", 409}});
      store(leases[name], object);
      reply_or_lose(res, "POST leases", 201, leases[name]);
    });
    server_.Put(leases_path + "/([a-z0-9.-]+)", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex);
      json object = accept(req, res, "PUT leases");
      if (object.is_null()) return;
      update(leases, req.matches[2], object, res);
    });
    server_.Get("/apis/resource.k8s.io/v1/namespaces/([a-z0-9-]+)/resourceclaims/([a-z0-9.-]+)",
                [this](const httplib::Request& req, httplib::Response& res) {
                  std::lock_guard lock(mutex);
                  if (lie_huge)
                    return res.set_content(std::string(16u << 20, ' ') + "{}", "application/json");
                  auto it = claims.find(std::string(req.matches[1]) + "/" + std::string(req.matches[2]));
                  if (it == claims.end())
                    return reply(res, 404, {{"kind", "Status"}, {"code", 404}, {"message", "not found"}});
                  reply(res, 200, it->second);
                });
    // Server-side apply of status.devices: the claim with the applied status must still be valid.
    server_.Patch("/apis/resource.k8s.io/v1/namespaces/([a-z0-9-]+)/resourceclaims/([a-z0-9.-]+)/status",
                  [this](const httplib::Request& req, httplib::Response& res) {
                    std::lock_guard lock(mutex);
                    ++writes["PATCH claims/status"];
                    content_types.push_back(req.get_header_value("Content-Type"));
                    auto it = claims.find(std::string(req.matches[1]) + "/" + std::string(req.matches[2]));
                    if (it == claims.end()) return reply(res, 404, {{"kind", "Status"}, {"code", 404}});
                    json patch = json::parse(req.body, nullptr, false);
                    if (patch.is_discarded()) return reply(res, 400, {{"kind", "Status"}, {"code", 400}});
                    json merged = it->second;
                    merged["status"]["devices"] = patch["status"]["devices"];
                    if (test::have_models()) {
                      const std::string errors = test::schema_errors(merged);
                      if (!errors.empty()) {
                        schema_failures.push_back("PATCH claims/status: " + errors);
                        return reply(res, 422, {{"kind", "Status"}, {"code", 422}, {"message", errors}});
                      }
                    }
                    it->second = merged;
                    reply(res, 200, merged);
                  });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeApiServer() {
    {
      std::lock_guard lock(delay_mutex_);
      closing_ = true;  // delayed reads end now, not at their delay
    }
    delay_cv_.notify_all();
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  static void reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(), "application/json");
  }
  // Called with `mutex` held.
  void reply_or_lose(httplib::Response& res, const std::string& key, int status, const json& body) {
    if (!lose_answer.erase(key)) return reply(res, status, body);
    res.status = status;
    const std::string text = body.dump();
    res.set_content_provider(text.size(), "application/json",
                             [](size_t, size_t, httplib::DataSink&) { return false; });
  }
  // Validates a written object; null (and a 422 answer, as the API server's) when the schema refuses it.
  json accept(const httplib::Request& req, httplib::Response& res, const std::string& what) {
    ++writes[what];
    json object = json::parse(req.body, nullptr, false);
    if (object.is_discarded()) {
      reply(res, 400, {{"kind", "Status"}, {"code", 400}});
      return nullptr;
    }
    if (validate && test::have_models()) {
      if (!validated_.count(req.body)) {
        const std::string errors = test::schema_errors(object);
        if (!errors.empty()) {
          schema_failures.push_back(what + ": " + errors);
          reply(res, 422, {{"kind", "Status"}, {"code", 422}, {"message", errors}});
          return nullptr;
        }
        validated_.insert(req.body);
      }
    }
    return object;
  }
  // A ResourceSlice: the schema, then what a disabled gate drops, then the API server's own rules.
  json accept_slice(const httplib::Request& req, httplib::Response& res, const std::string& what) {
    json object = accept(req, res, what);
    if (object.is_null()) return object;
    if (!partitionable_gate) {
      object["spec"].erase("sharedCounters");
      if (object["spec"].contains("devices"))
        for (auto& d : object["spec"]["devices"]) d.erase("consumesCounters");
    }
    if (!consumable_gate && object["spec"].contains("devices")) {
      for (auto& d : object["spec"]["devices"]) {
        d.erase("allowMultipleAllocations");
        if (d.contains("capacity"))
          for (auto& [name, c] : d["capacity"].items()) c.erase("requestPolicy");
      }
    }
    // Validation sees the object after the disabled fields were dropped, as the API server's.
    const std::string broken = counters_beside_only ? rules_of_1_34(object) : test::slice_rule_errors(object);
    if (!broken.empty()) {
      schema_failures.push_back(what + ": " + broken);
      reply(res, 422, {{"kind", "Status"}, {"code", 422}, {"message", broken}});
      return nullptr;
    }
    if (what != "DRYRUN slices" && !reject_slice.empty() && object["metadata"]["name"] == reject_slice) {
      reply(res, 422,
            {{"kind", "Status"},
             {"code", 422},
             {"message", reject_message + " (write " + std::to_string(writes[what]) + ")"}});
      return nullptr;
    }
    return object;
  }
  // What the API server's validation of a core/v1 Event without eventTime checks (ValidateEventCreate,
  // the legacy form every server from 1.20 on takes), plus the bounds events.k8s.io/v1 sets.
  static std::string event_rule_errors(const json& e, const std::string& path_namespace) {
    if (e.value("apiVersion", "") != "v1" || e.value("kind", "") != "Event") return "not a v1 Event";
    const json md = e.value("metadata", json::object());
    const std::string name = md.value("name", "");
    if (name.empty() || name.size() > 253 ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos)
      return "metadata.name: Invalid value: \"" + name + "\"";
    if (md.value("namespace", path_namespace) != path_namespace)
      return "metadata.namespace: does not match the request's namespace";
    const json involved = e.value("involvedObject", json::object());
    if (involved.value("kind", "").empty() || involved.value("name", "").empty())
      return "involvedObject: kind and name are required";
    // An Event about a cluster-scoped object (a Node) lives in "default" (or no namespace).
    if (involved.value("namespace", "").empty() && path_namespace != "default")
      return "involvedObject.namespace: Invalid value: \"\": does not match event.namespace";
    const std::string type = e.value("type", "");
    if (type != "Normal" && type != "Warning") return "type: Unsupported value: \"" + type + "\"";
    const std::string reason = e.value("reason", "");
    if (reason.empty() || reason.size() > 128) return "reason: 1-128 characters";
    if (e.value("message", "").size() > 1024) return "message: longer than 1024 characters";
    return "";
  }
  // 1.34's check with DRAPartitionableDevices (its message, as the issue saw it).
  static std::string rules_of_1_34(const json& slice) {
    const json& spec = slice.at("spec");
    std::set<std::string> sets;
    for (const auto& set : spec.value("sharedCounters", json::array()))
      sets.insert(set.at("name").get<std::string>());
    if (sets.size() > 8) return "spec.sharedCounters: Too many: must have at most 8 items";
    std::size_t i = 0;
    for (const auto& d : spec.value("devices", json::array())) {
      std::size_t j = 0;
      for (const auto& c : d.value("consumesCounters", json::array())) {
        const std::string set = c.at("counterSet");
        if (!sets.count(set))
          return "ResourceSlice.resource.k8s.io \"" + slice["metadata"].value("name", "") +
                 "\" is invalid: spec.devices[" + std::to_string(i) + "].consumesCounters[" +
                 std::to_string(j) + "].counterSet: Invalid value: \"" + set +
                 "\": must reference a counterSet defined in the ResourceSlice sharedCounters";
        ++j;
      }
      ++i;
    }
    return "";
  }
  void store(json& slot, json object) {
    object["metadata"]["resourceVersion"] = std::to_string(++version);
    slot = std::move(object);
  }
  void update(std::map<std::string, json>& objects, const std::string& name, json object,
              httplib::Response& res) {
    auto it = objects.find(name);
    if (it == objects.end()) return reply(res, 404, {{"kind", "Status"}, {"code", 404}});
    // Optimistic concurrency, as the API server does it.
    if (object["metadata"].value("resourceVersion", "") != it->second["metadata"]["resourceVersion"])
      return reply(res, 409,
                   {{"kind", "Status"}, {"code", 409}, {"message", "the object has been modified"}});
    store(it->second, std::move(object));
    reply(res, 200, it->second);
  }
  void watch(const httplib::Request&, httplib::Response& res) {
    const bool gone = gone_watch;
    res.set_chunked_content_provider("application/json", [gone](size_t, httplib::DataSink& sink) {
      std::string event = gone
                              ? R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}})"
                              : R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"999"}}})";
      event += "\n";
      sink.write(event.data(), event.size());
      sink.done();
      return true;
    });
  }

  std::mutex delay_mutex_;
  std::condition_variable delay_cv_;
  bool closing_ = false;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::set<std::string> validated_;
};

class DraApi : public ::testing::Test {
 protected:
  node::test::TempDir tmp;
  FakeApiServer server;

  ApiServerOptions api_options() {
    ApiServerOptions o;
    o.url = server.url();
    o.token_file = tmp / "token";
    o.timeout = std::chrono::milliseconds(10000);  // loopback, but a loaded CI machine
    o.backoff = std::chrono::milliseconds(10);
    node::test::write_file(o.token_file, "token-one\n");
    return o;
  }
  PublisherOptions publisher_options(const std::string& identity) {
    PublisherOptions p;
    p.slice.node_name = "node-a";
    p.lease_namespace = "gpuslice-system";
    p.identity = identity;
    // Longer than any round takes: with the API schemas installed every write is validated (about
    // 0.3 s each, a round of dry-run probes 2-4 s on a loaded machine); a lease that expired mid-test
    // let a second daemon take over. Tests of expiry date the lease back instead.
    p.lease_duration = std::chrono::seconds(60);
    return p;
  }
};

TEST_F(DraApi, PublishesAValidSliceUnderALease) {
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  auto r = publisher.round();
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(*r);
  EXPECT_TRUE(publisher.status().partitionable);
  std::lock_guard lock(server.mutex);
  EXPECT_TRUE(server.schema_failures.empty()) << server.schema_failures.front();
  ASSERT_EQ(server.slices.size(), 2u);
  ASSERT_EQ(server.slices.count("node-a-gpuslice-io"), 1u);
  ASSERT_EQ(server.slices.count("node-a-gpuslice-io-counters-0"), 1u);
  // Each GPU's shared and whole device, then its counter set, in a pool of two slices.
  EXPECT_EQ(server.slices["node-a-gpuslice-io"]["spec"]["devices"].size(), 4u);
  EXPECT_EQ(server.slices["node-a-gpuslice-io-counters-0"]["spec"]["sharedCounters"].size(), 2u);
  for (const auto& [name, slice] : server.slices) {
    EXPECT_EQ(slice["spec"]["pool"]["resourceSliceCount"], 2) << name;
    EXPECT_EQ(slice["spec"]["pool"]["generation"], 1) << name;
  }
  EXPECT_EQ(test::overdrawn_counter(
                {server.slices["node-a-gpuslice-io"], server.slices["node-a-gpuslice-io-counters-0"]},
                {"gpu-0", "gpu-0-whole"}),
            "gpu-0/compute")
      << "as stored, the whole device and a share still exclude each other";
  ASSERT_EQ(server.leases.count("gpuslice-dra-node-a"), 1u);
  EXPECT_EQ(server.leases["gpuslice-dra-node-a"]["spec"]["holderIdentity"], "daemon-a");
  EXPECT_EQ(server.authorizations.back(), "Bearer token-one");
}

TEST_F(DraApi, AnUnchangedSliceIsNotWrittenAgainAndAChangedOneGetsANewGeneration) {
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  auto gpus = test::two_gpu_node().gpus;
  publisher.set_gpus(gpus);
  ASSERT_TRUE(publisher.round());
  ASSERT_TRUE(publisher.round());
  {
    std::lock_guard lock(server.mutex);
    EXPECT_EQ(server.writes["POST slices"], 2);
    EXPECT_EQ(server.writes["PUT slices"], 0);
  }
  gpus[1].healthy = false;
  publisher.set_gpus(gpus);
  ASSERT_TRUE(publisher.round());
  std::lock_guard lock(server.mutex);
  // The pool changes as a whole: both slices at the new generation, the counters unchanged.
  EXPECT_EQ(server.writes["PUT slices"], 2);
  EXPECT_EQ(server.slices["node-a-gpuslice-io"]["spec"]["pool"]["generation"], 2);
  EXPECT_EQ(server.slices["node-a-gpuslice-io-counters-0"]["spec"]["pool"]["generation"], 2);
  EXPECT_TRUE(server.schema_failures.empty()) << server.schema_failures.front();
}

// A create that landed but whose answer was lost (the deadline passed) is retried and refused
// with 409; that must not read as "another daemon holds the lease" or fail the round.
TEST_F(DraApi, ACreateWhoseAnswerWasLostIsRecognisedAsOurs) {
  server.lose_answer = {"POST leases", "POST slices"};
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  auto r = publisher.round();
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(*r);
  EXPECT_TRUE(publisher.status().leader);
  std::lock_guard lock(server.mutex);
  EXPECT_TRUE(server.lose_answer.empty()) << "both answers were lost once";
  EXPECT_EQ(server.leases["gpuslice-dra-node-a"]["spec"]["holderIdentity"], "daemon-a");
  EXPECT_EQ(server.slices.size(), 2u);
  EXPECT_EQ(server.slices["node-a-gpuslice-io"]["spec"]["devices"].size(), 4u);
  EXPECT_TRUE(server.schema_failures.empty()) << server.schema_failures.front();
}

TEST_F(DraApi, TwoDaemonsOnOneNodeNeverBothPublish) {
  ApiClient api(api_options());
  SlicePublisher a(publisher_options("daemon-a"), api), b(publisher_options("daemon-b"), api);
  a.set_gpus(test::two_gpu_node().gpus);
  auto gpus = test::two_gpu_node().gpus;
  gpus.pop_back();
  b.set_gpus(gpus);  // b sees something else: it must still not write
  ASSERT_TRUE(a.round());
  auto second = b.round();
  ASSERT_TRUE(second) << second.error();
  EXPECT_FALSE(*second);
  EXPECT_FALSE(b.status().leader);
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.writes["POST slices"], 2);
  EXPECT_EQ(server.writes["PUT slices"], 0);
  EXPECT_EQ(server.slices["node-a-gpuslice-io"]["spec"]["devices"].size(), 4u);
}

// An API server with DRAPartitionableDevices off drops the counter fields; published as they are,
// whole devices would no longer exclude shares of the same GPU. The publisher notices the drop in
// the server's answers to dry-run creates, before anything is stored, and publishes the shared
// devices alone, as without partitions.
TEST_F(DraApi, WithThePartitionableGateOffOnlyTheSharedDevicesArePublished) {
  server.partitionable_gate = false;
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  auto r = publisher.round();
  ASSERT_TRUE(r) << r.error();
  EXPECT_FALSE(publisher.status().partitionable);
  {
    std::lock_guard lock(server.mutex);
    EXPECT_TRUE(server.schema_failures.empty()) << server.schema_failures.front();
    ASSERT_EQ(server.slices.size(), 1u) << "the counter slice is deleted again";
    const auto& slice = server.slices["node-a-gpuslice-io"];
    EXPECT_EQ(slice["spec"]["pool"]["resourceSliceCount"], 1);
    ASSERT_EQ(slice["spec"]["devices"].size(), 2u);
    for (const auto& d : slice["spec"]["devices"]) {
      EXPECT_EQ(d["allowMultipleAllocations"], true);
      EXPECT_EQ(d["attributes"]["wholeGpu"]["bool"], false);
    }
    EXPECT_EQ(server.writes["POST slices"], 1) << "the devices slice only: the probes were dry runs";
    EXPECT_EQ(server.writes["DELETE slices"], 0);
  }
  ASSERT_TRUE(publisher.round());
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.writes["POST slices"] + server.writes["PUT slices"], 1) << "then settled";
}

TEST_F(DraApi, WithoutPartitionsOneSliceOfSharedDevicesIsPublished) {
  ApiClient api(api_options());
  auto options = publisher_options("daemon-a");
  options.slice.partitionable = false;  // --no-partitionable-devices
  SlicePublisher publisher(options, api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  ASSERT_TRUE(publisher.round());
  EXPECT_FALSE(publisher.status().partitionable);
  std::lock_guard lock(server.mutex);
  ASSERT_EQ(server.slices.size(), 1u);
  EXPECT_EQ(server.slices["node-a-gpuslice-io"]["spec"]["devices"].size(), 2u);
}

// A slice of an earlier daemon (shared devices only, generation 3) becomes a pool of two slices at
// generation 4, so the scheduler never mixes the old slice with the new ones.
TEST_F(DraApi, AnEarlierDaemonsSliceIsReplacedByANewerGenerationOfThePool) {
  {
    SliceOptions old;
    old.node_name = "node-a";
    old.partitionable = false;
    old.pool_generation = 3;
    json slice = build_resource_slices(test::two_gpu_node().gpus, old)[0];
    slice["metadata"]["resourceVersion"] = "7";
    std::lock_guard lock(server.mutex);
    server.slices["node-a-gpuslice-io"] = slice;
  }
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  auto r = publisher.round();
  ASSERT_TRUE(r) << r.error();
  std::lock_guard lock(server.mutex);
  ASSERT_EQ(server.slices.size(), 2u);
  for (const auto& [name, slice] : server.slices) EXPECT_EQ(slice["spec"]["pool"]["generation"], 4) << name;
  EXPECT_EQ(server.writes["PUT slices"], 1);
  EXPECT_EQ(server.writes["POST slices"], 1);
}

// The fake server enforces the API's rules that the OpenAPI schema cannot state.
TEST_F(DraApi, TheFakeServerRefusesDevicesAndCountersInOneSlice) {
  auto slices = build_resource_slices(test::two_gpu_node().gpus, publisher_options("x").slice);
  json both = slices[0];
  both["spec"]["sharedCounters"] = slices[1]["spec"]["sharedCounters"];
  ApiClient api(api_options());
  auto r = api.request("POST", "/apis/resource.k8s.io/v1/resourceslices", both);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->status, 422);
  std::lock_guard lock(server.mutex);
  EXPECT_TRUE(server.slices.empty());
}

TEST_F(DraApi, AnExpiredLeaseIsTakenOver) {
  ApiClient api(api_options());
  SlicePublisher a(publisher_options("daemon-a"), api), b(publisher_options("daemon-b"), api);
  a.set_gpus(test::two_gpu_node().gpus);
  b.set_gpus(test::two_gpu_node().gpus);
  ASSERT_TRUE(a.round());
  {
    std::lock_guard lock(server.mutex);
    server.leases["gpuslice-dra-node-a"]["spec"]["renewTime"] = "2020-01-01T00:00:00.000000Z";
  }
  auto r = b.round();
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(*r);
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.leases["gpuslice-dra-node-a"]["spec"]["holderIdentity"], "daemon-b");
  EXPECT_EQ(server.leases["gpuslice-dra-node-a"]["spec"]["leaseTransitions"], 1);
}

TEST_F(DraApi, AGoneWatchLeadsToANewList) {
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  server.gone_watch = true;
  ASSERT_TRUE(publisher.round());
  EXPECT_EQ(publisher.status().relists, 1u);
}

TEST_F(DraApi, SlicesOfThisNodeThatAreNotOursAreDeletedOthersAreLeftAlone) {
  {
    std::lock_guard lock(server.mutex);
    server.slices["stale"] = {{"metadata", {{"name", "stale"}, {"resourceVersion", "1"}}},
                              {"spec", {{"driver", "gpuslice.io"}, {"nodeName", "node-a"}}}};
    // A lying server lists another node's slice despite the field selector.
    server.slices["node-b-gpuslice-io"] = {
        {"metadata", {{"name", "node-b-gpuslice-io"}, {"resourceVersion", "1"}}},
        {"spec", {{"driver", "gpuslice.io"}, {"nodeName", "node-b"}}}};
  }
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  ASSERT_TRUE(publisher.round());
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.slices.count("stale"), 0u);
  EXPECT_EQ(server.slices.count("node-b-gpuslice-io"), 1u);
}

TEST_F(DraApi, TransientErrorsAreRetriedWithBackoff) {
  server.claims["team-a/train-gpu"] = test::allocated_claim("uid-1", {{}});
  server.fail_next = 2;
  ApiClient api(api_options());
  auto claim = api.get_claim("team-a", "train-gpu");
  ASSERT_TRUE(claim) << claim.error();
  EXPECT_EQ(server.requests.load(), 3);
  server.fail_next = 100;
  auto failed = api.get_claim("team-a", "train-gpu");
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().find("HTTP 503 after 5 attempts"), std::string::npos) << failed.error();
}

TEST_F(DraApi, ASlowApiServerIsGivenUpOnAtTheDeadline) {
  server.slow_ms = 3000;
  auto options = api_options();
  options.timeout = std::chrono::milliseconds(300);
  options.retries = 0;
  ApiClient api(options);
  auto claim = api.get_claim("team-a", "train-gpu");
  ASSERT_FALSE(claim);
  EXPECT_NE(claim.error().find("no complete answer within 300 ms"), std::string::npos) << claim.error();
  server.slow_ms = 0;
}

TEST_F(DraApi, AnOversizedAnswerIsRefused) {
  server.lie_huge = true;
  ApiClient api(api_options());
  auto claim = api.get_claim("team-a", "train-gpu");
  ASSERT_FALSE(claim);
  EXPECT_NE(claim.error().find("larger than"), std::string::npos) << claim.error();
}

TEST_F(DraApi, ClaimNamesThatAreNotObjectNamesNeverReachTheServer) {
  ApiClient api(api_options());
  EXPECT_FALSE(api.get_claim("team-a", "../../secrets/x"));
  EXPECT_FALSE(api.get_claim("team-a", "a?watch=1"));
  EXPECT_EQ(server.requests.load(), 0);
}

TEST_F(DraApi, ARotatedTokenIsUsedForTheNextRequest) {
  auto options = api_options();
  ApiClient api(options);
  server.claims["team-a/c"] = test::allocated_claim("uid-1", {{}}, nullptr, "team-a", "c");
  ASSERT_TRUE(api.get_claim("team-a", "c"));
  node::test::write_file(options.token_file, "token-two");
  ASSERT_TRUE(api.get_claim("team-a", "c"));
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.authorizations.back(), "Bearer token-two");
}

// The pod's service-account volume as the kubelet writes it (an atomic writer): `token` links to
// `..data/token`, `..data` to a timestamped directory, swapped on rotation. A real kubelet's pod
// showed the driver refusing the link ("is a symbolic link"): it never published.
TEST_F(DraApi, TheKubeletsProjectedTokenIsReadThroughItsLinksAndRotated) {
  server.claims["team-a/c"] = test::allocated_claim("uid-1", {{}}, nullptr, "team-a", "c");
  const std::string dir = tmp / "serviceaccount";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const auto rotate = [&](const std::string& stamp, const std::string& token) {
    ASSERT_EQ(::mkdir((dir + "/" + stamp).c_str(), 0755), 0);
    node::test::write_file(dir + "/" + stamp + "/token", token);
    ASSERT_EQ(::symlink(stamp.c_str(), (dir + "/..data_tmp").c_str()), 0);
    ASSERT_EQ(::rename((dir + "/..data_tmp").c_str(), (dir + "/..data").c_str()), 0);
  };
  rotate("..2026_11_29_10_57_10.1", "projected-one\n");
  ASSERT_EQ(::symlink("..data/token", (dir + "/token").c_str()), 0);
  auto options = api_options();
  options.token_file = dir + "/token";
  ApiClient api(options);
  auto first = api.get_claim("team-a", "c");
  ASSERT_TRUE(first) << first.error();
  rotate("..2026_11_29_11_57_10.2", "projected-two");
  auto second = api.get_claim("team-a", "c");
  ASSERT_TRUE(second) << second.error();
  std::lock_guard lock(server.mutex);
  ASSERT_GE(server.authorizations.size(), 2u);
  EXPECT_EQ(server.authorizations[server.authorizations.size() - 2], "Bearer projected-one");
  EXPECT_EQ(server.authorizations.back(), "Bearer projected-two");
}

// Following the kubelet's links does not make anything else a token: a FIFO is refused at once
// (nothing blocks on it) and nothing is sent.
TEST_F(DraApi, ATokenThatIsNotARegularFileIsRefusedWithoutBlocking) {
  auto options = api_options();
  options.token_file = tmp / "fifo";
  ASSERT_EQ(::mkfifo(options.token_file.c_str(), 0600), 0);
  ApiClient api(options);
  auto claim = api.get_claim("team-a", "c");
  ASSERT_FALSE(claim);
  EXPECT_NE(claim.error().find("not a regular file"), std::string::npos) << claim.error();
  EXPECT_EQ(server.requests.load(), 0);
}

// Prepare end to end through the API client: the claim the server holds decides the limits, and a
// server that answers for another claim (same name, another uid) prepares nothing.
TEST_F(DraApi, PrepareReadsTheAllocationFromTheApiServer) {
  server.claims["team-a/train-gpu"] = test::allocated_claim("uid-1", {{}});
  server.claims["team-a/recreated"] =
      test::allocated_claim("uid-other", {{}}, nullptr, "team-a", "recreated");
  ApiClient api(api_options());
  PreparerOptions o;
  o.root = tmp / "root";
  o.cdi_dir = tmp / "cdi";
  o.node = test::two_gpu_node();
  ClaimPreparer preparer(o, api);
  ASSERT_TRUE(preparer.recover());
  auto devices = preparer.prepare({"team-a", "train-gpu", "uid-1"});
  ASSERT_TRUE(devices) << devices.error();
  EXPECT_EQ((*devices)[0].memory_bytes, 8ULL << 30);
  {
    // The prepared device is reported in the claim's status, keyed as the allocation is.
    std::lock_guard lock(server.mutex);
    EXPECT_TRUE(server.schema_failures.empty()) << server.schema_failures.front();
    const auto& status = server.claims["team-a/train-gpu"]["status"]["devices"];
    ASSERT_EQ(status.size(), 1u);
    EXPECT_EQ(status[0]["device"], "gpu-0");
    EXPECT_EQ(status[0]["shareID"], "6f1a0e5c-0000-4000-8000-000000000001");
    EXPECT_EQ(status[0]["conditions"][0]["type"], "Ready");
    EXPECT_EQ(status[0]["data"]["memoryBytes"], 8ULL << 30);
    EXPECT_EQ(server.content_types.back(), "application/apply-patch+yaml");
  }
  auto lied = preparer.prepare({"team-a", "recreated", "uid-2"});
  ASSERT_FALSE(lied);
  EXPECT_NE(lied.error().find("uid"), std::string::npos);
  EXPECT_EQ(preparer.claims().size(), 1u);
}

// Kubernetes 1.34 with DRAPartitionableDevices refuses a device that consumes a counter set of
// another slice (422: "must reference a counterSet defined in the ResourceSlice sharedCounters"):
// there the counter sets go beside their devices, and whole devices still exclude shares.
TEST_F(DraApi, OnKubernetes134WithPartitionableDevicesTheCountersArePublishedBesideTheirDevices) {
  server.counters_beside_only = true;
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  auto r = publisher.round();
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(*r);
  EXPECT_EQ(publisher.status().layout, SliceLayout::CountersBeside);
  EXPECT_TRUE(publisher.status().partitionable);
  EXPECT_TRUE(publisher.status().fractions_schedulable);
  std::lock_guard lock(server.mutex);
  ASSERT_EQ(server.slices.size(), 1u);
  const json& slice = server.slices["node-a-gpuslice-io"];
  EXPECT_EQ(slice["spec"]["devices"].size(), 4u);
  EXPECT_EQ(slice["spec"]["sharedCounters"].size(), 2u);
  EXPECT_EQ(slice["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_EQ(test::overdrawn_counter({slice}, {"gpu-0", "gpu-0-whole"}), "gpu-0/compute");
  EXPECT_EQ(test::overdrawn_counter({slice}, {"gpu-0", "gpu-0", "gpu-1-whole"}), "");
  EXPECT_EQ(server.writes["POST slices"], 1) << "the refused layout was only ever a dry run";
}

// The 1.34 defaults (both gates off) drop allowMultipleAllocations, requestPolicy and the counters
// without an error: each GPU can then go to one claim only. The publisher says so in its status and
// /metrics, and publishes what the server keeps (no field it would drop).
TEST_F(DraApi, OnKubernetes134WithDefaultGatesEachGpuIsPublishedForOneClaimAndThatIsSaid) {
  server.counters_beside_only = true;
  server.partitionable_gate = false;
  server.consumable_gate = false;
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  auto r = publisher.round();
  ASSERT_TRUE(r) << r.error();
  const PublisherStatus st = publisher.status();
  EXPECT_EQ(st.layout, SliceLayout::Exclusive);
  EXPECT_FALSE(st.fractions_schedulable);
  EXPECT_FALSE(st.partitionable);
  const std::string metrics = render_publisher_metrics(st, "node-a");
  EXPECT_NE(metrics.find("gpuslice_dra_fractions_schedulable{node=\"node-a\"} 0\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpuslice_dra_slice_layout{node=\"node-a\",layout=\"whole-gpus-only\"} 1\n"),
            std::string::npos)
      << metrics;
  {
    std::lock_guard lock(server.mutex);
    ASSERT_EQ(server.slices.size(), 1u);
    for (const auto& d : server.slices["node-a-gpuslice-io"]["spec"]["devices"]) {
      EXPECT_FALSE(d.contains("allowMultipleAllocations"));
      EXPECT_FALSE(d["capacity"]["memory"].contains("requestPolicy"));
    }
  }
  ASSERT_TRUE(publisher.round());
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.writes["POST slices"] + server.writes["PUT slices"], 1) << "then settled";
}

// A write the server keeps refusing: the pool's generation is not bumped by each retry, the error
// keeps the server's whole message (escaped), the loop backs off and counts the failures.
TEST_F(DraApi, APersistentRejectionBacksOffCountsAndKeepsThePoolGeneration) {
  std::string message = "spec.devices[0].consumesCounters[0].counterSet: Invalid value: \"gpu-0\": ";
  while (message.size() < 600)
    message += "must reference a counterSet defined in the ResourceSlice sharedCounters, ";
  message += "\x1b[31mend";
  server.reject_slice = "node-a-gpuslice-io";
  server.reject_message = message;
  server.validate = false;  // 12 s of the harness's schema checks; it failed once in a loaded full run
  ApiClient api(api_options());
  auto options = publisher_options("daemon-a");
  SlicePublisher publisher(options, api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  for (int i = 0; i < 4; ++i) {
    auto r = publisher.round();
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("sharedCounters, must reference"), std::string::npos) << "not cut at 200";
    EXPECT_NE(r.error().find("\\x1b[31mend"), std::string::npos) << r.error();
    EXPECT_EQ(r.error().find('\x1b'), std::string::npos);
  }
  {
    std::lock_guard lock(server.mutex);
    ASSERT_EQ(server.slices.count("node-a-gpuslice-io-counters-0"), 1u);
    EXPECT_EQ(server.slices["node-a-gpuslice-io-counters-0"]["spec"]["pool"]["generation"], 1)
        << "no generation churn while the same content is retried";
  }
  options.retry = std::chrono::milliseconds(10);
  options.max_backoff = std::chrono::milliseconds(80);
  SlicePublisher looping(options, api);
  looping.set_gpus(test::two_gpu_node().gpus);
  looping.start();
  PublisherStatus st;
  for (int i = 0; i < 2000 && st.consecutive_failures < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    st = looping.status();
  }
  looping.stop();
  ASSERT_GE(st.consecutive_failures, 5u);
  EXPECT_GE(st.failures, 5u);
  EXPECT_EQ(st.cause, "write-rejected");
  EXPECT_GE(st.next_wait, std::chrono::milliseconds(40))
      << "doubled from 10 ms, at most 80 ms, jitter 50-100%";
  EXPECT_LE(st.next_wait, std::chrono::milliseconds(80));
  const std::string metrics = render_publisher_metrics(st, "node-a");
  EXPECT_NE(metrics.find("gpuslice_dra_publish_failing{node=\"node-a\",cause=\"write-rejected\"} 1\n"),
            std::string::npos)
      << metrics;
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.slices["node-a-gpuslice-io-counters-0"]["spec"]["pool"]["generation"], 1);
}

// The pool changes (a GPU turns unhealthy) and the devices slice's write keeps being refused after
// the counters slice took the new generation: the retries write that same generation again instead
// of one more per round (the issue's 14 -> 21 in 10 s), and the pool settles at it once accepted.
TEST_F(DraApi, RetriesOfAChangedPoolThatKeepsBeingRefusedKeepItsOneNewGeneration) {
  server.validate = false;
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  auto gpus = test::two_gpu_node().gpus;
  publisher.set_gpus(gpus);
  ASSERT_TRUE(publisher.round());
  {
    std::lock_guard lock(server.mutex);
    ASSERT_EQ(server.slices["node-a-gpuslice-io"]["spec"]["pool"]["generation"], 1);
    server.reject_slice = "node-a-gpuslice-io";
    server.reject_message = "refused";
  }
  gpus[1].healthy = false;
  publisher.set_gpus(gpus);
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(publisher.round());
    std::lock_guard lock(server.mutex);
    EXPECT_EQ(server.slices["node-a-gpuslice-io-counters-0"]["spec"]["pool"]["generation"], 2)
        << "round " << i << ": one new generation for one change, however many retries";
  }
  {
    std::lock_guard lock(server.mutex);
    server.reject_slice.clear();
  }
  auto r = publisher.round();
  ASSERT_TRUE(r) << r.error();
  std::lock_guard lock(server.mutex);
  for (const auto& [name, slice] : server.slices) EXPECT_EQ(slice["spec"]["pool"]["generation"], 2) << name;
}

// A failure that persists is logged once per change of cause, however many rounds fail and however
// its text varies (the server's message names the write): N refused writes, one line; then another
// cause (the list forbidden), one more.
TEST_F(DraApi, APersistentFailureIsLoggedOncePerChangeOfCause) {
  server.reject_slice = "node-a-gpuslice-io";
  server.reject_message = "spec.devices[0]: Invalid value";
  server.validate = false;
  ApiClient api(api_options());
  auto options = publisher_options("daemon-a");
  options.retry = std::chrono::milliseconds(1);
  options.max_backoff = std::chrono::milliseconds(4);
  SlicePublisher publisher(options, api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  auto wait_for = [&](const std::string& cause, std::uint64_t failures) {
    PublisherStatus st;
    for (int i = 0; i < 4000 && !(st.cause == cause && st.failures >= failures); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      st = publisher.status();
    }
    return st;
  };
  ::testing::internal::CaptureStderr();
  publisher.start();
  const PublisherStatus rejected = wait_for("write-rejected", 8);
  {
    std::lock_guard lock(server.mutex);
    server.list_status = 403;
  }
  const PublisherStatus listing = wait_for("list", rejected.failures + 8);
  publisher.stop();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(rejected.cause, "write-rejected");
  ASSERT_GE(rejected.failures, 8u);
  ASSERT_EQ(listing.cause, "list");
  ASSERT_GE(listing.failures, rejected.failures + 8);
  auto count = [&log](const std::string& needle) {
    std::size_t n = 0;
    for (std::size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("ResourceSlice publisher (write-rejected)"), 1u) << log;
  EXPECT_EQ(count("ResourceSlice publisher (list)"), 1u) << log;
  EXPECT_EQ(count("ResourceSlice publisher ("), 2u) << log;
  std::lock_guard lock(server.mutex);
  EXPECT_GE(server.writes["POST slices"], 8) << "every round tried again";
}

// The 1.34 defaults, then the gates turned on one by one: each poorer layout is an Event on the Node
// (core/v1, namespace default, as the API server requires of an Event about a cluster-scoped object),
// once per change of cause, however often the layout is probed again; back to a full layout, one
// Normal Event. The status (and the API's "dra" object) and /metrics say the same.
TEST_F(DraApi, AFallbackToAPoorerLayoutIsAnEventOnTheNodeOncePerChangeOfCause) {
  server.counters_beside_only = true;
  server.partitionable_gate = false;
  server.consumable_gate = false;
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  auto gpus = test::two_gpu_node().gpus;
  publisher.set_gpus(gpus);
  ASSERT_TRUE(publisher.round());
  ASSERT_TRUE(publisher.round());
  const PublisherStatus st = publisher.status();
  EXPECT_EQ(st.degraded_reason, "GpusliceFractionsNotEnforceable");
  EXPECT_EQ(st.node_events, 1u);
  EXPECT_EQ(st.node_event_error, "");
  EXPECT_NE(
      render_publisher_metrics(st, "node-a")
          .find(
              "gpuslice_dra_layout_degraded{node=\"node-a\",reason=\"GpusliceFractionsNotEnforceable\"} 1\n"),
      std::string::npos);
  NodeView view;
  view.dra = st;
  const json status = json::parse(status_json(view, "test"));
  EXPECT_EQ(status["dra"]["layout"], "whole-gpus-only");
  EXPECT_EQ(status["dra"]["fractions_schedulable"], false);
  EXPECT_EQ(status["dra"]["degraded"]["reason"], "GpusliceFractionsNotEnforceable");
  EXPECT_NE(status["dra"]["degraded"]["message"].get<std::string>().find("not enforceable"),
            std::string::npos);
  {
    std::lock_guard lock(server.mutex);
    EXPECT_TRUE(server.schema_failures.empty()) << server.schema_failures.front();
    ASSERT_EQ(server.events.size(), 1u);
    const json& e = server.events[0];
    EXPECT_EQ(e["metadata"]["namespace"], "default");
    EXPECT_EQ(e["involvedObject"]["kind"], "Node");
    EXPECT_EQ(e["involvedObject"]["name"], "node-a");
    EXPECT_EQ(e["type"], "Warning");
    EXPECT_EQ(e["reason"], "GpusliceFractionsNotEnforceable");
    EXPECT_NE(e["message"].get<std::string>().find("DRAConsumableCapacity"), std::string::npos);
  }
  // A write refused with 422 makes the publisher probe the layout again (the server may have been
  // upgraded); the GPUs' health changes so that the pool is written.
  auto refuse_one_write = [&] {
    {
      std::lock_guard lock(server.mutex);
      server.reject_slice = "node-a-gpuslice-io";
      server.reject_message = "refused";
    }
    gpus[1].healthy = !gpus[1].healthy;
    publisher.set_gpus(gpus);
    EXPECT_FALSE(publisher.round());
    std::lock_guard lock(server.mutex);
    server.reject_slice.clear();
  };
  refuse_one_write();
  ASSERT_TRUE(publisher.round());
  EXPECT_EQ(publisher.status().layout, SliceLayout::Exclusive);
  {
    std::lock_guard lock(server.mutex);
    EXPECT_EQ(server.events.size(), 1u) << "the same cause found again: no second Event";
    server.consumable_gate = true;
  }
  refuse_one_write();
  ASSERT_TRUE(publisher.round());
  ASSERT_TRUE(publisher.round());
  EXPECT_EQ(publisher.status().layout, SliceLayout::SharedOnly);
  EXPECT_EQ(publisher.status().degraded_reason, "GpusliceWholeGpuDevicesNotPublished");
  {
    std::lock_guard lock(server.mutex);
    ASSERT_EQ(server.events.size(), 2u);
    EXPECT_EQ(server.events[1]["reason"], "GpusliceWholeGpuDevicesNotPublished");
    EXPECT_NE(server.events[1]["metadata"]["name"], server.events[0]["metadata"]["name"]);
    server.partitionable_gate = true;
  }
  refuse_one_write();
  ASSERT_TRUE(publisher.round());
  ASSERT_TRUE(publisher.round());
  EXPECT_EQ(publisher.status().layout, SliceLayout::CountersBeside);
  EXPECT_EQ(publisher.status().degraded_reason, "");
  std::lock_guard lock(server.mutex);
  ASSERT_EQ(server.events.size(), 3u);
  EXPECT_EQ(server.events[2]["type"], "Normal");
  EXPECT_EQ(server.events[2]["reason"], "GpusliceSliceLayoutRestored");
  // Refused dry runs are the probes doing their work; every Event was accepted.
  for (const auto& failure : server.schema_failures)
    EXPECT_EQ(failure.rfind("DRYRUN slices", 0), 0u) << failure;
}

// Without the RBAC rule for events the Event is refused: that is said once (status, log), and the
// slice is published all the same.
TEST_F(DraApi, AnEventTheApiServerRefusesIsSaidOnceAndPublishingGoesOn) {
  server.partitionable_gate = false;
  server.consumable_gate = false;
  server.events_status = 403;
  ApiClient api(api_options());
  SlicePublisher publisher(publisher_options("daemon-a"), api);
  publisher.set_gpus(test::two_gpu_node().gpus);
  auto r = publisher.round();
  ASSERT_TRUE(r) << r.error();
  ASSERT_TRUE(publisher.round());
  const PublisherStatus st = publisher.status();
  EXPECT_TRUE(st.published);
  EXPECT_EQ(st.node_events, 0u);
  EXPECT_NE(st.node_event_error.find("HTTP 403"), std::string::npos) << st.node_event_error;
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.writes["POST events"], 1);
  EXPECT_EQ(server.slices.size(), 1u);
}

// A stopping daemon cuts its watch off and gives the Lease up: it stops at once, and the next
// instance publishes without waiting for the Lease to expire.
TEST_F(DraApi, AStoppedPublisherGivesItsLeaseUpAndTheNextPublishesAtOnce) {
  ApiClient api(api_options());
  auto options = publisher_options("daemon-a");
  options.lease_duration = std::chrono::seconds(60);  // a watch of 20 s, a Lease held for 60 s
  // The release has 600 ms; the harness's schema check of the Lease it writes would take most of it.
  server.validate = false;
  SlicePublisher a(options, api);
  a.set_gpus(test::two_gpu_node().gpus);
  a.start();
  for (int i = 0; i < 2000 && !a.status().published; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(a.status().published);
  const auto before = std::chrono::steady_clock::now();
  a.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(10)) << "not the watch's 20 s";
  {
    std::lock_guard lock(server.mutex);
    EXPECT_EQ(server.leases["gpuslice-dra-node-a"]["spec"]["holderIdentity"], "");
  }
  options.identity = "daemon-b";
  SlicePublisher b(options, api);
  b.set_gpus(test::two_gpu_node().gpus);
  auto r = b.round();
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(*r) << "the released Lease is taken at once";
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.leases["gpuslice-dra-node-a"]["spec"]["holderIdentity"], "daemon-b");
}

// Issue 44: a stopping publisher read the Lease before writing it back, within 500 ms; an API
// server slow to answer reads (here 1.5 s) left the Lease held until it expired, and the next
// instance waited the full lease duration. The release is one write of the Lease as the publisher
// last wrote it, on a connection of its own, while the loop's slow read is cut off.
TEST_F(DraApi, AStoppingPublisherGivesItsLeaseUpWithOneWriteWhileReadsAreSlow) {
  ApiClient api(api_options());
  server.validate = false;
  SlicePublisher a(publisher_options("daemon-a"), api);
  a.set_gpus(test::two_gpu_node().gpus);
  a.start();
  for (int i = 0; i < 2000 && !a.status().published; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(a.status().published);
  server.read_delay_ms = 1500;
  // The loop waits in a read (no renewal of the Lease of its own in flight).
  for (int i = 0; i < 2000 && server.reads_waiting == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GT(server.reads_waiting.load(), 0);
  std::size_t before = 0;
  {
    std::lock_guard lock(server.mutex);
    before = server.lease_requests.size();
  }
  const auto began = std::chrono::steady_clock::now();
  a.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(1));
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.leases["gpuslice-dra-node-a"]["spec"]["holderIdentity"], "");
  EXPECT_EQ(server.leases["gpuslice-dra-node-a"]["spec"]["leaseDurationSeconds"], 1);
  const std::vector<std::string> after(server.lease_requests.begin() + static_cast<std::ptrdiff_t>(before),
                                       server.lease_requests.end());
  EXPECT_EQ(after, std::vector<std::string>{"PUT"});
}

// A renewal that lands between the publisher's last write and its release makes the release's
// write conflict (409): the Lease is read again and, still ours, given up.
TEST_F(DraApi, AReleaseThatConflictsWithALandedRenewalReadsTheLeaseAndGivesItUp) {
  ApiClient api(api_options());
  server.validate = false;
  SlicePublisher a(publisher_options("daemon-a"), api);
  a.set_gpus(test::two_gpu_node().gpus);
  auto r = a.round();
  ASSERT_TRUE(r) << r.error();
  {
    std::lock_guard lock(server.mutex);
    auto& lease = server.leases["gpuslice-dra-node-a"];
    lease["metadata"]["resourceVersion"] = std::to_string(++server.version);  // renewed meanwhile
  }
  auto released = a.release_lease(std::chrono::seconds(10));
  ASSERT_TRUE(released) << released.error();
  EXPECT_TRUE(*released);
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.leases["gpuslice-dra-node-a"]["spec"]["holderIdentity"], "");
}

// A Lease another daemon holds by now is left alone.
TEST_F(DraApi, AReleaseLeavesALeaseTakenOverByAnotherDaemonAlone) {
  ApiClient api(api_options());
  server.validate = false;
  SlicePublisher a(publisher_options("daemon-a"), api);
  a.set_gpus(test::two_gpu_node().gpus);
  auto r = a.round();
  ASSERT_TRUE(r) << r.error();
  {
    std::lock_guard lock(server.mutex);
    auto& lease = server.leases["gpuslice-dra-node-a"];
    lease["spec"]["holderIdentity"] = "daemon-b";
    lease["metadata"]["resourceVersion"] = std::to_string(++server.version);
  }
  auto released = a.release_lease(std::chrono::seconds(10));
  ASSERT_TRUE(released) << released.error();
  EXPECT_FALSE(*released);
  std::lock_guard lock(server.mutex);
  EXPECT_EQ(server.leases["gpuslice-dra-node-a"]["spec"]["holderIdentity"], "daemon-b");
}

// The daemon as a process: `gpuslice-node dra` publishing under its Lease and serving the kubelet's
// sockets gets SIGTERM while the API server is slow to answer reads. It exits within a second
// (status 0), its sockets gone and its Lease given up; a new instance publishes at once, not after
// the 15 s the Lease would otherwise hold.
class DraDaemon : public DraApi {
 protected:
  struct Daemon {
    pid_t pid = -1;
    std::string log;
  };
  void SetUp() override {
    server.validate = false;
    node::test::write_file(tmp / "token", "token-one\n");
  }
  Daemon start(const std::string& identity) {
    Daemon d;
    d.log = tmp / (identity + ".log");
    const std::vector<std::string> args = {GPUSLICE_NODE_BIN,  "dra",
                                           "--fake-gpus",      "2x16Gi",
                                           "--node-name",      "node-a",
                                           "--api-server",     server.url(),
                                           "--api-token-file", tmp / "token",
                                           "--root",           tmp / "root",
                                           "--plugins-dir",    tmp / "plugins",
                                           "--registry-dir",   tmp / "registry",
                                           "--cdi-dir",        tmp / "cdi",
                                           "--listen",         "127.0.0.1:0",
                                           "--token-file",     tmp / "token",
                                           "--identity",       identity,
                                           "--lease-duration", "15s"};
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    d.pid = ::fork();
    if (d.pid == 0) {
      const int fd = ::open(d.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    return d;
  }
  std::string holder() {
    std::lock_guard lock(server.mutex);
    auto it = server.leases.find("gpuslice-dra-node-a");
    return it == server.leases.end() ? "(none)" : it->second["spec"].value("holderIdentity", "(none)");
  }
  // Waits for `d` to exit, at most 10 s (then kills it): its exit status, or -1.
  static int wait_exit(const Daemon& d) {
    for (int i = 0; i < 10000; ++i) {
      int status = 0;
      if (::waitpid(d.pid, &status, WNOHANG) == d.pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ::kill(d.pid, SIGKILL);
    ::waitpid(d.pid, nullptr, 0);
    return -1;
  }
  bool published_by(const std::string& identity, int timeout_ms) {
    for (int i = 0; i < timeout_ms / 5; ++i) {
      if (holder() == identity) {
        std::lock_guard lock(server.mutex);
        if (server.slices.count("node-a-gpuslice-io")) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
};

TEST_F(DraDaemon, OnSigtermItStopsServingGivesItsLeaseUpAndExitsWithinASecond) {
  const std::string dra_socket = tmp / "plugins/gpuslice.io/dra.sock";
  const std::string reg_socket = tmp / "registry/gpuslice.io-reg.sock";
  Daemon a = start("daemon-a");
  ASSERT_TRUE(published_by("daemon-a", 30000)) << node::test::read_file(a.log);
  for (int i = 0;
       i < 2000 && (::access(dra_socket.c_str(), F_OK) != 0 || ::access(reg_socket.c_str(), F_OK) != 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(::access(dra_socket.c_str(), F_OK), 0);
  {
    std::lock_guard lock(server.mutex);
    server.slices.clear();  // what the next instance publishes is seen
  }
  server.read_delay_ms = 1500;
  for (int i = 0; i < 5000 && server.reads_waiting == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto began = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(a.pid, SIGTERM), 0);
  const int status = wait_exit(a);
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_EQ(status, 0) << node::test::read_file(a.log);
  EXPECT_LT(took, std::chrono::seconds(1))
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n"
      << node::test::read_file(a.log);
  EXPECT_EQ(holder(), "") << node::test::read_file(a.log);
  EXPECT_NE(::access(dra_socket.c_str(), F_OK), 0);
  EXPECT_NE(::access(reg_socket.c_str(), F_OK), 0);

  server.read_delay_ms = 0;
  const auto restarted = std::chrono::steady_clock::now();
  Daemon b = start("daemon-b");
  EXPECT_TRUE(published_by("daemon-b", 10000)) << node::test::read_file(b.log);
  EXPECT_LT(std::chrono::steady_clock::now() - restarted, std::chrono::seconds(10)) << "not the Lease's 15 s";
  ::kill(b.pid, SIGTERM);
  EXPECT_EQ(wait_exit(b), 0) << node::test::read_file(b.log);
}

// A kubelet's NodePrepareResources in flight when SIGTERM comes, its read of the claim held up by
// the API server: the call gets the sockets' grace (300 ms), then its request is cut off, so that
// the gRPC server's shutdown ends and the sockets are removed before the process exits, within a
// second. (Before, the shutdown waited for the handler's request, up to --api-timeout.)
TEST_F(DraDaemon, OnSigtermAPrepareHeldUpByTheApiServerIsCutOffAndTheSocketsAreRemoved) {
  const std::string dra_socket = tmp / "plugins/gpuslice.io/dra.sock";
  const std::string reg_socket = tmp / "registry/gpuslice.io-reg.sock";
  {
    std::lock_guard lock(server.mutex);
    server.claims["team-a/train-gpu"] = test::allocated_claim("uid-1", {{}});
  }
  Daemon a = start("daemon-a");
  ASSERT_TRUE(published_by("daemon-a", 30000)) << node::test::read_file(a.log);
  for (int i = 0; i < 2000 && ::access(dra_socket.c_str(), F_OK) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  server.read_delay_ms = 5000;
  std::thread kubelet([&] {
    auto stub = v1::DRAPlugin::NewStub(
        grpc::CreateChannel("unix://" + dra_socket, grpc::InsecureChannelCredentials()));
    v1::NodePrepareResourcesRequest request;
    auto* c = request.add_claims();
    c->set_namespace_("team-a");
    c->set_name("train-gpu");
    c->set_uid("uid-1");
    v1::NodePrepareResourcesResponse response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    (void)stub->NodePrepareResources(&ctx, request, &response);  // cut off: any outcome
  });
  // The loop's read and the prepare's read of the claim wait at the server.
  for (int i = 0; i < 5000 && server.reads_waiting < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GE(server.reads_waiting.load(), 2);
  const auto began = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(a.pid, SIGTERM), 0);
  const int status = wait_exit(a);
  const auto took = std::chrono::steady_clock::now() - began;
  kubelet.join();
  EXPECT_EQ(status, 0) << node::test::read_file(a.log);
  EXPECT_LT(took, std::chrono::seconds(1))
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n"
      << node::test::read_file(a.log);
  EXPECT_EQ(holder(), "") << node::test::read_file(a.log);
  EXPECT_NE(::access(dra_socket.c_str(), F_OK), 0) << node::test::read_file(a.log);
  EXPECT_NE(::access(reg_socket.c_str(), F_OK), 0) << node::test::read_file(a.log);
  EXPECT_NE(node::test::read_file(a.log).find("stopped in"), std::string::npos)
      << "the stop ran to its end, not cut short by the watchdog\n"
      << node::test::read_file(a.log);
}

TEST(DraApiMessage, IsEscapedAndCutAtAWordWithAnEllipsis) {
  std::string text = "bad\nline ";
  for (int i = 0; i < 1000; ++i) text += "word" + std::to_string(i) + " ";
  const std::string shown = api_message(text);
  EXPECT_EQ(shown.find('\n'), std::string::npos);
  EXPECT_EQ(shown.rfind("bad\\x0aline ", 0), 0u);
  ASSERT_GE(shown.size(), 3u);
  EXPECT_EQ(shown.substr(shown.size() - 3), "...");
  EXPECT_LE(shown.size(), kMaxApiMessageChars + 16);
  EXPECT_GT(shown.size(), 3500u);
  const std::string kept = shown.substr(0, shown.size() - 3);
  EXPECT_EQ(text.substr(kept.size() - 3, 1), " ")
      << "cut at a space, not mid-word: " << kept.substr(kept.size() - 20);
}

// The Event's name is a valid object name for any node name, and its text is bounded and escaped.
TEST(DraNodeEvent, NameAndTextStayWithinTheApisBounds) {
  NodeEvent e;
  e.node = std::string(230, 'a') + "-b.c";
  e.type = "Warning";
  e.reason = "GpusliceFractionsNotEnforceable";
  e.message = "line\n" + std::string(5000, 'x');
  e.instance = "pod\x1b[2J";
  e.at = std::chrono::system_clock::from_time_t(1790000000);
  const json event = node_event_object(e);
  const std::string name = event["metadata"]["name"];
  EXPECT_LE(name.size(), 253u);
  EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(name[name.find('.') - 1]))) << name;
  EXPECT_EQ(name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-"), std::string::npos) << name;
  EXPECT_EQ(event["involvedObject"]["name"], e.node);
  EXPECT_LE(event["message"].get<std::string>().size(), 1024u);
  EXPECT_EQ(event["message"].get<std::string>().find('\n'), std::string::npos);
  EXPECT_EQ(event["reportingInstance"].get<std::string>().find('\x1b'), std::string::npos);
  EXPECT_EQ(event["firstTimestamp"], "2026-09-21T14:13:20Z");
}

TEST(DraMicroTime, RoundTrips) {
  const auto t = std::chrono::system_clock::from_time_t(1790000000) + std::chrono::microseconds(123456);
  EXPECT_EQ(micro_time(t), "2026-09-21T14:13:20.123456Z");
  EXPECT_EQ(*parse_micro_time(micro_time(t)), std::chrono::system_clock::from_time_t(1790000000));
  EXPECT_FALSE(parse_micro_time("yesterday"));
}

}  // namespace
}  // namespace gpuslice::node::dra

namespace gpuslice::node::dra {
namespace {

// The in-cluster connection: HTTPS checked against the service account's CA, bearer token.
TEST(DraApiTls, TheApiServersCertificateIsCheckedAgainstTheCa) {
  const std::string cert = std::string(GPUSLICE_NODE_FIXTURES) + "/tls/tls.crt";
  const std::string key = std::string(GPUSLICE_NODE_FIXTURES) + "/tls/tls.key";
  httplib::SSLServer server(cert.c_str(), key.c_str());
  ASSERT_TRUE(server.is_valid());
  std::string authorization;
  server.Get("/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/c", [&](const httplib::Request& req,
                                                                                httplib::Response& res) {
    authorization = req.get_header_value("Authorization");
    res.set_content(test::allocated_claim("uid-1", {{}}, nullptr, "team-a", "c").dump(), "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread thread([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  node::test::TempDir tmp;
  node::test::write_file(tmp / "token", "sa-token");
  ApiServerOptions options;
  options.url = "https://127.0.0.1:" + std::to_string(port);
  options.token_file = tmp / "token";
  options.ca_file = cert;
  options.retries = 0;
  ApiClient trusted(options);
  auto claim = trusted.get_claim("team-a", "c");
  EXPECT_TRUE(claim) << claim.error();
  EXPECT_EQ(authorization, "Bearer sa-token");

  // Another CA (the system's): the server is not trusted and nothing is read.
  options.ca_file = "/etc/ssl/certs/ca-certificates.crt";
  ApiClient untrusted(options);
  auto refused = untrusted.get_claim("team-a", "c");
  EXPECT_FALSE(refused);

  server.stop();
  thread.join();
}

}  // namespace
}  // namespace gpuslice::node::dra
