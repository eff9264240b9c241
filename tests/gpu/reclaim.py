#!/usr/bin/env python3
"""Memory that follows priority on one GPU (docs/quota.md, "Guarantees and borrowing"; issue 47's
done-when, scaled to a few minutes). Two containers whose limits sum to 1.5x the device:

  trainer  best effort (priority low): limit 0.75 T, guarantee 0.25 T (filled by a ballast). A
           PyTorch loop with a fixed seed whose loss reads a frozen feature store of --borrow-gib GiB
           (2 GiB shards), all but what is left of the guarantee held above it
           (borrowed: backed by the driver's virtual memory), printing its loss each step.
  server   priority high: limit 0.75 T, guarantee 0.70 T. One process serves requests (matmuls),
           timing each; a second process of the container ("grower") allocates up to the guarantee:
           first what leaves --big-gib GiB of it, then one --big-gib GiB block, which the device has
           no room for while the trainer borrows (about 20 GiB short on an H200: the reclaim).

Runs, in order:
  1. the trainer alone for --train-seconds (the loss curve to compare with; the run beside the
     server takes the same number of steps);
  2. the server and the grower alone (request latency while the big block is allocated, alone);
  3. the trainer, and once it steps, the server and the grower: every allocation must succeed, the
     big block's wait is the reclaim time, the requests during it are compared with run 2's; the
     grower holds for --hold-s, frees, and the trainer's memory must come back to the device
     (gpuslice status: on_host_bytes 0): the restore time. The trainer's losses must be bitwise
     identical to run 1's.
  python3 tests/gpu/reclaim.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --out $OUT/reclaim
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

GiB = 1 << 30


# ---------------------------------------------------------------------------------------------
# Roles (each runs in its own process, under the library, started by the orchestrator below).

def role_trainer(a):
    import torch
    torch.manual_seed(47)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)  # the context
    torch.cuda.synchronize()
    time.sleep(0.5)  # the context's footprint is booked before anything is judged against the guarantee
    # Within the guarantee: a ballast (what a real trainer's weights and optimizer state would take).
    ballast = torch.empty(int(a.ballast_gib * GiB), dtype=torch.uint8, device=dev)
    ballast.fill_(1)
    # Above it (borrowed): the frozen feature store, in 2 GiB shards as a model's tensors would be.
    rows_per_shard = (2 * GiB) // (a.dim * 4)
    shards = []
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)
    for _ in range(int(a.borrow_gib // 2)):
        shards.append(torch.randn(rows_per_shard, a.dim, device=dev, generator=gen))
    model = torch.nn.Sequential(torch.nn.Linear(a.dim, a.hidden), torch.nn.GELU(), torch.nn.Linear(a.hidden, 1)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    print(f"trainer_ready shards={len(shards)} borrowed_gib={len(shards) * 2}", flush=True)
    idx_gen = torch.Generator(device=dev)
    idx_gen.manual_seed(2)
    # Alone, the trainer runs for --train-seconds and its step count becomes the with-run's --steps:
    # the run beside the server then lasts at least as long, whatever this device's step time.
    end = time.monotonic() + a.train_seconds if a.train_seconds > 0 else None
    step = 0
    while (step < a.steps) if end is None else (time.monotonic() < end):
        feats = []
        for s in shards:
            idx = torch.randint(0, rows_per_shard, (a.batch // len(shards) + 1,), device=dev, generator=idx_gen)
            feats.append(s.index_select(0, idx))
        x = torch.cat(feats)[: a.batch]
        target = x.sum(dim=1, keepdim=True).tanh()
        loss = torch.nn.functional.mse_loss(model(x), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # The exact bits of the loss, and the wall time (to see the steps slow down and recover).
        print(f"step={step} loss={loss.item().hex()} t={time.monotonic():.4f}", flush=True)
        step += 1
    del ballast
    return 0


def role_server(a):
    import torch
    dev = torch.device("cuda")
    x = torch.randn(a.matmul, a.matmul, device=dev, dtype=torch.bfloat16)
    w = torch.randn(a.matmul, a.matmul, device=dev, dtype=torch.bfloat16)
    for _ in range(20):
        (x @ w).sum().item()
    print("server_ready", flush=True)
    end = time.monotonic() + a.seconds
    out = open(a.log, "w")
    while time.monotonic() < end:
        t0 = time.monotonic()
        y = x
        for _ in range(4):
            y = (y @ w) * 1e-3
        y.sum().item()  # the request's answer: synchronises
        t1 = time.monotonic()
        out.write(f"{t0:.6f} {(t1 - t0) * 1e3:.4f}\n")
        time.sleep(0.002)
    out.close()
    return 0


def role_grower(a):
    import torch
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)  # the context
    torch.cuda.synchronize()
    time.sleep(0.5)
    free, _ = torch.cuda.mem_get_info()  # the slice's view: min(quota left, device free)
    held = []
    events = []

    def alloc(gib, what):
        t0 = time.monotonic()
        try:
            held.append(torch.empty(int(gib * GiB), dtype=torch.uint8, device=dev))
            ok = 1
        except torch.OutOfMemoryError as e:
            ok = 0
            print(f"oom {what}: {str(e).splitlines()[0]}", flush=True)
        t1 = time.monotonic()
        events.append({"what": what, "gib": gib, "ok": ok, "start": t0, "end": t1, "ms": (t1 - t0) * 1e3})
        print(f"alloc what={what} gib={gib:.2f} ok={ok} ms={(t1 - t0) * 1e3:.1f}", flush=True)
        return ok

    # Up to the guarantee (the container's server holds about --server-gib): first what leaves the big
    # block (within what the device has free), then the big block, then 1 GiB blocks if any is left.
    budget = a.guarantee_gib - a.server_gib
    first = max(0.0, min(free / GiB - 0.5, budget - a.big_gib))
    if first >= 1:
        alloc(first, "free")
    alloc(a.big_gib, "big")
    done = sum(e["gib"] for e in events if e["ok"])
    while done + 1 <= budget:
        if not alloc(1, "fill"):
            break
        done += 1
    print(f"grower_full gib={done:.2f}", flush=True)
    time.sleep(a.hold_s)
    del held[:]
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    freed = time.monotonic()
    print(f"grower_freed t={freed:.4f}", flush=True)
    json.dump({"events": events, "freed": freed}, open(a.log, "w"))
    return 0


# ---------------------------------------------------------------------------------------------
# The orchestrator.

def device_total():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) << 20


def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_") and k != "LD_PRELOAD"}
    env["PYTHONUNBUFFERED"] = "1"
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    return env


def spawn(args, env, log):
    return subprocess.Popen([sys.executable, os.path.abspath(__file__)] + args, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)


def wait_for(path, needle, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if needle in open(path).read():
                return True
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    return False


def losses(path):
    return [line.split()[1] for line in open(path) if line.startswith("step=")]


def p99(values):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def window_latencies(server_log, start, end):
    out = []
    for line in open(server_log):
        t, ms = line.split()
        t = float(t)
        if start <= t <= end:
            out.append(float(ms))
    return out


def status(cli, shared):
    r = subprocess.run([cli, "status", "--json", "--shared-dir", shared], capture_output=True, text=True)
    try:
        return json.loads(r.stdout)["devices"][0]
    except (ValueError, KeyError, IndexError):
        return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libgpuslice.so")
    ap.add_argument("--cli", default="build/bin/gpuslice")
    ap.add_argument("--out", default="reclaim-out")
    ap.add_argument("--role", default="")
    ap.add_argument("--steps", type=int, default=0, help="the with-run's steps (default: as many as alone ran)")
    ap.add_argument("--train-seconds", type=float, default=40, help="how long the trainer runs alone")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--borrow-gib", type=float, default=26)
    ap.add_argument("--ballast-gib", type=float, default=0)
    ap.add_argument("--big-gib", type=float, default=20)
    ap.add_argument("--guarantee-gib", type=float, default=0)
    ap.add_argument("--server-gib", type=float, default=3)
    ap.add_argument("--hold-s", type=float, default=5)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--matmul", type=int, default=4096)
    ap.add_argument("--log", default="")
    a = ap.parse_args()
    if a.role:
        return {"trainer": role_trainer, "server": role_server, "grower": role_grower}[a.role](a)

    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    lib, cli = os.path.abspath(a.lib), os.path.abspath(a.cli)
    total = device_total()
    t_gib = total / GiB
    trainer_limit, trainer_guarantee = int(0.75 * total), int(0.25 * total)
    server_limit, server_guarantee = int(0.75 * total), int(0.70 * total)
    ballast = trainer_guarantee / GiB - 3.0  # the rest of its guarantee: context, model, activations
    print(f"device {t_gib:.1f} GiB: trainer limit {trainer_limit / GiB:.1f} GiB guarantee "
          f"{trainer_guarantee / GiB:.1f} GiB (+{a.borrow_gib:.0f} GiB borrowed); server limit "
          f"{server_limit / GiB:.1f} GiB guarantee {server_guarantee / GiB:.1f} GiB", flush=True)
    work = tempfile.mkdtemp(prefix="gs-reclaim-")
    node = os.path.join(work, "node")
    os.makedirs(node, mode=0o755)
    # The operator's word: the trainer runs at low, the server at high (the node channel's files).
    for writer, level in (("trainer", "low"), ("server", "high")):
        os.makedirs(os.path.join(node, writer), mode=0o755)
        with open(os.path.join(node, writer + ".assigned"), "w") as f:
            f.write(f"priority={level}\n")

    def env_of(name, limit, guarantee, level):
        env = base_env()
        env.update({"LD_PRELOAD": lib, "GPUSLICE_SHARED_DIR": os.path.join(work, name),
                    "GPUSLICE_MEMORY_LIMIT": str(limit), "GPUSLICE_MEMORY_GUARANTEE": str(guarantee),
                    "GPUSLICE_PRIORITY": level, "GPUSLICE_NODE_DIR": node, "GPUSLICE_NODE_WRITER": name,
                    "GPUSLICE_LOG_LEVEL": "info"})
        return env

    trainer_env = env_of("trainer", trainer_limit, trainer_guarantee, "low")
    trainer_env["GPUSLICE_LOG_LEVEL"] = "debug"  # each move's create / copy / remap times
    server_env = env_of("server", server_limit, server_guarantee, "high")
    trainer_args = ["--role", "trainer", "--batch", str(a.batch), "--dim", str(a.dim),
                    "--hidden", str(a.hidden),
                    "--borrow-gib", str(a.borrow_gib), "--ballast-gib", f"{ballast:.3f}"]
    grower_args = ["--role", "grower", "--big-gib", str(a.big_gib), "--guarantee-gib",
                   f"{server_guarantee / GiB:.3f}", "--server-gib", str(a.server_gib), "--hold-s", str(a.hold_s)]

    # 1. The trainer alone.
    alone_log = os.path.join(out, "trainer-alone.log")
    alone_by = ["--steps", str(a.steps)] if a.steps > 0 else ["--train-seconds", str(a.train_seconds)]
    p = spawn(trainer_args + alone_by, trainer_env, alone_log)
    rc_alone = p.wait(timeout=600)
    steps = len(losses(alone_log))
    st_alone = status(cli, os.path.join(work, "trainer"))
    print(f"1. trainer alone: exit {rc_alone}, {len(losses(alone_log))} steps", flush=True)

    # 2. The server and the grower alone.
    def serve_and_grow(tag):
        server_log = os.path.join(out, f"server-{tag}.lat")
        s = spawn(["--role", "server", "--seconds", str(a.seconds), "--matmul", str(a.matmul), "--log", server_log],
                  server_env, os.path.join(out, f"server-{tag}.log"))
        wait_for(os.path.join(out, f"server-{tag}.log"), "server_ready", 120)
        time.sleep(2)
        grow_json = os.path.join(out, f"grower-{tag}.json")
        g = spawn(grower_args + ["--log", grow_json], server_env, os.path.join(out, f"grower-{tag}.log"))
        return s, g, server_log, grow_json

    s, g, server_alone, grow_alone = serve_and_grow("alone")
    rc_g_alone = g.wait(timeout=600)
    s.terminate()
    s.wait(timeout=60)
    ev_alone = json.load(open(grow_alone)) if rc_g_alone == 0 else {"events": []}
    print(f"2. server alone: grower exit {rc_g_alone}", flush=True)

    # 3. The trainer, then the server and the grower.
    shared_trainer = os.path.join(work, "trainer")
    with_log = os.path.join(out, "trainer-with.log")
    t = spawn(trainer_args + ["--steps", str(steps), "--train-seconds", "0"], trainer_env, with_log)
    wait_for(with_log, "step=20 ", 300)
    st_before = status(cli, shared_trainer)
    s, g, server_with, grow_with = serve_and_grow("with")
    # Watch the trainer's books: moved to host, and back after the grower freed.
    samples = []
    while g.poll() is None:
        samples.append((time.monotonic(), status(cli, shared_trainer)))
        time.sleep(0.05)
    rc_g_with = g.returncode
    ev_with = json.load(open(grow_with)) if rc_g_with == 0 else {"events": [], "freed": time.monotonic()}
    restored_at = None
    end = time.monotonic() + 30
    while time.monotonic() < end:
        st = status(cli, shared_trainer)
        samples.append((time.monotonic(), st))
        if st.get("on_host_bytes", 1) == 0:
            restored_at = time.monotonic()
            break
        time.sleep(0.05)
    s.terminate()
    s.wait(timeout=60)
    rc_with = t.wait(timeout=900)
    st_after = status(cli, shared_trainer)
    with open(os.path.join(out, "trainer-status.jsonl"), "w") as f:
        for when, st in samples:
            f.write(json.dumps({"t": when, **st}) + "\n")

    # The verdict.
    rows = []
    a_loss, w_loss = losses(alone_log), losses(with_log)
    identical = rc_alone == 0 and rc_with == 0 and steps > 0 and a_loss == w_loss
    first_diff = next((i for i, (x, y) in enumerate(zip(a_loss, w_loss)) if x != y), None)
    rows.append(("trainer loss curve bitwise identical to alone", "PASS" if identical else "FAIL",
                 f"{len(w_loss)} of {steps} steps" + ("" if first_diff is None else f", first difference at {first_diff}")))
    borrowed_gib = (st_before.get("borrowed_bytes", 0)) / GiB
    rows.append(("trainer borrowed 20+ GiB", "PASS" if borrowed_gib >= 20 else "FAIL", f"{borrowed_gib:.1f} GiB"))
    evs = ev_with.get("events", [])
    all_ok = rc_g_with == 0 and evs and all(e["ok"] for e in evs)
    rows.append(("every server allocation succeeded", "PASS" if all_ok else "FAIL",
                 f"{sum(e['ok'] for e in evs)} of {len(evs)}; grower exit {rc_g_with}"))
    big = next((e for e in evs if e["what"] == "big"), None)
    big_alone = next((e for e in ev_alone.get("events", []) if e["what"] == "big"), None)
    moved = max((st.get("on_host_bytes", 0) for _, st in samples), default=0) / GiB
    reclaim_ms = big["ms"] if big else float("nan")
    rows.append(("reclaim (the big block's wait) <= 1 s", "PASS" if big and big["ok"] and reclaim_ms <= 1000 else "FAIL",
                 f"{reclaim_ms:.0f} ms for {a.big_gib:.0f} GiB, {moved:.1f} GiB moved to host"
                 + (f"; alone {big_alone['ms']:.0f} ms" if big_alone else "")))
    episodes = st_after.get("reclaim_episodes", 0)
    rows.append(("reclaim episodes (status)", "INFO", f"{episodes} episodes, "
                 f"{st_after.get('reclaim_bytes', 0) / GiB:.1f} GiB in {st_after.get('reclaim_ns', 0) / 1e6:.0f} ms"))
    restore_ms = (restored_at - ev_with["freed"]) * 1e3 if restored_at and "freed" in ev_with else float("nan")
    rows.append(("restored within 1 s after the server freed", "PASS" if restored_at and restore_ms <= 1000 else "FAIL",
                 f"{restore_ms:.0f} ms (status polled every 50 ms)"))
    if big and big_alone:
        # During the reclaim: the big block's wait (the trainer held from the reclaim thread's first
        # round, its memory copied out). Alone: the server's requests from 2 s before the grower's
        # big block to 2 s after (alone the block takes no time).
        lat_with = window_latencies(server_with, big["start"], big["end"])
        lat_alone = window_latencies(server_alone, big_alone["start"] - 2.0, big_alone["start"] + 2.0)
        ratio = p99(lat_with) / p99(lat_alone) if lat_alone else float("nan")
        # Where the slow requests fall against the big block's wait (the moves' timeline is in
        # trainer-status.jsonl and the trainer's log).
        slow = sorted((float(ms), float(t) - big["start"]) for t, ms in
                      (line.split() for line in open(server_with)) if big["start"] - 1 <= float(t) <= big["end"] + 2)
        print("slowest requests around the reclaim (ms, s after the big block's start): " +
              ", ".join(f"{ms:.2f}@{dt:+.3f}" for ms, dt in slow[-12:]), flush=True)
        for e in evs:
            print(f"grower: {e['what']} {e['gib']:.2f} GiB ok={e['ok']} {e['ms']:.0f} ms "
                  f"at {e['start'] - big['start']:+.3f} s", flush=True)
        rows.append(("server p99 during the reclaim <= 1.10x alone", "PASS" if ratio <= 1.10 else "FAIL",
                     f"p99 {p99(lat_with):.2f} ms ({len(lat_with)} requests) vs alone {p99(lat_alone):.2f} ms "
                     f"({len(lat_alone)}): {ratio:.2f}x"))
        # The same server beside the running trainer before the reclaim (what priorities alone give a
        # request of this length: docs/priority.md), to tell the reclaim's cost from the sharing's.
        lat_beside = window_latencies(server_with, big["start"] - 5.0, big["start"] - 0.5)
        if lat_beside and lat_alone:
            rows.append(("server p99 beside the trainer before the reclaim", "INFO",
                         f"p99 {p99(lat_beside):.2f} ms ({len(lat_beside)} requests): "
                         f"{p99(lat_beside) / p99(lat_alone):.2f}x alone"))
        # And after it, until the grower frees: the trainer runs on, its moved memory in host memory.
        lat_after = window_latencies(server_with, big["end"], ev_with.get("freed", big["end"]))
        if lat_after and lat_alone:
            rows.append(("server p99 after the reclaim, the trainer's memory in host memory", "INFO",
                         f"p99 {p99(lat_after):.2f} ms ({len(lat_after)} requests): "
                         f"{p99(lat_after) / p99(lat_alone):.2f}x alone"))
    steps_t = [float(line.split("t=")[1]) for line in open(with_log) if line.startswith("step=")]
    rows.append(("trainer kept running (exit status)", "PASS" if rc_with == 0 else "FAIL", f"exit {rc_with}"))
    # Where a move's time goes (the library's debug lines in the trainer's log).
    moves = [line.strip() for line in open(with_log) if "reclaim:" in line]
    with open(os.path.join(out, "moves.txt"), "w") as f:
        f.write("\n".join(moves) + "\n")
    for line in moves:
        if "moved" in line:
            print(line, flush=True)
    print("\n| check | verdict | measured |")
    print("|---|---|---|")
    for name, verdict, detail in rows:
        print(f"| {name} | {verdict} | {detail} |")
    json.dump({"rows": rows, "steps_with_t": steps_t}, open(os.path.join(out, "verdict.json"), "w"), indent=1)
    return 0 if all(v != "FAIL" for _, v, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
