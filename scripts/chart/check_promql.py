#!/usr/bin/python3
"""Checks every PromQL expression of Grafana dashboards and Prometheus rule files against what a
running gpuslice-node exposes.

Each metric an expression selects must be exposed by the daemon (or be Prometheus' own `up`), with
at least one sample in the exposition, and each label the expression names (matchers, by/without/
on/ignoring lists, label_replace() sources, Grafana legends, label_values() and alert annotations'
$labels.x) must be a
label of a metric of that expression or a target label Prometheus adds (job, instance).

Also writes the dashboard's expressions as recording rules (--syntax-rules FILE) so that promtool
checks their syntax with Prometheus' own parser.

usage: check_promql.py --exposition FILE [--dashboard FILE]... [--rules FILE]... [--syntax-rules OUT]
"""
import argparse
import json
import re
import sys

import yaml

TARGET_LABELS = {"job", "instance"}
# Series Prometheus makes for every target itself.
SYNTHETIC = {"up": set(TARGET_LABELS)}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
            "group_right", "inf", "nan", "atan2"}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
                "topk", "quantile", "limitk", "limit_ratio"}
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
GRAFANA_INTERVALS = re.compile(r"\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}")

TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<duration>\[[^\]]*\])
  | (?P<number>[0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?[a-z]*|0x[0-9a-f]+)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=(){},@])
""", re.X)


def parse_exposition(text):
    """name -> set of label names seen on its samples; families declared without samples -> empty set."""
    families, labels = set(), {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            families.add(line.split()[2])
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
        if not m:
            raise ValueError(f"unparsable sample line: {line!r}")
        names = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"', m.group(3) or ""))
        labels.setdefault(m.group(1), set()).update(names)
    return families, labels


def tokenize(expr):
    pos, out = 0, []
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read {expr[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
    return out


def label_replace_labels(tokens, i):
    """tokens[i] is label_replace: returns (source label, destination label) from its string arguments."""
    depth, args, j = 0, [[]], i + 1
    while j < len(tokens):
        text = tokens[j][1]
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
            if depth == 0:
                break
        elif text == "," and depth == 1:
            args.append([])
            j += 1
            continue
        if depth >= 1 and not (depth == 1 and text == "("):
            args[-1].append(tokens[j])
        j += 1
    strings = [a[0][1][1:-1] for a in args[1:] if len(a) == 1 and a[0][0] == "string"]
    if len(args) != 5 or len(strings) != 4:
        raise ValueError("label_replace takes an expression and four strings")
    return strings[2], strings[0]


def analyse(expr):
    """Returns (selectors [(metric, {labels})], labels the expression reads (grouping, label_replace
    sources), labels it makes (label_replace destinations)) of one PromQL expression."""
    tokens = tokenize(expr)
    selectors, grouping, made = [], set(), set()
    i = 0

    def matchers(j):
        """Reads {a="x", b=~"y"} from tokens[j] == '{'; returns (labels, metric from __name__, next)."""
        names, metric = set(), None
        j += 1
        while j < len(tokens) and tokens[j][1] != "}":
            kind, text = tokens[j]
            if kind == "ident" and j + 2 < len(tokens) and tokens[j + 1][1] in ("=", "!=", "=~", "!~"):
                if text == "__name__" and tokens[j + 1][1] == "=":
                    metric = tokens[j + 2][1][1:-1]
                else:
                    names.add(text)
                j += 3
                continue
            j += 1
        return names, metric, j + 1

    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else None
        if kind == "ident" and text in LABEL_LIST_KEYWORDS:
            i += 1
            if nxt == "(":
                i += 1
                while i < len(tokens) and tokens[i][1] != ")":
                    if tokens[i][0] == "ident":
                        grouping.add(tokens[i][1])
                    i += 1
                i += 1
            continue
        if kind == "ident" and (text.lower() in KEYWORDS or text in AGGREGATIONS):
            i += 1
            continue
        if kind == "ident" and nxt == "(":
            if text == "label_replace":
                source, destination = label_replace_labels(tokens, i)
                if source:
                    grouping.add(source)
                made.add(destination)
            i += 1  # a function or an aggregation
            continue
        if kind == "ident":
            names = set()
            i += 1
            if nxt == "{":
                names, _, i = matchers(i)
            selectors.append((text, names))
            continue
        if text == "{":
            names, metric, i = matchers(i)
            selectors.append((metric or "{}", names))
            continue
        i += 1
    return selectors, grouping, made


class Report:
    def __init__(self, families, labels):
        self.families, self.labels = families, labels
        self.errors, self.checked, self.used = [], 0, set()

    def check(self, where, expr, extra_labels=()):
        """extra_labels: labels the surrounding text uses (legend, label_values, $labels.x)."""
        self.checked += 1
        try:
            selectors, grouping, made = analyse(expr)
        except ValueError as e:
            self.errors.append(f"{where}: {e}: {expr}")
            return
        if not selectors:
            self.errors.append(f"{where}: selects no metric: {expr}")
        known = set(TARGET_LABELS) | made
        for metric, _ in selectors:
            known |= self.labels.get(metric, set()) | SYNTHETIC.get(metric, set())
        for metric, names in selectors:
            self.used.add(metric)
            if metric in SYNTHETIC:
                have = SYNTHETIC[metric]
            elif metric not in self.families and metric not in self.labels:
                self.errors.append(f"{where}: metric {metric} is not exposed by gpuslice-node: {expr}")
                continue
            elif metric not in self.labels:
                self.errors.append(f"{where}: metric {metric} had no sample in the test run, so its labels "
                                   f"cannot be checked: {expr}")
                continue
            else:
                have = self.labels[metric] | TARGET_LABELS
            for name in sorted(names - have):
                self.errors.append(f"{where}: {metric} has no label {name} (it has {sorted(have)}): {expr}")
        for name in sorted((set(grouping) | set(extra_labels)) - known):
            self.errors.append(f"{where}: label {name} is on none of the metrics used ({sorted(known)}): {expr}")


def grafana_expr(text):
    return GRAFANA_INTERVALS.sub("5m", text)


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def check_dashboard(path, report, syntax):
    board = json.load(open(path, encoding="utf-8"))
    title = board.get("title", path)
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var.get("query"), dict) else var.get("query", "")
        m = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*", query)
        where = f"{path}: variable ${var['name']}"
        if m:
            report.check(where, grafana_expr(m.group(1)), [m.group(2)])
            syntax.append((where, grafana_expr(m.group(1))))
        else:
            report.check(where, grafana_expr(query))
            syntax.append((where, grafana_expr(query)))
    for panel in walk_panels(board.get("panels", [])):
        for target in panel.get("targets", []):
            if "expr" not in target:
                continue
            where = f"{path}: panel {panel.get('title')!r} {target.get('refId', '')}"
            legend = re.findall(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}", target.get("legendFormat", ""))
            report.check(where, grafana_expr(target["expr"]), legend)
            syntax.append((where, grafana_expr(target["expr"])))
    return title


def check_rules(path, report):
    data = yaml.safe_load(open(path, encoding="utf-8"))
    for group in data.get("groups", []):
        for rule in group.get("rules", []):
            name = rule.get("alert") or rule.get("record")
            where = f"{path}: {group['name']}/{name}"
            used = set()
            for text in list((rule.get("annotations") or {}).values()) + list((rule.get("labels") or {}).values()):
                used |= set(re.findall(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)", str(text)))
            report.check(where, str(rule["expr"]), used)
            if rule.get("record"):
                report.families.add(rule["record"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--exposition", required=True, action="append",
                        help="a /metrics response of gpuslice-node (repeated: one per run mode)")
    parser.add_argument("--dashboard", action="append", default=[])
    parser.add_argument("--rules", action="append", default=[], help="a Prometheus rule file (groups:)")
    parser.add_argument("--syntax-rules", help="write the dashboards' expressions here as recording rules")
    args = parser.parse_args()
    families, labels = set(), {}
    for path in args.exposition:
        f, l = parse_exposition(open(path, encoding="utf-8").read())
        families |= f
        for name, names in l.items():
            labels.setdefault(name, set()).update(names)
    exposed = len(families)
    report = Report(families, labels)
    syntax = []
    for path in args.rules:
        check_rules(path, report)
    for path in args.dashboard:
        check_dashboard(path, report, syntax)
    if args.syntax_rules:
        rules = [{"record": f"dashboard:expr_{i}", "expr": expr} for i, (_, expr) in enumerate(syntax)]
        with open(args.syntax_rules, "w", encoding="utf-8") as out:
            yaml.safe_dump({"groups": [{"name": "dashboard-expressions", "rules": rules}]}, out, sort_keys=False)
    for err in report.errors:
        print(f"  ERROR {err}")
    used = sorted(m for m in report.used if m in families or m in labels)
    print(f"  {report.checked} expressions checked against {exposed} exposed metric families; "
          f"{len(used)} used: {', '.join(used)}; {len(report.errors)} errors")
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
