#!/usr/bin/env python3
"""Per-device quotas on a two-GPU machine (nvidia-h200-x2): `0=4Gi,1=8Gi` holds per device for the
CUDA runtime, PyTorch and nvidia-smi.
  python3 tests/gpu/multi_gpu.py --build build --out $OUT
"""
import argparse
import os
import subprocess
import sys
import tempfile

GiB = 1 << 30


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    lib = os.path.abspath(os.path.join(a.build, "lib", "libgpuslice.so"))
    env = dict(os.environ, LD_PRELOAD=lib, GPUSLICE_MEMORY_LIMIT="0=4Gi,1=8Gi",
               GPUSLICE_SHARED_DIR=tempfile.mkdtemp(prefix="gs-multi-"))
    log = open(os.path.join(a.out, "multi_gpu.log"), "w")
    ok_all = True

    def check(name, ok, detail):
        nonlocal ok_all
        ok_all &= ok
        print(f"RESULT {name}: {'PASS' if ok else 'FAIL'} {detail}", flush=True)

    exe = os.path.join(a.build, "gpu", "runtime_quota")
    for dev, quota in [(0, 4 * GiB), (1, 8 * GiB)]:
        p = subprocess.run([exe, str(dev), str(quota)], env=env, capture_output=True, text=True)
        log.write(p.stdout + p.stderr)
        check(f"runtime device {dev} quota {quota // GiB} GiB", "PASS" in p.stdout, p.stdout.strip().splitlines()[-1])
    code = ("import torch\n"
            "for d in range(torch.cuda.device_count()):\n"
            "    f, t = torch.cuda.mem_get_info(d)\n"
            "    print(f'dev{d}_total={t}')\n")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    log.write(p.stdout + p.stderr)
    v = dict(w.split("=") for w in p.stdout.split() if "=" in w)
    check("torch sees 4 GiB on device 0 and 8 GiB on device 1",
          v.get("dev0_total") == str(4 * GiB) and v.get("dev1_total") == str(8 * GiB), p.stdout.strip().replace("\n", " "))
    p = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"], env=env,
                       capture_output=True, text=True)
    log.write(p.stdout + p.stderr)
    rows = [r.split(",") for r in p.stdout.strip().splitlines()]
    totals = {r[0].strip(): r[1].strip() for r in rows if len(r) == 2}
    check("nvidia-smi shows 4096 / 8192 MiB", totals.get("0") == "4096" and totals.get("1") == "8192", str(totals))
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
