// The admission webhook against AdmissionReview fixtures: exact JSONPatch output, the patched pod,
// pods left alone, malformed reviews refused; and one round trip over TLS.
#include "node/admission/webhook.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>

#include <nlohmann/json.hpp>

#include "node/admission/webhook_server.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

using nlohmann::json;

std::string unbase64(const std::string& text) {
  std::string out(text.size(), '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  EXPECT_GE(n, 0);
  // EVP_DecodeBlock counts the zero bytes that '=' padding stands for.
  std::size_t padding = 0;
  for (auto it = text.rbegin(); it != text.rend() && *it == '='; ++it) ++padding;
  out.resize(static_cast<std::size_t>(n) - padding);
  return out;
}

struct Reviewed {
  int http_status = 0;
  json body;
  json response;  // body["response"]
  json patch;     // decoded, or null
};

Reviewed review(const std::string& request_body, const WebhookOptions& options = {}) {
  WebhookReply reply = review_admission(request_body, options);
  Reviewed r;
  r.http_status = reply.http_status;
  r.body = json::parse(reply.body);
  if (r.body.contains("response")) {
    r.response = r.body["response"];
    if (r.response.contains("patch")) {
      EXPECT_EQ(r.response["patchType"], "JSONPatch");
      r.patch = json::parse(unbase64(r.response["patch"].get<std::string>()));
    }
  }
  return r;
}

Reviewed review_fixture(const std::string& name) { return review(test::fixture(name)); }

TEST(Webhook, DevicePluginPodGetsLdPreloadComposedWithItsOwn) {
  auto r = review_fixture("admission_gpuslice_vram.json");
  ASSERT_EQ(r.http_status, 200);
  EXPECT_EQ(r.body["apiVersion"], "admission.k8s.io/v1");
  EXPECT_EQ(r.body["kind"], "AdmissionReview");
  EXPECT_EQ(r.response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
  EXPECT_EQ(r.response["allowed"], true);
  EXPECT_EQ(r.patch, json::parse(test::fixture("admission_gpuslice_vram.patch.json"))) << r.patch.dump(2);

  // Applied to the pod: the library first, the user's preload kept, the sidecar untouched.
  json pod = json::parse(test::fixture("admission_gpuslice_vram.json"))["request"]["object"];
  json patched = pod.patch(r.patch);
  EXPECT_EQ(patched["spec"]["containers"][0]["env"][0]["value"],
            "/usr/local/lib/gpuslice/libgpuslice.so:/opt/lib/libtcmalloc.so");
  EXPECT_EQ(patched["spec"]["containers"][0]["env"][1], pod["spec"]["containers"][0]["env"][1]);
  EXPECT_EQ(patched["spec"]["containers"][1], pod["spec"]["containers"][1]);
  EXPECT_EQ(patched["metadata"]["annotations"]["team"], "vision");
  EXPECT_EQ(patched["metadata"]["annotations"]["gpuslice.io/injected"], "true");

  // Reinvocation on the patched pod changes nothing more.
  json again = json::parse(test::fixture("admission_gpuslice_vram.json"));
  again["request"]["object"] = patched;
  auto second = review(again.dump());
  EXPECT_EQ(second.response["allowed"], true);
  EXPECT_FALSE(second.response.contains("patch"));
}

TEST(Webhook, HcsPodGetsPreloadQuotaLibraryAndStateVolume) {
  auto r = review_fixture("admission_hcs_vram.json");
  ASSERT_EQ(r.http_status, 200);
  EXPECT_EQ(r.response["allowed"], true);
  EXPECT_EQ(r.patch, json::parse(test::fixture("admission_hcs_vram.patch.json"))) << r.patch.dump(2);

  json pod = json::parse(test::fixture("admission_hcs_vram.json"))["request"]["object"];
  json patched = pod.patch(r.patch);
  const json& server = patched["spec"]["containers"][0];
  EXPECT_EQ(server["env"][1]["value"], std::to_string(16ULL << 30));
  EXPECT_EQ(server["volumeMounts"].size(), 3u);
  EXPECT_EQ(patched["spec"]["volumes"].size(), 3u);
  EXPECT_EQ(patched["spec"]["initContainers"], pod["spec"]["initContainers"]) << "no GPU request: untouched";

  // The library's host directory follows --root.
  WebhookOptions options;
  options.host_root = "/opt/gpuslice";
  auto rooted = review(test::fixture("admission_hcs_vram.json"), options);
  EXPECT_EQ(rooted.patch[3]["value"]["hostPath"]["path"], "/opt/gpuslice/lib");
}

// The emptyDir mounted at /tmp/gpuslice was not the library's shared directory (it used
// /tmp/gpuslice-<uid>), so the daemon never saw these pods; and the library's hostPath exists only on
// the nodes gpuslice-node runs on, which nothing made the pod land on.
TEST(Webhook, HcsPodIsVisibleToTheDaemonAndLandsWhereTheLibraryIs) {
  WebhookOptions options;
  options.node_selector = {{"gpuslice.io/node", "true"}};
  auto r = review(test::fixture("admission_hcs_vram.json"), options);
  ASSERT_EQ(r.response["allowed"], true) << r.response.dump();
  json pod = json::parse(test::fixture("admission_hcs_vram.json"))["request"]["object"];
  json patched = pod.patch(r.patch);
  const json& server = patched["spec"]["containers"][0];
  bool shared = false;
  for (const auto& var : server["env"]) {
    if (var["name"] == "GPUSLICE_SHARED_DIR") shared = var["value"] == "/tmp/gpuslice/shared";
  }
  EXPECT_TRUE(shared) << server["env"].dump();
  bool mounted = false;
  for (const auto& m : server["volumeMounts"]) {
    if (m["mountPath"] == "/tmp/gpuslice") mounted = m["name"] == "gpuslice-state-c0";
  }
  EXPECT_TRUE(mounted);
  EXPECT_EQ(patched["spec"]["nodeSelector"], json({{"gpuslice.io/node", "true"}}));

  // Kept beside the pod's own selector; a contradicting one is refused, saying why.
  json own = json::parse(test::fixture("admission_hcs_vram.json"));
  own["request"]["object"]["spec"]["nodeSelector"] = {{"zone", "a"}};
  auto merged = review(own.dump(), options);
  json merged_pod = own["request"]["object"].patch(merged.patch);
  EXPECT_EQ(merged_pod["spec"]["nodeSelector"], json({{"zone", "a"}, {"gpuslice.io/node", "true"}}));
  own["request"]["object"]["spec"]["nodeSelector"] = {{"gpuslice.io/node", "false"}};
  auto refused = review(own.dump(), options);
  EXPECT_EQ(refused.response["allowed"], false);
  EXPECT_NE(refused.response["status"]["message"].get<std::string>().find("gpuslice.io/node"),
            std::string::npos);
}

// gpuslice.io/priority becomes GPUSLICE_PRIORITY of every container gpuslice manages (normalised,
// replacing a value the pod set itself); other containers are left alone.
TEST(Webhook, PriorityAnnotationSetsGpuslicePriorityInTheManagedContainers) {
  json review_json = json::parse(test::fixture("admission_hcs_vram.json"));
  json& pod = review_json["request"]["object"];
  pod["metadata"]["annotations"]["gpuslice.io/priority"] = " High ";
  pod["spec"]["containers"][0]["env"].push_back({{"name", "GPUSLICE_PRIORITY"}, {"value", "low"}});
  WebhookOptions options;
  options.priority.high_namespaces = {"inference"};  // the operator lets this namespace run at high
  auto r = review(review_json.dump(), options);
  ASSERT_EQ(r.response["allowed"], true) << r.body.dump();
  json patched = pod.patch(r.patch);
  const json& env = patched["spec"]["containers"][0]["env"];
  int found = 0;
  for (const json& var : env) {
    if (var["name"] != "GPUSLICE_PRIORITY") continue;
    ++found;
    EXPECT_EQ(var["value"], "high");
  }
  EXPECT_EQ(found, 1) << env.dump();
  EXPECT_EQ(patched["spec"]["initContainers"], pod["spec"]["initContainers"]) << "no GPU request: untouched";

  // Without the annotation nothing sets it.
  auto plain = review_fixture("admission_hcs_vram.json");
  EXPECT_EQ(plain.patch.dump().find("GPUSLICE_PRIORITY"), std::string::npos);
}

// What was found (1): any pod could claim high priority with the annotation. Only the namespaces
// and PriorityClasses the operator named may.
TEST(Webhook, ThePriorityAnnotationHighIsRefusedOutsideTheAllowedNamespacesAndClasses) {
  json review_json = json::parse(test::fixture("admission_hcs_vram.json"));
  review_json["request"]["object"]["metadata"]["annotations"]["gpuslice.io/priority"] = "high";
  auto refused = review(review_json.dump());
  EXPECT_EQ(refused.response["allowed"], false) << refused.body.dump();
  const std::string message = refused.response["status"]["message"];
  EXPECT_NE(message.find("inference"), std::string::npos) << message;

  WebhookOptions other;
  other.priority.high_namespaces = {"serving"};
  EXPECT_EQ(review(review_json.dump(), other).response["allowed"], false);

  WebhookOptions by_class;
  by_class.priority.priority_classes = {{"latency-critical", Priority::High}};
  review_json["request"]["object"]["spec"]["priorityClassName"] = "latency-critical";
  EXPECT_EQ(review(review_json.dump(), by_class).response["allowed"], true);

  // Anyone may ask for normal or low.
  json low = json::parse(test::fixture("admission_hcs_vram.json"));
  low["request"]["object"]["metadata"]["annotations"]["gpuslice.io/priority"] = "low";
  EXPECT_EQ(review(low.dump()).response["allowed"], true);
}

// What was found (1): the webhook passed a pod's own GPUSLICE_PRIORITY through. It is judged like
// the annotation: high is refused where not allowed, and what passes is the webhook's value.
TEST(Webhook, APodsOwnGpuslicePriorityIsJudgedLikeTheAnnotation) {
  json review_json = json::parse(test::fixture("admission_hcs_vram.json"));
  json& pod = review_json["request"]["object"];
  pod["spec"]["containers"][0]["env"].push_back({{"name", "GPUSLICE_PRIORITY"}, {"value", "high"}});
  auto refused = review(review_json.dump());
  EXPECT_EQ(refused.response["allowed"], false) << refused.body.dump();

  pod["spec"]["containers"][0]["env"].back()["value"] = " LOW";
  auto r = review(review_json.dump());
  ASSERT_EQ(r.response["allowed"], true) << r.body.dump();
  json patched = pod.patch(r.patch);
  int found = 0;
  for (const json& var : patched["spec"]["containers"][0]["env"]) {
    if (var["name"] != "GPUSLICE_PRIORITY") continue;
    ++found;
    EXPECT_EQ(var["value"], "low");
  }
  EXPECT_EQ(found, 1);

  pod["spec"]["containers"][0]["env"].back() = {{"name", "GPUSLICE_PRIORITY"},
                                                {"valueFrom", {{"configMapKeyRef", {{"name", "x"}}}}}};
  EXPECT_EQ(review(review_json.dump()).response["allowed"], false) << "a value it cannot check";
}

// What was found (7): GPUSLICE_PRIORITY through envFrom (a ConfigMap's or Secret's keys) passed the
// webhook unjudged. A container that may take it from there gets an explicit GPUSLICE_PRIORITY,
// which wins over envFrom: the level the operator's policy gives the pod, with a warning saying so.
TEST(Webhook, GpuslicePriorityThroughEnvFromCannotPassUnjudged) {
  json review_json = json::parse(test::fixture("admission_hcs_vram.json"));
  json& pod = review_json["request"]["object"];
  for (const json& source : {json{{"configMapRef", {{"name", "tenant-config"}}}},
                             json{{"secretRef", {{"name", "tenant-secret"}}}, {"prefix", "GPUSLICE_"}}}) {
    pod["spec"]["containers"][0]["envFrom"] = json::array({source});
    auto r = review(review_json.dump());
    ASSERT_EQ(r.response["allowed"], true) << r.body.dump();
    json patched = pod.patch(r.patch);
    int found = 0;
    for (const json& var : patched["spec"]["containers"][0]["env"]) {
      if (var["name"] != "GPUSLICE_PRIORITY") continue;
      ++found;
      EXPECT_EQ(var["value"], "normal") << "the operator's level for a pod outside the high namespaces";
    }
    EXPECT_EQ(found, 1) << "envFrom's GPUSLICE_PRIORITY would be the container's, unjudged: "
                        << source.dump();
    EXPECT_NE(r.response.dump().find("envFrom"), std::string::npos) << "a warning says why";
  }
  pod["spec"]["containers"][0]["envFrom"] =
      json::array({{{"configMapRef", {{"name", "app"}}}, {"prefix", "APP_"}}});
  auto unrelated = review(review_json.dump());
  ASSERT_EQ(unrelated.response["allowed"], true);
  EXPECT_EQ(unrelated.patch.dump().find("GPUSLICE_PRIORITY"), std::string::npos)
      << "a prefix that cannot name it";
  WebhookOptions options;
  options.priority.high_namespaces = {"default"};
  pod["spec"]["containers"][0]["envFrom"] = json::array({{{"configMapRef", {{"name", "c"}}}}});
  pod["metadata"]["namespace"] = "default";
  review_json["request"]["namespace"] = "default";
  auto high = review(review_json.dump(), options);
  ASSERT_EQ(high.response["allowed"], true) << high.body.dump();
  EXPECT_NE(high.patch.dump().find(R"({"name":"GPUSLICE_PRIORITY","value":"high"})"), std::string::npos)
      << high.patch.dump();
}

// A PriorityClass the operator mapped gives its pods that level when they name none.
TEST(Webhook, APriorityClassMappedToALevelGivesItsPodsThatLevel) {
  json review_json = json::parse(test::fixture("admission_hcs_vram.json"));
  review_json["request"]["object"]["spec"]["priorityClassName"] = "batch";
  WebhookOptions options;
  options.priority.priority_classes = {{"batch", Priority::Low}};
  auto r = review(review_json.dump(), options);
  ASSERT_EQ(r.response["allowed"], true) << r.body.dump();
  EXPECT_NE(r.patch.dump().find(R"({"name":"GPUSLICE_PRIORITY","value":"low"})"), std::string::npos)
      << r.patch.dump();
}

TEST(Webhook, PriorityPolicyFlagsParseNamespacesAndClasses) {
  EXPECT_EQ(*parse_namespace_list("serving,inference-2"),
            (std::vector<std::string>{"serving", "inference-2"}));
  EXPECT_TRUE(parse_namespace_list("")->empty());
  EXPECT_FALSE(parse_namespace_list("a,,b").ok());
  EXPECT_FALSE(parse_namespace_list("Bad_NS").ok());
  auto classes = parse_priority_classes("critical=high,batch=LOW");
  ASSERT_TRUE(classes.ok()) << classes.error();
  EXPECT_EQ(classes->at("critical"), Priority::High);
  EXPECT_EQ(classes->at("batch"), Priority::Low);
  EXPECT_FALSE(parse_priority_classes("critical").ok());
  EXPECT_FALSE(parse_priority_classes("critical=urgent").ok());
}

TEST(Webhook, ABadPriorityAnnotationDeniesThePodNamingTheAnnotationAndTheLevels) {
  for (const json& value : {json("urgent"), json(2), json("")}) {
    json review_json = json::parse(test::fixture("admission_hcs_vram.json"));
    review_json["request"]["object"]["metadata"]["annotations"]["gpuslice.io/priority"] = value;
    auto r = review(review_json.dump());
    ASSERT_EQ(r.http_status, 200);
    EXPECT_EQ(r.response["allowed"], false) << value.dump();
    const std::string message = r.response["status"]["message"];
    EXPECT_NE(message.find("gpuslice.io/priority"), std::string::npos) << message;
    EXPECT_NE(message.find("high"), std::string::npos) << message;
    EXPECT_NE(message.find("low"), std::string::npos) << message;
  }
}

// The value of `name` in a patched container's env, or null.
json env_value(const json& container, const std::string& name) {
  json found = nullptr;
  for (const json& var : container["env"]) {
    if (var["name"] == name) found = var["value"];
  }
  return found;
}

TEST(Webhook, TheGuaranteeAnnotationBecomesGpusliceMemoryGuaranteeWithinTheLimit) {
  json review_json = json::parse(test::fixture("admission_hcs_vram.json"));
  json& pod = review_json["request"]["object"];
  pod["metadata"]["annotations"]["gpuslice.io/memory-guarantee"] = "4Gi";
  auto r = review(review_json.dump());
  ASSERT_EQ(r.response["allowed"], true) << r.body.dump();
  json patched = pod.patch(r.patch);
  EXPECT_EQ(env_value(patched["spec"]["containers"][0], "GPUSLICE_MEMORY_GUARANTEE"),
            std::to_string(4ULL << 30));
  EXPECT_EQ(env_value(patched["spec"]["containers"][0], "GPUSLICE_MEMORY_LIMIT"), std::to_string(16ULL << 30))
      << "the limit is unchanged";
  EXPECT_EQ(patched["spec"]["initContainers"], pod["spec"]["initContainers"]) << "no GPU request: untouched";
  auto plain = review_fixture("admission_hcs_vram.json");
  EXPECT_EQ(plain.patch.dump().find("GPUSLICE_MEMORY_GUARANTEE"), std::string::npos)
      << "none asked: none set";

  // A device plugin pod: its limit comes from Allocate; the library holds the guarantee to it.
  json dp = json::parse(test::fixture("admission_gpuslice_vram.json"));
  dp["request"]["object"]["metadata"]["annotations"]["gpuslice.io/memory-guarantee"] = "1Gi";
  auto d = review(dp.dump());
  ASSERT_EQ(d.response["allowed"], true) << d.body.dump();
  json dp_patched = dp["request"]["object"].patch(d.patch);
  EXPECT_EQ(env_value(dp_patched["spec"]["containers"][0], "GPUSLICE_MEMORY_GUARANTEE"),
            std::to_string(1ULL << 30));
}

TEST(Webhook, AGuaranteeAboveTheLimitOrMalformedDeniesThePod) {
  json review_json = json::parse(test::fixture("admission_hcs_vram.json"));
  review_json["request"]["object"]["metadata"]["annotations"]["gpuslice.io/memory-guarantee"] = "17Gi";
  auto above = review(review_json.dump());
  ASSERT_EQ(above.http_status, 200);
  EXPECT_EQ(above.response["allowed"], false);
  const std::string message = above.response["status"]["message"];
  EXPECT_NE(message.find("gpuslice.io/memory-guarantee (18253611008 bytes) is above"), std::string::npos)
      << message;
  EXPECT_NE(message.find("ai.compute/vram (17179869184 bytes)"), std::string::npos) << message;
  for (const json& value : {json("lots"), json(4), json("0"), json("-1Gi")}) {
    json bad = json::parse(test::fixture("admission_hcs_vram.json"));
    bad["request"]["object"]["metadata"]["annotations"]["gpuslice.io/memory-guarantee"] = value;
    auto r = review(bad.dump());
    EXPECT_EQ(r.response["allowed"], false) << value.dump();
    EXPECT_NE(r.response["status"]["message"].get<std::string>().find("gpuslice.io/memory-guarantee"),
              std::string::npos)
        << r.body.dump();
  }
}

TEST(Webhook, OtherPodsAndObjectsPassUntouched) {
  for (const char* name : {"admission_no_gpu.json", "admission_not_pod.json"}) {
    auto r = review_fixture(name);
    ASSERT_EQ(r.http_status, 200) << name;
    EXPECT_EQ(r.response["allowed"], true) << name;
    EXPECT_FALSE(r.response.contains("patch")) << name;
    EXPECT_FALSE(r.response.contains("patchType")) << name;
    EXPECT_EQ(r.response["uid"], json::parse(test::fixture(name))["request"]["uid"]) << name;
  }
  // Opted out by annotation.
  json opt_out = json::parse(test::fixture("admission_hcs_vram.json"));
  opt_out["request"]["object"]["metadata"]["annotations"] = {{"gpuslice.io/inject", "false"}};
  auto r = review(opt_out.dump());
  EXPECT_EQ(r.response["allowed"], true);
  EXPECT_FALSE(r.response.contains("patch"));
  // Updates are not mutated.
  json update = json::parse(test::fixture("admission_hcs_vram.json"));
  update["request"]["operation"] = "UPDATE";
  EXPECT_FALSE(review(update.dump()).response.contains("patch"));
}

TEST(Webhook, MalformedReviewsAreRefusedWithAMessage) {
  struct Case {
    const char* fixture;
    const char* message_part;
  };
  for (const Case& c :
       {Case{"admission_malformed.json", "not valid JSON"}, Case{"admission_missing_uid.json", "request.uid"},
        Case{"admission_wrong_version.json", "expected apiVersion admission.k8s.io/v1"}}) {
    auto r = review_fixture(c.fixture);
    EXPECT_EQ(r.http_status, 400) << c.fixture;
    ASSERT_TRUE(r.body.contains("error")) << c.fixture;
    EXPECT_NE(r.body["error"].get<std::string>().find(c.message_part), std::string::npos) << r.body["error"];
  }
  for (const char* body :
       {"", "[]", "42", R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"})",
        R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}})"}) {
    EXPECT_EQ(review_admission(body, {}).http_status, 400) << body;
  }
}

TEST(Webhook, BadPodsAreDeniedWithTheReason) {
  auto quantity = review_fixture("admission_bad_quantity.json");
  ASSERT_EQ(quantity.http_status, 200);
  EXPECT_EQ(quantity.response["uid"], "b7c6d5e4-f3a2-4b1c-9d8e-7f6a5b4c3d2e");
  EXPECT_EQ(quantity.response["allowed"], false);
  EXPECT_EQ(quantity.response["status"]["code"], 400);
  const std::string message = quantity.response["status"]["message"];
  EXPECT_NE(message.find("container \"worker\""), std::string::npos) << message;
  EXPECT_NE(message.find("ai.compute/vram"), std::string::npos) << message;
  EXPECT_NE(message.find("negative"), std::string::npos) << message;

  auto preload = review_fixture("admission_preload_valuefrom.json");
  EXPECT_EQ(preload.response["allowed"], false);
  EXPECT_NE(preload.response["status"]["message"].get<std::string>().find("valueFrom"), std::string::npos);

  json base = json::parse(test::fixture("admission_hcs_vram.json"));
  auto with = [&](const std::function<void(json&)>& edit) {
    json copy = base;
    edit(copy["request"]["object"]);
    return review(copy.dump());
  };
  auto both = with(
      [](json& pod) { pod["spec"]["containers"][0]["resources"]["limits"]["gpuslice.io/vram"] = "1024"; });
  EXPECT_EQ(both.response["allowed"], false);
  EXPECT_NE(both.response["status"]["message"].get<std::string>().find("both"), std::string::npos);
  auto zero =
      with([](json& pod) { pod["spec"]["containers"][0]["resources"]["requests"]["ai.compute/vram"] = "0"; });
  EXPECT_EQ(zero.response["allowed"], false);
  auto fraction = with([](json& pod) {
    pod["spec"]["containers"][0]["resources"]["requests"].erase("ai.compute/vram");
    pod["spec"]["containers"][0]["resources"]["requests"]["gpuslice.io/vram"] = "500m";
  });
  EXPECT_EQ(fraction.response["allowed"], false);
  EXPECT_NE(fraction.response["status"]["message"].get<std::string>().find("whole"), std::string::npos);
  auto not_a_list = with([](json& pod) { pod["spec"]["containers"] = {{"name", "x"}}; });
  EXPECT_EQ(not_a_list.response["allowed"], false);
  auto no_object = review(R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
      "request":{"uid":"u1","kind":{"kind":"Pod"},"operation":"CREATE"}})");
  EXPECT_EQ(no_object.http_status, 200);
  EXPECT_EQ(no_object.response["uid"], "u1");
  EXPECT_EQ(no_object.response["allowed"], false);
}

TEST(Webhook, ServesOverTls) {
  WebhookServerOptions server_options;
  server_options.host = "127.0.0.1";
  server_options.port = 0;
  server_options.tls_cert_file = std::string(GPUSLICE_NODE_FIXTURES) + "/tls/tls.crt";
  server_options.tls_key_file = std::string(GPUSLICE_NODE_FIXTURES) + "/tls/tls.key";
  server_options.limits.max_connections = 2;
  WebhookServer server(server_options, {});
  auto port = server.start();
  ASSERT_TRUE(port.ok()) << port.error();

  httplib::SSLClient client("127.0.0.1", *port);
  client.set_ca_cert_path(server_options.tls_cert_file.c_str());
  client.enable_server_certificate_verification(true);
  auto res = client.Post("/mutate", test::fixture("admission_hcs_vram.json"), "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  auto body = json::parse(res->body);
  EXPECT_EQ(body["response"]["allowed"], true);
  EXPECT_TRUE(body["response"].contains("patch"));
  auto bad = client.Post("/mutate", "{", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  server.stop();

  WebhookServerOptions missing = server_options;
  missing.tls_cert_file = "/nonexistent.crt";
  WebhookServer broken(missing, {});
  auto refused = broken.start();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("/nonexistent.crt"), std::string::npos);
}

// An apiVersion nested 100,000 levels deep (200 KB) once overflowed the stack in dump().
TEST(Webhook, DeeplyNestedAdmissionReviewIsRefusedWithoutCrashing) {
  for (const char* open_close : {"[]", "{}"}) {
    std::string nested;
    for (int i = 0; i < 100000; ++i) nested += open_close[0] == '[' ? "[" : "{\"a\":";
    nested += "1";
    for (int i = 0; i < 100000; ++i) nested += open_close[1];
    WebhookReply reply = review_admission(R"({"apiVersion":)" + nested + R"(,"kind":"AdmissionReview"})", {});
    EXPECT_EQ(reply.http_status, 400);
    EXPECT_NE(reply.body.find("nested deeper than"), std::string::npos) << reply.body;
  }
  // Nesting within the bound is still answered normally.
  auto ok = review_fixture("admission_hcs_vram.json");
  EXPECT_EQ(ok.http_status, 200);
}

TEST(Webhook, OversizedReviewIsRefusedWith413) {
  std::string body = R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","pad":")";
  body += std::string(kMaxReviewBytes, 'x') + "\"}";
  EXPECT_EQ(review_admission(body, {}).http_status, 413);
}

TEST(Webhook, DuplicateJsonKeysAreRefused) {
  // Which "uid" or "object" a reader takes must not be a matter of parser choice.
  auto reply = review_admission(
      R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
          "request":{"uid":"u1","uid":"u2","kind":{"kind":"Pod"},"operation":"CREATE","object":{}}})",
      {});
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_NE(reply.body.find("duplicate key \\\"uid\\\""), std::string::npos) << reply.body;
}

TEST(Webhook, ForgedRequestUidCannotInjectLogLines) {
  const std::string forged = "u1\n[gpuslice 1] ERROR: forged line";
  json request = json::parse(test::fixture("admission_hcs_vram.json"));
  request["request"]["uid"] = forged;
  request["request"]["object"]["spec"]["containers"][0]["name"] = "app\r\n[gpuslice 1] WARN: forged too";
  request["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["ai.compute/vram"] = "-1Gi";
  testing::internal::CaptureStderr();
  auto r = review(request.dump());
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.response["allowed"], false);
  EXPECT_EQ(r.response["uid"], forged);  // answered with the uid it came with
  EXPECT_NE(log.find("denied"), std::string::npos) << log;
  EXPECT_EQ(log.find("\n[gpuslice 1]"), std::string::npos) << log;
  EXPECT_EQ(log.find('\r'), std::string::npos) << log;
  EXPECT_NE(log.find("u1\\x0a[gpuslice 1] ERROR: forged line"), std::string::npos) << log;
}

TEST(Webhook, InvalidUtf8IsRefusedNotFatal) {
  std::string body = test::fixture("admission_hcs_vram.json");
  body.replace(body.find("\"uid\"") + 8, 1, "\xff");
  WebhookReply reply = review_admission(body, {});
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_FALSE(json::parse(reply.body, nullptr, false).is_discarded()) << reply.body;
}

}  // namespace
}  // namespace gpuslice::node
