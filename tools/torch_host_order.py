#!/usr/bin/env python3
"""The host actions of torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B on the 2 x H200
pipeline runs (tests/validation/data/h200-pipeline-runtime.json), replayed with a host thread, a
compute stream and an NCCL stream per rank: an analysis behind docs/validation.md ("GPipe against
1F1B at m = 2"), not part of the simulator.

Each rank's list follows `_step_microbatches` of torch/distributed/pipelining/schedules.py
(PyTorch 2.x, the version of the data: 2.11): `P` posts one batch_isend_irecv (one NCCL group;
torch's coalescing manager), `W` is a `wait()` on an earlier batch, `F`/`B` a forward/backward
pass (forward_one_chunk, backward_one_chunk), `L` the last stage's loss, `S` the gradient scaling
of perform_reduce_grad after the last backward (a div_ per parameter).

Semantics (every time in ms):
* the host runs the list in order; a pass costs it H (issuing its kernels), a batch `c`, the
  loss and the scaling as given; a pass on the GPU starts at max(compute stream free, every
  batch waited so far, host start) and ends at max(start + G, host start + H): a host-bound pass
  ends when its last kernel is issued;
* a batch's NCCL kernel starts after the compute work posted before it (ProcessGroupNCCL makes
  its stream wait on the current stream) and after the previous batch on the NCCL stream; a send
  and its receive complete together X after both have started; a batch ends with its last op;
* `wait()` makes the compute stream wait for the batch (ProcessGroupNCCL's default); with
  --blocking it also blocks the host until the batch is done (TORCH_NCCL_BLOCKING_WAIT).

Costs (assumptions, each swept at the end): H and G per pass from the data (the measured stage
times, or the kernel sums of h200-kernels.json for G under a host-bound host), c = 0.05 ms per
batch_isend_irecv call, the loss 0.02 ms (fp32 mean of squares of 4 Mi elements), the scaling
0.25 ms (div_ over 403 MB of bf16 gradients, 48 kernels).

Usage: tools/torch_host_order.py   (Python 3 standard library only)
"""
import json
import os

P = 2
# One 8 MiB NCCL send/recv (or the fused sendrecv) on the NVLink pair, ms: docs/network.md's
# 2-GPU fits give a sendrecv 77 us + 8 MiB / (0.701 x 450 GB/s) = 0.10 ms, a single send
# about 0.03 ms; the larger figure for both (the sweep in main() covers 0.03-0.3).
X = 0.10


def gpipe(rank, m):
    first, last = rank == 0, rank == P - 1
    out, sends, nb = [], [], [0]

    def post(ops):
        nb[0] += 1
        out.append(('P', nb[0], ops))
        return nb[0]

    for i in range(m):
        if not first:
            out.append(('W', post([('RF', rank, i)])))
        out.append(('F', rank, i))
        if not last:
            sends.append(post([('SF', rank, i)]))
        if last:
            out.append(('L', rank, i))
    for b in sends:
        out.append(('W', b))
    sends = []
    for i in range(m):
        if not last:
            out.append(('W', post([('RB', rank, i)])))
        out.append(('B', rank, i))
        if not first:
            sends.append(post([('SB', rank, i)]))
    for b in sends:
        out.append(('W', b))
    out.append(('S', rank, None))
    return out


def onef1b(rank, m):
    first, last = rank == 0, rank == P - 1
    out, nb = [], [0]

    def post(ops):
        if not ops:
            return None
        nb[0] += 1
        out.append(('P', nb[0], ops))
        return nb[0]

    def wait(b):
        if b is not None:
            out.append(('W', b))

    rf = lambda i: [] if first else [('RF', rank, i)]
    sf = lambda i: [] if last else [('SF', rank, i)]
    rb = lambda i: [] if last else [('RB', rank, i)]
    sb = lambda i: [] if first else [('SB', rank, i)]
    warm = min(m, P - rank)
    f = b = 0
    send, fwd_sends = None, []
    for _ in range(warm):
        wait(post(rf(f)))
        out.append(('F', rank, f))
        wait(send)
        send = None
        fwd_sends = sf(f)
        if f != warm - 1:
            send = post(fwd_sends)
        if last:
            out.append(('L', rank, f))
        f += 1
    while True:
        wait(post(fwd_sends + rb(b)))
        out.append(('B', rank, b))
        bwd_sends = sb(b)
        b += 1
        if f == m:
            break
        wait(post(bwd_sends + rf(f)))
        out.append(('F', rank, f))
        if last:
            out.append(('L', rank, f))
        fwd_sends = sf(f)
        f += 1
    send = post(bwd_sends)
    while b < m:
        wait(post(rb(b)))
        out.append(('B', rank, b))
        wait(send)
        send = post(sb(b))
        b += 1
    wait(send)
    out.append(('S', rank, None))
    return out


def _key(op):
    t, s, mb = op
    return {'SF': ('F', s, mb), 'RF': ('F', s - 1, mb),
            'SB': ('B', s, mb), 'RB': ('B', s + 1, mb)}[t]


def simulate(lists, cost, blocking):
    """cost: dict with HF, HB, GF, GB (host and GPU per pass), c (host per batch), L, S."""
    INF = float('inf')
    ptr = {r: 0 for r in lists}
    h = {r: 0.0 for r in lists}        # host clock
    cfree = {r: 0.0 for r in lists}    # compute stream: end of the work posted so far
    cwait = {r: 0.0 for r in lists}    # compute stream: end of the batches waited so far
    last = {r: None for r in lists}    # the rank's previous batch (its NCCL stream is in order)
    batches = {}                       # (rank, id) -> ops
    posted = {}                        # op key -> start of the first side posted
    done = {}                          # op key -> completion

    def end_of(r, bid):
        return max(done.get(_key(op), INF) for op in batches[(r, bid)])

    progress = True
    while progress:
        progress = False
        for r in lists:
            while ptr[r] < len(lists[r]):
                a = lists[r][ptr[r]]
                k = a[0]
                if k in ('F', 'B'):
                    H, G = (cost['HF'], cost['GF']) if k == 'F' else (cost['HB'], cost['GB'])
                    st = max(cfree[r], cwait[r], h[r])
                    cfree[r] = max(st + G, h[r] + H)
                    h[r] += H
                elif k in ('L', 'S'):
                    d = cost[k]
                    h[r] += d
                    cfree[r] = max(cfree[r], cwait[r], h[r]) + d
                elif k == 'P':
                    prev = 0.0 if last[r] is None else end_of(r, last[r])
                    if prev == INF:
                        break
                    _, bid, ops = a
                    st = max(prev, cfree[r], cwait[r], h[r])
                    h[r] += cost['c']
                    batches[(r, bid)] = ops
                    last[r] = bid
                    for op in ops:
                        key = _key(op)
                        if key in posted:
                            done[key] = max(st, posted.pop(key)) + X
                        else:
                            posted[key] = st
                else:  # 'W'
                    e = end_of(r, a[1])
                    if e == INF:
                        break
                    cwait[r] = max(cwait[r], e)
                    if blocking:
                        h[r] = max(h[r], e)
                ptr[r] += 1
                progress = True
    assert all(ptr[r] == len(lists[r]) for r in lists), ('deadlock', ptr)
    return max(max(cfree.values()), max(h.values()))


def show(lst):
    names = {'F': 'F', 'B': 'B', 'L': 'loss', 'S': 'scale_grads'}
    words = []
    for a in lst:
        if a[0] == 'P':
            words.append('post{' + ', '.join(f'{o[0]}{o[2]}' for o in a[2]) + '}#' + str(a[1]))
        elif a[0] == 'W':
            words.append(f'wait#{a[1]}')
        elif a[0] == 'S':
            words.append('scale_grads')
        else:
            words.append(f'{names[a[0]]}{a[2]}')
    return ' '.join(words)


def main():
    global X
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "tests/validation/data/h200-pipeline-runtime.json")) as f:
        data = json.load(f)
    cfg = data["config"]
    runs = {(r["torch_class"], r["microbatches"]): r for r in data["runs"]}
    F, B = cfg["stage_fwd_ms"], cfg["stage_bwd_ms"]
    for name, fn in (("ScheduleGPipe", gpipe), ("Schedule1F1B", onef1b)):
        for r in range(P):
            print(f"{name} m=2 rank {r}: {show(fn(r, 2))}")
    # Kernel sums of the stage's passes (h200-kernels.json, h = 2048 block: 0.3795 ms forward,
    # 1.3705 forward + backward, per layer; 4 layers), for a host-bound variant.
    kf, kb = 4 * 0.3795, 4 * (1.3705 - 0.3795)
    variants = [
        ("GPU-bound (G = stage times), host ahead", dict(HF=0, HB=0, GF=F, GB=B, c=0.05, L=0.02, S=0.25), False),
        ("host-bound (H = stage times, G = kernel sums)", dict(HF=F, HB=B, GF=kf, GB=kb, c=0.05, L=0.02, S=0.25), False),
        ("as above, blocking wait()", dict(HF=F, HB=B, GF=kf, GB=kb, c=0.05, L=0.02, S=0.25), True),
        ("GPU-bound, blocking wait()", dict(HF=F, HB=B, GF=F, GB=B, c=0.05, L=0.02, S=0.25), True),
    ]
    print()
    print("| semantics | m | GPipe | 1F1B | 1F1B - GPipe | measured GPipe | measured 1F1B | measured 1F1B - GPipe |")
    print("|---|---|---|---|---|---|---|---|")
    for label, cost, blocking in variants:
        for m in (2, 4, 8, 16):
            g = simulate({r: gpipe(r, m) for r in range(P)}, cost, blocking)
            o = simulate({r: onef1b(r, m) for r in range(P)}, cost, blocking)
            mg = runs[("ScheduleGPipe", m)]["iteration_ms_median"]
            mo = runs[("Schedule1F1B", m)]["iteration_ms_median"]
            print(f"| {label} | {m} | {g:.2f} | {o:.2f} | {o - g:+.2f} | {mg:.2f} | {mo:.2f} | {mo - mg:+.2f} |")
    # Sensitivity at m = 2: X, c and the scaling swept, host ahead / host-bound / equal / host 10%
    # slower than the GPU, wait() blocking or not.
    worst, n = -float('inf'), 0
    for X in (0.03, 0.1, 0.3):
        for c in (0.0, 0.05, 0.2):
            for s in (0.0, 0.25, 0.5):
                for hf, hb, gf, gb in ((0, 0, F, B), (F, B, kf, kb), (F, B, F, B), (1.1 * F, 1.1 * B, F, B)):
                    for blocking in (False, True):
                        cost = dict(HF=hf, HB=hb, GF=gf, GB=gb, c=c, L=0.02, S=s)
                        g = simulate({r: gpipe(r, 2) for r in range(P)}, cost, blocking)
                        o = simulate({r: onef1b(r, 2) for r in range(P)}, cost, blocking)
                        worst, n = max(worst, o - g), n + 1
    print()
    print(f"m = 2, {n} settings: 1F1B - GPipe is at most {worst:+.2f} ms (measured +0.75)")


if __name__ == "__main__":
    main()
