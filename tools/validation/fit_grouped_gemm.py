#!/usr/bin/env python3
"""Fits the grouped GEMM model's constants (RooflineCalibration::grouped_*, sim/workload/
roofline.hpp; docs/validation.md, "The grouped GEMM model") on the grouped_gemm rows of
tests/validation/data/h200-microbench.json and prints them with the fit's errors:

    tools/validation/fit_grouped_gemm.py

The model of one torch._grouped_mm call on an H200 (132 SMs, bf16 peak 989 TFLOP/s, HBM 4.8 TB/s):

    time = call + max(waves x (2 tm tn tk k_steps / (eff x peak / 132) + tile),
                      bytes / (hbm x 4.8 TB/s))

with the tiling PyTorch and CUTLASS choose (64 x 128 x 128 ping-pong tiles when an expert's
output has at most 128 rows or columns, 128 x 256 x 64 cooperative tiles otherwise; row tiles
rounded up to the 2 x 1 cluster; waves = ceil(tiles / 132)). Each row ran at its own SM clock:
as `clustersim validate` does, the model's time is divided by the tensor-core throughput at that
clock relative to 1980 MHz (0.5281 + 0.000230 x MHz). The fit minimises the mean squared log
error over the rows with at least 128 tokens per expert (at 64 the forward and dgrad run 0-24%
slower than at 128 for the same weights, which the model does not describe). Pure Python,
deterministic (Nelder-Mead from a fixed start); reads the data file only.
"""
import json
import math
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "validation", "data", "h200-microbench.json")
PEAK = 989e12
HBM = 4.8e12
SMS = 132
NAMES = ["call_us", "tile_us", "large_efficiency", "small_efficiency", "hbm_fraction"]
START = [7.0, 2.5, 0.8, 0.6, 0.8]


def clock(mhz):
    throughput = lambda c: 0.5281 + 0.000230 * c
    return throughput(mhz) / throughput(1980)


def problems():
    """One expert's GEMM per row, as the row's m, n, k give it (fwd and dgrad: tokens x n x k;
    wgrad: n x k reducing over the tokens)."""
    section = json.load(open(DATA))["sections"]["grouped_gemm"]
    out = []
    for r in section["rows"]:
        reduce = r["gemm"] == "wgrad"
        n, k = (r["m"], r["n"]) if reduce else (r["n"], r["k"])
        assert (r["k"] if reduce else r["m"]) == r["tpe"], r
        out.append(dict(experts=r["E"], tokens=r["tpe"], n=n, k=k, reduce=reduce,
                        mhz=r["sm_mhz"], seconds=r["ms"] * 1e-3, model=r["model"],
                        gemm=r["gemm"]))
    return out


def tiling(p):
    rows, cols, red = (p["n"], p["k"], p["tokens"]) if p["reduce"] else (p["tokens"], p["n"], p["k"])
    ping_pong = rows <= 128 or cols <= 128
    tm, tn, tk = (64, 128, 128) if ping_pong else (128, 256, 64)
    row_tiles = 2 * math.ceil(math.ceil(rows / tm) / 2)
    tiles = p["experts"] * row_tiles * math.ceil(cols / tn)
    return ping_pong, tm, tn, tk, math.ceil(tiles / SMS), math.ceil(red / tk)


def predict(p, c):
    call_us, tile_us, large, small, hbm = c
    ping_pong, tm, tn, tk, waves, k_steps = tiling(p)
    eff = small if ping_pong else large
    tile = 2 * tm * tn * tk * k_steps / (eff * PEAK / SMS) + tile_us * 1e-6
    rows = p["experts"] * p["tokens"]
    bytes_ = 2 * (rows * p["n"] + rows * p["k"] + p["experts"] * p["n"] * p["k"])
    return (call_us * 1e-6 + max(waves * tile, bytes_ / (hbm * HBM))) / clock(p["mhz"])


def nelder_mead(f, x0, iterations=3000):
    n = len(x0)
    pts = [list(x0)] + [[v * (1.2 if i == j else 1) for j, v in enumerate(x0)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        c = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        at = lambda t: [c[j] + t * (pts[-1][j] - c[j]) for j in range(n)]
        xr = at(-1)
        fr = f(xr)
        if fr < vals[0]:
            xe = at(-2)
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = at(0.5)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [[(a + b) / 2 for a, b in zip(pts[0], p)] for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    best = min(range(n + 1), key=lambda i: vals[i])
    return pts[best], vals[best]


def main():
    every = problems()
    fitted = [p for p in every if p["tokens"] >= 128]

    def loss(c):
        if min(c) <= 0 or max(c[2:]) > 1.2:
            return 1e9
        return sum(math.log(predict(p, c) / p["seconds"]) ** 2 for p in fitted) / len(fitted)

    c, v = nelder_mead(loss, START)
    for _ in range(2):
        c, v = nelder_mead(loss, c)
    for name, value in zip(NAMES, c):
        print("%-18s %.4g" % (name, value))
    print("rms log error over the %d fitted rows: %.4f" % (len(fitted), math.sqrt(v)))
    for label, rows in (("tokens >= 128", fitted),
                        ("tokens = 64", [p for p in every if p["tokens"] < 128])):
        errors = [predict(p, c) / p["seconds"] - 1 for p in rows]
        print("%-14s %3d rows: %3d within 10%%, mean |error| %.1f%%, mean %+.1f%%"
              % (label, len(rows), sum(abs(e) <= 0.1 for e in errors),
                 100 * sum(map(abs, errors)) / len(errors), 100 * sum(errors) / len(errors)))
    # The fitted rows' mean error grouped by each input: a trend the model leaves shows here.
    groups = (("tokens", lambda p: p["tokens"]), ("experts", lambda p: p["experts"]),
              ("model", lambda p: p["model"]), ("gemm", lambda p: p["gemm"]),
              ("k steps", lambda p: tiling(p)[5]),
              ("clock", lambda p: "<1600" if p["mhz"] < 1600 else
               "<1900" if p["mhz"] < 1900 else ">=1900"))
    for name, key in groups:
        errors = {}
        for p in fitted:
            errors.setdefault(key(p), []).append(predict(p, c) / p["seconds"] - 1)
        print("mean error by %-8s %s" % (name, ", ".join(
            "%s %+.1f%%" % (g, 100 * sum(e) / len(e)) for g, e in sorted(errors.items()))))


if __name__ == "__main__":
    main()
