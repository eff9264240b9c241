#!/usr/bin/env python3
"""Acceptance of the quota against the driver's own figures (docs/quota.md), on a real GPU.

Each path by which the driver takes memory for itself runs under libgpuslice.so with an 8 GiB quota
(malloc heap limit + kernel mallocs, stack limit + a launch, automatic stack growth, a 12 GiB graph
allocation node, 12 captured cudaMallocAsync of 1 GiB, a module with a 3 GiB global), then the load
test: N processes of one container churning 64 MiB-1 GiB buffers, two SIGKILLed and replaced every
5 s. Also 64 contexts of one process (cuCtxCreate, one launch each), a 12 GiB printf FIFO, and the
program's own 3 x 4 GiB __device__ arrays (quota_globals.cu, lazy loading and EAGER, with a context
created first or, "globals_first", cuInit and then the launch). The driver's
per-process figures are sampled by this (un-hooked) process through NVML every 40 ms (nvidia-smi
every 200 ms where NVML cannot be loaded), the device's used memory by nvidia-smi; a case passes when
no sample of the container's figure exceeds its quota by more than 64 MiB.

  driver_paths.py --lib build/lib/libgpuslice.so --prog build/gpu/driver_paths --out DIR
                  [--globals-prog build/gpu/quota_globals]
                  [--cases heap,stack,...,load8,load32] [--seconds 60] [--device 0]
"""
import argparse
import ctypes
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
PATH_CASES = ["heap", "stack", "growth", "graph", "capture", "module", "contexts", "printf", "globals",
              "globals_eager", "globals_first", "globals_first_eager"]
# Cases run by the globals program (its own image holds the arrays): their loading mode and argument
# ("first": cuInit, then the launch with no context created before it, as mps_backstop.cu does).
GLOBALS_CASES = {"globals": ("LAZY", []), "globals_eager": ("EAGER", []),
                 "globals_first": ("LAZY", ["first"]), "globals_first_eager": ("EAGER", ["first"])}


class Nvml:
    """The driver's per-process figures through NVML, in this process (never preloaded)."""

    class ProcessInfo(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                    ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]

    def __init__(self, device):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit_v2")
        self.handle = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(device, ctypes.byref(self.handle)) != 0:
            raise OSError("nvmlDeviceGetHandleByIndex_v2")
        self.infos = (self.ProcessInfo * 256)()

    def apps(self):
        count = ctypes.c_uint(256)
        if self.lib.nvmlDeviceGetComputeRunningProcesses_v3(self.handle, ctypes.byref(count), self.infos) != 0:
            return {}
        return {self.infos[i].pid: self.infos[i].usedGpuMemory for i in range(count.value)}


def nvml_or_none(device):
    try:
        return Nvml(device)
    except OSError:
        return None
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
    """Un-hooked figures: the container's processes through NVML every 40 ms (nvidia-smi every 200 ms
    without it), the device's used memory from nvidia-smi every 200 ms."""

    def __init__(self, device, pids, env):
        super().__init__(daemon=True)
        self.device, self.pids, self.env = device, pids, env
        self.samples = []
        self.stop = threading.Event()
        self.nvml = nvml_or_none(device)

    def run(self):
        period = 0.04 if self.nvml else 0.2
        used, last_used = None, 0.0
        while not self.stop.is_set():
            t0 = time.monotonic()
            if self.nvml:
                per = self.nvml.apps()
            else:
                per = parse_apps(subprocess.run(["nvidia-smi", "-i", str(self.device),
                                                 "--query-compute-apps=pid,used_memory",
                                                 "--format=csv,noheader,nounits"], capture_output=True,
                                                text=True, env=self.env).stdout)
            if t0 - last_used >= 0.2:
                text = subprocess.run(["nvidia-smi", "-i", str(self.device), "--query-gpu=memory.used",
                                       "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                      env=self.env).stdout.strip()
                used, last_used = (int(text) * MIB if text.isdigit() else None), t0
            self.samples.append({"t": time.time(), "container": container_figure(per, set(self.pids)),
                                 "device_used": used,
                                 "apps": {str(k): v // MIB for k, v in per.items() if k in self.pids}})
            self.stop.wait(max(0.0, period - (time.monotonic() - t0)))


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
    env = hooked_env(args, quota, shared)
    argv = [args.prog, case]
    if case in GLOBALS_CASES:
        mode, extra = GLOBALS_CASES[case]
        argv = [args.globals_prog] + extra
        env["CUDA_MODULE_LOADING"] = mode
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    sampler = Sampler(args.device, [proc.pid], clean_env())
    sampler.start()
    try:
        proc.wait(timeout=60)
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
    ap.add_argument("--globals-prog", default="build/gpu/quota_globals")
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
        print(f"{case:13s} max container {r['max_container_mib']} MiB, quota {r['quota_mib']} MiB, "
              f"over by {r['max_over_mib']:.0f} MiB: {'PASS' if r['pass'] else 'FAIL'}", flush=True)
    with open(os.path.join(args.out, "driver_paths.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0 if all(r["pass"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
