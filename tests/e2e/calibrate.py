#!/usr/bin/env python3
"""clustersim calibrate end to end (docs/calibrate.md), the done-when checks of issue 15's compute half:

1. `clustersim calibrate` on each bundled profiler trace (GPT, Llama, MoE) with the experiment it
   ran and its iteration measured without the profiler writes, byte for byte, the committed
   tests/validation/calibrations/h200-*.yaml (deterministic; the committed files are what the
   calibrated validation families use), and a --json report that parses, mapping every kernel.
2. `clustersim run` of the trace's configuration with that calibration predicts its iteration
   within 3% of iteration_ms_without_profiler in h200-kernels.json (172.6 ms).
3. Bad traces exit 2 with a located message and write nothing: a truncated .json.gz, a file that
   is not JSON, a JSON file that is not a trace; an unknown GPU model. Unknown kernels are listed
   as unmapped, with their time, in the residual.
4. Bad nccl-tests files (real pastes cut short, a file of another format, a file given as the
   wrong operation, a table without device lines; an unknown --nccl-fit) exit 2 with
   file:line:column (or the option) and write neither
   --out nor --json; a file cut before its footer is fitted with a warning naming what was read.
5. `clustersim diff` with a truncated profile exits 2 and writes no --json.

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
CALIBRATIONS = os.path.join(ROOT, "tests", "validation", "calibrations")
EXPERIMENTS = os.path.join(ROOT, "tests", "validation", "experiments")
EXPERIMENT = os.path.join(EXPERIMENTS, "h200-gpt-h3072.yaml")
# The bundled traces, the experiment each ran (experiments/NAME.yaml) and its iteration measured
# without the profiler (h200-kernels.json, h200-llama.json, h200-moe.json).
FITS = [
    ("h200-gpt-h3072", "gpt-h3072-profile.json.gz", "172.629ms"),
    ("h200-llama-h2048", "llama-h2048-l8-profile.json.gz", "63.276ms"),
    ("h200-moe-h2048", "moe-h2048-e8-l4-profile.json.gz", "50.944ms"),
]


def run(args):
    return subprocess.run(args, capture_output=True, text=True)


def main():
    exe = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, trace, measured in FITS:
            out = os.path.join(tmp, name + ".yaml")
            report = os.path.join(tmp, name + ".json")
            r = run([exe, "calibrate", "--torch-trace", os.path.join(DATA, trace), "--gpu-model",
                     "H200", "--experiment", os.path.join(EXPERIMENTS, name + ".yaml"),
                     "--iteration-time", measured, "--out", out, "--json", report])
            if r.returncode != 0:
                print(r.stdout, r.stderr)
                return 1
            committed = os.path.join(CALIBRATIONS, name + ".yaml")
            with open(out) as f, open(committed) as g:
                if f.read() != g.read():
                    failures.append("calibration differs from " + committed +
                                    " (regenerate it with clustersim calibrate if the fit changed)")
            with open(report) as f:
                rep = json.load(f)
            kinds = {k["kind"]: k for k in rep["kinds"]}
            if not kinds["gemm"]["fitted"] or kinds["gemm"]["samples"] == 0:
                failures.append(name + ": the GEMM curve was not fitted")
            if rep["coverage"]["unmapped"]:
                failures.append(name + ": unmapped kernels " + str(rep["coverage"]["unmapped"]))
            if not rep["model_bytes"]:
                failures.append(name + ": the kinds' bytes did not come from the experiment")
        out = os.path.join(tmp, "h200-gpt-h3072.yaml")

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

        # Unknown kernels: fitted around, listed as unmapped with their time (the residual).
        unknown = os.path.join(tmp, "unknown.json")
        with open(unknown, "w") as f:
            f.write('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "my::op", "pid": 1, '
                    '"tid": 1, "ts": 0, "dur": 5, "args": {"External id": 1}}, {"ph": "X", '
                    '"cat": "kernel", "name": "my_weird_kernel", "pid": 0, "tid": 7, "ts": 10, '
                    '"dur": 50, "args": {"External id": 1, "stream": 7, "correlation": 1}}]}')
        r = run([exe, "calibrate", "--torch-trace", unknown, "--gpu-model", "H200", "--out",
                 os.path.join(tmp, "unknown.yaml")])
        if r.returncode != 0 or "residual 0.050 ms per iteration" not in r.stdout or \
                "my_weird_kernel" not in r.stdout:
            failures.append(f"unknown kernels: exit {r.returncode}, {r.stdout[-400:]!r}")

        # nccl-tests files.
        public = os.path.join(ROOT, "tests", "api", "data", "nccl-tests-public")
        topo = os.path.join(ROOT, "topologies", "h200-2gpu-nvlink.yaml")
        notrace = os.path.join(tmp, "all_reduce_perf-is-a-trace.txt")
        with open(notrace, "wb") as f:
            f.write(gzip.decompress(data)[:4000])
        nccl_cases = [
            # A real paste cut inside its first row: line 17, column 84.
            (os.path.join(public, "all_reduce_perf-8xRTX4090-nccl-1530.txt"),
             "all_reduce_perf-8xRTX4090-nccl-1530.txt:17:84: a result row with 9 columns"),
            # Rows without the header (a file cut at the top).
            ("all_gather=" + os.path.join(public, "2x2080Ti-nccl-tests-44-tail-no-header.txt"),
             "2x2080Ti-nccl-tests-44-tail-no-header.txt:15:1: no nccl-tests column header"),
            # A file of another format.
            (notrace, "all_reduce_perf-is-a-trace.txt:"),
            # All_reduce rows given as all_gather: the size and count contradict it.
            ("all_gather=" + os.path.join(public, "all_reduce_perf-2xGB10-dgx-spark-playbooks-pr103.txt"),
             "the file is all_reduce_perf output but was given as all_gather"),
            # A table without device lines.
            (os.path.join(public, "all_reduce_perf-nccl-tests-252-table-only.txt"),
             "all_reduce_perf-nccl-tests-252-table-only.txt:1:1: no \"# Using devices\" rank lines"),
        ]
        for spec, expected in nccl_cases:
            bad_out = os.path.join(tmp, "net.yaml")
            bad_json = os.path.join(tmp, "net.json")
            r = run([exe, "calibrate", "--nccl-tests", spec, "--topology", topo, "--out", bad_out,
                     "--json", bad_json])
            if r.returncode != 2 or expected not in r.stderr:
                failures.append(f"nccl-tests {spec}: exit {r.returncode}, stderr {r.stderr.strip()!r}")
            for written in (bad_out, bad_json):
                if os.path.exists(written):
                    failures.append(f"nccl-tests {spec}: {written} was written")
                    os.remove(written)
        # An unknown fit measure: exit 2 naming the accepted ones, nothing written.
        bad_out = os.path.join(tmp, "net.yaml")
        r = run([exe, "calibrate", "--nccl-tests",
                 os.path.join(public, "all_reduce_perf-8xA100-SXM4-40GB-galvatron.txt"),
                 "--topology", topo, "--nccl-fit", "max", "--out", bad_out])
        if r.returncode != 2 or "--nccl-fit: expected worst" not in r.stderr \
                or "or rms" not in r.stderr or os.path.exists(bad_out):
            failures.append(f"--nccl-fit max: exit {r.returncode}, stderr {r.stderr.strip()!r}")
        # An option for a fit the command was not asked for: refused at the option, not ignored,
        # and nothing written.
        trace = os.path.join(ROOT, "tests", "validation", "data", "gpt-h3072-profile.json.gz")
        dgx = os.path.join(ROOT, "tests", "api", "data", "dgx-a100-40gb-1node.yaml")
        nccl = ["--nccl-tests", os.path.join(public, "all_reduce_perf-8xA100-SXM4-40GB-galvatron.txt"),
                "--topology", dgx]
        torch = ["--torch-trace", trace, "--gpu-model", "H200"]
        unused = [
            (torch + ["--nccl-fit", "rms"], "--nccl-fit: chooses how the --nccl-tests rows"),
            (torch + ["--nccl-sizes", "16M:1G"], "--nccl-sizes: chooses which --nccl-tests rows"),
            (torch + ["--experiment-set", "training.micro_batch_size=2"],
             "--experiment-set: overrides a key of --experiment"),
            (torch + ["--set", "nodes=2"], "--set: overrides a key of --topology"),
            (nccl + ["--iteration-time", "63.3ms"], "--iteration-time: corrects the host's cost"),
            (nccl + ["--iterations", "2"], "--iterations: counts the training iterations"),
            (nccl + ["--max-memory", "1GiB"], "--max-memory: bounds the memory of --torch-trace"),
            # Given, the measure is checked even when empty; --set applies to the topology that
            # names the GPU model, with or without nccl-tests.
            (nccl + ["--nccl-fit", ""], "--nccl-fit: expected worst"),
            (["--torch-trace", trace, "--gpu-model", "A100", "--topology", dgx,
              "--set", "nodes=banana"], "--set nodes=banana: 'nodes': expected a whole number"),
        ]
        for args, expected in unused:
            bad_out = os.path.join(tmp, "unused.yaml")
            r = run([exe, "calibrate"] + args + ["--out", bad_out])
            if r.returncode != 2 or expected not in r.stderr or os.path.exists(bad_out):
                failures.append(f"calibrate {' '.join(args[-2:])}: exit {r.returncode}, "
                                f"stderr {r.stderr.strip()!r}")
            if os.path.exists(bad_out):
                os.remove(bad_out)
        # Cut before the footer, two ranks on two hosts: read, with a warning saying so; the
        # 2-GPU topology takes its two ranks (the fit itself means nothing for these hosts).
        cut = os.path.join(public, "all_reduce_perf-2xGB10-dgx-spark-playbooks-pr103.txt")
        r = run([exe, "calibrate", "--nccl-tests", cut, "--topology", topo, "--out",
                 os.path.join(tmp, "cut.yaml")])
        if r.returncode != 0 or "no \"# Avg bus bandwidth\" footer" not in r.stdout + r.stderr \
                or "read 4 rows" not in r.stdout + r.stderr:
            failures.append(f"nccl-tests cut before the footer: exit {r.returncode}, "
                            f"{(r.stdout + r.stderr)[-600:]!r}")

        # diff with a truncated profile: exit 2, no --json.
        sim = os.path.join(tmp, "sim.json")
        r = run([exe, "run", EXPERIMENT, "--trace", sim])
        diff_json = os.path.join(tmp, "diff.json")
        r = run([exe, "diff", sim, os.path.join(tmp, "truncated.json.gz"), "--json", diff_json])
        if r.returncode != 2 or "truncated" not in r.stderr or os.path.exists(diff_json):
            failures.append(f"diff, truncated profile: exit {r.returncode}, {r.stderr.strip()!r}")

    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
