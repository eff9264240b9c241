#!/usr/bin/env python3
"""Priority sharing on a real GPU: a latency-critical server beside a best-effort trainer.

  python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so [--out DIR]
      [--seconds 25] [--loads 30,60] [--launcher preload|cli] [--cli build/bin/gpuslice]

One call measures, in the same run, five configurations per load:
  server alone        the server process alone (no gpuslice)
  trainer alone       the trainer process alone (no gpuslice; measured once, shared by the loads)
  un-managed          both at once, no gpuslice
  limits 50/50        both under gpuslice with GPUSLICE_COMPUTE_LIMIT=50 each
  priorities          both under gpuslice, server GPUSLICE_PRIORITY=high, trainer low
and, once, the trainer (low) beside a high-priority container that is alive on the GPU but never
works: what the in-flight bound and the record re-reads cost a best-effort tenant when the higher
priority is idle (work conservation).
Every gpuslice process is its own container (its own GPUSLICE_SHARED_DIR); the two containers of a
pair share one GPUSLICE_NODE_DIR, so they see each other's priority.

The server is a GPT-2-sized model (GPT2Config defaults: 12 layers, 768 wide, built from the config,
no download) answering short requests (--server-batch x --server-tokens tokens, one forward pass,
the next token read back to the host) with Poisson arrivals. Each request replays the forward pass
captured once as a CUDA graph, as inference servers run short requests: the GPU is busy for the
request's whole time, so a load is also the GPU's busy share alone (32 x 128 tokens take about 7 ms
on an H100). --server-eager launches it kernel by kernel instead (8 x 128 tokens by default), the
server of every measurement before the fifth round in bench/results/priority-rounds.md: host-bound,
its GPU busy about a quarter of each request's time, and its service time varies with the host's
speed. Load L means arrivals at L / (service time alone), the service time measured by a
calibration process first, on requests with Poisson arrivals at 30% as in the measured runs (a
request after a pause pays the host's and the device's wake-up; back-to-back requests are faster
and would understate the load). Each row shows
the load the server really had (its share of time inside requests, "server busy %"). Latency is
from a request's arrival to its answer on the host, queueing included; the server's garbage
collector is off in the measured window, in every configuration. The trainer runs GPT-2
training steps (bf16 autocast, AdamW) of --trainer-batch x --trainer-tokens tokens and reads its loss
every step (every N with --trainer-sync-every N). Both processes build and warm
up their model, then start together; each measures --seconds.

Reported per load: server p50/p99 latency ÷ alone and trainer throughput ÷ alone for each
configuration, the device utilization (NVML, sampled by this parent), and whether the priority
configuration meets the goal (server p99 <= 1.10x alone; trainer >= 0.5x alone at 30% load,
>= 0.25x at 60%). For each configuration with the server it also prints the worst second (the
1 s window whose requests waited longest) beside the whole run: the requests' service time, the SM
clock, the host's stolen CPU time and, with a trainer, its steps and the floor slices it got, to
tell a slower server from queueing and from the trainer's work. Outputs under --out (default $OUT,
else ./priority-out): priority_bench.json (every run: each request's arrival, start and end, the
trainer's step times and floor slices, NVML and /proc/stat samples), priority_bench.md (the table),
logs/<run>.log. --repeat N measures each load N times over (the server alone, then each
configuration, round after round) and pools each configuration's rounds in the table, so a slow
stretch of the machine falls on all of them. --control measures the server alone once more at the
end of each round ("server alone again"): its ratios to the first are those of two runs of the same
thing, the noise the other ratios carry. Each row also gives the mean service time (time inside a
request) and its ratio to alone: what sharing costs each request, before queueing multiplies it in
the tail. Default total: about 8 minutes on an H100.

--paired replaces the five configurations with a paired design: per load, one server and one
trainer run together for --seconds, the trainer paused in every other phase (--phase-seconds, the
first --settle-seconds of each phase left out), and the server's phases with the trainer are
compared with its own phases without it, within one process: two server processes differ from
each other more than the goal's 10% (see --control). Both under priorities (and each --variant),
and un-managed unless --only-priorities. Each running phase repeats the arrivals of the paused
phase before it, shifted by one phase, so both meet the same bursts. The goal is then judged on
the running phases against the paused ones, with 95% intervals from resampling whole pairs of
phases (a slow stretch of the host slows a whole phase): PASS or FAIL where the interval lies on
one side of the goal, UNDECIDED where it spans it. --alone-seconds shortens the trainer's
baselines (a throughput needs less time than a tail).

--conservation measures what the in-flight bound costs the trainer within one trainer process:
beside an idle container that `gpuslice set --priority` (--cli) switches between high and low
every phase, the trainer's steps in the bounded phases ÷ its steps in the unbounded ones, with a
95% interval; once with the defaults and once per --variant. bench/gpu/priority_pool.py combines
the paired runs of several calls.

--mps runs every configuration under an MPS control daemon started for the run with a private
pipe and log directory (nvidia-cuda-mps-control -d, CUDA_MPS_PIPE_DIRECTORY and
CUDA_MPS_LOG_DIRECTORY set for every process) and stopped after it (echo quit |
nvidia-cuda-mps-control); its logs, the pipe directory's listing and the server list go to
<out>/mps/. gpuslice then sets each client's MPS variables (docs/priority.md#mps-or-time-slices);
--mps-low-threads P also gives the managed processes a limits file with GPUSLICE_MPS_LOW_THREADS=P
(the low trainer's active-thread percentage).
"""
import argparse
import gc
import gzip
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from mps_run import mps_control, start_mps, stop_mps  # noqa: F401 (re-exported)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# Variables that would change what a run measures if inherited from the caller's environment.
CONTROLLED_PREFIXES = ("GPUSLICE_", "CUDA_DEVICE_MEMORY_", "TENSOR_FUSION_", "HCS_", "VCUDA_")
CONTROLLED_NAMES = ("LD_PRELOAD", "CUDA_DEVICE_SM_LIMIT", "PFLOG", "LIBCUDA_LOG_LEVEL")

GOAL_P99 = 1.10
GOAL_TRAINER = {30: 0.5, 60: 0.25}
def shifted_cpus(cpus, offset):
    """A comma-separated CPU list with every CPU moved up by `offset` (--cpu-offset)."""
    return ",".join(str(int(c) + offset) for c in cpus.split(",")) if offset else cpus


SERVER_CPUS = "2,3"
TRAINER_CPUS = "4,5,6,7"
IDLE_CPUS = "8"
# Load of the calibration's second part (Poisson arrivals, as in the runs).
CALIBRATE_LOAD = 0.3
# The gate's debug line for each floor slice (GPUSLICE_LOG_LEVEL=debug), its clock in microseconds.
FLOOR_SLICE = re.compile(r"priority gate: floor slice at (\d+) us")
HELD = re.compile(r"priority gate: held at (\d+) us")
RELEASED = re.compile(r"priority gate: released at (\d+) us(?:, queued work done (\d+) us|, (queued work still running))?")


# ---------------------------------------------------------------------------------------------
# Workers: run inside the measured processes.
# ---------------------------------------------------------------------------------------------

def pin(cpus):
    if not cpus:
        return
    wanted = set()
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        wanted.update(range(int(lo), int(hi or lo) + 1))
    usable = wanted & os.sched_getaffinity(0)
    if usable:
        os.sched_setaffinity(0, usable)


def gpt2(torch):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config()  # GPT-2 small: 12 layers, 12 heads, 768 wide, 1024 positions
    config.use_cache = False
    return config, GPT2LMHeadModel(config)


def build_server(args):
    import torch

    config, model = gpt2(torch)
    model = model.to("cuda", dtype=torch.bfloat16).eval()
    ids = torch.randint(0, config.vocab_size, (args.server_batch, args.server_tokens), device="cuda")

    def forward():
        return model(ids).logits[:, -1].argmax(-1)

    if args.server_eager:
        def request():
            with torch.inference_mode():
                return forward().cpu()  # the answer on the host: waits for the work

        return request
    # The forward pass captured once into a CUDA graph and replayed per request, as inference servers
    # do for short requests: a request is one launch, and its time is the device's rather than the
    # host's launching of some 400 kernels (--server-eager).
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                forward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            answer = forward()

    def replay():
        graph.replay()
        return answer.cpu()

    return replay


def build_trainer(args):
    import torch

    config, model = gpt2(torch)
    model = model.to("cuda").train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.randint(0, config.vocab_size, (args.trainer_batch, args.trainer_tokens), device="cuda")

    def step(read_loss=True):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        # Reading the loss waits for the step, and the host launches nothing until the GPU has
        # finished it; --trainer-sync-every reads it less often. (At 8 x 512 tokens on an H100 the
        # host's launching is the limit, not the read: 76% busy alone either way.)
        return loss.item() if read_loss else None

    return step


def signal_ready_and_wait(args):
    """Tells the parent this process is warm, then waits for the common start time."""
    with open(args.ready_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(args.ready_file + ".tmp", args.ready_file)
    deadline = time.monotonic() + args.go_timeout
    while not os.path.exists(args.go_file):
        if time.monotonic() > deadline:
            raise SystemExit(f"no start signal within {args.go_timeout} s")
        time.sleep(0.005)
    with open(args.go_file) as f:
        start = float(f.read())
    while time.monotonic() < start:
        time.sleep(min(0.005, max(0.0, start - time.monotonic())))
    return start


def mirrored(arrivals, start, end, phase):
    """--paired: the arrivals of each even phase, and again one phase later in place of the odd
    phase's own (common random numbers): both phases of a pair meet the same bursts, so the tail's
    difference is the trainer's and not the arrangement of the arrivals."""
    even = [a for a in arrivals if int((a - start) // phase) % 2 == 0]
    return sorted(even + [a + phase for a in even if a + phase < end])


def sleep_until(t):
    while True:
        left = t - time.monotonic()
        if left <= 0:
            return
        time.sleep(left if left > 0.002 else left / 2)


def train_until(end, step, every, paused, synchronize, clock=time.monotonic, nap=time.sleep):
    """The trainer's loop: steps until `end`, reading the loss every `every` steps (step(read_loss)
    returns it, else None), idle while paused() (--paired: the parent's phases without the
    trainer). Returns the times the steps were done: those launched since the last read are done
    when it returns, all at once; a pause first waits for them (synchronize)."""
    done = []
    pending = 0
    while clock() < end:
        if paused():
            if pending:
                synchronize()
                done.extend([clock()] * pending)
                pending = 0
            nap(0.002)
            continue
        pending += 1
        if step(pending >= every) is not None:
            done.extend([clock()] * pending)
            pending = 0
    return done


def worker(args):
    pin(args.cpus)
    import torch

    torch.set_num_threads(2)
    torch.cuda.init()
    report = {"role": args.worker, "priority": os.environ.get("GPUSLICE_PRIORITY", ""),
              "compute_limit": os.environ.get("GPUSLICE_COMPUTE_LIMIT", ""),
              "preloaded": os.environ.get("LD_PRELOAD", "")}
    if args.worker in ("server", "calibrate"):
        request = build_server(args)
        t_end = time.monotonic() + args.warmup
        while time.monotonic() < t_end:
            request()
        if args.worker == "calibrate":
            # Back to back first (a first estimate), then Poisson arrivals at CALIBRATE_LOAD of it, as in
            # the measured runs: a request after a pause pays the host's and the device's wake-up, so
            # the service time that sets the rate is the one measured that way, and a load is the
            # share of time the server is busy alone.
            hot = []
            for _ in range(args.calibrate_requests):
                t0 = time.monotonic()
                request()
                hot.append(time.monotonic() - t0)
            rate = CALIBRATE_LOAD / (sum(hot) / len(hot))
            rng = random.Random(args.seed + 1)
            served = []
            t = time.monotonic()
            for _ in range(args.calibrate_requests):
                t += rng.expovariate(rate)
                sleep_until(t)
                t0 = time.monotonic()
                request()
                served.append(time.monotonic() - t0)
                t = max(t, t0)
            served.sort()
            report.update(service_mean_s=sum(served) / len(served), service_p50_s=served[len(served) // 2],
                          service_hot_mean_s=sum(hot) / len(hot), requests=len(served))
        else:
            rng = random.Random(args.seed)
            # No collector pauses inside the measured window, in every configuration alike (collected
            # before the start: a full collection takes about 200 ms here).
            gc.collect()
            gc.disable()
            start = signal_ready_and_wait(args)
            end = start + args.seconds
            hard_end = end + args.drain_seconds
            arrivals, latencies, timeline = [], [], []
            t = start + rng.expovariate(args.rate)
            while t < end:
                arrivals.append(t)
                t += rng.expovariate(args.rate)
            if args.mirror_phase:
                arrivals = mirrored(arrivals, start, end, args.mirror_phase)
            served = 0
            busy = 0.0
            for arrival in arrivals:
                if time.monotonic() > hard_end:
                    break
                sleep_until(arrival)
                began = time.monotonic()
                request()
                done = time.monotonic()
                latencies.append(done - arrival)
                # Arrival, start and end of each request from the start: a tail episode shows whether
                # the requests themselves got slower or only queued (the parent's worst-second line).
                timeline.append((round(arrival - start, 6), round(began - start, 6), round(done - start, 6)))
                busy += done - began
                served += 1
            gc.enable()
            now = time.monotonic()
            # Requests still waiting when the drain time ran out count with their waiting time so
            # far (a lower bound): an overloaded configuration shows up in p99 instead of vanishing.
            unserved = [now - a for a in arrivals[served:]]
            report.update(start=start, seconds=args.seconds, rate=args.rate, arrivals=len(arrivals),
                          served=served, unserved=len(unserved), latencies_s=latencies + unserved,
                          busy_s=busy, timeline_s=timeline)
    elif args.worker == "idle":
        # Alive on the GPU (a context, one kernel), then nothing: a higher priority that never works.
        x = torch.ones(1024, device="cuda")
        (x * 2).sum().item()
        start = signal_ready_and_wait(args)
        sleep_until(start + args.seconds)
        report.update(start=start, seconds=args.seconds)
    else:
        step = build_trainer(args)
        t_end = time.monotonic() + args.warmup
        while time.monotonic() < t_end:
            step()
        start = signal_ready_and_wait(args)
        end = start + args.seconds
        done = train_until(end, step, args.trainer_sync_every,
                           lambda: bool(args.pause_file) and os.path.exists(args.pause_file), torch.cuda.synchronize)
        in_window = [t for t in done if t <= end]
        report.update(start=start, seconds=args.seconds, steps=len(in_window),
                      steps_per_s=len(in_window) / args.seconds,
                      step_done_s=[round(t - start, 6) for t in in_window])
    with open(args.report + ".tmp", "w") as f:
        json.dump(report, f)
    os.rename(args.report + ".tmp", args.report)


# ---------------------------------------------------------------------------------------------
# Parent: orchestrates the configurations and evaluates them.
# ---------------------------------------------------------------------------------------------

def clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(CONTROLLED_PREFIXES) and k not in CONTROLLED_NAMES}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class HostSampler:
    """The host's CPU time stolen by the hypervisor and its busy share, every 100 ms from /proc/stat
    (a slower server that is not the GPU's doing shows up here). ok is False where /proc/stat has
    no steal column."""

    def __init__(self, period=0.1):
        import threading
        self.samples = []  # (monotonic, steal %, busy %) over the period before
        self.ok = self._read() is not None
        if self.ok:
            self.stop = threading.Event()
            self.thread = threading.Thread(target=self._run, args=(period,), daemon=True)
            self.thread.start()

    @staticmethod
    def _read():
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        if len(fields) < 8:
            return None
        idle = fields[3] + fields[4]  # idle, iowait
        return sum(fields[:8]), idle, fields[7]  # total, idle, steal

    def _run(self, period):
        last = self._read()
        while not self.stop.wait(period):
            now = self._read()
            if now is None or last is None:
                continue
            total = now[0] - last[0]
            if total > 0:
                self.samples.append((time.monotonic(), 100.0 * (now[2] - last[2]) / total,
                                     100.0 * (total - (now[1] - last[1])) / total))
            last = now

    def close(self):
        if self.ok:
            self.stop.set()
            self.thread.join()


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]


class Bench:
    def __init__(self, args):
        self.args = args
        self.lib = os.path.abspath(args.lib)
        self.logs = os.path.join(args.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.count = 0
        self.sampler = None
        self.host = None

    def argv(self, role, report, extra, seconds):
        a = self.args
        argv = [sys.executable, os.path.abspath(__file__), "--worker", role, "--report", report,
                "--warmup", str(a.warmup), "--seconds", str(seconds),
                "--server-batch", str(a.server_batch), "--server-tokens", str(a.server_tokens),
                *(["--server-eager"] if a.server_eager else []),
                "--trainer-batch", str(a.trainer_batch), "--trainer-tokens", str(a.trainer_tokens),
                "--trainer-sync-every", str(a.trainer_sync_every),
                "--drain-seconds", str(a.drain_seconds),
                "--cpus", shifted_cpus({"server": SERVER_CPUS, "calibrate": SERVER_CPUS,
                                        "idle": IDLE_CPUS}.get(role, TRAINER_CPUS), getattr(a, "cpu_offset", 0))]
        return argv + extra

    def start(self, role, tag, managed, node_dir, extra, priority=None, limit=None, own_env=None, seconds=None):
        """One process; managed: under gpuslice as its own container in `node_dir`."""
        self.count += 1
        name = f"{self.count:02d}-{tag}-{role}"
        report = os.path.join(self.logs, name + ".json")
        env = clean_env()
        argv = self.argv(role, report, extra, seconds or self.args.seconds)
        shared = None
        if managed:
            shared = tempfile.mkdtemp(prefix="gs-prio-c-")
            env["GPUSLICE_NODE_DIR"] = node_dir
            if getattr(self.args, "mps_limits_file", None):
                env["GPUSLICE_LIMITS_FILE"] = self.args.mps_limits_file
            # The gates' statistics at exit, and (debug) the time of each floor slice.
            env["GPUSLICE_LOG_LEVEL"] = "debug"
            if self.args.launcher == "cli":
                cli = [os.path.abspath(self.args.cli), "run", "--library", self.lib, "--shared-dir", shared]
                if priority:
                    cli += ["--priority", priority]
                if limit:
                    cli += ["--compute", str(limit)]
                argv = cli + ["--"] + argv
            else:
                env["LD_PRELOAD"] = self.lib
                env["GPUSLICE_SHARED_DIR"] = shared
                if priority:
                    env["GPUSLICE_PRIORITY"] = priority
                if limit:
                    env["GPUSLICE_COMPUTE_LIMIT"] = str(limit)
            own_env = dict(own_env or {})
            other_lib = own_env.pop(LIB_KEY, None)
            if other_lib:
                if self.args.launcher == "cli":
                    raise SystemExit(f"{LIB_KEY} needs --launcher preload")
                env["LD_PRELOAD"] = os.path.abspath(other_lib)
            limits = own_env.pop(LIMITS_KEY, None)
            if limits:  # the operator's limits file of this member: the run's lines and its own
                path = os.path.join(shared, "limits")
                lines = []
                if getattr(self.args, "mps_limits_file", None):
                    with open(self.args.mps_limits_file) as f:
                        lines = f.read().splitlines()
                with open(path, "w") as f:
                    f.write("\n".join(lines + limits.split("+")) + "\n")
                env["GPUSLICE_LIMITS_FILE"] = path
            env.update(own_env)  # a variant's tunables (GPUSLICE_PRIORITY_GRACE, ...)
        else:
            env.update(own_env or {})  # an un-managed variant's CUDA_MPS_* (the MPS server's own priority)
        log = open(os.path.join(self.logs, name + ".log"), "w")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return {"proc": proc, "report": report, "log": log, "name": name, "shared": shared, "role": role}

    def finish(self, run, timeout):
        proc = run["proc"]
        try:
            rc = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout"
        run["log"].close()
        if run["shared"]:
            shutil.rmtree(run["shared"], ignore_errors=True)
        log_path = os.path.join(self.logs, run["name"] + ".log")
        if rc != 0 or not os.path.exists(run["report"]):
            with open(log_path, errors="replace") as f:
                tail = f.read()[-2000:]
            raise RuntimeError(f"run {run['name']} failed (rc={rc}); last output:\n{tail}")
        with open(run["report"]) as f:
            data = json.load(f)
        data["name"] = run["name"]
        with open(log_path, errors="replace") as f:
            data["gate_stats"], data["floor_slices_s"], data["holds_s"] = read_gate_log(f, data.get("start", 0.0))
        return data

    def abort(self, runs):
        for run in runs:
            if run["proc"].poll() is None:
                os.killpg(run["proc"].pid, signal.SIGKILL)
                run["proc"].wait()

    def wait_ready(self, runs, ready_files):
        deadline = time.monotonic() + self.args.ready_timeout
        while not all(os.path.exists(f) for f in ready_files):
            for run in runs:
                if run["proc"].poll() is not None:
                    self.abort(runs)
                    self.finish(run, 1)  # raises with the log's tail
                    raise RuntimeError(f"run {run['name']} exited before it was ready")
            if time.monotonic() > deadline:
                self.abort(runs)
                raise RuntimeError(f"not ready within {self.args.ready_timeout} s: "
                                   + ", ".join(r["name"] for r in runs))
            time.sleep(0.05)

    def calibrate(self):
        run = self.start("calibrate", "calibrate", False, None,
                         ["--calibrate-requests", str(self.args.calibrate_requests)])
        data = self.finish(run, self.args.ready_timeout + 120)
        print(f"calibration: service time alone at {CALIBRATE_LOAD:.0%} load {data['service_mean_s'] * 1e3:.2f} ms mean, "
              f"{data['service_p50_s'] * 1e3:.2f} ms median; back to back {data['service_hot_mean_s'] * 1e3:.2f} ms "
              f"mean ({data['requests']} requests each)", flush=True)
        return data

    def measure(self, tag, members, rate, phases=None, seconds=None, toggle=None):
        """members: list of (role, managed, priority, limit). Starts them together; returns reports
        by role and the mean NVML utilization over the measured window. phases: (count, seconds) for
        --paired: the trainer is paused in the even phases (from the first) and runs in the odd ones.
        seconds: the measured window without phases (default --seconds). toggle(k, runs), with
        phases: called at each phase boundary k instead of pausing the trainer."""
        seconds = phases[0] * phases[1] if phases else seconds or self.args.seconds
        work = tempfile.mkdtemp(prefix="gs-prio-run-")
        pause = os.path.join(work, "pause")
        if phases and not toggle:
            open(pause, "w").close()
        node_dir = tempfile.mkdtemp(prefix="gs-prio-node-")
        # The operator's word (docs/priority.md): this user's containers may run up to high.
        with open(os.path.join(node_dir, "uid-%d.assigned" % os.geteuid()), "w") as f:
            f.write("priority=high\n")
        runs, ready = [], []
        try:
            for i, member in enumerate(members):
                role, managed, priority, limit = member[:4]
                own_env = member[4] if len(member) > 4 else None
                ready_file = os.path.join(work, f"ready{i}")
                extra = ["--ready-file", ready_file, "--go-file", os.path.join(work, "go"),
                         "--go-timeout", str(self.args.ready_timeout + 30)]
                if role == "server":
                    extra += ["--rate", repr(rate), "--seed", str(self.args.seed)]
                    if phases:
                        extra += ["--mirror-phase", repr(phases[1])]
                if role == "trainer" and phases and not toggle:
                    extra += ["--pause-file", pause]
                runs.append(self.start(role, tag, managed, node_dir, extra, priority, limit, own_env, seconds))
                ready.append(ready_file)
            self.wait_ready(runs, ready)
            start = time.monotonic() + 0.5
            with open(os.path.join(work, "go.tmp"), "w") as f:
                f.write(repr(start))
            os.rename(os.path.join(work, "go.tmp"), os.path.join(work, "go"))
            for k in range(1, phases[0] if phases else 0):
                sleep_until(start + k * phases[1])
                if toggle:
                    toggle(k, runs)
                elif k % 2:
                    os.unlink(pause)
                else:
                    open(pause, "w").close()
            timeout = seconds + self.args.drain_seconds + 60
            results = {}
            for run in runs:
                results[run["role"]] = self.finish(run, start + timeout - time.monotonic())
        except BaseException:
            self.abort(runs)
            raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(node_dir, ignore_errors=True)
        util = None
        if self.sampler is not None and self.sampler.ok:
            util = self.sampler.mean(start, start + seconds)[0]
            # (seconds from the start, util %, SM MHz, W, clock event reasons) over the window
            results["nvml"] = [(round(x[0] - start, 3),) + tuple(x[1:]) for x in self.sampler.samples
                               if start <= x[0] <= start + seconds]
        if self.host is not None and self.host.ok:
            # (seconds from the start, host CPU steal %, host CPU busy %)
            results["host"] = [(round(x[0] - start, 3), round(x[1], 2), round(x[2], 1)) for x in self.host.samples
                               if start <= x[0] <= start + seconds]
        return results, util


def pool_runs(runs):
    """One configuration's rounds, [(results, util)], as one longer run: the server's latencies and
    counts summed, the trainer's steps over all its seconds, the mean utilization. Per-round series
    (timelines, step times) stay in the rounds' own runs."""
    if len(runs) == 1:
        return runs[0]
    pooled = {}
    for role in ("server", "trainer", "idle"):
        parts = [results[role] for results, _ in runs if role in results]
        if not parts:
            continue
        merged = dict(parts[0])
        merged["seconds"] = sum(p["seconds"] for p in parts)
        merged["gate_stats"] = [line for p in parts for line in p.get("gate_stats", [])]
        if role == "server":
            merged["latencies_s"] = [x for p in parts for x in p["latencies_s"]]
            for key in ("arrivals", "served", "unserved", "busy_s"):
                merged[key] = sum(p.get(key, 0) for p in parts)
            merged["timeline_s"] = []
        elif role == "trainer":
            merged["steps"] = sum(p["steps"] for p in parts)
            merged["steps_per_s"] = merged["steps"] / merged["seconds"]
            merged["step_done_s"], merged["floor_slices_s"], merged["holds_s"] = [], [], []
        pooled[role] = merged
    utils = [util for _, util in runs if util is not None]
    return pooled, (sum(utils) / len(utils) if utils else None)


def read_results(path):
    """A priority_bench.json this script wrote (gzipped where the name ends in .gz), parsed, for
    the scripts that analyse it. Raises OSError, EOFError or ValueError, the last also for JSON
    that is not an object with a "runs" object."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("runs"), dict):
        raise ValueError("not a priority_bench.json (no runs)")
    return data


def phase_count(seconds, phase_s):
    """--paired, --conservation: how many phases a run of `seconds` has (even, at least 2)."""
    return max(2, 2 * round(seconds / phase_s / 2))


UNMANAGED_KEY = "GPUSLICE_BENCH_UNMANAGED"
# GPUSLICE_BENCH_LIMITS=K=V+K=V in a member's list: lines of its own limits file (the operator's
# values, e.g. GPUSLICE_MPS_PRIORITY=server), beside the run's (--mps-low-threads).
LIMITS_KEY = "GPUSLICE_BENCH_LIMITS"
# GPUSLICE_BENCH_LIB=PATH in a member's list: that member preloads another build of the library
# (a tuning experiment: a copy of the tree with one constant changed), with --launcher preload.
LIB_KEY = "GPUSLICE_BENCH_LIB"


def variant_member(role, priority, env):
    """A --variant's member: under gpuslice at `priority` with its variables, or, with
    GPUSLICE_BENCH_UNMANAGED=1, without gpuslice with the rest of its variables."""
    if env.get(UNMANAGED_KEY) == "1":
        return (role, False, None, None, {k: v for k, v in env.items() if k != UNMANAGED_KEY})
    return (role, True, priority, None, env)


def trainer_variants(args):
    """(label, trainer variables) of the defaults and of each --variant whose trainer differs from
    those before it: the runs of the trainer beside an idle neighbour measure each trainer once."""
    seen = []
    for label, _, trainer_env in [("", {}, {})] + args.variants:
        if trainer_env not in seen and trainer_env.get(UNMANAGED_KEY) != "1":
            seen.append(trainer_env)
            yield label, trainer_env


def phase_of(t, count, phase_s, settle_s):
    """--paired, --conservation: the phase (0 to count - 1) a time in seconds from the start falls
    in, or None before the start, after the last phase or in a phase's first settle_s."""
    k = int(t // phase_s) if t >= 0 else -1
    return k if 0 <= k < count and t >= k * phase_s + settle_s else None


def split_phases(results, count, phase_s, settle_s):
    """--paired: one run's requests (by arrival) and trainer steps by phase, each phase without its
    first settle_s (the trainer ending or starting a step, a queue left by the phase before):
    {"paused": (results, util), "running": (results, util)}, the even phases (the trainer paused)
    and the odd ones, each shaped like a run of its own for pool_runs() and summarize(). Requests
    still unserved at the end count in the running phases (with their waiting time so far)."""
    server = results.get("server")
    trainer = results.get("trainer")
    nvml = results.get("nvml", [])
    split = {}
    for parity, name in ((0, "paused"), (1, "running")):
        seconds = (count + 1 - parity) // 2 * (phase_s - settle_s)

        def inside(t, parity=parity):
            k = phase_of(t, count, phase_s, settle_s)
            return k is not None and k % 2 == parity

        part = {}
        if server:
            reqs = [r for r in server["timeline_s"] if inside(r[0])]
            late = server["latencies_s"][server["served"]:] if name == "running" else []
            part["server"] = {"seconds": seconds, "latencies_s": [r[2] - r[0] for r in reqs] + late,
                              "arrivals": len(reqs) + len(late), "served": len(reqs), "unserved": len(late),
                              "busy_s": sum(r[2] - r[1] for r in reqs), "gate_stats": server.get("gate_stats", [])}
        if trainer:
            steps = [t for t in trainer.get("step_done_s", []) if inside(t)]
            part["trainer"] = {"seconds": seconds, "steps": len(steps), "steps_per_s": len(steps) / seconds,
                               "gate_stats": trainer.get("gate_stats", [])}
            if server:
                part["trainer"]["held_share"] = held_share([(r[1], r[2]) for r in reqs], trainer.get("holds_s", []))
            part["trainer"]["holds"] = [h for h in trainer.get("holds_s", []) if inside(h[0])]
        utils = [x[1] for x in nvml if inside(x[0])]
        split[name] = (part, sum(utils) / len(utils) if utils else None)
    return split


def phase_pairs(results, count, phase_s, settle_s):
    """--paired: the server's requests by pair of phases (a paused phase and the running one after
    it), each phase without its settling time: [(paused, running)], each a list of (latency,
    service) in seconds. Requests still unserved at the end join the last running phase (their
    waiting so far; no service time)."""
    server = results.get("server")
    if not server:
        return []
    pairs = [([], []) for _ in range(count // 2)]
    for arrival, start, end in server["timeline_s"]:
        k = phase_of(arrival, 2 * len(pairs), phase_s, settle_s)
        if k is not None:
            pairs[k // 2][k % 2].append((end - arrival, end - start))
    if pairs:
        pairs[-1][1].extend((late, None) for late in server["latencies_s"][server["served"]:])
    return pairs


def paired_ratios(pairs):
    """Running ÷ paused over these pairs of phases: p50 and p99 latency and mean service time
    (None where a side has no requests)."""
    paused = [r for p, _ in pairs for r in p]
    running = [r for _, q in pairs for r in q]
    if not paused or not running:
        return None

    def service(requests):
        times = [s for _, s in requests if s is not None]
        return sum(times) / len(times) if times else float("nan")

    ratios = {}
    for name, p in (("p50", 0.5), ("p99", 0.99)):
        base = percentile([lat for lat, _ in paused], p)
        ratios[name] = percentile([lat for lat, _ in running], p) / base if base > 0 else float("nan")
    base = service(paused)
    ratios["service"] = service(running) / base if base > 0 else float("nan")
    return ratios


def resampled(pairs, statistic, rounds=1000, seed=1):
    """statistic() of `rounds` resamplings of whole pairs of phases with replacement (a fixed seed:
    the same runs give the same interval). Pairs, not requests or steps: those inside a phase are
    not independent (a slow stretch of the host slows all of them), pairs of adjacent phases nearly
    are."""
    rng = random.Random(seed)
    return [statistic([pairs[rng.randrange(len(pairs))] for _ in pairs]) for _ in range(rounds)]


def central_interval(values, level=0.95):
    """(low, high): the central `level` of these values."""
    tail = (1.0 - level) / 2
    return percentile(values, tail), percentile(values, 1.0 - tail)


def bootstrap_samples(pairs, rounds=1000, seed=1):
    """The paired ratios (paired_ratios) of resampled pairs of phases: {name: [ratio]}; None with
    fewer than 4 pairs."""
    if len(pairs) < 4:
        return None
    samples = {}
    for ratios in resampled(pairs, paired_ratios, rounds, seed):
        for name, value in (ratios or {}).items():
            if not math.isnan(value):
                samples.setdefault(name, []).append(value)
    return samples


def bootstrap_ratios(pairs, rounds=1000, seed=1):
    """95% intervals of the paired ratios from bootstrap_samples: {name: (low, high)}; None with
    fewer than 4 pairs."""
    samples = bootstrap_samples(pairs, rounds, seed)
    if samples is None:
        return None
    return {name: central_interval(values) for name, values in samples.items()}


def read_gate_log(lines, start):
    """A gpuslice process's log: its gates' exit statistics, its floor slices and its holds, in
    seconds from `start` (a time.monotonic() reading; the gate's clock is CLOCK_MONOTONIC too).
    A hold is [held, released, queue_ms]: queue_ms is how long the work queued before the hold
    took to run (the gate's probe at debug level), -1.0 when it still ran at the release, None
    when not probed. Pairs are taken in order: with several held threads a pair may join one
    thread's start to another's end, which covers the same time."""
    stats, slices, held, released = [], [], [], []
    for line in lines:
        match = FLOOR_SLICE.search(line)
        if match:
            slices.append(round(int(match.group(1)) / 1e6 - start, 6))
            continue
        match = HELD.search(line)
        if match:
            held.append(round(int(match.group(1)) / 1e6 - start, 6))
            continue
        match = RELEASED.search(line)
        if match:
            queue = int(match.group(2)) / 1e3 if match.group(2) else (-1.0 if match.group(3) else None)
            released.append((round(int(match.group(1)) / 1e6 - start, 6), queue))
            continue
        if "priority gate" in line or "compute limiter, device" in line:
            stats.append(line.strip())
    return stats, slices, [[h, r, queue] for h, (r, queue) in zip(held, released)]


def queue_at_holds(holds):
    """What the gate's probes found at the holds: how many, the median and largest time the queued
    work took (ms), and how many still ran at their release (their time is not known)."""
    probed = sorted(h[2] for h in holds if len(h) > 2 and h[2] is not None and h[2] >= 0)
    running = sum(1 for h in holds if len(h) > 2 and h[2] is not None and h[2] < 0)
    return {"holds": len(holds), "probed": len(probed) + running, "still_running": running,
            "p50_ms": probed[len(probed) // 2] if probed else None, "max_ms": probed[-1] if probed else None}


def held_share(intervals, holds):
    """The share of the time inside `intervals` (a server's requests, [(start, end)]) during which
    the trainer was held (`holds`, [[held, released]]); None without such time."""
    merged = []
    for a, b, *_ in sorted(holds, key=lambda h: h[0]):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = covered = 0.0
    for a, b in intervals:
        total += b - a
        covered += sum(max(0.0, min(b, hb) - max(a, ha)) for ha, hb in merged if ha < b and hb > a)
    return covered / total if total > 0 else None


def worst_second(results, seconds):
    """The 1 s window (in 0.5 s steps) whose requests waited longest, beside the whole run: whether
    the requests themselves were slower then (service), the device's clock, what the trainer did and
    the floor slices it got. None without a server timeline."""
    timeline = (results.get("server") or {}).get("timeline_s")
    if not timeline:
        return None
    trainer = results.get("trainer") or {}
    steps = trainer.get("step_done_s", [])
    slices = trainer.get("floor_slices_s", [])
    holds = trainer.get("holds_s", [])
    nvml = results.get("nvml", [])
    host = results.get("host", [])

    def mean(values):
        return sum(values) / len(values) if values else None

    def window(t0, t1):
        reqs = [r for r in timeline if t0 <= r[0] < t1]
        # Inside the requests, the trainer held: a slow request it did not hold points at work it
        # had queued (or launched in a floor slice).
        share = held_share([(r[1], r[2]) for r in reqs], holds) if trainer else None
        return {"from_s": t0, "requests": len(reqs),
                "latency_ms": mean([(r[2] - r[0]) * 1e3 for r in reqs]),
                "service_ms": mean([(r[2] - r[1]) * 1e3 for r in reqs]),
                "sm_mhz": mean([x[2] for x in nvml if t0 <= x[0] < t1]),
                "host_steal_pct": mean([x[1] for x in host if t0 <= x[0] < t1]),
                "trainer_steps_per_s": len([t for t in steps if t0 <= t < t1]) / (t1 - t0) if steps else None,
                "floor_slices": len([t for t in slices if t0 <= t < t1]),
                "trainer_held_pct": None if share is None else 100.0 * share,
                "queue_at_holds": queue_at_holds([h for h in holds if t0 <= h[0] < t1])}

    candidates = [window(k * 0.5, k * 0.5 + 1.0) for k in range(max(1, int(seconds * 2) - 1))]
    candidates = [c for c in candidates if c["requests"]]
    if not candidates:
        return None
    return {"worst": max(candidates, key=lambda c: c["latency_ms"]), "run": window(0.0, seconds)}


def describe_worst(w):
    worst, run = w["worst"], w["run"]
    text = (f"worst second from {worst['from_s']:.1f} s: {worst['requests']} requests, latency "
            f"{fmt(worst['latency_ms'], '.1f')} ms (run {fmt(run['latency_ms'], '.1f')}), service "
            f"{fmt(worst['service_ms'], '.1f')} ms (run {fmt(run['service_ms'], '.1f')}), SM clock "
            f"{fmt(worst['sm_mhz'], '.0f')} MHz (run {fmt(run['sm_mhz'], '.0f')}), host CPU stolen "
            f"{fmt(worst['host_steal_pct'], '.1f')}% (run {fmt(run['host_steal_pct'], '.1f')}%)")
    if worst["trainer_steps_per_s"] is not None:
        text += (f", trainer {worst['trainer_steps_per_s']:.0f} steps/s (run {run['trainer_steps_per_s']:.1f}), "
                 f"{worst['floor_slices']} floor slices (run {run['floor_slices']}), held "
                 f"{fmt(worst['trainer_held_pct'], '.0f')}% of the requests' time (run {fmt(run['trainer_held_pct'], '.0f')}%)")
        queue = worst["queue_at_holds"]
        if queue["probed"]:
            text += (f", its queued work at {queue['probed']} holds took up to {fmt(queue['max_ms'], '.1f')} ms "
                     f"({queue['still_running']} still running at the release)")
    return text


def summarize(tag, load, results, util, alone):
    row = {"config": tag, "load": load, "device_util_pct": util}
    server = results.get("server")
    trainer = results.get("trainer")
    if server:
        lat = server["latencies_s"]
        row.update(p50_ms=percentile(lat, 0.5) * 1e3, p99_ms=percentile(lat, 0.99) * 1e3,
                   requests=server["arrivals"], unserved=server["unserved"])
        if "busy_s" in server:  # the load the server really was: its share of time inside requests
            row["server_busy_pct"] = 100.0 * server["busy_s"] / server["seconds"]
            if server["served"]:
                # The mean time inside a request: what sharing costs each request, without the
                # queueing that multiplies it in the tail.
                row["service_ms"] = 1e3 * server["busy_s"] / server["served"]
        if alone.get("server"):
            row["p50_x"] = row["p50_ms"] / alone["server"]["p50_ms"]
            row["p99_x"] = row["p99_ms"] / alone["server"]["p99_ms"]
            if row.get("service_ms") and alone["server"].get("service_ms"):
                row["service_x"] = row["service_ms"] / alone["server"]["service_ms"]
    if trainer:
        row["trainer_steps_per_s"] = trainer["steps_per_s"]
        if alone.get("trainer"):
            row["trainer_x"] = trainer["steps_per_s"] / alone["trainer"]["trainer_steps_per_s"]
    row["gate_stats"] = [s for r in results.values() if isinstance(r, dict) for s in r.get("gate_stats", [])]
    return row


def fmt(value, spec):
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def table(rows):
    lines = ["| load | configuration | server p50 ms | p99 ms | p50 ÷ alone | p99 ÷ alone | server busy % "
             "| service ms | service ÷ alone | trainer steps/s | trainer ÷ alone | device util % | unserved |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {fmt(r['load'], 'd') if r['load'] is not None else '-'} | {r['config']} "
                     f"| {fmt(r.get('p50_ms'), '.2f')} | {fmt(r.get('p99_ms'), '.2f')} "
                     f"| {fmt(r.get('p50_x'), '.2f')} | {fmt(r.get('p99_x'), '.2f')} "
                     f"| {fmt(r.get('server_busy_pct'), '.0f')} "
                     f"| {fmt(r.get('service_ms'), '.2f')} | {fmt(r.get('service_x'), '.2f')} "
                     f"| {fmt(r.get('trainer_steps_per_s'), '.2f')} | {fmt(r.get('trainer_x'), '.2f')} "
                     f"| {fmt(r.get('device_util_pct'), '.0f')} | {r.get('unserved', '-')} |")
    return "\n".join(lines)


def require_torch():
    check = subprocess.run([sys.executable, "-c", "import torch, transformers; assert torch.cuda.is_available()"],
                           env=clean_env(), capture_output=True, text=True, timeout=120)
    if check.returncode != 0:
        raise SystemExit("priority_bench: needs PyTorch with CUDA and transformers:\n" + check.stderr[-1500:])


def main_parent(args):
    args.out = os.path.abspath(args.out or os.environ.get("OUT") or "priority-out")
    os.makedirs(args.out, exist_ok=True)
    if not os.path.exists(args.lib):
        raise SystemExit(f"priority_bench: --lib {args.lib}: no such file (build gpuslice_preload first)")
    if (args.launcher == "cli" or args.conservation) and not os.path.exists(args.cli):
        raise SystemExit(f"priority_bench: --cli {args.cli}: no such file (build gpuslice_cli first)")
    require_torch()
    loads = [int(x) for x in args.loads.split(",") if x]
    began = time.monotonic()
    bench = Bench(args)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()  # NVML's own numbering
    mps = start_mps(args) if args.mps else None
    try:
        from compute_accuracy import NvmlSampler

        bench.sampler = NvmlSampler(index=int(visible) if visible.isdigit() else 0)
        bench.host = HostSampler()
    except Exception as e:  # the table is still useful without utilization
        print(f"NVML sampling unavailable: {e}", flush=True)
    data = {"args": vars(args), "runs": {}, "rows": []}
    rows = []
    try:
        cal = bench.calibrate()
        data["calibration"] = cal
        service = cal["service_mean_s"]
        results, util = bench.measure("trainer-alone", [("trainer", False, None, None)], None,
                                      seconds=args.alone_seconds)
        alone_trainer = summarize("trainer alone", None, results, util, {})
        data["runs"]["trainer-alone"] = results
        rows.append(alone_trainer)
        print(f"trainer alone: {alone_trainer['trainer_steps_per_s']:.2f} steps/s", flush=True)
        # What the in-flight bound and the record re-reads cost: the trainer (low) beside a high-priority
        # container that is alive on the GPU and never works, so the trainer is never held. Each ÷ the
        # mean of the trainer alone before them and after them: a call's first run is faster than the
        # later ones (the GPU starts cool: 27.3 against 23.8-25.5 steps/s on an H200), so the run
        # before alone would make every neighbour look slower (--idle-rounds alternates them).
        beside = []
        for label, trainer_env in trainer_variants(args):
            name = "trainer beside an idle high" + (f" {label}" if label else "")
            results, util = bench.measure(f"beside-idle-high{label}", [("idle", True, "high", None),
                                                                     ("trainer", True, "low", None, trainer_env)],
                                          None, seconds=args.alone_seconds)
            data["runs"][name] = results
            beside.append((name, results, util))
        results, util = bench.measure("trainer-alone-after", [("trainer", False, None, None)], None,
                                      seconds=args.alone_seconds)
        data["runs"]["trainer-alone-after"] = results
        after = results["trainer"]["steps_per_s"]
        reference = {"trainer_steps_per_s": (alone_trainer["trainer_steps_per_s"] + after) / 2}
        print(f"trainer alone again: {after:.2f} steps/s (the reference: the mean of both)", flush=True)
        # Every later "trainer ÷ alone" (paired runs, configurations) takes the same reference.
        alone_trainer = dict(alone_trainer, trainer_steps_per_s=reference["trainer_steps_per_s"])
        for name, results, util in beside:
            row = summarize(name, None, results, util, {"trainer": reference})
            rows.append(row)
            print(f"{name}: {fmt(row.get('trainer_x'), '.3f')} of alone", flush=True)
        if args.idle_rounds > 1:
            rows += measure_idle_rounds(args, bench, data)
        if args.idle_only:
            loads = []  # nothing with a server
        if args.conservation:
            rows += measure_conservation(args, bench, data)
        if args.paired and loads:
            rows += measure_paired(args, bench, data, loads, service, alone_trainer)
            loads = []  # the five configurations are not measured
        # (name in the table, name of its runs' logs, members)
        configs = [
            ("un-managed", "un-managed", [("server", False, None, None), ("trainer", False, None, None)]),
            ("limits 50/50", "limits", [("server", True, None, 50), ("trainer", True, None, 50)]),
            ("priorities high/low", "priorities", [("server", True, "high", None), ("trainer", True, "low", None)]),
        ]
        if args.only_priorities:
            configs = [c for c in configs if c[0].startswith("priorities")]
        for label, server_env, trainer_env in args.variants:
            configs.append((f"priorities high/low {label}", f"priorities{label}",
                            [variant_member("server", "high", server_env),
                             variant_member("trainer", "low", trainer_env)]))
        for load in loads:
            rate = load / 100.0 / service
            tag = f"load{load}"
            # Each round measures the server alone and then every configuration, so that with
            # --repeat the rounds interleave and a slow stretch of the machine falls on all of them.
            rounds = {"server alone": []}
            rounds.update({name: [] for name, _, _ in configs})
            if args.control:
                rounds["server alone again"] = []
            worst = {name: [] for name in rounds}
            for r in range(args.repeat):
                suffix = f"-r{r + 1}" if args.repeat > 1 else ""
                said = f" (round {r + 1})" if args.repeat > 1 else ""
                results, util = bench.measure(f"{tag}-server-alone{suffix}", [("server", False, None, None)], rate)
                data["runs"][f"{tag}-server-alone{suffix}"] = results
                rounds["server alone"].append((results, util))
                round_alone = summarize("server alone", load, results, util, {})
                worst["server alone"].append(worst_second(results, args.seconds))
                print(f"load {load}%{said}: {rate:.1f} requests/s; server alone p50 {round_alone['p50_ms']:.2f} ms, "
                      f"p99 {round_alone['p99_ms']:.2f} ms", flush=True)
                if worst["server alone"][-1]:
                    print("    " + describe_worst(worst["server alone"][-1]), flush=True)
                for name, run_name, members in configs:
                    results, util = bench.measure(f"{tag}-{run_name}{suffix}", members, rate)
                    data["runs"][f"{tag}-{name}{suffix}"] = results
                    rounds[name].append((results, util))
                    row = summarize(name, load, results, util, {"server": round_alone, "trainer": alone_trainer})
                    print(f"  {name}: p99 ÷ alone {fmt(row.get('p99_x'), '.2f')}, service ÷ alone "
                          f"{fmt(row.get('service_x'), '.2f')}, trainer ÷ alone {fmt(row.get('trainer_x'), '.2f')}",
                          flush=True)
                    worst[name].append(worst_second(results, args.seconds))
                    if worst[name][-1]:
                        print("    " + describe_worst(worst[name][-1]), flush=True)
                if args.control:
                    # The same server alone once more, after the configurations: its ratios to the
                    # first are what the machine's drift alone does to a ratio (the noise floor).
                    results, util = bench.measure(f"{tag}-server-alone-again{suffix}", [("server", False, None, None)],
                                                  rate)
                    data["runs"][f"{tag}-server-alone-again{suffix}"] = results
                    rounds["server alone again"].append((results, util))
                    row = summarize("server alone again", load, results, util, {"server": round_alone})
                    worst["server alone again"].append(worst_second(results, args.seconds))
                    print(f"  server alone again: p99 ÷ alone {fmt(row.get('p99_x'), '.2f')}, service ÷ alone "
                          f"{fmt(row.get('service_x'), '.2f')}", flush=True)
            # The table's rows: each configuration's rounds as one longer run.
            results, util = pool_runs(rounds["server alone"])
            alone_server = summarize("server alone", load, results, util, {})
            alone_server["worst_seconds"] = worst["server alone"]
            rows.append(alone_server)
            alone = {"server": alone_server, "trainer": alone_trainer}
            for name in [name for name, _, _ in configs] + (["server alone again"] if args.control else []):
                results, util = pool_runs(rounds[name])
                row = summarize(name, load, results, util, alone)
                row["worst_seconds"] = worst[name]
                rows.append(row)
                if args.repeat > 1:
                    print(f"load {load}%, {args.repeat} rounds pooled: {name}: p99 ÷ alone "
                          f"{fmt(row.get('p99_x'), '.2f')}, service ÷ alone {fmt(row.get('service_x'), '.2f')}, "
                          f"trainer ÷ alone {fmt(row.get('trainer_x'), '.2f')}", flush=True)
                row["judged"] = name.startswith("priorities")
                warn_if_unmanaged(row)
    finally:
        if mps is not None:
            stop_mps(mps)
        if bench.sampler is not None:
            bench.sampler.close()
        if bench.host is not None:
            bench.host.close()
        data["rows"] = rows
        data["elapsed_s"] = time.monotonic() - began
        with open(os.path.join(args.out, "priority_bench.json"), "w") as f:
            json.dump(data, f, indent=1)
    verdicts = []
    for row in rows:
        if not row.get("judged"):
            continue
        goal = GOAL_TRAINER.get(row["load"])
        ok_tr = goal is None or (row.get("trainer_x") is not None and row["trainer_x"] >= goal)
        baseline = "paused" if row["config"].startswith("paired") else "alone"
        verdicts.append(f"load {row['load']}%: {row['config']}: p99 ÷ {baseline} {fmt(row.get('p99_x'), '.2f')}"
                        f"{interval(row, 'p99')} (goal ≤ {GOAL_P99}) {p99_verdict(row)}; trainer ÷ alone "
                        f"{fmt(row.get('trainer_x'), '.2f')} (goal ≥ {goal}) {'PASS' if ok_tr else 'FAIL'}"
                        + (f" at server busy {row['server_busy_pct']:.0f}%" if row.get("server_busy_pct") is not None
                           and row["config"].startswith("paired") else "")
                        + (" (INVALID: " + row["warning"] + ")" if "warning" in row else ""))
    text = (table(rows) + "\n\n" + "\n".join(verdicts) + "\n" +
            f"\nservice time alone {service * 1e3:.2f} ms ({server_shape(args)}); {args.seconds:g} s measured per "
            "configuration"
            + (f" (phases of {args.phase_seconds:g} s, the first {args.settle_seconds:g} s of each left out)"
               if args.paired else "") + f"; total {data['elapsed_s']:.0f} s\n")
    with open(os.path.join(args.out, "priority_bench.md"), "w") as f:
        f.write(text)
    print("\n" + text, flush=True)
    return 0


def server_shape(args):
    """What one request of the server is and how the trainer steps, for the table's footer."""
    how = "kernel by kernel" if args.server_eager else "one CUDA graph"
    reads = "every step" if args.trainer_sync_every == 1 else f"every {args.trainer_sync_every} steps"
    return (f"server requests of {args.server_batch} x {args.server_tokens} tokens, {how}; trainer steps of "
            f"{args.trainer_batch} x {args.trainer_tokens} tokens, its loss read {reads}")


def step_pairs(results, count, phase_s, settle_s):
    """--conservation: the trainer's steps by pair of phases (even, odd), each phase without its
    settling time: [(steps in the even phase, steps in the odd one)]."""
    steps = (results.get("trainer") or {}).get("step_done_s", [])
    pairs = [[0, 0] for _ in range(count // 2)]
    for t in steps:
        k = phase_of(t, 2 * len(pairs), phase_s, settle_s)
        if k is not None:
            pairs[k // 2][k % 2] += 1
    return [tuple(p) for p in pairs]


def step_ratio_interval(pairs, rounds=1000, seed=1):
    """Steps in the even phases ÷ steps in the odd ones, and its 95% interval from resampled pairs
    of phases: (ratio, low, high); None without steps in the odd phases or with fewer than 4
    pairs."""
    def ratio(sample):
        odd = sum(b for _, b in sample)
        return sum(a for a, _ in sample) / odd if odd else None

    value = ratio(pairs)
    if value is None or len(pairs) < 4:
        return None
    return (value, *central_interval([r for r in resampled(pairs, ratio, rounds, seed) if r is not None]))


def measure_idle_rounds(args, bench, data):
    """--idle-rounds N: what a best-effort trainer pays beside an idle high tenant, and where it comes
    from, in N alternated rounds (so that the GPU's warming up, which favours whatever runs first,
    falls on every configuration alike). A round: the trainer alone (no gpuslice); beside an idle
    high tenant, both under gpuslice (the goal's configuration); beside the same idle process, both
    without gpuslice (what another context costs); alone under gpuslice at low (the library without
    anybody to yield to). Each ÷ the mean of the alone runs of its round and the next one."""
    configs = [
        ("alone", [("trainer", False, None, None)]),
        ("beside an idle high, gpuslice", [("idle", True, "high", None), ("trainer", True, "low", None)]),
        ("beside an idle process, un-managed", [("idle", False, None, None), ("trainer", False, None, None)]),
        ("alone under gpuslice, low", [("trainer", True, "low", None)]),
    ]
    speeds = {name: [] for name, _ in configs}
    for r in range(args.idle_rounds):
        for name, members in configs:
            tag = f"idle-round{r + 1}-{name.split(',')[0].replace(' ', '-')}"
            results, _ = bench.measure(tag, members, None, seconds=args.alone_seconds)
            data["runs"][tag] = results
            speeds[name].append(results["trainer"]["steps_per_s"])
            print(f"idle round {r + 1}, {name}: {speeds[name][-1]:.2f} steps/s", flush=True)
    alone = speeds["alone"]
    rows = []
    for name, _ in configs[1:]:
        ratios = []
        for k, x in enumerate(speeds[name]):
            ref = alone[k:k + 2]  # this round's alone and the next one's (the last round: its own)
            ratios.append(x / (sum(ref) / len(ref)))
        mean = sum(ratios) / len(ratios)
        row = {"config": f"trainer {name} ÷ alone (alternated)", "load": None, "trainer_x": mean,
               "spread": [min(ratios), max(ratios)], "rounds": ratios}
        print(f"trainer {name} ÷ alone, {len(ratios)} alternated rounds: {mean:.3f} "
              f"[{min(ratios):.3f}-{max(ratios):.3f}]", flush=True)
        rows.append(row)
    return rows


def measure_conservation(args, bench, data):
    """--conservation: what the in-flight bound costs a best-effort trainer, within one trainer
    process (two trainer processes differ by more than the cost): the trainer (low) beside an idle
    container that is high in the even phases and low in the odd ones (`gpuslice set --priority`,
    applied live), so that its launches are bounded in the even phases only. Once with the
    defaults and once per --variant (its trainer variables). A row each: steps in the bounded
    phases ÷ steps in the unbounded ones, with its 95% interval."""
    count = phase_count(args.seconds, args.phase_seconds)
    cli = os.path.abspath(args.cli)

    def toggle(k, runs):
        shared = next(run["shared"] for run in runs if run["role"] == "idle")
        subprocess.run([cli, "set", "--priority", "low" if k % 2 else "high", "--shared-dir", shared],
                       check=True, stdout=subprocess.DEVNULL)

    rows = []
    for label, trainer_env in trainer_variants(args):
        tag = "conservation" + (f"-{label}" if label else "")
        results, util = bench.measure(tag, [("idle", True, "high", None), ("trainer", True, "low", None, trainer_env)],
                                      None, (count, args.phase_seconds), toggle=toggle)
        data["runs"][tag] = results
        pairs = step_pairs(results, count, args.phase_seconds, args.settle_seconds)
        found = step_ratio_interval(pairs)
        row = {"config": "trainer: idle neighbour high ÷ low" + (f" {label}" if label else ""), "load": None,
               "device_util_pct": util, "trainer_x": found[0] if found else None,
               "ci95": {"trainer": found[1:]} if found else None,
               "gate_stats": [s for r in results.values() if isinstance(r, dict) for s in r.get("gate_stats", [])]}
        print(f"trainer beside an idle neighbour, high ÷ low phases{' ' + label if label else ''} (the bound's cost "
              f"within one process): {fmt(row['trainer_x'], '.3f')}{interval(row, 'trainer')} over {len(pairs)} "
              f"pairs of {args.phase_seconds:g} s phases", flush=True)
        rows.append(row)
    return rows


def interval(row, name):
    """' [low-high]': the 95% interval of a paired ratio (bootstrap_ratios), or nothing."""
    ci = (row.get("ci95") or {}).get(name)
    return f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else ""


def p99_verdict(row):
    """PASS or FAIL against GOAL_P99; with a 95% interval (paired rows), UNDECIDED where it spans
    the goal: the run cannot tell."""
    value = row.get("p99_x")
    ci = (row.get("ci95") or {}).get("p99")
    if ci:
        return "PASS" if ci[1] <= GOAL_P99 else "FAIL" if ci[0] > GOAL_P99 else "UNDECIDED (the interval spans the goal)"
    return "PASS" if value is not None and value <= GOAL_P99 else "FAIL"


def warn_if_unmanaged(row):
    """A judged (priorities) row whose processes logged no gate statistics ran un-managed: the
    verdict says so (INVALID) instead of judging it."""
    if row.get("judged") and not any("priority gate" in s for s in row["gate_stats"]):
        row["warning"] = ("no 'priority gate' statistics in the processes' logs: the library may "
                          "not support GPUSLICE_PRIORITY, so this ran un-managed under the preload")
        print("  WARNING: " + row["warning"], flush=True)


def measure_paired(args, bench, data, loads, service, alone_trainer):
    """--paired: per load, one server process and one trainer process for the whole run, the trainer
    paused in every other phase: the server with and without the trainer, compared within one
    process, so that what differs between two server processes (a run of the server alone against
    itself differs by up to 2.6x at p99 on an H100) does not enter the ratio. The rows: the paused
    phases as the baseline, the running phases against them."""
    count = phase_count(args.seconds, args.phase_seconds)
    modes = [("priorities", [("server", True, "high", None), ("trainer", True, "low", None)])]
    for label, server_env, trainer_env in args.variants:
        modes.append((f"priorities {label}", [variant_member("server", "high", server_env),
                                               variant_member("trainer", "low", trainer_env)]))
    if not args.only_priorities:
        modes.insert(0, ("un-managed", [("server", False, None, None), ("trainer", False, None, None)]))
    rows = []
    for load in loads:
        rate = load / 100.0 / service
        for mode, members in modes:
            parts = {"paused": [], "running": []}
            pairs = []
            for r in range(args.repeat):
                suffix = f"-r{r + 1}" if args.repeat > 1 else ""
                tag = f"load{load}-paired-{mode.replace(' ', '-')}{suffix}"
                results, _ = bench.measure(tag, members, rate, (count, args.phase_seconds))
                data["runs"][tag] = results
                split = split_phases(results, count, args.phase_seconds, args.settle_seconds)
                pairs += phase_pairs(results, count, args.phase_seconds, args.settle_seconds)
                for name, part in split.items():
                    parts[name].append(part)
            paused = summarize(f"paired {mode}: trainer paused", load, *pool_runs(parts["paused"]), {})
            running = summarize(f"paired {mode}: trainer running", load, *pool_runs(parts["running"]),
                                {"server": paused, "trainer": alone_trainer})
            running["judged"] = mode.startswith("priorities")
            running["ci95"] = bootstrap_ratios(pairs)
            shares = [p["trainer"].get("held_share") for p, _ in parts["running"] if "trainer" in p]
            shares = [x for x in shares if x is not None]
            running["trainer_held_pct"] = 100.0 * sum(shares) / len(shares) if shares else None
            holds = [h for p in parts["running"] for h in p[0].get("trainer", {}).get("holds", [])]
            running["queue_at_holds"] = queue_at_holds(holds)
            warn_if_unmanaged(running)
            rows += [paused, running]
            print(f"load {load}%, paired {mode}: trainer running ÷ paused: p50 {fmt(running.get('p50_x'), '.2f')}"
                  f"{interval(running, 'p50')}, p99 {fmt(running.get('p99_x'), '.2f')}{interval(running, 'p99')}, "
                  f"service {fmt(running.get('service_x'), '.2f')}{interval(running, 'service')} (server busy "
                  f"{fmt(running.get('server_busy_pct'), '.0f')}%); "
                  f"trainer ÷ alone {fmt(running.get('trainer_x'), '.2f')}, held "
                  f"{fmt(running.get('trainer_held_pct'), '.0f')}% of the requests' time; at its "
                  f"{running['queue_at_holds']['holds']} holds the queued work took a median "
                  f"{fmt(running['queue_at_holds']['p50_ms'], '.2f')} ms, at most "
                  f"{fmt(running['queue_at_holds']['max_ms'], '.2f')} ms "
                  f"({running['queue_at_holds']['still_running']} still running at the release)", flush=True)
    return rows


def parse_variant(text, ap):
    """'label;server:K=V,K=V;trainer:K=V' -> (label, server env, trainer env). GPUSLICE_BENCH_UNMANAGED=1
    in a member's list runs that member without gpuslice (with the rest of its list as its
    environment: CUDA_MPS_CLIENT_PRIORITY=1, say, for the MPS server's own priorities alone)."""
    label, *parts = text.split(";")
    envs = {"server": {}, "trainer": {}}
    for part in parts:
        role, _, assignments = part.partition(":")
        if role not in envs or not assignments:
            ap.error(f"--variant {text!r}: expected LABEL;server:K=V,...;trainer:K=V,...")
        for assignment in assignments.split(","):
            key, eq, value = assignment.partition("=")  # GPUSLICE_BENCH_LIMITS's value holds '=' itself
            if not eq or not key.startswith(("GPUSLICE_", "CUDA_MPS_")):
                ap.error(f"--variant {text!r}: {assignment!r} is not GPUSLICE_NAME=value or CUDA_MPS_NAME=value")
            envs[role][key] = value
    if not label or " " in label:
        ap.error(f"--variant {text!r}: the label must be one word")
    return label, envs["server"], envs["trainer"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build/lib/libgpuslice.so")
    ap.add_argument("--cli", default="build/bin/gpuslice")
    ap.add_argument("--launcher", choices=("preload", "cli"), default="preload",
                    help="start gpuslice processes with LD_PRELOAD and variables, or with `gpuslice run`")
    ap.add_argument("--out", default=None, help="output directory (default $OUT, else ./priority-out)")
    ap.add_argument("--seconds", type=float, default=25.0, help="measured seconds per configuration")
    ap.add_argument("--alone-seconds", type=float, default=None,
                    help="measured seconds of the trainer alone and beside an idle high (default --seconds): "
                         "a throughput needs less time than a tail")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--loads", default="30,60", help="server loads in percent of the GPU when alone")
    ap.add_argument("--server-batch", type=int, default=None,
                    help="sequences per request (default 32; 8 with --server-eager)")
    ap.add_argument("--server-tokens", type=int, default=128)
    ap.add_argument("--server-eager", action="store_true",
                    help="the server launches its forward pass kernel by kernel (host-bound requests: the GPU "
                         "is busy about a quarter of a request's time) instead of replaying one CUDA graph")
    ap.add_argument("--trainer-batch", type=int, default=8)
    ap.add_argument("--trainer-tokens", type=int, default=512)
    ap.add_argument("--trainer-sync-every", type=int, default=1, metavar="N",
                    help="the trainer reads its loss (waits for the GPU) every N steps instead of every step, "
                         "so that with a larger --trainer-batch it keeps the GPU busier alone (the aggregate "
                         "device-busy goal); steps count as done when the read after them returns")
    ap.add_argument("--calibrate-requests", type=int, default=200)
    ap.add_argument("--drain-seconds", type=float, default=10.0,
                    help="time after the window to serve requests that arrived in it")
    ap.add_argument("--ready-timeout", type=float, default=180.0, help="seconds allowed for start-up and warm-up")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds per load (server alone, then each configuration), interleaved; the table pools "
                         "each configuration's rounds (the trainer alone is measured once)")
    ap.add_argument("--control", action="store_true",
                    help="measure the server alone again at the end of each round: the ratios of two runs of "
                         "the same thing, the noise floor of the others")
    ap.add_argument("--paired", action="store_true",
                    help="instead of the five configurations: per load one server and one trainer for --seconds, "
                         "the trainer paused every other phase; the server with the trainer against itself "
                         "without it (priorities, and un-managed unless --only-priorities)")
    ap.add_argument("--phase-seconds", type=float, default=1.5,
                    help="--paired, --conservation: length of a phase (short phases: a slow stretch of the host "
                         "falls on both sides of more pairs)")
    ap.add_argument("--settle-seconds", type=float, default=0.4,
                    help="--paired, --conservation: left out at the start of each phase (the trainer ending its "
                         "step, a neighbour's new priority reaching it)")
    ap.add_argument("--idle-rounds", type=int, default=1, metavar="N",
                    help="also measure the trainer beside an idle high tenant in N alternated rounds with the "
                         "trainer alone, beside the idle process un-managed, and alone under gpuslice at low "
                         "(--alone-seconds each; where its cost comes from)")
    ap.add_argument("--idle-only", action="store_true",
                    help="measure the trainer alone and beside an idle high tenant (and --idle-rounds) only")
    ap.add_argument("--conservation", action="store_true",
                    help="also measure the in-flight bound's cost within one trainer process: beside an idle "
                         "container switched between high and low every --phase-seconds with `gpuslice set` "
                         "(needs --cli)")
    ap.add_argument("--only-priorities", action="store_true",
                    help="measure the alone baselines and the priority configurations only")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL;server:K=V,..;trainer:K=V,..",
                    help="one more priorities configuration with these variables for the server (high) and the "
                         "trainer (low), e.g. 'grace1ms;server:GPUSLICE_PRIORITY_GRACE=1ms' (repeatable); "
                         "bench keys: GPUSLICE_BENCH_UNMANAGED=1 (that member without gpuslice), "
                         "GPUSLICE_BENCH_LIMITS=K=V+K=V (lines of its limits file), GPUSLICE_BENCH_LIB=PATH "
                         "(another build of the library, with --launcher preload)")
    ap.add_argument("--mps", action="store_true",
                    help="run every configuration under an MPS control daemon started for the run (private pipe "
                         "and log directories; stopped at the end)")
    ap.add_argument("--mps-low-threads", type=int, default=0, metavar="P",
                    help="--mps: the operator's active-thread percentage for the low trainer "
                         "(GPUSLICE_MPS_LOW_THREADS=P in a limits file for the managed processes)")
    # Worker-side options.
    ap.add_argument("--worker", choices=("server", "trainer", "calibrate", "idle"), help=argparse.SUPPRESS)
    ap.add_argument("--report", help=argparse.SUPPRESS)
    ap.add_argument("--ready-file", help=argparse.SUPPRESS)
    ap.add_argument("--go-file", help=argparse.SUPPRESS)
    ap.add_argument("--go-timeout", type=float, default=300.0, help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--cpus", default="", help=argparse.SUPPRESS)
    ap.add_argument("--cpu-offset", type=int, default=0,
                    help="move every pinned CPU up by this many (runs side by side on one host, one per GPU)")
    ap.add_argument("--pause-file", help=argparse.SUPPRESS)
    ap.add_argument("--mirror-phase", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.variants = [parse_variant(v, ap) for v in args.variant]
    if args.server_batch is None:
        args.server_batch = 8 if args.server_eager else 32
    if args.repeat < 1:
        ap.error(f"--repeat {args.repeat}: at least 1")
    if args.trainer_sync_every < 1:
        ap.error(f"--trainer-sync-every {args.trainer_sync_every}: at least 1")
    if args.mps_low_threads and not (args.mps and 1 <= args.mps_low_threads <= 100):
        ap.error(f"--mps-low-threads {args.mps_low_threads}: 1-100, with --mps")
    if args.paired and args.control:
        ap.error("--paired measures the server against itself: --control does not apply")
    if (args.paired or args.conservation) and not 0 <= args.settle_seconds < args.phase_seconds <= args.seconds / 2:
        ap.error(f"--paired and --conservation: need 0 <= --settle-seconds ({args.settle_seconds:g}) < --phase-seconds "
                 f"({args.phase_seconds:g}) <= half of --seconds ({args.seconds:g})")
    if args.worker:
        worker(args)
        return 0
    try:
        return main_parent(args)
    except RuntimeError as e:
        print(f"priority_bench: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
