#!/usr/bin/env python3
"""The HTML report (`run --html`, `compare --html`, `sweep --html`) end to end.

Without a browser: each report is one self-contained file (no script, style sheet, image or font
fetched: no src= or href= at all, and no URL but the SVG namespace), byte-identical when made
twice, never left behind by a failed command. With Debian's chromium (installed by
tools/install-deps.sh; CI has it): the default experiment's report and a three-schedule compare
load headless and offline, print exactly one console line (the report's own "rendered" marker: a
script error or any other message fails), and their screenshots have the requested size and
non-empty plots (counted by colour, from the PNG decoded with zlib). The rendered pages (chromium
--dump-dom) are checked against --json: the time breakdowns (each part the JSON's fraction times
the iteration time, the parts adding up to it), the compare's marked winner (the JSON's fastest),
one time scale and one zoom across its timelines, the DP sync, optimizer and communication
tracks, the link view's ranking and utilisations (the JSON's `links`), one warnings block, and
the sweep's and plan's "copy as command" (run, they give the rows' iteration times). Without
chromium the browser
part is skipped with exit status 77 (ctest SKIP_RETURN_CODE) after the other checks passed.
UPDATE_SCREENSHOT=1 copies the default report's screenshot to docs/images/report-default.png.

Usage: html_report.py CLUSTERSIM_BINARY
"""
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from html.parser import HTMLParser
from itertools import accumulate

binary = os.path.abspath(sys.argv[1])
root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILE = os.path.join(root, "workloads", "h200-pipeline-profile.yaml")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def clustersim(*args):
    return subprocess.run([binary] + list(args), cwd=root, capture_output=True, text=True,
                          timeout=600)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def png_pixels(data):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    # Bytewise addition modulo 256 of whole rows as two big integers: even and odd bytes apart,
    # so that no carry crosses into a neighbouring byte that is kept.
    even = int.from_bytes(b"\x00\xff" * (stride // 2 + 1), "big") & ((1 << 8 * stride) - 1)
    odd = ((1 << 8 * stride) - 1) ^ even

    def add_rows(a, b):
        x, y = int.from_bytes(a, "big"), int.from_bytes(b, "big")
        return bytearray(((((x & even) + (y & even)) & even) |
                          (((x & odd) + (y & odd)) & odd)).to_bytes(stride, "big"))

    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for c in range(bpp):
                line[c::bpp] = bytes(accumulate(line[c::bpp], lambda a, b: (a + b) & 255))
        elif f == 2:
            line = add_rows(line, prev)
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def colour_counts(png, colours):
    """The screenshot's size, the pixels of each exact colour in `colours` (counted in each
    decoded row), and saturated pixels per 30-degree hue bucket (every 4th pixel of every 4th row,
    times 16)."""
    width, height, bpp, rows = png_pixels(png)
    exact = {c: sum(row.count(c) for row in rows) for c in colours}
    hues = {}
    for row in rows[::4]:
        for x in range(0, width * bpp, 4 * bpp):
            r, g, b = row[x:x + 3]
            hi, lo = max(r, g, b), min(r, g, b)
            if hi - lo < 60:  # grey, white, black: text and backgrounds
                continue
            if hi == r:
                h = (60 * (g - b) / (hi - lo)) % 360
            elif hi == g:
                h = 60 * (b - r) / (hi - lo) + 120
            else:
                h = 60 * (r - g) / (hi - lo) + 240
            hues[int(h // 30)] = hues.get(int(h // 30), 0) + 16
    return width, height, exact, hues


def browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def render(html, png, size):
    """Loads `html` in headless chromium, offline; returns its console lines."""
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run(
            [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--no-first-run", "--user-data-dir=" + profile, "--force-device-scale-factor=1",
             "--enable-logging=stderr", "--v=0", "--window-size=%d,%d" % size,
             "--screenshot=" + png, "file://" + html],
            capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and os.path.exists(png), "chromium failed: " + r.stderr[-2000:])
    return [l for l in r.stderr.splitlines() if ":CONSOLE" in l]


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, attrs, parent, [], ""

    def cls(self):
        return self.attrs.get("class", "").split()

    def all(self, pred):
        """This node's descendants for which pred(node) holds, in document order."""
        out = []
        for c in self.children:
            if pred(c):
                out.append(c)
            out.extend(c.all(pred))
        return out

    def text_all(self):
        return self.text + "".join(c.text_all() for c in self.children)


class DomParser(HTMLParser):
    """The rendered page (chromium --dump-dom) as a tree of Nodes."""
    VOID = {"meta", "br", "img", "input", "link", "hr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: (v or "") for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, {k: (v or "") for k, v in attrs}, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text += data


def dump_dom(path, fragment=""):
    """The page at `path` after its script ran, parsed (headless chromium, offline)."""
    with tempfile.TemporaryDirectory() as profile:
        text = subprocess.run(
            [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--user-data-dir=" + profile, "--dump-dom", "file://" + path + fragment],
            capture_output=True, text=True, timeout=120).stdout
    p = DomParser()
    p.feed(text)
    return text, p.root


def has_class(name):
    return lambda n: name in n.cls()


def close(a, b, rel=1e-12):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def check_breakdown(bar, o, T, name):
    """A stacked bar (g.bar) against the summary's fractions `o` of an iteration of T seconds:
    every part is its fraction times T, and the parts add up to T."""
    parts = {r.attrs["data-part"]: float(r.attrs["data-s"]) for r in bar.all(has_class("part"))}
    check(close(float(bar.attrs["data-t"]), T), "%s: the bar's time %s, not %r" % (
        name, bar.attrs["data-t"], T))
    expected = {"compute": (1 - o["idle_fraction"]) * T, "bubble": o["bubble_fraction"] * T,
                "host": o["host_fraction"] * T}
    for k in ("tp", "cp", "ep", "dp", "pipeline"):
        expected["exposed " + k] = o["exposed_%s_fraction" % k] * T
    for k, v in expected.items():
        check(k in parts and close(parts[k], v, 1e-12),
              "%s: %s is %s, the JSON gives %r" % (name, k, parts.get(k), v))
    check(close(sum(parts.values()), T, 1e-9),
          "%s: the parts add up to %r, not the iteration's %r" % (name, sum(parts.values()), T))
    # What the named parts leave is the rounding of the fractions, nothing the page hides.
    check(abs(parts.get("other", 0)) <= 1e-6 * T, "%s: %r s not accounted for" % (
        name, parts.get("other")))


def run_copied(command, name):
    """Runs a "copy as command" (its clustersim replaced by the binary under test) with --json;
    returns its summary."""
    words = shlex.split(command)
    check(words[:2] == ["clustersim", "run"], name + ": command " + command)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "copied.json")
        r = clustersim(*words[1:], "--json", out)
        check(r.returncode == 0, name + ": the copied command failed: " + r.stderr)
        return json.loads(read(out)) if r.returncode == 0 else None


chrome = browser()
with tempfile.TemporaryDirectory() as tmp:
    default_html = os.path.join(tmp, "default.html")
    compare_html = os.path.join(tmp, "compare.html")
    sweep_html = os.path.join(tmp, "sweep.html")
    plan_html = os.path.join(tmp, "plan.html")
    default_json = os.path.join(tmp, "default.json")
    r = clustersim("run", "--html", default_html, "--json", default_json)
    check(r.returncode == 0, "run --html: " + r.stderr)
    default_console = r.stdout
    # Three schedules on the two-GPU profile pipeline (it sets vpp = 2 for interleaved).
    compare_args = ["compare", PROFILE, "--schedules", "gpipe,1f1b,interleaved",
                    "--set", "parallelism.vpp=2"]
    compare_json = os.path.join(tmp, "compare.json")
    r = clustersim(*compare_args, "--html", compare_html, "--json", compare_json)
    check(r.returncode == 0, "compare --html: " + r.stderr)
    # A run that warns: the profile pipeline with 16x the micro-batch size needs more memory per
    # stage than an H200 has.
    warn_html = os.path.join(tmp, "warn.html")
    warn_args = ["compare", PROFILE, "--schedules", "gpipe,1f1b", "--set",
                 "training.micro_batch_size=64", "--set", "training.global_batch_size=512"]
    r = clustersim(*warn_args, "--html", warn_html)
    check(r.returncode == 0, "compare --html (warnings): " + r.stderr)
    warned = [re.sub(r"^.*?warning:\s*", "", l) for l in r.stderr.splitlines()
              if "warning:" in l]
    sweep_args = ["sweep", PROFILE, "--vary", "training.global_batch_size=4,8,16",
                  "--vary", "schedule=gpipe,1f1b"]
    r = clustersim(*sweep_args, "--html", sweep_html)
    check(r.returncode == 0, "sweep --html: " + r.stderr)
    # plan's page: the planner's small test space (8 GPUs, 4,200 layouts, a second).
    plan_args = ["plan", os.path.join(root, "tests", "api", "data", "plan-small.yaml"),
                 "--set", "topology.nodes=2", "--headroom", "0.98", "--top", "3"]
    plan_json = os.path.join(tmp, "plan.json")
    r = clustersim(*plan_args, "--html", plan_html, "--json", plan_json)
    check(r.returncode == 0, "plan --html: " + r.stderr)

    for path in (default_html, compare_html, sweep_html, plan_html):
        text = read(path).decode("ascii")
        name = os.path.basename(path)
        check(text.startswith("<!DOCTYPE html>"), name + ": not an HTML document")
        # Self-contained: nothing to fetch. The only URL is the SVG namespace, an identifier.
        urls = set(re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[a-z]{2,}[^\s\"')]*", text))
        check(urls <= {"http://www.w3.org/2000/svg", "//www.w3.org/2000/svg"},
              name + ": references " + ", ".join(sorted(urls)))
        check(not re.search(r"\s(src|href)\s*=", text), name + ": has src= or href=")
        check(tmp not in text, name + ": names the output folder")
    check('"validation"' in read(default_html).decode() and '"families"' in read(
        default_html).decode(), "run --html: no validation section")
    check('"sweep"' in read(sweep_html).decode(), "sweep --html: no sweep data")

    # The sweep page's figures are --json's: run the sweep again with both, then compare every
    # combination's headline figures in the page's embedded data (once made without --json, which
    # keeps no summaries: the page read as "0 simulated, 6 not valid") with the JSON file's.
    def page_data(path):
        text = read(path).decode("ascii")
        start = text.index('<script type="application/json" id="data">') + 42
        return json.loads(text[start:text.index("</script>", start)])

    sweep_json = os.path.join(tmp, "sweep.json")
    r = clustersim(*sweep_args, "--json", sweep_json)
    check(r.returncode == 0, "sweep --json: " + r.stderr)
    listed = json.loads(read(sweep_json))
    headline = ("tokens_per_s", "iteration_time_s", "mfu", "bubble_fraction",
                "exposed_comm_fraction")
    def figures(rows):
        return {tuple(sorted(row["settings"].items())):
                (tuple(row["summary"][k] for k in headline),
                 row["summary"]["memory_per_gpu_bytes"]["total"]) if "summary" in row else
                row["error"] for row in rows}
    shown = page_data(sweep_html)["sweep"]["rows"]
    check(sum("summary" in row for row in shown) == 6,
          "sweep --html: %d of 6 combinations shown as simulated" %
          sum("summary" in row for row in shown))
    check(figures(shown) == figures(listed),
          "sweep --html: the page's figures differ from --json's")

    # The plan page's top k and points are --json's: the same layouts and iteration times, one
    # point per simulated layout, and the Pareto front non-dominated.
    shown = page_data(plan_html)["plan"]
    listed = json.loads(read(plan_json))
    check([t["figures"]["iteration_time_s"] for t in shown["top"]] ==
          [t["figures"]["iteration_time_s"] for t in listed["top"]],
          "plan --html: the page's top differs from --json's")
    simulated = [e for e in listed["layouts_evaluated"] if e["status"] in ("simulated", "confirmed")]
    check(len(shown["points"]) == len(simulated),
          "plan --html: %d points for %d simulated layouts" % (len(shown["points"]), len(simulated)))
    points = shown["points"]
    for i in shown["pareto"]:
        m, t = points[i][0], points[i][1]
        check(not any(q[0] <= m and q[1] < t for q in points),
              "plan --html: Pareto point %d is dominated" % i)
    r = clustersim(*plan_args, "--html", again_plan := os.path.join(tmp, "again-plan.html"))
    check(r.returncode == 0 and read(again_plan) == read(plan_html),
          "plan --html twice: the files differ")

    # Deterministic: the same compare again gives the same bytes.
    again = os.path.join(tmp, "again.html")
    r = clustersim(*compare_args, "--html", again)
    check(r.returncode == 0 and read(again) == read(compare_html),
          "compare --html twice: the files differ")

    # A sweep's report leaves out the wall-clock time of its runs: the same bytes again.
    r = clustersim(*sweep_args, "--html", again)
    check(r.returncode == 0 and read(again) == read(sweep_html),
          "sweep --html twice: the files differ")

    # A failed command leaves the existing report untouched (exit 2: bad input).
    before = read(compare_html)
    r = clustersim("compare", PROFILE, "--schedules", "gpipe,zigzag", "--html", compare_html)
    check(r.returncode == 2 and read(compare_html) == before,
          "a failed compare --html changed the existing report (exit %d)" % r.returncode)
    missing = os.path.join(tmp, "no-such-folder", "r.html")
    r = clustersim("run", PROFILE, "--html", missing)
    check(r.returncode == 2 and "--html" in r.stderr and not os.path.exists(missing),
          "--html into a missing folder: exit %d, %s" % (r.returncode, r.stderr.strip()))

    if chrome is None:
        print("html_report: chromium not found; the browser checks are skipped")
        sys.exit(1 if failures else 77)

    # One unit convention, the console's: the page shows the memory per GPU as `run` prints it
    # (it once showed 37.40 GiB for the console's 40.16 GB).
    memory = re.search(r"^memory per GPU\s+(\S+ [KMGT]?B)", default_console, re.M)
    check(memory is not None, "run: no memory per GPU line in\n" + default_console)
    if memory:
        with tempfile.TemporaryDirectory() as profile:
            dom = subprocess.run(
                [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--user-data-dir=" + profile, "--dump-dom", "file://" + default_html],
                capture_output=True, text=True, timeout=120).stdout
        check(memory.group(1) in dom, "run --html: the page does not show the console's memory "
              "per GPU, " + memory.group(1))

    # The run page's content against run --json.
    summary = json.loads(read(default_json))
    T = summary["iteration_time_s"]
    dom_text, dom = dump_dom(default_html)
    # The iteration time as the console prints it (one unit convention).
    shown = re.search(r"^iteration time\s+(\S+ [mun]?s)$", default_console, re.M)
    check(shown is not None and shown.group(1) in dom_text,
          "run --html: the page does not show the console's iteration time")
    # The time breakdown: the whole iteration, then each stage, each part the JSON's fraction
    # times the iteration time, the parts adding up to it.
    bars = dom.all(has_class("bar"))
    check(len(bars) == 1 + len(summary["stages"]), "run --html: %d breakdown bars for %d stages" % (
        len(bars), len(summary["stages"])))
    if bars:
        check_breakdown(bars[0], summary, T, "run --html breakdown")
    for bar, stage in zip(bars[1:], summary["stages"]):
        check_breakdown(bar, stage, T, "run --html breakdown of stage %d" % stage["stage"])
    # The timeline's tracks: per stage, DP sync and the optimizer step (the default has dp 4 and
    # an optimizer step), TP communication; every block of the page's data drawn at full zoom.
    data = page_data(default_html)["runs"][0]["timeline"]
    for track, cls in ((0, "comm"), (1, "dp-sync"), (2, "optimizer")):
        blocks = [b for b in data["tracks"] if b[1] == track]
        rects = dom.all(lambda n, cls=cls: n.tag == "rect" and "trk" in n.cls() and cls in n.cls())
        check(len(blocks) > 0 and len(rects) == len(blocks),
              "run --html: %d %s blocks drawn of %d" % (len(rects), cls, len(blocks)))
        check(all(0 <= b[3] <= b[4] <= T for b in blocks), "run --html: %s outside the iteration" % cls)
        rows = {b[0] for b in blocks}
        check(rows == set(range(len(summary["stages"]))),
              "run --html: %s on stages %s only" % (cls, sorted(rows)))
    check(any("tp" in n.cls() for n in dom.all(has_class("trk"))), "run --html: no TP communication")
    legend = " ".join(n.text_all() for n in dom.all(has_class("legend")))
    for word in ("forward", "backward", "DP sync", "optimizer", "tp comm", "pipeline comm"):
        check(word in legend, "run --html: the legend lacks " + word)
    # The link view: its busiest link is the one `run` lists first, with the same utilisation;
    # per kind, the number of links and their mean utilisation are the JSON's.
    rows = dom.all(has_class("link-row"))
    check(rows and rows[0].attrs["data-name"] == summary["links"][0]["name"] and
          float(rows[0].attrs["data-mean"]) == summary["links"][0]["utilization"],
          "run --html: the link view's busiest link is not --json's %s" % summary["links"][0]["name"])
    check([n.attrs["data-name"] for n in rows] ==
          [l["name"] for l in summary["links"][:len(rows)]],
          "run --html: the link view's ranking differs from --json's")
    for g in dom.all(has_class("link-kind")):
        same = [l for l in summary["links"] if l["kind"] == g.attrs["data-kind"]]
        check(same and g.attrs["data-busiest"] == same[0]["name"] and
              close(float(g.attrs["data-mean"]), sum(l["utilization"] for l in same) / len(same), 1e-9),
              "run --html: link kind %s against --json" % g.attrs["data-kind"])
        check(float(g.attrs["data-peak"]) >= float(g.attrs["data-busiest-mean"]) * 0.99,
              "run --html: %s peaks below its busiest link's mean" % g.attrs["data-kind"])
    check(len(dom.all(has_class("link-kind"))) == len({l["kind"] for l in summary["links"]}),
          "run --html: not one row per link kind")

    # The compare page: the winner is the fastest schedule of --json; one time scale (each
    # timeline's last pass ends at its iteration time's share of the longest); zoomed at a
    # fragment, every timeline shows the same time axis.
    listed = json.loads(read(compare_json))
    times = [s["iteration_time_s"] for s in listed]
    winner = listed[times.index(min(times))]["schedule"]
    _, dom = dump_dom(compare_html)
    section = dom.all(lambda n: n.attrs.get("id") == "comparison")
    check(section and section[0].attrs.get("data-winner") == winner,
          "compare --html: winner %s, the JSON's fastest is %s" % (
              section and section[0].attrs.get("data-winner"), winner))
    rows = dom.all(lambda n: n.tag == "tr" and "winner" in n.cls())
    check(len(rows) == 1 and winner in rows[0].text_all(), "compare --html: the winner's row")
    badges = dom.all(lambda n: "run" in n.cls() and n.all(has_class("badge")))
    check([n.attrs["data-schedule"] for n in badges] == [winner],
          "compare --html: marked as fastest: %s" % [n.attrs["data-schedule"] for n in badges])
    # Microbatch labels on the passes wide enough for one (all of them here: 8 microbatches).
    labels = dom.all(has_class("mb"))
    passes = dom.all(has_class("pass"))
    check(len(labels) == len(passes) and all(re.fullmatch(r"[FBW]?\d+", n.text) for n in labels),
          "compare --html: %d microbatch labels on %d passes: %s" % (
              len(labels), len(passes), [n.text for n in labels[:5]]))
    bars = dom.all(has_class("bar"))
    check(len(bars) == len(listed), "compare --html: %d breakdown bars" % len(bars))
    for bar, s in zip(bars, listed):
        check_breakdown(bar, s, s["iteration_time_s"], "compare --html " + s["schedule"])
    longest = max(times)
    timelines = dom.all(lambda n: n.tag == "svg" and "timeline" in n.cls())
    check(len(timelines) == len(listed), "compare --html: %d timelines" % len(timelines))
    for svg_node, s, run in zip(timelines, listed, page_data(compare_html)["runs"]):
        ends = [float(r.attrs["x"]) + float(r.attrs["width"]) for r in svg_node.all(has_class("pass"))]
        # report.js: the plot starts at x = 86 and is 1000 wide; coordinates have 2 decimals.
        want = 86 + 1000 * max(b[5] for b in run["timeline"]["blocks"]) / longest
        check(ends and abs(max(ends) - want) < 0.02 + 1000 * 1e-6,
              "compare --html: %s's timeline ends at x %.2f, one scale puts it at %.2f" % (
                  s["schedule"], max(ends) if ends else -1, want))
    _, dom = dump_dom(compare_html, "#zoom=%r,%r" % (0.25 * longest, 0.5 * longest))
    axes = [[t.text for t in n.all(lambda m: m.tag == "text")]
            for n in dom.all(lambda n: n.tag == "g" and "axis" in n.cls())]
    check(len(axes) == len(listed) and all(a == axes[0] for a in axes) and axes[0] and
          axes[0][0] != "0 s", "compare --html#zoom: time axes %s" % axes)

    # One warnings block, each warning of the command once.
    _, dom = dump_dom(warn_html)
    blocks = dom.all(has_class("warn"))
    items = [n.text for n in blocks[0].all(lambda n: n.tag == "li")] if blocks else []
    check(len(blocks) == 1 and warned and sorted(set(warned)) == sorted(items),
          "compare --html (warnings): %d blocks, %s for the console's %s" % (len(blocks), items, warned))

    # The sweep page: a sortable ranked table, each row's command runs to the row's figures.
    _, dom = dump_dom(sweep_html)
    ranked = dom.all(lambda n: n.tag == "table" and "ranked" in n.cls())
    check(len(ranked) == 1, "sweep --html: no ranked table")
    listed = json.loads(read(sweep_json))
    valid = [row for row in listed if "summary" in row]
    if ranked:
        heads = ranked[0].all(lambda n: n.tag == "th" and "sort" in n.cls())
        check(len(heads) == 1 + 2 + 7, "sweep --html: %d sortable columns" % len(heads))
        buttons = ranked[0].all(has_class("copy"))
        check(len(buttons) == len(valid), "sweep --html: %d commands for %d rows" % (
            len(buttons), len(valid)))
        for button, row in list(zip(buttons, valid))[:2]:
            copied = run_copied(button.attrs["data-command"], "sweep --html")
            check(copied is not None and
                  copied["iteration_time_s"] == row["summary"]["iteration_time_s"],
                  "sweep --html: %s gives %s, the row %s" % (
                      button.attrs["data-command"], copied and copied["iteration_time_s"],
                      row["summary"]["iteration_time_s"]))
    # Sorted by a click on a header (report.js #sort=N: the header's own click handler): by
    # iteration time, then the other way by rank.
    for fragment, column, descending in (("#sort=4", 4, False), ("#sort=0,desc", 0, True)):
        _, sorted_dom = dump_dom(sweep_html, fragment)
        table = sorted_dom.all(lambda n: n.tag == "table" and "ranked" in n.cls())
        rows = table[0].all(lambda n: n.tag == "tr")[1:] if table else []
        # Each row: the command's cell, then the columns.
        values = [float(r.all(lambda n: n.tag == "td")[1 + column].attrs["data-v"]) for r in rows]
        check(len(values) == len(valid) and values == sorted(values, reverse=descending),
              "sweep --html%s: column %d not sorted: %s" % (fragment, column, values))
    bars = dom.all(has_class("bar"))
    check(len(bars) == min(10, len(valid)), "sweep --html: %d breakdown bars" % len(bars))
    for bar, row in zip(bars, valid):
        check_breakdown(bar, row["summary"], row["summary"]["iteration_time_s"], "sweep --html")

    # The plan page: its #1's command runs to the plan's figures; its top k's breakdowns.
    _, dom = dump_dom(plan_html)
    listed = json.loads(read(plan_json))
    buttons = dom.all(has_class("copy"))
    check(len(buttons) == len(listed["top"]), "plan --html: %d commands" % len(buttons))
    if buttons:
        copied = run_copied(buttons[0].attrs["data-command"], "plan --html")
        want = listed["top"][0]["figures"]["iteration_time_s"]
        check(copied is not None and close(copied["iteration_time_s"], want, 1e-9),
              "plan --html: %s gives %s, plan's #1 %s" % (
                  buttons[0].attrs["data-command"], copied and copied["iteration_time_s"], want))
    bars = dom.all(has_class("bar"))
    check(len(bars) == len(listed["top"]), "plan --html: %d breakdown bars" % len(bars))
    for bar, t in zip(bars, listed["top"]):
        check_breakdown(bar, t["figures"], t["figures"]["iteration_time_s"], "plan --html")

    # The plan page renders, with its top k in orange (#f58518) on the plot.
    png = plan_html[:-5] + ".png"
    console = render(plan_html, png, (1200, 1400))
    check(len(console) == 1 and "clustersim-report: rendered" in console[0],
          "plan.html: console lines other than the rendered marker:\n" + "\n".join(console))
    if os.path.exists(png):
        orange = bytes((0xf5, 0x85, 0x18))
        _, _, exact, _ = colour_counts(read(png), [orange])
        # Three dots of radius 5 drawn last (they coincide here): their interior, about
        # pi x 4^2 = 50 pixels, is exactly the fill colour.
        check(exact[orange] > 40, "plan.html: the top k on %d orange pixels" % exact[orange])
        if os.environ.get("UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(png, os.path.join(root, "docs", "images", "report-plan.png"))

    for html, size in ((default_html, (1200, 2600)), (compare_html, (1200, 2000))):
        png = html[:-5] + ".png"
        console = render(html, png, size)
        name = os.path.basename(html)
        check(len(console) == 1 and "clustersim-report: rendered" in console[0],
              name + ": console lines other than the rendered marker:\n" + "\n".join(console))
        if not os.path.exists(png):
            continue
        memory_fills = [bytes(c) for c in ((0x4c, 0x78, 0xa8), (0xf5, 0x85, 0x18),
                                           (0x54, 0xa2, 0x4b), (0xe4, 0x57, 0x56))]
        width, height, exact, hues = colour_counts(read(png), memory_fills)
        check((width, height) == size, name + ": screenshot is %dx%d" % (width, height))
        # Memory bars: the four fills of parameters, gradients, optimizer states, activations
        # (report.js MEM), each over a few hundred pixels (bars of 18 px rows, one per stage).
        for rgb in memory_fills:
            check(exact[rgb] > 300, name + ": memory colour #%s on %d pixels" % (
                rgb.hex(), exact[rgb]))
        # Timeline: microbatches a golden angle apart on the colour wheel cover most 30-degree
        # hue buckets; the heat map and memory add blue. At least 8 of 12 buckets, each over
        # 200 pixels.
        covered = [h for h, n in hues.items() if n > 200]
        check(len(covered) >= 8, name + ": saturated hues %s" % sorted(hues.items()))
        if html == default_html and os.environ.get("UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(png, os.path.join(root, "docs", "images", "report-default.png"))

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("html_report: all checks passed")
