#!/usr/bin/env python3
"""Why was the compute limiter's flat-out clock reference above the flat-out clock, and what would a
rule that counts a clock only once the samples after it confirm it have given? (docs/compute-limiter.md,
"Throughput vs occupancy"; no GPU needed.)

Replays the library's watcher (limiter/clock_correction.cpp, ClockReference::observe) over the 100 ms
NVML samples (utilization, SM clock) that bench/gpu/compute_accuracy.py's parent process recorded
beside every run, with the rule the limiter had ("old": a sample counts after 10 flat-out samples in
a row, a quarter per sample) and the candidates, and for every limited phase prints:

  - the reference each rule held over the phase (the median over its samples), against the mean SM clock of its unlimited
    neighbours (f_nb, the flat-out clock the exponent 0.455 was fitted against);
  - the throughput ratio it would have given: ratio x F_old / F_new, F being the charge factor
    (f / R)^0.455 (clamped to [1, 1.25], as clock_factor_permille) averaged over the phase's samples
    weighted by their utilization (the clock while kernels ran), R the reference at that sample. The
    limiter holds the charged time to the limit, so the work done scales as 1 / F.

The replay of the old rule is checked against the reference each limiter printed at exit.

  python3 clock_reference_replay.py [FILE.tgz|compute_accuracy.json ...]   (from the repository root)

Without arguments: the H200 calls of 2026-11-29-b (call 4) and 2026-11-29-c (calls 1-4).
"""
import gzip
import io
import json
import re
import statistics
import sys
import tarfile

EXPONENT = 0.455
FLAT_UTIL = 95
FLAT_SAMPLES = 10
DEFAULT_INPUTS = ["bench/results/gpu-2026-11-29-b/call4/c4.tgz"] + [
    f"bench/results/gpu-2026-11-29-c/call{n}/c{n}.tgz" for n in (1, 2, 3, 4)]
# The tree of each input: before 16655bf (a limit lifted between windows charged the next window
# with the unlimited queue: streams4 0.4-1.1 s stalls) the measured ratios carry that error too.
BEFORE_QUEUE_FIX = ("gpu-2026-11-29-b/call4", "gpu-2026-11-29-c/call1", "gpu-2026-11-29-c/call2",
                    "gpu-2026-11-29-c/call3")


class OldRule:
    """The limiter's rule up to this change: a quarter per sample after 10 flat-out samples."""

    def __init__(self):
        self.ref = 0
        self.run = 0

    def observe(self, util, mhz):
        if util < FLAT_UTIL or util > 100 or mhz == 0:
            self.run = 0
            return
        self.run = min(self.run + 1, FLAT_SAMPLES)
        if self.run < FLAT_SAMPLES:
            return
        self.ref = mhz if self.ref == 0 else (3 * self.ref + mhz + 2) // 4


class ConfirmedRule:
    """A clock counts once it was read FLAT_SAMPLES into a flat-out run and `confirm` more flat-out
    samples followed it; the reference aggregates the last `keep` counted clocks (or a quarter per
    sample: 'ema')."""

    def __init__(self, confirm=2, aggregate="mean", keep=FLAT_SAMPLES):
        self.ref = 0
        self.run = 0
        self.confirm = confirm
        self.aggregate = aggregate
        self.keep = keep
        self.pending = []
        self.counted = []

    def observe(self, util, mhz):
        if util < FLAT_UTIL or util > 100 or mhz == 0:
            self.run = 0
            self.pending = []
            return
        self.run += 1
        self.pending.append(mhz)
        if len(self.pending) <= self.confirm:
            return
        clock = self.pending.pop(0)
        if self.run < FLAT_SAMPLES + self.confirm:
            return
        if self.aggregate == "ema":
            self.ref = clock if self.ref == 0 else (3 * self.ref + clock + 2) // 4
            return
        self.counted = (self.counted + [clock])[-self.keep:]
        c = sorted(self.counted)
        if self.aggregate == "mean":
            self.ref = (sum(c) + len(c) // 2) // len(c)
        elif self.aggregate == "median":
            self.ref = (c[(len(c) - 1) // 2] + c[len(c) // 2] + 1) // 2
        elif self.aggregate == "min":
            self.ref = c[0]


RULES = {
    "old": OldRule,
    "new": lambda: ConfirmedRule(6, "mean"),  # what the limiter does now (kConfirmSamples = 6)
    "confirm 0, mean": lambda: ConfirmedRule(0, "mean"),
    "confirm 2, quarter": lambda: ConfirmedRule(2, "ema"),
    "confirm 2, mean": lambda: ConfirmedRule(2, "mean"),
    "confirm 2, median": lambda: ConfirmedRule(2, "median"),
    "confirm 2, min": lambda: ConfirmedRule(2, "min"),
    "confirm 4, mean": lambda: ConfirmedRule(4, "mean"),
    "confirm 6, median": lambda: ConfirmedRule(6, "median"),
    "confirm 6, mean of 2 s": lambda: ConfirmedRule(6, "mean", 20),
    "confirm 8, mean": lambda: ConfirmedRule(8, "mean"),
}


def factor(mhz, ref):
    if mhz == 0 or ref == 0 or mhz <= ref:
        return 1.0
    return min(1.25, min(2.0, mhz / ref) ** EXPONENT)


def documents(path):
    """(name, compute_accuracy.json contents) of a tarball of a round, or of one json file."""
    if path.endswith((".tgz", ".tar.gz")):
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                if member.name.endswith("/compute_accuracy.json"):
                    yield f"{path}:{member.name}", json.load(tar.extractfile(member))
    else:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            yield path, json.load(f)


def replay(name, data):
    """Per run: the check against the exit line, and a row per limited phase."""
    samples = data.get("nvml", [])
    checks, rows, jumps = [], [], []
    for run in data.get("runs", []):
        phases = run.get("phases")
        if not phases or "t0_monotonic" not in run:
            continue
        t0 = run["t0_monotonic"]
        rules = {k: make() for k, make in RULES.items()}
        trace = []  # (t, util, mhz, {rule: reference after this sample})
        for s in samples:
            t = s[0] - t0
            # The library starts with the process, about a second of warm-up before t0; after the last
            # phase it exits (the samples after it are another run's).
            if t < -2.0 or t > phases[-1]["end"] + 0.3:
                continue
            before = rules["old"].ref
            for rule in rules.values():
                rule.observe(s[1], s[2])
            trace.append((t, s[1], s[2], {k: r.ref for k, r in rules.items()}))
            if before and rules["old"].ref - before > 30:
                jumps.append({"name": name, "workload": run["workload"], "t": t, "util": s[1], "mhz": s[2],
                              "from": before, "to": rules["old"].ref, "index": len(trace) - 1, "trace": trace})
        exit_mhz = [int(m.group(1)) for line in run.get("limiter_stats") or []
                    for m in [re.search(r"flat out (\d+) MHz", line)] if m]
        checks.append((name, run.get("tag", run["workload"]), rules["old"].ref, exit_mhz))
        for i, p in enumerate(phases):
            if p["limit"] >= 100:
                continue
            nb = [q for q in (phases[i - 1] if i > 0 else None, phases[i + 1] if i + 1 < len(phases) else None)
                  if q and q["limit"] >= 100]
            if not nb or p.get("sm_mhz") is None:
                continue
            inside = [x for x in trace if p["from"] <= x[0] <= p["end"]]
            weight = sum(x[1] for x in inside)
            base_util = [q["util"] for q in nb if q.get("util")]
            expected = min(1.0, p["limit"] / min(100.0, statistics.mean(base_util))) if base_util else 0
            two = "2p" in run.get("tag", "") and not run["workload"].endswith("2p")
            row = {"name": name, "workload": run["workload"] + ("2p" if two else ""), "limit": p["limit"],
                   "held_by_limit": expected < 0.999,
                   "ratio": p["it_s"] / (sum(q["it_s"] for q in nb) / len(nb)),
                   "f_nb": sum(q["sm_mhz"] for q in nb) / len(nb), "held": {}, "F": {}}
            for k in RULES:
                row["held"][k] = int(statistics.median(x[3][k] for x in inside)) if inside else 0
                row["F"][k] = sum(x[1] * factor(x[2], x[3][k]) for x in inside) / weight if weight else 1.0
            rows.append(row)
    # What came after each jump of the old reference: the next two samples' utilization.
    for j in jumps:
        after = j.pop("trace")[j["index"] + 1:j.pop("index") + 3]
        j["next_util"] = [x[1] for x in after]
    return checks, rows, jumps


def short(name):
    return name.replace("bench/results/", "").replace("compute-accuracy/", "").replace("/compute_accuracy.json", "")


def main():
    paths = sys.argv[1:] or DEFAULT_INPUTS
    checks, rows, jumps = [], [], []
    for path in paths:
        for name, data in documents(path):
            c, r, j = replay(name, data)
            checks += c
            rows += [x for x in r if x["held_by_limit"]]  # not decode: its GPU time is below every limit
            jumps += j

    print("Replay of the old rule against the reference each limiter printed at exit (MHz):")
    print("| run | replayed | exit line |")
    print("|---|---|---|")
    for name, tag, replayed, exit_mhz in checks:
        print(f"| {short(name)} {tag} | {replayed} | {', '.join(map(str, exit_mhz)) or '-'} |")

    idle_next = [j for j in jumps if any(u < FLAT_UTIL for u in j["next_util"])]
    print(f"\nThe old reference rose by more than 30 MHz in one sample {len(jumps)} times; in {len(idle_next)} of "
          "them one of the next two samples read the device below 95% busy (the sample was the first of an "
          "off part or of the exit, its utilization still NVML's last busy period):")
    print("| input | workload | t s | utilization | SM MHz | reference | next two utilizations |")
    print("|---|---|---|---|---|---|---|")
    for j in jumps:
        print(f"| {short(j['name'])} | {j['workload']} | {j['t']:.2f} | {j['util']} | {j['mhz']} | "
              f"{j['from']} → {j['to']} | {', '.join(map(str, j['next_util']))} |")

    measured = [r for r in rows if r["f_nb"] < 1979 and r["held"]["old"] > 0]
    print(f"\n{len(measured)} limited phases with a measured reference below the maximum clock, of {len(rows)}.")
    print("Reference held over the phase (median of its samples) - f_nb (MHz), and the predicted change of the "
          "ratio (points):")
    print("| rule | mean | rms | min..max | change of the ratio, mean (min..max) |")
    print("|---|---|---|---|---|")
    for k in RULES:
        err = [r["held"][k] - r["f_nb"] for r in measured]
        delta = [100 * r["ratio"] * (r["F"]["old"] / r["F"][k] - 1) for r in measured]
        print(f"| {k} | {statistics.mean(err):+.1f} | {(sum(e * e for e in err) / len(err)) ** 0.5:.1f} | "
              f"{min(err):+.0f}..{max(err):+.0f} | {statistics.mean(delta):+.2f} ({min(delta):+.1f}..{max(delta):+.1f}) |")

    print("\nEvery limited phase (points = 100 x (ratio - limit)); 'new' predicted as ratio x F_old / F_new:")
    print("| input | workload | limit | f_nb MHz | old reference | points | new reference | points predicted |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        new_ratio = r["ratio"] * r["F"]["old"] / r["F"]["new"]
        print(f"| {short(r['name'])} | {r['workload']} | {r['limit']} | {r['f_nb']:.0f} | {r['held']['old']} | "
              f"{100 * (r['ratio'] - r['limit'] / 100):+.1f} | {r['held']['new']} | "
              f"{100 * (new_ratio - r['limit'] / 100):+.1f} |")

    print("\nPer input, shape and limit: mean points off, measured (old rule) -> predicted (new rule):")
    print("| input | tree | workload | 20% | 30% | 40% | 50% | 70% | 80% |")
    print("|---|---|---|---|---|---|---|---|---|")
    groups = {}
    for r in rows:
        call = short(r["name"]).split(":")[0].replace("/c1.tgz", "").replace("/c2.tgz", "").replace(
            "/c3.tgz", "").replace("/c4.tgz", "")
        groups.setdefault((call, r["workload"]), {}).setdefault(r["limit"], []).append(r)
    for (call, workload), by_limit in groups.items():
        tree = "before 16655bf" if call in BEFORE_QUEUE_FIX else "current"
        cells = []
        for limit in (20, 30, 40, 50, 70, 80):
            group = by_limit.get(limit)
            if not group:
                cells.append("")
                continue
            old = statistics.mean(100 * (r["ratio"] - limit / 100) for r in group)
            new = statistics.mean(100 * (r["ratio"] * r["F"]["old"] / r["F"]["new"] - limit / 100) for r in group)
            cells.append(f"{old:+.1f} → {new:+.1f}")
        print(f"| {call} | {tree} | {workload} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
