#!/usr/bin/env python3
"""Two "containers" (separate GPUSLICE_SHARED_DIR) with compute limits A% and B% (default 30/70)
run 4096^3 bf16 matmuls on one GPU at the same time; each one's throughput is compared with the
un-hooked throughput of the same workload alone. Run with node-wide turns (one GPUSLICE_NODE_DIR,
the default on a host) and without (separate node dirs), to show what the turns change.
  python3 tests/gpu/two_containers.py --lib build/lib/libgpuslice.so --out $OUT
      [--pairs 30/70,50/50,20/80] [--modes turns,no-turns]
With both containers busy the device is never idle, so it runs at its full-load clock like the
un-hooked run alone: these ratios are throughput shares of the whole GPU.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "..", "..", "bench", "gpu", "compute_accuracy.py")


def start(tag, out, seconds, env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_") and k != "LD_PRELOAD"}
    env.update(env_extra)
    env["PYTHONUNBUFFERED"] = "1"
    report = os.path.join(out, f"two-{tag}.json")
    log = open(os.path.join(out, f"two-{tag}.log"), "w")
    p = subprocess.Popen([sys.executable, WORKER, "--worker", "matmul", "--seconds", str(seconds), "--warmup", "1.5",
                          "--report", report, "--cpus", ""], env=env, stdout=log, stderr=subprocess.STDOUT)
    return p, report


def result(p, report):
    p.wait(timeout=180)
    return json.load(open(report))["throughput"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libgpuslice.so")
    ap.add_argument("--out", default=".")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--pairs", default="30/70", help="comma-separated A/B limit pairs")
    ap.add_argument("--modes", default="turns,no-turns")
    a = ap.parse_args()
    pairs = [tuple(int(x) for x in p.split("/")) for p in a.pairs.split(",") if p]
    modes = [m for m in a.modes.split(",") if m]
    lib = os.path.abspath(a.lib)
    base = result(*start("base", a.out, 6, {}))
    print(f"un-hooked matmul alone: {base:.1f} it/s", flush=True)
    ok = True
    rows = []
    for pair, mode in [(p, m) for p in pairs for m in modes]:
        shared_node = tempfile.mkdtemp(prefix="gs-node-")
        # The operator's word: this user's containers take turns with the shares they ask for.
        with open(os.path.join(shared_node, "uid-%d.assigned" % os.geteuid()), "w") as f:
            f.write("compute=100\n")
        procs = []
        for n, limit in enumerate(pair):
            node = shared_node if mode == "turns" else tempfile.mkdtemp(prefix="gs-node-")
            procs.append((limit, start(f"{mode}-{pair[0]}-{pair[1]}-{n}", a.out, a.seconds, {
                "LD_PRELOAD": lib, "GPUSLICE_COMPUTE_LIMIT": str(limit),
                "GPUSLICE_SHARED_DIR": tempfile.mkdtemp(prefix="gs-c-"), "GPUSLICE_NODE_DIR": node})))
        for limit, (p, report) in procs:
            ratio = result(p, report) / base
            err = (ratio * 100) - limit
            passed = abs(err) <= 5
            if mode == "turns":
                ok &= passed
            rows.append((mode, pair, limit, ratio, err, passed))
    print("\n| pair | node-wide turns | limit % | throughput ÷ alone | error (points) | within ±5 |")
    print("|---|---|---|---|---|---|")
    for mode, pair, limit, ratio, err, passed in rows:
        print(f"| {pair[0]}/{pair[1]} | {'yes' if mode == 'turns' else 'no'} | {limit} | {ratio:.3f} | {err:+.1f} | "
              f"{'PASS' if passed else 'FAIL'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
