#!/usr/bin/env python3
"""Fits the direct-NVLink NCCL constants of sim/network/network.hpp on the 2-GPU microbenchmark.

Reads nccl_two_gpus of tests/validation/data/h200-calibration.json (two H200 over 18 NVLink 4
links, 450 GB/s per direction, 1 us per hop as in topologies/h200-2gpu-nvlink.yaml) and, for each
operation, finds the constants of the time the network model gives that operation on the bond:

    t = host + base[op] + steps x (step_overhead + 1 us) + wire bytes / (efficiency[op] x 450 GB/s)

host is the 50 us launch from Python that the measurements include (their own note); the network
model never adds it. steps and wire bytes per direction follow NCCL's ring on two ranks:

    all_reduce      2 steps, wire = S              (S = the per-rank buffer)
    all_gather      1 step,  wire = per-rank bytes (the JSON's bytes_per_rank)
    reduce_scatter  1 step,  wire = per-rank bytes (bytes_per_rank_out)
    sendrecv        1 step,  wire = S each way     (both directions at once)
    send            1 step,  wire = S              (one_way_ms: a single send, one direction)

all_reduce fits (efficiency, step_overhead) with base = 0: the per-step overhead is the one every
collective and message pays. The other operations keep that step overhead and fit
(efficiency, base), base being a fixed cost per collective of that operation. Every fit is the
minimax of the relative error of the time over the rows from 16 MiB up (smaller rows are dominated
by the launch); tests/validation compares busbw, whose error is 1 / (1 + time error) - 1.

    tools/fit_nccl_2gpu.py [path/to/h200-calibration.json]
"""
import json
import os
import sys

HOST = 50e-6
HOP = 1e-6
NOMINAL = 450e9
MIN_BYTES = 16 << 20


def rows(data, op, one_way=False, min_bytes=MIN_BYTES):
    out = []
    for r in data[op]:
        if op == "all_reduce":
            size, wire, steps = r["bytes"], r["bytes"], 2
        elif op == "all_gather":
            size, wire, steps = r["bytes_per_rank"], r["bytes_per_rank"], 1
        elif op == "reduce_scatter":
            size, wire, steps = r["bytes_per_rank_out"], r["bytes_per_rank_out"], 1
        else:
            size, wire, steps = r["bytes"], r["bytes"], 1
        if size >= min_bytes:
            ms = r["one_way_ms"] if one_way else r["ms"]
            out.append((size, wire, steps, ms * 1e-3))
    return out


def worst(rs, eff, overhead, base):
    err = 0.0
    for _, wire, steps, measured in rs:
        predicted = HOST + base + steps * (overhead + HOP) + wire / (eff * NOMINAL)
        err = max(err, abs(predicted / measured - 1))
    return err


def fit(rs, second, lo, hi, step, overhead=None):
    """Grid minimax over efficiency (0.400-1.000 by 0.001) and `second` in [lo, hi]."""
    best = None
    n = int(round((hi - lo) / step))
    for i in range(400, 1001):
        eff = i / 1000
        for j in range(n + 1):
            x = lo + j * step
            e = worst(rs, eff, x, 0.0) if second == "overhead" else worst(rs, eff, overhead, x)
            if best is None or e < best[0]:
                best = (e, eff, x)
    return best


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        here, "..", "tests", "validation", "data", "h200-calibration.json")
    data = json.load(open(path))["nccl_two_gpus"]
    err, eff, overhead = fit(rows(data, "all_reduce"), "overhead", 0.0, 30e-6, 0.1e-6)
    print(f"all_reduce      efficiency {eff:.3f}  step overhead {overhead * 1e6:5.1f} us"
          f"  max error {err * 100:4.1f}%")
    overhead = round(overhead * 1e7) / 1e7
    # A single send's 16 MiB row (84 us with the 50 us launch inside) is faster than any
    # launch + transfer sum: the launch overlaps the copy there, so that fit starts at 64 MiB.
    for op, one_way, min_bytes in (("all_gather", False, MIN_BYTES),
                                   ("reduce_scatter", False, MIN_BYTES),
                                   ("send_recv", False, MIN_BYTES), ("send_recv", True, 64 << 20)):
        err, eff, base = fit(rows(data, op, one_way, min_bytes), "base", 0.0, 150e-6, 0.5e-6,
                             overhead)
        name = "send (one way)" if one_way else op
        print(f"{name:<15} efficiency {eff:.3f}  base latency {base * 1e6:5.1f} us"
              f"  max error {err * 100:4.1f}%")


if __name__ == "__main__":
    main()
