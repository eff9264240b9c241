#!/usr/bin/env python3
"""Combines the paired runs of several priority_bench.py --paired calls, per load and configuration.

  python3 bench/gpu/priority_pool.py CALL1/priority_bench.json[.gz] CALL2/priority_bench.json.gz ...
      [--rename N:OLD=NEW ...]

A tail ratio's interval narrows with the number of pairs of phases, and one call (10 minutes)
holds at most about 280 of 1.5 s. The requests of different calls are not pooled: each call ran on
its own machine, with its own server speed and tail (the p99 of a pool is the heaviest-tailed
call's). Instead each call's running ÷ paused ratio (p50, p99, mean service time) is estimated
on its own, with the variance of its logarithm from resampling its pairs of phases (as
priority_bench.py does), and the calls are combined by a random-effects weighted mean of the
logarithms (DerSimonian-Laird: the spread between calls beyond their own noise widens the
interval), with its 95% interval. A call needs 20 pairs or more to be weighed. Printed per load and
configuration: each call's ratios, then the combination. Configurations are matched by name;
--rename N:OLD=NEW gives the N-th file's configuration OLD the name NEW, for calls that ran the same
thing under different names (a tunable measured as a --variant in one call and as the library's
default in a later one).
"""
import argparse
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import priority_bench as bench  # noqa: E402

# Fewer pairs of phases give no usable variance of a tail ratio.
MIN_PAIRS = 20
# A paired run's tag: load<L>-paired-<configuration>[-r<round>]
TAG = re.compile(r"^load(\d+)-paired-(.+?)(?:-r\d+)?$")


def pool(datasets, renames=None):
    """{(load, configuration): [(call index, pairs)]} over the paired runs of every dataset, each
    run's pairs split with its own call's --phase-seconds and --settle-seconds (the rounds of one
    call pooled). renames: {call index: {configuration: the name to pool it under}}."""
    pooled = {}
    renames = renames or {}
    for index, data in enumerate(datasets):
        args = data.get("args", {})
        phase, settle = args.get("phase_seconds"), args.get("settle_seconds")
        for tag, results in data.get("runs", {}).items():
            match = TAG.match(tag)
            server = results.get("server") if isinstance(results, dict) else None
            if not match or not server or not phase:
                continue
            count = bench.phase_count(server["seconds"], phase)
            config = renames.get(index, {}).get(match.group(2), match.group(2))
            calls = pooled.setdefault((int(match.group(1)), config), [])
            if not calls or calls[-1][0] != index:
                calls.append((index, []))
            calls[-1][1].extend(bench.phase_pairs(results, count, phase, settle or 0.0))
    return pooled


def combine(estimates):
    """Random-effects (DerSimonian-Laird) weighted mean of log ratios: [(ratio, variance of its
    log)] -> (ratio, low, high) at 95%; None without an estimate of positive variance. The calls
    ran on different machines, so their true ratios may differ: the spread between them beyond
    their own variances (tau^2) widens the interval; with none, it is the inverse-variance mean."""
    usable = [(math.log(r), v) for r, v in estimates if r > 0 and v > 0]
    if not usable:
        return None
    weights = [1.0 / v for _, v in usable]
    fixed = sum(w * x for w, (x, _) in zip(weights, usable)) / sum(weights)
    q = sum(w * (x - fixed) ** 2 for w, (x, _) in zip(weights, usable))
    scale = sum(weights) - sum(w * w for w in weights) / sum(weights)
    tau2 = max(0.0, (q - (len(usable) - 1)) / scale) if scale > 0 else 0.0
    weights = [1.0 / (v + tau2) for _, v in usable]
    mean = sum(w * x for w, (x, _) in zip(weights, usable)) / sum(weights)
    half = 1.96 / math.sqrt(sum(weights))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def report(pooled, names=None):
    """Lines per load and configuration: each call's ratios (named by names[index], else "call N"),
    then their combination."""
    lines = []
    for (load, config), calls in sorted(pooled.items()):
        estimates = {"p50": [], "p99": [], "service": []}
        for index, pairs in calls:
            label = names[index] if names else f"call {index + 1}"
            ratios = bench.paired_ratios(pairs)
            samples = bench.bootstrap_samples(pairs) if len(pairs) >= MIN_PAIRS else None
            if ratios is None or samples is None:
                lines.append(f"load {load}%, {config}, {label}: {len(pairs)} pairs, too few to weigh")
                continue
            parts = []
            for name in estimates:
                logs = [math.log(x) for x in samples.get(name, []) if x > 0]
                if len(logs) > 1 and ratios[name] > 0:
                    mean = sum(logs) / len(logs)
                    estimates[name].append((ratios[name], sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)))
                parts.append(f"{name} {ratios[name]:.2f}")
            lines.append(f"load {load}%, {config}, {label}: " + ", ".join(parts) + f" ({len(pairs)} pairs)")
        parts = []
        for name, values in estimates.items():
            result = combine(values)
            if result:
                parts.append(f"{name} {result[0]:.2f} [{result[1]:.2f}-{result[2]:.2f}]")
        if parts:
            weighed = len(estimates["p50"])
            lines.append(f"load {load}%, {config}, {weighed} call(s) combined: running ÷ paused: " + ", ".join(parts))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="priority_bench.json or .json.gz of --paired calls")
    ap.add_argument("--rename", action="append", default=[], metavar="N:OLD=NEW",
                    help="pool the N-th file's (from 1) configuration OLD under the name NEW (repeatable)")
    args = ap.parse_args()
    renames = {}
    for text in args.rename:
        match = re.fullmatch(r"(\d+):([^=]+)=(.+)", text)
        if not match or not 1 <= int(match.group(1)) <= len(args.files):
            ap.error(f"--rename {text!r}: expected N:OLD=NEW with N from 1 to {len(args.files)}")
        renames.setdefault(int(match.group(1)) - 1, {})[match.group(2)] = match.group(3)
    datasets = []
    for path in args.files:
        try:
            datasets.append(bench.read_results(path))
        except (OSError, ValueError, EOFError) as e:
            print(f"priority_pool: {path}: {e}", file=sys.stderr)
            return 2
    try:
        lines = report(pool(datasets, renames), args.files)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        print(f"priority_pool: a paired run without what priority_bench.py writes ({e!r})", file=sys.stderr)
        return 2
    if not lines:
        print("priority_pool: no paired runs in these files", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
