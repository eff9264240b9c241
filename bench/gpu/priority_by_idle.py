#!/usr/bin/env python3
"""What a request of the priority benchmark's server found in front of it, by how long the server
had been idle before it.

  python3 bench/gpu/priority_by_idle.py CALL/priority_bench.json[.gz] ...

A lower-priority tenant's work cannot be withdrawn once launched: a request that arrives while the
server is idle meets what the trainer had queued then (the in-flight bound, grown with the
server's idle time by the ramp) and the kernel running then. A request that queued behind the one
before it meets almost nothing, since the trainer was held. So the server's mean service time
(the time inside a request) is split by the server's idle time before each request: "queued" (it
started more than 0.5 ms after its arrival: the previous request was still running), else the
time since the previous request ended, in buckets of 0.1-2, 2-5, 5-10, 10-20, 20-40 and over 40 ms.

Each run with a server beside another process is compared with the same server without it: in a
--paired run, its running phases with its paused ones (phases split as priority_bench.py does);
otherwise with the run "load<L>-server-alone" of the same call (and round). Printed per run and
bucket: the requests counted on each side, both mean service times and the difference, the time
the request found in front of it. The bucket with the ramp fully grown shows the whole bound plus a
kernel; the short idle times show the kernel alone, a floor that depends on the trainer's longest
kernels rather than on the bound.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import priority_bench as bench  # noqa: E402

# A request that started this much after its arrival waited behind the one before it.
QUEUED_S = 0.0005
# Upper edges of the idle buckets, in seconds; the last bucket is open.
EDGES_S = (0.002, 0.005, 0.010, 0.020, 0.040)
# Idle times below this are the previous request's readback, not idleness; counted as queued.
MIN_IDLE_S = 0.0001
# Runs are "load<L>-<configuration>[-r<round>]", paired ones "load<L>-paired-<configuration>[-r<round>]".
TAG = re.compile(r"^load(\d+)-(.+?)(-r\d+)?$")


def bucket_names():
    names = ["queued", f"idle {MIN_IDLE_S * 1e3:g}-{EDGES_S[0] * 1e3:g} ms"]
    names += [f"idle {lo * 1e3:g}-{hi * 1e3:g} ms" for lo, hi in zip(EDGES_S, EDGES_S[1:])]
    return names + [f"idle over {EDGES_S[-1] * 1e3:g} ms"]


def bucket_of(arrival, start, previous_end):
    """The bucket index of a request (0: queued), or None for the first request of a run."""
    if previous_end is None:
        return None
    idle = start - previous_end
    if start - arrival > QUEUED_S or idle < MIN_IDLE_S:
        return 0
    for i, edge in enumerate(EDGES_S):
        if idle < edge:
            return i + 1
    return len(EDGES_S) + 1


def by_idle(timeline, keep=lambda arrival: True):
    """{bucket: [service seconds]} of the requests (arrival, start, end) that keep(arrival) admits;
    the idle time before each comes from the request served before it, kept or not."""
    out = {}
    previous_end = None
    for arrival, start, end in sorted(timeline, key=lambda r: r[1]):
        b = bucket_of(arrival, start, previous_end)
        previous_end = end
        if b is not None and keep(arrival):
            out.setdefault(b, []).append(end - start)
    return out


def comparisons(data):
    """[(run tag, {bucket: [service]} without the other process, {bucket: [service]} with it)] for
    every run of a priority_bench.json whose server ran beside another process."""
    args = data.get("args", {})
    runs = data.get("runs", {})
    out = []
    for tag, results in runs.items():
        match = TAG.match(tag)
        server = results.get("server") if isinstance(results, dict) else None
        if not match or not server or not server.get("timeline_s"):
            continue
        config = match.group(2)
        if config.startswith("paired-"):
            count = bench.phase_count(server["seconds"], args["phase_seconds"])

            def parity(want):
                def keep(arrival):
                    k = bench.phase_of(arrival, count, args["phase_seconds"], args["settle_seconds"])
                    return k is not None and k % 2 == want
                return keep

            out.append((tag, by_idle(server["timeline_s"], parity(0)), by_idle(server["timeline_s"], parity(1))))
        elif config != "server-alone" and len(results) > 1 and "trainer" in results:
            alone = runs.get(f"load{match.group(1)}-server-alone{match.group(3) or ''}")
            if alone and alone.get("server", {}).get("timeline_s"):
                out.append((tag, by_idle(alone["server"]["timeline_s"]), by_idle(server["timeline_s"])))
    return out


def report(rows):
    names = bucket_names()
    lines = []
    for tag, without, beside in rows:
        lines.append(f"{tag}: mean service ms without the other process / beside it (requests), difference")
        for b, name in enumerate(names):
            if without.get(b) and beside.get(b):
                a = sum(without[b]) / len(without[b]) * 1e3
                c = sum(beside[b]) / len(beside[b]) * 1e3
                lines.append(f"  {name:18s} {a:7.3f} ({len(without[b]):5d}) / {c:7.3f} ({len(beside[b]):5d})  {c - a:+.3f} ms")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="priority_bench.json or .json.gz")
    args = ap.parse_args()
    lines = []
    for path in args.files:
        try:
            data = bench.read_results(path)
        except (OSError, ValueError, EOFError) as e:
            print(f"priority_by_idle: {path}: {e}", file=sys.stderr)
            return 2
        try:
            rows = comparisons(data)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            print(f"priority_by_idle: {path}: a run without what priority_bench.py writes ({e!r})", file=sys.stderr)
            return 2
        if rows:
            lines.append(path)
            lines += report(rows)
    if not lines:
        print("priority_by_idle: no run with a server beside another process in these files", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
