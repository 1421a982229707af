#!/usr/bin/env python3
"""Fits the fp8 GEMM constants per scaling recipe (GemmCurve::fp8_tensorwise, fp8_rowwise,
fp8_blockwise in sim/topology/cluster.hpp; docs/compute-model.md, "FP8 GEMMs") on the fp8_gemm
rows of tests/validation/data/h200-microbench.json and prints them with the fit's errors:

    tools/validation/fit_fp8_gemm.py

Each measured case is one shape (M x N x K) timed under each recipe with torch._scaled_mm. The
model of an fp8 GEMM is the model's own bf16 GEMM of the same shape (the Hopper GEMM curve of
docs/compute-model.md: 0.825 x f(M) f(N) f(K) of the 989.4 TFLOP/s bf16 peak, f(x) = x^2.5 /
(x^2.5 + 600^2.5)) sped up by a factor, plus a cost per output element that does not shrink with
K (applying the row or block scales to the accumulators, once per output):

    t_fp8 = t_bf16_model / speedup + per_output x M x N

The constants are fitted against the model's curve, not against the measured bf16 time of the
same shape, because the curve is what they multiply (a fit on the measured bf16/fp8 pairs leaves
the curve's own error at each shape in the prediction: 95-96 of 99 within 10% against 98-99).
Every row ran at its own SM clock; as `clustersim validate` does, each time is brought to 1980
MHz by the tensor-core throughput at its clock (0.5281 + 0.000230 x MHz, relative to 1980 MHz).
The two constants of a recipe are the linear least-squares fit of the relative error over its 99
shapes (minimise the sum of ((t_bf16_model a + M N c) / t_fp8 - 1)^2 over a = 1 / speedup and
c). Pure Python, deterministic; reads the data file only.
"""
import json
import math
import os
import statistics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "validation", "data", "h200-microbench.json")
PEAK = 989.4e12  # H200 SXM bf16 dense peak
CURVE = (0.825, 600.0, 2.5)  # the Hopper GEMM curve: cap, x0, p (topology catalogue)
RECIPES = [("tensorwise", "fp8_tensorwise"), ("rowwise", "fp8_rowwise"),
           ("blockwise", "fp8_blockwise_1x128_128x128")]


def clock(mhz):
    throughput = lambda c: 0.5281 + 0.000230 * c
    return throughput(mhz) / throughput(1980)


def bf16_model(m, n, k):
    """The model's bf16 GEMM time at burst clocks (compute-bound: these shapes all are)."""
    cap, x0, p = CURVE
    f = lambda x: f(512) * x / 512 if x < 512 else x ** p / (x ** p + x0 ** p)
    return 2.0 * m * n * k / (PEAK * cap * f(m) * f(n) * f(k))


def cases():
    """{(shape, h, tp, M, N, K): {variant: seconds at 1980 MHz}}, one entry per measured shape."""
    out = {}
    for r in json.load(open(DATA))["sections"]["fp8_gemm"]["rows"]:
        key = (r["shape"], r["h"], r["tp"], r["M"], r["N"], r["K"])
        out.setdefault(key, {})[r["variant"]] = r["ms"] * 1e-3 * clock(r["sm_mhz"])
    return out


def fit(points):
    """Least squares of (b a + mn c) / f = 1 over (b, mn, f): the 2 x 2 normal equations."""
    x = [(b / f, mn / f) for b, mn, f in points]
    s11 = sum(u * u for u, _ in x)
    s12 = sum(u * v for u, v in x)
    s22 = sum(v * v for _, v in x)
    t1 = sum(u for u, _ in x)
    t2 = sum(v for _, v in x)
    det = s11 * s22 - s12 * s12
    return (t1 * s22 - t2 * s12) / det, (s11 * t2 - s12 * t1) / det


def main():
    shapes = cases()
    rms = lambda e: math.sqrt(sum(v * v for v in e) / len(e))
    for name, variant in RECIPES:
        points = [(bf16_model(*key[3:]), key[3] * key[4], v[variant])
                  for key, v in sorted(shapes.items(), key=lambda kv: tuple(map(str, kv[0])))
                  if variant in v]
        a, c = fit(points)
        errors = [(b * a + mn * c) / f - 1 for b, mn, f in points]
        print("%-10s %d shapes: speedup %.3f, per output %.3f ps; rms error %.1f%%, worst %.1f%%, "
              "%d within 10%%" % (name, len(points), 1 / a, c * 1e12, 100 * rms(errors),
                                  100 * max(map(abs, errors)), sum(abs(e) < 0.1 for e in errors)))
        a = 1 / statistics.median(b / f for b, _, f in points)
        errors = [b * a / f - 1 for b, _, f in points]
        print("%-10s a speedup alone (the median, %.3f): rms error %.1f%%, worst %.1f%%, "
              "%d within 10%%" % ("", 1 / a, 100 * rms(errors), 100 * max(map(abs, errors)),
                                  sum(abs(e) < 0.1 for e in errors)))

if __name__ == "__main__":
    main()
