#!/usr/bin/env python3
"""Overhead of libgpuslice.so on a real GPU, hooked vs un-hooked, interleaved in one run.

  python3 bench/gpu/overhead.py --build build --out $OUT [--reps 7]

Configurations (each a fresh process per repetition, run in rotating order):
  base      no LD_PRELOAD
  quota     libgpuslice.so with a memory quota (alloc bookkeeping on, compute limiter off)
  profiled  as quota, plus the profiler writing to a temp dir
Reports medians and hooked/un-hooked ratios for: empty-kernel launch, cudaMalloc+cudaFree (1 MiB),
a PyTorch training step, a CuPy elementwise loop.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "..", "..", "tests", "gpu", "workloads.py")


def env_for(config, lib):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if config != "base":
        env["LD_PRELOAD"] = lib
        env["GPUSLICE_MEMORY_LIMIT"] = "60Gi"
        env["GPUSLICE_SHARED_DIR"] = tempfile.mkdtemp(prefix="gs-ovh-")
    if config == "profiled":
        env["GPUSLICE_PROFILE_DIR"] = tempfile.mkdtemp(prefix="gs-prof-")
    return env


def measure(argv, key, env):
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    for word in p.stdout.split():
        if word.startswith(key + "="):
            return float(word.split("=", 1)[1])
    raise RuntimeError(f"{argv} gave no {key}: {p.stdout[-300:]} {p.stderr[-300:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=".")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--skip", default="")
    a = ap.parse_args()
    lib = os.path.abspath(os.path.join(a.build, "lib", "libgpuslice.so"))
    exe = os.path.abspath(os.path.join(a.build, "gpu", "launch_alloc"))
    benches = {
        "empty-kernel launch (ns)": ([exe, "launches", "200000"], "launch_ns"),
        "cudaMalloc+cudaFree 1 MiB (ns)": ([exe, "alloc", "20000"], "alloc_free_ns"),
        "PyTorch train step (ms)": ([sys.executable, WORKLOADS, "torch_step_time"], "step_ms"),
        "CuPy elementwise op (us)": ([sys.executable, WORKLOADS, "cupy_loop"], "cupy_op_us"),
    }
    skip = set(filter(None, a.skip.split(",")))
    configs = ["base", "quota", "profiled"]
    table = {}
    for name, (argv, key) in benches.items():
        if any(s in name for s in skip):
            continue
        samples = {c: [] for c in configs}
        for rep in range(a.reps):
            order = configs[rep % 3:] + configs[:rep % 3]  # rotate so drift hits every config alike
            for c in order:
                samples[c].append(measure(argv, key, env_for(c, lib)))
        med = {c: statistics.median(v) for c, v in samples.items()}
        table[name] = {"median": med, "samples": samples}
        print(f"{name}: " + "  ".join(f"{c}={med[c]:.3f}" for c in configs), flush=True)
    print("\n| benchmark | un-hooked | hooked (quota) | ratio | delta | hooked + profiler | ratio | delta |")
    print("|---|---|---|---|---|---|---|---|")
    for name, row in table.items():
        m = row["median"]
        b = m["base"]
        print(f"| {name} | {b:.3f} | {m['quota']:.3f} | {m['quota'] / b:.4f} | {m['quota'] - b:+.3f} | "
              f"{m['profiled']:.3f} | {m['profiled'] / b:.4f} | {m['profiled'] - b:+.3f} |")
    json.dump(table, open(os.path.join(a.out, "overhead.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
