"""The Python package against the closed forms the C++ tests use (tests/api/test_run.cpp).

Run from the repository root, as ctest does: python3 -m unittest discover -s tests/python -t .
Standard library only.
"""

import html.parser
import json
import os
import pickle
import re
import signal
import tempfile
import threading
import time
import typing
import unittest

import clustersim

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PIPELINE = os.path.join(ROOT, "workloads", "h200-2gpu-pipeline.yaml")
IDEAL = {"network.model": "ideal"}

# h200-2gpu-pipeline: p = 2 stages of 4 layers, F = 4 x 1.3057 ms = 5.2228 ms, B = 4 x 3.3197 ms
# = 13.2788 ms per stage, m = 8 microbatches. On the ideal network 1F1B and GPipe take
# (m + p - 1)(F + B) = 9 x 18.5016 ms = 166.5144 ms with bubble fraction (p - 1)/(m + p - 1)
# = 1/9; interleaved with v = 2 chunks (v m + p - 1)(F + B) / v = 17 x 18.5016 / 2 = 157.2636 ms.
ONE_F_ONE_B_S = 0.1665144
INTERLEAVED_S = 0.1572636

# The same experiment as a dict (the file's keys, with vpp = 1: no schedule below needs more).
PIPELINE_DICT = {
    "topology": "topologies/h200-2gpu-nvlink.yaml",
    "model": {"layers": 8, "hidden_size": 4096, "attention_heads": 32, "vocab_size": 0},
    "parallelism": {"tp": 1, "pp": 2, "dp": 1},
    "training": {"micro_batch_size": 1, "global_batch_size": 8, "seq_length": 2048},
    "schedule": "1f1b",
    "compute": {"model": "profile", "layer_forward": "1.3057ms", "layer_backward": "3.3197ms"},
    "network": {"model": "ideal"},
}


class RunTest(unittest.TestCase):
    def test_closed_form_from_a_file(self):
        r = clustersim.run(PIPELINE, IDEAL, schedule="1f1b")
        self.assertEqual(r.schedule, "1f1b")
        self.assertAlmostEqual(r.iteration_time_s, ONE_F_ONE_B_S, delta=1e-12)
        self.assertAlmostEqual(r.bubble_fraction, 1 / 9, delta=1e-9)
        # The file sets vpp = 2, which 1F1B ignores: said once, as data.
        self.assertEqual(len([w for w in r.warnings if "vpp = 2 is ignored" in w]), 1)

    def test_results_are_plain_python(self):
        r = clustersim.run(PIPELINE, IDEAL, schedule="1f1b")
        for name in ("mfu", "hfu", "host_fraction", "idle_fraction", "tokens_per_s"):
            self.assertIsInstance(getattr(r, name), float, name)
        # Two stages, one row each; the table is the same rows as columns.
        self.assertEqual([s["stage"] for s in r.stages], [0, 1])
        stages = r.table("stages")
        self.assertEqual(stages["stage"], [0, 1])
        self.assertEqual(len(stages["bubble_fraction"]), 2)
        links = r.table("links")
        self.assertEqual(len(links["name"]), len(r.links))
        # The summary is what `run --json` writes: it survives a JSON round trip unchanged.
        self.assertEqual(json.loads(json.dumps(r.to_dict())), r.to_dict())
        with self.assertRaises(AttributeError):
            r.no_such_field

    def test_dict_equals_file(self):
        # The dict is the file with vpp = 1 and the ideal network: the same 1F1B iteration.
        r = clustersim.run(PIPELINE_DICT, base_dir=ROOT)
        self.assertAlmostEqual(r.iteration_time_s, ONE_F_ONE_B_S, delta=1e-12)
        self.assertEqual(r.warnings, [])

    def test_overrides_win_in_order(self):
        exp = clustersim.load(PIPELINE, IDEAL).set("parallelism.vpp", 1)
        # global_batch_size 16 doubles m: (16 + 1)(F + B) = 17 x 18.5016 ms = 314.5272 ms.
        r = exp.set("training.global_batch_size", 16).run(schedule="gpipe")
        self.assertAlmostEqual(r.iteration_time_s, 0.3145272, delta=1e-12)
        self.assertEqual(r.microbatches, 16)
        # A list of --set strings means the same as a dict.
        r2 = clustersim.run(PIPELINE, ["network.model=ideal", "training.global_batch_size=16"],
                            schedule="gpipe")
        self.assertEqual(r2.iteration_time_s, r.iteration_time_s)

    def test_default_experiment(self):
        # No path: the bundled workloads/default.yaml, as `clustersim run` with no argument.
        r = clustersim.run(None, {"network.model": "analytical"})
        self.assertTrue(r.mfu > 0 and r.mfu < 1, r.mfu)

    def test_trace_is_written(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.json")
            clustersim.run(PIPELINE_DICT, base_dir=ROOT, trace=path)
            with open(path) as f:
                self.assertIn("traceEvents", json.load(f))


class CompareSweepTest(unittest.TestCase):
    def test_compare(self):
        c = clustersim.compare(PIPELINE, ["gpipe", "interleaved"], IDEAL)
        self.assertEqual([r.schedule for r in c], ["gpipe", "interleaved"])
        self.assertAlmostEqual(c["gpipe"].iteration_time_s, ONE_F_ONE_B_S, delta=1e-12)
        self.assertAlmostEqual(c["interleaved"].iteration_time_s, INTERLEAVED_S, delta=1e-12)
        table = c.table()
        self.assertEqual(table["schedule"], ["gpipe", "interleaved"])
        self.assertEqual(table["iteration_time_s"], [r.iteration_time_s for r in c])
        # The exposed-communication parts are attributes and row columns; on the ideal network
        # every one is zero, as is their total.
        kinds = ["exposed_%s_fraction" % k for k in ("tp", "cp", "ep", "dp", "pipeline")]
        for r in c:
            self.assertEqual([getattr(r, k) for k in kinds], [0.0] * 5)
            self.assertEqual(r.exposed_comm_fraction, 0.0)
            self.assertEqual([st["exposed_tp_fraction"] for st in r.stages], [0.0, 0.0])
        for k in kinds:
            self.assertEqual(table[k], [0.0, 0.0])

    def test_sweep(self):
        # global_batch_size 4, 8, 16 gives m = 4, 8, 16 and (m + 1)(F + B) = 5, 9 and 17 x
        # 18.5016 ms: throughput (tokens per second = gbs x 2048 / time) rises with m, so the
        # ranking is 16, 8, 4; dp 3 cannot divide 2 GPUs and stays as the invalid row.
        s = clustersim.sweep(PIPELINE_DICT, {"training.global_batch_size": [4, 8, 16],
                                             "parallelism.dp": [1, 3]}, base_dir=ROOT)
        rows = s.rows()
        self.assertEqual(len(rows), 6)
        valid = [r for r in rows if r["valid"]]
        # The values come back as they were given: ints here, not their text.
        self.assertEqual([r["training.global_batch_size"] for r in valid], [16, 8, 4])
        self.assertAlmostEqual(valid[2]["iteration_time_s"], 5 * 0.0185016, delta=1e-12)
        invalid = [r for r in rows if not r["valid"]]
        self.assertEqual([r["parallelism.dp"] for r in invalid], [3] * 3)
        self.assertTrue(all(r["error"] for r in invalid))
        self.assertEqual(s.best.microbatches, 16)
        self.assertEqual(s.table()["valid"], [True] * 3 + [False] * 3)
        self.assertFalse(s.interrupted)
        self.assertEqual(s.total, 6)

    def test_sweep_values_keep_their_types(self):
        # A float, a str and an int axis: each row holds the very values given (0.1 is not
        # "0.1"); to_json keeps them (JSON has the same three types).
        vary = {"compute.interference": [0.0, 0.1], "schedule": ["gpipe", "1f1b"],
                "training.global_batch_size": [8]}
        s = clustersim.sweep(PIPELINE_DICT, vary, base_dir=ROOT)
        for row in s.rows():
            for key, values in vary.items():
                self.assertIn(row[key], values)
                self.assertIs(type(row[key]), type(values[0]), key)
        back = json.loads(s.to_json())
        self.assertEqual(back["rows"], s.rows())
        self.assertEqual((back["total"], back["interrupted"]), (4, False))

    def test_sweep_memory_columns(self):
        # The topology gives the H200 141GB of HBM (GB = 1e9 bytes); the sweep overrides it to
        # 1GB in half the combinations. Each row's peak is the worst GPU's memory total of the
        # same combination run alone, and it fits exactly when that peak is within the HBM; the
        # ranking puts every fitting row first.
        vary = {"topology.gpu_models.H200.hbm": ["1GB", "141GB"],
                "training.global_batch_size": [4, 8]}
        s = clustersim.sweep(PIPELINE_DICT, vary, base_dir=ROOT)
        rows = s.rows()
        hbm = {"1GB": 10**9, "141GB": 141 * 10**9}
        for row in rows:
            alone = clustersim.run(PIPELINE_DICT, {k: row[k] for k in vary}, base_dir=ROOT)
            self.assertEqual(row["peak_memory_bytes"], alone.memory_per_gpu_bytes["total"])
            self.assertEqual(row["peak_memory_bytes"], alone.peak_memory_bytes)
            self.assertEqual(row["hbm_bytes"], hbm[row["topology.gpu_models.H200.hbm"]])
            self.assertEqual(alone.hbm_bytes, row["hbm_bytes"])
            self.assertEqual(row["fits_hbm"], row["peak_memory_bytes"] <= row["hbm_bytes"])
            self.assertEqual(alone.fits_hbm, row["fits_hbm"])
        fits = [r["fits_hbm"] for r in rows]
        self.assertEqual(fits, sorted(fits, reverse=True))
        self.assertIn(False, fits)
        self.assertIn(True, fits)
        # An invalid combination has no figures and no memory.
        bad = clustersim.sweep(PIPELINE_DICT, {"parallelism.dp": [3, 1]}, base_dir=ROOT).rows()
        self.assertEqual([r["peak_memory_bytes"] for r in bad if not r["valid"]], [None])


class ProgressTest(unittest.TestCase):
    def test_sweep_progress_counts_every_combination(self):
        calls = []
        s = clustersim.sweep(PIPELINE_DICT, {"training.global_batch_size": [4, 8, 16],
                                             "parallelism.dp": [1, 3]}, base_dir=ROOT,
                             progress=lambda done, total: calls.append((done, total)))
        # Once after each of the 3 x 2 combinations, in order.
        self.assertEqual(calls, [(n, 6) for n in range(1, 7)])
        self.assertEqual(len(s), 6)

    def test_an_exception_in_the_callback_propagates_as_is(self):
        class Stop(Exception):
            pass
        raised = Stop("from the callback")

        calls = []

        def progress(done, total):
            calls.append(done)
            if len(calls) == 2:
                raise raised
        for call in (lambda: clustersim.sweep(PIPELINE_DICT, {"training.global_batch_size":
                                                              [4, 8, 16]}, base_dir=ROOT,
                                              progress=progress),
                     lambda: clustersim.run(PIPELINE_DICT, base_dir=ROOT, progress=progress),
                     lambda: clustersim.plan(os.path.join(ROOT, "tests", "api", "data",
                                                          "plan-small.yaml"),
                                             {"parallelism.cp": 1}, {"topology.nodes": 2},
                                             schedules="1f1b", max_micro_batch=1,
                                             progress=lambda d, t, phase: progress(d, t))):
            calls.clear()
            with self.assertRaises(Stop) as caught:
                call()
            self.assertIs(caught.exception, raised)
            self.assertEqual(len(calls), 2)
        # The package is usable afterwards.
        r = clustersim.run(PIPELINE_DICT, base_dir=ROOT)
        self.assertAlmostEqual(r.iteration_time_s, ONE_F_ONE_B_S, delta=1e-12)

    def test_run_progress_ends_at_every_pass(self):
        # 1F1B runs a forward and a backward pass per microbatch on each of p = 2 stages: 2 x 8 x
        # 2 = 32 passes; interleaved with v = 2 chunks runs them per chunk: 2 x 8 x 2 x 2 = 64.
        for schedule, vpp, passes in (("1f1b", 1, 32), ("interleaved", 2, 64)):
            calls = []
            clustersim.run(PIPELINE_DICT, {"parallelism.vpp": vpp}, base_dir=ROOT,
                           schedule=schedule,
                           progress=lambda done, total: calls.append((done, total)))
            self.assertEqual(calls[-1], (passes, passes), schedule)
            self.assertEqual(calls[0], (1, passes))
            self.assertEqual(calls, sorted(calls))

    def test_plan_progress_names_its_phases(self):
        small = os.path.join(ROOT, "tests", "api", "data", "plan-small.yaml")
        calls = []
        p = clustersim.plan(small, {"parallelism.cp": 1, "parallelism.sharding": "zero1"},
                            {"topology.nodes": 2}, schedules="1f1b", top=3, max_micro_batch=1,
                            progress=lambda done, total, phase: calls.append((phase, done, total)))
        search = [c for c in calls if c[0] == "search"]
        # The search's last call has every layout of the plan done.
        self.assertEqual(search[-1][1:], (p["layouts"], p["layouts"]))
        self.assertIn("simulate", [c[0] for c in calls])


class InterruptTest(unittest.TestCase):
    """Ctrl-C, as a SIGINT the process sends itself from another thread."""

    def _interrupt_when(self, ready):
        """A thread that sends SIGINT once `ready` is set; returns it and its send time."""
        sent = []

        def send():
            if ready.wait(60):
                sent.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGINT)
        thread = threading.Thread(target=send)
        thread.start()
        return thread, sent

    def test_ctrl_c_stops_a_sweep_keeping_the_rows_done(self):
        # 300 combinations of a few milliseconds each (m = 2 ... 301 microbatches). The signal
        # comes once 3 are done; the sweep stops after the one in progress, within a second,
        # and SweepInterrupted (a KeyboardInterrupt) carries the finished rows, each the closed
        # form (m + p - 1)(F + B) = (m + 1) x 18.5016 ms of its m.
        sizes = list(range(2, 302))
        ready = threading.Event()
        thread, sent = self._interrupt_when(ready)
        done = []

        def progress(n, total):
            done.append(n)
            if n == 3:
                ready.set()
        try:
            with self.assertRaises(KeyboardInterrupt) as caught:
                clustersim.sweep(PIPELINE_DICT, {"training.global_batch_size": sizes},
                                 base_dir=ROOT, progress=progress)
            stopped = time.monotonic()
        finally:
            ready.set()
            thread.join()
        e = caught.exception
        self.assertIsInstance(e, clustersim.SweepInterrupted)
        self.assertLess(stopped - sent[0], 1.0)
        partial = e.partial
        self.assertTrue(partial.interrupted)
        self.assertEqual(partial.total, 300)
        # Every row the callback heard of, and the one it was told of when the signal's
        # KeyboardInterrupt came out of the callback itself (Python runs the handler there).
        self.assertIn(len(partial), (done[-1], done[-1] + 1))
        self.assertTrue(3 <= len(partial) < 300, len(partial))
        rows = partial.rows()
        self.assertEqual(sorted(r["training.global_batch_size"] for r in rows),
                         sizes[:len(rows)])
        for r in rows:
            self.assertAlmostEqual(r["iteration_time_s"],
                                   (r["training.global_batch_size"] + 1) * 0.0185016,
                                   delta=1e-12)
        self.assertIn("interrupted", repr(partial))

    def test_keyboard_interrupt_from_the_callback_keeps_the_rows(self):
        def progress(done, total):
            if done == 2:
                raise KeyboardInterrupt
        with self.assertRaises(clustersim.SweepInterrupted) as caught:
            clustersim.sweep(PIPELINE_DICT, {"training.global_batch_size": [4, 8, 16]},
                             base_dir=ROOT, progress=progress)
        # Exactly the two combinations done when it was raised: m = 4 and 8, ranked 8 first.
        rows = caught.exception.partial.rows()
        self.assertEqual([r["training.global_batch_size"] for r in rows], [8, 4])

    def test_ctrl_c_stops_a_long_run_within_a_second(self):
        # 2,048 GPUs and 192 microbatches with every fast path off: seconds of simulation. The
        # signal comes once the first passes are done; the run checks for it every 0.1 s.
        ready = threading.Event()
        thread, sent = self._interrupt_when(ready)
        calls = []

        def progress(done, total):
            calls.append((done, total))
            ready.set()
        try:
            with self.assertRaises(KeyboardInterrupt) as caught:
                clustersim.run(None, {"topology.nodes": 256, "training.global_batch_size": 6144},
                               fast_paths=False, progress=progress)
            stopped = time.monotonic()
        finally:
            ready.set()
            thread.join()
        self.assertNotIsInstance(caught.exception, clustersim.SweepInterrupted)
        self.assertLess(stopped - sent[0], 1.0)
        done, total = calls[-1]
        self.assertLess(done, total)  # stopped before the end

    def test_compare_progress_names_each_schedule(self):
        # Each schedule's run counts its passes: p = 2 GPUs x m = 8 microbatches x (forward,
        # backward) = 32, named by the schedule, in the order given, each ending at 32 of 32.
        calls = []
        clustersim.compare(PIPELINE_DICT, "gpipe,1f1b", base_dir=ROOT,
                           progress=lambda done, total, schedule: calls.append(
                               (done, total, schedule)))
        self.assertEqual([c[2] for c in calls if c[0] == c[1]], ["gpipe", "1f1b"])
        self.assertEqual({c[1] for c in calls}, {32})
        for name in ("gpipe", "1f1b"):
            done = [c[0] for c in calls if c[2] == name]
            self.assertEqual(done, sorted(done))
            self.assertEqual(done[-1], 32)

    def test_ctrl_c_stops_a_long_compare_within_a_second(self):
        # The long run above, compared under two schedules: the signal comes during the first
        # schedule's run, which stops within a second; the second never starts.
        ready = threading.Event()
        thread, sent = self._interrupt_when(ready)
        calls = []

        def progress(done, total, schedule):
            calls.append((done, total, schedule))
            ready.set()
        try:
            with self.assertRaises(KeyboardInterrupt):
                clustersim.compare(None, "1f1b,gpipe",
                                   {"topology.nodes": 256, "training.global_batch_size": 6144},
                                   fast_paths=False, progress=progress)
            stopped = time.monotonic()
        finally:
            ready.set()
            thread.join()
        self.assertLess(stopped - sent[0], 1.0)
        self.assertEqual({c[2] for c in calls}, {"1f1b"})
        self.assertLess(calls[-1][0], calls[-1][1])

    def test_an_interrupted_report_writes_nothing(self):
        # What the callback raises stops the report's run; the page is not written.
        def progress(done, total):
            raise KeyboardInterrupt
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.html")
            with self.assertRaises(KeyboardInterrupt):
                clustersim.report(PIPELINE_DICT, path, base_dir=ROOT, progress=progress)
            self.assertFalse(os.path.exists(path))
            # Uninterrupted, a compare's report hears each schedule's passes as compare does.
            calls = []
            clustersim.report(PIPELINE_DICT, path, base_dir=ROOT, schedules="gpipe,1f1b",
                              progress=lambda *a: calls.append(a))
            self.assertTrue(os.path.exists(path))
            self.assertEqual([c[2] for c in calls if c[0] == c[1]], ["gpipe", "1f1b"])


class ResultOutputTest(unittest.TestCase):
    def test_to_dict_and_to_json(self):
        r = clustersim.run(PIPELINE_DICT, base_dir=ROOT)
        d = r.to_dict()
        # The summary's keys, plus the memory verdict and the warnings.
        self.assertEqual(set(d) - set(r.summary),
                         {"peak_memory_bytes", "hbm_bytes", "fits_hbm", "warnings"})
        self.assertEqual(d["iteration_time_s"], r.iteration_time_s)
        self.assertEqual(json.loads(r.to_json()), d)
        d["stages"].clear()  # a copy: the result is unchanged
        self.assertEqual(len(r.stages), 2)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.json")
            text = r.to_json(path)
            with open(path) as f:
                self.assertEqual(json.load(f), json.loads(text))
        c = clustersim.compare(PIPELINE_DICT, ["gpipe", "1f1b"], base_dir=ROOT)
        self.assertEqual([x["schedule"] for x in json.loads(c.to_json())["results"]],
                         ["gpipe", "1f1b"])
        self.assertEqual([row["fits_hbm"] for row in c.rows()], [True, True])

    def test_html_tables_escape_every_string(self):
        # The experiment's display name and the invalid row's error (which quotes values) are
        # put in the tables as text: parsed back, every cell and caption is the plain string.
        name = '<b onclick="x">&name</b>'
        exp = clustersim.Experiment(PIPELINE_DICT, base_dir=ROOT, name=name)
        s = exp.sweep({"parallelism.dp": [1, 3], "schedule": ["gpipe", "1f1b"]})
        for obj in (exp.run(), s, exp.compare("gpipe,1f1b")):
            text = obj._repr_html_()
            cells = _HtmlText.of(text)
            self.assertNotIn("<b", text)
            self.assertIn(name, cells[0])  # the caption
            self.assertIn("iteration_time_s (s)", cells)
        cells = _HtmlText.of(s._repr_html_())
        errors = [row["error"] for row in s.rows() if row["error"]]
        self.assertEqual(len(errors), 2)
        for error in errors:
            self.assertIn(error, cells)
        self.assertIn("4 of 4 combinations", cells[0])

    def test_version_is_the_projects(self):
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            version = re.search(r"project\(clustersim VERSION ([0-9.]+)", f.read()).group(1)
        self.assertEqual(clustersim.__version__, version)

    def test_fields_name_their_units(self):
        # Every documented field says its unit (seconds, bytes, a fraction, a count, ...).
        units = ("Seconds", "seconds", "bytes", "fraction", "count", "per second", "TFLOP/s",
                 "0 to 1", "as named")
        for name in ("iteration_time_s", "bubble_fraction", "exposed_tp_fraction", "mfu", "hfu",
                     "tokens_per_s", "tflops_per_gpu", "world_size", "microbatches", "p2p_bytes",
                     "stages", "links", "memory_per_gpu_bytes", "schedule", "host_bound_passes"):
            doc = getattr(clustersim.Result, name).__doc__
            self.assertTrue(any(u in doc for u in units), (name, doc))
        for prop in ("peak_memory_bytes", "hbm_bytes"):
            self.assertIn("Bytes", getattr(clustersim.Result, prop).__doc__)


class SummaryFieldsTest(unittest.TestCase):
    def test_every_field_is_in_the_result_and_its_row(self):
        # The table of the summary's fields (sim/report/summary_fields.def), as the extension
        # gives it: each field is in a run's summary at its path; a top-level one is a Result
        # attribute documented with its description; a numeric column is in the row.
        fields = clustersim.summary_fields()
        self.assertEqual(fields[0]["path"], "schedule")
        r = clustersim.run(PIPELINE_DICT, base_dir=ROOT)
        row = r.row()
        for f in fields:
            value = r.summary
            for key in f["path"].split("."):
                self.assertIn(key, value, f["path"])
                value = value[key]
            if "." not in f["path"]:
                self.assertEqual(getattr(r, f["path"]), value)
                self.assertIn(f["description"], getattr(clustersim.Result, f["path"]).__doc__)
            if f["column"] and f["unit"] not in ("text", "bytes"):
                self.assertEqual(row[f["column"]], value, f["column"])
        # parallelism.pp is the row's pp: this experiment's two stages.
        self.assertEqual(row["pp"], 2)
        self.assertEqual(row["peak_memory_bytes"], r.summary["memory_per_gpu_bytes"]["total"])
        # The row: the table's numeric columns in its order, then the memory columns.
        self.assertEqual(list(row), [f["column"] for f in fields if f["column"] and
                                     f["unit"] not in ("text", "bytes")] +
                         ["peak_memory_bytes", "hbm_bytes", "fits_hbm"])

    def test_result_annotations_follow_the_table(self):
        # Result's class annotations (what mypy reads; the attributes themselves are made from the
        # table at import) against the table: one per top-level field and no other, each of the
        # type its unit gives (float: s, fraction, tokens/s, TFLOP/s; int: count, bytes; str:
        # text) but p2p_bytes, the summary's one bytes figure held as a double. A run's values
        # are of the annotated types (an int is no float here: a fraction of 0 reads 0.0).
        by_unit = {"s": float, "fraction": float, "tokens/s": float, "TFLOP/s": float,
                   "count": int, "bytes": int, "text": str}
        doubles = {"p2p_bytes"}
        fields = [f for f in clustersim.summary_fields() if "." not in f["path"]]
        expected = {f["path"]: float if f["path"] in doubles else by_unit[f["unit"]]
                    for f in fields}
        self.assertEqual(typing.get_type_hints(clustersim.Result), expected)
        r = clustersim.run(PIPELINE_DICT, base_dir=ROOT)
        for path, kind in expected.items():
            self.assertIs(type(getattr(r, path)), kind, path)


class _HtmlText(html.parser.HTMLParser):
    """The text of each element of an HTML fragment, entities decoded."""

    @classmethod
    def of(cls, text):
        parser = cls()
        parser.feed(text)
        parser.close()
        return parser.texts

    def __init__(self):
        super().__init__()
        self.texts = []

    def handle_data(self, data):
        self.texts.append(data)


class PlanTest(unittest.TestCase):
    def test_plan_ranks_and_its_best_runs_as_reported(self):
        # The 8-GPU planner fixture (tests/api/data/plan-small.yaml, analytical network): the
        # best layout, run on its own through clustersim.run with the layout's settings, takes
        # the time plan reports, and no simulated layout is faster than plan's top 3.
        small = os.path.join(ROOT, "tests", "api", "data", "plan-small.yaml")
        p = clustersim.plan(small, {"parallelism.cp": 1, "parallelism.sharding": "zero1"},
                            {"topology.nodes": 2}, schedules="1f1b,interleaved", top=3,
                            max_micro_batch=2)
        self.assertEqual(len(p["top"]), 3)
        best = p["top"][0]
        self.assertIn("--tensor-model-parallel-size %d" % best["layout"]["tp"],
                      best["megatron_args"])
        l = best["layout"]
        sets = {"topology.nodes": 2, "parallelism.tp": l["tp"], "parallelism.pp": l["pp"],
                "parallelism.dp": l["dp"], "parallelism.cp": l["cp"], "parallelism.vpp": l["vpp"],
                "parallelism.sequence_parallel": l["tp"] > 1,
                "parallelism.sharding": l["sharding"],
                "training.micro_batch_size": l["micro_batch_size"],
                "training.recompute": l["recompute"], "schedule": l["schedule"]}
        r = clustersim.run(small, sets)
        self.assertEqual(r.iteration_time_s, best["figures"]["iteration_time_s"])
        third = p["top"][2]["figures"]["iteration_time_s"]
        simulated = [e for e in p["layouts_evaluated"] if "analytical" in e]
        self.assertEqual(len(simulated), p["simulated"])
        self.assertTrue(all(e["analytical"]["iteration_time_s"] >= third
                            for e in simulated if e["status"] == "simulated"))
        with self.assertRaises(clustersim.InputError):
            clustersim.plan(small, {"model.layers": 4}, {"topology.nodes": 2})

    def test_plan_guide(self):
        # A 0.13B model on 8 GPUs: the guide's row "< 1B on 1-8 GPUs: DP only", one layout
        # (tp 1, pp 1, dp 8), simulated and ranked against the top k.
        small = os.path.join(ROOT, "tests", "api", "data", "plan-small.yaml")
        p = clustersim.plan(small, {"parallelism.cp": 1, "parallelism.sharding": "zero1"},
                            {"topology.nodes": 2}, schedules="1f1b", top=3, max_micro_batch=1,
                            guide=True)
        self.assertIn("DP only", p["guide"]["reasoning"][0])
        (g,) = p["guide"]["layouts"]
        self.assertEqual((g["layout"]["tp"], g["layout"]["pp"], g["layout"]["dp"]), (1, 1, 8))
        better = sum(1 for t in p["top"]
                     if t["figures"]["objective"] <= g["figures"]["objective"])
        self.assertEqual(g["rank"], better + 1)


    def test_plan_fix_bounds(self):
        # A list bounds an axis to those values and a "MIN..MAX" text to a range (plan --fix
        # parallelism.tp=1,2 --fix parallelism.pp=2..): every layout looked at is inside both.
        small = os.path.join(ROOT, "tests", "api", "data", "plan-small.yaml")
        p = clustersim.plan(small, {"parallelism.cp": 1, "parallelism.sharding": "zero1",
                                    "parallelism.tp": [1, 2], "parallelism.pp": "2.."},
                            {"topology.nodes": 2}, schedules="1f1b", top=3, max_micro_batch=1)
        layouts = [e["layout"] for e in p["layouts_evaluated"]]
        self.assertTrue(layouts)
        self.assertTrue(all(l["tp"] in (1, 2) and l["pp"] >= 2 for l in layouts))
        self.assertEqual({l["tp"] for l in layouts}, {1, 2})
        # cp_comm=True (plan --cp-comm): every layout of cp > 1 names its exchange, and the
        # four exchanges appear (p2p, a2a, allgather, a2a+p2p).
        p = clustersim.plan(small, {"parallelism.sharding": "zero1", "parallelism.tp": 1,
                                    "parallelism.pp": 1},
                            {"topology.nodes": 2}, schedules="1f1b", top=3, max_micro_batch=1,
                            cp_comm=True)
        cp_layouts = [e["layout"] for e in p["layouts_evaluated"] if e["layout"]["cp"] > 1]
        self.assertTrue(cp_layouts)
        self.assertTrue(all("cp_comm_type" in l for l in cp_layouts))
        self.assertEqual({l["cp_comm_type"] for l in cp_layouts},
                         {"p2p", "a2a", "allgather", "a2a+p2p"})

    def test_plan_threads(self):
        # The answer does not depend on the number of worker threads (docs/plan.md, Threads):
        # the same dict, every layout's entry included, with one and with two.
        small = os.path.join(ROOT, "tests", "api", "data", "plan-small.yaml")
        args = (small, {"parallelism.cp": 1, "parallelism.sharding": "zero1"},
                {"topology.nodes": 2})
        one = clustersim.plan(*args, schedules="1f1b", top=3, threads=1)
        two = clustersim.plan(*args, schedules="1f1b", top=3, threads=2)
        self.assertEqual(one, two)
        # --hsdp and --partial-recompute reach the planner: more layouts.
        wider = clustersim.plan(*args, schedules="1f1b", top=3, hsdp=True, partial_recompute=True,
                                uneven_stages=True)
        self.assertGreater(wider["layouts"], one["layouts"])
        # --gpus: 4 and 8 GPUs searched, each layout saying its count.
        counts = clustersim.plan(*args, schedules="1f1b", top=3, gpus=[4, 8], objective="energy")
        self.assertEqual(counts["gpu_counts"], [4, 8])
        self.assertIn(counts["top"][0]["layout"]["gpus"], (4, 8))
        with self.assertRaises(clustersim.InputError) as e:
            clustersim.plan(*args, gpus=[6])
        self.assertIn("whole number of nodes", str(e.exception))
        with self.assertRaises(TypeError):
            clustersim.plan(*args, gpus="8")
        # --global-batch: a list, a range text or one size; several rank per 1M tokens.
        batches = clustersim.plan(*args, schedules="1f1b", top=3, global_batch="8..16")
        self.assertEqual(batches["global_batch_sizes"], [8, 16])
        self.assertEqual(batches["objective_unit"], "s per 1M tokens")
        self.assertIn(batches["top"][0]["layout"]["global_batch_size"], (8, 16))
        self.assertEqual(clustersim.plan(*args, schedules="1f1b", top=3, global_batch=[16, 8]),
                         batches)
        with self.assertRaises(clustersim.InputError) as e:
            clustersim.plan(*args, global_batch="16..8")
        self.assertEqual(e.exception.argument, "global_batch")
        self.assertIn("the range ends below its start", str(e.exception))
        with self.assertRaises(TypeError):
            clustersim.plan(*args, global_batch=8.0)
        # --confirm: under flow at most that many re-simulated; "all" has no limit.
        flow = (small, {"parallelism.cp": 1, "parallelism.sharding": "zero1"},
                {"topology.nodes": 2, "network.model": "flow"})
        limited = clustersim.plan(*flow, schedules="1f1b", top=3, max_micro_batch=1, confirm=3)
        self.assertEqual(limited["confirm_limit"], 3)
        self.assertLessEqual(limited["confirmed"], 3)
        exact = clustersim.plan(*flow, schedules="1f1b", top=3, max_micro_batch=1, confirm="all")
        self.assertEqual((exact["confirm_limit"], exact["contenders"]), (0, 0))
        with self.assertRaises(TypeError):
            clustersim.plan(*args, confirm=2.5)
        with self.assertRaises(clustersim.InputError) as e:
            clustersim.plan(*args, confirm=0)
        self.assertEqual(e.exception.argument, "confirm")
        # Fewer layouts confirmed than the top asked for (top=3, confirm=2): named as `confirm`,
        # with top's value in the message.
        with self.assertRaises(clustersim.InputError) as e:
            clustersim.plan(*args, top=3, confirm=2)
        self.assertEqual(e.exception.argument, "confirm")
        self.assertIn("from top (3)", str(e.exception))
        with self.assertRaises(clustersim.InputError) as e:
            clustersim.plan(*args, threads=-1)
        self.assertEqual(e.exception.argument, "threads")
        with self.assertRaises(TypeError):
            clustersim.plan(*args, threads="2")


class ReportTest(unittest.TestCase):
    def test_html_report_of_a_comparison(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.html")
            clustersim.report(PIPELINE_DICT, path, schedules=["gpipe", "1f1b"], base_dir=ROOT)
            with open(path, encoding="ascii") as f:
                html = f.read()
            self.assertTrue(html.startswith("<!DOCTYPE html>"))
            # The embedded data names both schedules, in order.
            data = html.split('<script type="application/json" id="data">')[1]
            data = json.loads(data.split("</script>")[0])  # "<\/" is JSON for "</"
            self.assertEqual([r["summary"]["schedule"] for r in data["runs"]], ["gpipe", "1f1b"])
            # A bad input raises before anything is written, and leaves no file.
            bad = os.path.join(d, "bad.html")
            with self.assertRaises(clustersim.InputError):
                clustersim.report(PIPELINE_DICT, bad, {"schedule": "zigzag"}, base_dir=ROOT)
            self.assertFalse(os.path.exists(bad))


class JobsTest(unittest.TestCase):
    def test_two_jobs_example(self):
        # workloads/two-jobs.yaml, docs/what-if.md: both jobs end at 273.4 ms together (as
        # tests/golden/two-jobs.json records for the same file), 194.7 and 221.0 ms alone; six
        # links carry bytes of both.
        r = clustersim.run_jobs(os.path.join(ROOT, "workloads", "two-jobs.yaml"))
        self.assertEqual([j["name"] for j in r["jobs"]], ["job-a", "job-b"])
        self.assertEqual(r["jobs"][0]["gpus"], "0-3,8-11")
        for j in r["jobs"]:
            self.assertAlmostEqual(j["iteration_time_s"], r["makespan_s"], places=12)
            self.assertGreater(j["slowdown"], 1.2)
        self.assertAlmostEqual(r["makespan_s"], 0.2734, places=4)
        self.assertEqual(len(r["contested_links"]), 6)

    def test_jobs_progress_counts_job_iterations(self):
        # Two jobs, iterations 1 (the file's default): 2 iterations in the shared run, then one
        # alone each: total 2 x (1 + 1) = 4, reached at the end; `done` never goes back.
        calls = []
        clustersim.run_jobs(os.path.join(ROOT, "workloads", "two-jobs.yaml"),
                            progress=lambda done, total: calls.append((done, total)))
        self.assertEqual({t for _, t in calls}, {4})
        done = [d for d, _ in calls]
        self.assertEqual(done, sorted(done))
        self.assertEqual(done[-1], 4)

    def test_stopped_jobs_write_no_trace(self):
        class Stop(Exception):
            pass

        def progress(done, total):
            raise Stop
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "jobs.json")
            with self.assertRaises(Stop):
                clustersim.run_jobs(os.path.join(ROOT, "workloads", "two-jobs.yaml"),
                                    trace=trace, progress=progress)
            self.assertEqual(os.listdir(tmp), [])

    def test_bad_jobs_file_is_located(self):
        path = os.path.join(ROOT, "tests", "bad_inputs", "jobs-overlap.yaml")
        with self.assertRaises(clustersim.InputError) as ctx:
            clustersim.run_jobs(path)
        self.assertIn("already belong to job 'a'", str(ctx.exception))
        self.assertEqual(ctx.exception.line, 5)


class ErrorTest(unittest.TestCase):
    def test_unknown_value_is_located_with_accepted_names(self):
        with self.assertRaises(clustersim.InputError) as caught:
            clustersim.run(PIPELINE, {"network.model": "telepathy"})
        e = caught.exception
        self.assertIsInstance(e, ValueError)
        self.assertEqual(e.file, "--set network.model=telepathy")
        self.assertIn("ideal", e.accepted)
        self.assertIn("flow", e.accepted)
        self.assertIn("telepathy", str(e))
        # Exceptions survive pickling (multiprocessing sends them between processes).
        again = pickle.loads(pickle.dumps(e))
        self.assertEqual((again.file, again.accepted), (e.file, e.accepted))

    def test_dict_errors_name_line_and_column(self):
        bad = dict(PIPELINE_DICT, parallelism={"tp": 1, "pp": 2, "dp": 1, "ttp": 2})
        with self.assertRaises(clustersim.InputError) as caught:
            clustersim.run(bad, base_dir=ROOT)
        e = caught.exception
        # The dict is parsed as json.dumps(d, indent=2): line 1 "{", 2 "topology", 3 "model": {,
        # 4-7 its four keys, 8 "},", 9 "parallelism": {, 10 tp, 11 pp, 12 dp, 13 ttp. Nested
        # keys are indented by 4 spaces, so the key's opening quote is at column 5 (1-based).
        self.assertEqual(e.file, "<dict>")
        self.assertEqual((e.line, e.column), (13, 5))
        self.assertIn("ttp", e.message)
        self.assertIn("tp", e.accepted)

    def test_missing_file(self):
        with self.assertRaises(clustersim.InputError) as caught:
            clustersim.run("no/such/experiment.yaml")
        self.assertEqual(caught.exception.file, "no/such/experiment.yaml")
        self.assertIn("no such file", caught.exception.message)

    def test_paths_with_nul_or_of_the_wrong_type_name_the_argument(self):
        # The operating system would cut 'x.yaml\0y' at the NUL and read x.yaml; a trace named
        # 't.json\0.pftrace' would get Perfetto bytes in t.json. Both are refused, naming the
        # argument, before anything runs or is written.
        with tempfile.TemporaryDirectory() as tmp:
            for call, argument in (
                    (lambda: clustersim.run(PIPELINE + "\0y"), "source"),
                    (lambda: clustersim.run(PIPELINE, trace=os.path.join(tmp, "t.json\0.pftrace")),
                     "trace"),
                    (lambda: clustersim.report(PIPELINE, os.path.join(tmp, "r.html\0x")), "path"),
                    (lambda: clustersim.run_jobs(PIPELINE + "\0"), "path"),
                    (lambda: clustersim.run(PIPELINE, trace=42), "trace")):
                with self.assertRaises(clustersim.InputError) as caught:
                    call()
                self.assertTrue(str(caught.exception).startswith(argument + ": "),
                                str(caught.exception))
            self.assertEqual(os.listdir(tmp), [])

    def test_a_bad_schedule_argument_is_blamed_on_the_argument(self):
        # Not on the experiment file (whose own schedule is fine): on `schedule`, listing every
        # schedule there is.
        for call, argument in ((lambda: clustersim.run(PIPELINE, schedule="zigzag"), "schedule"),
                               (lambda: clustersim.compare(PIPELINE, ["gpipe", "zigzag"]),
                                "schedules"),
                               (lambda: clustersim.load(PIPELINE).report("r.html", "zigzag"),
                                "schedules")):
            with self.assertRaises(clustersim.InputError) as caught:
                call()
            e = caught.exception
            self.assertEqual(e.argument, argument)
            self.assertEqual(e.file, "")
            self.assertTrue(str(e).startswith(argument + ': unknown schedule "zigzag"'), str(e))
            self.assertEqual(e.accepted, clustersim.schedules())

    def test_wrong_argument_types_name_the_argument_and_the_type(self):
        # Each raises ArgumentTypeError (an InputError and a TypeError) whose message starts
        # with the argument's name and says what it accepts; none reaches the compiled module,
        # whose own TypeError would read "incompatible function arguments".
        calls = [
            (lambda: clustersim.run(42), "source", "path"),
            (lambda: clustersim.run(PIPELINE, 42), "overrides", "dict"),
            (lambda: clustersim.run(PIPELINE, {4: 1}), "overrides key", "str"),
            (lambda: clustersim.run(PIPELINE, schedule=1), "schedule", "str"),
            (lambda: clustersim.run(PIPELINE, fast_paths="no"), "fast_paths", "bool"),
            (lambda: clustersim.run(PIPELINE, progress="yes"), "progress", "callable"),
            (lambda: clustersim.run(PIPELINE, base_dir=3), "base_dir", "path"),
            (lambda: clustersim.run(PIPELINE_DICT, base_dir=[ROOT]), "base_dir", "path"),
            (lambda: clustersim.compare(PIPELINE, 5), "schedules", "list of str"),
            (lambda: clustersim.sweep(PIPELINE, ["parallelism.tp=1,2"]), "vary", "dict"),
            (lambda: clustersim.sweep(PIPELINE, {"parallelism.tp": 2}), "vary['parallelism.tp']",
             "list"),
            (lambda: clustersim.sweep(PIPELINE, {"parallelism.tp": [[1]]}),
             "vary['parallelism.tp'] value", "int"),
            (lambda: clustersim.plan(PIPELINE, top="3"), "top", "int"),
            (lambda: clustersim.plan(PIPELINE, headroom="0.1"), "headroom", "number"),
            (lambda: clustersim.plan(PIPELINE, objective=1), "objective", "str"),
            (lambda: clustersim.plan(PIPELINE, fix=3), "fix", "dict"),
            (lambda: clustersim.run_jobs(PIPELINE, fast_paths=None), "fast_paths", "bool"),
            (lambda: clustersim.load(PIPELINE).set(1, 2), "key", "str"),
        ]
        for call, argument, accepted in calls:
            with self.assertRaises(clustersim.ArgumentTypeError, msg=argument) as caught:
                call()
            e = caught.exception
            self.assertIsInstance(e, TypeError)
            self.assertIsInstance(e, clustersim.InputError)
            self.assertEqual(e.argument, argument)
            self.assertTrue(str(e).startswith(argument + ": expected "), str(e))
            self.assertIn(accepted, e.expected)

    def test_bad_argument_values_name_the_argument(self):
        for call, argument in (
                (lambda: clustersim.sweep(PIPELINE, {}), "vary"),
                (lambda: clustersim.sweep(PIPELINE, {"parallelism.tp": []}),
                 "vary['parallelism.tp']"),
                (lambda: clustersim.sweep(PIPELINE, {"parallelism.tp": [2, 2]}),
                 "vary['parallelism.tp']"),
                (lambda: clustersim.sweep(PIPELINE, {"a": list(range(1001)),
                                                     "b": list(range(1000))}), "vary"),
                (lambda: clustersim.plan(PIPELINE, top=-1), "top"),
                (lambda: clustersim.plan(PIPELINE, margin=float("nan")), "margin"),
                (lambda: clustersim.plan(PIPELINE, objective="speed"), "objective"),
                (lambda: clustersim.run(PIPELINE).table("layers"), "name")):
            with self.assertRaises(clustersim.InputError) as caught:
                call()
            self.assertTrue(str(caught.exception).startswith(argument + ": "),
                            str(caught.exception))

    def test_unknown_schedule_lists_schedules(self):
        with self.assertRaises(clustersim.InputError) as caught:
            clustersim.compare(PIPELINE, "gpipe,zigzag")
        self.assertIn("zb-v", caught.exception.accepted)
        self.assertEqual(sorted(clustersim.schedules()), sorted(
            n for n in clustersim.schedules()))
        self.assertIn("1f1b", clustersim.schedules())


class GilTest(unittest.TestCase):
    def test_other_threads_run_while_simulating(self):
        # A Python thread counts while the main thread simulates; if the GIL were held through
        # the simulation the counter could advance only between the calls, at most a few times.
        ticks = []
        stop = threading.Event()

        def count():
            while not stop.is_set():
                ticks.append(1)
                time.sleep(0.0005)

        t = threading.Thread(target=count)
        exp = clustersim.load(None, {"network.model": "analytical"})
        t.start()
        try:
            # Up to five runs of tens of milliseconds each; one in which the counter ticks five
            # times or more is enough. Held, the GIL lets it tick only around each call's Python
            # parts (1 or 2 times), whatever the machine's load; released, it ticks dozens of
            # times per run unless the machine starves the thread in every one of the five.
            best = 0
            for _ in range(5):
                before = len(ticks)
                exp.run()
                best = max(best, len(ticks) - before)
                if best >= 5:
                    break
        finally:
            stop.set()
            t.join()
        self.assertGreaterEqual(best, 5)


if __name__ == "__main__":
    unittest.main()
