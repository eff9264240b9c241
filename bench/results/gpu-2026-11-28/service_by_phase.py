#!/usr/bin/env python3
"""The server's service time (request start to end) with the trainer running and paused, by the SM
clock NVML reported when the request started, from a paired priority_bench.json(.gz).

  python3 service_by_phase.py priority-call3-req2ms.json.gz [run name]

A request counts as in a running phase when the trainer finished a step within 0.2 s after it
started (phases are 1.5 s; the trainer steps every ~0.1 s while it runs)."""
import bisect
import gzip
import json
import statistics
import sys

path = sys.argv[1]
name = sys.argv[2] if len(sys.argv) > 2 else "load30-paired-priorities"
with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
    run = json.load(f)["runs"][name]
samples = run["nvml"]  # [t, util %, SM MHz, W, ...]
times = [s[0] for s in samples]
steps = run["trainer"]["step_done_s"]
groups = {}
for _, start, end in run["server"]["timeline_s"]:
    i = min(bisect.bisect_left(times, start), len(samples) - 1)
    j = bisect.bisect_left(steps, start)
    running = j < len(steps) and steps[j] - start < 0.2
    clock = "SM >= 1900 MHz" if samples[i][2] >= 1900 else "SM < 1900 MHz"
    groups.setdefault(("trainer running" if running else "trainer paused", clock), []).append(end - start)
for key in sorted(groups):
    values = groups[key]
    print(f"{key[0]:16} {key[1]:15} {len(values):5} requests: service mean {statistics.mean(values) * 1e3:.3f} ms, "
          f"median {statistics.median(values) * 1e3:.3f} ms")
