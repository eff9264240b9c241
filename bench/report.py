#!/usr/bin/env python3
"""Prints hooked/un-hooked medians and ratios from hook_bench JSON outputs (scripts/bench.sh)."""
import json
import os
import sys


def medians(path):
    data = json.load(open(path))
    out = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name, arg = b["run_name"].split("/")[:2]
        out[(name, arg)] = b["real_time"]
    return out


print("| run | benchmark | un-hooked ns | hooked ns | ratio | added ns |")
print("|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    m = medians(path)
    run = os.path.basename(path).removesuffix(".json")
    for (name, arg), t in sorted(m.items()):
        if arg != "1":
            continue
        base = m[(name, "0")]
        print(f"| {run} | {name.removeprefix('BM_')} | {base:.1f} | {t:.1f} | {t / base:.3f} | {t - base:+.1f} |")
