#!/usr/bin/env python3
"""Checks tools/torch_host_order.py, the replay behind docs/validation.md's "GPipe against 1F1B
at m = 2": its per-rank host actions against torch.distributed.pipelining's source, and its
iteration times against closed forms derived by hand.

Usage: torch_host_order_test.py   (exit 0 on success; Python 3 standard library only)
"""
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location(
    "torch_host_order", os.path.join(ROOT, "tools", "torch_host_order.py"))
tho = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tho)

failures = []


def check(what, got, want):
    if got != want:
        failures.append(f"{what}:\n  got  {got}\n  want {want}")


def near(what, got, want, tol=1e-9):
    if abs(got - want) > tol:
        failures.append(f"{what}: got {got!r}, want {want!r}")


# The host actions of ScheduleGPipe._step_microbatches and Schedule1F1B._step_microbatches at
# p = 2, m = 2, read off torch/distributed/pipelining/schedules.py: GPipe posts every receive
# alone right before its pass and waits for it, every send alone right after its pass, and waits
# for the sends at the end of each phase; 1F1B warms stage 0 up with p = 2 forwards, keeps the
# last warm-up send back to fuse it with the first backward's receive, and fuses each backward's
# send with the next forward's receive.
check("GPipe rank 0", tho.show(tho.gpipe(0, 2)),
      "F0 post{SF0}#1 F1 post{SF1}#2 wait#1 wait#2 post{RB0}#3 wait#3 B0 post{RB1}#4 wait#4 B1 "
      "scale_grads")
check("GPipe rank 1", tho.show(tho.gpipe(1, 2)),
      "post{RF0}#1 wait#1 F0 loss0 post{RF1}#2 wait#2 F1 loss1 B0 post{SB0}#3 B1 post{SB1}#4 "
      "wait#3 wait#4 scale_grads")
check("1F1B rank 0", tho.show(tho.onef1b(0, 2)),
      "F0 post{SF0}#1 F1 wait#1 post{SF1, RB0}#2 wait#2 B0 post{RB1}#3 wait#3 B1 scale_grads")
check("1F1B rank 1", tho.show(tho.onef1b(1, 2)),
      "post{RF0}#1 wait#1 F0 loss0 B0 post{SB0, RF1}#2 wait#2 F1 loss1 B1 post{SB1}#3 wait#3 "
      "scale_grads")
# At m = 4 the 1F1B steady state alternates fused batches (B then F on stage 0).
check("1F1B rank 0, m = 4", tho.show(tho.onef1b(0, 4)),
      "F0 post{SF0}#1 F1 wait#1 post{SF1, RB0}#2 wait#2 B0 F2 post{SF2, RB1}#3 wait#3 B1 F3 "
      "post{SF3, RB2}#4 wait#4 B2 post{RB3}#5 wait#5 B3 scale_grads")

# Closed forms, host ahead (no host costs), passes F and B, transfer X, loss L, scaling S:
#   GPipe: rank 1 runs F0 (after X), the receive of F1 (X, after F0 and its loss), F1, B0, B1;
#   rank 0 runs B0 after B0's gradient (X) and posts the receive of B1's gradient after B0, so
#   that receive starts when its B0 ends, X after rank 1's B1: 3F + 3B + 4X + 2L + S.
#   1F1B: rank 1 runs F0 (after X), B0, the fused batch (X), F1, B1; rank 0's B0 ends before
#   rank 1's B1 does, so B1's gradient arrives X after rank 1's B1: 3F + 3B + 3X + 2L + S.
F, B, X, L, S = 1.5, 4.0, 0.125, 0.0625, 0.25
tho.X = X
cost = dict(HF=0.0, HB=0.0, GF=F, GB=B, c=0.0, L=L, S=S)
for blocking in (False, True):
    g = tho.simulate({r: tho.gpipe(r, 2) for r in range(2)}, cost, blocking)
    o = tho.simulate({r: tho.onef1b(r, 2) for r in range(2)}, cost, blocking)
    near(f"GPipe m = 2 (blocking {blocking})", g, 3 * F + 3 * B + 4 * X + 2 * L + S)
    near(f"1F1B m = 2 (blocking {blocking})", o, 3 * F + 3 * B + 3 * X + 2 * L + S)

# A host slower than the GPU sets the pace: with H = G + 1 per pass and no transfer, loss or
# scaling, rank 1's host issues F0 F1 B0 B1 back to back from 0 (4 passes, H each), so its B1
# ends at 2(F+1) + 2(B+1); rank 0's host has issued B1 by then (F0 F1 B0 B1 from 0 too), so its
# B1 runs at GPU speed from that gradient's arrival: GPipe ends at 2(F+1) + 2(B+1) + B.
tho.X = 0.0
cost = dict(HF=F + 1, HB=B + 1, GF=F, GB=B, c=0.0, L=0.0, S=0.0)
g = tho.simulate({r: tho.gpipe(r, 2) for r in range(2)}, cost, False)
near("GPipe m = 2, host-bound", g, 2 * (F + 1) + 2 * (B + 1) + B)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("torch_host_order: all checks passed")
