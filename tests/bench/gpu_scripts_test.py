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
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True  # nothing written into the source tree
ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call_main(main, argv):
    """main() with sys.argv = argv and its output captured: (what it returned, its stderr)."""
    saved = sys.argv
    sys.argv = argv
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main()
    finally:
        sys.argv = saved
    return code, err.getvalue()


sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))  # priority_bench imports compute_accuracy
bench = load(os.path.join(ROOT, "bench", "gpu", "priority_bench.py"), "priority_bench")
pool = load(os.path.join(ROOT, "bench", "gpu", "priority_pool.py"), "priority_pool")
by_idle = load(os.path.join(ROOT, "bench", "gpu", "priority_by_idle.py"), "priority_by_idle")
timeslice = load(os.path.join(ROOT, "bench", "gpu", "timeslice_probe.py"), "timeslice_probe")
driver_paths = load(os.path.join(ROOT, "tests", "gpu", "driver_paths.py"), "driver_paths")
accuracy = load(os.path.join(ROOT, "bench", "gpu", "compute_accuracy.py"), "compute_accuracy")
rm_round = load(os.path.join(ROOT, "bench", "gpu", "rm_alloc_round.py"), "rm_alloc_round")


class ComputeAccuracyExpectsGpuTime(unittest.TestCase):
    """A limit caps GPU time: the expected throughput ratio is the limit over the unlimited busy share."""

    def test_device_bound_work_is_expected_at_the_limit(self):
        self.assertAlmostEqual(accuracy.expected_ratio(30, 100.0), 0.30)
        self.assertAlmostEqual(accuracy.expected_ratio(30, None), 0.30)

    def test_work_below_its_limit_is_expected_at_full_speed(self):
        self.assertEqual(accuracy.expected_ratio(50, 4.0), 1.0)

    def test_mixed_work_is_expected_between(self):
        self.assertAlmostEqual(accuracy.expected_ratio(20, 40.0), 0.5)

    def test_held_work_passes_within_the_tolerance_and_free_work_at_the_floor(self):
        self.assertTrue(accuracy.phase_passes(0.325, 0.30, 3.0))
        self.assertFalse(accuracy.phase_passes(0.34, 0.30, 3.0))
        self.assertTrue(accuracy.phase_passes(0.91, 1.0, 3.0))
        self.assertFalse(accuracy.phase_passes(0.48, 1.0, 3.0))  # the old definition's decode loop

    def test_gpu_time_is_told_beside_the_verdict_for_held_work_only(self):
        # At 80% a boosted clock put the throughput at 0.834 while the device ran it 79.3% of the time.
        self.assertTrue(accuracy.gpu_time_within(79.3, 80, 0.80, 3.0))
        self.assertFalse(accuracy.gpu_time_within(84.0, 80, 0.80, 3.0))
        self.assertIsNone(accuracy.gpu_time_within(None, 80, 0.80, 3.0))
        self.assertIsNone(accuracy.gpu_time_within(5.0, 50, 1.0, 3.0))  # a decode loop below its limit

    def test_gpu_time_weights_the_driver_samples_inside_the_phase_by_their_periods(self):
        sampler = accuracy.NvmlSampler.__new__(accuracy.NvmlSampler)
        sampler.driver_samples = [(0.0, 0), (0.5, 100), (1.0, 0), (1.5, 100), (2.0, 50), (2.5, 50)]
        self.assertAlmostEqual(sampler.gpu_time(0.0, 2.0), 62.5)
        self.assertAlmostEqual(sampler.gpu_time(0.4, 2.6), 50.0)  # periods reaching outside are left out
        self.assertIsNone(sampler.gpu_time(3.0, 4.0))

    def test_a_phase_row_carries_its_expected_ratio(self):
        phases = [
            {"limit": 100, "start": 0.0, "end": 4.0, "from": 0.0, "it_s": 100.0, "util": 5.0, "sm_mhz": None},
            {"limit": 50, "start": 4.0, "end": 8.0, "from": 5.0, "it_s": 95.0, "util": 5.0, "sm_mhz": None},
            {"limit": 100, "start": 8.0, "end": 12.0, "from": 9.0, "it_s": 100.0, "util": 5.0, "sm_mhz": None},
        ]
        data = {"phases": phases, "timeline": [[t / 10, 10 * t] for t in range(1, 121)], "unhooked_it_s": 100.0}
        with contextlib.redirect_stdout(io.StringIO()):
            rows, _ = accuracy.analyse("decode", data)
        self.assertEqual(len(rows), 1)
        self.assertEqual(rows[0]["expected_ratio"], 1.0)
        self.assertTrue(rows[0]["pass"])


class ComputeAccuracyKernelTime(unittest.TestCase):
    """--kernel-timeline: each phase also judged by the GPU time its kernels ran (CUPTI bins)."""

    def test_kernel_time_is_the_busy_share_of_the_phase_with_cut_bins_pro_rata(self):
        bins = [10_000_000, 5_000_000, 0, 2_000_000]  # ns busy per 10 ms bin
        self.assertAlmostEqual(accuracy.kernel_time_pct(bins, 0.0, 0.04), 42.5)
        self.assertAlmostEqual(accuracy.kernel_time_pct(bins, 0.005, 0.015), 75.0)  # half of bin 0, half of bin 1
        self.assertAlmostEqual(accuracy.kernel_time_pct(bins, 0.02, 0.03), 0.0)
        self.assertIsNone(accuracy.kernel_time_pct([], 0.0, 1.0))
        self.assertIsNone(accuracy.kernel_time_pct(bins, 0.02, 0.02))

    def phases(self, limited_kernel_pct):
        # A device-bound workload whose boosted clock did 54% of the work in 50% of the GPU time.
        return [
            {"limit": 100, "start": 0.0, "end": 4.0, "from": 0.0, "it_s": 100.0, "util": 99.0, "sm_mhz": None,
             "kernel_pct": 99.0},
            {"limit": 50, "start": 4.0, "end": 8.0, "from": 5.0, "it_s": 54.0, "util": 50.0, "sm_mhz": None,
             "kernel_pct": limited_kernel_pct},
            {"limit": 100, "start": 8.0, "end": 12.0, "from": 9.0, "it_s": 100.0, "util": 99.0, "sm_mhz": None,
             "kernel_pct": 99.0},
        ]

    def analyse(self, phases):
        data = {"phases": phases, "timeline": [[t / 10, 10 * t] for t in range(1, 121)], "unhooked_it_s": 100.0}
        with contextlib.redirect_stdout(io.StringIO()):
            rows, _ = accuracy.analyse("graph", data)
        return rows[0]

    def test_a_phase_is_judged_by_its_kernel_time_beside_its_throughput(self):
        row = self.analyse(self.phases(49.5))
        self.assertFalse(row["pass"])  # throughput 0.54 against 0.505 expected
        self.assertAlmostEqual(row["kernel_time_ratio"], 0.5)
        self.assertTrue(row["kernel_time_pass"])
        self.assertFalse(self.analyse(self.phases(56.0))["kernel_time_pass"])

    def test_without_the_timeline_there_is_no_kernel_verdict(self):
        phases = self.phases(None)
        row = self.analyse(phases)
        self.assertIsNone(row["kernel_time_ratio"])
        self.assertIsNone(row["kernel_time_pass"])
        self.assertEqual(accuracy.pooled_kernel_cells([row], 0.5), "- | - | -")

    def test_a_missing_timeline_library_is_refused_before_any_run(self):
        here = os.path.abspath(__file__)  # stands in for the library and the CLI, which must exist
        with tempfile.TemporaryDirectory() as out:
            code, err = call_main(accuracy.main, ["compute_accuracy.py", "--lib", here, "--cli", here, "--out", out,
                                                  "--kernel-timeline", "/nonexistent/libkernel_timeline.so"])
        self.assertEqual(code, 2)
        self.assertIn("/nonexistent/libkernel_timeline.so", err)

    def test_phases_of_one_limit_pool_their_kernel_time_by_seconds(self):
        rows = [{"kernel_time_ratio": 0.5, "kernel_time_pct": 50.0, "unlimited_kernel_time_pct": 100.0, "seconds": 2.0},
                {"kernel_time_ratio": 0.56, "kernel_time_pct": 56.0, "unlimited_kernel_time_pct": 100.0, "seconds": 1.0}]
        self.assertEqual(accuracy.pooled_kernel_cells(rows, 0.5), "0.520 | +2.0 | PASS")


class RmAllocRoundExplainsNvmlByTheProbesEvents(unittest.TestCase):
    """rm_alloc_round.py: an NVML sample is explained by RM allocations begun before it ended, less frees
    finished before it began; refused (R) and duplicated (D) handles take no part."""
    MIB = 1 << 20
    LOG = ("H pid=7 t=1 clock=CLOCK_MONOTONIC\n"
           "E op=A t0=100 t1=110 cls=0x40 client=0x1 h=0x2 bytes=10485760 where=local local=10485760\n"
           "E op=R t0=150 t1=150 cls=0x40 client=0x1 h=0x3 bytes=104857600 where=local local=10485760\n"
           "E op=D t0=160 t1=170 cls=0x40 client=0x4 h=0x5 bytes=10485760 where=dup local=10485760\n"
           "E op=A t0=180 t1=190 cls=0x3e client=0x1 h=0x6 bytes=4096 where=system local=10485760\n"
           "E op=I t0=200 t1=210 cls=0x40 client=0x1 h=0x2 bytes=10485760 where=local local=0\n"
           "S t=300 local=0 local_peak=10485760 system=4096 dup=0 local_allocs=1 local_frees=1 implicit=1 nv_ioctls=9 "
           "uvm_ioctls=0 lost=0\n"
           "T esc=0x2b name=RM_ALLOC count=3 ns=900 size=48 other_size=-1 rm_errors=0 last_rm_status=0x0 sys_errors=0\n"
           "C cls=0x40 count=1 bytes=10485760\n"
           "X version=580.95.05 abi_major=580 uvm_count=0 events_lost=0 local=0 local_peak=10485760\n")

    def test_samples_against_events(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "probe.7")
            with open(path, "w") as f:
                f.write(self.LOG)
            p = rm_round.parse_probe(path)
        self.assertEqual((len(p["E"]), p["T"]["RM_ALLOC"]["count"], p["X"]["local_peak"]), (5, "3", "10485760"))
        m = self.MIB
        # Seen during the allocation (begun), during the free (not finished), after it: all explained.
        un, over, n, first = rm_round.explain([(50, 60, 0), (105, 108, 10 * m), (205, 208, 10 * m), (220, 230, 0)],
                                              p["E"])
        self.assertEqual((un <= rm_round.TOLERANCE, over, n, first), (True, 0, 0, None))
        # NVML ahead of every allocation the probe saw begin: unexplained, and the first such sample named.
        un, _, n, first = rm_round.explain([(90, 95, 10 * m), (220, 230, 25 * m)], p["E"])
        self.assertEqual((un, n, first["t"], first["probe_upper_mib"]), (25 * m, 2, 95, 0.0))
        # The probe holding what NVML no longer shows (its free finished before the sample began): over.
        _, over, _, _ = rm_round.explain([(150, 160, 0)], p["E"])
        self.assertEqual(over, 10 * m)

    def test_unknown_case_is_refused_before_any_gpu_call(self):
        code, err = call_main(rm_round.main, ["rm_alloc_round.py", "--probe", "p", "--prog", "p", "--globals-prog",
                                              "g", "--cost-prog", "c", "--out", "o", "--cases", "calib,nope"])
        self.assertEqual(code, 2)
        self.assertIn("nope", err)


# A stand-in for the few torch calls the `matmul` workload and the worker make: a matmul "runs" 1 ms
# on the host (scaled by GS_FAKE_SHARE, the share of the device the process is given), events are
# host timestamps. Enough to drive compute_accuracy.py's process orchestration without a GPU.
FAKE_TORCH = """
import os, time
bfloat16 = float16 = "dtype"
_share = float(os.environ.get("GS_FAKE_SHARE_" + os.environ.get("GPUSLICE_COMPUTE_LIMIT", "none"), "1"))
def randn(*a, **k): return object()
def empty(*a, **k): return object()
def matmul(a, b, out=None): time.sleep(0.001 / _share)
class _Event:
    def __init__(self, enable_timing=False): self.t = None
    def record(self, stream=None): self.t = time.monotonic()
    def elapsed_time(self, other): return (other.t - self.t) * 1000.0
class cuda:
    Event = _Event
    @staticmethod
    def init(): pass
    @staticmethod
    def synchronize(): pass
"""


class ComputeAccuracyCpuOffset(unittest.TestCase):
    """--cpu-offset: a second run on another GPU of the host pins its processes to cores of its own."""

    def test_the_auto_cores_move_up_by_the_offset(self):
        self.assertEqual(accuracy.shift_cpus("4-7", 8), "12,13,14,15")
        self.assertEqual(accuracy.shift_cpus("4,5", 8), "12,13")
        self.assertEqual(accuracy.shift_cpus("4", 0), "4")
        self.assertEqual(accuracy.shift_cpus("", 8), "")  # unpinned stays unpinned


class ComputeAccuracyTwoProcessesSummed(unittest.TestCase):
    """A 2p workload's ratios are the container's sum: the companion's iterations join the measured
    one's (before, only the measured process counted, and an uneven split between the two in a second
    read as the limit missed)."""

    def test_the_companions_marks_are_summed_on_the_measured_ones_time_axis(self):
        # The companion began 0.5 s before the measured one, at 100 it/s; the measured one at 50 it/s.
        summed = accuracy.sum_timelines([[1.0, 50], [2.0, 100]], 10.0, [[1.0, 100], [4.0, 400]], 9.5)
        self.assertAlmostEqual(summed["from_s"], -0.5)
        self.assertEqual([t for t, _ in summed["timeline"]], [1.0, 2.0])
        # From the measured one's time 0 (the companion's 0.5 s, 50 done), as a Timeline counts: the
        # companion's 1.5 s (150) less its 50 before. Counting those 50 put an H200 run's first phase
        # at 1.48x its limit (bench/results/gpu-2026-11-29-e, call 4).
        self.assertAlmostEqual(summed["timeline"][0][1], 50 + 150 - 50)
        self.assertAlmostEqual(summed["timeline"][1][1], 100 + 250 - 50)
        rate = accuracy.Timeline(summed["timeline"]).throughput(0.0, 1.0)
        self.assertAlmostEqual(rate, 150.0)  # 50 + 100 it/s from the measured one's start

    def test_a_companion_that_began_later_counts_from_its_start(self):
        summed = accuracy.sum_timelines([[1.0, 50]], 10.0, [[1.0, 100]], 10.5)
        self.assertAlmostEqual(summed["from_s"], 0.5)
        self.assertAlmostEqual(summed["timeline"][0][1], 50 + 50)

    def test_a_two_process_worker_reports_both_processes_iterations(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "torch"))
            with open(os.path.join(tmp, "torch", "__init__.py"), "w") as f:
                f.write(FAKE_TORCH)
            report = os.path.join(tmp, "r.json")
            env = dict(os.environ, PYTHONPATH=tmp)
            subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu", "compute_accuracy.py"), "--worker",
                            "matmul2p", "--seconds", "0.6", "--warmup", "0.2", "--report", report, "--cpus", ""],
                           env=env, check=True, timeout=60)
            with open(report) as f:
                data = json.load(f)
            # The companion's output is kept beside the report (its library's exit line).
            self.assertTrue(os.path.exists(report + ".companion.log"))
        own, both = data["own_timeline"][-1][1], data["timeline"][-1][1]
        # The measured one waits for its companion's first step, so its count covers time 0.
        self.assertLess(data["companion_from_s"], 0)
        # Both loops sleep 1 ms per step: the sum is about twice the measured one's (loose: a loaded host).
        self.assertGreater(both, 1.2 * own)
        self.assertLess(both, 4.0 * own)


class ComputeAccuracyLimiterLines(unittest.TestCase):
    def test_the_companions_limiter_line_joins_the_measured_ones(self):
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "r.log")
            with open(log, "w") as f:
                f.write("noise\n[gpuslice 1] INFO: compute limiter, device 0: 38 windows\n")
            self.assertEqual(accuracy.limiter_lines(log), ["[gpuslice 1] INFO: compute limiter, device 0: 38 windows"])
            self.assertEqual(accuracy.limiter_lines(os.path.join(tmp, "none.log")), [])


class ComputeAccuracyTurns(unittest.TestCase):
    """--mps-compute threads: one process per limit, the phases taken as turns (a stand-in torch)."""

    def run_turns(self, workload):
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "torch"))
            with open(os.path.join(tmp, "torch", "__init__.py"), "w") as f:
                f.write(FAKE_TORCH)
            saved = dict(os.environ)
            os.environ["PYTHONPATH"] = tmp
            os.environ["GS_FAKE_SHARE_20"] = "0.2"
            os.environ["GS_FAKE_SHARE_50"] = "0.5"
            try:
                args = argparse.Namespace(out=os.path.join(tmp, "out"), lib="/dev/null", warmup=0.1, cpus="",
                                          kernel_timeline=None, schedule=[100, 20, 100, 50, 100], seconds=0.2,
                                          settle=0.0, mps_compute="threads", unhooked=False, workloads=[workload],
                                          mps_limits_file=None)
                runner = accuracy.Runner(args)

                class NoNvml:
                    ok = False

                with contextlib.redirect_stdout(io.StringIO()):
                    rows, runs, transitions = accuracy.accuracy(args, runner, NoNvml())
            finally:
                os.environ.clear()
                os.environ.update(saved)
        return rows, runs, transitions

    def test_each_limit_runs_in_a_process_of_its_own_and_the_phases_take_turns(self):
        rows, runs, transitions = self.run_turns("matmul")
        self.assertEqual([r["limit"] for r in rows], [20, 50])
        # Each limit's process ran at its own speed (host sleeps: loose on a loaded machine).
        self.assertTrue(0.1 < rows[0]["ratio"] < 0.35, rows[0]["ratio"])
        self.assertTrue(0.35 < rows[1]["ratio"] < 0.7, rows[1]["ratio"])
        self.assertEqual(transitions, [])  # no common timeline: no settling to speak of
        turns = runs[-1]["turns_by_limit"]
        self.assertEqual(sorted(len(t) for t in turns.values()), [1, 1, 3])
        spans = sorted(t[:2] for ts in turns.values() for t in ts)
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            self.assertLessEqual(a1, b0 + 0.01)  # one turn at a time

    def test_a_two_process_workloads_companion_takes_the_same_turns(self):
        rows, runs, _ = self.run_turns("matmul2p")
        self.assertTrue(0.1 < rows[0]["ratio"] < 0.35, rows[0]["ratio"])
        self.assertTrue(0.35 < rows[1]["ratio"] < 0.7, rows[1]["ratio"])


class ComputeModesTable(unittest.TestCase):
    def test_one_row_per_shape_and_limit_one_column_pair_per_mode(self):
        def row(workload, limit, ratio, mhz):
            return {"workload": workload, "limit": limit, "ratio": ratio, "sm_mhz": mhz, "unlimited_sm_mhz": 1500}

        with tempfile.TemporaryDirectory() as tmp:
            a, b = os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")
            with open(a, "w") as f:
                json.dump({"rows": [row("graph", 30, 0.31, 1800), row("graph", 30, 0.33, 1900),
                                    row("graph", 80, 0.83, 1600)]}, f)
            with open(b, "w") as f:
                json.dump({"rows": [row("graph", 30, 0.29, 1500)]}, f)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = accuracy.modes_table([f"time={a}", f"threads={b}"])
        self.assertEqual(code, 0)
        lines = [line for line in out.getvalue().splitlines() if line.startswith("| graph")]
        self.assertEqual(len(lines), 2)
        self.assertIn("0.320 [0.310..0.330] (2) +2.0 | 1850 (1500)", lines[0])
        self.assertIn("0.290 [0.290..0.290] (1) -1.0 | 1500 (1500)", lines[0])
        self.assertTrue(lines[1].rstrip().endswith("- | - |"))

    def test_mps_compute_needs_mps(self):
        here = os.path.abspath(__file__)
        with tempfile.TemporaryDirectory() as out:
            code, err = call_main(accuracy.main, ["compute_accuracy.py", "--lib", here, "--cli", here, "--out", out,
                                                  "--mps-compute", "threads"])
        self.assertEqual(code, 2)
        self.assertIn("--mps", err)


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
        "[gpuslice 41] DEBUG: priority gate: held at 1004000000 us, 12 launches in the window (600 us predicted), cap 40, 50000 ns a launch\n",
        "[gpuslice 41] DEBUG: priority gate: released at 1004250000 us, queued work done 1500 us into the hold\n",
        "[gpuslice 41] DEBUG: priority gate: held at 1005000000 us, 3 launches in the window (600 us predicted), cap 40, 50000 ns a launch\n",
        "[gpuslice 41] DEBUG: priority gate: released at 1005001000 us, queued work still running\n",
        "[gpuslice 41] DEBUG: priority gate: held at 1006000000 us, 0 launches in the window (600 us predicted), cap 40, 50000 ns a launch\n",
        "[gpuslice 41] DEBUG: priority gate: released at 1006002000 us\n",
        "[transformers] some warning\n",
        "[gpuslice 41] INFO: priority gate, device 0: 1.000 s held back (10 launches held), 2 drains, "
        "30 event waits, 2 floor slices, 5 scans, 50 re-reads\n",
        "[gpuslice 42] INFO: compute limiter, device 0: 3 windows (1 ended by a pause), 3 drains, "
        "1.0 s busy, 1.0 s held back\n",
    ]

    def test_statistics_and_floor_slices_are_told_apart(self):
        stats, slices, holds = bench.read_gate_log(self.LINES, 1000.0)
        self.assertEqual(len(stats), 2)
        self.assertTrue(stats[0].startswith("[gpuslice 41] INFO: priority gate, device 0"))
        self.assertTrue(stats[1].startswith("[gpuslice 42] INFO: compute limiter, device 0"))
        self.assertEqual(slices, [2.5, 3.1])  # seconds after the run's start
        self.assertEqual(holds, [[4.0, 4.25, 1.5], [5.0, 5.001, -1.0], [6.0, 6.002, None]])
        queue = bench.queue_at_holds(holds)
        self.assertEqual((queue["holds"], queue["probed"], queue["still_running"]), (3, 2, 1))
        self.assertEqual((queue["p50_ms"], queue["max_ms"]), (1.5, 1.5))

    def test_the_pattern_is_the_gates_message(self):
        source = ""
        for name in ("hold_trace.h", "hold_trace.cpp", "priority_floor.cpp"):  # the gate's hold trace, its floor policy
            with open(os.path.join(ROOT, "src", "limiter", name)) as f:
                source += f.read()
        for message in ('"priority gate: floor slice at %llu us"', '"priority gate: held at %llu us, ',
                        '"priority gate: released at %llu us"', '"priority gate: released at %llu us, queued work done %llu us',
                        '"priority gate: released at %llu us, queued work still running"'):
            self.assertIn(message, source)

    def test_held_share_is_the_requests_time_the_trainer_was_held(self):
        requests = [(0.0, 1.0), (2.0, 3.0)]
        # Overlapping holds count once; the gap between the requests does not count.
        self.assertAlmostEqual(bench.held_share(requests, [[0.5, 0.8], [0.7, 1.5], [1.6, 2.5]]), 0.5)
        self.assertEqual(bench.held_share(requests, []), 0.0)
        self.assertIsNone(bench.held_share([], [[0.0, 1.0]]))


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
            "trainer": {"step_done_s": [i * 0.1 for i in range(100)], "floor_slices_s": [-0.5, 6.2, 6.4],
                        "holds_s": [[0.0, 6.0, 0.5], [6.5, 6.51, 4.0], [7.0, 10.0, None]]},
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
        # Held through the requests but those of the slow second (but for 10 ms of its 600 ms).
        self.assertAlmostEqual(worst["trainer_held_pct"], 100.0 * 0.010 / 0.600)
        self.assertGreater(run["trainer_held_pct"], 60.0)
        self.assertIn("held 2% of the requests' time (run", text)
        self.assertIn("its queued work at 1 holds took up to 4.0 ms (0 still running at the release)", text)

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
    seconds = []

    def __init__(self, args):
        self.args = args
        self.sampler = None
        self.host = None

    def calibrate(self):
        return {"service_mean_s": 0.010, "service_p50_s": 0.010, "service_hot_mean_s": 0.009, "requests": 200}

    def measure(self, tag, members, rate, phases=None, seconds=None, toggle=None):
        FakeBench.tags.append(tag)
        FakeBench.seconds.append(seconds)
        if toggle:
            return self.measure_toggled(phases), 50.0
        if phases:
            return self.measure_paired(members, phases)
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
                                     "unserved": 0, "busy_s": ms / 10.0, "timeline_s": timeline, "start": 0.0}
            elif role == "trainer":
                steps = 200 if not managed else (100 if "load" in tag else 180)
                results["trainer"] = {"seconds": seconds, "steps": steps, "steps_per_s": steps / seconds,
                                      "step_done_s": [], "floor_slices_s": []}
            else:
                results[role] = {"seconds": seconds}
            stats = ["[gpuslice 1] INFO: priority gate, device 0: 0.000 s held back"] if priority else []
            results[role]["gate_stats"] = stats
        return results, 50.0

    @staticmethod
    def measure_toggled(phases):
        """--conservation: a trainer step every 0.1 s while its neighbour is low (odd phases), every
        0.125 s while it is high (even phases: the bound costs 20%)."""
        count, phase = phases
        steps = []
        for k in range(count):
            period = 0.125 if k % 2 == 0 else 0.1
            steps += [k * phase + period * (i + 0.5) for i in range(int(phase / period))]
        stats = ["[gpuslice 1] INFO: priority gate, device 0: 0.000 s held back"]
        return {"trainer": {"seconds": count * phase, "steps": len(steps), "step_done_s": steps, "gate_stats": stats},
                "idle": {"seconds": count * phase, "gate_stats": stats}}

    def measure_paired(self, members, phases):
        """--paired: a request every 0.1 s, 10 ms in the paused phases, 12 ms with a high-priority
        server in the running ones (15 ms un-managed); a trainer step every 0.1 s while it runs."""
        count, phase = phases
        high = any(member[2] == "high" for member in members)
        timeline, steps = [], []
        for i in range(int(count * phase * 10)):
            t = i * 0.1 + 0.05
            running = int(t // phase) % 2 == 1
            ms = (12.0 if high else 15.0) if running else 10.0
            timeline.append((t, t, t + ms / 1e3))
            if running:
                steps.append(t)
        stats = ["[gpuslice 1] INFO: priority gate, device 0: 0.000 s held back"] if high else []
        server = {"seconds": count * phase, "latencies_s": [e - a for a, _, e in timeline], "arrivals": len(timeline),
                  "served": len(timeline), "unserved": 0, "busy_s": 0.0, "timeline_s": timeline, "gate_stats": stats}
        trainer = {"seconds": count * phase, "steps": len(steps), "steps_per_s": 0.0, "step_done_s": steps,
                   "gate_stats": stats}
        return {"server": server, "trainer": trainer, "nvml": [(0.6, 20, 1980, 100.0, 0), (2.6, 80, 1980, 300.0, 0)]}, 50.0


class ServerShape(unittest.TestCase):
    def args(self, out, graph, sync_every=1):
        return argparse.Namespace(out=out, lib=__file__, warmup=1.0, seconds=5.0, server_batch=64, server_tokens=128,
                                  trainer_batch=8, trainer_tokens=512, trainer_sync_every=sync_every,
                                  drain_seconds=1.0, server_eager=not graph)

    def test_the_graph_option_reaches_the_server_process_only_when_set(self):
        with tempfile.TemporaryDirectory() as out:
            for graph in (False, True):
                argv = bench.Bench(self.args(out, graph)).argv("server", "r.json", [], 5.0)
                self.assertEqual("--server-eager" in argv, not graph)
                self.assertEqual(argv[argv.index("--server-batch") + 1], "64")

    def test_the_trainer_process_is_told_how_often_to_read_its_loss(self):
        with tempfile.TemporaryDirectory() as out:
            argv = bench.Bench(self.args(out, True, sync_every=8)).argv("trainer", "r.json", [], 5.0)
            self.assertEqual(argv[argv.index("--trainer-sync-every") + 1], "8")

    def test_a_member_may_preload_another_build_of_the_library(self):
        seen = []

        class Popen:
            def __init__(self, argv, env, **kw):
                seen.append(env)

        with tempfile.TemporaryDirectory() as out:
            args = self.args(out, True)
            args.launcher, args.cpu_offset = "preload", 0
            b = bench.Bench(args)
            saved = bench.subprocess.Popen
            bench.subprocess.Popen = Popen
            try:
                b.start("trainer", "t", True, out, [], priority="low", own_env={"GPUSLICE_BENCH_LIB": "other.so"})
                b.start("trainer", "t", True, out, [], priority="low", own_env={})
            finally:
                bench.subprocess.Popen = saved
        self.assertEqual(seen[0]["LD_PRELOAD"], os.path.abspath("other.so"))
        self.assertNotIn("GPUSLICE_BENCH_LIB", seen[0])
        self.assertEqual(seen[1]["LD_PRELOAD"], os.path.abspath(__file__))

    def test_the_table_says_how_the_server_ran_and_how_the_trainer_stepped(self):
        with tempfile.TemporaryDirectory() as out:
            self.assertEqual(bench.server_shape(self.args(out, True)),
                             "server requests of 64 x 128 tokens, one CUDA graph; "
                             "trainer steps of 8 x 512 tokens, its loss read every step")
            self.assertEqual(bench.server_shape(self.args(out, False, sync_every=4)),
                             "server requests of 64 x 128 tokens, kernel by kernel; "
                             "trainer steps of 8 x 512 tokens, its loss read every 4 steps")


class TrainerLoop(unittest.TestCase):
    """train_until() with a fake clock: a step takes 0.1 s to launch, a loss read 0.05 s more."""

    def run_loop(self, every, pause_between=None):
        clock = [0.0]
        reads = []
        syncs = []

        def step(read_loss):
            clock[0] += 0.1
            if not read_loss:
                return None
            clock[0] += 0.05
            reads.append(clock[0])
            return 1.0

        def paused():
            return pause_between is not None and pause_between[0] <= clock[0] < pause_between[1]

        def nap(seconds):
            clock[0] += seconds

        done = bench.train_until(1.0, step, every, paused, lambda: syncs.append(clock[0]), lambda: clock[0], nap)
        return done, reads, syncs

    def test_every_step_is_done_when_its_own_loss_read_returns(self):
        done, reads, _ = self.run_loop(1)
        self.assertEqual(done, reads)
        self.assertEqual(len(done), 7)  # 0.15 s a step: the 7th ends at 1.05

    def test_steps_between_reads_are_done_when_the_next_read_returns(self):
        done, reads, _ = self.run_loop(4)
        self.assertEqual(len(reads), 2)
        self.assertEqual(done, [reads[0]] * 4 + [reads[1]] * 4)

    def test_a_pause_waits_for_the_unread_steps_first(self):
        done, reads, syncs = self.run_loop(4, pause_between=(0.25, 0.5))
        self.assertEqual(len(syncs), 1)
        self.assertAlmostEqual(syncs[0], 0.3)  # the third step's launch ended inside the pause
        self.assertTrue(all(abs(t - 0.3) < 1e-9 for t in done[:3]))
        self.assertTrue(all(t > 0.5 for t in done[3:]))
        self.assertEqual(len(done) - 3, 4 * len(reads))

    def test_the_option_must_be_at_least_one(self):
        err = io.StringIO()
        saved = sys.argv
        sys.argv = ["priority_bench.py", "--trainer-sync-every", "0"]
        try:
            with self.assertRaises(SystemExit) as exit_, contextlib.redirect_stderr(err):
                bench.main()
        finally:
            sys.argv = saved
        self.assertEqual(exit_.exception.code, 2)
        self.assertIn("--trainer-sync-every 0: at least 1", err.getvalue())


class Orchestration(unittest.TestCase):
    def run_main(self, *options):
        """priority_bench's main() with these options against FakeBench: (its table, its JSON)."""
        saved = (bench.Bench, bench.require_torch, sys.argv)
        bench.Bench, bench.require_torch = FakeBench, lambda: None
        FakeBench.tags = []
        FakeBench.seconds = []
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
        self.assertEqual(FakeBench.tags, ["trainer-alone", "beside-idle-high", "trainer-alone-after",
                                          "load30-server-alone-r1", "load30-priorities-r1", "load30-server-alone-r2",
                                          "load30-priorities-r2"])
        rows = {row["config"]: row for row in data["rows"]}
        # Pooled: the server alone's p99 is over both rounds (10 ms and the slow 20 ms one).
        self.assertAlmostEqual(rows["server alone"]["p99_ms"], 20.0)
        self.assertAlmostEqual(rows["priorities high/low"]["p99_ms"], 12.0)
        self.assertAlmostEqual(rows["priorities high/low"]["p99_x"], 12.0 / 20.0)
        self.assertAlmostEqual(rows["priorities high/low"]["trainer_x"], 0.5)
        # The mean service time: 12 ms beside the trainer against 15 ms (10 and 20) alone.
        self.assertAlmostEqual(rows["priorities high/low"]["service_ms"], 12.0)
        self.assertAlmostEqual(rows["priorities high/low"]["service_x"], 0.8)
        self.assertEqual(len(rows["priorities high/low"]["worst_seconds"]), 2)
        self.assertIn("load30-priorities high/low-r2", data["runs"])
        self.assertIn("| 30 | priorities high/low |", table)
        self.assertIn("load 30%: priorities high/low: p99 ÷ alone 0.60 (goal ≤ 1.1) PASS; trainer ÷ alone 0.50 (goal ≥ 0.5) PASS",
                      table)

    def test_the_control_measures_the_server_alone_again_at_the_end_of_each_round(self):
        table, data = self.run_main("--loads", "30", "--only-priorities", "--repeat", "2", "--control")
        self.assertEqual(FakeBench.tags[3:], ["load30-server-alone-r1", "load30-priorities-r1",
                                              "load30-server-alone-again-r1", "load30-server-alone-r2",
                                              "load30-priorities-r2", "load30-server-alone-again-r2"])
        rows = {row["config"]: row for row in data["rows"]}
        # The second alone runs took 10 ms a request in both rounds; the first ones 10 and 20 ms.
        self.assertAlmostEqual(rows["server alone again"]["p99_x"], 10.0 / 20.0)
        self.assertAlmostEqual(rows["server alone again"]["service_x"], 10.0 / 15.0)
        self.assertIn("load30-server-alone-again-r2", data["runs"])
        # A control is not a configuration with a goal.
        self.assertEqual(table.count("load 30%: "), 1)

    def test_paired_compares_the_server_with_the_trainer_running_against_itself_with_it_paused(self):
        table, data = self.run_main("--loads", "30", "--paired", "--seconds", "8", "--phase-seconds", "2")
        self.assertEqual(FakeBench.tags, ["trainer-alone", "beside-idle-high", "trainer-alone-after",
                                          "load30-paired-un-managed", "load30-paired-priorities"])
        rows = {row["config"]: row for row in data["rows"]}
        paused, running = rows["paired priorities: trainer paused"], rows["paired priorities: trainer running"]
        self.assertAlmostEqual(paused["p99_ms"], 10.0)
        self.assertAlmostEqual(running["p99_x"], 1.2)
        self.assertAlmostEqual(running["service_x"], 1.2)
        # A step every 0.1 s in the running phases' measured 3 s (two phases of 2 s less 0.5 s each),
        # against 25 steps/s alone (200 steps in 8 s).
        self.assertAlmostEqual(running["trainer_x"], 0.4)
        self.assertAlmostEqual(rows["paired un-managed: trainer running"]["p99_x"], 1.5)
        self.assertIn("load 30%: paired priorities: trainer running: p99 ÷ paused 1.20 (goal ≤ 1.1) FAIL; "
                      "trainer ÷ alone 0.40 (goal ≥ 0.5) FAIL", table)
        self.assertEqual(table.count("load 30%: "), 1)  # un-managed is not judged
        self.assertIn("phases of 2 s", table)

    def test_paired_variants_are_judged_each_against_their_own_paused_phases(self):
        table, data = self.run_main("--loads", "30", "--paired", "--seconds", "8", "--phase-seconds", "2",
                                    "--only-priorities", "--variant", "avg;trainer:GPUSLICE_PRIORITY_COST=average")
        # The trainer of the variant beside an idle high too (the cost of its bound), then the pairs.
        self.assertEqual(FakeBench.tags[2:], ["beside-idle-highavg", "trainer-alone-after", "load30-paired-priorities",
                                              "load30-paired-priorities-avg"])
        self.assertIn("load 30%: paired priorities avg: trainer running: p99 ÷ paused 1.20", table)
        self.assertEqual(table.count("load 30%: "), 2)

    def test_paired_runs_of_four_pairs_or_more_judge_the_p99_by_its_interval(self):
        table, data = self.run_main("--loads", "30", "--paired", "--seconds", "16", "--phase-seconds", "2",
                                    "--only-priorities")
        rows = {row["config"]: row for row in data["rows"]}
        low, high = rows["paired priorities: trainer running"]["ci95"]["p99"]
        self.assertAlmostEqual(low, 1.2)
        self.assertAlmostEqual(high, 1.2)
        self.assertIn("load 30%: paired priorities: trainer running: p99 ÷ paused 1.20 [1.20-1.20] (goal ≤ 1.1) "
                      "FAIL; trainer ÷ alone", table)

    def test_conservation_compares_the_trainers_bounded_phases_with_its_unbounded_ones(self):
        saved = bench.os.path.exists
        bench.os.path.exists = lambda path: True  # --cli need not exist: FakeBench runs no command
        try:
            table, data = self.run_main("--loads", "", "--conservation", "--seconds", "16", "--phase-seconds", "2",
                                        "--settle-seconds", "0.5", "--variant", "b4ms;trainer:GPUSLICE_PRIORITY_IN_FLIGHT=4ms")
        finally:
            bench.os.path.exists = saved
        self.assertEqual(FakeBench.tags, ["trainer-alone", "beside-idle-high", "beside-idle-highb4ms",
                                          "trainer-alone-after", "conservation", "conservation-b4ms"])
        self.assertIn("| - | trainer: idle neighbour high ÷ low b4ms |", table)
        row = next(r for r in data["rows"] if r["config"].startswith("trainer: idle neighbour"))
        # 12 steps a measured 1.5 s against 15: the bound's 20%, the same in every pair.
        self.assertAlmostEqual(row["trainer_x"], 0.8)
        self.assertEqual([round(x, 3) for x in row["ci95"]["trainer"]], [0.8, 0.8])
        self.assertIn("| - | trainer: idle neighbour high ÷ low |", table)

    def test_an_unmanaged_variant_runs_its_members_without_gpuslice_with_their_own_variables(self):
        seen = []
        measure = FakeBench.measure

        def spy(self, tag, members, *rest, **kw):
            seen.append((tag, [tuple(m[:2]) + ((m[4] if len(m) > 4 else None),) for m in members]))
            return measure(self, tag, members, *rest, **kw)

        FakeBench.measure = spy
        try:
            self.run_main("--loads", "30", "--paired", "--seconds", "8", "--phase-seconds", "2", "--only-priorities",
                          "--variant", "cp;server:GPUSLICE_BENCH_UNMANAGED=1,CUDA_MPS_CLIENT_PRIORITY=0;"
                                       "trainer:GPUSLICE_BENCH_UNMANAGED=1,CUDA_MPS_CLIENT_PRIORITY=1")
        finally:
            FakeBench.measure = measure
        members = dict(seen)["load30-paired-priorities-cp"]
        self.assertEqual(members, [("server", False, {"CUDA_MPS_CLIENT_PRIORITY": "0"}),
                                   ("trainer", False, {"CUDA_MPS_CLIENT_PRIORITY": "1"})])
        # An un-managed trainer has no gpuslice cost to measure beside an idle high.
        self.assertNotIn("beside-idle-highcp", dict(seen))

    def test_idle_rounds_alternate_the_trainer_alone_with_its_neighbours(self):
        _, data = self.run_main("--idle-only", "--idle-rounds", "2", "--alone-seconds", "5")
        self.assertEqual(FakeBench.tags[3:], ["idle-round1-alone", "idle-round1-beside-an-idle-high",
                                              "idle-round1-beside-an-idle-process", "idle-round1-alone-under-gpuslice",
                                              "idle-round2-alone", "idle-round2-beside-an-idle-high",
                                              "idle-round2-beside-an-idle-process", "idle-round2-alone-under-gpuslice"])
        rows = {row["config"]: row for row in data["rows"]}
        # FakeBench: 200 steps un-managed, 180 managed (outside a load): 0.9 of alone, 1.0 beside an
        # idle un-managed process.
        self.assertAlmostEqual(rows["trainer beside an idle high, gpuslice ÷ alone (alternated)"]["trainer_x"], 0.9)
        self.assertAlmostEqual(rows["trainer beside an idle process, un-managed ÷ alone (alternated)"]["trainer_x"], 1.0)

    def test_the_trainers_baselines_may_be_shorter_than_the_pairs(self):
        self.run_main("--loads", "30", "--paired", "--seconds", "16", "--phase-seconds", "2", "--only-priorities",
                      "--alone-seconds", "5")
        # The trainer alone, beside an idle high and alone again for 5 s; the paired run its 16 s (from
        # its phases).
        self.assertEqual(FakeBench.seconds, [5.0, 5.0, 5.0, None])

    def test_one_round_is_the_measured_run(self):
        table, _ = self.run_main("--loads", "30,60")
        self.assertEqual(FakeBench.tags[3:8], ["load30-server-alone", "load30-un-managed", "load30-limits",
                                               "load30-priorities", "load60-server-alone"])
        # p99 of 100: the 99th; busy 15 % of 10 s; 15 ms a request against 10 alone
        self.assertIn("| 60 | un-managed | 15.00 | 15.00 | 1.50 | 1.50 | 15 | 15.00 | 1.50 |", table)
        self.assertIn("load 60%: priorities high/low: p99 ÷ alone 1.20 (goal ≤ 1.1) FAIL; trainer ÷ alone 0.50 (goal ≥ 0.25) PASS",
                      table)


class Phases(unittest.TestCase):
    def test_each_phase_without_its_settling_time_goes_to_its_side(self):
        # Four phases of 2 s, 0.5 s settling: paused [0.5, 2) and [4.5, 6), running [2.5, 4) and [6.5, 8).
        timeline = [(0.1, 0.1, 0.2), (1.0, 1.0, 1.01), (2.2, 2.2, 2.3), (3.0, 3.0, 3.05), (5.9, 5.9, 5.91),
                    (7.0, 7.0, 7.02)]
        results = {"server": {"timeline_s": timeline, "served": 6, "latencies_s": [0.1] * 6 + [0.9],
                              "gate_stats": ["s"]},
                   "trainer": {"step_done_s": [0.7, 2.4, 2.6, 3.9, 7.5], "gate_stats": ["t"]},
                   "nvml": [(1.0, 10, 0, 0, 0), (3.0, 70, 0, 0, 0), (3.5, 90, 0, 0, 0), (4.2, 99, 0, 0, 0)]}
        split = bench.split_phases(results, 4, 2.0, 0.5)
        paused, paused_util = split["paused"]
        running, running_util = split["running"]
        self.assertEqual([round(x, 3) for x in paused["server"]["latencies_s"]], [0.01, 0.01])
        self.assertAlmostEqual(paused["server"]["busy_s"], 0.02)
        self.assertEqual(paused["server"]["seconds"], 3.0)
        self.assertEqual(paused["trainer"]["steps"], 1)  # at 0.7 s, while paused in fact: its step ending
        self.assertEqual(paused_util, 10)
        # The unserved request (0.9 s so far) counts with the trainer running.
        self.assertEqual([round(x, 3) for x in running["server"]["latencies_s"]], [0.05, 0.02, 0.9])
        self.assertEqual((running["server"]["served"], running["server"]["unserved"]), (2, 1))
        self.assertEqual(running["trainer"]["steps"], 3)  # 2.6, 3.9 and 7.5; not 2.4 (settling)
        self.assertAlmostEqual(running["trainer"]["steps_per_s"], 1.0)
        self.assertEqual(running_util, 80)  # 4.2 s is in the settling of a paused phase

    def test_the_parent_pauses_the_trainer_in_the_even_phases(self):
        """Bench.measure's own toggling, with the processes and the clock replaced: the pause file's
        state at each phase boundary, before the parent changes it."""
        seen = {}
        saved = (bench.Bench.start, bench.Bench.wait_ready, bench.Bench.finish, bench.sleep_until)

        def start(self, role, tag, managed, node_dir, extra, *rest):
            if "--pause-file" in extra:
                seen["pause"] = extra[extra.index("--pause-file") + 1]
            if "--mirror-phase" in extra:
                seen["mirror"] = (role, extra[extra.index("--mirror-phase") + 1])
            seen.setdefault("seconds", []).append(rest[-1])
            return {"role": role}

        def sleep_until(t):
            seen.setdefault("states", []).append(os.path.exists(seen["pause"]))

        def finish(self, run, timeout):
            seen.setdefault("at_end", os.path.exists(seen["pause"]))
            return {}

        bench.Bench.start, bench.Bench.finish, bench.sleep_until = start, finish, sleep_until
        bench.Bench.wait_ready = lambda self, runs, ready: None
        try:
            with tempfile.TemporaryDirectory() as out:
                args = argparse.Namespace(out=out, lib=__file__, seconds=8.0, drain_seconds=1.0, seed=1, ready_timeout=1.0)
                b = bench.Bench(args)
                b.measure("t", [("server", False, None, None), ("trainer", False, None, None)], 10.0, (4, 2.0))
        finally:
            bench.Bench.start, bench.Bench.wait_ready, bench.Bench.finish, bench.sleep_until = saved
        # Phase 0 paused; at the boundaries 1, 2, 3: still paused, then running, then paused again.
        self.assertEqual(seen["states"], [True, False, True])
        self.assertFalse(seen["at_end"])  # phase 3 runs
        self.assertEqual(seen["seconds"], [8.0, 8.0])
        self.assertEqual(seen["mirror"], ("server", "2.0"))  # the server repeats its arrivals a phase later

    def test_a_toggle_replaces_the_pause_file(self):
        """--conservation: Bench.measure calls the toggle at each phase boundary, and the trainer
        gets no pause file."""
        seen = {"toggles": [], "extras": []}
        saved = (bench.Bench.start, bench.Bench.wait_ready, bench.Bench.finish, bench.sleep_until)

        def start(self, role, tag, managed, node_dir, extra, *rest):
            seen["extras"] += extra
            return {"role": role, "shared": "/tmp/" + role}

        bench.Bench.start, bench.sleep_until = start, lambda t: None
        bench.Bench.finish = lambda self, run, timeout: {}
        bench.Bench.wait_ready = lambda self, runs, ready: None
        try:
            with tempfile.TemporaryDirectory() as out:
                args = argparse.Namespace(out=out, lib=__file__, seconds=8.0, drain_seconds=1.0, seed=1, ready_timeout=1.0)
                b = bench.Bench(args)
                b.measure("t", [("idle", True, "high", None), ("trainer", True, "low", None)], None, (4, 2.0),
                          toggle=lambda k, runs: seen["toggles"].append((k, [r["shared"] for r in runs])))
        finally:
            bench.Bench.start, bench.Bench.wait_ready, bench.Bench.finish, bench.sleep_until = saved
        self.assertEqual([k for k, _ in seen["toggles"]], [1, 2, 3])
        self.assertEqual(seen["toggles"][0][1], ["/tmp/idle", "/tmp/trainer"])
        self.assertNotIn("--pause-file", seen["extras"])

    def test_steps_go_to_their_pair_without_the_settling_time(self):
        # Phases of 2 s, 0.5 s settling: 0.2 and 2.3 settle; 1.0 (even) and 3.0, 3.9 (odd) in pair 0;
        # 4.6 in pair 1's even phase.
        results = {"trainer": {"step_done_s": [0.2, 1.0, 2.3, 3.0, 3.9, 4.6]}}
        self.assertEqual(bench.step_pairs(results, 4, 2.0, 0.5), [(1, 2), (1, 0)])
        self.assertIsNone(bench.step_ratio_interval([(1, 2), (1, 0)]))  # too few pairs
        ratio, low, high = bench.step_ratio_interval([(8, 10), (9, 10), (8, 10), (9, 10)])
        self.assertAlmostEqual(ratio, 0.85)
        self.assertTrue(0.8 <= low <= 0.85 <= high <= 0.9)

    def test_a_running_phase_repeats_the_arrivals_of_the_paused_one_before_it(self):
        # Phases of 2 s from 100 s: the arrivals at 101.0 and 104.5 (paused phases 0 and 2) come
        # again at 103.0 and 106.5; the odd phases' own (102.2, 107.0) are dropped; 109.9 + 2 is past
        # the end.
        arrivals = [100.5, 101.0, 102.2, 104.5, 107.0, 109.9]
        self.assertEqual(bench.mirrored(arrivals, 100.0, 110.0, 2.0),
                         [100.5, 101.0, 102.5, 103.0, 104.5, 106.5, 109.9])


class Intervals(unittest.TestCase):
    """--paired's 95% intervals: pairs of phases resampled, so that a slow stretch of the host (all
    requests of a phase slower, trainer or not) widens the interval instead of deciding it."""

    def test_requests_go_to_their_pair_and_side_without_the_settling_time(self):
        # Four phases of 2 s, 0.5 s settling: pair 0 is [0.5, 2) paused and [2.5, 4) running.
        timeline = [(0.1, 0.1, 0.2), (1.0, 1.0, 1.01), (2.2, 2.2, 2.3), (3.0, 3.1, 3.15), (5.9, 5.9, 5.91),
                    (7.0, 7.0, 7.02)]
        results = {"server": {"timeline_s": timeline, "served": 6, "latencies_s": [0.1] * 6 + [0.9]}}
        pairs = bench.phase_pairs(results, 4, 2.0, 0.5)
        rounded = [([tuple(round(x, 3) for x in r) for r in p], [tuple(round(x, 3) if x is not None else None
                                                                      for x in r) for r in q]) for p, q in pairs]
        self.assertEqual(rounded, [([(0.01, 0.01)], [(0.15, 0.05)]),
                                   ([(0.01, 0.01)], [(0.02, 0.02), (0.9, None)])])

    @staticmethod
    def pairs(speeds, effect, n=50):
        """Pairs of phases whose requests take speeds[k] ms (paused) and speeds[k] * effect ms
        (running), n a side, the last one of each three times as long."""
        out = []
        for speed in speeds:
            side = [speed / 1e3] * (n - 1) + [3 * speed / 1e3]
            out.append(([(x, x) for x in side], [(x * effect, x * effect) for x in side]))
        return out

    def test_a_constant_effect_has_no_width(self):
        ci = bench.bootstrap_ratios(self.pairs([10.0] * 6, 1.2))
        for name in ("p50", "p99", "service"):
            self.assertAlmostEqual(ci[name][0], 1.2)
            self.assertAlmostEqual(ci[name][1], 1.2)

    def test_phases_of_different_speeds_widen_the_interval_around_the_effect(self):
        # The host's speed drifts from phase to phase by up to 40%; no effect of the trainer.
        rng = random.Random(3)
        speeds = [10.0 * rng.uniform(0.7, 1.1) for _ in range(20)]
        pairs = [(p, [(x * rng.uniform(0.85, 1.15),) * 2 for x, _ in q]) for p, q in self.pairs(speeds, 1.0)]
        ci = bench.bootstrap_ratios(pairs)
        self.assertLess(ci["service"][0], 1.0)
        self.assertGreater(ci["service"][1], 1.0)
        self.assertGreater(ci["p99"][1] - ci["p99"][0], 0.05)

    def test_too_few_pairs_give_no_interval(self):
        self.assertIsNone(bench.bootstrap_ratios(self.pairs([10.0] * 3, 1.2)))

    def test_the_verdict_is_undecided_where_the_interval_spans_the_goal(self):
        self.assertEqual(bench.p99_verdict({"p99_x": 1.0, "ci95": {"p99": (0.9, 1.08)}}), "PASS")
        self.assertEqual(bench.p99_verdict({"p99_x": 1.2, "ci95": {"p99": (1.12, 1.3)}}), "FAIL")
        self.assertTrue(bench.p99_verdict({"p99_x": 1.05, "ci95": {"p99": (0.95, 1.2)}}).startswith("UNDECIDED"))
        # Without an interval (five-configuration rows), the value decides.
        self.assertEqual(bench.p99_verdict({"p99_x": 1.05}), "PASS")
        self.assertEqual(bench.p99_verdict({"p99_x": 1.15}), "FAIL")


class Pooling(unittest.TestCase):
    """priority_pool.py: each call's paired ratio on its own, the calls combined."""

    @staticmethod
    def call(paused_ms, running_ms, pairs=24, phase=1.5):
        """One call's JSON: a paired run whose requests take paused_ms, or running_ms in the
        running phases, a request every 0.1 s from 0.45 s into each phase (after the settling)."""
        timeline = []
        for k in range(2 * pairs):
            ms = running_ms if k % 2 else paused_ms
            for i in range(10):
                t = k * phase + 0.45 + 0.1 * i
                timeline.append((t, t, t + ms * (1.5 if i == 9 else 1.0) / 1e3))
        server = {"seconds": 2 * pairs * phase, "timeline_s": timeline, "served": len(timeline),
                  "latencies_s": [e - a for a, _, e in timeline]}
        return {"args": {"phase_seconds": phase, "settle_seconds": 0.4},
                "runs": {"load30-paired-priorities": {"server": server}, "trainer-alone": {"trainer": {}}}}

    def test_each_call_is_estimated_alone_and_the_calls_combined(self):
        pooled = pool.pool([self.call(10.0, 11.0), self.call(20.0, 22.0)])
        self.assertEqual(list(pooled), [(30, "priorities")])
        self.assertEqual([(index, len(pairs)) for index, pairs in pooled[(30, "priorities")]], [(0, 24), (1, 24)])
        lines = pool.report(pooled)
        self.assertIn("load 30%, priorities, call 1: p50 1.10, p99 1.10, service 1.10 (24 pairs)", lines)
        self.assertIn("load 30%, priorities, call 2: p50 1.10, p99 1.10, service 1.10 (24 pairs)", lines)
        # The same ratio in both calls (at twice the latency in the second): combined, the same.
        combined = [line for line in lines if "combined" in line]
        self.assertEqual(len(combined), 1)
        self.assertTrue(combined[0].startswith("load 30%, priorities, 2 call(s) combined: running ÷ paused: p50 1.10"))

    def test_the_combination_widens_with_the_spread_between_calls(self):
        same = pool.combine([(1.1, 0.01), (1.1, 0.01)])
        self.assertAlmostEqual(same[0], 1.1)
        spread = pool.combine([(0.9, 0.01), (1.3, 0.01)])
        fixed_half = 1.96 / (2 / 0.01) ** 0.5  # the interval without the spread between calls
        self.assertGreater(math.log(spread[2] / spread[0]), fixed_half)
        self.assertIsNone(pool.combine([(1.1, 0.0)]))

    def test_bad_files_get_an_error_naming_them(self):
        with tempfile.TemporaryDirectory() as d:
            cases = {"garbage.json": "garbage", "list.json": "[1]", "no-runs.json": '{"args": {}}',
                     "partial.json": '{"args": {"phase_seconds": 1.5}, "runs": {"load30-paired-x": {"server": {"seconds": 3}}}}'}
            for name, text in cases.items():
                path = os.path.join(d, name)
                with open(path, "w") as f:
                    f.write(text)
                code, err = call_main(pool.main, ["priority_pool.py", path])
                self.assertEqual(code, 2, name)
                self.assertIn("priority_pool: ", err)
                if name != "partial.json":
                    self.assertIn(path, err)

    def test_a_renamed_configuration_is_pooled_with_the_other_calls_of_that_name(self):
        variant = self.call(10.0, 11.0)
        variant["runs"]["load30-paired-priorities-ramp30"] = variant["runs"].pop("load30-paired-priorities")
        default = self.call(20.0, 22.0)
        self.assertEqual(sorted(pool.pool([variant, default])), [(30, "priorities"), (30, "priorities-ramp30")])
        pooled = pool.pool([variant, default], {1: {"priorities": "priorities-ramp30"}})
        self.assertEqual([(index, len(pairs)) for index, pairs in pooled[(30, "priorities-ramp30")]], [(0, 24), (1, 24)])
        self.assertEqual(list(pooled), [(30, "priorities-ramp30")])

    def test_a_malformed_rename_is_refused(self):
        for bad in ("priorities=x", "0:priorities=x", "3:priorities=x", "1:priorities"):
            saved = sys.argv
            sys.argv = ["priority_pool.py", "a.json", "b.json", "--rename", bad]
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as exit_:
                    pool.main()
            finally:
                sys.argv = saved
            self.assertEqual(exit_.exception.code, 2, bad)
            self.assertIn("--rename", err.getvalue())

    def test_a_call_of_too_few_pairs_is_not_weighed(self):
        lines = pool.report(pool.pool([self.call(10.0, 11.0, pairs=5)]))
        self.assertEqual(lines, ["load 30%, priorities, call 1: 5 pairs, too few to weigh"])


class ByIdle(unittest.TestCase):
    """priority_by_idle.py: the server's service time by its idle time before each request."""

    def test_a_request_is_queued_when_it_waited_else_placed_by_the_idle_time_before_it(self):
        self.assertIsNone(by_idle.bucket_of(1.0, 1.0, None))
        self.assertEqual(by_idle.bucket_of(1.0, 1.001, 1.001), 0)  # waited 1 ms behind the one before
        self.assertEqual(by_idle.bucket_of(1.0, 1.0, 0.99995), 0)  # 50 us after it: its readback
        self.assertEqual(by_idle.bucket_of(1.0, 1.0, 0.999), 1)
        self.assertEqual(by_idle.bucket_of(1.0, 1.0, 0.997), 2)
        self.assertEqual(by_idle.bucket_of(1.0, 1.0, 0.97), 5)
        self.assertEqual(by_idle.bucket_of(1.0, 1.0, 0.5), 6)
        self.assertEqual(len(by_idle.bucket_names()), 7)

    @staticmethod
    def paired(paused_ms, running_ms, gap_s, phase=1.0, pairs=2):
        """A paired run: a request every gap_s from 0.45 s into each phase, of paused_ms or, in the
        running phases, running_ms."""
        timeline = []
        for k in range(2 * pairs):
            t = k * phase + 0.45
            while t < (k + 1) * phase - 0.05:
                timeline.append((t, t, t + (running_ms if k % 2 else paused_ms) / 1e3))
                t += gap_s
        return {"seconds": 2 * pairs * phase, "timeline_s": timeline}

    def test_a_paired_run_compares_its_running_phases_with_its_paused_ones(self):
        data = {"args": {"phase_seconds": 1.0, "settle_seconds": 0.4},
                "runs": {"load30-paired-priorities": {"server": self.paired(7.0, 8.5, 0.05)}}}
        rows = by_idle.comparisons(data)
        self.assertEqual([tag for tag, _, _ in rows], ["load30-paired-priorities"])
        _, without, beside = rows[0]
        # 50 ms apart, 7 or 8.5 ms each: idle over 40 ms before each but the first of a run.
        self.assertEqual(sorted(without), [6])
        self.assertEqual(sorted(beside), [6])
        lines = by_idle.report(rows)
        self.assertIn("+1.500 ms", lines[1])
        self.assertTrue(lines[1].lstrip().startswith("idle over 40 ms"))

    def test_a_configuration_is_compared_with_the_server_alone_of_its_load_and_round(self):
        alone = self.paired(7.0, 7.0, 0.01, pairs=1)
        shared = self.paired(7.5, 7.5, 0.01, pairs=1)
        other = self.paired(9.0, 9.0, 0.01, pairs=1)
        data = {"args": {}, "runs": {
            "load30-server-alone-r1": {"server": alone}, "load30-server-alone-r2": {"server": other},
            "load30-priorities high/low-r1": {"server": shared, "trainer": {}},
            "load30-server-alone-r3": {"server": alone},  # no configuration of its own: nothing to compare
            "trainer-alone": {"trainer": {}}}}
        rows = by_idle.comparisons(data)
        self.assertEqual([tag for tag, _, _ in rows], ["load30-priorities high/low-r1"])
        # 10 ms apart, 7 ms alone: 3 ms idle before each request (bucket 2-5 ms) but the first of the
        # second phase (over 40 ms); 0.5 ms more beside the trainer.
        self.assertEqual(sorted(rows[0][1]), [2, 6])
        self.assertEqual(by_idle.report(rows)[1].split()[-2], "+0.500")

    def test_bad_files_get_an_error_naming_them(self):
        with tempfile.TemporaryDirectory() as d:
            cases = {"garbage.json": ("garbage", 2), "list.json": ("[1]", 2), "no-runs.json": ('{"args": {}}', 2),
                     "partial.json": ('{"args": {}, "runs": {"load30-paired-x": {"server": {"timeline_s": [[0, 0, 1]]}}}}', 2),
                     "empty.json": ('{"args": {}, "runs": {}}', 1)}
            for name, (text, expected) in cases.items():
                path = os.path.join(d, name)
                with open(path, "w") as f:
                    f.write(text)
                code, err = call_main(by_idle.main, ["priority_by_idle.py", path])
                self.assertEqual(code, expected, name)
                self.assertIn("priority_by_idle: ", err)
                if expected == 2:
                    self.assertIn(path, err)


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


class MpsDaemonForARun(unittest.TestCase):
    """--mps: a control daemon with private directories for the run, exported to its processes, then
    quit, its logs and the pipe directory's listing kept (a fake nvidia-cuda-mps-control)."""

    def test_start_exports_the_directories_and_stop_quits_and_keeps_the_logs(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake = os.path.join(tmp, "nvidia-cuda-mps-control")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\n"
                        "if [ \"$1\" = -d ]; then echo 4242 > \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\";"
                        " echo started > \"$CUDA_MPS_LOG_DIRECTORY/control.log\"; exit 0; fi\n"
                        f"read cmd; echo \"$cmd\" >> {tmp}/commands; [ \"$cmd\" = get_server_list ] && echo\n")
            os.chmod(fake, 0o755)
            saved = dict(os.environ)
            os.environ["PATH"] = tmp + os.pathsep + os.environ["PATH"]
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            try:
                args = argparse.Namespace(out=os.path.join(tmp, "out"), mps_low_threads=40)
                mps = bench.start_mps(args)
                self.assertEqual(bench.clean_env()["CUDA_MPS_PIPE_DIRECTORY"], mps["pipe"])
                self.assertEqual(bench.clean_env()["CUDA_MPS_LOG_DIRECTORY"], mps["logs"])
                with open(args.mps_limits_file) as f:
                    self.assertEqual(f.read(), "GPUSLICE_MPS_LOW_THREADS=40\n")
                bench.time.sleep = lambda _: None
                bench.stop_mps(mps)
                kept = os.path.join(args.out, "mps")
                with open(os.path.join(kept, "control.log")) as f:
                    self.assertEqual(f.read(), "started\n")
                with open(os.path.join(kept, "pipe-listing.txt")) as f:
                    self.assertIn("nvidia-cuda-mps-control.pid mode=", f.read())
                with open(os.path.join(tmp, "commands")) as f:
                    self.assertEqual(f.read().split(), ["get_server_list", "get_server_list", "quit"])
                self.assertNotIn("CUDA_MPS_PIPE_DIRECTORY", os.environ)
                self.assertFalse(os.path.exists(mps["root"]))
            finally:
                bench.time.sleep = time.sleep
                os.environ.clear()
                os.environ.update(saved)


class TimesliceProbe(unittest.TestCase):
    def test_lists(self):
        self.assertEqual(timeslice.parse_list("250,1000", "--kernel-us", 1), [250, 1000])
        for bad in ("", "1,,2", "a", "0", "5,-1"):
            with self.assertRaises(ValueError, msg=bad) as caught:
                timeslice.parse_list(bad, "--kernel-us", 1)
            self.assertIn("--kernel-us", str(caught.exception))
        self.assertEqual(timeslice.parse_probes("1x0,40x100"), [(1, 0), (40, 100)])
        for bad in ("1", "0x5", "2x-1", "x", "ax3", "1x0,"):
            with self.assertRaises(ValueError, msg=bad):
                timeslice.parse_probes(bad)

    def test_bad_arguments_exit_2_before_any_gpu_work(self):
        for argv in (["--depth", "0"], ["--probe", "3"], ["--count", "0"], ["--gap-ms", "0"],
                     ["--kernel-us", "x"]):
            code, err = call_main(timeslice.main, ["timeslice_probe.py"] + argv)
            self.assertEqual(code, 2, argv)
            self.assertIn(argv[0], err)

    def test_summary_against_alone(self):
        # 100 probes of 10..1000 us against an alone median of 10 us.
        row = timeslice.summarize([10 * i for i in range(1, 101)], 10.0)
        self.assertEqual((row["n"], row["p50"], row["p90"], row["p99"], row["max"]), (100, 500, 900, 990, 1000))
        self.assertAlmostEqual(row["extra_mean"], 505 - 10)
        self.assertEqual(row["extra_p50"], 490)
        self.assertNotIn("extra_mean", timeslice.summarize([5.0], None))
        text = timeslice.table([dict(timeslice.summarize([8, 10, 12], None), probe="1x0"),
                                dict(row, probe="1x0", kernel_us=990.0, depth=4)])
        lines = text.splitlines()
        self.assertEqual(len(lines), 4)
        self.assertTrue(lines[2].startswith("| 1x0 | alone | - | 10 |"), lines[2])
        self.assertTrue(lines[3].startswith("| 1x0 | 990 | 4 | 500 |"), lines[3])
        self.assertTrue(lines[3].endswith("| 495 | 0.50 |"), lines[3])


class DriverPathsAcceptance(unittest.TestCase):
    def test_nvidia_smis_process_table_is_read_per_pid(self):
        apps = driver_paths.parse_apps("1234, 8190\n5678, 520\nNo running processes found\n42, [N/A]\n")
        self.assertEqual(apps, {1234: 8190 * driver_paths.MIB, 5678: 520 * driver_paths.MIB})
        self.assertEqual(driver_paths.container_figure(apps, {1234}), 8190 * driver_paths.MIB)

    def test_a_case_passes_within_64_mib_of_the_quota(self):
        quota = 8 * driver_paths.GIB
        self.assertTrue(driver_paths.verdict(quota + 64 * driver_paths.MIB, quota)["pass"])
        failed = driver_paths.verdict(quota + 65 * driver_paths.MIB, quota)
        self.assertFalse(failed["pass"])
        self.assertEqual(failed["max_over_mib"], 65)

    def test_an_unknown_case_is_named(self):
        code, err = call_main(driver_paths.main, ["driver_paths.py", "--lib", "l", "--prog", "p", "--out",
                                                  tempfile.mkdtemp(), "--cases", "heap,bogus"])
        self.assertEqual(code, 2)
        self.assertIn("bogus", err)


if __name__ == "__main__":
    unittest.main(verbosity=1)
