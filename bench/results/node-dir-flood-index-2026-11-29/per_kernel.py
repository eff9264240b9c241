import json, statistics, sys
for path in sys.argv[1:]:
    r = json.load(open(path))
    secs = r["args"]["seconds"]
    runs = r["runs"]
    sides = [k for k in runs[0] if k not in ("order", "base")]
    for side in sides:
        ratios = [(x[side]["cpu_s"] / (x[side]["kernels_per_s"] * secs)) / (x["base"]["cpu_s"] / (x["base"]["kernels_per_s"] * secs)) for x in runs]
        print(f"{path}: {side}/base CPU per kernel, per pair: " + ", ".join(f"{v:.3f}" for v in ratios) + f"; median {statistics.median(ratios):.3f}")
