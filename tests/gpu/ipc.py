#!/usr/bin/env python3
"""Memory shared between two processes under gpuslice on a real GPU (about 20 s).

An exporter (quota 6Gi) allocates 2 GiB with cudaMalloc and exports it with cudaIpcGetMemHandle,
and 2 GiB with cuMemCreate exported as a POSIX file descriptor; an importer opens both, reads and
writes them, closes them. Two rounds: the importer in another container (its own state directory,
quota 1Gi: smaller than what it opens), then in the same container (vLLM's custom all-reduce: one
quota, where charging the importer would count the buffers twice). Expected (docs/quota.md,
"Shared and imported memory"): the exporter is charged once, the importer nothing; closing or
releasing in the importer gives back nothing of its own.

While the importer holds each buffer, the script asks nvidia-smi (no preload) what the driver
reports for the importer's process, and `gpuslice status` what each container's books hold: if the
driver counted imported memory in the importer's per-process figure, gpuslice's footprint
reconciliation would try to charge it, and these lines show it.

  python3 tests/gpu/ipc.py --lib build/lib/libgpuslice.so [--cli build/bin/gpuslice] [--out DIR]
Builds build/gpu/ipc from tests/gpu/ipc.cu with nvcc when missing. Exit status 0 when every check
passed; each check prints one PASS/FAIL line.
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def build(binary):
    if os.path.exists(binary):
        return
    os.makedirs(os.path.dirname(binary), exist_ok=True)
    subprocess.run(["nvcc", "-O2", "-std=c++17", "-arch=sm_90", "-o", binary, os.path.join(HERE, "ipc.cu"), "-lcuda"], check=True)


def nvidia_smi_used(pid):
    """MiB the driver reports for `pid` (compute apps), or None."""
    try:
        text = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            return int(parts[1]) if parts[1].isdigit() else None
    return None


def status_used(cli, shared_dir):
    if not cli or not os.path.exists(cli):
        return "n/a"
    r = subprocess.run([cli, "status", "--json", "--shared-dir", shared_dir], capture_output=True, text=True,
                       timeout=10)
    import json
    try:
        doc = json.loads(r.stdout)
        containers = doc.get("containers", [doc])
        return ",".join(str(d.get("used_bytes")) for c in containers for d in c.get("devices", []))
    except ValueError:
        return "unreadable: " + r.stderr.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libgpuslice.so")
    ap.add_argument("--cli", default="build/bin/gpuslice")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "gpu", "ipc"))
    ap.add_argument("--out", default=".")
    ap.add_argument("--bytes", type=int, default=2 << 30)
    ap.add_argument("--modes", default="other,same", help="importer in another container, in the same one")
    a = ap.parse_args()
    build(a.binary)
    log = open(os.path.join(a.out, "ipc.log"), "w")
    ok = True
    for mode in a.modes.split(","):
        ok = run_round(a, mode, log) and ok
    print(f"{'PASS' if ok else 'FAIL'} ipc overall", flush=True)
    return 0 if ok else 1


def run_round(a, mode, log):
    exporter_dir = tempfile.mkdtemp(prefix="gs-ipc-exporter-")
    importer_dir = exporter_dir if mode == "same" else tempfile.mkdtemp(prefix="gs-ipc-importer-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_") and k != "LD_PRELOAD"}
    env.update({"LD_PRELOAD": os.path.abspath(a.lib), "GPUSLICE_MEMORY_LIMIT": "6Gi",
                "GPUSLICE_SHARED_DIR": exporter_dir, "IMPORTER_MEMORY_LIMIT": "6Gi" if mode == "same" else "1Gi",
                "IMPORTER_SHARED_DIR": importer_dir})
    if mode == "same":
        env["IMPORTER_SAME_CONTAINER"] = "1"
    header = f"== importer in {'the same' if mode == 'same' else 'another'} container"
    print(header, flush=True)
    log.write(header + "\n")
    p = subprocess.Popen([a.binary, "export", str(a.bytes)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    failures = 0
    for line in p.stdout:
        line = line.rstrip("\n")
        print(line, flush=True)
        log.write(line + "\n")
        failures += line.startswith("FAIL")
        if line.startswith("HOLDING_"):
            what = line.split()[0][len("HOLDING_"):].lower()
            pid = int(line.split("pid=")[1])
            mib = nvidia_smi_used(pid)
            extra = (f"driver_reports {what} importer_pid={pid} used_mib={mib} "
                     f"ledger_used exporter={status_used(a.cli, exporter_dir)} importer={status_used(a.cli, importer_dir)}")
            print(extra, flush=True)
            log.write(extra + "\n")
            if mib is not None:
                counted = mib * (1 << 20) >= a.bytes
                note = (f"INFO {what}: the driver {'counts' if counted else 'does not count'} the imported buffer "
                        f"in the importer's per-process memory")
                print(note, flush=True)
                log.write(note + "\n")
    rc = p.wait(timeout=60)
    ok = rc == 0 and failures == 0
    print(f"{'PASS' if ok else 'FAIL'} ipc {mode} container (exit {rc}, {failures} failed checks)", flush=True)
    return ok


if __name__ == "__main__":
    sys.exit(main())
