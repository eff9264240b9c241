// Shape checks of deploy/: the plain manifests (parsed with yaml-cpp, cross-referenced, and their
// command lines parsed by the daemon's own option parser) and the Helm chart (metadata, values
// every template refers to, balanced blocks, helpers defined).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "node/dra_mode.h"
#include "node/serve_mode.h"
#include "node/webhook_mode.h"

namespace gpuslice::node {
namespace {

const std::string kDeploy = GPUSLICE_DEPLOY_DIR;
const std::string kNamespace = "gpuslice-system";

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Manifests {
  std::vector<YAML::Node> docs;
  const YAML::Node* find(const std::string& kind, const std::string& name = "") const {
    for (const auto& d : docs) {
      if (d["kind"].as<std::string>() == kind &&
          (name.empty() || d["metadata"]["name"].as<std::string>() == name)) {
        return &d;
      }
    }
    return nullptr;
  }
};

Manifests load_manifests() {
  Manifests m;
  for (const auto& entry : std::filesystem::directory_iterator(kDeploy + "/kubernetes")) {
    if (entry.path().extension() != ".yaml" || entry.path().filename() == "kustomization.yaml") continue;
    for (const auto& doc : YAML::LoadAllFromFile(entry.path().string())) {
      if (doc.IsNull()) continue;
      m.docs.push_back(doc);
    }
  }
  return m;
}

bool labels_cover(const YAML::Node& selector, const YAML::Node& labels) {
  if (!selector.IsMap() || selector.size() == 0) return false;
  for (const auto& kv : selector) {
    if (!labels[kv.first.as<std::string>()] ||
        labels[kv.first.as<std::string>()].as<std::string>() != kv.second.as<std::string>()) {
      return false;
    }
  }
  return true;
}

std::vector<std::string> strings(const YAML::Node& list) {
  std::vector<std::string> out;
  for (const auto& item : list) out.push_back(item.as<std::string>());
  return out;
}

// Every volumeMount names a declared volume; returns volumes by name.
std::map<std::string, YAML::Node> check_volumes(const YAML::Node& pod_spec) {
  std::map<std::string, YAML::Node> volumes;
  for (const auto& v : pod_spec["volumes"]) volumes.emplace(v["name"].as<std::string>(), YAML::Node(v));
  for (const char* list : {"initContainers", "containers"}) {
    for (const auto& c : pod_spec[list]) {
      for (const auto& m : c["volumeMounts"]) {
        EXPECT_EQ(volumes.count(m["name"].as<std::string>()), 1u) << "undeclared volume " << m["name"];
      }
    }
  }
  return volumes;
}

std::optional<YAML::Node> mount_at(const YAML::Node& container, const std::string& path,
                                   std::string* volume) {
  for (const auto& m : container["volumeMounts"]) {
    if (m["mountPath"].as<std::string>() == path) {
      *volume = m["name"].as<std::string>();
      return YAML::Node(m);
    }
  }
  return std::nullopt;
}

ParseOutcome parse_args(const YAML::Node& container, bool serve, std::string& first) {
  auto args = strings(container["args"]);
  first = args.empty() ? "" : args[0];
  std::vector<std::string> rest(args.begin() + (args.empty() ? 0 : 1), args.end());
  auto no_env = [](const char*) -> const char* { return nullptr; };
  if (serve) {
    ServeOptions o;
    return parse_serve_options(rest, no_env, o);
  }
  WebhookModeOptions o;
  return parse_webhook_options(rest, no_env, o);
}

TEST(Manifests, EveryObjectIsWellFormedAndListedInKustomization) {
  Manifests m = load_manifests();
  std::multiset<std::string> kinds;
  std::set<std::string> cluster_scoped = {"Namespace", "MutatingWebhookConfiguration"};
  for (const auto& d : m.docs) {
    ASSERT_TRUE(d["apiVersion"] && d["kind"] && d["metadata"]["name"]) << YAML::Dump(d);
    const std::string kind = d["kind"].as<std::string>();
    kinds.insert(kind);
    if (!cluster_scoped.count(kind)) {
      EXPECT_EQ(d["metadata"]["namespace"].as<std::string>(""), kNamespace)
          << kind << " " << d["metadata"]["name"];
    }
  }
  for (const char* kind : {"Namespace", "DaemonSet", "Deployment", "Service", "MutatingWebhookConfiguration",
                           "PodDisruptionBudget", "Issuer", "Certificate"}) {
    EXPECT_EQ(kinds.count(kind), 1u) << kind;
  }
  EXPECT_EQ(kinds.count("ServiceAccount"), 2u);

  YAML::Node kustomization = YAML::LoadFile(kDeploy + "/kubernetes/kustomization.yaml");
  std::set<std::string> listed;
  for (const auto& r : kustomization["resources"]) listed.insert(r.as<std::string>());
  std::set<std::string> present;
  for (const auto& entry : std::filesystem::directory_iterator(kDeploy + "/kubernetes")) {
    if (entry.path().extension() == ".yaml" && entry.path().filename() != "kustomization.yaml") {
      present.insert(entry.path().filename().string());
    }
  }
  EXPECT_EQ(listed, present);
}

TEST(Manifests, DaemonSetServesTheDevicePluginAndHostState) {
  Manifests m = load_manifests();
  const YAML::Node* ds = m.find("DaemonSet", "gpuslice-node");
  ASSERT_TRUE(ds);
  const YAML::Node& tpl = (*ds)["spec"]["template"];
  EXPECT_TRUE(labels_cover((*ds)["spec"]["selector"]["matchLabels"], tpl["metadata"]["labels"]));
  const YAML::Node& spec = tpl["spec"];
  ASSERT_TRUE(m.find("ServiceAccount", spec["serviceAccountName"].as<std::string>()));
  auto volumes = check_volumes(spec);
  const YAML::Node& c = spec["containers"][0];

  std::string first;
  auto parsed = parse_args(c, true, first);
  EXPECT_EQ(first, "serve");
  EXPECT_EQ(parsed.message, "") << "the daemon rejects its own manifest's flags";

  std::string volume;
  ASSERT_TRUE(mount_at(c, "/var/lib/kubelet/device-plugins", &volume)) << "kubelet device plugin directory";
  EXPECT_EQ(volumes[volume]["hostPath"]["path"].as<std::string>(), "/var/lib/kubelet/device-plugins");
  ASSERT_TRUE(mount_at(c, "/var/lib/gpuslice", &volume));
  EXPECT_EQ(volumes[volume]["hostPath"]["path"].as<std::string>(), "/var/lib/gpuslice");
  auto pods = mount_at(c, "/var/lib/kubelet/pods", &volume);
  ASSERT_TRUE(pods);
  EXPECT_TRUE((*pods)["readOnly"].as<bool>(false));

  // The port the daemon listens on is the declared, probed and scraped one.
  auto args = strings(c["args"]);
  EXPECT_NE(std::find(args.begin(), args.end(), "--listen=0.0.0.0:9410"), args.end());
  EXPECT_EQ(c["ports"][0]["containerPort"].as<int>(), 9410);
  EXPECT_EQ(c["livenessProbe"]["httpGet"]["path"].as<std::string>(), "/healthz");
  EXPECT_EQ(c["livenessProbe"]["httpGet"]["port"].as<std::string>(), c["ports"][0]["name"].as<std::string>());
  EXPECT_EQ(tpl["metadata"]["annotations"]["prometheus.io/port"].as<std::string>(), "9410");

  // The init container installs the library where Allocate mounts it from.
  const YAML::Node& init = spec["initContainers"][0];
  ASSERT_TRUE(mount_at(init, "/host/gpuslice", &volume));
  EXPECT_EQ(volumes[volume]["hostPath"]["path"].as<std::string>(), "/var/lib/gpuslice");
  EXPECT_NE(init["command"][2].as<std::string>().find("/host/gpuslice/lib/libgpuslice.so"),
            std::string::npos);
}

TEST(Manifests, WebhookIsReachableThroughItsServiceWithTls) {
  Manifests m = load_manifests();
  const YAML::Node* dep = m.find("Deployment", "gpuslice-webhook");
  const YAML::Node* svc = m.find("Service", "gpuslice-webhook");
  const YAML::Node* mwc = m.find("MutatingWebhookConfiguration");
  const YAML::Node* cert = m.find("Certificate");
  ASSERT_TRUE(dep && svc && mwc && cert);

  const YAML::Node& tpl = (*dep)["spec"]["template"];
  EXPECT_TRUE(labels_cover((*dep)["spec"]["selector"]["matchLabels"], tpl["metadata"]["labels"]));
  EXPECT_TRUE(labels_cover((*svc)["spec"]["selector"], tpl["metadata"]["labels"]));
  const YAML::Node& c = tpl["spec"]["containers"][0];
  std::string first;
  auto parsed = parse_args(c, false, first);
  EXPECT_EQ(first, "webhook");
  EXPECT_EQ(parsed.message, "");
  auto volumes = check_volumes(tpl["spec"]);
  std::string volume;
  ASSERT_TRUE(mount_at(c, "/etc/gpuslice/tls", &volume));
  EXPECT_EQ(volumes[volume]["secret"]["secretName"].as<std::string>(),
            (*cert)["spec"]["secretName"].as<std::string>());
  auto args = strings(c["args"]);
  EXPECT_NE(std::find(args.begin(), args.end(), "--tls-cert=/etc/gpuslice/tls/tls.crt"), args.end());
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["scheme"].as<std::string>(), "HTTPS");

  // Service port -> named container port.
  EXPECT_EQ((*svc)["spec"]["ports"][0]["targetPort"].as<std::string>(),
            c["ports"][0]["name"].as<std::string>());
  EXPECT_EQ(c["ports"][0]["containerPort"].as<int>(), 8443);

  const YAML::Node& hook = (*mwc)["webhooks"][0];
  auto versions = strings(hook["admissionReviewVersions"]);
  EXPECT_NE(std::find(versions.begin(), versions.end(), "v1"), versions.end());
  EXPECT_EQ(hook["sideEffects"].as<std::string>(), "None");
  EXPECT_TRUE(hook["failurePolicy"]);
  const YAML::Node& ref = hook["clientConfig"]["service"];
  EXPECT_EQ(ref["name"].as<std::string>(), (*svc)["metadata"]["name"].as<std::string>());
  EXPECT_EQ(ref["namespace"].as<std::string>(), kNamespace);
  EXPECT_EQ(ref["path"].as<std::string>(), "/mutate");
  EXPECT_EQ(ref["port"].as<int>(), (*svc)["spec"]["ports"][0]["port"].as<int>());
  const YAML::Node& rule = hook["rules"][0];
  EXPECT_EQ(strings(rule["resources"]), std::vector<std::string>{"pods"});
  EXPECT_EQ(strings(rule["operations"]), std::vector<std::string>{"CREATE"});
  auto excluded = strings(hook["namespaceSelector"]["matchExpressions"][0]["values"]);
  EXPECT_NE(std::find(excluded.begin(), excluded.end(), kNamespace), excluded.end())
      << "the webhook must not gate its own pods";
  EXPECT_EQ((*mwc)["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].as<std::string>(),
            kNamespace + "/" + (*cert)["metadata"]["name"].as<std::string>());
  auto names = strings((*cert)["spec"]["dnsNames"]);
  EXPECT_NE(std::find(names.begin(), names.end(), "gpuslice-webhook.gpuslice-system.svc"), names.end());
}

TEST(Manifests, ServiceAccountsCarryNoApiToken) {
  Manifests m = load_manifests();
  for (const auto& d : m.docs) {
    if (d["kind"].as<std::string>() == "ServiceAccount") {
      EXPECT_FALSE(d["automountServiceAccountToken"].as<bool>(true)) << d["metadata"]["name"];
    }
  }
}

// ---- Helm chart -------------------------------------------------------------------------------

TEST(HelmChart, MetadataAndValues) {
  const std::string chart = kDeploy + "/helm/gpuslice";
  YAML::Node meta = YAML::LoadFile(chart + "/Chart.yaml");
  EXPECT_EQ(meta["apiVersion"].as<std::string>(), "v2");
  EXPECT_EQ(meta["name"].as<std::string>(), "gpuslice");
  EXPECT_TRUE(std::regex_match(meta["version"].as<std::string>(), std::regex(R"(\d+\.\d+\.\d+)")));
  EXPECT_TRUE(meta["appVersion"]);
  YAML::Node values = YAML::LoadFile(chart + "/values.yaml");
  EXPECT_TRUE(values["image"]["repository"]);
  EXPECT_EQ(values["hostRoot"].as<std::string>(), "/var/lib/gpuslice");
}

TEST(HelmChart, TemplatesReferOnlyToDefinedValuesAndHelpers) {
  const std::string chart = kDeploy + "/helm/gpuslice";
  YAML::Node values = YAML::LoadFile(chart + "/values.yaml");
  const std::string helpers = slurp(chart + "/templates/_helpers.tpl");
  std::set<std::string> defined;
  std::regex define_re(R"re(\{\{-?\s*define\s+"([^"]+)")re");
  for (std::sregex_iterator it(helpers.begin(), helpers.end(), define_re), end; it != end; ++it) {
    defined.insert((*it)[1]);
  }
  EXPECT_EQ(defined.count("gpuslice.labels"), 1u);

  std::set<std::string> kinds;
  int templates = 0;
  for (const auto& entry : std::filesystem::directory_iterator(chart + "/templates")) {
    const std::string name = entry.path().filename().string();
    const std::string text = slurp(entry.path().string());
    ++templates;
    // Every .Values path exists in values.yaml.
    std::regex values_re(R"(\.Values((?:\.[A-Za-z0-9_]+)+))");
    for (std::sregex_iterator it(text.begin(), text.end(), values_re), end; it != end; ++it) {
      std::string path = (*it)[1];
      YAML::Node node = YAML::Clone(values);
      std::stringstream parts(path.substr(1));
      std::string key;
      while (std::getline(parts, key, '.')) {
        ASSERT_TRUE(node.IsMap() && node[key]) << name << ": .Values" << path << " is not in values.yaml";
        node.reset(node[key]);
      }
    }
    // Every include names a defined helper.
    std::regex include_re(R"re(include\s+"([^"]+)")re");
    for (std::sregex_iterator it(text.begin(), text.end(), include_re), end; it != end; ++it) {
      EXPECT_EQ(defined.count((*it)[1]), 1u) << name << " includes undefined " << (*it)[1];
    }
    // Actions open and close in pairs, and so do the blocks.
    std::size_t opens = 0, closes = 0;
    for (std::size_t p = text.find("{{"); p != std::string::npos; p = text.find("{{", p + 2)) ++opens;
    for (std::size_t p = text.find("}}"); p != std::string::npos; p = text.find("}}", p + 2)) ++closes;
    EXPECT_EQ(opens, closes) << name;
    std::regex block_re(R"(\{\{-?\s*(if|range|with|define)\b)");
    std::regex end_re(R"(\{\{-?\s*end\s*-?\}\})");
    auto count = [&](const std::regex& re) {
      return std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator());
    };
    EXPECT_EQ(count(block_re), count(end_re)) << name << ": unbalanced if/range/with/define";
    std::regex kind_re(R"(^kind:\s*(\w+))", std::regex::multiline);
    for (std::sregex_iterator it(text.begin(), text.end(), kind_re), end; it != end; ++it)
      kinds.insert((*it)[1]);
  }
  EXPECT_GE(templates, 6);
  // The chart deploys what the plain manifests do (the Namespace is Helm's --create-namespace).
  for (const char* kind : {"DaemonSet", "Deployment", "Service", "MutatingWebhookConfiguration",
                           "ServiceAccount", "PodDisruptionBudget", "Certificate", "Issuer"}) {
    EXPECT_EQ(kinds.count(kind), 1u) << kind;
  }
}

// The DaemonSet's args from `first` (the mode's line) to the next template action, with the values
// substituted (the only template actions inside such a block).
std::vector<std::string> daemonset_args(const std::string& first, const YAML::Node& values) {
  const std::string chart = kDeploy + "/helm/gpuslice";
  const std::string text = slurp(chart + "/templates/daemonset.yaml");
  std::size_t start = text.find("            - " + first + "\n");
  EXPECT_NE(start, std::string::npos) << first;
  if (start == std::string::npos) return {};
  std::size_t stop = text.find("{{-", start);
  std::stringstream block(text.substr(start, stop - start));
  std::vector<std::string> args;
  std::string line;
  std::regex value_re(R"(\{\{\s*\.Values\.([A-Za-z0-9_.]+)\s*\}\})");
  std::regex join_re(R"(\{\{\s*join\s+","\s+\.Values\.([A-Za-z0-9_.]+)\s*\}\})");
  auto lookup = [&](const std::string& path) {
    YAML::Node node = YAML::Clone(values);
    std::stringstream parts(path);
    std::string key;
    while (std::getline(parts, key, '.')) node.reset(node[key]);
    return node;
  };
  while (std::getline(block, line)) {
    if (line.find("- ") == std::string::npos) continue;
    std::string arg = line.substr(line.find("- ") + 2);
    std::smatch match;
    if (std::regex_search(arg, match, join_re)) {
      std::string joined;
      for (const auto& item : lookup(match[1]))
        joined += (joined.empty() ? "" : ",") + item.as<std::string>();
      arg = match.prefix().str() + joined + match.suffix().str();
    }
    while (std::regex_search(arg, match, value_re)) {
      arg = match.prefix().str() + lookup(match[1]).as<std::string>() + match.suffix().str();
    }
    args.push_back(arg);
  }
  return args;
}

TEST(HelmChart, DaemonSetTemplatePassesTheFlagsTheDaemonKnows) {
  YAML::Node values = YAML::LoadFile(kDeploy + "/helm/gpuslice/values.yaml");
  auto args = daemonset_args("serve", values);
  ASSERT_FALSE(args.empty());
  ASSERT_EQ(args.at(0), "serve");
  ServeOptions o;
  auto parsed = parse_serve_options(
      std::vector<std::string>(args.begin() + 1, args.end()),
      [](const char*) -> const char* { return nullptr; }, o);
  EXPECT_EQ(parsed.message, "");
  EXPECT_EQ(o.api.port, values["node"]["port"].as<int>());
  EXPECT_EQ(o.plugin.resources.size(), 3u);
}

TEST(HelmChart, DaemonSetTemplatePassesTheDraFlagsTheDaemonKnows) {
  YAML::Node values = YAML::LoadFile(kDeploy + "/helm/gpuslice/values.yaml");
  auto args = daemonset_args("dra", values);
  ASSERT_FALSE(args.empty());
  DraModeOptions o;
  auto parsed = parse_dra_options(
      std::vector<std::string>(args.begin() + 1, args.end()),
      [](const char* name) -> const char* { return std::string(name) == "NODE_NAME" ? "node-a" : nullptr; },
      o);
  EXPECT_EQ(parsed.message, "");
  EXPECT_EQ(o.driver, values["dra"]["driverName"].as<std::string>());
  EXPECT_EQ(o.lease_duration, std::chrono::seconds(values["dra"]["leaseDurationSeconds"].as<int>()));
}

// One operator policy for priority high (values `priority`): the webhook, the daemon in device
// plugin mode and the DRA driver all render their --priority-* flags from the same helpers, never
// each from a value of its own (the daemon had none, the DRA driver dra.priorityHighNamespaces).
// check-chart.sh renders them with helm and compares the flags; this holds without helm.
TEST(HelmChart, EveryComponentTakesThePriorityPolicyFromTheSameValues) {
  const std::string chart = kDeploy + "/helm/gpuslice";
  const std::string daemonset = slurp(chart + "/templates/daemonset.yaml");
  const std::string webhook = slurp(chart + "/templates/webhook.yaml");
  auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
  };
  const std::string namespaces = R"(include "gpuslice.priorityHighNamespaces")";
  const std::string classes = R"(include "gpuslice.priorityClasses")";
  EXPECT_EQ(count(webhook, namespaces), 1u);
  EXPECT_EQ(count(webhook, classes), 1u);
  EXPECT_EQ(count(daemonset, namespaces), 2u) << "serve and dra";
  EXPECT_EQ(count(daemonset, classes), 1u) << "serve only: claims are judged by namespace";
  std::regex direct(R"(--priority-[a-z-]+=\{\{[^}]*\.Values)");
  for (const auto& entry : std::filesystem::directory_iterator(chart + "/templates")) {
    const std::string text = slurp(entry.path().string());
    EXPECT_FALSE(std::regex_search(text, direct))
        << entry.path().filename() << " renders a priority flag from a value";
  }
  YAML::Node values = YAML::LoadFile(chart + "/values.yaml");
  EXPECT_TRUE(values["priority"]["highNamespaces"].IsSequence());
  EXPECT_TRUE(values["priority"]["classes"].IsMap());
  // The daemon reads pods only with classes, and then may only get them.
  const std::string rbac = slurp(chart + "/templates/node-rbac.yaml");
  EXPECT_NE(rbac.find(R"({{- if include "gpuslice.nodeReadsPods" . }})"), std::string::npos);
  EXPECT_NE(rbac.find("resources: [\"pods\"]\n    verbs: [\"get\"]"), std::string::npos);
  EXPECT_NE(
      daemonset.find(
          R"(automountServiceAccountToken: {{ or .Values.dra.enabled (eq (include "gpuslice.nodeReadsPods" .) "true") }})"),
      std::string::npos);
}

}  // namespace
}  // namespace gpuslice::node
