#!/usr/bin/env python3
"""The GPU scripts (bench/gpu, tests/gpu) without a GPU: each compiles, and the priority benchmark's
analysis reads the gate's log lines and finds a run's worst second.

  gpu_scripts_test.py REPOSITORY_ROOT
"""
import argparse
import contextlib
import glob
import importlib.util
import io
import json
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # nothing written into the source tree
ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))  # priority_bench imports compute_accuracy
bench = load(os.path.join(ROOT, "bench", "gpu", "priority_bench.py"), "priority_bench")


class EveryScriptCompiles(unittest.TestCase):
    def test_compiles(self):
        scripts = sorted(glob.glob(os.path.join(ROOT, "bench", "gpu", "*.py")) +
                         glob.glob(os.path.join(ROOT, "tests", "gpu", "*.py")))
        self.assertGreater(len(scripts), 5)
        for path in scripts:
            with open(path) as f:
                compile(f.read(), path, "exec")  # raises SyntaxError with the file and line


class GateLog(unittest.TestCase):
    # As the library writes them (common/log.cpp's prefix; the gate's messages).
    LINES = [
        "[gpuslice 41] DEBUG: priority sharing on GPU-1: record /tmp/n/uid-0/GPU-1.00fe\n",
        "[gpuslice 41] DEBUG: priority gate: floor slice at 1002500000 us\n",
        "[gpuslice 41] DEBUG: priority gate: floor slice at 1003100000 us\n",
        "[transformers] some warning\n",
        "[gpuslice 41] INFO: priority gate, device 0: 1.000 s held back (10 launches held), 2 drains, "
        "30 event waits, 2 floor slices, 5 scans, 50 re-reads\n",
        "[gpuslice 42] INFO: compute limiter, device 0: 3 windows (1 ended by a pause), 3 drains, "
        "1.0 s busy, 1.0 s held back\n",
    ]

    def test_statistics_and_floor_slices_are_told_apart(self):
        stats, slices = bench.read_gate_log(self.LINES, 1000.0)
        self.assertEqual(len(stats), 2)
        self.assertTrue(stats[0].startswith("[gpuslice 41] INFO: priority gate, device 0"))
        self.assertTrue(stats[1].startswith("[gpuslice 42] INFO: compute limiter, device 0"))
        self.assertEqual(slices, [2.5, 3.1])  # seconds after the run's start

    def test_the_pattern_is_the_gates_message(self):
        with open(os.path.join(ROOT, "src", "limiter", "priority_gate.cpp")) as f:
            self.assertIn('"priority gate: floor slice at %llu us"', f.read())


class WorstSecond(unittest.TestCase):
    def run_of(self, slow_from):
        # 20 requests/s for 10 s of 8 ms each; from slow_from for 1 s they take 30 ms.
        timeline, free = [], 0.0
        for i in range(200):
            arrival = i * 0.05
            began = max(arrival, free)
            service = 0.030 if slow_from <= arrival < slow_from + 1.0 else 0.008
            free = began + service
            timeline.append((arrival, began, free))
        return {
            "server": {"timeline_s": timeline},
            "trainer": {"step_done_s": [i * 0.1 for i in range(100)], "floor_slices_s": [-0.5, 6.2, 6.4]},
            "nvml": [(i * 0.1, 50, 1500 if 60 <= i < 70 else 1980, 300.0, 0) for i in range(100)],
            "host": [(i * 0.1, 20.0 if 60 <= i < 70 else 0.0, 30.0) for i in range(100)],
        }

    def test_finds_the_slow_second_and_what_happened_in_it(self):
        w = bench.worst_second(self.run_of(6.0), 10.0)
        worst, run = w["worst"], w["run"]
        self.assertAlmostEqual(worst["from_s"], 6.0)
        self.assertEqual(worst["requests"], 20)
        self.assertAlmostEqual(worst["service_ms"], 30.0, places=6)
        self.assertGreaterEqual(worst["latency_ms"], worst["service_ms"])
        self.assertAlmostEqual(worst["sm_mhz"], 1500.0)
        self.assertAlmostEqual(worst["host_steal_pct"], 20.0)
        self.assertEqual(worst["floor_slices"], 2)
        self.assertAlmostEqual(worst["trainer_steps_per_s"], 10.0)
        self.assertEqual(run["requests"], 200)
        self.assertEqual(run["floor_slices"], 2)  # the one before the start is not the window's
        self.assertLess(run["service_ms"], worst["service_ms"])
        text = bench.describe_worst(w)
        self.assertIn("worst second from 6.0 s: 20 requests", text)
        self.assertIn("2 floor slices (run 2)", text)

    def test_without_samples_or_trainer_the_rest_is_still_reported(self):
        run = self.run_of(2.0)
        for key in ("trainer", "nvml", "host"):
            del run[key]
        w = bench.worst_second(run, 10.0)
        self.assertAlmostEqual(w["worst"]["from_s"], 2.0)
        self.assertIsNone(w["worst"]["sm_mhz"])
        text = bench.describe_worst(w)
        self.assertIn("SM clock - MHz", text)
        self.assertNotIn("trainer", text)

    def test_no_server_no_report(self):
        self.assertIsNone(bench.worst_second({"trainer": {"step_done_s": [1.0]}}, 10.0))
        self.assertIsNone(bench.worst_second({"server": {"timeline_s": []}}, 10.0))


class Rounds(unittest.TestCase):
    def round_of(self, latencies, steps, util):
        return ({"server": {"seconds": 10.0, "latencies_s": latencies, "arrivals": len(latencies),
                            "served": len(latencies), "unserved": 0, "busy_s": 3.0, "timeline_s": [(0, 0, 1)],
                            "gate_stats": ["server stats"]},
                 "trainer": {"seconds": 10.0, "steps": steps, "steps_per_s": steps / 10.0, "step_done_s": [1.0],
                             "floor_slices_s": [2.0], "gate_stats": ["trainer stats"]},
                 "nvml": [(0.0, 50, 1980, 300.0, 0)]}, util)

    def test_one_round_is_the_run_itself(self):
        one = self.round_of([0.01, 0.02], 100, 50.0)
        self.assertIs(bench.pool_runs([one]), one)

    def test_rounds_pool_into_one_longer_run(self):
        quick = [0.010] * 99 + [0.030]
        slow = [0.012] * 98 + [0.050, 0.060]
        results, util = bench.pool_runs([self.round_of(quick, 100, 40.0), self.round_of(slow, 300, None),
                                         self.round_of(quick, 200, 60.0)])
        server, trainer = results["server"], results["trainer"]
        self.assertEqual(len(server["latencies_s"]), 300)
        self.assertEqual((server["arrivals"], server["served"], server["seconds"]), (300, 300, 30.0))
        self.assertAlmostEqual(server["busy_s"], 9.0)
        self.assertEqual(server["timeline_s"], [])  # per round only
        self.assertAlmostEqual(trainer["steps_per_s"], 600 / 30.0)
        self.assertEqual(server["gate_stats"], ["server stats"] * 3)
        self.assertEqual(util, 50.0)  # the rounds that had a sample
        row = bench.summarize("priorities high/low", 30, results, util, {})
        # Nearest rank over all 300 (60, 50, 30 above it): neither round's own p99 (10 and 50 ms).
        self.assertAlmostEqual(row["p99_ms"], 30.0)
        self.assertAlmostEqual(row["server_busy_pct"], 30.0)


class FakeBench:
    """Bench without processes: each measure() returns made-up reports. The server's requests take
    10 ms alone, 2 ms more beside a low-priority trainer and 5 ms more un-managed; round 2 of the
    server alone is a slow stretch (every request 20 ms), so pooling shows."""
    tags = []

    def __init__(self, args):
        self.args = args
        self.sampler = None
        self.host = None

    def calibrate(self):
        return {"service_mean_s": 0.010, "service_p50_s": 0.010, "service_hot_mean_s": 0.009, "requests": 200}

    def measure(self, tag, members, rate):
        FakeBench.tags.append(tag)
        results = {}
        seconds = self.args.seconds
        for member in members:
            role, managed, priority = member[:3]
            if role == "server":
                ms = 10.0 + (2.0 if priority == "high" else 0.0)
                if tag.endswith("un-managed") or "-un-managed" in tag:
                    ms += 5.0
                if "server-alone-r2" in tag:
                    ms = 20.0
                latencies = [ms / 1e3] * 99 + [3 * ms / 1e3]
                timeline = [(i * 0.1, i * 0.1, i * 0.1 + ms / 1e3) for i in range(100)]
                results["server"] = {"seconds": seconds, "latencies_s": latencies, "arrivals": 100, "served": 100,
                                     "unserved": 0, "busy_s": 1.0, "timeline_s": timeline, "start": 0.0}
            elif role == "trainer":
                steps = 200 if not managed else (100 if "load" in tag else 180)
                results["trainer"] = {"seconds": seconds, "steps": steps, "steps_per_s": steps / seconds,
                                      "step_done_s": [], "floor_slices_s": []}
            else:
                results[role] = {"seconds": seconds}
            stats = ["[gpuslice 1] INFO: priority gate, device 0: 0.000 s held back"] if priority else []
            results[role]["gate_stats"] = stats
        return results, 50.0


class Orchestration(unittest.TestCase):
    def run_main(self, *options):
        """priority_bench's main() with these options against FakeBench: (its table, its JSON)."""
        saved = (bench.Bench, bench.require_torch, sys.argv)
        bench.Bench, bench.require_torch = FakeBench, lambda: None
        FakeBench.tags = []
        with tempfile.TemporaryDirectory() as out:
            sys.argv = ["priority_bench.py", "--lib", __file__, "--out", out, "--seconds", "10", *options]
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    self.assertEqual(bench.main(), 0)
            finally:
                bench.Bench, bench.require_torch, sys.argv = saved
            with open(os.path.join(out, "priority_bench.md")) as f:
                table = f.read()
            with open(os.path.join(out, "priority_bench.json")) as f:
                data = json.load(f)
        return table, data

    def test_rounds_interleave_and_the_table_pools_them(self):
        table, data = self.run_main("--loads", "30", "--only-priorities", "--repeat", "2")
        self.assertEqual(FakeBench.tags, ["trainer-alone", "beside-idle-high", "load30-server-alone-r1",
                                          "load30-priorities-r1", "load30-server-alone-r2", "load30-priorities-r2"])
        rows = {row["config"]: row for row in data["rows"]}
        # Pooled: the server alone's p99 is over both rounds (10 ms and the slow 20 ms one).
        self.assertAlmostEqual(rows["server alone"]["p99_ms"], 20.0)
        self.assertAlmostEqual(rows["priorities high/low"]["p99_ms"], 12.0)
        self.assertAlmostEqual(rows["priorities high/low"]["p99_x"], 12.0 / 20.0)
        self.assertAlmostEqual(rows["priorities high/low"]["trainer_x"], 0.5)
        self.assertEqual(len(rows["priorities high/low"]["worst_seconds"]), 2)
        self.assertIn("load30-priorities high/low-r2", data["runs"])
        self.assertIn("| 30 | priorities high/low |", table)
        self.assertIn("load 30%: priorities p99 ÷ alone 0.60 (goal ≤ 1.1) PASS; trainer ÷ alone 0.50 (goal ≥ 0.5) PASS",
                      table)

    def test_one_round_is_the_measured_run(self):
        table, _ = self.run_main("--loads", "30,60")
        self.assertEqual(FakeBench.tags[2:7], ["load30-server-alone", "load30-un-managed", "load30-limits",
                                               "load30-priorities", "load60-server-alone"])
        self.assertIn("| 60 | un-managed | 15.00 | 15.00 | 1.50 | 1.50 |", table)  # p99 of 100: the 99th
        self.assertIn("load 60%: priorities p99 ÷ alone 1.20 (goal ≤ 1.1) FAIL; trainer ÷ alone 0.50 (goal ≥ 0.25) PASS",
                      table)


class Inputs(unittest.TestCase):
    def parser(self):
        ap = argparse.ArgumentParser()
        ap.error = lambda message: (_ for _ in ()).throw(ValueError(message))
        return ap

    def test_variants(self):
        label, server, trainer = bench.parse_variant(
            "b1;server:GPUSLICE_PRIORITY_GRACE=1ms;trainer:GPUSLICE_PRIORITY_IN_FLIGHT=1ms,GPUSLICE_PRIORITY_RAMP=0ms",
            self.parser())
        self.assertEqual(label, "b1")
        self.assertEqual(server, {"GPUSLICE_PRIORITY_GRACE": "1ms"})
        self.assertEqual(trainer, {"GPUSLICE_PRIORITY_IN_FLIGHT": "1ms", "GPUSLICE_PRIORITY_RAMP": "0ms"})
        for bad in ("b1;;trainer:GPUSLICE_PRIORITY_IN_FLIGHT=1ms", "b1;trainer:IN_FLIGHT=1ms",
                    "b1;other:GPUSLICE_X=1", "two words;trainer:GPUSLICE_X=1", "b1;trainer:GPUSLICE_X"):
            with self.assertRaises(ValueError, msg=bad):
                bench.parse_variant(bad, self.parser())

    def test_percentile(self):
        values = list(range(1, 101))
        self.assertEqual(bench.percentile(values, 0.99), 99)
        self.assertEqual(bench.percentile(values, 0.5), 50)
        self.assertTrue(bench.percentile([], 0.5) != bench.percentile([], 0.5))  # nan

    def test_host_sampler_reads_proc_stat(self):
        read = bench.HostSampler._read()
        if read is None:
            self.skipTest("no /proc/stat with a steal column")
        total, idle, steal = read
        self.assertGreaterEqual(total, idle)
        self.assertGreaterEqual(total, steal)


if __name__ == "__main__":
    unittest.main(verbosity=1)
