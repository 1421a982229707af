#!/usr/bin/env python3
"""Writes nccl-tests-format files (the current layout: all_reduce_perf, all_gather_perf,
reduce_scatter_perf, sendrecv_perf on 2 ranks, bf16) from `nccl_two_gpus` of
tests/validation/data/h200-calibration.json (public: two H200 over NVLink, NCCL 2.28, timed from
Python). nccl-tests times GPU work back to back, without a launch from Python, so the file's
~50 us launch (its own note; docs/network.md) is subtracted from every time. The sizes follow
nccl-tests' columns: all_gather's size is the gathered output (2 x bytes_per_rank),
reduce_scatter's the input (2 x bytes_per_rank_out), count the per-rank elements.
Usage: nccl_tests_from_h200.py [OUT_DIR]  (default tests/validation/data/nccl-tests)"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(ROOT, "tests", "validation", "data", "h200-calibration.json")
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "validation", "data", "nccl-tests")
LAUNCH_US = 50.0
RANKS = 2
TYPE_BYTES = 2  # bf16


def time_text(us):
    if us >= 10000:
        return "%7.0f" % us
    if us >= 100:
        return "%7.1f" % us
    return "%7.2f" % us


def write(binary, redop, rows, factor, source_note):
    lines = [
        "# Made by tools/nccl_tests_from_h200.py from nccl_two_gpus." + source_note +
        " of tests/validation/data/h200-calibration.json, minus a 50 us launch (not nccl-tests' own run)",
        "# Collective test starting: " + binary,
        "# nThread 1 nGpus 2 minBytes %d maxBytes %d step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"
        % (rows[0][0], rows[-1][0]),
        "#",
        "# Using devices",
        "#  Rank  0 Group  0 Pid      1 on      h200x2 device  0 [0x00] NVIDIA H200",
        "#  Rank  1 Group  0 Pid      1 on      h200x2 device  1 [0x01] NVIDIA H200",
        "#",
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % ("", "", "", "", ""),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s" % (
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s" % (
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]
    bws = []
    for size, count, us in rows:
        t = time_text(us)
        alg = size / 1e3 / float(t)
        bus = alg * factor
        bws.append(bus)
        lines.append("%12d  %12d  %8s  %6s  %6s  %7s  %6.2f  %6.2f  %5g  %7s  %6.2f  %6.2f  %5s" % (
            size, count, "bfloat16", redop, "%6d" % -1, t, alg, bus, 0, t, alg, bus, "0"))
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : %g " % (sum(bws) / len(bws)), "#",
              "# Collective test concluded: " + binary]
    with open(os.path.join(OUT, binary + "-h200x2.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    d = json.load(open(SRC))["nccl_two_gpus"]
    os.makedirs(OUT, exist_ok=True)
    ar = [(r["bytes"], r["bytes"] // TYPE_BYTES, r["ms"] * 1e3 - LAUNCH_US) for r in d["all_reduce"]]
    write("all_reduce_perf", "sum", ar, 2 * (RANKS - 1) / RANKS, "all_reduce")
    ag = [(r["bytes_per_rank"] * RANKS, r["bytes_per_rank"] // TYPE_BYTES, r["ms"] * 1e3 - LAUNCH_US)
          for r in d["all_gather"]]
    write("all_gather_perf", "none", ag, (RANKS - 1) / RANKS, "all_gather")
    rs = [(r["bytes_per_rank_out"] * RANKS, r["bytes_per_rank_out"] // TYPE_BYTES, r["ms"] * 1e3 - LAUNCH_US)
          for r in d["reduce_scatter"]]
    write("reduce_scatter_perf", "sum", rs, (RANKS - 1) / RANKS, "reduce_scatter")
    sr = [(r["bytes"], r["bytes"] // TYPE_BYTES, r["ms"] * 1e3 - LAUNCH_US) for r in d["send_recv"]]
    write("sendrecv_perf", "sum", sr, 1.0, "send_recv (ms, the exchange)")


if __name__ == "__main__":
    main()
