#!/usr/bin/env python3
"""Call 4's two-process runs re-analysed with the companion counted from the measured process's
start. Call 4's compute_accuracy.py summed the companion's iterations since its own first step (up
to 1.4 s before the measured one's time 0), so each run's first phase read that many iterations
more; the summed marks themselves are right, only their origin is not. This subtracts, per run, the
companion's count at the measured one's time 0 (the first mark's sum less its own count, less the
companion's share of the first mark's few milliseconds) and re-runs the script's own analysis.

    python3 resum.py compute_accuracy.json [...]
"""
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "compute_accuracy", os.path.join(HERE, "..", "..", "gpu", "compute_accuracy.py"))
accuracy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(accuracy)


def fixed(run):
    own, summed = run["own_timeline"], run["timeline"]
    t_first = summed[0][0]
    # The companion's rate over the first half second, for its iterations within the first mark.
    comp = accuracy.Timeline([[t, s - o] for (t, s), (_, o) in zip(summed, own)])
    rate = (comp.iterations_at(0.5) - comp.iterations_at(t_first)) / (0.5 - t_first)
    origin = summed[0][1] - own[0][1] - rate * t_first
    return [[t, s - origin] for t, s in summed], origin


def main(paths):
    print("| run | after | limit | ratio | first 1 s | 1 s windows min..max | companion counted before t=0 |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        data = json.load(open(path))
        for run in data["runs"]:
            if "own_timeline" not in run:
                continue
            run["timeline"], origin = fixed(run)
            timeline = accuracy.Timeline(run["timeline"])
            for p in run["phases"]:
                p["it_s"] = timeline.throughput(p["from"], p["end"])
            rows, _ = accuracy.analyse(run["workload"] + "2p", run)
            for r in rows:
                print(f"| {path.split('/')[-2]} | {r['after_limit']} | {r['limit']} | {r['ratio']:.3f} | "
                      f"{r['first_1s_ratio']:.3f} | {r['min_1s_ratio']:.3f}..{r['max_1s_ratio']:.3f} | {origin:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
