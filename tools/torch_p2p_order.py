#!/usr/bin/env python3
"""What an in-order NCCL p2p stream per rank costs torch.distributed.pipelining's schedules on the
2 x H200 pipeline runs (tests/validation/data/h200-pipeline-runtime.json), from the measured
stage and chunk times alone: an analysis behind docs/validation.md, not part of the simulator.

Model (every time in ms): a rank's passes run in order on its compute stream, each after its
input; its p2p operations run in the order torch posts them on one NCCL stream (one communicator
for the pipeline group), each after the previous one and after the compute posted before it; a
send and its receive move the tensor together once both have started (rendezvous), in X ms. Post
orders follow torch's source: ScheduleGPipe posts each receive right before its pass and each
send right after; Schedule1F1B fuses a send with the next receive in one batch (the ops of a
batch run together); the runtime schedules (interleaved) post sends after their pass and
receives where the lockstep lowering `_add_send_recv` puts them. Host work is left out.

Usage: tools/torch_p2p_order.py   (Python 3 standard library only)
"""
import json
import os

X = 0.03  # 8 MiB over NVLink (~300 GB/s), ms
P, V = 2, 2
F_T = B_T = 0.0  # set per schedule: a stage's (or chunk's) forward and backward, ms

def interleaved(rank, m):
    # Megatron-LM's (and torch's) interleaved order (m multiple of P): virtual-microbatch k -> (chunk, mb)
    total = m * V
    warm = min(total, (P - rank - 1) * 2 + (V - 1) * P)
    def fwd(k):
        grp = k // (P * V); r = k % (P * V)
        chunk = r // P; mb = grp * P + r % P
        return chunk, mb
    def bwd(k):
        chunk, mb = fwd(k); return V - 1 - chunk, mb
    ops = []
    for k in range(warm): c, mb = fwd(k); ops.append(('F', c * P + rank, mb))
    steady = total - warm
    for i in range(steady):
        c, mb = fwd(warm + i); ops.append(('F', c * P + rank, mb))
        c, mb = bwd(i); ops.append(('B', c * P + rank, mb))
    for i in range(steady, total):
        c, mb = bwd(i); ops.append(('B', c * P + rank, mb))
    return ops

def onef1b(rank, m):
    warm = min(m, P - rank - 1)
    ops = [('F', rank, i) for i in range(warm)]
    f = warm; b = 0
    while f < m:
        ops.append(('F', rank, f)); f += 1
        ops.append(('B', rank, b)); b += 1
    while b < m: ops.append(('B', rank, b)); b += 1
    return ops

def gpipe(rank, m):
    return [('F', rank, i) for i in range(m)] + [('B', rank, i) for i in range(m)]

def stage_rank(s): return s % P
def has_comm(a, ns):
    t, s, mb = a
    if t == 'F': return s != ns - 1 and stage_rank(s + 1) != stage_rank(s)
    return s != 0 and stage_rank(s - 1) != stage_rank(s)

def lower(orders, ns):
    # torch _add_send_recv: lockstep rounds; a compute is scheduled when its input is there.
    out = {r: [] for r in orders}; prev = {r: set() for r in orders}
    q = {r: list(o) for r, o in orders.items()}
    while any(q.values()):
        prog = False
        for r in sorted(q):
            if not q[r]: continue
            a = q[r][0]; t, s, mb = a
            ready = True
            if t == 'F' and s != 0:
                ready = ('RF', s, mb) in prev[r] or ('F', s - 1, mb) in prev[r]
            if t == 'B' and s != ns - 1:
                ready = ('RB', s, mb) in prev[r] or ('B', s + 1, mb) in prev[r]
            if not ready: continue
            out[r].append(a); prev[r].add(a)
            if has_comm(a, ns):
                send = ('SF' if t == 'F' else 'SB', s, mb)
                rs = s + 1 if t == 'F' else s - 1
                recv = ('RF' if t == 'F' else 'RB', rs, mb)
                out[r].append(send); prev[r].add(send)
                out[stage_rank(rs)].append(recv); prev[stage_rank(rs)].add(recv)
            q[r].pop(0); prog = True
        assert prog
    return out

def single_posts(orders, ns):
    # torch ScheduleGPipe: recv right before its consumer, send right after producer (each alone).
    out = {}
    for r, o in orders.items():
        l = []
        for a in o:
            t, s, mb = a
            if t == 'F' and s != 0 and stage_rank(s - 1) != r: l.append([('RF', s, mb)])
            if t == 'B' and s != ns - 1 and stage_rank(s + 1) != r: l.append([('RB', s, mb)])
            l.append(a)
            if has_comm(a, ns): l.append([('SF' if t == 'F' else 'SB', s, mb)])
        out[r] = l
    return out

def torch_1f1b_posts(m):
    out = {}
    for r in range(P):
        l = []
        first, last = r == 0, r == P - 1
        rf = lambda i: [] if first else [('RF', r, i)]
        sf = lambda i: [] if last else [('SF', r, i)]
        rb = lambda i: [] if last else [('RB', r, i)]
        sb = lambda i: [] if first else [('SB', r, i)]
        warm = min(m, P - r)
        f = b = 0; fwd_sends = []
        for _ in range(warm):
            if rf(f): l.append(rf(f))
            l.append(('F', r, f))
            fwd_sends = sf(f)
            if f != warm - 1 and fwd_sends: l.append(fwd_sends); fwd_sends = []
            f += 1
        while True:
            g = fwd_sends + rb(b)
            if g: l.append(g)
            l.append(('B', r, b)); bwd_sends = sb(b); b += 1
            if f == m: break
            g = bwd_sends + rf(f)
            if g: l.append(g)
            l.append(('F', r, f)); fwd_sends = sf(f); f += 1
        if bwd_sends: l.append(bwd_sends)
        while b < m:
            if rb(b): l.append(rb(b))
            l.append(('B', r, b))
            if sb(b): l.append(sb(b))
            b += 1
        out[r] = l
    return out

def lowered_groups(low):
    return {r: [[a] if a[0] not in ('F', 'B') else a for a in l] for r, l in low.items()}

def simulate(posts, ns):
    INF = float('inf')
    comp_end = {}; ptr = {r: 0 for r in posts}
    cfree = {r: 0.0 for r in posts}; nfree = {r: 0.0 for r in posts}; last_comp = {r: 0.0 for r in posts}
    started = {}; done = {}; pending = {}
    def key(op):
        t = op[0]
        if t == 'SF': return ('F', op[1], op[2])
        if t == 'SB': return ('B', op[1], op[2])
        if t == 'RF': return ('F', op[1] - 1, op[2])
        return ('B', op[1] + 1, op[2])
    changed = True
    while changed:
        changed = False
        for r in posts:
            while ptr[r] < len(posts[r]):
                op = posts[r][ptr[r]]
                if isinstance(op, tuple):
                    t, s, mb = op; dep = 0.0
                    if t == 'F' and s != 0:
                        k = ('F', s - 1, mb)
                        dep = comp_end.get(k, INF) if stage_rank(s - 1) == r else done.get(('recv', k), INF)
                    if t == 'B' and s != ns - 1:
                        k = ('B', s + 1, mb)
                        dep = comp_end.get(k, INF) if stage_rank(s + 1) == r else done.get(('recv', k), INF)
                    if dep == INF: break
                    st = max(cfree[r], dep); en = st + (F_T if t == 'F' else B_T)
                    comp_end[op] = en; cfree[r] = en; last_comp[r] = en
                    ptr[r] += 1; changed = True
                    continue
                gid = (r, ptr[r])
                if gid not in started:
                    st = max(nfree[r], last_comp[r]); started[gid] = st
                    for o in op:
                        k = key(o); side = 'recv' if o[0][0] == 'R' else 'send'
                        peer = pending.get(k)
                        if peer and peer[0] != r:
                            en = max(st, peer[1]) + X
                            done[('recv', k)] = en; done[('send', k)] = en; del pending[k]
                        else:
                            pending[k] = (r, st)
                    changed = True
                ends = [done.get(('recv' if o[0][0] == 'R' else 'send', key(o)), INF) for o in op]
                if max(ends) == INF: break
                nfree[r] = max(ends); ptr[r] += 1; changed = True
    assert all(ptr[r] == len(posts[r]) for r in posts), ('deadlock', ptr)
    return max(cfree.values())


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "tests/validation/data/h200-pipeline-runtime.json")) as f:
        data = json.load(f)
    cfg = data["config"]
    measured = {(r["torch_class"], r["microbatches"]): r["iteration_ms_median"] for r in data["runs"]}
    global F_T, B_T
    print("| m | GPipe model / measured | 1F1B model / measured | interleaved model / measured | interleaved without ordering |")
    print("|---|---|---|---|---|")
    for m in (2, 4, 8, 16):
        F_T, B_T = cfg["stage_fwd_ms"], cfg["stage_bwd_ms"]
        gp = simulate(single_posts({r: gpipe(r, m) for r in range(P)}, P), P)
        ob = simulate(torch_1f1b_posts(m), P)
        F_T, B_T = cfg["chunk_fwd_ms"], cfg["chunk_bwd_ms"]
        orders = {r: interleaved(r, m) for r in range(P)}
        il = simulate(lowered_groups(lower(orders, P * V)), P * V)
        free = (V * m + P - 1) * (F_T + B_T)
        print(f"| {m} | {gp:.2f} / {measured[('ScheduleGPipe', m)]:.2f} | "
              f"{ob:.2f} / {measured[('Schedule1F1B', m)]:.2f} | "
              f"{il:.2f} / {measured[('ScheduleInterleaved1F1B', m)]:.2f} | {free:.2f} |")


if __name__ == "__main__":
    main()
