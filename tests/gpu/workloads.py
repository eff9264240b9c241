"""Framework workloads run under (or without) libgpuslice.so by tests/gpu/functional.py.

Each mode prints `key=value` lines; the caller compares hooked and un-hooked runs.
Usage: python3 workloads.py MODE [args]
"""
import sys
import time


def torch_report():
    import torch
    free, total = torch.cuda.mem_get_info()
    props = torch.cuda.get_device_properties(0)
    print(f"torch_free={free}\ntorch_total={total}\ntorch_props_total={props.total_memory}")


def torch_oom(chunk_mib=512):
    import torch
    held = []
    err = "none"
    try:
        for _ in range(1000):
            held.append(torch.empty(chunk_mib << 20, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as e:  # the exception the quota must produce
        err = "torch.OutOfMemoryError"
        msg = str(e).splitlines()[0][:160]
        print(f"oom_message={msg!r}")
    except Exception as e:  # noqa: BLE001 - anything else is a failure the caller reports
        err = type(e).__name__
    allocated = len(held) * (chunk_mib << 20)
    print(f"torch_allocated={allocated}\ntorch_error={err}")
    del held
    torch.cuda.empty_cache()
    # After freeing, allocation works again.
    x = torch.empty(chunk_mib << 20, dtype=torch.uint8, device="cuda")
    print(f"torch_after_free_ok={int(x.numel() == chunk_mib << 20)}")


def torch_train(steps=30):
    import torch
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator(device="cpu").manual_seed(1)
    xs = torch.randn(steps, 256, 512, generator=g)
    ys = torch.randint(0, 10, (steps, 256), generator=g)
    losses = []
    for i in range(steps):
        x, y = xs[i].cuda(), ys[i].cuda()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item().hex())
    print("losses=" + ",".join(losses))


def torch_hold(gib, seconds):
    """Holds `gib` GiB (for the two-process test) and reports what it can still allocate."""
    import torch
    x = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    print(f"holding={x.numel()}", flush=True)
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(0.1)


def torch_grab(chunk_mib=256):
    """Allocates as much as the quota allows right now; prints the total."""
    import torch
    held = []
    try:
        while True:
            held.append(torch.empty(chunk_mib << 20, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        pass
    print(f"grabbed={len(held) * (chunk_mib << 20)}", flush=True)


def torch_step_time(steps=200):
    """A PyTorch training step's time (ms), for the overhead benchmark."""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16)

    def step():
        loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    print(f"step_ms={(time.perf_counter() - t0) * 1000 / steps:.4f}")


def cupy_check(quota):
    import cupy
    free, total = cupy.cuda.runtime.memGetInfo()
    print(f"cupy_total={total}\ncupy_free={free}")
    err = "none"
    try:
        cupy.empty(int(quota) + (1 << 30), dtype=cupy.uint8)
    except cupy.cuda.memory.OutOfMemoryError:
        err = "cupy.cuda.memory.OutOfMemoryError"
    except Exception as e:  # noqa: BLE001
        err = type(e).__name__
    print(f"cupy_error={err}")


def cupy_loop(iters=20000):
    import cupy
    a = cupy.ones(1024, dtype=cupy.float32)
    for _ in range(200):
        a = a * 1.0001 + 0.5
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        a = a * 1.0001 + 0.5
    cupy.cuda.Device().synchronize()
    print(f"cupy_op_us={(time.perf_counter() - t0) * 1e6 / iters:.3f}")


def jax_check():
    import jax
    import jax.numpy as jnp
    d = jax.devices()[0]
    x = jnp.ones((1024, 1024))
    x.block_until_ready()
    stats = d.memory_stats() or {}
    print(f"jax_bytes_limit={stats.get('bytes_limit', -1)}\njax_bytes_reserved={stats.get('bytes_reserved', -1)}")


if __name__ == "__main__":
    mode = sys.argv[1]
    args = sys.argv[2:]
    {
        "torch_report": lambda: torch_report(),
        "torch_oom": lambda: torch_oom(),
        "torch_train": lambda: torch_train(),
        "torch_hold": lambda: torch_hold(float(args[0]), float(args[1])),
        "torch_grab": lambda: torch_grab(),
        "torch_step_time": lambda: torch_step_time(),
        "cupy_check": lambda: cupy_check(int(args[0])),
        "cupy_loop": lambda: cupy_loop(),
        "jax_check": lambda: jax_check(),
    }[mode]()
    sys.stdout.flush()
