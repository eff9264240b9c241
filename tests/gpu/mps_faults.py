#!/usr/bin/env python3
"""MPS under gpuslice's manager on a GPU: what a fatal fault in one client does to another.

Starts `gpuslice mps serve` (the manager gpuslice-node --mps runs), runs two MPS clients
(build/gpu/mps_client), ends one with an illegal-address kernel and one with SIGKILL, and records
what the other client saw (an error? how long until?), whether the MPS server changed, whether a new
client can start afterwards, what `gpuslice mps status` showed; kills the control daemon to see the
manager restart it; stops it and checks nothing is left. Prints a verdict table; logs in OUT/mps/.
Run by tests/gpu/mps_faults.sh (which builds what it needs), as root.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import threading
import time


def now_ms():
    return time.monotonic() * 1000.0


class Client:
    """An mps_client process whose output lines are kept with the time they arrived."""

    def __init__(self, args, env, log_path):
        self.lines = []  # (monotonic ms, text)
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            t = now_ms()
            self.lines.append((t, line.strip()))
            self.log.write("%.0f %s\n" % (t, line.strip()))
            self.log.flush()

    def wait_for(self, word, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(word in text for _, text in self.lines):
                return True
            if self.proc.poll() is not None and not self.thread.is_alive():
                return any(word in text for _, text in self.lines)
            time.sleep(0.05)
        return False

    def finish(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.thread.join(timeout=2)
        self.log.close()
        return self.proc.returncode

    def iter_at(self, before_ms=None):
        best = 0
        for t, text in self.lines:
            if before_ms is not None and t > before_ms:
                break
            for word in text.split():
                if word.startswith("iter="):
                    best = int(word[5:])
        return best

    def error_after(self, since_ms):
        for t, text in self.lines:
            if "error=" in text and t >= since_ms:
                name = [w for w in text.split() if w.startswith("error=")][0][6:]
                return name, t - since_ms
        return None


def control(binary, pipe_dir, command):
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe_dir)
    r = subprocess.run([binary], input=command + "\n", env=env, capture_output=True, text=True, timeout=10)
    return r.stdout.strip() if r.returncode == 0 else "error: " + (r.stderr or r.stdout).strip()


def main():
    rows = []
    rc = run(rows)
    print("\n## MPS fault containment (gpuslice mps serve)")
    print("| what | result | detail |")
    print("| --- | --- | --- |")
    for what, result, detail in rows:
        print("| %s | %s | %s |" % (what, result, detail))
    return rc


def run(rows):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="gpu-out")
    ap.add_argument("--gpu", default=os.environ.get("MPS_GPU", "0"))
    ap.add_argument("--dir", default="/run/gpuslice/mps-gputest")
    a = ap.parse_args()
    out = os.path.join(a.out, "mps")
    os.makedirs(out, exist_ok=True)
    gpuslice = os.path.join(a.build, "bin", "gpuslice")
    client_bin = os.path.join(a.build, "gpu", "mps_client")

    def row(what, result, detail=""):
        rows.append((what, result, detail))
        print("%-38s %-10s %s" % (what, result, detail), flush=True)

    binary = shutil.which("nvidia-cuda-mps-control")
    if binary is None:
        row("nvidia-cuda-mps-control on PATH", "MISSING", "nothing else can be measured")
        return 2
    row("nvidia-cuda-mps-control on PATH", "yes", binary)
    pipe = os.path.join(a.dir, "pipe")

    def status(name):
        r = subprocess.run([gpuslice, "mps", "status", "--dir", a.dir], capture_output=True, text=True)
        with open(os.path.join(out, "status_%s.txt" % name), "w") as f:
            f.write(r.stdout + r.stderr)
        j = subprocess.run([gpuslice, "mps", "status", "--dir", a.dir, "--json"], capture_output=True, text=True)
        try:
            return json.loads(j.stdout)
        except ValueError:
            return {}

    def smi(name):
        r = subprocess.run(["nvidia-smi"], capture_output=True, text=True)
        with open(os.path.join(out, "nvidia-smi_%s.txt" % name), "w") as f:
            f.write(r.stdout)

    serve_log = open(os.path.join(out, "serve.log"), "w")
    t0 = now_ms()
    serve = subprocess.Popen([gpuslice, "mps", "serve", "--dir", a.dir, "--interval", "1"], stdout=serve_log,
                             stderr=subprocess.STDOUT, env=dict(os.environ, GPUSLICE_LOG_LEVEL="info"))
    state = {}
    while now_ms() - t0 < 20000:
        state = status("start")
        if state.get("state") in ("running", "refused"):
            break
        time.sleep(0.2)
    if state.get("state") != "running":
        row("manager starts the control daemon", "FAIL", "%s: %s" % (state.get("state"), state.get("reason")))
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=20)
        return 1
    row("manager starts the control daemon", "ok", "running in %.1f s, pid %s" % ((now_ms() - t0) / 1000,
                                                                                  state.get("control_pid")))
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe, CUDA_VISIBLE_DEVICES=a.gpu)
    rc = 0
    try:
        # 1. Illegal address in one client, the other spinning.
        victim = Client([client_bin, "spin", "14"], env, os.path.join(out, "fault_victim.log"))
        if not victim.wait_for(" ok", 30):
            row("a client runs under MPS", "FAIL", "no progress: see fault_victim.log")
            victim.finish(5)
            return 1
        servers_before = control(binary, pipe, "get_server_list")
        row("a client runs under MPS", "ok" if servers_before and "error" not in servers_before else "NO MPS",
            "servers: %s" % (servers_before.replace("\n", " ") or "none"))
        smi("two_clients")
        time.sleep(1.0)
        t_fault = now_ms()
        faulter = Client([client_bin, "fault", "200"], env, os.path.join(out, "fault_faulter.log"))
        frc = faulter.finish(30)
        t_fault_done = now_ms()
        ferr = faulter.error_after(0)
        row("illegal address: the faulting client", "exit %d" % frc, ferr[0] if ferr else "no error reported")
        vrc = victim.finish(25)
        verr = victim.error_after(t_fault)
        before, after = victim.iter_at(t_fault), victim.iter_at()
        if verr:
            row("illegal address: the other client", "ERROR", "%s %.0f ms after the fault started (%d kernels after)" %
                (verr[0], verr[1], after - before))
        else:
            row("illegal address: the other client", "unharmed" if vrc == 0 else "exit %d" % vrc,
                "%d kernels after the fault" % (after - before))
        servers_after = control(binary, pipe, "get_server_list")
        row("illegal address: the MPS server", "same" if servers_after == servers_before else "changed",
            "%s -> %s" % (servers_before.replace("\n", " ") or "none", servers_after.replace("\n", " ") or "none"))
        st = status("after_fault")
        row("illegal address: gpuslice mps status", st.get("state", "?"),
            "restarts %s; %s" % (st.get("restarts"), st.get("reason") or ""))
        t_new = now_ms()
        fresh = Client([client_bin, "spin", "2"], env, os.path.join(out, "fault_newclient.log"))
        ok = fresh.wait_for(" ok", 30)
        nrc = fresh.finish(30)
        nerr = fresh.error_after(0)
        row("illegal address: a new client after it", "ok" if ok and nrc == 0 else "FAIL",
            ("first kernels in %.0f ms" % (now_ms() - t_new) if ok else (nerr[0] if nerr else "exit %d" % nrc)))

        # 2. SIGKILL of one client, the other spinning.
        victim = Client([client_bin, "spin", "10"], env, os.path.join(out, "kill_victim.log"))
        killee = Client([client_bin, "spin", "30"], env, os.path.join(out, "kill_killee.log"))
        if victim.wait_for(" ok", 30) and killee.wait_for(" ok", 30):
            servers_before = control(binary, pipe, "get_server_list")
            time.sleep(1.0)
            t_kill = now_ms()
            killee.proc.send_signal(signal.SIGKILL)
            killee.finish(10)
            vrc = victim.finish(25)
            verr = victim.error_after(t_kill)
            before, after = victim.iter_at(t_kill), victim.iter_at()
            if verr:
                row("SIGKILL: the other client", "ERROR", "%s %.0f ms after the kill (%d kernels after)" %
                    (verr[0], verr[1], after - before))
            else:
                row("SIGKILL: the other client", "unharmed" if vrc == 0 else "exit %d" % vrc,
                    "%d kernels after the kill" % (after - before))
            servers_after = control(binary, pipe, "get_server_list")
            row("SIGKILL: the MPS server", "same" if servers_after == servers_before else "changed",
                "%s -> %s" % (servers_before.replace("\n", " "), servers_after.replace("\n", " ") or "none"))
        else:
            row("SIGKILL: two clients", "FAIL", "they did not both start: see kill_*.log")
            victim.finish(5)
            killee.proc.kill()
            killee.finish(5)

        # 3. The control daemon killed: the manager starts it again.
        st = status("before_control_kill")
        pid = st.get("control_pid")
        if pid:
            t_kill = now_ms()
            os.kill(int(pid), signal.SIGKILL)
            again = {}
            while now_ms() - t_kill < 30000:
                again = status("after_control_kill")
                if again.get("state") == "running" and again.get("control_pid") not in (None, pid):
                    break
                time.sleep(0.1)
            if again.get("state") == "running" and again.get("control_pid") != pid:
                row("control daemon SIGKILL: manager restart", "ok", "running again in %.1f s (restarts %s)" %
                    ((now_ms() - t_kill) / 1000, again.get("restarts")))
                fresh = Client([client_bin, "spin", "2"], env, os.path.join(out, "restart_newclient.log"))
                ok = fresh.wait_for(" ok", 30)
                nrc = fresh.finish(30)
                row("control daemon SIGKILL: a new client", "ok" if ok and nrc == 0 else "FAIL",
                    "see restart_newclient.log")
            else:
                row("control daemon SIGKILL: manager restart", "FAIL", "%s: %s" % (again.get("state"),
                                                                                    again.get("reason")))
                rc = 1
    finally:
        # 4. Stop: the manager quits the daemon; nothing of it stays.
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
        serve_log.close()
        time.sleep(1.0)
        left = []
        if os.path.exists(os.path.join(pipe, "nvidia-cuda-mps-control.pid")):
            left.append("pid file")
        ps = subprocess.run(["ps", "-eo", "pid,stat,comm"], capture_output=True, text=True).stdout
        for line in ps.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[2].startswith("nvidia-cuda-mps") and not fields[1].startswith("Z"):
                left.append(line.strip())
        smi("after_stop")
        row("stop: nothing left behind", "ok" if not left else "LEFT", ", ".join(left))
        status("after_stop")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
