#!/usr/bin/env python3
"""Does the SM clock explain the compute limiter's throughput error? (docs/compute-limiter.md,
"Throughput vs occupancy"; no GPU needed.)

For every limited phase of bench/gpu/compute_accuracy.py's runs (the compute_accuracy.json[.gz]
files given, or all under bench/results/gpu-2026-11-27*/ and gpu-2026-11-28*/) that has SM clock and
GPU-time readings and was held by its limit (expected ratio below 1), it compares

    throughput ratio  with  share x (f_phase / f_neighbours)

share: the phase's GPU time over its unlimited neighbours' (three readings where present: CUPTI
kernel time, the driver's utilization samples, NVML's utilization rate); f: the SM clock, as the
mean of the 100 ms NVML samples of the phase ("mean") or weighted by each sample's utilization
("busy": the clock while kernels ran, roughly). Prints every phase and residual (points), and per
reading the fit of ratio = share x (f_phase / f_neighbours)^beta.

  python3 clock_fit.py [FILE.json[.gz] ...]      (run from the repository root)
"""
import glob
import gzip
import json
import math
import os
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def clocks(samples, t_from, t_to):
    """(mean SM MHz, utilization-weighted SM MHz) of the NVML samples in [t_from, t_to]."""
    inside = [s for s in samples if t_from <= s[0] <= t_to]
    if not inside:
        return None, None
    mean = sum(s[2] for s in inside) / len(inside)
    busy = sum(s[1] for s in inside)
    weighted = sum(s[1] * s[2] for s in inside) / busy if busy > 0 else None
    return mean, weighted


def phases_of(path):
    data = load(path)
    samples = data.get("nvml", [])
    out = []
    for run in data.get("runs", []):
        phases = run.get("phases")
        if not phases or "t0_monotonic" not in run:
            continue
        t0 = run["t0_monotonic"]
        for p in phases:
            p["mean_mhz"], p["busy_mhz"] = clocks(samples, t0 + p["from"], t0 + p["end"])
        for i, p in enumerate(phases):
            if p["limit"] >= 100:
                continue
            before = next((q for q in reversed(phases[:i]) if q["limit"] >= 100), None)
            after = next((q for q in phases[i + 1:] if q["limit"] >= 100), None)
            nb = [q for q in (before, after) if q]
            base_it = sum(q["it_s"] for q in nb) / len(nb)

            def share(key):
                vals = [q.get(key) for q in nb]
                if p.get(key) is None or None in vals or sum(vals) <= 0:
                    return None
                return p[key] / (sum(vals) / len(vals))

            def clock_ratio(key):
                vals = [q.get(key) for q in nb]
                if p.get(key) is None or None in vals:
                    return None
                return p[key] / (sum(vals) / len(vals))

            base_util = [q["util"] for q in nb if q.get("util") is not None]
            expected = min(1.0, p["limit"] / min(100.0, sum(base_util) / len(base_util))) if base_util else p["limit"] / 100
            # A 2p run's worker names the workload without "2p"; its tag keeps it. CUPTI recorded the
            # measured process only, whose kernels' spans include the other's time slices: no share.
            two = "2p" in run.get("tag", "")
            workload = run["workload"] + ("2p" if two and not run["workload"].endswith("2p") else "")
            out.append({"file": os.path.relpath(path), "workload": workload, "limit": p["limit"],
                        "ratio": p["it_s"] / base_it, "expected": expected,
                        "share_cupti": None if two else share("kernel_pct"), "share_driver": share("gpu_time_pct"),
                        "share_util": share("util"),
                        "c_mean": clock_ratio("mean_mhz"), "c_busy": clock_ratio("busy_mhz"),
                        "mhz": p.get("mean_mhz"), "busy_mhz": p.get("busy_mhz"),
                        "nb_mhz": sum(q["mean_mhz"] for q in nb) / len(nb) if all(q.get("mean_mhz") for q in nb) else None})
    return out


def fit(rows, share_key, clock_key):
    """beta of ratio = share x c^beta (least squares on logs, through the origin) and the residuals
    (points) with beta = 1, with the fitted beta, and without the clock (beta = 0)."""
    use = [r for r in rows if r.get(share_key) and r.get(clock_key)]
    if not use:
        return None
    xs = [math.log(r[clock_key]) for r in use]
    ys = [math.log(r["ratio"] / r[share_key]) for r in use]
    sxx = sum(x * x for x in xs)
    beta = sum(x * y for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0

    def residuals(b):
        return [100 * (r["ratio"] - r[share_key] * r[clock_key] ** b) for r in use]

    return {"n": len(use), "beta": beta, "res0": residuals(0.0), "res1": residuals(1.0), "resb": residuals(beta)}


def summary(res):
    mean = sum(res) / len(res)
    rms = math.sqrt(sum(x * x for x in res) / len(res))
    return f"mean {mean:+.2f}, rms {rms:.2f}, range {min(res):+.1f}..{max(res):+.1f}, within ±1: {sum(abs(x) <= 1 for x in res)}/{len(res)}"


def main():
    paths = sys.argv[1:] or sorted(glob.glob("bench/results/gpu-2026-11-27*/**/*.json.gz", recursive=True) +
                                   glob.glob("bench/results/gpu-2026-11-28*/**/*.json.gz", recursive=True))
    rows = []
    for path in paths:
        try:
            rows += phases_of(path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # not an accuracy run
            continue
    held = [r for r in rows if r["expected"] < 0.999 and r["c_mean"]]
    print(f"{len(held)} limited phases held by their limit (expected ratio < 1) with SM clock readings, "
          f"of {len(rows)} limited phases in {len(paths)} files\n")
    print("| file | workload | limit | ratio | share CUPTI | share driver | share NVML util | f/f_nb mean | f/f_nb busy "
          "| MHz (nb) | res. no clock | res. clock (CUPTI or util, busy) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in held:
        share = r["share_cupti"] or r["share_driver"] or r["share_util"]
        c = r["c_busy"] or r["c_mean"]
        f = lambda v, s=".3f": "-" if v is None else format(v, s)
        print(f"| {r['file'].replace('bench/results/', '')} | {r['workload']} | {r['limit']} | {r['ratio']:.3f} | "
              f"{f(r['share_cupti'])} | {f(r['share_driver'])} | {f(r['share_util'])} | {f(r['c_mean'])} | {f(r['c_busy'])} | "
              f"{f(r['mhz'], '.0f')} ({f(r['nb_mhz'], '.0f')}) | {100 * (r['ratio'] - share):+.1f} | "
              f"{100 * (r['ratio'] - share * c):+.1f} |")
    print("\nPer workload (share: CUPTI where recorded, else NVML utilization; clock: utilization-weighted):")
    print("| workload | phases | throughput ÷ share − 1 | f ÷ f_nb − 1 | residual, no clock | residual, beta 1 "
          "| residual, beta 0.5 |")
    print("|---|---|---|---|---|---|---|")
    workloads = list(dict.fromkeys(r["workload"] for r in held))
    for w in workloads:
        group = [r for r in held if r["workload"] == w and (r["share_cupti"] or r["share_util"]) and r["c_busy"]]
        if not group:
            continue
        share = [r["share_cupti"] or r["share_util"] for r in group]
        mean = lambda xs: sum(xs) / len(xs)
        rng = lambda xs: f"{mean(xs):+.1f} ({min(xs):+.1f}..{max(xs):+.1f})"
        print(f"| {w} | {len(group)} | {mean([r['ratio'] / s - 1 for r, s in zip(group, share)]):+.3f} | "
              f"{mean([r['c_busy'] - 1 for r in group]):+.3f} | "
              f"{rng([100 * (r['ratio'] - s) for r, s in zip(group, share)])} | "
              f"{rng([100 * (r['ratio'] - s * r['c_busy']) for r, s in zip(group, share)])} | "
              f"{rng([100 * (r['ratio'] - s * r['c_busy'] ** 0.5) for r, s in zip(group, share)])} |")
    print("\nFits of ratio = share x (f_phase / f_neighbours)^beta, residuals in points (ratio - model):")
    for share_key in ("share_cupti", "share_driver", "share_util"):
        for clock_key in ("c_mean", "c_busy"):
            result = fit(held, share_key, clock_key)
            if not result:
                continue
            print(f"- {share_key}, {clock_key} ({result['n']} phases): beta = {result['beta']:.3f}")
            print(f"    no clock (beta 0):   {summary(result['res0'])}")
            print(f"    beta 1:              {summary(result['res1'])}")
            print(f"    beta fitted:         {summary(result['resb'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
