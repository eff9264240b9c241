#!/usr/bin/env python3
"""Acceptance of the quota against the driver's own figures (docs/quota.md), on a real GPU.

Each path by which the driver takes memory for itself runs under libgpuslice.so with an 8 GiB quota
(malloc heap limit + kernel mallocs, stack limit + a launch, automatic stack growth, a 12 GiB graph
allocation node, 12 captured cudaMallocAsync of 1 GiB, a module with a 3 GiB global), then the load
test: N processes of one container churning 64 MiB-1 GiB buffers, two SIGKILLed and replaced every
5 s. Un-hooked nvidia-smi is sampled every 200 ms (per process and device-wide); a case passes when
no sample of the container's figure exceeds its quota by more than 64 MiB.

  driver_paths.py --lib build/lib/libgpuslice.so --prog build/gpu/driver_paths --out DIR
                  [--cases heap,stack,...,load8,load32] [--seconds 60] [--device 0]
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

MIB = 1 << 20
GIB = 1 << 30
TOLERANCE = 64 * MIB
PATH_CASES = ["heap", "stack", "growth", "graph", "capture", "module"]
LOAD_CASES = {"load8": (8, 24 * GIB), "load32": (32, 40 * GIB)}


def parse_apps(text):
    """nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -> {pid: bytes}."""
    apps = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        try:
            apps[int(parts[0])] = int(float(parts[1])) * MIB
        except ValueError:
            continue
    return apps


def container_figure(apps, pids):
    """The driver's figure for the container: its processes' per-process figures, summed."""
    return sum(v for p, v in apps.items() if p in pids)


def verdict(max_container, quota):
    over = max_container - quota
    return {"max_container_mib": max_container // MIB, "quota_mib": quota // MIB,
            "max_over_mib": over / MIB, "pass": over <= TOLERANCE}


class Sampler(threading.Thread):
    """Un-hooked nvidia-smi every 200 ms: the container's processes and the device's used memory."""

    def __init__(self, device, pids, env):
        super().__init__(daemon=True)
        self.device, self.pids, self.env = device, pids, env
        self.samples = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            apps = subprocess.run(["nvidia-smi", "-i", str(self.device), "--query-compute-apps=pid,used_memory",
                                   "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                  env=self.env).stdout
            used = subprocess.run(["nvidia-smi", "-i", str(self.device), "--query-gpu=memory.used",
                                   "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                  env=self.env).stdout.strip()
            per = parse_apps(apps)
            self.samples.append({"t": time.time(), "container": container_figure(per, set(self.pids)),
                                 "device_used": int(used) * MIB if used.isdigit() else None,
                                 "apps": {str(k): v // MIB for k, v in per.items() if k in self.pids}})
            self.stop.wait(max(0.0, 0.2 - (time.monotonic() - t0)))


def clean_env():
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "GPUSLICE_MEMORY_LIMIT", "GPUSLICE_SHARED_DIR"):
        env.pop(k, None)
    return env


def hooked_env(args, quota, shared):
    env = clean_env()
    env.update({"LD_PRELOAD": os.path.abspath(args.lib), "GPUSLICE_MEMORY_LIMIT": str(quota),
                "GPUSLICE_SHARED_DIR": shared, "GPUSLICE_LOG_LEVEL": "info",
                "CUDA_VISIBLE_DEVICES": str(args.device)})
    return env


def run_path(args, case, out):
    quota = 8 * GIB
    shared = tempfile.mkdtemp(prefix="gpuslice-paths-")
    log = open(os.path.join(out, f"path_{case}.log"), "w")
    proc = subprocess.Popen([args.prog, case], env=hooked_env(args, quota, shared), stdout=log,
                            stderr=subprocess.STDOUT)
    sampler = Sampler(args.device, [proc.pid], clean_env())
    sampler.start()
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    sampler.stop.set()
    sampler.join()
    log.close()
    result = verdict(max([s["container"] for s in sampler.samples] or [0]), quota)
    result.update({"case": case, "exit": proc.returncode, "samples": len(sampler.samples),
                   "answers": open(os.path.join(out, f"path_{case}.log")).read().strip().splitlines()[-12:]})
    with open(os.path.join(out, f"path_{case}.json"), "w") as f:
        json.dump({"result": result, "samples": sampler.samples}, f)
    return result


def run_load(args, case, out):
    count, quota = LOAD_CASES[case]
    shared = tempfile.mkdtemp(prefix="gpuslice-load-")
    env = hooked_env(args, quota, shared)
    baseline = subprocess.run(["nvidia-smi", "-i", str(args.device), "--query-gpu=memory.used",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True,
                              env=clean_env()).stdout.strip()
    logs = open(os.path.join(out, f"{case}.log"), "w")
    rng = random.Random(count)
    procs, pids = [], []
    end = time.monotonic() + args.seconds

    def start(seed):
        remaining = max(1, int(end - time.monotonic()))
        p = subprocess.Popen([args.prog, "churn", str(remaining), str(seed)], env=env, stdout=logs,
                             stderr=subprocess.STDOUT)
        pids.append(p.pid)
        return p

    for i in range(count):
        procs.append(start(i))
    sampler = Sampler(args.device, pids, clean_env())
    sampler.start()
    kills, seed = 0, count
    next_kill = time.monotonic() + 5
    while time.monotonic() < end:
        time.sleep(0.1)
        if time.monotonic() >= next_kill and time.monotonic() < end - 2:
            next_kill += 5
            for victim in rng.sample([p for p in procs if p.poll() is None], 2):
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                procs.remove(victim)
                procs.append(start(seed))
                seed += 1
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
    sampler.stop.set()
    sampler.join()
    logs.close()
    result = verdict(max([s["container"] for s in sampler.samples] or [0]), quota)
    base = int(baseline) * MIB if baseline.isdigit() else 0
    device = [s["device_used"] - base for s in sampler.samples if s["device_used"] is not None]
    result.update({"case": case, "processes": count, "kills": kills, "samples": len(sampler.samples),
                   "max_device_used_over_baseline_mib": (max(device) // MIB) if device else None,
                   "samples_over_quota": sum(1 for s in sampler.samples if s["container"] > quota)})
    with open(os.path.join(out, f"{case}.json"), "w") as f:
        json.dump({"result": result, "samples": sampler.samples}, f)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--prog", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default=",".join(PATH_CASES + list(LOAD_CASES)))
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in PATH_CASES and c not in LOAD_CASES]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    results = []
    for case in cases:
        r = run_path(args, case, args.out) if case in PATH_CASES else run_load(args, case, args.out)
        results.append(r)
        print(f"{case:8s} max container {r['max_container_mib']} MiB, quota {r['quota_mib']} MiB, "
              f"over by {r['max_over_mib']:.0f} MiB: {'PASS' if r['pass'] else 'FAIL'}", flush=True)
    with open(os.path.join(args.out, "driver_paths.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0 if all(r["pass"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
