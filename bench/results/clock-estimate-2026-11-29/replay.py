#!/usr/bin/env python3
"""Replays the limiter's estimate of the flat-out SM clock (limiter/clock_correction.h: the second
lowest busy clock of the latest 30 busy watcher samples, none in the first second) over the NVML samples of H200 runs, as if each
limited phase had started limited, and compares it with the clock of the unlimited phases beside it.

    python3 replay.py compute_accuracy.json [...]
"""
import json
import sys

MAX_MHZ = 1980  # the H200's maximum SM clock (nvidia-smi clocks.max.sm in the runs' env.txt)
SAMPLES, MIN_SAMPLES, MIN_UTIL, IDLE_MARGIN, WAKE = 30, 5, 10, 30, 10


def estimate(samples):
    """The estimate after each sample (0 while there is none), as ClockReference::observe keeps it."""
    ring, out, awake = [], [], 0  # the phase's first second is not taken, as the watcher's is not
    for _, util, mhz in samples:
        deep_idle = 0 < mhz < MAX_MHZ // 2
        if deep_idle:
            awake = 0
        taken = awake >= WAKE
        if not deep_idle and not taken:
            awake += 1
        if taken and MIN_UTIL <= util <= 100 and mhz and mhz + IDLE_MARGIN < MAX_MHZ:
            ring = (ring + [mhz])[-SAMPLES:]
        out.append(sorted(ring)[1] if len(ring) >= MIN_SAMPLES else 0)
    return out


def main(paths):
    print("| run | shape | limit | flat out before (MHz) | estimate over the phase's last 2/3 (MHz) | "
          "off (MHz) | old estimate as fitted: max - (max - phase mean) / duty | "
          "old estimate as applied: max - (max - busy clock) / duty |")
    print("|---|---|---|---|---|---|---|---|")
    offs = []
    for path in paths:
        d = json.load(open(path))
        nvml = [(s[0], s[1], s[2]) for s in d["nvml"]]
        for run in d["runs"]:
            t0 = run["t0_monotonic"]
            phases = run.get("phases", [])
            for i, phase in enumerate(phases):
                if phase["limit"] >= 100:
                    continue
                start, end = t0 + phase["start"], t0 + phase["end"]
                inside = [s for s in nvml if start <= s[0] < end]
                # Flat out: the unlimited phases beside it, from their second second (the clock falls
                # for about a second as the power rises).
                before = [s[2] for n in (phases[i - 1] if i else None, phases[i + 1] if i + 1 < len(phases) else None)
                          if n and n["limit"] >= 100
                          for s in nvml if t0 + n["start"] + 1 <= s[0] < t0 + n["end"] and s[1] >= 95]
                est = [e for e in estimate(inside)[len(inside) // 3:] if e]
                if not inside or not before or not est:
                    continue
                flat = sum(before) / len(before)
                mean_mhz = sum(s[2] for s in inside) / len(inside)
                duty = sum(s[1] for s in inside) / len(inside) / 100
                old = MAX_MHZ - (MAX_MHZ - mean_mhz) / duty if duty > 0.15 else float("nan")
                # The limiter read each window's clock at its close, while it ran: a busy clock.
                busy = [s[2] for s in inside if s[1] >= MIN_UTIL and s[2] + IDLE_MARGIN < MAX_MHZ]
                busy_mhz = sum(busy) / len(busy) if busy else float("nan")
                applied = MAX_MHZ - (MAX_MHZ - busy_mhz) / duty if duty > 0.15 else float("nan")
                lo, hi = min(est), max(est)
                offs += [lo - flat, hi - flat]
                print(f"| {path.split('/')[-2]} | {run['workload']} | {phase['limit']} | {flat:.0f} | {lo}..{hi} | "
                      f"{lo - flat:+.0f}..{hi - flat:+.0f} | {old:.0f} | {applied:.0f} |")
    print(f"\n{len(offs) // 2} phases: estimate minus flat-out clock {min(offs):+.0f}..{max(offs):+.0f} MHz")


if __name__ == "__main__":
    main(sys.argv[1:])
