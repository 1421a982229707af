#!/usr/bin/env python3
"""Draws a Chrome JSON trace written by `clustersim run --trace FILE.json` as an SVG timeline,
in the layout Perfetto shows: one row per thread track (grouped by process), slices with their
nested steps, flow arrows between dependent slices, link-utilisation counters as step charts and
the iteration markers. Flows are read in both trace-event forms: v2, the `X` event's own
`bind_id` with `flow_out` / `flow_in` (what clustersim writes, docs/traces.md), and v1 `s` / `t` /
`f` events, bound to the longest slice starting at their time. For docs and reports; open the trace itself in ui.perfetto.dev to explore.

    tools/trace_svg.py trace.json out.svg [--counters N] [--width PX] [--title TEXT]

Standard library only.
"""
import argparse
import html
import json
import re

COLORS = [
    (re.compile(r"^F\d+$"), "#4e79a7"),
    (re.compile(r"^B\d+$"), "#59a14f"),
    (re.compile(r"^W\d+$"), "#76b7b2"),
    (re.compile(r"^optimizer"), "#9c755f"),
    (re.compile(r"^send act"), "#f28e2b"),
    (re.compile(r"^recv act"), "#ffbe7d"),
    (re.compile(r"^send grad"), "#e15759"),
    (re.compile(r"^recv grad"), "#ff9d9a"),
    (re.compile(r"^dp "), "#b07aa1"),
    (re.compile(r"(all-reduce|all-gather|reduce-scatter|all-to-all)"), "#edc948"),
]


def color(name):
    for pattern, c in COLORS:
        if pattern.search(name):
            return c
    return "#bab0ac"


def us(v):
    return float(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("svg")
    ap.add_argument("--counters", type=int, default=6, help="busiest link counters to draw")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--title", default="")
    args = ap.parse_args()

    with open(args.trace) as f:
        doc = json.load(f)
    events = doc["traceEvents"]

    process_names, thread_names, thread_sort = {}, {}, {}
    slices, counters, instants = {}, {}, []
    flows, bound = {}, {}  # flow id -> v1 marks (s/t/f events), v2 marks (X events with bind_id)
    for e in events:
        ph = e["ph"]
        if ph == "M":
            if e["name"] == "process_name":
                process_names[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                thread_names[(e["pid"], e["tid"])] = e["args"]["name"]
            elif e["name"] == "thread_sort_index":
                thread_sort[(e["pid"], e["tid"])] = e["args"]["sort_index"]
        elif ph == "X":
            a, b, track = us(e["ts"]), us(e["ts"]) + us(e["dur"]), (e["pid"], e["tid"])
            slices.setdefault(track, []).append((a, b, e["name"]))
            if "bind_id" in e:
                # Flow v2: the slice itself is bound. Marks of one flow that start together are
                # ordered start (flow_out only), pass-throughs, end (flow_in only), then as written.
                out_, in_ = e.get("flow_out", False), e.get("flow_in", False)
                role = 1 if out_ and in_ else 0 if out_ else 2
                bound.setdefault(e["bind_id"], []).append((a, role, b, track))
        elif ph in "stf":
            flows.setdefault(e["id"], []).append((us(e["ts"]), (e["pid"], e["tid"])))
        elif ph == "C":
            key = (e["pid"], e["name"])
            (value,) = e["args"].values()
            counters.setdefault(key, []).append((us(e["ts"]), float(value)))
        elif ph == "i":
            instants.append((us(e["ts"]), e["name"]))

    rows = sorted((k for k in thread_names if k in slices),
                  key=lambda k: (k[0], thread_sort.get(k, 0)))
    busiest = sorted(counters, key=lambda k: -sum(v for _, v in counters[k]))[: args.counters]
    busiest.sort()
    t_end = max([t for t, _ in instants] + [b for s in slices.values() for _, b, _ in s] + [1.0])

    label_w, row_h, counter_h, top = 250, 22, 34, 50
    plot_w = args.width - label_w - 20
    x = lambda t: label_w + plot_w * t / t_end
    height = top + row_h * len(rows) + counter_h * len(busiest) + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{args.width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           '<defs><marker id="arrow" markerWidth="8" markerHeight="6" refX="8" refY="3" '
           'orient="auto"><path d="M0,0 L8,3 L0,6 z" fill="#333"/></marker></defs>',
           f'<rect width="{args.width}" height="{height}" fill="white"/>']
    if args.title:
        out.append(f'<text x="10" y="20" font-size="14" font-weight="bold">'
                   f'{html.escape(args.title)}</text>')

    # Time axis.
    step = 10 ** len(str(int(t_end / 8))) / 10 or 1
    while t_end / step > 10:
        step *= 2
    tick = 0.0
    while tick <= t_end:
        out.append(f'<line x1="{x(tick):.1f}" y1="{top - 6}" x2="{x(tick):.1f}" '
                   f'y2="{height - 40}" stroke="#eee"/>')
        out.append(f'<text x="{x(tick):.1f}" y="{top - 10}" text-anchor="middle" '
                   f'fill="#555">{tick / 1000:g} ms</text>')
        tick += step

    row_y, last_pid = {}, None
    for i, key in enumerate(rows):
        y = top + i * row_h
        row_y[key] = y
        if key[0] != last_pid:
            out.append(f'<line x1="0" y1="{y}" x2="{args.width}" y2="{y}" stroke="#999"/>')
            last_pid = key[0]
        label = f'{process_names.get(key[0], key[0])} · {thread_names[key]}'
        out.append(f'<text x="6" y="{y + 15}">{html.escape(label)}</text>')
        spans = sorted(slices[key], key=lambda s: (s[0], -s[1]))
        stack = []
        for a, b, name in spans:
            while stack and stack[-1] <= a:
                stack.pop()
            depth = min(len(stack), 1)
            stack.append(b)
            h = row_h - 4 if depth == 0 else (row_h - 4) / 2
            yy = y + 2 if depth == 0 else y + 2 + (row_h - 4) / 2
            fill = color(name)
            opacity = 1.0 if depth == 0 else 0.55
            w = max(x(b) - x(a), 0.5)
            out.append(f'<rect x="{x(a):.2f}" y="{yy:.1f}" width="{w:.2f}" height="{h:.1f}" '
                       f'fill="{fill}" fill-opacity="{opacity}" stroke="white" stroke-width="0.4">'
                       f'<title>{html.escape(name)} {a:.1f}-{b:.1f} us</title></rect>')
            if depth == 0 and w > 7 * len(name):
                out.append(f'<text x="{x(a) + 2:.1f}" y="{yy + 12:.1f}" fill="white">'
                           f'{html.escape(name)}</text>')

    # Flow arrows: from the end of the slice bound at one mark to the start of the next.
    def slice_at(track, ts):
        best = None
        for a, b, name in slices.get(track, []):
            if abs(a - ts) < 1e-6 and (best is None or b - a > best[1] - best[0]):
                best = (a, b)
        return best

    def arrow(k0, t0, k1, t1):
        if k0 in row_y and k1 in row_y:
            out.append(f'<line x1="{x(t0):.2f}" y1="{row_y[k0] + row_h / 2:.1f}" '
                       f'x2="{x(t1):.2f}" y2="{row_y[k1] + row_h / 2:.1f}" stroke="#333" '
                       f'stroke-width="0.7" marker-end="url(#arrow)"/>')

    for marks in flows.values():
        marks.sort(key=lambda m: m[0])
        for (t0, k0), (t1, k1) in zip(marks, marks[1:]):
            s0, s1 = slice_at(k0, t0), slice_at(k1, t1)
            if s0 and s1:
                arrow(k0, s0[1], k1, s1[0])
    for marks in bound.values():
        # Stable: a transfer's send and receive share their interval; the send is written first.
        marks.sort(key=lambda m: m[:2])
        for (_, _, end0, k0), (start1, _, _, k1) in zip(marks, marks[1:]):
            arrow(k0, end0, k1, start1)

    y0 = top + row_h * len(rows)
    for i, key in enumerate(busiest):
        y = y0 + i * counter_h
        label = f'{process_names.get(key[0], key[0])} · {key[1]} %'
        out.append(f'<text x="6" y="{y + 20}">{html.escape(label)}</text>')
        points, prev = [], 0.0
        for t, v in sorted(counters[key]):
            points += [(x(t), prev), (x(t), v)]
            prev = v
        points.append((x(t_end), prev))
        path = " ".join(f"{px:.2f},{y + counter_h - 4 - (counter_h - 8) * v / 100:.1f}"
                        for px, v in points)
        out.append(f'<polyline points="{x(0):.2f},{y + counter_h - 4} {path} '
                   f'{x(t_end):.2f},{y + counter_h - 4}" fill="#f28e2b" fill-opacity="0.35" '
                   f'stroke="#f28e2b"/>')

    for t, name in instants:
        if name == "summary":
            continue
        out.append(f'<line x1="{x(t):.1f}" y1="{top}" x2="{x(t):.1f}" y2="{height - 40}" '
                   f'stroke="#c00" stroke-dasharray="4,3"/>')
        out.append(f'<text x="{x(t):.1f}" y="{height - 26}" fill="#c00" '
                   f'text-anchor="{"start" if t == 0 else "end"}">{html.escape(name)}</text>')

    legend = [("forward", "#4e79a7"), ("backward", "#59a14f"), ("send act", "#f28e2b"),
              ("recv act", "#ffbe7d"), ("send grad", "#e15759"), ("recv grad", "#ff9d9a"),
              ("dp sync", "#b07aa1"), ("optimizer", "#9c755f"), ("step (nested)", "#bab0ac")]
    lx = label_w
    for name, c in legend:
        out.append(f'<rect x="{lx}" y="{height - 16}" width="10" height="10" fill="{c}"/>')
        out.append(f'<text x="{lx + 14}" y="{height - 7}">{name}</text>')
        lx += 24 + 7 * len(name)
    out.append("</svg>")
    with open(args.svg, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
