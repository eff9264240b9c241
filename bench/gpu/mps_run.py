"""An MPS control daemon for one benchmark run: private pipe and log directories exported to the
processes the run starts, quit at the end with what a client could see of it kept beside the logs.
Used by priority_bench.py (--mps) and compute_accuracy.py (--mps)."""
import os
import shutil
import subprocess
import tempfile
import time


def mps_control(mps, command, timeout=30):
    """One command to the run's control daemon; its answer (empty when it did not answer)."""
    try:
        done = subprocess.run(["nvidia-cuda-mps-control"], input=command + "\n", env=mps["env"], text=True,
                              capture_output=True, timeout=timeout)
        return done.stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({e})"


def start_mps(args):
    """An MPS control daemon for this run only: its own pipe and log directories, exported to every
    process the run starts (priority_bench.clean_env keeps CUDA_MPS_*)."""
    root = tempfile.mkdtemp(prefix="gs-mps-")
    pipe, logs = os.path.join(root, "pipe"), os.path.join(root, "log")
    os.makedirs(pipe)
    os.makedirs(logs)
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe, CUDA_MPS_LOG_DIRECTORY=logs)
    # A daemon started with CUDA_VISIBLE_DEVICES=1 renumbers that GPU 0 for its clients, and a client
    # that keeps =1 fails: both name the GPU by UUID instead (NVIDIA's advice), so two runs can use
    # two GPUs side by side, each with its own daemon.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible and all(v.strip().isdigit() for v in visible.split(",")):
        listing = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=60).stdout
        uuids = dict(line.replace(" ", "").split(",", 1) for line in listing.splitlines() if "," in line)
        visible = ",".join(uuids[v.strip()] for v in visible.split(","))
        env["CUDA_VISIBLE_DEVICES"] = visible
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    started = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, capture_output=True, text=True, timeout=60)
    if started.returncode != 0:
        raise RuntimeError(f"nvidia-cuda-mps-control -d failed ({started.returncode}): {started.stderr.strip()}")
    os.environ["CUDA_MPS_PIPE_DIRECTORY"] = pipe
    os.environ["CUDA_MPS_LOG_DIRECTORY"] = logs
    mps = {"root": root, "pipe": pipe, "logs": logs, "env": env, "out": os.path.join(args.out, "mps")}
    print(f"MPS control daemon started (pipe {pipe}); server list: {mps_control(mps, 'get_server_list')!r}",
          flush=True)
    if args.mps_low_threads:
        args.mps_limits_file = os.path.join(root, "limits")
        with open(args.mps_limits_file, "w") as f:
            f.write(f"GPUSLICE_MPS_LOW_THREADS={args.mps_low_threads}\n")
    return mps


def stop_mps(mps):
    """Keeps what a client could see of the daemon (the pipe directory's entries and owners, for the
    library's detection of another user's server), the server list and the logs, then quits it."""
    out_dir = mps["out"]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "pipe-listing.txt"), "w") as f:
        for name in sorted(os.listdir(mps["pipe"])):
            st = os.lstat(os.path.join(mps["pipe"], name))
            f.write(f"{name} mode={oct(st.st_mode)} uid={st.st_uid}\n")
        servers = mps_control(mps, "get_server_list")
        f.write(f"get_server_list: {servers!r}\n")
        for pid in servers.split():
            if pid.isdigit():
                try:
                    st = os.stat(f"/proc/{pid}")
                    with open(f"/proc/{pid}/stat") as s:
                        ppid = s.read().rsplit(")", 1)[1].split()[1]
                    f.write(f"server {pid} uid={st.st_uid} ppid={ppid}\n")
                except OSError as e:
                    f.write(f"server {pid}: {e}\n")
    print(f"MPS control daemon quit: {mps_control(mps, 'quit')!r}", flush=True)
    time.sleep(2)
    for name in os.listdir(mps["logs"]):
        shutil.copy(os.path.join(mps["logs"], name), out_dir)
    for key in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
        os.environ.pop(key, None)
    shutil.rmtree(mps["root"], ignore_errors=True)
