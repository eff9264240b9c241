#!/usr/bin/env python3
"""Accuracy of the compute limiter on a real GPU (docs/compute-limiter.md), hooked vs un-hooked in one run.

  python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out DIR
      [--seconds 10] [--schedule 100,20,100,50,100,80,20,100] [--workloads matmul,tiny,train]
      [--cli build/bin/gpuslice] [--cpus auto] [--tolerance 3] [--kernel-timeline build/gpu/libkernel_timeline.so]

The GPU-time check of docs/compute-limiter.md, in about 7 minutes on one GPU:

  python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out $OUT/accuracy \
      --seconds 3 --schedule 100,20,100,30,100,50,100,80,100 \
      --workloads decode,matmul,graph,mix,long40,train

Per workload:
  1. an un-hooked process (no LD_PRELOAD) measures its throughput for --seconds;
  2. ONE process under the library runs through the schedule of limits, each phase lasting
     1 s + --seconds: the script changes the limit live with `gpuslice set --compute` at each phase
     start, and measures the phase's last --seconds (the first second is the change settling);
     limit 100 means unlimited;
  3. a second un-hooked process.
Each limited phase's throughput is divided by the mean of the nearest unlimited phases before and
after it in the same process (same process, same memory layout, same CPU: the ±10-20% that
separate Python processes differ by does not enter). A limit caps GPU time, so the expected ratio
is the limit over the share of time the device was busy in the neighbouring unlimited phases
(NVML utilization), at most 1: a device-bound workload (busy ~100%) is expected at the limit and
passes within ±--tolerance points (default 3); one busy less than the limit (a launch-bound decode
loop) is expected at 1 and passes at 0.9 or more; in between, within ±--tolerance of the expected
ratio. Without NVML the expected ratio is the limit. Beside the verdict, each row says whether the
phase's GPU time (NVML utilization: the share of time a kernel of it ran) is within ±--tolerance
points of the limit: the two differ where the SM clock does (a device-bound phase below the power
cap boosts higher than its unlimited neighbours at it, so it does more work per GPU second), and
NVML's sampled utilization of a duty-cycled device scatters by a few points.
The unlimited phases are compared with the un-hooked processes too (the hook at limit 100 must cost
nothing), and every ratio is also given against the un-hooked processes.

With --kernel-timeline build/gpu/libkernel_timeline.so (bench/gpu/kernel_timeline.cpp, built by
tests/gpu/run.sh), every measured process also records when each of its kernels ran, from the
device's own timestamps (CUPTI's concurrent-kernel activity; overlapping kernels count once), and
each limited phase gets a second verdict: its kernel time ÷ the neighbouring unlimited phases',
judged against the same expected ratio and tolerance. That is the limit's own definition (GPU time
over wall time), which the throughput ratio equals only while the SM clock stays where it was in
the unlimited phases. A 2p workload's ratios are the two processes' sum: the companion counts its iterations
from its first step until the measured one stops it, summed at the measured one's marks; its output
is in logs/<run>.json.companion.log, and its limiter line joins the run's as "companion: ...".

Under MPS (--mps: an MPS control daemon started for the run, as bench/gpu/mps_run.py's
start_mps does, and quit after it) with --mps-compute time|threads: the operator's limits-file key
GPUSLICE_MPS_COMPUTE, written to a file every hooked process reads (GPUSLICE_LIMITS_FILE), as the
library trusts it only from there. `time`: the same phased run. `threads`: a compute limit is the
client's SM share (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), which the driver reads once when the process
starts, so a live change cannot move it: one process per distinct limit of the schedule (the
unlimited phases' too) is started, warmed up, and the phases then run in turns: the process of each
phase's limit measures --seconds after a 0.2 s pre-roll while the others wait idle (an idle MPS
client holds no SMs); a 2p workload's companion takes the same turns. Ratios are then between
processes (pinned to the same CPUs), the rest as above (no 1 s windows, settling or kernel timeline).
bench/gpu/compute_modes_round.sh runs the shapes in three modes (time-sliced, MPS + GPU time, MPS +
SM share) and prints one table (--modes-table).

Throughput is iterations per second of GPU time from CUDA events recorded every k iterations (no
added host synchronisation). NVML is sampled by this (un-hooked) parent every 100 ms: per phase the
mean device utilization (NVML's "a kernel was running" fraction) and SM clock. Occupancy ratio =
utilization of the phase ÷ utilization of the neighbouring unlimited phases: the definition in docs/compute-limiter.md
for device-bound work; for launch-bound work the device is never fully busy, so throughput is the
measure there.

Settling: for every change into a limited phase (in the default schedule 100→20, 100→50, 100→80
and 80→20), the time after the `gpuslice set` until every 1 s window stays within ±5 points of the
new limit (leading windows [t, t+1 s]; a trailing 1 s moving average needs ~1 s more by construction).

A schedule that repeats a limit (e.g. --seconds 2 --schedule 100,80,100,80,...,100) also gets the
ratio pooled over that limit's phases: short phases interleaved with unlimited ones cancel slow
drifts of the host's speed, which decide single 10 s phases of the launch-bound loops on a VM.

Workloads:
  matmul  4096^3 bf16 torch.matmul into a preallocated output (device-bound, ~0.2 ms per kernel)
  tiny    x.add_(1) on a 1024-element tensor in a tight Python loop (a stream of tiny kernels,
          launch-bound: its throughput is the CPU's launch rate)
  long10, long40, long100   one spin kernel of 10 / 40 / 100 ms at a time, each waited for
  burst   torch.cuda._sleep kernels of ~20 us in a tight loop (small kernels launched faster than
          they run: the queue fills; not in the default set)
  decode  batch-1 greedy generation with a KV cache on a GPT-2-small-shaped model (transformers'
          GPT2LMHeadModel from a config, random weights: nothing is downloaded), one token per
          iteration read back to the host as generation does; the cache restarts every 128 tokens.
          Launch-bound: the device is busy a few percent of the time
  graph   a CUDA graph of 8 4096^3 bf16 matmuls, replayed
  mix     big-then-tiny: one 4096^3 bf16 matmul, then 16 tiny elementwise kernels
  streams4  four threads, each launching a 4096^3 bf16 matmul on its own stream per step
  threads4  the same four threads, all launching on the current stream (not in the default set)
  streams4seq  one thread launching the four matmuls on four streams per step (not in the default set)
  compile   torch.compile (Inductor, Triton kernels) of an MLP forward in fp16
  cluster   a spin kernel of ~0.2 ms on every SM launched in clusters of two with cudaLaunchKernelEx
            (build/gpu/libcluster_spin.so from bench/gpu/cluster_spin.cu; tests/gpu/run.sh builds it)
  matmul2p  matmul in two processes of one container (same state directory and limit): the
            measured one and a companion it starts; the limit holds both together, and the ratios
            are of their summed iterations (the measured one's own marks are kept as own_timeline)
  graph2p   the same with the CUDA-graph replay (eight matmuls per launch)
  train   a small MLP training step (3 Linear layers, GELU, MSE, AdamW foreach); backward kernels
          are launched from PyTorch's autograd thread, so two threads launch concurrently

Every measured process of a workload is pinned to the same CPUs (--cpus; default "auto": one CPU
for matmul and tiny, two for train, whose autograd thread launches too). Why: on a virtual machine
(the device machines are KVM guests) a launch-bound thread that sleeps through a throttled phase
often wakes on another vCPU and then launches ~25% slower for the rest of its window, an effect of
the host's scheduling that no sleep-based limiter can avoid; pinning takes it out of base and
limited runs alike. Measured on the H100 guest, tiny kernels at 80%: 0.792 pinned to one vCPU,
0.703 unpinned, 0.747 on four vCPUs (bench/results/h100-2026-11-23-b/pinning.txt).
Default total: about 2 minutes per workload.

Outputs in --out: compute_accuracy.csv (one row per limited phase), compute_accuracy.json (every
run, phase and NVML sample), logs/<run>.log (stdout+stderr of each process).
"""
import argparse
import bisect
import csv
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

# Variables that would change what a run measures if inherited from the caller's environment.
CONTROLLED_PREFIXES = ("GPUSLICE_", "CUDA_DEVICE_MEMORY_", "TENSOR_FUSION_", "HCS_", "VCUDA_")
CONTROLLED_NAMES = ("LD_PRELOAD", "CUDA_DEVICE_SM_LIMIT", "PFLOG", "LIBCUDA_LOG_LEVEL")

TOLERANCE_POINTS = 3.0  # --tolerance
SETTLE_POINTS = 5.0  # the band a 1 s window must reach after a change
LAUNCH_BOUND_FLOOR = 0.9  # a workload busy less than its limit keeps at least this share of its speed
AUTO_CPUS = {"matmul": "4", "tiny": "4", "burst": "4", "train": "4,5", "long10": "4", "long40": "4", "long100": "4",
             "decode": "4", "graph": "4", "mix": "4", "streams4": "4-7", "threads4": "4-7", "streams4seq": "4",
             "compile": "4", "cluster": "4", "matmul2p": "4,5", "graph2p": "4,5"}  # --cpus auto (see the docstring)
# Workloads whose speed keeps rising for seconds after they start (the decode loop ran its first
# unlimited phase at 40-60% of its later rate, which judged the first limited phase against it).
MIN_WARMUP_S = {"decode": 8.0}
EVENTS_PER_SECOND = 200  # timeline resolution; k iterations per event are chosen from the warm-up rate
KERNEL_BIN_S = 0.01  # --kernel-timeline: the device's kernel time is kept per 10 ms of host time


# ---------------------------------------------------------------------------------------------
# Worker: runs inside the measured process.
# ---------------------------------------------------------------------------------------------

def build_workload(name):
    import torch

    if name == "matmul":
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)

        def step():
            torch.matmul(a, b, out=out)

        return step, 2.0 * 4096 ** 3
    if name == "tiny":
        x = torch.zeros(1024, device="cuda")

        def step():
            x.add_(1.0)

        return step, None
    if name == "burst":
        # ~20 us spin kernels launched faster than they run: the queue fills, and only the
        # limiter's launch cap keeps a window from queueing far more than it can run in time.
        cycles = 40_000  # SM clock cycles: ~20 us at the H100's 1980 MHz

        def step():
            torch.cuda._sleep(cycles)

        return step, None
    if name.startswith("long"):
        # One long spin kernel at a time (long10, long40, long100: milliseconds at the H100's
        # 1980 MHz boost clock), each waited for: a window admits whole kernels only.
        cycles = int(name[4:]) * 1_980_000

        def step():
            torch.cuda._sleep(cycles)
            torch.cuda.synchronize()

        return step, None
    if name == "graph":
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the capture, as PyTorch asks
            torch.matmul(a, b, out=out)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(8):
                torch.matmul(a, b, out=out)

        def step():
            graph.replay()

        return step, 8 * 2.0 * 4096 ** 3
    if name == "mix":
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
        x = torch.zeros(1024, device="cuda")

        def step():
            torch.matmul(a, b, out=out)
            for _ in range(16):
                x.add_(1.0)

        return step, 2.0 * 4096 ** 3
    if name in ("streams4", "threads4", "streams4seq"):
        # Four threads, each launching a 4096^3 bf16 matmul on its own stream per step; the step
        # joins their streams into the current one, so the timeline's events cover all four.
        # threads4: the same four threads all on the current stream (threads without streams);
        # streams4seq: one thread launching the four on the four streams (streams without threads).
        import threading
        n = 4
        mats = [(torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16),
                 torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16),
                 torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)) for _ in range(n)]
        if name == "threads4":
            streams = [torch.cuda.current_stream()] * n
        else:
            streams = [torch.cuda.Stream() for _ in range(n)]
        if name == "streams4seq":
            current = torch.cuda.current_stream()
            for s in streams:
                s.wait_stream(current)

            def step_seq():
                events = []
                for i, (a, b, out) in enumerate(mats):
                    with torch.cuda.stream(streams[i]):
                        torch.matmul(a, b, out=out)
                        ev = torch.cuda.Event()
                        ev.record(streams[i])
                    events.append(ev)
                for ev in events:
                    current.wait_event(ev)

            return step_seq, n * 2.0 * 4096 ** 3
        go = [threading.Semaphore(0) for _ in range(n)]
        done = threading.Semaphore(0)
        events = [None] * n

        def launcher(i):
            a, b, out = mats[i]
            while True:
                go[i].acquire()
                with torch.cuda.stream(streams[i]):
                    torch.matmul(a, b, out=out)
                    ev = torch.cuda.Event()
                    ev.record(streams[i])
                events[i] = ev
                done.release()

        for i in range(n):
            threading.Thread(target=launcher, args=(i,), daemon=True).start()
        current = torch.cuda.current_stream()
        for s in streams:
            s.wait_stream(current)

        def step():
            for g in go:
                g.release()
            for _ in range(n):
                done.acquire()
            for ev in events:
                current.wait_event(ev)

        return step, n * 2.0 * 4096 ** 3
    if name == "compile":
        # torch.compile (Inductor: Triton kernels for the fused pointwise parts) of an MLP forward.
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(2048, 8192), torch.nn.GELU(),
                                    torch.nn.Linear(8192, 2048), torch.nn.LayerNorm(2048)).cuda().half().eval()
        compiled = torch.compile(model)
        x = torch.randn(4096, 2048, device="cuda", dtype=torch.float16)

        def step():
            with torch.no_grad():
                compiled(x)

        return step, None
    if name == "cluster":
        # Thread-block clusters launched with cudaLaunchKernelEx (bench/gpu/cluster_spin.cu), ~0.2 ms
        # of spinning on every SM per launch.
        import ctypes
        path = os.environ.get("GS_CLUSTER_LIB") or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "gpu", "libcluster_spin.so")
        spin = ctypes.CDLL(path).cluster_spin
        spin.argtypes = [ctypes.c_longlong, ctypes.c_void_p]
        cycles = 400_000

        def step():
            rc = spin(cycles, torch.cuda.current_stream().cuda_stream)
            if rc != 0:
                raise SystemExit(f"cluster launch failed: cudaError {rc}")

        return step, None
    if name == "decode":
        return build_decode(torch), None
    if name == "train":
        torch.manual_seed(0)
        torch.backends.cuda.matmul.allow_tf32 = True
        model = torch.nn.Sequential(
            torch.nn.Linear(1024, 4096), torch.nn.GELU(),
            torch.nn.Linear(4096, 4096), torch.nn.GELU(),
            torch.nn.Linear(4096, 1024)).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        x = torch.randn(512, 1024, device="cuda")
        y = torch.randn(512, 1024, device="cuda")

        def step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()

        return step, None
    raise SystemExit(f"unknown workload {name!r}")


def build_decode(torch, tokens_per_sequence=128):
    """Batch-1 greedy decoding with a KV cache: one step is one token, read back as generate() does."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, n_positions=1024)
    model = GPT2LMHeadModel(config).to("cuda", dtype=torch.float16).eval()
    state = {"past": None, "token": None, "length": 0}

    def restart():
        state["past"] = None
        state["token"] = torch.tensor([[464]], device="cuda")
        state["length"] = 0

    restart()

    @torch.inference_mode()
    def step():
        if state["length"] >= tokens_per_sequence:
            restart()
        out = model(input_ids=state["token"], past_key_values=state["past"], use_cache=True)
        state["past"] = out.past_key_values
        state["token"] = out.logits[:, -1:].argmax(-1)
        state["length"] += 1
        int(state["token"][0, 0])  # the host reads each token (stopping criteria, streaming)

    return step


def expected_ratio(limit, unlimited_util_pct):
    """Throughput ratio a limit of `limit`% of GPU time leaves a workload whose unlimited phases kept
    the device busy `unlimited_util_pct`% of the time (None: unknown, taken as fully busy)."""
    if unlimited_util_pct is None or unlimited_util_pct <= 0:
        return limit / 100.0
    return min(1.0, limit / min(100.0, unlimited_util_pct))


def phase_passes(ratio, expected, tolerance_points=None):
    """Below its limit a workload keeps LAUNCH_BOUND_FLOOR of its speed; held to it, it is within
    ±tolerance points (default --tolerance) of the expected ratio."""
    if tolerance_points is None:
        tolerance_points = TOLERANCE_POINTS
    if expected >= 0.999:
        return ratio >= LAUNCH_BOUND_FLOOR
    return abs(ratio - expected) * 100 <= tolerance_points


def gpu_time_within(util_pct, limit, expected, tolerance_points=None):
    """Whether a phase held to its limit (expected ratio below 1) kept the device busy (NVML
    utilization) within ±tolerance points of the limit; None where that does not apply (work below
    its limit, or no NVML)."""
    if tolerance_points is None:
        tolerance_points = TOLERANCE_POINTS
    if expected >= 0.999 or util_pct is None:
        return None
    return abs(util_pct - limit) <= tolerance_points


def kernel_time_pct(bins, a, b, width=KERNEL_BIN_S):
    """The share of [a, b] (seconds from the run's t0) in which a kernel of the process ran, percent,
    from the busy nanoseconds of each `width` bin (--kernel-timeline); bins cut by a or b count pro
    rata. None without bins."""
    if not bins or b <= a:
        return None
    busy = 0.0
    for i in range(max(0, int(a // width)), min(len(bins) - 1, int(b // width)) + 1):
        lo, hi = max(a, i * width), min(b, (i + 1) * width)
        if hi > lo:
            busy += bins[i] / 1e9 * (hi - lo) / width
    return 100.0 * busy / (b - a)


def parse_cpus(text):
    cpus = set()
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus.update(range(int(lo), int(hi) + 1))
        elif part:
            cpus.add(int(part))
    return cpus


def shift_cpus(cpus, offset):
    """`cpus` ("4" or "4-7" or "4,5") moved up by `offset`, so runs on two GPUs of one host keep
    to cores of their own."""
    if not cpus or not offset:
        return cpus
    return ",".join(str(c + offset) for c in sorted(parse_cpus(cpus)))


def pin(cpus):
    usable = parse_cpus(cpus) & os.sched_getaffinity(0)
    if usable:
        os.sched_setaffinity(0, usable)


def worker(args):
    if args.cpus == "auto":
        args.cpus = shift_cpus(AUTO_CPUS.get(args.workload, ""), args.cpu_offset)
    if args.cpus and not args.turns:  # turns: pinned once warmed up (the processes start side by side)
        pin(args.cpus)
    companion = None
    if args.workload.endswith("2p"):
        # A second process of the same container (same environment: library, state directory,
        # limit) running the same workload for the whole run: the limit holds both together.
        args.workload = args.workload[:-2]
        turns = ["--turns", str(args.turns), "--go", args.go] if args.turns else []
        turns += ["--ready-file", args.report + ".companion.ready"]
        # Outside turns the companion records its iterations from its first step until the measured
        # one stops it (a stop file), so the container's sum is measured, not one process's share.
        stop = [] if args.turns else ["--stop-file", args.report + ".companion.stop"]
        # Its output (the library's exit line: windows, pauses, clock scaling) goes to a log of its
        # own beside the report; the parent adds its limiter line to the run's (call 4 of
        # gpu-2026-11-29-e had only the measured process's, 38 of the pair's windows).
        with open(args.report + ".companion.log", "w") as companion_log:
            companion = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker", args.workload, "--seconds",
                 str(args.seconds if args.turns else args.seconds + args.warmup + 60), "--warmup", "1",
                 "--report", args.report + ".companion", "--cpus", args.cpus] + turns + stop,
                stdout=companion_log, stderr=subprocess.STDOUT)
    timeline_lib = None
    if args.kernel_timeline:
        import ctypes
        timeline_lib = ctypes.CDLL(os.path.abspath(args.kernel_timeline))
        timeline_lib.kt_now.restype = ctypes.c_uint64
        timeline_lib.kt_kernels.restype = ctypes.c_uint64
        timeline_lib.kt_dropped.restype = ctypes.c_uint64
        rc = timeline_lib.kt_start()  # before the first CUDA call
        if rc != 0:  # the throughput verdict stands without it
            print(f"{args.kernel_timeline}: CUPTI's kernel activity could not start (CUptiResult {rc}); "
                  "no kernel time", file=sys.stderr, flush=True)
            timeline_lib = None
    import torch

    torch.cuda.init()
    step, flops = build_workload(args.workload)
    if companion is not None:
        # Both processes of the container start before this one measures: for turns, before the
        # parent starts the first; otherwise the companion's count covers this one's time 0.
        deadline = time.monotonic() + 180
        while (not os.path.exists(args.report + ".companion.ready") and companion.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.05)
    step()
    torch.cuda.synchronize()

    # Warm-up: caches, cuBLAS heuristics and the limiter's first windows; also sizes k. A companion
    # (--stop-file) has none: its iterations count from here, so it covers the measured one's start.
    n = 0
    warmup = 0.0 if args.stop_file else max(args.warmup, MIN_WARMUP_S.get(args.workload, 0.0))
    t_end = time.monotonic() + warmup
    while time.monotonic() < t_end:
        step()
        n += 1
    torch.cuda.synchronize()
    k = max(1, int(n / warmup / EVENTS_PER_SECOND)) if warmup > 0 else 1

    # The queue is empty here, so the start event runs as soon as it is recorded: GPU time 0 is
    # host time t0 (CLOCK_MONOTONIC, shared with the parent for the settle test).
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.monotonic()
    kernel_origin = timeline_lib.kt_now() if timeline_lib else 0
    if args.ready_file:
        with open(args.ready_file + ".tmp", "w") as f:
            f.write(repr(t0))
        os.rename(args.ready_file + ".tmp", args.ready_file)
    if args.turns:
        report = {"workload": args.workload, "k": k, "turns": measure_turns(args, torch, step, k),
                  "preloaded": os.environ.get("LD_PRELOAD", ""),
                  "limit": os.environ.get("GPUSLICE_COMPUTE_LIMIT", "")}
        if companion is not None:
            companion.wait(timeout=60)
        with open(args.report, "w") as f:
            json.dump(report, f)
        return
    marks = []
    done = 0
    deadline = t0 + args.seconds
    while time.monotonic() < deadline and not (args.stop_file and os.path.exists(args.stop_file)):
        for _ in range(k):
            step()
        done += k
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        marks.append((ev, done))
    torch.cuda.synchronize()
    timeline = [[start.elapsed_time(ev) / 1000.0, it] for ev, it in marks]
    summed = None
    if companion is not None:
        summed = stop_companion(args.report + ".companion", companion, t0, timeline)
    gpu_seconds = timeline[-1][0]
    report = {
        "workload": args.workload,
        "iterations": done,
        "gpu_seconds": gpu_seconds,
        "throughput": done / gpu_seconds,
        "k": k,
        "t0_monotonic": t0,
        "timeline": timeline if summed is None else summed["timeline"],
        "preloaded": os.environ.get("LD_PRELOAD", ""),
        "limit": os.environ.get("GPUSLICE_COMPUTE_LIMIT", ""),
    }
    if summed is not None:  # the measured process's own marks, and where its companion's began
        report["own_timeline"] = timeline
        report["companion_from_s"] = summed["from_s"]
    if flops:
        report["tflops"] = flops * done / gpu_seconds / 1e12
    if timeline_lib:
        import ctypes
        count = int((time.monotonic() - t0) / KERNEL_BIN_S) + 2
        bins = (ctypes.c_uint64 * count)()
        rc = timeline_lib.kt_bins(ctypes.c_uint64(kernel_origin), ctypes.c_uint64(int(KERNEL_BIN_S * 1e9)),
                                  ctypes.c_uint32(count), bins)
        report["kernel_bins"] = list(bins)  # ns of each KERNEL_BIN_S from t0 in which a kernel ran
        report["kernel_records"] = {"kernels": timeline_lib.kt_kernels(), "dropped": timeline_lib.kt_dropped(),
                                    "flush_result": rc}
    with open(args.report, "w") as f:
        json.dump(report, f)


def stop_companion(path, companion, t0, timeline):
    """Stops a 2p workload's companion and returns {"timeline": the two processes' iterations summed at
    the measured one's marks (its time axis), "from_s": where the companion's marks began on it}, or
    None (the companion failed: its report says why in the run's log)."""
    with open(path + ".stop", "w"):
        pass
    try:
        companion.wait(timeout=60)
        with open(path) as f:
            other = json.load(f)
    except (subprocess.TimeoutExpired, OSError, ValueError) as e:
        print(f"companion: {e}; the measured process's own rate is reported", file=sys.stderr, flush=True)
        companion.kill()
        companion.wait()
        return None
    return sum_timelines(timeline, t0, other["timeline"], other["t0_monotonic"])


def sum_timelines(marks, t0, other_marks, other_t0):
    """`marks` ([seconds from t0, iterations]) plus `other_marks` (from other_t0), at `marks`' times."""
    other = Timeline(other_marks)
    shift = t0 - other_t0  # a time on the first axis is this much later on the other's
    # Counted from the first axis's time 0, as its own iterations are (a Timeline starts at 0, 0).
    before = other.iterations_at(shift)
    return {"timeline": [[t, it + other.iterations_at(t + shift) - before] for t, it in marks], "from_s": -shift}


TURN_PREROLL_S = 0.2  # --turns: unmeasured steps after a wait, before a turn's measured seconds


def measure_turns(args, torch, step, k):
    """--turns N: waits for <go>.<i> (the parent's signal) N times; each time runs TURN_PREROLL_S of
    steps, then measures --seconds as the single run does, then says <report>.turn<i> (done).
    Returns [monotonic start, monotonic end, iterations, GPU seconds] per turn."""
    if args.cpus:
        pin(args.cpus)
    turns = []
    for i in range(args.turns):
        go = f"{args.go}.{i}"
        given_up = time.monotonic() + 300  # the parent is gone
        while not os.path.exists(go):
            if time.monotonic() > given_up:
                raise SystemExit(f"no signal {go} in 300 s")
            time.sleep(0.002)
        preroll_end = time.monotonic() + TURN_PREROLL_S
        while time.monotonic() < preroll_end:
            step()
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.monotonic()
        done, last = 0, None
        while time.monotonic() < t0 + args.seconds:
            for _ in range(k):
                step()
            done += k
            last = torch.cuda.Event(enable_timing=True)
            last.record()
        torch.cuda.synchronize()
        turns.append([t0, time.monotonic(), done, start.elapsed_time(last) / 1000.0])
        with open(f"{args.report}.turn{i}", "w") as f:
            f.write("done\n")
    return turns


# ---------------------------------------------------------------------------------------------
# Parent: orchestrates the runs and evaluates them.
# ---------------------------------------------------------------------------------------------

def clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(CONTROLLED_PREFIXES) and k not in CONTROLLED_NAMES}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def limiter_lines(path):
    """The library's limiter and MPS lines of one process's log (none if it has no log)."""
    try:
        with open(path) as f:
            return [line.strip() for line in f if "compute limiter, device" in line or "MPS client" in line]
    except FileNotFoundError:
        return []


class Runner:
    def __init__(self, args):
        self.args = args
        self.lib = os.path.abspath(args.lib)
        self.logs = os.path.join(args.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.count = 0

    def start(self, workload, limit, seconds, ready_file=None, extra=()):
        """Starts one measured process; returns (process, report path, shared dir, log file)."""
        self.count += 1
        tag = f"{self.count:02d}-{workload}-{'base' if limit is None else f'limit{limit}'}"
        env = clean_env()
        shared = None
        if limit is not None:
            shared = tempfile.mkdtemp(prefix="gs-acc-")
            env["LD_PRELOAD"] = self.lib
            env["GPUSLICE_COMPUTE_LIMIT"] = str(limit)
            env["GPUSLICE_SHARED_DIR"] = shared
            env["GPUSLICE_LOG_LEVEL"] = "info"  # the limiter's statistics at exit
            if getattr(self.args, "mps_limits_file", None):
                env["GPUSLICE_LIMITS_FILE"] = self.args.mps_limits_file  # the operator's GPUSLICE_MPS_COMPUTE
        report = os.path.join(self.logs, tag + ".json")
        argv = [sys.executable, os.path.abspath(__file__), "--worker", workload,
                "--seconds", str(seconds), "--warmup", str(self.args.warmup), "--report", report,
                "--cpus", self.args.cpus, "--cpu-offset", str(getattr(self.args, "cpu_offset", 0))]
        if ready_file:
            argv += ["--ready-file", ready_file]
        argv += list(extra)
        if self.args.kernel_timeline:
            argv += ["--kernel-timeline", os.path.abspath(self.args.kernel_timeline)]
        log = open(os.path.join(self.logs, tag + ".log"), "w")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        return proc, report, shared, log, tag

    def finish(self, proc, report, shared, log, tag, timeout):
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = "timeout"
        log.close()
        if shared:
            shutil.rmtree(shared, ignore_errors=True)
        if rc != 0 or not os.path.exists(report):
            tail = open(os.path.join(self.logs, tag + ".log")).read()[-1500:]
            raise RuntimeError(f"run {tag} failed (rc={rc}):\n{tail}")
        with open(report) as f:
            data = json.load(f)
        data["tag"] = tag
        data["limiter_stats"] = limiter_lines(os.path.join(self.logs, tag + ".log"))
        data["limiter_stats"] += ["companion: " + line for line in limiter_lines(report + ".companion.log")]
        return data

    def run(self, workload, limit):
        seconds = self.args.seconds
        started = self.start(workload, limit, seconds)
        data = self.finish(*started, timeout=seconds + self.args.warmup + 120)
        print(f"  {data['tag']}: {data['throughput']:.1f} it/s"
              + (f" ({data['tflops']:.0f} TFLOP/s)" if "tflops" in data else ""), flush=True)
        return data


class Timeline:
    """(GPU seconds, iterations done) marks of one run, with interpolation between them."""

    def __init__(self, marks):
        self.times = [0.0] + [m[0] for m in marks]
        self.iters = [0] + [m[1] for m in marks]

    @property
    def end(self):
        return self.times[-1]

    def iterations_at(self, t):
        i = bisect.bisect_left(self.times, t)
        if i >= len(self.times):
            return self.iters[-1]
        if i == 0 or self.times[i] == self.times[i - 1]:
            return self.iters[i]
        t0, t1 = self.times[i - 1], self.times[i]
        return self.iters[i - 1] + (self.iters[i] - self.iters[i - 1]) * (t - t0) / (t1 - t0)

    def throughput(self, a, b):
        return (self.iterations_at(b) - self.iterations_at(a)) / (b - a)


class NvmlSampler:
    """Device utilization, SM clock and power every 100 ms, read through NVML by this parent process
    (which has no LD_PRELOAD, so it sees the real device). Also every utilization sample the driver
    took (nvmlDeviceGetSamples: each the share of its own period a kernel ran, with the period's end),
    which cover the run without gaps or repeats, unlike the latest value read every 100 ms."""

    def __init__(self, index=0, period=0.1):
        import ctypes
        import threading
        self.samples = []  # (monotonic, util %, sm MHz, watts, clock event reasons bit mask)
        self.driver_samples = []  # (monotonic end of the driver's sample period, util %)
        self.ok = False
        try:
            self.nvml = ctypes.CDLL("libnvidia-ml.so.1")
            if self.nvml.nvmlInit_v2() != 0:
                return
            self.handle = ctypes.c_void_p()
            if self.nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle)) != 0:
                return
        except OSError:
            return
        self.ok = True
        self.period = period
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        import ctypes

        class Utilization(ctypes.Structure):
            _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

        class Sample(ctypes.Structure):  # nvmlSample_t: CPU timestamp in us, then an 8-byte value
            _fields_ = [("timestamp", ctypes.c_ulonglong), ("value", ctypes.c_ulonglong)]

        util = Utilization()
        clock = ctypes.c_uint()
        milliwatts = ctypes.c_uint()
        reasons = ctypes.c_ulonglong()
        buffer = (Sample * 256)()
        value_type = ctypes.c_int()
        last_seen = ctypes.c_ulonglong(0)
        while not self.stop.wait(self.period):
            count = ctypes.c_uint(len(buffer))
            # NVML_GPU_UTILIZATION_SAMPLES = 1; values are unsigned ints (NVML_VALUE_TYPE_UNSIGNED_INT = 1).
            if self.nvml.nvmlDeviceGetSamples(self.handle, 1, last_seen, ctypes.byref(value_type),
                                              ctypes.byref(count), buffer) == 0 and value_type.value == 1:
                offset = time.time() - time.monotonic()
                for i in range(min(count.value, len(buffer))):
                    if buffer[i].timestamp > last_seen.value:
                        self.driver_samples.append((buffer[i].timestamp / 1e6 - offset, buffer[i].value & 0xffffffff))
                if count.value:
                    last_seen.value = max(last_seen.value, max(buffer[i].timestamp for i in range(count.value)))
            if self.nvml.nvmlDeviceGetUtilizationRates(self.handle, ctypes.byref(util)) != 0:
                continue
            self.nvml.nvmlDeviceGetClockInfo(self.handle, 1, ctypes.byref(clock))  # NVML_CLOCK_SM
            self.nvml.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(milliwatts))
            self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle, ctypes.byref(reasons))
            self.samples.append((time.monotonic(), util.gpu, clock.value, milliwatts.value / 1000.0,
                                 reasons.value))

    def close(self):
        if self.ok:
            self.stop.set()
            self.thread.join()

    def gpu_time(self, t_from, t_to):
        """The share of [t_from, t_to] a kernel ran (percent), from the driver's own samples whose
        periods lie inside it, each weighted by its period; None without two such samples."""
        samples = sorted(self.driver_samples)
        total = weighted = 0.0
        for (t0, _), (t1, value) in zip(samples, samples[1:]):
            if t0 >= t_from and t1 <= t_to:
                total += t1 - t0
                weighted += (t1 - t0) * value
        return weighted / total if total > 0 else None

    def mean(self, t_from, t_to):
        """(mean util %, mean SM MHz, mean W) of the samples in [t_from, t_to], or Nones."""
        inside = [x for x in self.samples if t_from <= x[0] <= t_to]
        if not inside:
            return None, None, None
        n = len(inside)
        return (sum(x[1] for x in inside) / n, sum(x[2] for x in inside) / n, sum(x[3] for x in inside) / n)


def set_limit(args, shared, limit):
    value = "none" if limit >= 100 else str(limit)
    cp = subprocess.run([args.cli, "set", "--compute", value, "--shared-dir", shared], env=clean_env(),
                        capture_output=True, text=True, timeout=30)
    if cp.returncode != 0:
        raise RuntimeError(f"gpuslice set --compute {value} failed (rc={cp.returncode}): {cp.stdout}{cp.stderr}")


def phased_run(args, runner, workload):
    """One hooked process through args.schedule; returns (data, [(limit, change monotonic)])."""
    phase = args.settle + args.seconds
    total = phase * len(args.schedule)
    ready = os.path.join(tempfile.mkdtemp(prefix="gs-ready-"), "ready")
    proc, report, shared, log, tag = runner.start(workload, args.schedule[0], total, ready_file=ready)
    changes = []
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(ready):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"run {tag} never started measuring")
            time.sleep(0.05)
        with open(ready) as f:
            t0 = float(f.read())
        changes.append((args.schedule[0], t0))
        for i, limit in enumerate(args.schedule[1:], start=1):
            time.sleep(max(0.0, t0 + i * phase - time.monotonic()))
            at = time.monotonic()
            set_limit(args, shared, limit)
            changes.append((limit, at))
            print(f"    t={at - t0:6.1f} s: limit {limit}", flush=True)
    except BaseException:
        proc.kill()
        proc.wait()
        log.close()
        shutil.rmtree(shared, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(os.path.dirname(ready), ignore_errors=True)
    data = runner.finish(proc, report, shared, log, tag, timeout=total + args.warmup + 120)
    return data, changes


def turns_run(args, runner, sampler, workload):
    """--mps-compute threads: one process per distinct limit of the schedule, started at once and
    warmed up, then each phase is a turn of its limit's process (see the docstring). Returns the runs'
    data with "phases" as phased_run's analysis has them (start/end: seconds from the first turn)."""
    limits = sorted(set(args.schedule))
    go_dir = tempfile.mkdtemp(prefix="gs-turns-")
    started = {}
    try:
        for limit in limits:
            ready = os.path.join(go_dir, f"ready-{limit}")
            extra = ["--turns", str(args.schedule.count(limit)), "--go", os.path.join(go_dir, f"go-{limit}")]
            started[limit] = (runner.start(workload, limit, args.seconds, ready_file=ready, extra=extra), ready)
        deadline = time.monotonic() + 180
        for limit, ((proc, _, _, _, tag), ready) in started.items():
            while not os.path.exists(ready):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"run {tag} never got ready")
                time.sleep(0.05)
        companion = workload.endswith("2p")
        turn_of = {limit: 0 for limit in limits}
        for limit in args.schedule:
            (proc, report, _, _, tag), _ = started[limit]
            i = turn_of[limit]
            turn_of[limit] += 1
            with open(os.path.join(go_dir, f"go-{limit}.{i}"), "w") as f:
                f.write("go\n")
            waits = [f"{report}.turn{i}"] + ([f"{report}.companion.turn{i}"] if companion else [])
            deadline = time.monotonic() + args.seconds + 60
            while not all(os.path.exists(w) for w in waits):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"run {tag} did not finish turn {i}")
                time.sleep(0.005)
            print(f"    turn: limit {limit} ({tag}, turn {i})", flush=True)
        results = {limit: runner.finish(*started[limit][0], timeout=120) for limit in limits}
    except BaseException:
        for (proc, _, shared, log, _), _ in started.values():
            proc.kill()
            proc.wait()
            log.close()
            if shared:
                shutil.rmtree(shared, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(go_dir, ignore_errors=True)
    phases = []
    turn_of = {limit: 0 for limit in limits}
    origin = min(r["turns"][0][0] for r in results.values())
    for limit in args.schedule:
        t_from, t_to, iterations, gpu_seconds = results[limit]["turns"][turn_of[limit]]
        turn_of[limit] += 1
        util, clock, watts = sampler.mean(t_from, t_to) if sampler.ok else (None,) * 3
        phases.append({"limit": limit, "start": t_from - origin, "end": t_to - origin, "from": t_from - origin,
                       "it_s": iterations / gpu_seconds if gpu_seconds > 0 else 0.0,
                       "util": util, "sm_mhz": clock, "watts": watts,
                       "gpu_time_pct": sampler.gpu_time(t_from, t_to) if sampler.ok else None, "kernel_pct": None})
    stats = [line for r in results.values() for line in r.get("limiter_stats", [])]
    return {"workload": workload, "turns_by_limit": {str(k): v["turns"] for k, v in results.items()},
            "tags": {str(k): v["tag"] for k, v in results.items()}, "limiter_stats": stats, "phases": phases,
            "mps_compute": "threads"}


def accuracy(args, runner, sampler):
    rows, runs, transitions = [], [], []
    for workload in args.workloads:
        print(f"{workload}:", flush=True)
        unhooked = [runner.run(workload, None)] if args.unhooked else []
        if args.mps_compute == "threads":
            data = turns_run(args, runner, sampler, workload)
        else:
            data, changes = phased_run(args, runner, workload)
        for line in data.get("limiter_stats", []):
            print(f"  {line}", flush=True)
        if args.unhooked:
            unhooked.append(runner.run(workload, None))
        runs += unhooked + [data]
        unhooked_it_s = sum(r["throughput"] for r in unhooked) / len(unhooked) if unhooked else None
        if "phases" in data:  # turns_run measured them
            data["unhooked_it_s"] = unhooked_it_s
            workload_rows, workload_transitions = analyse(workload, data)
            rows += workload_rows
            transitions += workload_transitions
            continue
        t0 = data["t0_monotonic"]
        timeline = Timeline(data["timeline"])
        phases = []
        for i, (limit, changed_at) in enumerate(changes):
            start = (changed_at - t0) if i > 0 else 0.0
            end = (changes[i + 1][1] - t0) if i + 1 < len(changes) else timeline.end
            measured_from = start + args.settle if i > 0 else start
            util, clock, watts = sampler.mean(t0 + measured_from, t0 + end) if sampler.ok else (None,) * 3
            gpu_time = sampler.gpu_time(t0 + measured_from, t0 + end) if sampler.ok else None
            phases.append({"limit": limit, "start": start, "end": end, "from": measured_from,
                           "it_s": timeline.throughput(measured_from, end),
                           "util": util, "gpu_time_pct": gpu_time, "sm_mhz": clock, "watts": watts,
                           "kernel_pct": kernel_time_pct(data.get("kernel_bins"), measured_from, end)})
        data["phases"] = phases
        data["unhooked_it_s"] = unhooked_it_s
        workload_rows, workload_transitions = analyse(workload, data)
        rows += workload_rows
        transitions += workload_transitions
    return rows, runs, transitions


def analyse(workload, data):
    """Rows (one per limited phase) and settling records of one phased run (data["phases"])."""
    rows, transitions = [], []
    phases = data["phases"]
    # Turns (--mps-compute threads): each limit ran in a process of its own, no common timeline.
    timeline = Timeline(data["timeline"]) if data.get("timeline") else None
    unhooked_it_s = data.get("unhooked_it_s")
    free = [p for p in phases if p["limit"] >= 100]
    free_it_s = sum(p["it_s"] for p in free) / len(free)
    if unhooked_it_s:
        print(f"  unlimited phases {free_it_s:.1f} it/s vs un-hooked processes {unhooked_it_s:.1f} it/s "
              f"(ratio {free_it_s / unhooked_it_s:.3f})", flush=True)
    for i, p in enumerate(phases):
        if p["limit"] >= 100:
            continue
        before = next((q for q in reversed(phases[:i]) if q["limit"] >= 100), None)
        after = next((q for q in phases[i + 1:] if q["limit"] >= 100), None)
        neighbours = [q for q in (before, after) if q]
        base = sum(q["it_s"] for q in neighbours) / len(neighbours)
        ratio = p["it_s"] / base
        base_util = [q["util"] for q in neighbours if q["util"] is not None]
        expected = expected_ratio(p["limit"], sum(base_util) / len(base_util) if base_util else None)
        error = (ratio - expected) * 100
        windows = [r for t, r in window_ratios_between(timeline, base, p["from"], p["end"])] if timeline else []
        occupancy = (p["util"] / (sum(base_util) / len(base_util))
                     if p["util"] is not None and base_util and sum(base_util) > 0 else None)
        # The GPU time its kernels ran (the device's own timestamps) against the neighbours' own.
        base_kernel = [q.get("kernel_pct") for q in neighbours]
        kernel_ratio = (p["kernel_pct"] / (sum(base_kernel) / len(base_kernel))
                        if p.get("kernel_pct") is not None and None not in base_kernel and sum(base_kernel) > 0
                        else None)
        rows.append({
            "workload": workload,
            "limit": p["limit"],
            "after_limit": phases[i - 1]["limit"] if i > 0 else "start",
            "unlimited_it_s": round(base, 2),
            "unlimited_drift_pct": round(100 * (after["it_s"] / before["it_s"] - 1), 2)
            if before and after else None,
            "limited_it_s": round(p["it_s"], 2),
            "ratio": round(ratio, 4),
            "expected_ratio": round(expected, 4),
            "error_points": round(error, 2),
            "ratio_vs_unhooked": round(p["it_s"] / unhooked_it_s, 4) if unhooked_it_s else None,
            "min_1s_ratio": round(min(windows), 4) if windows else None,
            # The first second after the `gpuslice set` (the change settling included).
            "first_1s_ratio": round(timeline.throughput(p["start"], p["start"] + 1.0) / base, 4)
            if timeline and p.get("start") is not None else None,
            "max_1s_ratio": round(max(windows), 4) if windows else None,
            "nvml_util_pct": None if p["util"] is None else round(p["util"], 1),
            "occupancy_ratio": None if occupancy is None else round(occupancy, 4),
            "sm_mhz": None if p["sm_mhz"] is None else round(p["sm_mhz"]),
            "unlimited_sm_mhz": round(sum(q["sm_mhz"] for q in neighbours) / len(neighbours))
            if all(q["sm_mhz"] is not None for q in neighbours) else None,
            "seconds": round(p["end"] - p["from"], 2),
            "gpu_time_pct": None if p.get("gpu_time_pct") is None else round(p["gpu_time_pct"], 1),
            "gpu_time_within": gpu_time_within(p["util"] if p.get("gpu_time_pct") is None else p["gpu_time_pct"],
                                               p["limit"], expected),
            "kernel_time_pct": None if p.get("kernel_pct") is None else round(p["kernel_pct"], 2),
            "unlimited_kernel_time_pct": None if kernel_ratio is None else round(sum(base_kernel) / len(base_kernel), 2),
            "kernel_time_ratio": None if kernel_ratio is None else round(kernel_ratio, 4),
            "kernel_time_pass": None if kernel_ratio is None else phase_passes(kernel_ratio, expected),
            "pass": phase_passes(ratio, expected),
        })
        if timeline is None:
            continue
        # Settling after this phase's change (the first second is inside the phase): when the
        # first 1 s window starting after the change is in band, and how many later ones are.
        ws = window_ratios_between(timeline, base, p["start"], p["end"])
        in_band = [phase_passes(r, expected, SETTLE_POINTS) for _, r in ws]
        first = next((t for (t, _), ok in zip(ws, in_band) if ok), None)
        after_first = [ok for (t, _), ok in zip(ws, in_band) if first is not None and t >= first]
        transitions.append({
            "workload": workload, "from": phases[i - 1]["limit"] if i > 0 else "start", "to": p["limit"],
            "first_in_band_s": None if first is None else round(max(0.0, first - p["start"]), 2),
            "in_band_after_pct": round(100 * sum(after_first) / len(after_first)) if after_first else None,
        })
    return rows, transitions


def window_ratios_between(timeline, baseline, a, b, width=1.0, step=0.1):
    """(start, ratio) of every 1 s window inside [a, b]."""
    out = []
    t = a
    while t + width <= b + 1e-9:
        out.append((round(t, 3), timeline.throughput(t, t + width) / baseline))
        t += step
    return out


def pooled_ratio(group, measured, unlimited):
    """Phases of one limit pooled: the sum of their `measured` over the sum of their neighbours'
    `unlimited`, each weighted by the phase's seconds."""
    return (sum(r[measured] * r["seconds"] for r in group)
            / sum(r[unlimited] * r["seconds"] for r in group))


def pooled_kernel_cells(group, expected):
    """The pooled table's kernel-time cells: the phases' kernel time over their neighbours', weighted
    by seconds, its error against the expected ratio, and the verdict ('-' without --kernel-timeline)."""
    if any(r.get("kernel_time_ratio") is None for r in group):
        return "- | - | -"
    ratio = pooled_ratio(group, "kernel_time_pct", "unlimited_kernel_time_pct")
    return f"{ratio:.3f} | {(ratio - expected) * 100:+.1f} | {'PASS' if phase_passes(ratio, expected) else 'FAIL'}"


def report(rows, transitions):
    """Prints the table and the settling lines."""
    def fmt(value, spec):
        return "-" if value is None else format(value, spec)

    print()
    print("| workload | limit % | after | unlimited it/s | limited it/s | throughput ratio | expected | error (points) "
          "| vs un-hooked processes | 1 s min..max | NVML util % | GPU time % (driver samples) | occupancy ratio "
          "| SM MHz (unlimited) | GPU time within | kernel time % (CUPTI) | kernel-time ratio | pass by kernel time "
          "| pass |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['limit']} | {r['after_limit']} | {r['unlimited_it_s']:.1f} | "
              f"{r['limited_it_s']:.1f} | {r['ratio']:.3f} | {r.get('expected_ratio', r['limit'] / 100):.3f} | "
              f"{r['error_points']:+.1f} | {fmt(r['ratio_vs_unhooked'], '.3f')} | "
              f"{fmt(r['min_1s_ratio'], '.2f')}..{fmt(r['max_1s_ratio'], '.2f')} | {fmt(r['nvml_util_pct'], '.1f')} | "
              f"{fmt(r.get('gpu_time_pct'), '.1f')} | "
              f"{fmt(r['occupancy_ratio'], '.3f')} | {fmt(r['sm_mhz'], '.0f')} ({fmt(r['unlimited_sm_mhz'], '.0f')}) | "
              f"{ {True: 'yes', False: 'no'}.get(r.get('gpu_time_within'), '-')} | "
              f"{fmt(r.get('kernel_time_pct'), '.1f')} | {fmt(r.get('kernel_time_ratio'), '.3f')} | "
              f"{ {True: 'PASS', False: 'FAIL'}.get(r.get('kernel_time_pass'), '-')} | {'PASS' if r['pass'] else 'FAIL'} |")
    pooled = {}
    for r in rows:
        pooled.setdefault((r["workload"], r["limit"]), []).append(r)
    if any(len(group) > 1 for group in pooled.values()):
        # Several short phases of one limit, each between unlimited ones: drifts of the host's
        # speed (seconds long on a virtual machine) cancel better than across one long phase.
        print("\npooled over the phases of each limit (limited iterations ÷ the neighbouring unlimited "
              "phases' rate × the same seconds):")
        print("| workload | limit % | phases | measured s | throughput ratio | error (points) | phase ratios | pass "
              "| kernel-time ratio | error (points) | pass by kernel time |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for (workload, limit), group in pooled.items():
            seconds = sum(r["seconds"] for r in group)
            ratio = pooled_ratio(group, "limited_it_s", "unlimited_it_s")
            expected = sum(r.get("expected_ratio", limit / 100) for r in group) / len(group)
            error = (ratio - expected) * 100
            print(f"| {workload} | {limit} | {len(group)} | {seconds:.0f} | {ratio:.3f} | {error:+.1f} | "
                  f"{min(r['ratio'] for r in group):.2f}..{max(r['ratio'] for r in group):.2f} | "
                  f"{'PASS' if phase_passes(ratio, expected) else 'FAIL'} | {pooled_kernel_cells(group, expected)} |")
    print(f"\nsettling after `gpuslice set --compute`: first 1 s window [t, t+1 s] within ±{SETTLE_POINTS:g} points "
          f"of the expected ratio after the change, and the share of later windows of the phase in that band:")
    for t in transitions:
        print(f"  {t['workload']} {t['from']} -> {t['to']}: {t['first_in_band_s']} s, "
              f"then {t['in_band_after_pct']}% of windows in band")


def modes_table(specs):
    """One table from several runs (MODE=compute_accuracy.json[.gz]): per shape and limit, each mode's
    throughput ratio (mean of its phases, min..max, how many) and SM clock of the limited phases (their
    unlimited neighbours'). Returns 0, or 2 when a file cannot be read."""
    cells, modes, keys = {}, [], []
    for spec in specs:
        mode, _, path = spec.partition("=")
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                rows = json.load(f)["rows"]
        except (OSError, ValueError, KeyError) as e:
            print(f"{spec}: {e}", file=sys.stderr)
            return 2
        modes.append(mode)
        for r in rows:
            key = (r["workload"], r["limit"])
            if key not in keys:
                keys.append(key)
            cells.setdefault((key, mode), []).append(r)
    print("| shape | limit % | " + " | ".join(f"{m}: ratio mean [min..max] (n) | {m}: SM MHz (unlimited)"
                                           for m in modes) + " |")
    print("|---|---|" + "---|---|" * len(modes))
    shapes = list(dict.fromkeys(k[0] for k in keys))
    for key in sorted(keys, key=lambda k: (shapes.index(k[0]), k[1])):
        line = f"| {key[0]} | {key[1]} |"
        for m in modes:
            group = cells.get((key, m))
            if not group:
                line += " - | - |"
                continue
            ratios = [r["ratio"] for r in group]
            mean = sum(ratios) / len(ratios)
            mhz = [r["sm_mhz"] for r in group if r.get("sm_mhz") is not None]
            base = [r["unlimited_sm_mhz"] for r in group if r.get("unlimited_sm_mhz") is not None]
            clock = (f"{sum(mhz) / len(mhz):.0f} ({sum(base) / len(base):.0f})" if mhz and base else "-")
            line += f" {mean:.3f} [{min(ratios):.3f}..{max(ratios):.3f}] ({len(ratios)}) {(mean - key[1] / 100) * 100:+.1f} | {clock} |"
        print(line)
    print("\nratio: throughput under the limit ÷ the neighbouring unlimited phases' (the number after the bracket: "
          "its mean's distance from the limit in points; work busy less than its limit is expected at 1)")
    return 0


def main():
    global TOLERANCE_POINTS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build/lib/libgpuslice.so")
    ap.add_argument("--out", default="gpu-out")
    ap.add_argument("--cli", default=None, help="gpuslice CLI (default: <lib dir>/../bin/gpuslice)")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per phase")
    ap.add_argument("--warmup", type=float, default=1.5)
    ap.add_argument("--schedule", default="100,20,100,50,100,80,20,100",
                    help="limits of the phases of the hooked process (100 = unlimited)")
    ap.add_argument("--workloads", default="matmul,tiny,train")
    ap.add_argument("--cpus", default="auto",
                    help="CPUs every measured process is pinned to: a list like 4,5 or 4-7, '' = none, "
                         "auto = per workload (see above)")
    ap.add_argument("--cpu-offset", type=int, default=0,
                    help="add this to every CPU of --cpus auto (a second run on another GPU of the host)")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE_POINTS,
                    help="points a workload held to its limit may differ from the expected ratio")
    ap.add_argument("--kernel-timeline", default=None, metavar="SO",
                    help="build/gpu/libkernel_timeline.so: also judge each phase by the GPU time its kernels ran, "
                         "from the device's own timestamps (CUPTI)")
    ap.add_argument("--reanalyse", default=None, metavar="JSON",
                    help="print the table again from a compute_accuracy.json of an earlier run")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds of each phase after a limit change that are not measured")
    ap.add_argument("--no-unhooked", dest="unhooked", action="store_false",
                    help="skip the un-hooked processes before and after each workload's run")
    ap.add_argument("--mps", action="store_true",
                    help="start an MPS control daemon for the run (mps_run.py's start_mps) and quit it after")
    ap.add_argument("--mps-compute", choices=("time", "threads"), default=None,
                    help="with --mps: the operator's GPUSLICE_MPS_COMPUTE for every hooked process (a limits "
                         "file); threads runs the phases as turns of one process per limit (see above)")
    ap.add_argument("--modes-table", nargs="+", default=None, metavar="MODE=JSON",
                    help="print shape x limit x mode from several runs' compute_accuracy.json (no GPU)")
    ap.add_argument("--turns", type=int, default=0, help=argparse.SUPPRESS)  # worker: measured turns
    ap.add_argument("--go", default=None, help=argparse.SUPPRESS)  # worker: the turns' signal files
    # Worker mode (internal).
    ap.add_argument("--worker", default=None)
    ap.add_argument("--report", default=None)
    ap.add_argument("--ready-file", default=None)
    ap.add_argument("--stop-file", default=None, help=argparse.SUPPRESS)  # worker: a 2p companion
    args = ap.parse_args()
    TOLERANCE_POINTS = args.tolerance
    if args.worker:
        args.workload = args.worker
        worker(args)
        return 0

    if args.modes_table:
        return modes_table(args.modes_table)

    if args.reanalyse:
        opener = gzip.open if args.reanalyse.endswith(".gz") else open
        with opener(args.reanalyse, "rt") as f:
            saved = json.load(f)
        rows, transitions = [], []
        for run in saved["runs"]:
            if "phases" in run:
                print(f"{run['workload']}:")
                if "unhooked_it_s" not in run:  # files written before it was stored
                    plain = [x["throughput"] for x in saved["runs"]
                             if x["workload"] == run["workload"] and not x.get("preloaded")]
                    run["unhooked_it_s"] = sum(plain) / len(plain)
                r, t = analyse(run["workload"], run)
                rows += r
                transitions += t
        report(rows, transitions)
        return 0

    if args.mps_compute and not args.mps:
        print("--mps-compute needs --mps (the library sets a client's MPS variables only under MPS)", file=sys.stderr)
        return 2
    args.schedule = [int(x) for x in args.schedule.split(",") if x]
    # A limited first phase: the process starts under that limit (its warm-up too), and the phase's
    # first 1 s window is the process's first second under it after the warm-up.
    if not args.schedule or args.schedule[-1] < 100 or (args.schedule[0] < 100 and args.mps_compute == "threads"):
        print("--schedule must end with an unlimited (100) phase (and start with one under --mps-compute threads)",
              file=sys.stderr)
        return 2
    args.workloads = [w for w in args.workloads.split(",") if w]
    args.cli = os.path.abspath(args.cli or os.path.join(os.path.dirname(os.path.abspath(args.lib)), "..", "bin",
                                                        "gpuslice"))
    os.makedirs(args.out, exist_ok=True)
    for needed in (args.lib, args.cli) + ((args.kernel_timeline,) if args.kernel_timeline else ()):
        if not os.path.exists(needed):
            print(f"no such file: {needed}", file=sys.stderr)
            return 2
    began = time.monotonic()
    # NVML numbers devices by itself, not by CUDA_VISIBLE_DEVICES: sample the one the runs use (read
    # before --mps names it by UUID).
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    args.nvml_index = int(visible) if visible.isdigit() else 0
    mps = None
    if args.mps:
        from mps_run import start_mps
        args.mps_low_threads = None
        mps = start_mps(args)
        if args.mps_compute:
            args.mps_limits_file = os.path.join(mps["root"], "limits")
            with open(args.mps_limits_file, "w") as f:
                f.write(f"GPUSLICE_MPS_COMPUTE={args.mps_compute}\n")
    try:
        return measure(args, began)
    finally:
        if mps is not None:
            from mps_run import stop_mps
            stop_mps(mps)


def measure(args, began):
    runner = Runner(args)
    sampler = NvmlSampler(index=args.nvml_index)
    if not sampler.ok:
        print("NVML not available to the parent: no utilization/clock columns", flush=True)
    print(f"compute limiter accuracy: phases of {args.settle:g} s + {args.seconds:g} s, schedule {args.schedule}, "
          f"{'MPS, GPUSLICE_MPS_COMPUTE=' + (args.mps_compute or 'unset') if args.mps else 'time-sliced (no MPS)'}, "
          f"tolerance ±{TOLERANCE_POINTS:g} points, CPUs {args.cpus or 'any'}", flush=True)
    try:
        rows, runs, transitions = accuracy(args, runner, sampler)
    finally:
        sampler.close()

    if rows:
        with open(os.path.join(args.out, "compute_accuracy.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            writer.writeheader()
            writer.writerows(rows)
    with open(os.path.join(args.out, "compute_accuracy.json"), "w") as f:
        json.dump({"rows": rows, "runs": runs, "transitions": transitions, "seconds": args.seconds,
                   "settle": args.settle, "mps": args.mps, "mps_compute": args.mps_compute,
                   "nvml": sampler.samples, "nvml_driver_samples": sampler.driver_samples}, f)

    report(rows, transitions)
    judged = [r for r in rows if r.get("kernel_time_pass") is not None]
    if judged:
        print(f"\n{sum(r['kernel_time_pass'] for r in judged)}/{len(judged)} limited phases pass by the GPU time "
              f"their kernels ran (CUPTI, the device's timestamps), judged like the throughput")
    failed = sum(not r["pass"] for r in rows)
    print(f"\n{len(rows) - failed}/{len(rows)} limited phases pass (held: within ±{TOLERANCE_POINTS:g} points of the "
          f"expected ratio; below the limit: at least {LAUNCH_BOUND_FLOOR:g}x); "
          f"total {time.monotonic() - began:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
