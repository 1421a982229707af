#!/usr/bin/env python3
"""clustersim calibrate end to end (docs/calibrate.md), the done-when checks of issue 15's compute half:

1. `clustersim calibrate` on the bundled profiler trace writes, byte for byte, the committed
   tests/validation/calibrations/h200-gpt-h3072.yaml (deterministic; the committed file is what the
   layer-h200-calibrated validation family uses), and a --json report that parses.
2. `clustersim run` of the trace's configuration with that calibration predicts its iteration
   within 3% of iteration_ms_without_profiler in h200-kernels.json (172.6 ms).
3. Bad traces exit 2 with a located message and write nothing: a truncated .json.gz, a file that
   is not JSON, a JSON file that is not a trace; an unknown GPU model.

Usage: calibrate.py CLUSTERSIM
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "validation", "data")
TRACE = os.path.join(DATA, "gpt-h3072-profile.json.gz")
COMMITTED = os.path.join(ROOT, "tests", "validation", "calibrations", "h200-gpt-h3072.yaml")
EXPERIMENT = os.path.join(ROOT, "tests", "validation", "experiments", "h200-gpt-h3072.yaml")


def run(args):
    return subprocess.run(args, capture_output=True, text=True)


def main():
    exe = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cal.yaml")
        report = os.path.join(tmp, "cal.json")
        r = run([exe, "calibrate", "--torch-trace", TRACE, "--gpu-model", "H200", "--out", out,
                 "--json", report])
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            return 1
        with open(out) as f, open(COMMITTED) as g:
            if f.read() != g.read():
                failures.append("calibration differs from " + COMMITTED +
                                " (regenerate it with clustersim calibrate if the fit changed)")
        with open(report) as f:
            rep = json.load(f)
        kinds = {k["kind"]: k for k in rep["kinds"]}
        if not kinds["gemm"]["fitted"] or kinds["gemm"]["samples"] == 0:
            failures.append("the GEMM curve was not fitted")

        summary = os.path.join(tmp, "run.json")
        r = run([exe, "run", EXPERIMENT, "--set", "compute.calibration=" + out, "--json", summary])
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            return 1
        with open(summary) as f:
            s = json.load(f)
        predicted_ms = s["iteration_time_s"] * 1e3
        with open(os.path.join(DATA, "h200-kernels.json")) as f:
            measured_ms = json.load(f)["profiled_training_iteration"]["iteration_ms_without_profiler"]
        err = predicted_ms / measured_ms - 1
        print(f"iteration: predicted {predicted_ms:.2f} ms, measured {measured_ms:.2f} ms, "
              f"error {100 * err:+.2f}%")
        if abs(err) > 0.03:
            failures.append(f"iteration error {100 * err:+.2f}% exceeds 3%")

        # Bad inputs: exit 2, a located message, no output file.
        with open(TRACE, "rb") as f:
            data = f.read()
        cases = {
            "truncated.json.gz": (data[: len(data) // 2], "truncated"),
            "not-json.json": (b"this is not json", "not valid JSON"),
            "not-trace.json": (b'{"hello": [1, 2, 3]}', "no \"traceEvents\" array"),
            "no-kernels.json": (
                b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, '
                b'"dur": 2}]}', "no GPU kernels"),
            "cut.json": (gzip.decompress(data)[:100000], "byte "),
        }
        for name, (content, expected) in cases.items():
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(content)
            bad_out = os.path.join(tmp, name + ".yaml")
            r = run([exe, "calibrate", "--torch-trace", path, "--gpu-model", "H200", "--out",
                     bad_out])
            if r.returncode != 2 or expected not in r.stderr or name not in r.stderr:
                failures.append(f"{name}: exit {r.returncode}, stderr {r.stderr.strip()!r}")
            if os.path.exists(bad_out):
                failures.append(f"{name}: {bad_out} was written")
        r = run([exe, "calibrate", "--torch-trace", TRACE, "--gpu-model", "Z9000", "--out",
                 os.path.join(tmp, "z.yaml")])
        if r.returncode != 2 or "Z9000" not in r.stderr:
            failures.append(f"unknown GPU model: exit {r.returncode}, {r.stderr.strip()!r}")

    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
