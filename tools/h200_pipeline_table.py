#!/usr/bin/env python3
"""Predicted iteration times of the two-GPU H200 pipeline for gpipe, 1f1b and interleaved (vpp=2)
at m = 2, 4, 8, 16 microbatches, next to the closed forms, as a markdown table.

Runs `clustersim compare workloads/h200-2gpu-pipeline.yaml --schedules gpipe,1f1b,interleaved
--set training.global_batch_size=M --json ...` once per m (micro-batch 1, dp 1, so m = global batch).

Closed forms (equal stages, no communication): gpipe and 1f1b (m+p-1)(F+B), interleaved
(v*m+p-1)(F+B)/v, with F and B a whole stage's forward and backward: (layers/p) x the measured
per-layer times. Bubble fraction (p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1).

Usage: tools/h200_pipeline_table.py [--binary build/bin/clustersim] [--microbatches 2,4,8,16]
Python 3 standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPERIMENT = os.path.join(ROOT, "workloads", "h200-2gpu-pipeline.yaml")

# The experiment's shape (workloads/h200-2gpu-pipeline.yaml) and the measured layer times
# (shared/validation/h200-calibration.json, transformer_layer_bf16, h=4096, s=2048, mbs=1).
LAYERS, P, V = 8, 2, 2
LAYER_FWD_MS, LAYER_BWD_MS = 1.3057, 3.3197
SCHEDULES = ["gpipe", "1f1b", "interleaved"]


def closed_form(schedule, m):
    """(iteration time in ms, bubble fraction) of the closed form."""
    stage_fb = LAYERS / P * (LAYER_FWD_MS + LAYER_BWD_MS)
    v = V if schedule == "interleaved" else 1
    return (v * m + P - 1) * stage_fb / v, (P - 1) / (v * m + P - 1)


def run(binary, m):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "compare.json")
        cmd = [binary, "-q", "compare", EXPERIMENT, "--schedules", ",".join(SCHEDULES),
               "--set", f"training.global_batch_size={m}", "--json", out]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
        with open(out) as f:
            return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "clustersim"))
    ap.add_argument("--microbatches", default="2,4,8,16")
    args = ap.parse_args()
    ms = [int(x) for x in args.microbatches.split(",") if x]

    rows = {}
    for m in ms:
        for summary in run(args.binary, m):
            if summary["microbatches"] != m:
                sys.exit(f"asked for m={m}, the summary says {summary['microbatches']}")
            rows[(summary["schedule"], m)] = summary

    print("| schedule | m | predicted iteration (ms) | bubble fraction | closed form (ms) "
          "| closed-form bubble | predicted / closed form |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for schedule in SCHEDULES:
        for m in ms:
            s = rows[(schedule, m)]
            t_ms = s["iteration_time_s"] * 1e3
            cf_ms, cf_bubble = closed_form(schedule, m)
            name = f"{schedule} (vpp={V})" if schedule == "interleaved" else schedule
            print(f"| {name} | {m} | {t_ms:.3f} | {s['bubble_fraction']:.4f} | {cf_ms:.3f} "
                  f"| {cf_bubble:.4f} | {t_ms / cf_ms:.4f} |")


if __name__ == "__main__":
    main()
