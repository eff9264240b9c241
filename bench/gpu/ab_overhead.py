#!/usr/bin/env python3
"""What gpuslice adds to a PyTorch training step and a decode loop, measured inside one process.

  python3 bench/gpu/ab_overhead.py --lib build/lib/libgpuslice-ab.so --out $OUT [--rounds 40]

Process-to-process comparisons cannot resolve a fraction of a percent on a virtual machine (a GPT-2
step varies by +-15 % between processes). Here each configuration runs ONE process under
libgpuslice-ab.so, the benchmark's build of the library: every driver function it hands out is a
stub that jumps either to the hook or straight to the driver's function, and
gpuslice_ab_set_bypass() flips the side. The process alternates blocks of steps on the two sides
(ABBA order), pinned to one CPU set, and reports the mean paired difference with a 95 % confidence
interval. Both sides pay the same stub, so the difference is what the hooks add.

Configurations: quota (memory quota), compute100 (quota + a compute limit of 100 %: the launch gate
runs, nothing is throttled), profiled (quota + the profiler).
Workloads: GPT-2 small (built from its config, no download) training step, batch 8 x 256 tokens,
bf16 autocast; greedy decode of 1 sequence with a KV cache, timed per token.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

CONFIGS = {
    "quota": {"GPUSLICE_MEMORY_LIMIT": "70Gi"},
    "compute100": {"GPUSLICE_MEMORY_LIMIT": "70Gi", "GPUSLICE_COMPUTE_LIMIT": "100"},
    "profiled": {"GPUSLICE_MEMORY_LIMIT": "70Gi", "GPUSLICE_PROFILE_DIR": None},
}
T95 = {10: 2.262, 20: 2.093, 30: 2.045, 40: 2.023, 60: 2.001}


def t95(n):
    for k in sorted(T95):
        if n - 1 <= k:
            return T95[k]
    return 1.96


def paired_summary(hooked, bypassed):
    """Mean relative difference (hooked / bypassed - 1) over rounds with its 95 % interval."""
    diffs = [h / b - 1.0 for h, b in zip(hooked, bypassed)]
    mean = statistics.fmean(diffs)
    half = t95(len(diffs)) * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else float("nan")
    return {"mean_pct": 100 * mean, "ci95_pct": 100 * half, "rounds": len(diffs),
            "hooked_median_ms": 1e3 * statistics.median(hooked), "bypassed_median_ms": 1e3 * statistics.median(bypassed)}


def worker(args):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    switch = ctypes.CDLL(None).gpuslice_ab_set_bypass
    switch.argtypes = [ctypes.c_int]
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    batch = torch.randint(0, 50257, (8, 256), device="cuda")

    def train_step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(batch, labels=batch).loss
        loss.backward()
        opt.step()

    prompt = torch.randint(0, 50257, (1, 32), device="cuda")

    @torch.no_grad()
    def decode(tokens=32):
        out = model(prompt, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(tokens):
            out = model(nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)

    def timed(fn, reps):
        # The median of the block's steps, each timed on its own: a garbage collection or a host
        # hiccup in one step does not decide the block.
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    result = {}
    for name, fn, reps in (("train_step", train_step, args.train_reps), ("decode_token", decode, args.decode_reps)):
        for side in (0, 1):  # warm both sides (allocator, autotuning) before measuring
            switch(side)
            timed(fn, reps)
        hooked, bypassed = [], []
        for r in range(args.rounds):
            order = (0, 1) if r % 2 == 0 else (1, 0)  # ABBA: drifts cancel
            for side in order:
                switch(side)
                t = timed(fn, reps)
                (bypassed if side else hooked).append(t / (32 if name == "decode_token" else 1))
        switch(0)
        result[name] = paired_summary(hooked, bypassed)
    json.dump(result, sys.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--lib", default="build/lib/libgpuslice-ab.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--train-reps", type=int, default=5)
    ap.add_argument("--decode-reps", type=int, default=5)
    ap.add_argument("--cpus", default="4,5")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if not os.path.exists(args.lib):
        raise SystemExit(f"{args.lib} not found: build the target gpuslice_preload_ab first")
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for config in args.configs.split(","):
        env = dict(os.environ)
        env["LD_PRELOAD"] = os.path.abspath(args.lib)
        env["GPUSLICE_SHARED_DIR"] = tempfile.mkdtemp(prefix="gs-ab-")
        for key, value in CONFIGS[config].items():
            env[key] = value if value is not None else tempfile.mkdtemp(prefix="gs-ab-prof-")
        argv = [sys.executable, os.path.abspath(__file__), "--worker", "--rounds", str(args.rounds),
                "--train-reps", str(args.train_reps), "--decode-reps", str(args.decode_reps), "--cpus", args.cpus]
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            print(f"{config}: worker failed ({p.returncode})\n{p.stderr[-2000:]}")
            results[config] = {"error": p.stderr[-2000:]}
            continue
        results[config] = json.loads(p.stdout.strip().splitlines()[-1])
        for name, r in results[config].items():
            print(f"{config:11s} {name:13s} hooked {r['hooked_median_ms']:8.3f} ms  bypassed "
                  f"{r['bypassed_median_ms']:8.3f} ms  added {r['mean_pct']:+.3f} % +- {r['ci95_pct']:.3f} % "
                  f"(95 %, {r['rounds']} paired rounds)", flush=True)
    with open(os.path.join(args.out, "ab_overhead.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
