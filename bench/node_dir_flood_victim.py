#!/usr/bin/env python3
"""What a tenant flooding the node directory costs a victim (issue 45: "100,000-entry flood cost <= 10%
CPU and throughput for a victim"), on the simulated driver; no GPU needed.

The victim is tests/e2e's priority_app under libgpuslice.so (LD_PRELOAD) and the simulated libcuda, at
GPUSLICE_PRIORITY=low so that its watcher thread reads the node directory every tick: a trainer that
launches steps of small kernels for --seconds. Beside it, a tenant of another uid (--tenant-uid) runs
a toucher: a process that creates and removes a file in a loop, as fast as it can.

  base   the victim's node directory is empty; the toucher works in another directory (so both sides
         have the same competition for the CPU, and only where the toucher works differs)
  flood  the victim's node directory holds --junk empty files of the tenant, and the toucher works
         in it (the directory changes all the time)

  junk   (--with-static-junk) the --junk files are there, the toucher works in another directory: the
         directory does not change, what the flood costs without the toucher
  indexed (--index) as flood, in a directory of its own whose writer index gpuslice-node index keeps
         (run as root, the operator, for the whole run): the victim reads the index instead of listing

The sides run back to back in pairs, their order alternating (base-flood, flood-base, ...), so
load from other work on the machine falls on both. Per side: the victim's kernels per second and
its CPU seconds (user + system, from wait4). Printed: every run, then per pair the ratio
flood/base, and their medians. Run as root (the tenant's uid is set with setuid).

  bench/node_dir_flood_victim.py --build build-h [--seconds 10] [--pairs 3] [--junk 100000] [--index]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def as_tenant(uid, work):
    """Runs work() in a child process as `uid`; returns its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            work()
        finally:
            os._exit(0)
    return pid


def make_junk(directory, count, uid):
    def work():
        for i in range(count):
            os.close(os.open(os.path.join(directory, f"junk-{i}"), os.O_CREAT | os.O_WRONLY, 0o644))
    pid = as_tenant(uid, work)
    os.waitpid(pid, 0)


def start_toucher(directory, uid):
    def work():
        path = os.path.join(directory, f"touched-{os.getpid()}")
        while True:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
            os.unlink(path)
    return as_tenant(uid, work)


def stop(pid):
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def run_victim(args, node_dir, work_dir, log_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "LD_LIBRARY_PATH": os.path.join(args.build, "mock"),
        "LD_PRELOAD": args.preload,
        "GPUSLICE_SHARED_DIR": os.path.join(work_dir, "shared"),
        "GPUSLICE_NODE_DIR": node_dir,
        "GPUSLICE_MOCK_STATE_DIR": os.path.join(work_dir, "mock"),
        "GPUSLICE_MOCK_DEVICES": "1",
        "GPUSLICE_PRIORITY": "low",
    }
    os.makedirs(env["GPUSLICE_SHARED_DIR"], exist_ok=True)
    os.makedirs(env["GPUSLICE_MOCK_STATE_DIR"], exist_ok=True)
    epoch = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 300_000_000  # after start-up
    argv = [args.app, "--epoch-ns", str(epoch), "--seconds", str(args.seconds), "--kernel-us",
            str(args.kernel_us), "--step", str(args.step)]
    if args.strace:  # a check that the victim lists its node directory, not a measurement
        argv = ["strace", "-f", "-c", "-e", "trace=getdents64", "-o", log_path + ".strace"] + argv
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.write(out)
    buckets = [line for line in out.splitlines() if line.startswith("buckets=")]
    if proc.returncode != 0 or not buckets:
        sys.exit(f"victim failed (status {proc.returncode}): {out.strip()}; see {log_path}")
    kernels = sum(int(n) for n in buckets[0][len("buckets="):].split(",") if n)
    return {"kernels_per_s": kernels / args.seconds, "cpu_s": usage.ru_utime + usage.ru_stime}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build-h")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--junk", type=int, default=100_000)
    p.add_argument("--kernel-us", type=int, default=50)
    p.add_argument("--step", type=int, default=10)
    p.add_argument("--tenant-uid", type=int, default=65534)
    p.add_argument("--with-static-junk", action="store_true",
                   help="a third side: the junk files, the toucher elsewhere")
    p.add_argument("--index", action="store_true",
                   help="a side whose flooded node directory has the writer index gpuslice-node index keeps")
    p.add_argument("--strace", action="store_true",
                   help="count the victims' getdents64 calls (strace -c, beside each log); slows them")
    p.add_argument("--out", default="", help="directory for the victims' logs and results.json")
    args = p.parse_args()
    args.app = os.path.join(args.build, "bin", "priority_app")
    args.preload = os.path.join(args.build, "lib", "libgpuslice.so")
    for path in (args.app, args.preload, os.path.join(args.build, "mock", "libcuda.so.1")):
        if not os.path.exists(path):
            sys.exit(f"{path} missing: cmake --build {args.build} --target priority_app gpuslice_preload "
                     "gpuslice_mock_cuda")
    if os.geteuid() != 0:
        sys.exit("run as root: the tenant is another uid (--tenant-uid)")

    root = tempfile.mkdtemp(prefix="gpuslice-flood-")
    os.chmod(root, 0o755)
    out = args.out or os.path.join(root, "out")
    os.makedirs(out, exist_ok=True)
    dirs = {}
    for name in ("node-empty", "node-flood", "node-indexed", "elsewhere"):
        dirs[name] = os.path.join(root, name)
        os.mkdir(dirs[name])
        os.chmod(dirs[name], 0o1777)  # a node directory the operator made shared
    started = time.monotonic()
    make_junk(dirs["node-flood"], args.junk, args.tenant_uid)
    print(f"{args.junk} junk files made by uid {args.tenant_uid} in {time.monotonic() - started:.1f} s",
          flush=True)

    sides = {"base": (dirs["node-empty"], dirs["elsewhere"]), "flood": (dirs["node-flood"], dirs["node-flood"])}
    if args.with_static_junk:
        sides["junk"] = (dirs["node-flood"], dirs["elsewhere"])
    keeper = None
    if args.index:
        make_junk(dirs["node-indexed"], args.junk, args.tenant_uid)
        keeper = subprocess.Popen([os.path.join(args.build, "bin", "gpuslice-node"), "index", "--node-dir",
                                   dirs["node-indexed"], "--log-level", "warn"])
        for _ in range(100):  # its first listing, then the index
            if os.path.exists(os.path.join(dirs["node-indexed"], ".writers")):
                break
            time.sleep(0.1)
        else:
            sys.exit("gpuslice-node index wrote no index")
        sides["indexed"] = (dirs["node-indexed"], dirs["node-indexed"])
    names = list(sides)
    runs = []
    try:
        for pair in range(args.pairs):
            # base first, then each other side first in turn
            order = names[pair % len(names):] + names[:pair % len(names)] if len(names) > 2 else \
                (("base", "flood") if pair % 2 == 0 else ("flood", "base"))
            result = {}
            for side in order:
                node_dir, touched = sides[side]
                toucher = start_toucher(touched, args.tenant_uid)
                try:
                    work = os.path.join(root, f"victim-{pair}-{side}")
                    result[side] = run_victim(args, node_dir, work, os.path.join(out, f"victim-{pair}-{side}.log"))
                finally:
                    stop(toucher)
                shutil.rmtree(os.path.join(root, f"victim-{pair}-{side}"), ignore_errors=True)
                print(f"pair {pair} {side:5}: {result[side]['kernels_per_s']:9.0f} kernels/s  "
                      f"{result[side]['cpu_s']:6.2f} CPU-s", flush=True)
            result["order"] = ", ".join(order)
            runs.append(result)
    finally:
        if keeper is not None:
            with open(f"/proc/{keeper.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            keeper_cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            keeper.terminate()
            keeper.wait()
            print(f"gpuslice-node index used {keeper_cpu:.2f} CPU-s over the whole run", flush=True)
        shutil.rmtree(dirs["node-flood"], ignore_errors=True)
        shutil.rmtree(dirs["node-indexed"], ignore_errors=True)

    ratios = {}
    for side in names[1:]:
        throughput = [r[side]["kernels_per_s"] / r["base"]["kernels_per_s"] for r in runs]
        cpu = [r[side]["cpu_s"] / r["base"]["cpu_s"] for r in runs]
        extra = [(r[side]["cpu_s"] - r["base"]["cpu_s"]) / args.seconds for r in runs]
        ratios[side] = {"throughput": throughput, "cpu": cpu, "extra_cpu_per_s": extra}
        print(f"\n| pair | order | base kernels/s | {side} kernels/s | ratio | base CPU-s | {side} CPU-s | ratio |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        for i, r in enumerate(runs):
            print(f"| {i} | {r['order']} | {r['base']['kernels_per_s']:.0f} | {r[side]['kernels_per_s']:.0f} | "
                  f"{throughput[i]:.3f} | {r['base']['cpu_s']:.2f} | {r[side]['cpu_s']:.2f} | {cpu[i]:.3f} |")
        print(f"\nmedian {side}/base: throughput {statistics.median(throughput):.3f}, victim CPU "
              f"{statistics.median(cpu):.3f} (+{statistics.median(extra) * 1000:.0f} ms of CPU a second); "
              "the issue's bound: throughput >= 0.90, CPU <= 1.10")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"args": vars(args), "runs": runs, "ratios": ratios}, f, indent=1)
    if args.out:  # else the logs are inside it
        shutil.rmtree(root, ignore_errors=True)
    print(f"logs and results.json in {out}")


if __name__ == "__main__":
    main()
