#!/usr/bin/env python3
"""What gpuslice adds to a PyTorch training step and a decode loop, measured inside one process.

  python3 bench/gpu/ab_overhead.py --lib build/lib/libgpuslice-ab.so --out $OUT

Process-to-process comparisons cannot resolve a fraction of a percent on a virtual machine (a GPT-2
step varies by +-15 % between processes). Here each configuration runs ONE process under
libgpuslice-ab.so, the benchmark's build of the library: every driver function it hands out is a
stub that jumps either to the hook or straight to the driver's function, and
gpuslice_ab_set_bypass() flips the side. Both sides pay the same stub, so the difference is what
the hooks add.

Method. The CUDA context is created with blocking synchronisation (cudaSetDeviceFlags(
cudaDeviceScheduleBlockingSync) before the context exists; checked on the context afterwards), so
a thread waiting for the GPU sleeps instead of spinning and the process's CPU time is the CPU work
of the step: Python, PyTorch (autograd's threads included), the driver and gpuslice (hooks and its
background threads). The hooks' cost is CPU time on the threads that call the driver, so the added
CPU time per step bounds what they can add to the step's wall time; unlike the wall time it does
not carry the GPU's own variation. The process alternates short blocks on the two sides in ABBA
order (round r: hooked then bypassed when r is even, the reverse when odd), pinned to --cpus, with
Python's garbage collector off; the first rounds are warm-up. One sample is an ABBA quad (two
rounds): the mean of its two hooked blocks minus the mean of its two bypassed blocks, which cancels
a linear drift. Reported per (configuration, workload): the added CPU time per step (ns, and % of
the step's wall time) and the added wall time per step, each the mean over the quads with a 95 %
confidence interval (t distribution). Work the hooks hand to a background thread (the profiler's
writer) runs in hooked and bypassed blocks alike and cancels out of that difference: each thread's
own CPU time over the measurement, per hooked step, is reported beside it.

Configurations: quota (memory quota), compute100 (quota + a compute limit of 100 %: the launch gate
runs, nothing is throttled), profiled (quota + the profiler; also counts the hooked driver calls
per step from the profiler's metrics file). compute50 (not in the default list): a compute limit of
50 %, below which the decode loop's GPU time stays, so its hooked blocks run the limiter's window
path and busy probe unthrottled (read its decode line; the training step is held by the limit). aa (not in the default list) is the control: a quota,
both sides bypassed, so every difference must be 0 within its interval.
Workloads: GPT-2 small (built from its config, no download) training step, batch 8 x 256 tokens,
bf16 autocast, --train-steps steps a block; greedy decode of 1 sequence with a KV cache,
--decode-tokens tokens a block after an untimed prefill of a 32-token prompt.
"""
import argparse
import ctypes
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CONFIGS = {
    "quota": {"GPUSLICE_MEMORY_LIMIT": "70Gi"},
    "compute100": {"GPUSLICE_MEMORY_LIMIT": "70Gi", "GPUSLICE_COMPUTE_LIMIT": "100"},
    "compute50": {"GPUSLICE_MEMORY_LIMIT": "70Gi", "GPUSLICE_COMPUTE_LIMIT": "50"},
    "profiled": {"GPUSLICE_MEMORY_LIMIT": "70Gi", "GPUSLICE_PROFILE_DIR": None},
    "aa": {"GPUSLICE_MEMORY_LIMIT": "70Gi"},
}
DEFAULT_CONFIGS = "quota,compute100,profiled"
BLOCKING_SYNC = 4  # cudaDeviceScheduleBlockingSync == CU_CTX_SCHED_BLOCKING_SYNC
SCHEDULE_MASK = 7


def t95(df):
    """Student's t quantile for a 95 % two-sided interval (Cornish-Fisher; within 0.1 % from 5 df)."""
    z = 1.959963985
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * df**4))


def abba_summary(hooked, bypassed, reference):
    """Mean of the ABBA-quad differences (hooked - bypassed, per step) with its 95 % half-width, in
    ns and in % of `reference` (the bypassed side's mean wall time per step)."""
    diffs = [(hooked[i] + hooked[i + 1] - bypassed[i] - bypassed[i + 1]) / 2 for i in range(0, len(hooked) - 1, 2)]
    n = len(diffs)
    mean = statistics.fmean(diffs)
    half = t95(n - 1) * statistics.stdev(diffs) / math.sqrt(n) if n > 1 else float("nan")
    return {"added_ns": mean, "ci95_ns": half, "added_pct": 100 * mean / reference,
            "ci95_pct": 100 * half / reference, "n": n,
            "hooked_ns": statistics.fmean(hooked), "bypassed_ns": statistics.fmean(bypassed)}


def set_blocking_sync():
    """cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) on the CUDA runtime torch loaded, before
    the context exists (the driver's cuDevicePrimaryCtxSetFlags where no runtime is mapped).
    Returns (how, the runtime's handle or None)."""
    path = None
    with open("/proc/self/maps") as maps:
        for line in maps:
            name = line.split()[-1] if len(line.split()) >= 6 else ""
            if "libcudart.so" in os.path.basename(name):
                path = name
                break
    if path is not None:
        cudart = ctypes.CDLL(path)
        rc = cudart.cudaSetDeviceFlags(ctypes.c_uint(BLOCKING_SYNC))
        return f"cudaSetDeviceFlags({path}) rc={rc}", cudart
    cuda = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int()
    for name in ("cuDevicePrimaryCtxSetFlags_v2", "cuDevicePrimaryCtxSetFlags"):
        if hasattr(cuda, name):
            rc = cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0) or getattr(cuda, name)(
                dev, ctypes.c_uint(BLOCKING_SYNC))
            return f"{name} (no libcudart mapped) rc={rc}", None
    return "not set: neither libcudart nor cuDevicePrimaryCtxSetFlags found", None


def check_blocking_sync(cudart):
    """The scheduling flags of the live context, from the runtime and from the driver."""
    out = {}
    if cudart is not None:
        flags = ctypes.c_uint()
        out["cudaGetDeviceFlags_rc"] = cudart.cudaGetDeviceFlags(ctypes.byref(flags))
        out["cudaGetDeviceFlags"] = flags.value
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int(-1)
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    if hasattr(cuda, "cuDevicePrimaryCtxGetState"):
        out["cuDevicePrimaryCtxGetState_rc"] = cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags),
                                                                                ctypes.byref(active))
    out["primary_ctx_flags"], out["primary_ctx_active"] = flags.value, active.value
    out["ok"] = (out["primary_ctx_active"] == 1 and flags.value & SCHEDULE_MASK == BLOCKING_SYNC
                 and out.get("cudaGetDeviceFlags", BLOCKING_SYNC) & SCHEDULE_MASK == BLOCKING_SYNC)
    return out


def profiler_counts():
    """This process's per-API call counts from the profiler's metrics.<pid>.log (None if absent)."""
    path = os.path.join(os.environ.get("GPUSLICE_PROFILE_DIR", ""), f"metrics.{os.getpid()}.log")
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except OSError:
        return None
    counts, name = {}, None
    for line in lines:
        key, _, value = line.partition(":")
        if key == "name":
            name = value
        elif key == "count" and name is not None:
            counts[name] = int(value)
    return counts


def thread_cpu():
    """CPU time (ns) and name of each of this process's threads, from /proc (schedstat, else stat)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        base = f"/proc/self/task/{tid}"
        try:
            with open(f"{base}/comm") as f:
                name = f.read().strip()
            try:
                with open(f"{base}/schedstat") as f:
                    ns = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                with open(f"{base}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ns = (int(fields[11]) + int(fields[12])) * 10**9 // os.sysconf("SC_CLK_TCK")
        except OSError:
            continue  # the thread ended
        out[int(tid)] = (name, ns)
    return out


def worker(args):
    os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    import torch

    how, cudart = set_blocking_sync()  # before anything creates the context
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(1)  # no CPU thread pool spinning beside the measurement
    switch = ctypes.CDLL(None).gpuslice_ab_set_bypass
    switch.argtypes = [ctypes.c_int]
    switch(0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    batch = torch.randint(0, 50257, (8, 256), device="cuda")
    prompt = torch.randint(0, 50257, (1, 32), device="cuda")
    torch.cuda.synchronize()
    info = {"blocking_sync_set": how, "blocking_sync": check_blocking_sync(cudart),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cpus": sorted(os.sched_getaffinity(0)), "control_aa": args.aa}
    # The switch works: under the quota the hooked side reports it, the bypassed side the card.
    switch(1)
    bypassed_total = torch.cuda.mem_get_info()[1]
    switch(0)
    info["switch_check"] = {"hooked_total": torch.cuda.mem_get_info()[1], "bypassed_total": bypassed_total}

    def train_step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(batch, labels=batch).loss
        loss.backward()
        opt.step()

    def train_block():
        def body():
            for _ in range(args.train_steps):
                train_step()
        return body

    @torch.no_grad()
    def decode_block():
        # The prefill is not timed: every block decodes the same positions (32 .. 32 + tokens).
        out = model(prompt, use_cache=True)
        state = [out.past_key_values, out.logits[:, -1:].argmax(-1)]

        @torch.no_grad()
        def body():
            past, nxt = state
            for _ in range(args.decode_tokens):
                out = model(nxt, past_key_values=past, use_cache=True)
                past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        return body

    hooked_units = [0]

    def timed(prepare, side):
        hooked_units[0] += 0 if side else units
        body = prepare()
        torch.cuda.synchronize()
        c0 = time.process_time_ns()
        w0 = time.perf_counter_ns()
        body()
        torch.cuda.synchronize()
        w1 = time.perf_counter_ns()
        c1 = time.process_time_ns()
        return c1 - c0, w1 - w0

    def count_calls(prepare, units):
        # Hooked calls per step: the profiler rewrites metrics.<pid>.log about once a second, so
        # read it after a quiet 1.5 s on each side of one hooked block.
        body = prepare()
        torch.cuda.synchronize()
        time.sleep(1.5)
        before = profiler_counts()
        body()
        torch.cuda.synchronize()
        time.sleep(1.5)
        after = profiler_counts()
        if before is None or after is None:
            return None
        per = {k: (after[k] - before.get(k, 0)) / units for k in after if after[k] != before.get(k, 0)}
        return {"total": sum(per.values()), "by_api": dict(sorted(per.items(), key=lambda kv: -kv[1]))}

    result = {"info": info, "workloads": {}}
    workloads = (("train_step", train_block, args.train_steps), ("decode_token", decode_block, args.decode_tokens))
    for name, prepare, units in workloads:
        for side in (0, 1, 0, 1):  # warm both sides (allocator, autotuning, caches)
            switch(side)
            timed(prepare, side)
        gc.collect()
        gc.freeze()  # what exists now is never scanned again
        gc.disable()
        threads_before, hooked_units[0] = thread_cpu(), 0
        sides = {0: ([], []), 1: ([], [])}  # side -> (cpu ns per step, wall ns per step)
        t_start = time.perf_counter()
        for r in range(args.warmup_rounds + args.rounds):
            for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                switch(1 if args.aa else side)
                cpu, wall = timed(prepare, 1 if args.aa else side)
                if r >= args.warmup_rounds:
                    sides[side][0].append(cpu / units)
                    sides[side][1].append(wall / units)
            if r % 32 == 31:
                # Between ABBA quads (the last block ran hooked): collect, then one untimed hooked
                # block, so the next quad's first block follows a hooked block as the others do.
                gc.collect()
                switch(1 if args.aa else 0)
                timed(prepare, 1 if args.aa else 0)
        seconds = time.perf_counter() - t_start
        threads_after = thread_cpu()
        gc.enable()
        gc.unfreeze()
        switch(0)
        (cpu_h, wall_h), (cpu_b, wall_b) = sides[0], sides[1]
        step_wall = statistics.fmean(wall_b)
        entry = {"units_per_block": units, "rounds": args.rounds, "warmup_rounds": args.warmup_rounds,
                 "seconds": seconds, "cpu": abba_summary(cpu_h, cpu_b, step_wall),
                 "wall": abba_summary(wall_h, wall_b, step_wall),
                 "raw": {"cpu_hooked": cpu_h, "cpu_bypassed": cpu_b, "wall_hooked": wall_h, "wall_bypassed": wall_b}}
        # Work the hooks leave to a background thread (the profiler's writer) runs whenever that
        # thread wakes, in a hooked or a bypassed block alike, so the A/B difference misses about
        # all of it: each thread's own CPU time over the measurement, per hooked step, says how much.
        main_tid = threading.get_native_id()
        entry["threads"] = sorted(
            ({"tid": tid, "name": name, "cpu_ns": ns - threads_before.get(tid, (name, 0))[1],
              "cpu_ns_per_hooked_unit": ((ns - threads_before.get(tid, (name, 0))[1]) / hooked_units[0]
                                         if hooked_units[0] else None),
              "main": tid == main_tid} for tid, (name, ns) in threads_after.items()),
            key=lambda t: -t["cpu_ns"])
        entry["hooked_units"] = hooked_units[0]
        if os.environ.get("GPUSLICE_PROFILE_DIR"):
            entry["hooked_calls_per_unit"] = count_calls(prepare, units)
        result["workloads"][name] = entry
    json.dump(result, sys.stdout)


def print_result(config, result):
    info = result["info"]
    bs, sw = info["blocking_sync"], info["switch_check"]
    print(f"{config:10s} setup: {info['device']}, cpus {info['cpus']}, blocking sync "
          f"{'on' if bs['ok'] else 'NOT ON'} (primary context flags {bs['primary_ctx_flags']:#x}, "
          f"cudaGetDeviceFlags {bs.get('cudaGetDeviceFlags', -1):#x}; {info['blocking_sync_set']}); switch check: "
          f"hooked total {sw['hooked_total']}, bypassed {sw['bypassed_total']} "
          f"{'ok' if sw['hooked_total'] != sw['bypassed_total'] else 'FAIL'}"
          f"{'; A/A CONTROL: both sides bypassed' if info['control_aa'] else ''}", flush=True)
    for name, w in result["workloads"].items():
        unit = "step" if name == "train_step" else "token"
        for metric, label in (("cpu", "added CPU time"), ("wall", "added wall time")):
            s = w[metric]
            print(f"{config:10s} {name:12s} {metric:4s} {label} per {unit} {s['added_ns'] / 1e3:+9.2f} us +- "
                  f"{s['ci95_ns'] / 1e3:7.2f} us = {s['added_pct']:+7.3f} % +- {s['ci95_pct']:.3f} % of the {unit}'s "
                  f"wall time (n={s['n']} ABBA quads; {metric} per {unit}: hooked {s['hooked_ns'] / 1e6:.3f} ms, "
                  f"bypassed {s['bypassed_ns'] / 1e6:.3f} ms)", flush=True)
        others = [t for t in w.get("threads", []) if not t["main"] and t["cpu_ns_per_hooked_unit"]][:4]
        if others:
            note = any(t["name"] == "gpuslice-prof" for t in others)
            print(f"{config:10s} {name:12s} thrd other threads' CPU over the measurement per hooked {unit}: "
                  + ", ".join(f"{t['name']} ({t['tid']}) {t['cpu_ns_per_hooked_unit'] / 1e3:.1f} us" for t in others)
                  + (" (gpuslice-prof, the profiler's writer, works for hooked calls only, in whichever block it "
                     "wakes: the cpu line misses it)" if note else ""), flush=True)
        calls = w.get("hooked_calls_per_unit")
        if calls:
            top = ", ".join(f"{k} {v:.1f}" for k, v in list(calls["by_api"].items())[:6])
            print(f"{config:10s} {name:12s} calls {calls['total']:.1f} hooked driver calls per {unit} ({top}; "
                  f"the block's two synchronizations included)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build/lib/libgpuslice-ab.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--rounds", type=int, default=200, help="measured rounds per workload (2 blocks each; even)")
    ap.add_argument("--warmup-rounds", type=int, default=4, help="rounds run first and discarded (even)")
    ap.add_argument("--train-steps", type=int, default=2, help="training steps per block")
    ap.add_argument("--decode-tokens", type=int, default=12, help="decoded tokens per block")
    ap.add_argument("--cpus", default="4,5", help="CPUs the worker process is pinned to")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"comma-separated, of {','.join(CONFIGS)}")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--aa", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.rounds += args.rounds % 2
    args.warmup_rounds += args.warmup_rounds % 2
    if args.worker:
        return worker(args)
    configs = args.configs.split(",")
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configuration(s) {','.join(unknown)}: choose from {','.join(CONFIGS)}")
    if not os.path.exists(args.lib):
        raise SystemExit(f"{args.lib} not found: build the target gpuslice_preload_ab first")
    os.makedirs(args.out, exist_ok=True)
    cpus = {int(c) for c in args.cpus.split(",")}
    results = {}
    for config in configs:
        env = dict(os.environ)
        env["LD_PRELOAD"] = os.path.abspath(args.lib)
        env["GPUSLICE_SHARED_DIR"] = tempfile.mkdtemp(prefix="gs-ab-")
        for key, value in CONFIGS[config].items():
            env[key] = value if value is not None else tempfile.mkdtemp(prefix="gs-ab-prof-")
        argv = [sys.executable, os.path.abspath(__file__), "--worker", "--rounds", str(args.rounds),
                "--warmup-rounds", str(args.warmup_rounds), "--train-steps", str(args.train_steps),
                "--decode-tokens", str(args.decode_tokens), "--cpus", args.cpus] + (["--aa"] if config == "aa" else [])
        t0 = time.perf_counter()
        # Pinned from exec on, so every thread (the library's, the driver's, PyTorch's) inherits it.
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900,
                           preexec_fn=lambda: os.sched_setaffinity(0, cpus))
        if p.returncode != 0:
            print(f"{config}: worker failed ({p.returncode})\n{p.stderr[-2000:]}", flush=True)
            results[config] = {"error": p.stderr[-2000:]}
        else:
            results[config] = json.loads(p.stdout.strip().splitlines()[-1])
            results[config]["process_seconds"] = time.perf_counter() - t0
            print_result(config, results[config])
            print(f"{config:10s} took {results[config]['process_seconds']:.0f} s", flush=True)
        with open(os.path.join(args.out, "ab_overhead.json"), "w") as f:  # after each, so a cut run keeps some
            json.dump(results, f, indent=1)
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
