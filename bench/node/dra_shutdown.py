#!/usr/bin/env python3
"""SIGTERM of `gpuslice-node dra` against a fake Kubernetes API server, measured.

Each run starts the daemon (--fake-gpus 2x16Gi, its own kubelet directories) against a fake API
server on loopback, waits until it has published its ResourceSlices under the node's Lease and is
watching them, sends SIGTERM and measures:
  exit      SIGTERM to the process's exit
  released  whether the Lease's holderIdentity was emptied by the stopping daemon
  sockets   whether the kubelet sockets it served are gone
  restart   a second instance started right after: start to its first published slice write

The fake server answers as the API server does for the requests the driver makes (Leases,
ResourceSlices with dry runs and watches that stay open without events until timeoutSeconds, Node
Events). --slow-ms delays every request except those on Leases (an API server busy with other
work; the Lease release must not wait behind it); --slow-all-ms delays every request;
--slow-reads-ms delays every GET (reads, lists, watches; the Lease's too), from the moment the
daemon has published until it is stopped (as tests/node/dra/dra_api_server_test.cpp's DraDaemon).
--single-threaded serves one request at a time (Python's plain HTTPServer), as some hand-written
fakes do.

  bench/node/dra_shutdown.py --binary build/bin/gpuslice-node --runs 10 [--slow-ms 2000]

Prints one line per run and a summary; exit status 0 when every run exited within 1 s, released
its Lease and left no socket behind.
"""

import argparse
import http.server
import json
import os
import shutil
import signal
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

LEASE_PREFIX = "/apis/coordination.k8s.io/v1/namespaces/"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.version = 100
        self.leases = {}
        self.slices = {}
        self.slice_writes = 0  # non-dry-run creates and updates of slices
        self.slow_ms = 0
        self.slow_all_ms = 0
        self.slow_reads_ms = 0
        self.reads_slow_now = False
        self.log = []  # (time, method, path, status)

    def bump(self, obj):
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return obj


STATE = State()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass
        STATE.log.append((time.monotonic(), self.command, self.path, status))

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"null")

    def delay(self, path):
        ms = STATE.slow_all_ms or (0 if path.startswith(LEASE_PREFIX) else STATE.slow_ms)
        if self.command == "GET" and STATE.reads_slow_now:
            ms = max(ms, STATE.slow_reads_ms)
        if ms:
            time.sleep(ms / 1000)

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        path = url.path
        body = self.body() if self.command in ("POST", "PUT", "PATCH") else None
        self.delay(path)
        if path.startswith(LEASE_PREFIX):
            return self.lease(path, body)
        if path == SLICES and self.command == "GET" and "watch" in query:
            return self.watch(int(query.get("timeoutSeconds", ["5"])[0]))
        if path.startswith(SLICES):
            return self.slice(path, query, body)
        if path.endswith("/events") and self.command == "POST":
            return self.reply(201, body)
        return self.reply(404, {"kind": "Status", "code": 404})

    def lease(self, path, body):
        rest = path[len(LEASE_PREFIX):].split("/")  # ns, "leases", [name]
        name = rest[2] if len(rest) > 2 else None
        with STATE.lock:
            if self.command == "GET":
                if name not in STATE.leases:
                    return self.reply(404, {"kind": "Status", "code": 404})
                return self.reply(200, STATE.leases[name])
            if self.command == "POST":
                name = body["metadata"]["name"]
                if name in STATE.leases:
                    return self.reply(409, {"kind": "Status", "code": 409})
                STATE.leases[name] = STATE.bump(body)
                return self.reply(201, STATE.leases[name])
            if self.command == "PUT":
                cur = STATE.leases.get(name)
                if cur is None:
                    return self.reply(404, {"kind": "Status", "code": 404})
                if body["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
                    return self.reply(409, {"kind": "Status", "code": 409, "message": "modified"})
                STATE.leases[name] = STATE.bump(body)
                return self.reply(200, STATE.leases[name])
        return self.reply(405, {"kind": "Status", "code": 405})

    def slice(self, path, query, body):
        name = path[len(SLICES) + 1:] or None
        with STATE.lock:
            if self.command == "GET" and name is None:
                return self.reply(200, {"kind": "ResourceSliceList",
                                        "metadata": {"resourceVersion": str(STATE.version)},
                                        "items": list(STATE.slices.values())})
            if self.command == "GET":
                if name not in STATE.slices:
                    return self.reply(404, {"kind": "Status", "code": 404})
                return self.reply(200, STATE.slices[name])
            if self.command == "POST":
                if query.get("dryRun") == ["All"]:
                    return self.reply(201, body)
                n = body["metadata"]["name"]
                if n in STATE.slices:
                    return self.reply(409, {"kind": "Status", "code": 409})
                STATE.slices[n] = STATE.bump(body)
                STATE.slice_writes += 1
                return self.reply(201, STATE.slices[n])
            if self.command == "PUT":
                cur = STATE.slices.get(name)
                if cur is None:
                    return self.reply(404, {"kind": "Status", "code": 404})
                if body["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
                    return self.reply(409, {"kind": "Status", "code": 409})
                STATE.slices[name] = STATE.bump(body)
                STATE.slice_writes += 1
                return self.reply(200, STATE.slices[name])
            if self.command == "DELETE":
                STATE.slices.pop(name, None)
                return self.reply(200, {"kind": "Status", "code": 200})
        return self.reply(405, {"kind": "Status", "code": 405})

    def watch(self, timeout_s):
        # As the API server with nothing to report: headers, then silence until timeoutSeconds.
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
        except OSError:
            return
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            time.sleep(0.05)
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any


class ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def lease_holder():
    with STATE.lock:
        for lease in STATE.leases.values():
            return lease["spec"].get("holderIdentity", "")
    return None


def start_daemon(binary, port, work, identity, log):
    args = [binary, "dra", "--fake-gpus", "2x16Gi", "--node-name", "node-a",
            "--api-server", f"http://127.0.0.1:{port}", "--api-token-file", os.path.join(work, "token"),
            "--root", os.path.join(work, "root"), "--plugins-dir", os.path.join(work, "plugins"),
            "--registry-dir", os.path.join(work, "registry"), "--cdi-dir", os.path.join(work, "cdi"),
            "--listen", "127.0.0.1:0", "--token-file", os.path.join(work, "token"),
            "--identity", identity, "--lease-duration", "15s"]
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)


def wait_until(predicate, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def one_run(binary, port, work, run, logs):
    with STATE.lock:
        STATE.leases.clear()
        STATE.slices.clear()
        STATE.slice_writes = 0
    sockets = [os.path.join(work, "plugins", "gpuslice.io", "dra.sock"),
               os.path.join(work, "registry", "gpuslice.io-reg.sock")]
    with open(os.path.join(logs, f"run{run}-a.log"), "w") as log:
        a = start_daemon(binary, port, work, f"daemon-a-{run}", log)
        ok = wait_until(lambda: STATE.slice_writes > 0 and lease_holder() == f"daemon-a-{run}"
                        and all(os.path.exists(s) for s in sockets), 30)
        if not ok:
            a.kill()
            a.wait()
            return {"run": run, "error": "first instance never published"}
        STATE.reads_slow_now = STATE.slow_reads_ms > 0
        time.sleep(0.3)  # into its watch (or a slow read)
        sent = time.monotonic()
        a.send_signal(signal.SIGTERM)
        try:
            a.wait(timeout=10)
        except subprocess.TimeoutExpired:
            a.kill()
            a.wait()
        exit_s = time.monotonic() - sent
        STATE.reads_slow_now = False
    released = lease_holder() == ""
    left = [s for s in sockets if os.path.exists(s)]
    with STATE.lock:
        STATE.slice_writes = 0
    # Restart: how soon the next instance writes its slices (it re-writes them: a new identity).
    with STATE.lock:
        for s in STATE.slices.values():
            s.setdefault("metadata", {}).setdefault("annotations", {})["gpuslice.io/spec-digest"] = "old"
    with open(os.path.join(logs, f"run{run}-b.log"), "w") as log:
        started = time.monotonic()
        b = start_daemon(binary, port, work, f"daemon-b-{run}", log)
        published = wait_until(lambda: STATE.slice_writes > 0 and lease_holder() == f"daemon-b-{run}", 30)
        restart_s = time.monotonic() - started if published else None
        b.send_signal(signal.SIGTERM)
        try:
            b.wait(timeout=10)
        except subprocess.TimeoutExpired:
            b.kill()
            b.wait()
    return {"run": run, "exit_s": exit_s, "released": released, "sockets_left": len(left),
            "restart_s": restart_s, "code": a.returncode}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", required=True)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--slow-ms", type=int, default=0, help="delay of every request but the Lease's")
    p.add_argument("--slow-all-ms", type=int, default=0, help="delay of every request")
    p.add_argument("--slow-reads-ms", type=int, default=0,
                   help="delay of every GET once the daemon has published, until it is stopped")
    p.add_argument("--single-threaded", action="store_true")
    p.add_argument("--logs", help="keep the daemons' logs here")
    a = p.parse_args()
    STATE.slow_ms, STATE.slow_all_ms, STATE.slow_reads_ms = a.slow_ms, a.slow_all_ms, a.slow_reads_ms
    cls = http.server.HTTPServer if a.single_threaded else ThreadingServer
    server = cls(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    work = tempfile.mkdtemp(prefix="dra-shutdown-")
    logs = a.logs or work
    os.makedirs(logs, exist_ok=True)
    with open(os.path.join(work, "token"), "w") as f:
        f.write("bench-token\n")
    results = []
    try:
        for run in range(1, a.runs + 1):
            r = one_run(a.binary, server.server_address[1], work, run, logs)
            results.append(r)
            if "error" in r:
                print(f"run {run:2d}: {r['error']}", flush=True)
                continue
            restart = f"{r['restart_s']:.2f} s" if r["restart_s"] is not None else "never"
            print(f"run {run:2d}: exit {r['exit_s']:.3f} s (code {r['code']}), Lease "
                  f"{'released' if r['released'] else 'NOT released'}, sockets left {r['sockets_left']}, "
                  f"restart published in {restart}", flush=True)
    finally:
        server.shutdown()
        if not a.logs:
            shutil.rmtree(work, ignore_errors=True)
    done = [r for r in results if "error" not in r]
    if not done:
        return 1
    exits = sorted(r["exit_s"] for r in done)
    restarts = [r["restart_s"] for r in done if r["restart_s"] is not None]
    print(f"\nruns {len(done)}/{len(results)}; exit median {statistics.median(exits):.3f} s, "
          f"max {exits[-1]:.3f} s, within 1 s {sum(e < 1 for e in exits)}/{len(done)}; "
          f"Lease released {sum(r['released'] for r in done)}/{len(done)}; "
          f"sockets left {sum(r['sockets_left'] for r in done)}; "
          f"restart published median {statistics.median(restarts) if restarts else float('nan'):.2f} s, "
          f"max {max(restarts) if restarts else float('nan'):.2f} s")
    good = (len(done) == len(results) and exits[-1] < 1 and all(r["released"] for r in done)
            and not any(r["sockets_left"] for r in done))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
