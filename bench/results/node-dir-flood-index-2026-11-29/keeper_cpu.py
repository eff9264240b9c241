#!/usr/bin/env python3
"""CPU of `gpuslice-node index` beside a tenant touching a 100,000-entry node directory for N s."""
import os, signal, subprocess, sys, tempfile, time, shutil
binary, seconds = sys.argv[1], float(sys.argv[2])
root = tempfile.mkdtemp(prefix="gpuslice-keeper-")
os.chmod(root, 0o755)
node = os.path.join(root, "node"); os.mkdir(node); os.chmod(node, 0o1777)
def as_tenant(work):
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(65534); os.setuid(65534); work()
        finally:
            os._exit(0)
    return pid
def junk():
    for i in range(100_000):
        os.close(os.open(os.path.join(node, f"junk-{i}"), os.O_CREAT | os.O_WRONLY, 0o644))
os.waitpid(as_tenant(junk), 0)
assert len(os.listdir(node)) >= 100_000, "the tenant made no junk"
keeper = subprocess.Popen([binary, "index", "--node-dir", node, "--log-level", "warn"])
time.sleep(1)
def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
def touch():
    path = os.path.join(node, "touched")
    while True:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)); os.unlink(path)
before = cpu(keeper.pid)
toucher = as_tenant(touch)
start = time.monotonic()
time.sleep(seconds / 2)
made = time.monotonic()
os.mkdir(os.path.join(node, "ctr-during"))  # a writer directory as the operator makes one
found = None
while time.monotonic() - made < seconds / 2:
    try:
        with open(os.path.join(node, ".writers")) as f:
            if "ctr-during\n" in f.read():
                found = time.monotonic() - made
                break
    except FileNotFoundError:
        pass
    time.sleep(0.005)
time.sleep(max(0.0, seconds - (time.monotonic() - start)))
used = cpu(keeper.pid) - before
os.kill(toucher, signal.SIGKILL); os.waitpid(toucher, 0)
keeper.terminate(); keeper.wait()
print(f"{binary}: a writer made during the flood was indexed after "
      + (f"{found * 1000:.0f} ms" if found is not None else "more than the rest of the run"))
print(f"{binary}: {used:.2f} CPU-s in {time.monotonic() - start:.1f} s beside the toucher ({used / seconds * 100:.0f}% of a core)")
shutil.rmtree(root, ignore_errors=True)
