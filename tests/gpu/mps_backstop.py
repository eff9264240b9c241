#!/usr/bin/env python3
"""MPS's per-client pinned-memory limit as gpuslice sets it, against the driver's own figure (issue 41).

Under an 8 GiB quota, the two ways past the books (tests/gpu/mps_backstop.cu): 64 cuCtxCreate in one
process, and 12 GiB of the program's own __device__ globals. Each runs under libgpuslice.so, once
under an MPS control daemon started for the run (private pipe and log directories; the library sets
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from the quota) and once without MPS (time-sliced: the books alone).
Un-hooked nvidia-smi is sampled every 200 ms; a run passes when the process's figure never exceeds
the quota by more than 64 MiB.

  mps_backstop.py --lib build/lib/libgpuslice.so --prog build/gpu/mps_backstop --out DIR
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
QUOTA = 8 << 30
TOLERANCE = 64 * MIB


def sample(pid):
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].isdigit():
            return int(parts[1]) * MIB
    return 0


def run_case(args, mode, mps_env, log_dir):
    env = dict(os.environ, LD_PRELOAD=os.path.abspath(args.lib), GPUSLICE_MEMORY_LIMIT="8Gi",
               GPUSLICE_SHARED_DIR=tempfile.mkdtemp(prefix="gs-mps-backstop-"), GPUSLICE_LOG_LEVEL="info")
    env.pop("CUDA_MPS_PIPE_DIRECTORY", None)
    env.update(mps_env)
    name = f"{mode}-{'mps' if mps_env else 'timesliced'}"
    with open(os.path.join(log_dir, name + ".log"), "w") as log:
        proc = subprocess.Popen([args.prog, mode, str(args.hold)], env=env, stdout=log, stderr=subprocess.STDOUT)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, sample(proc.pid))
            time.sleep(0.2)
    with open(os.path.join(log_dir, name + ".log")) as f:
        text = f.read()
    ok = 0 < peak <= QUOTA + TOLERANCE  # 0: nvidia-smi never listed it, nothing judged
    return {"case": name, "peak_mib": peak // MIB, "pass": ok, "exit": proc.returncode,
            "output": [l for l in text.splitlines() if "=" in l and not l.startswith("[")][:6],
            "mps_line": next((l for l in text.splitlines() if "MPS client" in l), "")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--prog", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hold", type=int, default=5, help="seconds each program holds what it got")
    args = ap.parse_args()
    log_dir = os.path.join(args.out, "mps_backstop")
    os.makedirs(log_dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="gs-mps-")
    pipe, logs = os.path.join(root, "pipe"), os.path.join(root, "log")
    os.makedirs(pipe)
    os.makedirs(logs)
    mps_env = {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": logs}
    daemon_env = dict(os.environ, **mps_env)
    daemon_env.pop("CUDA_VISIBLE_DEVICES", None)  # every GPU visible to the daemon; clients keep theirs
    results = []
    started = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=daemon_env, capture_output=True, text=True)
    try:
        if started.returncode != 0:
            print(f"nvidia-cuda-mps-control -d failed: {started.stderr.strip()}", flush=True)
        else:
            for mode in ("contexts", "globals"):
                results.append(run_case(args, mode, mps_env, log_dir))
    finally:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=daemon_env, text=True, capture_output=True)
        time.sleep(2)
        for name in os.listdir(logs):
            with open(os.path.join(logs, name)) as src, open(os.path.join(log_dir, "mps-" + name), "w") as dst:
                dst.write(src.read())
    for mode in ("contexts", "globals"):
        results.append(run_case(args, mode, {}, log_dir))
    with open(os.path.join(log_dir, "mps_backstop.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"{'case':<22} {'peak MiB':>9}  verdict (quota 8192 MiB + 64)   program")
    for r in results:
        print(f"{r['case']:<22} {r['peak_mib']:>9}  {('PASS' if r['pass'] else 'FAIL' if r['peak_mib'] else 'UNSEEN by nvidia-smi'):<30} {' '.join(r['output'])}")
        if r["mps_line"]:
            print(f"    {r['mps_line']}")
    return 0 if all(r["pass"] for r in results if "mps" in r["case"]) else 1


if __name__ == "__main__":
    sys.exit(main())
