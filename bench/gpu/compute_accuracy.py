#!/usr/bin/env python3
"""Accuracy of the compute limiter on a real GPU (SPEC §4), hooked vs un-hooked in one run.

  python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out DIR
      [--seconds 10] [--limits 20,50,80] [--workloads matmul,tiny,train] [--cli build/bin/gpuslice]
      [--no-settle]

For each workload it runs, each in a fresh process, in this order:
  base, limit 20, base, limit 50, base, limit 80, base
A limited run has LD_PRELOAD=<lib>, GPUSLICE_COMPUTE_LIMIT=<L> and a fresh GPUSLICE_SHARED_DIR. Its
throughput (iterations per second of GPU time, over --seconds after a warm-up) is divided by the mean
of the un-hooked runs just before and after it; the run passes when that ratio is within ±5 points
of L. Throughput is taken from CUDA events recorded every k iterations, so the measurement adds no
host synchronisation and reads the GPU's own timeline.

Workloads:
  matmul  4096^3 bf16 torch.matmul into a preallocated output (device-bound, ~0.2 ms per kernel)
  tiny    x.add_(1) on a 1024-element tensor in a tight Python loop (a stream of tiny kernels)
  train   a small MLP training step (3 Linear layers, GELU, MSE, AdamW foreach); backward kernels
          are launched from PyTorch's autograd thread, so two threads launch concurrently

Settle test: a matmul run starts at limit 80; 5 s into the measurement the script runs
`gpuslice set --compute 20 --shared-dir <dir>` and reports how long after the change the
throughput ratio settled within ±5 points of 20, with 1 s windows:
  settle_leading   first t after the change from which every window [t, t+1 s] stays in band
                   (the controller's own lag)
  settle_trailing  first T after the change from which every window [T-1 s, T] stays in band
                   (what a 1 s moving average shows; at least ~0.9 s by construction)

Total runtime with the defaults is about 6-7 minutes (22 process starts of ~4 s each, 1.5 s
warm-up, 10 s measurement). --seconds 5 halves the measuring part (and is reported as such).

Outputs in --out: compute_accuracy.csv (one row per limited run), compute_accuracy.json (every run
with its timeline), compute_settle.json, logs/<run>.log (stdout+stderr of each process).
"""
import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

# Variables that would change what a run measures if inherited from the caller's environment.
CONTROLLED_PREFIXES = ("GPUSLICE_", "CUDA_DEVICE_MEMORY_", "TENSOR_FUSION_", "HCS_", "VCUDA_")
CONTROLLED_NAMES = ("LD_PRELOAD", "CUDA_DEVICE_SM_LIMIT", "PFLOG", "LIBCUDA_LOG_LEVEL")

TOLERANCE_POINTS = 5.0
EVENTS_PER_SECOND = 200  # timeline resolution; k iterations per event are chosen from the warm-up rate


# ---------------------------------------------------------------------------------------------
# Worker: runs inside the measured process.
# ---------------------------------------------------------------------------------------------

def build_workload(name):
    import torch

    if name == "matmul":
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)

        def step():
            torch.matmul(a, b, out=out)

        return step, 2.0 * 4096 ** 3
    if name == "tiny":
        x = torch.zeros(1024, device="cuda")

        def step():
            x.add_(1.0)

        return step, None
    if name == "train":
        torch.manual_seed(0)
        torch.backends.cuda.matmul.allow_tf32 = True
        model = torch.nn.Sequential(
            torch.nn.Linear(1024, 4096), torch.nn.GELU(),
            torch.nn.Linear(4096, 4096), torch.nn.GELU(),
            torch.nn.Linear(4096, 1024)).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        x = torch.randn(512, 1024, device="cuda")
        y = torch.randn(512, 1024, device="cuda")

        def step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()

        return step, None
    raise SystemExit(f"unknown workload {name!r}")


def worker(args):
    import torch

    torch.cuda.init()
    step, flops = build_workload(args.workload)
    step()
    torch.cuda.synchronize()

    # Warm-up: caches, cuBLAS heuristics and the limiter's first windows; also sizes k.
    n = 0
    t_end = time.monotonic() + args.warmup
    while time.monotonic() < t_end:
        step()
        n += 1
    torch.cuda.synchronize()
    k = max(1, int(n / args.warmup / EVENTS_PER_SECOND))

    # The queue is empty here, so the start event runs as soon as it is recorded: GPU time 0 is
    # host time t0 (CLOCK_MONOTONIC, shared with the parent for the settle test).
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.monotonic()
    if args.ready_file:
        with open(args.ready_file + ".tmp", "w") as f:
            f.write(repr(t0))
        os.rename(args.ready_file + ".tmp", args.ready_file)
    marks = []
    done = 0
    deadline = t0 + args.seconds
    while time.monotonic() < deadline:
        for _ in range(k):
            step()
        done += k
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        marks.append((ev, done))
    torch.cuda.synchronize()
    timeline = [[start.elapsed_time(ev) / 1000.0, it] for ev, it in marks]
    gpu_seconds = timeline[-1][0]
    report = {
        "workload": args.workload,
        "iterations": done,
        "gpu_seconds": gpu_seconds,
        "throughput": done / gpu_seconds,
        "k": k,
        "t0_monotonic": t0,
        "timeline": timeline,
        "preloaded": os.environ.get("LD_PRELOAD", ""),
        "limit": os.environ.get("GPUSLICE_COMPUTE_LIMIT", ""),
    }
    if flops:
        report["tflops"] = flops * done / gpu_seconds / 1e12
    with open(args.report, "w") as f:
        json.dump(report, f)


# ---------------------------------------------------------------------------------------------
# Parent: orchestrates the runs and evaluates them.
# ---------------------------------------------------------------------------------------------

def clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(CONTROLLED_PREFIXES) and k not in CONTROLLED_NAMES}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Runner:
    def __init__(self, args):
        self.args = args
        self.lib = os.path.abspath(args.lib)
        self.logs = os.path.join(args.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.count = 0

    def start(self, workload, limit, seconds, ready_file=None):
        """Starts one measured process; returns (process, report path, shared dir, log file)."""
        self.count += 1
        tag = f"{self.count:02d}-{workload}-{'base' if limit is None else f'limit{limit}'}"
        env = clean_env()
        shared = None
        if limit is not None:
            shared = tempfile.mkdtemp(prefix="gs-acc-")
            env["LD_PRELOAD"] = self.lib
            env["GPUSLICE_COMPUTE_LIMIT"] = str(limit)
            env["GPUSLICE_SHARED_DIR"] = shared
            env["GPUSLICE_LOG_LEVEL"] = "warn"
        report = os.path.join(self.logs, tag + ".json")
        argv = [sys.executable, os.path.abspath(__file__), "--worker", workload,
                "--seconds", str(seconds), "--warmup", str(self.args.warmup), "--report", report]
        if ready_file:
            argv += ["--ready-file", ready_file]
        log = open(os.path.join(self.logs, tag + ".log"), "w")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        return proc, report, shared, log, tag

    def finish(self, proc, report, shared, log, tag, timeout):
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = "timeout"
        log.close()
        if shared:
            shutil.rmtree(shared, ignore_errors=True)
        if rc != 0 or not os.path.exists(report):
            tail = open(os.path.join(self.logs, tag + ".log")).read()[-1500:]
            raise RuntimeError(f"run {tag} failed (rc={rc}):\n{tail}")
        with open(report) as f:
            data = json.load(f)
        data["tag"] = tag
        return data

    def run(self, workload, limit):
        seconds = self.args.seconds
        started = self.start(workload, limit, seconds)
        data = self.finish(*started, timeout=seconds + self.args.warmup + 120)
        print(f"  {data['tag']}: {data['throughput']:.1f} it/s"
              + (f" ({data['tflops']:.0f} TFLOP/s)" if "tflops" in data else ""), flush=True)
        return data


def iterations_at(timeline, t):
    """Iterations completed by GPU time t, interpolated between event marks."""
    prev_t, prev_it = 0.0, 0
    for mark_t, mark_it in timeline:
        if mark_t >= t:
            if mark_t == prev_t:
                return mark_it
            return prev_it + (mark_it - prev_it) * (t - prev_t) / (mark_t - prev_t)
        prev_t, prev_it = mark_t, mark_it
    return prev_it


def window_ratios(timeline, baseline, width=1.0, step=0.1):
    """(start, throughput ratio) of every window [t, t+width] inside the timeline."""
    end = timeline[-1][0]
    out = []
    t = 0.0
    while t + width <= end + 1e-9:
        done = iterations_at(timeline, t + width) - iterations_at(timeline, t)
        out.append((round(t, 3), done / width / baseline))
        t += step
    return out


def first_stable(times, in_band):
    """Earliest time from which every later window is in band; None if the last one is not."""
    stable = None
    for t, ok in reversed(list(zip(times, in_band))):
        if not ok:
            break
        stable = t
    return stable


def accuracy(args, runner):
    rows, runs = [], []
    for workload in args.workloads:
        print(f"{workload}:", flush=True)
        before = runner.run(workload, None)
        runs.append(before)
        for limit in args.limits:
            hooked = runner.run(workload, limit)
            after = runner.run(workload, None)
            runs += [hooked, after]
            baseline = (before["throughput"] + after["throughput"]) / 2
            ratio = hooked["throughput"] / baseline
            error = ratio * 100 - limit
            per_second = [r for _, r in window_ratios(hooked["timeline"], baseline)]
            rows.append({
                "workload": workload,
                "limit": limit,
                "baseline_it_s": round(baseline, 2),
                "baseline_drift_pct": round(100 * (after["throughput"] / before["throughput"] - 1), 2),
                "hooked_it_s": round(hooked["throughput"], 2),
                "ratio": round(ratio, 4),
                "error_points": round(error, 2),
                "min_1s_ratio": round(min(per_second), 4) if per_second else None,
                "max_1s_ratio": round(max(per_second), 4) if per_second else None,
                "seconds": args.seconds,
                "pass": abs(error) <= TOLERANCE_POINTS,
            })
            before = after
    return rows, runs


def settle(args, runner, baseline):
    """Limit 80 -> 20 while a matmul loop runs; returns the settle record."""
    seconds = max(args.seconds, 10.0) + 2.0
    change_after = 5.0
    ready = os.path.join(tempfile.mkdtemp(prefix="gs-ready-"), "ready")
    proc, report, shared, log, tag = runner.start("matmul", 80, seconds, ready_file=ready)
    record = {"from": 80, "to": 20, "change_after_s": change_after}
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(ready):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"settle run {tag} never started measuring")
            time.sleep(0.05)
        with open(ready) as f:
            t0 = float(f.read())
        time.sleep(max(0.0, t0 + change_after - time.monotonic()))
        env = clean_env()
        cli = [args.cli, "set", "--compute", "20", "--shared-dir", shared]
        changed_at = time.monotonic()
        cp = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=30)
        record["cli"] = " ".join(cli)
        record["cli_rc"] = cp.returncode
        record["cli_output"] = (cp.stdout + cp.stderr)[-500:]
        if cp.returncode != 0:
            print(f"  gpuslice set failed (rc={cp.returncode}): {record['cli_output']}", flush=True)
    except BaseException:
        proc.kill()
        proc.wait()
        log.close()
        shutil.rmtree(shared, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(os.path.dirname(ready), ignore_errors=True)
    # finish() removes the shared dir only after the process is done with it.
    data = runner.finish(proc, report, shared, log, tag, timeout=seconds + args.warmup + 120)
    change = changed_at - data["t0_monotonic"]
    windows = window_ratios(data["timeline"], baseline)
    in_band = [abs(r - 0.20) * 100 <= TOLERANCE_POINTS for _, r in windows]
    leading = first_stable([t for t, _ in windows], in_band)
    trailing = first_stable([t + 1.0 for t, _ in windows], in_band)
    before = [r for t, r in windows if t + 1.0 <= change]
    record.update({
        "change_at_gpu_s": round(change, 3),
        "ratio_before_change": round(sum(before) / len(before), 4) if before else None,
        "settle_leading_s": None if leading is None else round(max(0.0, leading - change), 3),
        "settle_trailing_s": None if trailing is None else round(max(0.0, trailing - change), 3),
        "windows": windows,
        "baseline_it_s": baseline,
    })
    record["pass"] = (record["cli_rc"] == 0 and record["settle_leading_s"] is not None
                      and record["settle_leading_s"] <= 1.0)
    return record, data


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build/lib/libgpuslice.so")
    ap.add_argument("--out", default="gpu-out")
    ap.add_argument("--cli", default=None, help="gpuslice CLI (default: <lib dir>/../bin/gpuslice)")
    ap.add_argument("--seconds", type=float, default=10.0, help="measurement window per run")
    ap.add_argument("--warmup", type=float, default=1.5)
    ap.add_argument("--limits", default="20,50,80")
    ap.add_argument("--workloads", default="matmul,tiny,train")
    ap.add_argument("--no-settle", action="store_true")
    # Worker mode (internal).
    ap.add_argument("--worker", default=None)
    ap.add_argument("--report", default=None)
    ap.add_argument("--ready-file", default=None)
    args = ap.parse_args()
    if args.worker:
        args.workload = args.worker
        worker(args)
        return 0

    args.limits = [int(x) for x in args.limits.split(",") if x]
    args.workloads = [w for w in args.workloads.split(",") if w]
    args.cli = os.path.abspath(args.cli or os.path.join(os.path.dirname(os.path.abspath(args.lib)), "..", "bin",
                                                        "gpuslice"))
    os.makedirs(args.out, exist_ok=True)
    if not os.path.exists(args.lib):
        print(f"no such library: {args.lib}", file=sys.stderr)
        return 2
    began = time.monotonic()
    runner = Runner(args)
    print(f"compute limiter accuracy: {args.seconds:g} s windows, limits {args.limits}, "
          f"tolerance ±{TOLERANCE_POINTS:g} points", flush=True)
    rows, runs = accuracy(args, runner)

    settle_record = None
    if not args.no_settle:
        if not os.path.exists(args.cli):
            print(f"settle test skipped: no CLI at {args.cli}", flush=True)
        else:
            print("settle (matmul, limit 80 -> 20 after 5 s):", flush=True)
            base = [r for r in runs if r["workload"] == "matmul" and not r["limit"]]
            if not base:
                base = [runner.run("matmul", None)]
                runs += base
            baseline = sum(r["throughput"] for r in base) / len(base)
            settle_record, settle_run = settle(args, runner, baseline)
            runs.append(settle_run)

    if rows:
        with open(os.path.join(args.out, "compute_accuracy.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            writer.writeheader()
            writer.writerows(rows)
    with open(os.path.join(args.out, "compute_accuracy.json"), "w") as f:
        json.dump({"rows": rows, "runs": runs, "seconds": args.seconds}, f)
    if settle_record:
        with open(os.path.join(args.out, "compute_settle.json"), "w") as f:
            json.dump(settle_record, f, indent=1)

    print()
    print("| workload | limit % | un-hooked it/s | hooked it/s | ratio | error (points) | 1 s min..max | pass |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['limit']} | {r['baseline_it_s']:.1f} | {r['hooked_it_s']:.1f} | "
              f"{r['ratio']:.3f} | {r['error_points']:+.1f} | {r['min_1s_ratio']:.2f}..{r['max_1s_ratio']:.2f} | "
              f"{'PASS' if r['pass'] else 'FAIL'} |")
    if settle_record:
        s = settle_record
        print(f"\nsettle 80 -> 20: ratio before {s['ratio_before_change']}, change at GPU t={s['change_at_gpu_s']} s; "
              f"settled (leading 1 s windows) after {s['settle_leading_s']} s, "
              f"(trailing 1 s windows) after {s['settle_trailing_s']} s; cli rc={s['cli_rc']}: "
              f"{'PASS' if s['pass'] else 'FAIL'}")
    failed = sum(not r["pass"] for r in rows) + (0 if settle_record is None or settle_record["pass"] else 1)
    print(f"\n{len(rows) - sum(not r['pass'] for r in rows)}/{len(rows)} accuracy runs within ±{TOLERANCE_POINTS:g} "
          f"points; total {time.monotonic() - began:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
