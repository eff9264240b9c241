#!/usr/bin/env python3
"""Medians over the pairs of several runs of bench/node_dir_flood_victim.py: side/base throughput, CPU, CPU per kernel."""
import json, statistics, sys
pairs = []
for path in sys.argv[1:]:
    pairs += json.load(open(path))["runs"]
for side in [k for k in pairs[0] if k not in ("order", "base")]:
    tp = [p[side]["kernels_per_s"] / p["base"]["kernels_per_s"] for p in pairs]
    cpu = [p[side]["cpu_s"] / p["base"]["cpu_s"] for p in pairs]
    per = [c / t for c, t in zip(cpu, tp)]
    print(f"{side}/base over {len(pairs)} pairs: throughput {statistics.median(tp):.3f}, CPU {statistics.median(cpu):.3f}, "
          f"CPU per kernel {statistics.median(per):.3f}; CPU <= 1.10 in {sum(c <= 1.10 for c in cpu)} pairs")
