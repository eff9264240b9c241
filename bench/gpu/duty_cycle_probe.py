#!/usr/bin/env python3
"""What duty-cycling does to a GPU workload's speed, without gpuslice (a diagnostic for the limiter).

  python3 bench/gpu/duty_cycle_probe.py --out DIR [--part matmul,tiny] [--cpu 4]

matmul: 4096^3 bf16 matmuls in bursts sized to run L% of a period, then idle for the rest (the
  shape of the compute limiter's on/off cycle), for several L and periods. Per configuration: work
  per busy second (kernels per second of GPU time between the burst's first and last event) ÷ the
  same when running flat out, occupancy, and NVML SM clock / power / power-cap throttling sampled
  every 2 ms. Kernel time at the start and the end of bursts shows how fast the clocks move.
tiny: a Python loop of tiny kernels (x.add_(1) on 1024 floats), pinned to one CPU: launches per
  second while running continuously vs inside the on phases of an 80/20 duty cycle whose off phase
  sleeps or spins, with and without a SCHED_IDLE spinner process on the same CPU (which keeps the
  vCPU from halting without taking time from the loop). Configurations are interleaved and repeated.
Writes duty_cycle_probe.json and prints a table.
"""
import argparse
import json
import os
import time

from compute_accuracy import NvmlSampler  # same folder

SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8


def nvml_summary(sampler, t0, t1):
    """Mean SM clock and power, and the share of samples with power-cap or hardware slowdown."""
    s = [x for x in sampler.samples if t0 <= x[0] <= t1]
    if not s:
        return {}
    n = len(s)
    return {"sm_mhz": sum(x[2] for x in s) / n, "watts": sum(x[3] for x in s) / n,
            "power_cap_frac": sum(1 for x in s if x[4] & SW_POWER_CAP) / n,
            "hw_slowdown_frac": sum(1 for x in s if x[4] & HW_SLOWDOWN) / n, "samples": n}


def matmul_part(seconds):
    import torch
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(a)
    for _ in range(200):
        torch.matmul(a, b, out=out)
    torch.cuda.synchronize()
    sampler = NvmlSampler(period=0.002)
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731

    def burst(n):
        e0, e1, e2, e3 = ev(), ev(), ev(), ev()
        e0.record()
        torch.matmul(a, b, out=out)
        e1.record()
        for _ in range(n - 2):
            torch.matmul(a, b, out=out)
        e2.record()
        torch.matmul(a, b, out=out)
        e3.record()
        e3.synchronize()
        return e0.elapsed_time(e3) / 1e3, e0.elapsed_time(e1) / 1e3, e2.elapsed_time(e3) / 1e3

    # Flat out: bursts back to back (a sync between them costs a few microseconds of idle).
    kernel_s = burst(500)[0] / 500
    results = []

    def run(limit, period_ms):
        on_s = period_ms / 1e3 * limit / 100
        n = max(3, round(on_s / kernel_s))
        busy = kernels = 0
        firsts, lasts = [], []
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            start = time.monotonic()
            b_s, first, last = burst(n)
            busy += b_s
            kernels += n
            firsts.append(first)
            lasts.append(last)
            if limit < 100:
                rest = period_ms / 1e3 - (time.monotonic() - start)
                if rest > 0:
                    time.sleep(rest)
        t1 = time.monotonic()
        row = {"limit": limit, "period_ms": period_ms, "kernels_per_burst": n,
               "busy_rate": kernels / busy, "occupancy": busy / (t1 - t0),
               "first_kernel_us": 1e6 * sorted(firsts)[len(firsts) // 2],
               "last_kernel_us": 1e6 * sorted(lasts)[len(lasts) // 2]}
        row.update(nvml_summary(sampler, t0 + 0.5, t1))
        results.append(row)
        return row

    configs = [(100, 100), (50, 20), (50, 100), (50, 500), (50, 2000), (100, 100), (20, 100), (20, 500),
               (80, 100), (80, 500), (50, 100), (100, 100)]
    for limit, period in configs:
        run(limit, period)
        time.sleep(0.5)
    flat = [r["busy_rate"] for r in results if r["limit"] == 100]
    flat_rate = sum(flat) / len(flat)
    print("matmul: flat-out kernels/s of busy time", [round(x) for x in flat])
    print("| limit | period ms | busy rate ÷ flat | throughput ratio | occupancy | SM MHz | W | "
          "power-cap % | first/last kernel µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        r["busy_rate_vs_flat"] = r["busy_rate"] / flat_rate
        print(f"| {r['limit']} | {r['period_ms']} | {r['busy_rate_vs_flat']:.3f} | "
              f"{r['busy_rate_vs_flat'] * r['occupancy']:.3f} | {r['occupancy']:.3f} | "
              f"{r.get('sm_mhz', 0):.0f} | {r.get('watts', 0):.0f} | {100 * r.get('power_cap_frac', 0):.0f} | "
              f"{r['first_kernel_us']:.0f} / {r['last_kernel_us']:.0f} |", flush=True)
    sampler.close()
    return {"flat_rate": flat_rate, "rows": results, "samples": sampler.samples}


def spinner(cpu):
    pid = os.fork()
    if pid == 0:
        os.sched_setaffinity(0, {cpu})
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        while True:
            pass
    return pid


def tiny_part(seconds, cpu, repeats):
    import torch
    os.sched_setaffinity(0, {cpu})
    x = torch.zeros(1024, device="cuda")
    for _ in range(10000):
        x.add_(1.0)
    torch.cuda.synchronize()

    def run(mode):
        launches = 0
        on_time = 0.0
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            start = time.monotonic()
            on_end = start + (0.1 if mode == "continuous" else 0.08)
            n = 0
            while time.monotonic() < on_end:
                for _ in range(50):
                    x.add_(1.0)
                n += 50
            torch.cuda.synchronize()
            launches += n
            on_time += time.monotonic() - start
            if mode == "sleep":
                time.sleep(0.02)
            elif mode == "spin":
                off_end = time.monotonic() + 0.02
                while time.monotonic() < off_end:
                    pass
        return launches / on_time

    rows = {}
    for rep in range(repeats):
        for mode, idle_spinner in [("continuous", False), ("sleep", False), ("spin", False),
                                   ("continuous", True), ("sleep", True)]:
            pid = spinner(cpu) if idle_spinner else None
            try:
                rate = run(mode)
            finally:
                if pid:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
            key = mode + (" + idle spinner" if idle_spinner else "")
            rows.setdefault(key, []).append(rate)
    base = sum(rows["continuous"]) / len(rows["continuous"])
    print(f"tiny (CPU {cpu}): launches per second of on-time, {repeats} interleaved repeats of {seconds} s")
    for key, rates in rows.items():
        mean = sum(rates) / len(rates)
        print(f"  {key:32s} {mean:9.0f}  ÷ continuous {mean / base:.3f}   "
              + " ".join(f"{r:.0f}" for r in rates), flush=True)
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--part", default="matmul,tiny")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--cpu", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    result = {}
    if "matmul" in args.part:
        result["matmul"] = matmul_part(args.seconds)
    if "tiny" in args.part:
        result["tiny"] = tiny_part(3.0, args.cpu, args.repeats)
    with open(os.path.join(args.out, "duty_cycle_probe.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
