#!/usr/bin/python3
"""Validates Kubernetes objects (YAML files or stdin) strictly against the Kubernetes API's schemas.

The schemas are built from the API models generated from Kubernetes' OpenAPI spec that
@kubernetes/client-node ships (scripts/chart/install-tools.sh puts them in .tools/k8s-models):
every field's name and type (*.js attributeTypeMap) and which fields are required (*.d.ts). They
become one JSON schema in which every object rejects fields it does not define, as `kubectl apply
--validate=strict` would. Objects of custom resources (ServiceMonitor, PrometheusRule, cert-manager)
have no schema here: they are reported as skipped, with the reason.

Also checks what ties the chart's objects together: selectors match their pods' labels, Services
reach a named container port, the webhook's Service and CA (the Secret's certificate must verify
against the caBundle and carry the Service's DNS name), the ServiceMonitor's Service and port.

usage: validate_k8s.py --models DIR FILE... ('-' reads stdin); exit 1 on any error.
       validate_k8s.py --models DIR --serve: one JSON object a line on stdin, one JSON answer a line
       on stdout ({"ok": bool, "report": text}), schemas only, until stdin ends (tests that validate
       many objects pay for starting Python and loading the models once).
"""
import argparse
import base64
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema
import yaml

# Kinds the project deploys, by API group: the model name alone does not tell the group.
KNOWN_GROUPS = {
    "ConfigMap": "", "Namespace": "", "Secret": "", "Service": "", "ServiceAccount": "",
    "DaemonSet": "apps", "Deployment": "apps",
    "PodDisruptionBudget": "policy",
    "MutatingWebhookConfiguration": "admissionregistration.k8s.io",
    "ClusterRole": "rbac.authorization.k8s.io", "ClusterRoleBinding": "rbac.authorization.k8s.io",
    "Role": "rbac.authorization.k8s.io", "RoleBinding": "rbac.authorization.k8s.io",
    "Lease": "coordination.k8s.io", "Pod": "",
    "ValidatingAdmissionPolicy": "admissionregistration.k8s.io",
    "ValidatingAdmissionPolicyBinding": "admissionregistration.k8s.io",
    "DeviceClass": "resource.k8s.io", "ResourceClaim": "resource.k8s.io",
    "ResourceClaimTemplate": "resource.k8s.io", "ResourceSlice": "resource.k8s.io",
}
# Custom resources: no schema in the Kubernetes API.
CUSTOM_GROUPS = {"monitoring.coreos.com", "cert-manager.io"}
# Fields of type resource.Quantity, which the generated models call string: YAML may write them as
# numbers (cpu: 1), which the API server accepts.
QUANTITY_MAPS = {("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests")}
QUANTITY_FIELDS = {("V1EmptyDirVolumeSource", "sizeLimit")}


class StrictLoader(yaml.SafeLoader):
    """Refuses a key given twice in one mapping, as the API server's decoder and kubectl do."""


def _mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


class Models:
    def __init__(self, directory):
        self.dir = directory
        self.definitions = {}
        self.loaded = set()

    def _fields(self, name):
        path = os.path.join(self.dir, name + ".js")
        if not os.path.exists(path):
            raise KeyError(name)
        text = open(path, encoding="utf-8").read()
        m = re.search(re.escape(name) + r"\.attributeTypeMap = (\[.*?\]);", text, re.S)
        fields = json.loads(m.group(1)) if m else []
        dts = open(os.path.join(self.dir, name + ".d.ts"), encoding="utf-8").read()
        required = set(re.findall(r"^\s+'([^']+)': ", dts, re.M))
        return fields, required

    def _type(self, owner, field, t, fmt):
        if t == "string":
            if (owner, field) in QUANTITY_FIELDS:
                return {"type": ["string", "number"]}
            return {"type": "string"}
        if t == "number":
            return {"type": "integer"} if fmt in ("int32", "int64") else {"type": "number"}
        if t == "boolean":
            return {"type": "boolean"}
        if t == "Date":
            return {"type": "string"}
        if t == "V1MicroTime":  # metav1.MicroTime: RFC 3339 with microseconds; no model file of its own
            return {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"}
        if t == "any":
            return {}
        if t == "IntOrString":
            return {"type": ["integer", "string"]}
        m = re.fullmatch(r"Array<(.+)>", t)
        if m:
            return {"type": "array", "items": self._type(owner, field, m.group(1), "")}
        m = re.fullmatch(r"\{ \[key: string\]: (.+); \}", t)
        if m:
            if (owner, field) in QUANTITY_MAPS:
                return {"type": "object", "additionalProperties": {"type": ["string", "number"]}}
            return {"type": "object", "additionalProperties": self._type(owner, field, m.group(1), "")}
        if re.fullmatch(r"[A-Z]\w+", t):
            self.load(t)
            return {"$ref": "#/definitions/" + t}
        raise ValueError(f"{owner}.{field}: type {t!r} not understood")

    def load(self, name):
        if name in self.loaded:
            return
        self.loaded.add(name)
        fields, required = self._fields(name)
        props = {}
        for f in fields:
            props[f["baseName"]] = self._type(name, f["baseName"], f["type"], f.get("format", ""))
        schema = {"type": "object", "properties": props, "additionalProperties": False}
        req = sorted(f["baseName"] for f in fields if f["name"] in required)
        if req:
            schema["required"] = req
        self.definitions[name] = schema

    def schema(self, name):
        self.load(name)
        return {"$ref": "#/definitions/" + name, "definitions": self.definitions}


# Kinds whose model name carries its group, because another group has a type of the same name
# (core/v1's ResourceClaim is a container's claim reference).
MODEL_NAMES = {("resource.k8s.io/v1", "ResourceClaim"): "ResourceV1ResourceClaim"}


def model_name(api_version, kind):
    if (api_version, kind) in MODEL_NAMES:
        return MODEL_NAMES[(api_version, kind)]
    version = api_version.split("/")[-1]
    return version[0].upper() + version[1:] + kind


def describe(error):
    path = "/".join(str(p) for p in error.absolute_path) or "(top)"
    return f"{path}: {error.message}"


class Checker:
    def __init__(self, models):
        self.models = models
        self.errors = []
        self.notes = []
        self.validated = 0

    def error(self, where, message):
        self.errors.append(f"{where}: {message}")

    def validate(self, doc, where):
        if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
            self.error(where, "not a Kubernetes object (apiVersion and kind missing)")
            return
        api_version, kind = doc["apiVersion"], doc["kind"]
        group = api_version.split("/")[0] if "/" in api_version else ""
        name = (doc.get("metadata") or {}).get("name")
        where = f"{where}: {kind}/{name}"
        if not name:
            self.error(where, "metadata.name missing")
        if group in CUSTOM_GROUPS:
            self.notes.append(f"{where} ({api_version}): custom resource, no schema in the Kubernetes API; "
                              "skipped")
            return
        if KNOWN_GROUPS.get(kind) != group:
            self.error(where, f"{api_version} {kind}: not a kind this validator knows in that API group")
            return
        try:
            schema = self.models.schema(model_name(api_version, kind))
        except KeyError:
            self.error(where, f"{api_version} {kind}: no such model in the Kubernetes API")
            return
        validator = jsonschema.Draft7Validator(schema)
        for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
            self.error(where, describe(e))
        self.validated += 1


def pod_template(doc):
    if doc.get("kind") in ("DaemonSet", "Deployment"):
        return doc["spec"]["template"]
    return None


def covers(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_links(docs, checker):
    """What ties the objects together, which no schema says."""
    workloads = [d for d in docs if pod_template(d)]
    services = {(d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs if d["kind"] == "Service"}
    for w in workloads:
        where = f"{w['kind']}/{w['metadata']['name']}"
        strategy = w["spec"].get("updateStrategy" if w["kind"] == "DaemonSet" else "strategy", {})
        if strategy.get("type") in ("OnDelete", "Recreate") and "rollingUpdate" in strategy:
            checker.error(where, f"rollingUpdate with strategy type {strategy['type']}: the API server refuses it")
        if not covers(w["spec"]["selector"].get("matchLabels", {}), w["spec"]["template"]["metadata"]["labels"]):
            checker.error(where, "spec.selector.matchLabels does not match the pod template's labels")
    for (ns, name), svc in services.items():
        pods = [w for w in workloads if w["metadata"].get("namespace") == ns
                and covers(svc["spec"].get("selector", {}), w["spec"]["template"]["metadata"]["labels"])]
        if not pods:
            checker.error(f"Service/{name}", "its selector matches no pod template rendered with it")
            continue
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            names = {p.get("name") for w in pods for c in w["spec"]["template"]["spec"]["containers"]
                     for p in c.get("ports", [])}
            if isinstance(target, str) and target not in names:
                checker.error(f"Service/{name}", f"targetPort {target} is no container port of its pods")
    for mwc in (d for d in docs if d["kind"] == "MutatingWebhookConfiguration"):
        for hook in mwc["webhooks"]:
            where = f"MutatingWebhookConfiguration/{mwc['metadata']['name']} {hook['name']}"
            ref = hook["clientConfig"].get("service", {})
            svc = services.get((ref.get("namespace"), ref.get("name")))
            if not svc:
                checker.error(where, f"its Service {ref.get('namespace')}/{ref.get('name')} is not rendered")
            elif ref.get("port", 443) not in [p["port"] for p in svc["spec"]["ports"]]:
                checker.error(where, f"its Service has no port {ref.get('port', 443)}")
            ns_sel = hook.get("namespaceSelector", {})
            if not ns_sel.get("matchLabels") and not any(
                    e["operator"] in ("In", "Exists") for e in ns_sel.get("matchExpressions", [])) \
                    and not hook.get("objectSelector"):
                if hook.get("failurePolicy", "Fail") == "Fail":
                    checker.notes.append(f"{where}: failurePolicy Fail for every namespace (no opt-in selector)")
            injected = "cert-manager.io/inject-ca-from" in (mwc["metadata"].get("annotations") or {})
            bundle = hook["clientConfig"].get("caBundle")
            if not bundle and not injected:
                checker.error(where, "no caBundle and no cert-manager CA injection: the API server cannot "
                                     "trust the webhook")
            if bundle and svc:
                check_webhook_certificate(docs, svc, bundle, where, checker)


def check_webhook_certificate(docs, svc, bundle, where, checker):
    ns = svc["metadata"].get("namespace")
    try:
        ca = base64.b64decode(bundle, validate=True)
    except ValueError:
        checker.error(where, "caBundle is not base64")
        return
    if b"-----BEGIN CERTIFICATE-----" not in ca:
        checker.error(where, "caBundle holds no PEM certificate")
        return
    volumes = [v for d in docs if d["kind"] == "Deployment" for v in d["spec"]["template"]["spec"].get("volumes", [])]
    secret_names = {v["secret"]["secretName"] for v in volumes if "secret" in v}
    secrets = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] in secret_names
               and d["metadata"].get("namespace") == ns]
    for secret in secrets:
        data = secret.get("data", {})
        if "tls.crt" not in data or "tls.key" not in data:
            checker.error(f"Secret/{secret['metadata']['name']}", "no tls.crt and tls.key")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            paths = {}
            for key, blob in (("ca", ca), ("crt", base64.b64decode(data["tls.crt"]))):
                paths[key] = os.path.join(tmp, key + ".pem")
                open(paths[key], "wb").write(blob)
            dns = f"{svc['metadata']['name']}.{ns}.svc"
            verify = subprocess.run(["openssl", "verify", "-CAfile", paths["ca"], "-verify_hostname", dns,
                                     paths["crt"]], capture_output=True, text=True)
            if verify.returncode != 0:
                checker.error(where, f"the certificate in Secret/{secret['metadata']['name']} does not verify "
                                     f"for {dns} against the caBundle: {verify.stdout.strip()} "
                                     f"{verify.stderr.strip()}")


def check_service_monitors(docs, checker):
    services = [d for d in docs if d["kind"] == "Service"]
    for sm in (d for d in docs if d["kind"] == "ServiceMonitor"):
        where = f"ServiceMonitor/{sm['metadata']['name']}"
        match = sm["spec"]["selector"].get("matchLabels", {})
        names = sm["spec"].get("namespaceSelector", {}).get("matchNames", [sm["metadata"].get("namespace")])
        picked = [s for s in services if s["metadata"].get("namespace") in names
                  and covers(match, s["metadata"].get("labels", {}))]
        if not picked:
            checker.error(where, "selects no rendered Service")
        for ep in sm["spec"]["endpoints"]:
            if not any(ep.get("port") == p.get("name") for s in picked for p in s["spec"]["ports"]):
                checker.error(where, f"endpoint port {ep.get('port')} is no port of the Services it selects")


def serve(models):
    """--serve: each stdin line is one object; each answer line says whether it is valid, with the
    report a file run would print."""
    for line in sys.stdin:
        if not line.strip():
            continue
        checker = Checker(models)
        try:
            checker.validate(json.loads(line), "stdin#0")
        except ValueError as e:
            checker.error("stdin", f"not JSON: {e}")
        report = "".join(f"  note: {note}\n" for note in checker.notes)
        report += "".join(f"  ERROR {err}\n" for err in checker.errors)
        sys.stdout.write(json.dumps({"ok": not checker.errors, "report": report}) + "\n")
        sys.stdout.flush()
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", required=True, help="directory of the Kubernetes API models")
    parser.add_argument("--no-links", action="store_true", help="schemas only (a partial set of objects)")
    parser.add_argument("--serve", action="store_true", help="validate one JSON object per stdin line")
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    if args.serve:
        return serve(Models(args.models))
    if not args.files:
        parser.error("no FILE given")
    checker = Checker(Models(args.models))
    docs = []
    for path in args.files:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        try:
            loaded = list(yaml.load_all(text, Loader=StrictLoader))
        except yaml.YAMLError as e:
            checker.error(path, f"not valid YAML for Kubernetes: {e}")
            continue
        for i, doc in enumerate(loaded):
            if doc is None:
                continue
            checker.validate(doc, f"{'stdin' if path == '-' else path}#{i}")
            docs.append(doc)
    # The links are read from valid objects only: a schema error is reported first.
    if not args.no_links and not checker.errors:
        check_links(docs, checker)
        check_service_monitors(docs, checker)
    for note in checker.notes:
        print(f"  note: {note}")
    for err in checker.errors:
        print(f"  ERROR {err}")
    print(f"  {checker.validated} objects checked against the Kubernetes API's schemas, "
          f"{len(checker.notes)} notes, {len(checker.errors)} errors")
    return 1 if checker.errors else 0


if __name__ == "__main__":
    sys.exit(main())
