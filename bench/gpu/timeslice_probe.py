#!/usr/bin/env python3
"""What a process's GPU work meets when another process's kernels hold the GPU, without gpuslice.

  python3 bench/gpu/timeslice_probe.py [--out DIR] [--kernel-us 250,1000,4000,16000] [--depth 1,4]
      [--probe 1x0,40x100] [--count 150] [--gap-ms 10] [--seed 1]

Two processes on one GPU, each its own CUDA context (time-sliced by the driver, as two containers
without MPS are):
  hog    launches spin kernels of --kernel-us each, back to back, keeping --depth of them queued
         (depth 1: it waits for each before launching the next)
  probe  at random times (exponential gaps of mean --gap-ms) launches a burst of K spin kernels of
         P us (--probe KxP; P = 0: an empty kernel) and waits for the last: its latency, launch to
         the host's return, against the same burst with the hog idle.

Whether the probe waits for the hog's running kernel to end (its extra latency grows with the
kernel: about half of it on average, all of it at worst), for the driver's time slice only (it
stops growing past the slice), and whether it also waits for the hog's queued kernels (it grows with
the depth), is what the priority gate's in-flight bound rests on (docs/priority.md). Each hog
setting's kernel time is measured alone before the probes. Writes timeslice_probe.json under --out
(default $OUT, else ./timeslice-out) and prints a table.
"""
import argparse
import json
import os
import random
import select
import subprocess
import sys
import time
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from priority_bench import percentile  # noqa: E402


def parse_list(text, what, minimum=0):
    """Comma-separated integers, each >= minimum: the list, or ValueError naming the option."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not values or any(v < minimum for v in values):
        raise ValueError(f"{what}: every value must be at least {minimum}, got {text!r}")
    return values


def parse_probes(text):
    """--probe: comma-separated KxP (K kernels of P microseconds, K >= 1, P >= 0)."""
    probes = []
    for item in text.split(","):
        k, sep, p = item.partition("x")
        try:
            count, us = int(k), int(p)
        except ValueError:
            count, us = 0, -1
        if not sep or count < 1 or us < 0:
            raise ValueError(f"--probe: expected KxP (K kernels of P us, K >= 1, P >= 0), got {item!r}")
        probes.append((count, us))
    return probes


def summarize(latencies_us, alone_p50_us):
    """p50/p90/p99/max of a probe setting's latencies and its p50 and mean over the alone p50."""
    values = sorted(latencies_us)
    row = {"n": len(values), "p50": percentile(values, 0.5), "p90": percentile(values, 0.9),
           "p99": percentile(values, 0.99), "max": values[-1] if values else None,
           "mean": sum(values) / len(values) if values else None}
    if values and alone_p50_us is not None:
        row["extra_p50"] = row["p50"] - alone_p50_us
        row["extra_mean"] = row["mean"] - alone_p50_us
    return row


def table(rows):
    """Markdown: one line per (probe, hog kernel, depth)."""
    lines = ["| probe | hog kernel us | depth | probe p50 us | p90 | p99 | max | extra mean us | "
             "extra mean ÷ hog kernel |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        kernel = r.get("kernel_us")
        extra = r.get("extra_mean")
        ratio = f"{extra / kernel:.2f}" if kernel and extra is not None else "-"
        lines.append(f"| {r['probe']} | {'alone' if kernel is None else f'{kernel:.0f}'} | "
                     f"{r.get('depth', '-')} | {r['p50']:.0f} | {r['p90']:.0f} | {r['p99']:.0f} | "
                     f"{r['max']:.0f} | {'-' if extra is None else f'{extra:.0f}'} | {ratio} |")
    return "\n".join(lines)


# ---- the two GPU processes (each reads one JSON command per line, answers one JSON line) ----

def cycles_per_us(torch):
    """SM cycles per microsecond of torch.cuda._sleep, measured with events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(2_000_000)
    end.record()
    end.synchronize()
    return 2_000_000 / (start.elapsed_time(end) * 1e3)


def kernel_time_us(torch, cycles, n=5):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / n


def answer(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def hog_role():
    import torch
    rate = cycles_per_us(torch)
    answer({"ready": True, "cycles_per_us": rate})
    cycles, depth = 0, 1
    queued = deque()
    while True:
        # A command waits at most one kernel: the loop looks at stdin between launches.
        timeout = 0 if cycles else 0.01
        if select.select([sys.stdin], [], [], timeout)[0]:
            line = sys.stdin.readline()
            if not line:
                return
            cmd = json.loads(line)
            torch.cuda.synchronize()
            queued.clear()
            if cmd["op"] == "quit":
                return
            if cmd["op"] == "idle":
                cycles = 0
                answer({"ok": True})
                continue
            cycles, depth = max(1, int(cmd["kernel_us"] * rate)), cmd["depth"]
            answer({"ok": True, "kernel_us": kernel_time_us(torch, cycles)})
            continue
        if not cycles:
            continue
        torch.cuda._sleep(cycles)
        event = torch.cuda.Event()
        event.record()
        queued.append(event)
        while len(queued) >= depth:
            queued.popleft().synchronize()


def probe_role():
    import torch
    rate = cycles_per_us(torch)
    answer({"ready": True, "cycles_per_us": rate})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            return
        count, us = cmd["kernels"], cmd["kernel_us"]
        cycles = max(1, int(us * rate)) if us else 1
        rng = random.Random(cmd["seed"])
        done = torch.cuda.Event()
        latencies = []
        for _ in range(cmd["count"]):
            time.sleep(rng.expovariate(1e3 / cmd["gap_ms"]))
            t0 = time.perf_counter()
            for _ in range(count):
                torch.cuda._sleep(cycles)
            done.record()
            done.synchronize()
            latencies.append((time.perf_counter() - t0) * 1e6)
        answer({"latencies_us": latencies, "burst_us": kernel_time_us(torch, cycles, n=count) * count})


class Child:
    """One GPU process of this script, driven over its stdin/stdout."""

    def __init__(self, role):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", role],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def read(self, timeout):
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise TimeoutError("no answer")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the child exited ({self.proc.wait()})")
        return json.loads(line)

    def ask(self, cmd, timeout):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.read(timeout)

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def measure(args, kernels, depths, probes):
    hog, probe = Child("hog"), Child("probe")
    try:
        hog.read(180)
        probe.read(180)
        rows = []
        for count, us in probes:
            label = f"{count}x{us}"
            cmd = {"op": "probe", "kernels": count, "kernel_us": us, "count": args.count,
                   "gap_ms": args.gap_ms, "seed": args.seed}
            timeout = 60 + args.count * (args.gap_ms * 5 + max(kernels) * max(depths) / 1e3 + count * us / 1e3) / 1e3
            hog.ask({"op": "idle"}, 60)
            alone = probe.ask(cmd, timeout)
            base = summarize(alone["latencies_us"], None)
            rows.append(dict(base, probe=label, burst_us=alone["burst_us"], latencies_us=alone["latencies_us"]))
            for kernel in kernels:
                for depth in depths:
                    measured = hog.ask({"op": "run", "kernel_us": kernel, "depth": depth}, 60)["kernel_us"]
                    got = probe.ask(cmd, timeout)
                    row = summarize(got["latencies_us"], base["p50"])
                    rows.append(dict(row, probe=label, kernel_us=measured, set_kernel_us=kernel, depth=depth,
                                     latencies_us=got["latencies_us"]))
                    print(table([rows[-1]]).splitlines()[-1], flush=True)
        hog.ask({"op": "idle"}, 60)
        return rows
    finally:
        hog.close()
        probe.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=["hog", "probe"], help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.environ.get("OUT") or "timeslice-out")
    p.add_argument("--kernel-us", default="250,1000,4000,16000", help="the hog's kernel lengths (us)")
    p.add_argument("--depth", default="1,4", help="the hog's kernels kept queued")
    p.add_argument("--probe", default="1x0,40x100", help="the probe's bursts: K kernels of P us, KxP,...")
    p.add_argument("--count", type=int, default=150, help="probes per setting")
    p.add_argument("--gap-ms", type=float, default=10.0, help="mean gap between probes")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.role == "hog":
        return hog_role()
    if args.role == "probe":
        return probe_role()
    try:
        kernels = parse_list(args.kernel_us, "--kernel-us", 1)
        depths = parse_list(args.depth, "--depth", 1)
        probes = parse_probes(args.probe)
        if args.count < 1:
            raise ValueError(f"--count: must be at least 1, got {args.count}")
        if not args.gap_ms > 0:
            raise ValueError(f"--gap-ms: must be above 0, got {args.gap_ms}")
    except ValueError as e:
        print(f"timeslice_probe: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    print(table([]), flush=True)
    rows = measure(args, kernels, depths, probes)
    print()
    print(table(rows))
    with open(os.path.join(args.out, "timeslice_probe.json"), "w") as f:
        json.dump({"args": vars(args), "rows": rows}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
