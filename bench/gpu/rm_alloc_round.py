#!/usr/bin/env python3
"""Does every device allocation pass the RM's allocation ioctl? (issue 42; run by bench/gpu/rm_alloc_round.sh)

Each held-out path runs WITHOUT libgpuslice (no quota: this measures what the driver does) under the RM
probe (rm_alloc_probe.so), while this un-hooked process samples the driver's own per-process figure through
NVML (nvmlDeviceGetComputeRunningProcesses_v3) every 20 ms. Both clocks are CLOCK_MONOTONIC (the probe's
lines, Python's time.monotonic()). Per path: NVML peak, the probe's device-local RM sum peak, their
difference, the RM allocations, and whether every NVML sample is explained by RM allocations the probe saw
begin before it (unexplained = NVML - (allocations begun before the sample ended - frees finished before it
began)). Then the cost: rm_alloc_cost without and with the probe, interleaved.

  rm_alloc_round.py --probe P.so --prog driver_paths --globals-prog quota_globals --cost-prog rm_alloc_cost
                    --out DIR [--cases calib,contexts,...] [--ab 5] [--iters 2000] [--device 0]
"""
import argparse
import bisect
import glob
import json
import os
import statistics
import subprocess
import sys
import threading
import time

# The driver's per-process figure, un-hooked: the quota paths' own reader.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "gpu"))
from driver_paths import Nvml  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
TOLERANCE = 2 * MIB  # NVML's figure and the RM's sizes are both the RM's Memory lengths: no rounding to hide
TORCH = ("import torch, time\n"
         "x = torch.empty(4 << 30, dtype=torch.uint8, device='cuda'); x.fill_(1); torch.cuda.synchronize()\n"
         "print('held', x.numel(), flush=True); time.sleep(2)\n")
CASES = ["calib", "contexts", "globals", "globals_eager", "capture", "heap", "stack", "graph", "printf", "torch"]


class Sampler(threading.Thread):
    """(t_before, t_after, bytes) of one pid every 20 ms, CLOCK_MONOTONIC."""

    def __init__(self, nvml, pid, period=0.02):
        super().__init__(daemon=True)
        self.nvml, self.pid, self.period = nvml, pid, period
        self.samples = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            tb = time.monotonic()
            v = self.nvml.apps().get(self.pid, 0)
            ta = time.monotonic()
            self.samples.append((int(tb * 1e9), int(ta * 1e9), v))
            self.stop.wait(max(0.0, self.period - (time.monotonic() - tb)))


def parse_probe(path):
    """The probe's log: events (E), samples (S), per-escape (T), per-class (C) and totals (X)."""
    out = {"E": [], "S": [], "T": {}, "C": {}, "X": {}}
    with open(path, errors="replace") as f:
        for line in f:
            if len(line) < 2 or line[1] != " ":
                continue
            kv = dict(p.split("=", 1) for p in line[2:].split() if "=" in p)
            k = line[0]
            if k == "E":
                out["E"].append(kv)
            elif k == "S":
                out["S"].append(kv)
            elif k == "T":
                out["T"][kv.get("name", kv.get("esc"))] = kv
            elif k == "C":
                out["C"][kv["cls"]] = kv
            elif k == "X":
                out["X"] = kv
    return out


def explain(samples, events):
    """Per NVML sample: what the probe's local events can explain (upper bound) and must have (lower)."""
    local = [(int(e["t0"]), int(e["t1"]), e["op"], int(e["bytes"])) for e in events
             if e.get("where") == "local" and e.get("op") in ("A", "F", "I")]  # not R (refused), D (dup)

    def cumulative(pairs):
        pairs.sort()
        times, sums, total = [], [], 0
        for t, b in pairs:
            total += b
            times.append(t)
            sums.append(total)
        return lambda t: sums[bisect.bisect_right(times, t) - 1] if times and t >= times[0] else 0

    alloc_began = cumulative([(t0, b) for t0, _, op, b in local if op == "A"])
    alloc_ended = cumulative([(t1, b) for _, t1, op, b in local if op == "A"])
    free_began = cumulative([(t0, b) for t0, _, op, b in local if op != "A"])
    free_ended = cumulative([(t1, b) for _, t1, op, b in local if op != "A"])
    worst_unexplained, worst_over, n_unexplained, first_unexplained = 0, 0, 0, None
    for tb, ta, v in samples:
        upper = alloc_began(ta) - free_ended(tb)
        lower = alloc_ended(tb) - free_began(ta)
        un = v - upper
        if un > TOLERANCE:
            n_unexplained += 1
            if first_unexplained is None:
                first_unexplained = {"t": ta, "nvml_mib": v / MIB, "probe_upper_mib": upper / MIB}
        worst_unexplained = max(worst_unexplained, un)
        worst_over = max(worst_over, lower - v)
    return worst_unexplained, worst_over, n_unexplained, first_unexplained


def case_argv(args, case):
    env = {}
    if case == "calib":
        return [args.cost_prog, "hold", str(GIB), "2"], env
    if case in ("globals", "globals_eager"):
        env["CUDA_MODULE_LOADING"] = "EAGER" if case == "globals_eager" else "LAZY"
        return [args.globals_prog], env
    if case == "torch":
        return [sys.executable, "-c", TORCH], env
    return [args.prog, case], env


def clean_env():
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "GPUSLICE_MEMORY_LIMIT", "GPUSLICE_SHARED_DIR", "RM_PROBE_LOG"):
        env.pop(k, None)
    return env


def run_case(args, nvml, case, deny=None):
    d = os.path.join(args.out, f"deny_{case}" if deny is not None else case)
    os.makedirs(d, exist_ok=True)
    for old in glob.glob(os.path.join(d, "probe.*")):
        os.remove(old)
    argv, extra = case_argv(args, case)
    env = clean_env()
    env.update(extra)
    env.update({"LD_PRELOAD": os.path.abspath(args.probe), "RM_PROBE_LOG": os.path.join(d, "probe"),
                "CUDA_VISIBLE_DEVICES": str(args.device)})
    if deny is not None:
        env["RM_PROBE_DENY_LOCAL_ABOVE"] = str(deny)
    log = open(os.path.join(d, "stdout.txt"), "w")
    t_start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    sampler = Sampler(nvml, proc.pid)
    sampler.start()
    try:
        proc.wait(timeout=args.deny_timeout if deny is not None else args.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    sampler.stop.set()
    sampler.join()
    log.close()
    wall = time.monotonic() - t_start
    path = os.path.join(d, f"probe.{proc.pid}")
    r = {"case": case, "exit": proc.returncode, "wall_s": round(wall, 1), "nvml_samples": len(sampler.samples)}
    with open(os.path.join(d, "stdout.txt"), errors="replace") as f:
        r["answers"] = [ln.strip() for ln in f.read().splitlines() if "=" in ln][-6:]
    if not os.path.exists(path):
        r.update({"error": "no probe log (the probe saw no NVIDIA ioctl)"})
        return r
    p = parse_probe(path)
    x = p["X"]
    probe_peak = int(x.get("local_peak", max([int(s["local_peak"]) for s in p["S"]] or [0])))
    nvml_peak = max([v for _, _, v in sampler.samples] or [0])
    un, over, n_un, first = explain(sampler.samples, p["E"])
    lost = int(x.get("events_lost", p["S"][-1]["lost"] if p["S"] else 0))
    local_cls = p["C"].get("0x40", {})
    rm_alloc = p["T"].get("RM_ALLOC", {})
    r.update({
        "nvml_peak_mib": round(nvml_peak / MIB, 1), "probe_peak_mib": round(probe_peak / MIB, 1),
        "diff_mib": round((nvml_peak - probe_peak) / MIB, 1),
        "rm_allocs": int(rm_alloc.get("count", 0)), "local_allocs": int(local_cls.get("count", 0)),
        "rm_alloc_sizes": sorted({rm_alloc.get("size"), rm_alloc.get("other_size")} - {None, "-1"}),
        "max_unexplained_mib": round(un / MIB, 1), "samples_unexplained": n_un, "first_unexplained": first,
        "max_probe_over_nvml_mib": round(over / MIB, 1), "events_lost": lost,
        "nv_ioctls": sum(int(t["count"]) for t in p["T"].values()), "uvm_ioctls": int(x.get("uvm_count", 0)),
        "undecoded": int(x.get("undecoded", 0)), "type_mismatch": int(x.get("type_mismatch", 0)),
        "objects_full": int(x.get("objects_full", 0)), "version": x.get("version"),
        "finn_serialized": int(x.get("finn_serialized", 0)),
        "classes": {c: int(v["count"]) for c, v in p["C"].items()},
        "rm_ns_total": sum(int(t["ns"]) for t in p["T"].values()),
        "denied": int(x.get("denied", 0)),
    })
    if deny is not None:
        r["deny_limit_mib"] = deny // MIB
        r["held"] = nvml_peak <= deny + 64 * MIB and proc.returncode is not None and proc.returncode >= 0
    # Complete: no NVML sample ahead of what the probe saw, nothing dropped from its timeline or its tables.
    r["complete"] = n_un == 0 and lost == 0 and nvml_peak > 0 and r["objects_full"] == 0
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump({"result": r, "nvml": sampler.samples}, f)
    return r


def parse_cost(text):
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] not in ("alloc", "launch"):
            continue
        kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        key = f"alloc{int(kv['bytes']) // MIB}MiB" if parts[0] == "alloc" else "launch"
        out[key] = {k: float(v) for k, v in kv.items()}
    return out


def run_cost(args):
    """A (no probe) and B (probe preloaded), alternated; medians of the per-run medians."""
    d = os.path.join(args.out, "cost")
    os.makedirs(d, exist_ok=True)
    runs = {"A": [], "B": []}
    for i in range(args.ab):
        for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
            env = clean_env()
            env["CUDA_VISIBLE_DEVICES"] = str(args.device)
            if side == "B":
                env["LD_PRELOAD"] = os.path.abspath(args.probe)
                env["RM_PROBE_LOG"] = os.path.join(d, f"probe_run{i}")
            cp = subprocess.run([args.cost_prog, "cost", str(args.iters)], env=env, capture_output=True, text=True,
                                timeout=args.timeout)
            with open(os.path.join(d, f"{side}{i}.txt"), "w") as f:
                f.write(cp.stdout + cp.stderr)
            if cp.returncode != 0:
                return {"error": f"rm_alloc_cost {side}{i} exit {cp.returncode}: {cp.stderr.strip()[-300:]}"}
            runs[side].append(parse_cost(cp.stdout))
    res = {}
    for key in runs["A"][0]:
        row = {}
        for field in ("alloc_ns", "free_ns", "ns"):
            if field not in runs["A"][0][key]:
                continue
            a = statistics.median(r[key][field] for r in runs["A"])
            b = statistics.median(r[key][field] for r in runs["B"])
            row[field] = {"without": a, "with": b, "added": b - a,
                          "spread_without": max(r[key][field] for r in runs["A"]) -
                          min(r[key][field] for r in runs["A"])}
        for field in ("ioctls_per_alloc", "ioctls_per_free", "ioctls_per_launch"):
            if field in runs["B"][0][key]:
                row[field] = statistics.median(r[key][field] for r in runs["B"])
        res[key] = row
    with open(os.path.join(d, "cost.json"), "w") as f:
        json.dump({"summary": res, "runs": runs}, f, indent=1)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", required=True)
    ap.add_argument("--prog", required=True)
    ap.add_argument("--globals-prog", required=True)
    ap.add_argument("--cost-prog", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--deny-cases", default="contexts,globals,globals_eager,capture,heap,graph,printf",
                    help="paths run again with RM_PROBE_DENY_LOCAL_ABOVE (the RM's own refusal, injected)")
    ap.add_argument("--deny-limit-mib", type=int, default=8192)
    ap.add_argument("--ab", type=int, default=5)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--timeout", type=int, default=60)
    ap.add_argument("--deny-timeout", type=int, default=30)
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    deny_cases = [c for c in args.deny_cases.split(",") if c]
    unknown = [c for c in cases + deny_cases if c not in CASES]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    try:
        nvml = Nvml(args.device)
    except OSError as e:
        print(f"NVML unavailable ({e}): the driver's per-process figure cannot be sampled", file=sys.stderr)
        return 1
    results = []
    for case in cases:
        r = run_case(args, nvml, case)
        results.append(r)
        print(f"{case}: " + json.dumps({k: v for k, v in r.items() if k != "classes"}), flush=True)
    denied = []
    for case in deny_cases:
        r = run_case(args, nvml, case, deny=args.deny_limit_mib * MIB)
        denied.append(r)
        print(f"deny_{case}: " + json.dumps({k: v for k, v in r.items() if k != "classes"}), flush=True)
    cost = run_cost(args) if args.ab > 0 else {}
    with open(os.path.join(args.out, "rm_alloc_round.json"), "w") as f:
        json.dump({"paths": results, "deny": denied, "cost": cost}, f, indent=1)

    print("\n== per path (no quota; NVML = the driver's per-process figure at 50 Hz; probe = device-local RM sum)")
    print(f"{'path':14s} {'NVML peak':>10s} {'probe peak':>10s} {'diff':>8s} {'RM allocs':>9s} {'0x40':>5s} "
          f"{'unexpl.MiB':>10s} {'unexpl.n':>8s} {'over MiB':>8s} {'lost':>4s}  every NVML MiB seen first?")
    for r in results:
        if "error" in r:
            print(f"{r['case']:14s} {r['error']}")
            continue
        print(f"{r['case']:14s} {r['nvml_peak_mib']:10.0f} {r['probe_peak_mib']:10.0f} {r['diff_mib']:8.0f} "
              f"{r['rm_allocs']:9d} {r['local_allocs']:5d} {r['max_unexplained_mib']:10.1f} "
              f"{r['samples_unexplained']:8d} {r['max_probe_over_nvml_mib']:8.1f} {r['events_lost']:4d}  "
              f"{'YES' if r['complete'] else 'NO'}")
    if denied:
        print(f"\n== refusal injected at the ioctl (NV_ERR_NO_MEMORY above {args.deny_limit_mib} MiB of video memory): "
              "how libcuda takes it")
        print(f"{'path':14s} {'NVML peak':>10s} {'over':>7s} {'refused':>7s} {'exit':>5s} {'held':>5s}  answers")
        for r in denied:
            if "error" in r:
                print(f"{r['case']:14s} {r['error']} exit={r['exit']} answers={' '.join(r.get('answers', []))}")
                continue
            print(f"{r['case']:14s} {r['nvml_peak_mib']:10.0f} {r['nvml_peak_mib'] - r['deny_limit_mib']:7.0f} "
                  f"{r['denied']:7d} {str(r['exit']):>5s} {'YES' if r['held'] else 'NO':>5s}  "
                  f"{' '.join(r['answers'])[:120]}")
    if cost and "error" not in cost:
        print(f"\n== cost (medians of {args.ab} interleaved runs each; added = with probe - without)")
        for key, row in cost.items():
            for field in ("alloc_ns", "free_ns", "ns"):
                if field in row:
                    v = row[field]
                    print(f"{key:12s} {field:9s} without {v['without']:10.0f} ns  with {v['with']:10.0f} ns  "
                          f"added {v['added']:+8.0f} ns  (spread without {v['spread_without']:.0f})")
            print(f"{key:12s} ioctls: " + ", ".join(f"{k.replace('ioctls_', '')}={row[k]:.2f}"
                                                   for k in ("ioctls_per_alloc", "ioctls_per_free",
                                                             "ioctls_per_launch") if k in row))
    elif cost:
        print(f"\n== cost: {cost['error']}")
    ok = [r for r in results if "error" not in r]
    complete = all(r["complete"] for r in ok) and len(ok) == len(results)
    versions = sorted({r.get("version") for r in ok if r.get("version")})
    sizes = sorted({s for r in ok for s in r["rm_alloc_sizes"]})
    print(f"\n== verdict: ioctl books complete on every path: {'YES' if complete else 'NO'}"
          f" (driver as libcuda announced it: {', '.join(versions) or 'unseen'}; RM_ALLOC _IOC_SIZE seen: "
          f"{', '.join(sizes) or 'none'}; undecoded={sum(r['undecoded'] for r in ok)}, "
          f"type_mismatch={sum(r['type_mismatch'] for r in ok)}, objects_full={sum(r['objects_full'] for r in ok)}, "
          f"finn_serialized={sum(r['finn_serialized'] for r in ok)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
