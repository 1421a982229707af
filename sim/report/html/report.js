// clustersim's HTML report: draws the data embedded in the page (script#data) as inline SVG.
// Hand-written, no libraries, nothing fetched. Any error is recorded on <body data-errors>, and
// <body data-status="rendered"> is set once every section is drawn (the browser test reads both).
"use strict";
(function () {
  var errors = [];
  window.addEventListener("error", function (e) {
    errors.push(String(e.message));
    document.body.setAttribute("data-errors", errors.join(" | "));
  });
  var NS = "http://www.w3.org/2000/svg";
  var D = JSON.parse(document.getElementById("data").textContent);

  function el(tag, attrs, parent, text) {
    var e = tag.indexOf("svg:") === 0 ? document.createElementNS(NS, tag.slice(4))
                                       : document.createElement(tag);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function svg(parent, w, h, cls) {
    return el("svg:svg", {width: w, height: h, viewBox: "0 0 " + w + " " + h, "class": "plot " + (cls || "")}, parent);
  }
  // The console's conventions (core/units.cpp format_time, format_bytes; summary.cpp pct): four
  // significant digits (printf's %.4g) in the largest unit the value reaches.
  function g4(x) { return (+x.toPrecision(4)).toString(); }
  var TIME_UNITS = [[1, "s"], [1e-3, "ms"], [1e-6, "us"], [1e-9, "ns"], [1e-12, "ps"]];
  function fmtTime(s) {
    var a = Math.abs(s);
    for (var i = 0; i < TIME_UNITS.length - 1; i++) if (a >= TIME_UNITS[i][0]) break;
    return g4(s / TIME_UNITS[i][0]) + " " + TIME_UNITS[i][1];
  }
  // The console's convention (core/units.cpp format_bytes): decimal units, 4 significant digits.
  function fmtBytes(b) {
    var u = ["B", "KB", "MB", "GB", "TB"], i = 0;
    while (Math.abs(b) >= 1000 && i < u.length - 1) { b /= 1000; i++; }
    return g4(b) + " " + u[i];
  }
  function pct(x) { return (100 * x).toFixed(2) + "%"; }
  function num(x) {
    return Math.abs(x) >= 1e4 ? Math.round(x).toString().replace(/\B(?=(\d{3})+$)/g, ",") : (+x.toPrecision(5)).toString();
  }
  // Consecutive microbatches a golden angle apart (as the SVG timeline of `compare --svg`).
  function hue(mb) { return (20 + 137.507764 * mb) % 360; }
  function passFill(mb, p) {
    var h = hue(mb).toFixed(1);
    if (p === "F") return "hsl(" + h + ",70%,78%)";
    if (p === "W") return "hsl(" + h + ",55%,28%)";
    return "hsl(" + h + ",60%,45%)";
  }
  function ticks(lo, hi, n) {
    var span = hi - lo || 1, raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * p; }).find(function (s) { return s >= raw; });
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + 1e-12 * span; t += step) out.push(t);
    return out;
  }
  function table(parent, head, rows, leftCols) {
    var t = el("table", {}, parent), tr = el("tr", {}, t);
    head.forEach(function (h, i) { el("th", {"class": i < (leftCols || 1) ? "l" : ""}, tr, h); });
    rows.forEach(function (r) {
      var row = el("tr", {}, t);
      r.forEach(function (c, i) { el("td", {"class": i < (leftCols || 1) ? "l" + (i ? " wrap" : "") : ""}, row, c); });
    });
    return t;
  }

  var main = document.getElementById("main");

  function layout(p) {
    return "tp" + p.tp + " pp" + p.pp + " dp" + p.dp + (p.cp > 1 ? " cp" + p.cp : "") +
      (p.ep > 1 ? " ep" + p.ep : "") + (p.vpp > 1 ? " vpp" + p.vpp : "");
  }
  // Exposed communication by kind (the summary's exposed_<kind>_fraction keys).
  var KINDS = ["tp", "cp", "ep", "dp", "pipeline"];
  function exposedKinds(o) {
    return KINDS.map(function (k) { return pct(o["exposed_" + k + "_fraction"] || 0); });
  }
  function exposedText(o) {
    return KINDS.map(function (k) { return k + " " + pct(o["exposed_" + k + "_fraction"] || 0); }).join(", ");
  }
  // As `run` prints them: tokens/s as a whole number, TFLOP/s with one decimal.
  function tokens(x) { return Math.round(x).toString(); }
  // The summary's scalar fields as the page's data lists them (D.fields: summary_fields.def's
  // path, column, unit, label and description), each printed by its unit.
  var FIELDS = {};
  D.fields.forEach(function (f) { FIELDS[f.path] = f; });
  function at(o, path) {
    return path.split(".").reduce(function (v, k) { return v === undefined || v === null ? undefined : v[k]; }, o);
  }
  function byUnit(unit, v) {
    if (unit === "s") return fmtTime(v);
    if (unit === "fraction") return pct(v);
    if (unit === "bytes") return fmtBytes(v);
    if (unit === "tokens/s") return tokens(v);
    if (unit === "TFLOP/s") return v.toFixed(1);
    return String(v);
  }
  function fieldLabel(path) { return FIELDS[path].label; }
  function fieldText(s, path) { return byUnit(FIELDS[path].unit, at(s, path)); }
  // A sortable table's cell of a field: its text and the value it sorts by.
  function fieldCell(s, path) { return [fieldText(s, path), at(s, path)]; }
  // A card per field with a label, in the table's order (its description as the tooltip), then
  // the two that join several fields.
  function summaryCards(parent, s) {
    var cards = el("div", {"class": "cards"}, parent);
    function card(name, text, title) {
      var d = el("div", {"class": "card", title: title}, cards);
      el("b", {}, d, text);
      el("span", {}, d, name);
    }
    D.fields.forEach(function (f) {
      if (f.label && at(s, f.path) !== undefined) card(f.label, fieldText(s, f.path), f.description);
    });
    card("exposed comm by kind", exposedText(s), "The exposed_<kind>_fraction fields.");
    card("layout", layout(s.parallelism), "The parallelism fields.");
  }

  // Colours of what communication is for (KINDS order), shared by the time breakdown, the
  // timelines' tracks and their legends.
  var KIND_FILL = {tp: "#d4553f", cp: "#9467bd", ep: "#8c564b", dp: "#17a2b8", pipeline: "#e377c2"};
  var OPT_FILL = "#2e9e44";
  // Where the iteration's time goes, per GPU and averaged over GPUs (the summary's fractions x the
  // iteration time): computing (1 - idle_fraction), the pipeline bubble, exposed communication by
  // kind, waiting for the host; "other" is what is left (0 when the fractions tile the iteration).
  var PARTS = [["compute", "#5b8bd0"], ["bubble", "#b9bec8"]].concat(
    KINDS.map(function (k) { return ["exposed " + k, KIND_FILL[k]]; }),
    [["host", "#f2b134"], ["other", "#e8e8e8"]]);
  function breakdownParts(o, T) {
    var v = [(1 - o.idle_fraction) * T, o.bubble_fraction * T].concat(
      KINDS.map(function (k) { return (o["exposed_" + k + "_fraction"] || 0) * T; }), [(o.host_fraction || 0) * T]);
    var named = v.reduce(function (a, b) { return a + b; }, 0);
    // Below a part in a million the remainder is the rounding of the fractions, not time.
    v.push(Math.abs(T - named) > 1e-6 * T ? T - named : 0);
    return v;
  }
  function legend(parent, items) {
    var d = el("div", {"class": "legend"}, parent);
    items.forEach(function (it) {
      var sp = el("span", {}, d);
      el("i", {style: "background:" + it[1]}, sp);
      sp.appendChild(document.createTextNode(it[0]));
    });
    return d;
  }
  // One stacked bar per item ({label, T, o: the fractions, winner}) on one scale in seconds.
  function breakdown(parent, items, note) {
    var W = 1100, left = 230, bh = 20, gap = 8, top = 4, pw = W - left - 110;
    var H = top + items.length * (bh + gap) + 26;
    legend(parent, PARTS);
    var s = svg(parent, W, H, "breakdown");
    var tmax = Math.max.apply(null, items.map(function (it) { return it.T; })) || 1;
    items.forEach(function (it, i) {
      var y = top + i * (bh + gap), x = left;
      var g = el("svg:g", {"class": "bar" + (it.winner ? " winner" : ""), "data-label": it.label, "data-t": it.T}, s);
      var label = (it.winner ? "\u2605 " : "") + it.label;
      var lt = el("svg:text", {x: 4, y: y + 14}, g, label.length > 36 ? label.slice(0, 35) + "\u2026" : label);
      el("svg:title", {}, lt, label);
      breakdownParts(it.o, it.T).forEach(function (v, j) {
        var w = v / tmax * pw;
        var r = el("svg:rect", {x: x.toFixed(2), y: y, width: Math.max(0, w).toFixed(2), height: bh,
          fill: PARTS[j][1], "class": "part", "data-part": PARTS[j][0], "data-s": v}, g);
        el("svg:title", {}, r, it.label + ": " + PARTS[j][0] + " " + fmtTime(v) + " (" + pct(v / it.T) + ")");
        x += Math.max(0, w);
      });
      el("svg:text", {x: x + 6, y: y + 14}, g, fmtTime(it.T));
    });
    var y = top + items.length * (bh + gap);
    ticks(0, tmax, 8).forEach(function (t) {
      var xx = left + t / tmax * pw;
      el("svg:line", {x1: xx, x2: xx, y1: y - 4, y2: y, stroke: "#8a93a6"}, s);
      el("svg:text", {x: xx - 14, y: y + 14}, s, fmtTime(t));
    });
    el("p", {"class": "note"}, parent, note || "Per GPU, mean over GPUs: compute is 1 - idle_fraction, the rest the summary's " +
      "bubble_fraction, exposed_<kind>_fraction and host_fraction, each times the iteration time.");
  }

  // Time scale shared by every timeline of the page (a compare's schedules: the longest iteration
  // spans the width); zooming or panning one moves them all.
  var Z = {lo: 0, hi: 1, end: 1, views: []};
  function setZoom(lo, hi) { Z.lo = lo; Z.hi = hi; Z.views.forEach(function (f) { f(); }); }
  var TRACK_ROW = 7, PASS_ROW = 18, STAGE_GAP = 7;
  // A zoomable timeline of data-parallel replica 0: per stage, its passes (labelled with their
  // microbatch), then its communication (collectives inside passes by kind, pipeline sends), its
  // data-parallel collectives and its optimizer step. Wheel to zoom, drag to pan.
  function timeline(parent, tl) {
    var W = 1100, left = 86, top = 6, stageH = PASS_ROW + 3 * (TRACK_ROW + 1) + STAGE_GAP;
    var H = top + tl.rows * stageH + 24;
    var s = svg(parent, W, H, "timeline");
    var plotW = W - left - 14;
    var g = el("svg:g", {}, s), axis = el("svg:g", {"class": "axis"}, s);
    var names = ["comm", "DP sync", "optimizer"];
    function rowY(r) { return top + r * stageH; }
    function trackY(r, t) { return rowY(r) + PASS_ROW + 1 + t * (TRACK_ROW + 1); }
    for (var r = 0; r < tl.rows; r++) {
      el("svg:text", {x: 4, y: rowY(r) + 13}, s, "stage " + r);
      names.forEach(function (n, t) {
        el("svg:text", {x: 14, y: trackY(r, t) + 6.5, "class": "track-label"}, s, n);
      });
    }
    function x(t) { return left + (t - Z.lo) / (Z.hi - Z.lo) * plotW; }
    function clipX(t) { return Math.max(left, Math.min(left + plotW, x(t))); }
    function draw() {
      while (g.firstChild) g.removeChild(g.firstChild);
      while (axis.firstChild) axis.removeChild(axis.firstChild);
      var endX = clipX(tl.end_s);
      for (var r = 0; r < tl.rows; r++) {
        el("svg:rect", {x: left, y: rowY(r), width: Math.max(0, endX - left), height: PASS_ROW, fill: "#eceef2"}, g);
        for (var t = 0; t < 3; t++)
          el("svg:rect", {x: left, y: trackY(r, t), width: Math.max(0, endX - left), height: TRACK_ROW, fill: "#f4f5f8"}, g);
      }
      if (tl.end_s < Z.hi) el("svg:line", {x1: endX, x2: endX, y1: top, y2: top + tl.rows * stageH - STAGE_GAP,
        stroke: "#5b6680", "stroke-dasharray": "3 2"}, g);
      tl.blocks.forEach(function (b) {
        if (b[5] < Z.lo || b[4] > Z.hi) return;
        var x0 = clipX(b[4]), x1 = clipX(b[5]), w = Math.max(0.5, x1 - x0);
        var rect = el("svg:rect", {x: x0.toFixed(2), y: rowY(b[0]), width: w.toFixed(2), height: PASS_ROW,
          fill: passFill(b[1], b[3]), "class": "pass " + b[3]}, g);
        el("svg:title", {}, rect, b[3] + " microbatch " + b[1] + (tl.chunks > 1 ? " chunk " + b[2] : "") +
          ": " + fmtTime(b[4]) + " - " + fmtTime(b[5]));
        var label = w >= 24 ? b[3] + b[1] : w >= 12 ? String(b[1]) : "";
        if (label) el("svg:text", {x: (x0 + w / 2).toFixed(2), y: rowY(b[0]) + 13, "class": "mb" + (b[3] === "F" ? "" : " dark")}, g, label);
      });
      (tl.tracks || []).forEach(function (b) {
        if (b[4] < Z.lo || b[3] > Z.hi) return;
        var x0 = clipX(b[3]), x1 = clipX(b[4]);
        var kind = tl.kinds[b[2]], track = tl.track_names[b[1]];
        var fill = b[1] === 2 ? OPT_FILL : KIND_FILL[kind];
        var rect = el("svg:rect", {x: x0.toFixed(2), y: trackY(b[0], b[1]), width: Math.max(0.5, x1 - x0).toFixed(2),
          height: TRACK_ROW, fill: fill, "class": "trk " + track.replace(" ", "-") + (b[1] === 0 ? " " + kind : "")}, g);
        el("svg:title", {}, rect, (b[1] === 0 ? kind + " communication" : track) + ": " + fmtTime(b[3]) + " - " +
          fmtTime(b[4]) + " (" + fmtTime(b[4] - b[3]) + ")");
      });
      var y = top + tl.rows * stageH - STAGE_GAP + 2;
      el("svg:line", {x1: left, x2: left + plotW, y1: y, y2: y}, axis);
      ticks(Z.lo, Z.hi, 8).forEach(function (t) {
        el("svg:line", {x1: x(t), x2: x(t), y1: y, y2: y + 4}, axis);
        el("svg:text", {x: x(t) - 14, y: y + 16}, axis, fmtTime(t));
      });
    }
    s.addEventListener("wheel", function (e) {
      e.preventDefault();
      var rect = s.getBoundingClientRect();
      var t = Z.lo + (e.clientX - rect.left - left) / plotW * (Z.hi - Z.lo);
      var k = e.deltaY < 0 ? 0.8 : 1.25;
      setZoom(Math.max(0, t - (t - Z.lo) * k), Math.min(Z.end, t + (Z.hi - t) * k));
    });
    var drag = null;
    s.addEventListener("mousedown", function (e) { drag = {x: e.clientX, lo: Z.lo, hi: Z.hi}; });
    window.addEventListener("mouseup", function () { drag = null; });
    s.addEventListener("mousemove", function (e) {
      if (!drag) return;
      var dt = (e.clientX - drag.x) / plotW * (drag.hi - drag.lo);
      dt = Math.max(-drag.lo, Math.min(Z.end - drag.hi, -dt));
      setZoom(drag.lo + dt, drag.hi + dt);
    });
    Z.views.push(draw);
    draw();
  }
  function timelineHeader(parent, tl) {
    var bar = el("div", {}, parent);
    var reset = el("button", {type: "button"}, bar, "reset zoom");
    reset.addEventListener("click", function () { setZoom(0, Z.end); });
    el("span", {"class": "note"}, bar, "wheel: zoom, drag: pan" + (D.runs.length > 1 ? " (every schedule's timeline together, one time scale)" : "") +
      "; data-parallel replica 0, one group of rows per stage; a pass shows its microbatch (F3: forward of microbatch 3)");
    var mb = [0, 1, 2];
    legend(parent, [["forward", passFill(mb[0], "F")], ["backward", passFill(mb[0], "B")]].concat(
      tl.blocks.some(function (b) { return b[3] === "W"; }) ? [["weight gradient", passFill(mb[0], "W")]] : [],
      [["idle", "#eceef2"]], KINDS.map(function (k) { return [k + (k === "dp" ? " (DP sync)" : " comm"), KIND_FILL[k]]; }),
      [["optimizer", OPT_FILL]]));
  }

  // Link utilisation: per link kind, the mean over the iteration of the links that carried
  // traffic and the peak of any time bin, on a 0-100% scale; then the busiest links over time,
  // ranked as `run` lists them (utilisation over the iteration, ties in link order).
  function linkKinds(parent, lk) {
    var W = 1100, left = 150, bh = 9, rowH = 34, pw = 520, top = 18;
    var H = top + lk.kinds.length * rowH + 26;
    var s = svg(parent, W, H, "link-kinds");
    el("svg:rect", {x: left, y: 4, width: 10, height: 8, fill: "#4c78a8"}, s);
    el("svg:text", {x: left + 14, y: 12}, s, "mean over the iteration");
    el("svg:rect", {x: left + 170, y: 4, width: 10, height: 8, fill: "#1d2b4a"}, s);
    el("svg:text", {x: left + 184, y: 12}, s, "peak (busiest time bin)");
    lk.kinds.forEach(function (k, i) {
      var y = top + i * rowH;
      var g = el("svg:g", {"class": "link-kind", "data-kind": k.kind, "data-mean": k.mean, "data-peak": k.peak,
        "data-busiest": k.busiest, "data-busiest-mean": k.busiest_mean}, s);
      el("svg:text", {x: 4, y: y + 10}, g, k.kind);
      el("svg:text", {x: 4, y: y + 23, "class": "track-label"}, g, k.links + " link" + (k.links > 1 ? "s" : "") + ", " + fmtBytes(k.bytes));
      el("svg:rect", {x: left, y: y, width: pw, height: 2 * bh + 2, fill: "#f4f5f8"}, g);
      el("svg:rect", {x: left, y: y, width: (Math.min(1, k.mean) * pw).toFixed(2), height: bh, fill: "#4c78a8"}, g);
      el("svg:rect", {x: left, y: y + bh + 2, width: (Math.min(1, k.peak) * pw).toFixed(2), height: bh, fill: "#1d2b4a"}, g);
      el("svg:text", {x: left + pw + 8, y: y + 9}, g, "mean " + pct(k.mean) + ", peak " + pct(k.peak));
      el("svg:text", {x: left + pw + 8, y: y + 21, "class": "track-label"}, g, "busiest: " + k.busiest + " " + pct(k.busiest_mean));
    });
    // The scale bar.
    var y = top + lk.kinds.length * rowH;
    el("svg:line", {x1: left, x2: left + pw, y1: y, y2: y, stroke: "#8a93a6"}, s);
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
      el("svg:line", {x1: left + f * pw, x2: left + f * pw, y1: y, y2: y + 5, stroke: "#8a93a6"}, s);
      el("svg:text", {x: left + f * pw - 10, y: y + 17}, s, (100 * f) + "%");
    });
    el("svg:text", {x: left + pw + 28, y: y + 17}, s, "of the link's capacity (per direction)");
  }
  // Link utilisation over time: a row per link, a column per time bin, darker = busier.
  function heatColour(u) { return "hsl(222,75%," + Math.round(96 - 70 * Math.min(1, u)) + "%)"; }
  function heatmap(parent, lk) {
    var left = 330, cell = 14, bins = lk.series[0].u.length, W = 1100, plotW = W - left - 20;
    var cw = plotW / bins, top = 22, H = top + lk.series.length * cell + 30;
    var s = svg(parent, W, H, "heatmap");
    // The colour scale bar: 0% to 100% of a link's capacity in a bin.
    for (var i = 0; i <= 20; i++)
      el("svg:rect", {x: left + i * 12, y: 4, width: 12, height: 10, fill: heatColour(i / 20)}, s);
    el("svg:rect", {x: left, y: 4, width: 252, height: 10, fill: "none", stroke: "#8a93a6"}, s);
    el("svg:text", {x: left - 24, y: 13}, s, "0%");
    el("svg:text", {x: left + 258, y: 13}, s, "100% of capacity in a bin");
    lk.series.forEach(function (ser, i) {
      var y = top + i * cell;
      var row = el("svg:g", {"class": "link-row", "data-name": ser.name, "data-mean": ser.mean, "data-peak": ser.peak}, s);
      el("svg:text", {x: 4, y: y + 11}, row, ser.name + " (" + ser.kind + ") " + pct(ser.mean) + ", peak " + pct(ser.peak));
      ser.u.forEach(function (u, j) {
        if (u <= 0) return;
        var r = el("svg:rect", {x: (left + j * cw).toFixed(2), y: y, width: (cw + 0.3).toFixed(2), height: cell - 1,
          fill: heatColour(u)}, row);
        el("svg:title", {}, r, ser.name + " " + fmtTime(j * lk.bin_s) + ": " + pct(u));
      });
      el("svg:rect", {x: left, y: y, width: plotW, height: cell - 1, fill: "none", stroke: "#e2e5ec"}, row);
    });
    var y = top + lk.series.length * cell + 2;
    ticks(0, bins * lk.bin_s, 8).forEach(function (t) {
      var xx = left + t / lk.bin_s * cw;
      el("svg:text", {x: xx - 14, y: y + 14}, s, fmtTime(t));
    });
    el("p", {"class": "note"}, parent, "The " + lk.series.length + " busiest of " + lk.total +
      " links that carried traffic, as `run` lists them (utilisation over the iteration, then link order; " +
      "the percentages: over the iteration, and the busiest bin); bins of " + fmtTime(lk.bin_s) + ".");
  }
  function links(parent, lk) {
    if (!lk.series.length) { el("p", {"class": "note"}, parent, "No link carried traffic (ideal network, or one GPU)."); return; }
    el("h3", {}, parent, "Link utilisation by kind");
    linkKinds(parent, lk);
    el("h3", {}, parent, "Busiest links over time");
    heatmap(parent, lk);
  }

  var MEM = [["parameters", "#4c78a8"], ["gradients", "#f58518"], ["optimizer_states", "#54a24b"], ["activations", "#e45756"]];
  // Memory per stage (one GPU) against the GPU's HBM, then activations in flight over time.
  function memory(parent, m, end_s) {
    var W = 1100, left = 70, rowH = 18, n = m.stages.length, plotW = W - left - 120;
    var maxB = Math.max(m.hbm, Math.max.apply(null, m.stages.map(function (x) { return x.total; }))) || 1;
    var H = 30 + n * (rowH + 4) + 24;
    var s = svg(parent, W, H, "memory");
    MEM.forEach(function (k, i) {
      el("svg:rect", {x: left + i * 150, y: 4, width: 10, height: 10, fill: k[1]}, s);
      el("svg:text", {x: left + i * 150 + 14, y: 13}, s, k[0].replace("_", " "));
    });
    m.stages.forEach(function (st, i) {
      var y = 24 + i * (rowH + 4), x0 = left;
      el("svg:text", {x: 4, y: y + 13}, s, "stage " + i);
      MEM.forEach(function (k) {
        var w = st[k[0]] / maxB * plotW;
        var r = el("svg:rect", {x: x0.toFixed(2), y: y, width: w.toFixed(2), height: rowH, fill: k[1]}, s);
        el("svg:title", {}, r, k[0] + ": " + fmtBytes(st[k[0]]));
        x0 += w;
      });
      el("svg:text", {x: x0 + 4, y: y + 13}, s, fmtBytes(st.total));
    });
    if (m.hbm > 0) {
      var hx = left + m.hbm / maxB * plotW;
      el("svg:line", {x1: hx, x2: hx, y1: 20, y2: H - 20, stroke: "#a11d1d", "stroke-dasharray": "4 3"}, s);
      el("svg:text", {x: hx - 40, y: H - 6}, s, "HBM " + fmtBytes(m.hbm));
    }
    // Over time: each stage's total (static + activations held) as a step line.
    var H2 = 220, top = 10, bottom = 30, pw = W - left - 20;
    var s2 = svg(parent, W, H2, "memory-time");
    var ymax = maxB;
    function X(t) { return left + t / (end_s || 1) * pw; }
    function Y(b) { return top + (1 - b / ymax) * (H2 - top - bottom); }
    ticks(0, ymax, 5).forEach(function (b) {
      el("svg:line", {x1: left, x2: left + pw, y1: Y(b), y2: Y(b), stroke: "#eceef2"}, s2);
      el("svg:text", {x: 2, y: Y(b) + 4}, s2, fmtBytes(b));
    });
    m.over_time.forEach(function (steps, i) {
      var st = m.stages[i], base = st.total - st.activations, d = "";
      steps.forEach(function (p, j) {
        var yy = Y(base + p[1]).toFixed(2);
        d += (j ? "H" + X(p[0]).toFixed(2) + "V" : "M" + X(p[0]).toFixed(2) + " ") + yy;
      });
      d += "H" + X(end_s).toFixed(2);
      el("svg:path", {d: d, fill: "none", stroke: "hsl(" + hue(i).toFixed(1) + ",65%,42%)", "stroke-width": 1.5}, s2);
    });
    if (m.hbm > 0 && m.hbm <= ymax)
      el("svg:line", {x1: left, x2: left + pw, y1: Y(m.hbm), y2: Y(m.hbm), stroke: "#a11d1d", "stroke-dasharray": "4 3"}, s2);
    ticks(0, end_s, 8).forEach(function (t) { el("svg:text", {x: X(t) - 14, y: H2 - 8}, s2, fmtTime(t)); });
    var legend = el("div", {"class": "note"}, parent);
    m.stages.forEach(function (st, i) {
      el("span", {style: "color:hsl(" + hue(i).toFixed(1) + ",65%,42%);margin-right:12px"}, legend,
        "\u25a0 stage " + i);
    });
    el("p", {"class": "note"}, parent, "Per stage, one GPU: parameters, gradients and optimizer states all iteration, " +
      "plus the activations of the microbatches in flight (held from a chunk's forward pass to the backward pass that frees them); " +
      "dashed: the GPU's HBM.");
  }

  function validation(v) {
    var sec = el("section", {id: "validation"}, main);
    el("h2", {}, sec, "Validation confidence");
    if (!v || !v.families) { el("p", {"class": "note"}, sec, (v && v.note) || "Validation suite not run."); return; }
    el("p", {"class": "note"}, sec, v.note);
    table(sec, ["family", "what is compared", "mode", "tolerance", "cases", "pass", "fail", "known gaps", "mean |error|", "worst error"],
      v.families.map(function (f) {
        var e = function (x) { return f.absolute ? x.toFixed(4) : pct(x); };
        return [f.id, f.title, f.mode, e(f.tolerance), String(f.cases), String(f.pass), String(f.fail), String(f.gaps),
                f.cases ? e(f.mean_abs_error) : "-", f.cases ? e(f.worst_error) : "-"];
      }), 3);
  }

  function runSection(run, idx, many, winner) {
    var s = run.summary, sec = el("section", {id: "run-" + idx, "class": "run", "data-schedule": s.schedule}, main);
    var h = el("h2", {}, sec, (many ? "Schedule " : "Run: ") + s.schedule);
    if (winner) el("span", {"class": "badge winner"}, h, "\u2605 fastest");
    summaryCards(sec, s);
    if (!many) {
      el("h3", {}, sec, "Where the time goes");
      breakdown(sec, [{label: "all stages", T: s.iteration_time_s, o: s}].concat(s.stages.map(function (st) {
        return {label: "stage " + st.stage, T: s.iteration_time_s, o: st};
      })));
    }
    el("h3", {}, sec, "Timeline");
    timelineHeader(sec, run.timeline);
    timeline(sec, run.timeline);
    links(sec, run.links);
    el("h3", {}, sec, "Memory per stage against HBM");
    memory(sec, run.memory, run.timeline.end_s);
    el("h3", {}, sec, "Stages");
    table(sec, ["stage", "busy", "bubble", "exposed comm"].concat(KINDS.map(function (k) { return "exp. " + k; }))
      .concat(["host", "in flight", "activations"]),
      s.stages.map(function (st) {
        return [String(st.stage), fmtTime(st.busy_s), pct(st.bubble_fraction), pct(st.exposed_comm_fraction)]
          .concat(exposedKinds(st))
          .concat([pct(st.host_fraction), String(st.peak_inflight_microbatches), fmtBytes(st.peak_activation_bytes)]);
      }));
  }

  // The fastest of a compare (the first of equals, in the order given).
  function fastest(runs) {
    var best = 0;
    runs.forEach(function (r, i) { if (r.summary.iteration_time_s < runs[best].summary.iteration_time_s) best = i; });
    return best;
  }
  function comparison(runs, best) {
    var sec = el("section", {id: "comparison", "data-winner": runs[best].summary.schedule}, main);
    el("h2", {}, sec, "Schedules compared");
    var bestT = runs[best].summary.iteration_time_s;
    var t = table(sec, ["schedule", fieldLabel("iteration_time_s"), "vs fastest", fieldLabel("bubble_fraction"),
                        fieldLabel("exposed_comm_fraction")]
      .concat(KINDS.map(function (k) { return "exp. " + k; })).concat([fieldLabel("mfu"), fieldLabel("memory_per_gpu_bytes.total")]),
      runs.map(function (r, i) {
        var s = r.summary;
        return [(i === best ? "\u2605 " : "") + s.schedule, fieldText(s, "iteration_time_s"),
                i === best ? "fastest" : "+" + pct(s.iteration_time_s / bestT - 1), fieldText(s, "bubble_fraction"),
                fieldText(s, "exposed_comm_fraction")].concat(exposedKinds(s))
          .concat([fieldText(s, "mfu"), fieldText(s, "memory_per_gpu_bytes.total")]);
      }));
    t.rows[best + 1].setAttribute("class", "winner");
    el("h3", {}, sec, "Where the time goes, one scale");
    breakdown(sec, runs.map(function (r, i) {
      return {label: r.summary.schedule, T: r.summary.iteration_time_s, o: r.summary, winner: i === best};
    }));
  }

  // One block for every warning of the page (each once).
  function warnings(list) {
    if (!list || !list.length) return;
    var sec = el("section", {id: "warnings", "class": "warn"}, main);
    el("b", {}, sec, list.length === 1 ? "Warning" : list.length + " warnings");
    var ul = el("ul", {}, sec);
    list.forEach(function (w) { el("li", {}, ul, w); });
  }

  // "copy as command": the command that runs a row alone, quoted for a POSIX shell.
  function shellWord(w) {
    return /^[A-Za-z0-9_+=.,\/:@%-]+$/.test(w) ? w : "'" + w.replace(/'/g, "'\\''") + "'";
  }
  function commandFor(sets) {
    if (!D.command) return "";
    var words = D.command.slice();
    sets.forEach(function (kv) { words.push("--set", kv); });
    return words.map(shellWord).join(" ");
  }
  function copyText(text, button) {
    function done() { button.textContent = "copied"; setTimeout(function () { button.textContent = "copy"; }, 1500); }
    function fallback() {
      var ta = el("textarea", {style: "position:fixed;left:-9999px"}, document.body);
      ta.value = text;
      ta.select();
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      document.body.removeChild(ta);
      if (ok) done(); else window.prompt("Copy the command:", text);
    }
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, fallback);
    else fallback();
  }
  // A table whose columns sort on a click of their header (again: the other way). Each cell is
  // [text, sort value]; a row's command (when not empty) gets a "copy" button in the last column.
  function sortableTable(parent, head, rows, leftCols, cls) {
    var t = el("table", {"class": "sortable " + (cls || "")}, parent), hr = el("tr", {}, t);
    var body = el("tbody", {}, t), state = {col: -1, dir: 1};
    var withCommand = rows.some(function (r) { return r.command; });
    if (withCommand) el("th", {"class": "l", title: "the command that runs the row alone"}, hr, "command");
    head.forEach(function (h, i) {
      var th = el("th", {"class": (i < leftCols ? "l" : "") + " sort", title: "sort by " + h}, hr, h);
      th.addEventListener("click", function () {
        state.dir = state.col === i ? -state.dir : 1;
        state.col = i;
        var sorted = rows.slice().sort(function (a, b) {
          var x = a.cells[i][1], y = b.cells[i][1];
          var c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
          return c * state.dir || a.order - b.order;
        });
        sorted.forEach(function (r) { body.appendChild(r.tr); });
        Array.prototype.forEach.call(hr.children, function (c) {
          c.setAttribute("data-sorted", c === th ? (state.dir > 0 ? "asc" : "desc") : "");
        });
      });
    });
    rows.forEach(function (r, n) {
      r.order = n;
      r.tr = el("tr", {}, body);
      if (withCommand) {
        var td = el("td", {"class": "l"}, r.tr);
        var b = el("button", {type: "button", "class": "copy", "data-command": r.command, title: r.command}, td, "copy");
        b.addEventListener("click", function () { copyText(r.command, b); });
      }
      r.cells.forEach(function (c, i) { el("td", {"class": i < leftCols ? "l" : "", "data-v": c[1]}, r.tr, c[0]); });
    });
    return t;
  }

  function sweep(sw) {
    var sec = el("section", {id: "sweep"}, main);
    el("h2", {}, sec, "Sweep: ranked by throughput");
    var valid = sw.rows.filter(function (r) { return r.summary; });
    var invalid = sw.rows.length - valid.length;
    el("p", {"class": "note"}, sec, sw.rows.length + " combinations: " + valid.length + " simulated, " + invalid +
      " not valid. Layouts that fit in HBM first, each group by throughput; click a column to sort, " +
      "\"copy\" puts the command that runs a row on the clipboard.");
    var columns = ["tokens_per_s", "iteration_time_s", "mfu", "bubble_fraction", "exposed_comm_fraction",
                   "memory_per_gpu_bytes.total"];
    sortableTable(sec, ["rank"].concat(sw.keys, columns.map(fieldLabel), ["fits HBM"]),
      valid.slice(0, 60).map(function (r, i) {
        var s = r.summary;
        return {cells: [[String(i + 1), i + 1]].concat(sw.keys.map(function (k) {
            var v = r.settings[k];
            return [v, isFinite(+v) && v !== "" ? +v : v];
          }),
          columns.map(function (p) { return fieldCell(s, p); }), [[r.fits_hbm ? "yes" : "no", r.fits_hbm ? 1 : 0]]),
          command: commandFor(sw.keys.map(function (k) { return k + "=" + r.settings[k]; }))};
      }), 1 + sw.keys.length, "ranked");
    var shown = valid.slice(0, 10);
    if (shown.length) {
      el("h3", {}, sec, "Where the time goes: the first " + shown.length + " of the ranking");
      breakdown(sec, shown.map(function (r, i) {
        return {label: "#" + (i + 1) + " " + sw.keys.map(function (k) { return k + "=" + r.settings[k]; }).join(" "),
                T: r.summary.iteration_time_s, o: r.summary};
      }));
    }
    // Throughput against each varied key: every valid combination a dot in its value's column.
    sw.keys.forEach(function (k) {
      el("h3", {}, sec, "Throughput against " + k);
      var values = [];
      sw.rows.forEach(function (r) { if (values.indexOf(r.settings[k]) < 0) values.push(r.settings[k]); });
      var W = 700, H = 240, left = 80, top = 10, bottom = 34, pw = W - left - 20;
      var ymax = Math.max.apply(null, valid.map(function (r) { return r.summary.tokens_per_s; })) * 1.08 || 1;
      var s = svg(sec, W, H, "sweep-plot");
      function Y(v) { return top + (1 - v / ymax) * (H - top - bottom); }
      ticks(0, ymax, 5).forEach(function (v) {
        el("svg:line", {x1: left, x2: left + pw, y1: Y(v), y2: Y(v), stroke: "#eceef2"}, s);
        el("svg:text", {x: 2, y: Y(v) + 4}, s, num(v));
      });
      var cw = pw / values.length;
      values.forEach(function (v, i) { el("svg:text", {x: left + (i + 0.5) * cw - 10, y: H - 12}, s, v); });
      valid.forEach(function (r, n) {
        var i = values.indexOf(r.settings[k]);
        var jitter = ((n * 0.618034) % 1 - 0.5) * cw * 0.5;
        var c = el("svg:circle", {cx: (left + (i + 0.5) * cw + jitter).toFixed(2), cy: Y(r.summary.tokens_per_s).toFixed(2), r: 4,
          fill: r.fits_hbm ? "#4c78a8" : "#e45756", "fill-opacity": 0.8}, s);
        el("svg:title", {}, c, sw.keys.map(function (kk) { return kk + "=" + r.settings[kk]; }).join(" ") + ": " + num(r.summary.tokens_per_s) + " tokens/s");
      });
      el("svg:text", {x: left, y: H - 0}, s, "tokens/s per value of " + k + " (red: does not fit in HBM)");
    });
    if (invalid) {
      el("h3", {}, sec, "Not valid");
      table(sec, sw.keys.concat(["reason"]), sw.rows.filter(function (r) { return !r.summary; }).slice(0, 40).map(function (r) {
        return sw.keys.map(function (k) { return r.settings[k]; }).concat([r.error]);
      }), sw.keys.length + 1);
    }
  }

  // `plan --html`: the top k, then every simulated layout as memory per GPU against iteration time
  // (filled: under the experiment's network; hollow: the analytical network's, no contention),
  // the Pareto front as a line, the memory limit as a dashed line.
  function plan(p) {
    var sec = el("section", {id: "plan"}, main);
    var value = function (f) {
      if (p.objective === "mfu") return pct(f.mfu);
      if (p.objective === "time") return fmtTime(f.objective);
      return (+f.objective.toPrecision(4)).toString() + " " + p.objective_unit;
    };
    el("h2", {}, sec, "Plan: ranked by " + p.objective + " under the " + p.network + " network");
    var c = p.counts;
    el("p", {"class": "note"}, sec, num(c.layouts) + " layouts on " +
      (p.gpu_counts ? p.gpu_counts.join(", ") : String(p.gpus)) + " GPUs: " + num(c.invalid) + " invalid, " +
      num(c.pruned_memory) + " above the memory limit, " + num(c.pruned_bound) + " pruned by the lower bound, " +
      (c.left_by_limit ? num(c.left_by_limit) + " left by the confirmation limit, " : "") +
      num(c.simulated) + " simulated, " + num(c.confirmed) + " under the " + p.network + " network.");
    sortableTable(sec, ["#", "layout", "iteration", p.objective, "MFU", "memory per GPU", "bubble", "exposed comm."],
      p.top.map(function (t, i) {
        var f = t.figures;
        return {cells: [[String(i + 1), i + 1], [t.layout, t.layout], [fmtTime(f.iteration_time_s), f.iteration_time_s],
                        [value(f), f.objective], [pct(f.mfu), f.mfu], [fmtBytes(f.memory_per_gpu_bytes), f.memory_per_gpu_bytes],
                        [pct(f.bubble_fraction), f.bubble_fraction], [pct(f.exposed_comm_fraction), f.exposed_comm_fraction]],
                command: commandFor(t.overrides || [])};
      }), 2, "ranked");
    if (p.top.length) {
      el("h3", {}, sec, "Where the time goes: the top " + p.top.length);
      breakdown(sec, p.top.map(function (t, i) {
        return {label: "#" + (i + 1) + " " + t.layout, T: t.figures.iteration_time_s, o: t.figures, winner: i === 0};
      }));
    }
    if (p.top.length && p.top[0].megatron_args) {
      el("h3", {}, sec, "Megatron-LM flags of #1");
      el("pre", {}, sec, p.top[0].megatron_args);
    }
    if (p.top.length > 1) {
      el("h3", {}, sec, "Why the others lost");
      var ul = el("ul", {}, sec);
      p.top.slice(1).forEach(function (t, i) { el("li", {}, ul, "#" + (i + 2) + ": " + t.why_lost); });
    }
    var pts = p.points;
    if (!pts.length) return;
    el("h3", {}, sec, "Memory per GPU against iteration time (" + pts.length + " layouts simulated)");
    var W = 760, H = 360, left = 70, right = 20, top = 12, bottom = 46;
    var mmax = Math.max(p.limit_bytes, Math.max.apply(null, pts.map(function (q) { return q[0]; }))) * 1.05;
    var tmin = Math.min.apply(null, pts.map(function (q) { return q[1]; }));
    var tmax = Math.max.apply(null, pts.map(function (q) { return q[1]; }));
    var t0 = tmin - 0.05 * (tmax - tmin || tmin), t1 = tmax + 0.05 * (tmax - tmin || tmin);
    var s = svg(sec, W, H, "plan-plot");
    function X(m) { return left + m / mmax * (W - left - right); }
    function Y(t) { return top + (1 - (t - t0) / (t1 - t0)) * (H - top - bottom); }
    ticks(0, mmax, 6).forEach(function (m) {
      el("svg:line", {x1: X(m), x2: X(m), y1: top, y2: H - bottom, stroke: "#eceef2"}, s);
      el("svg:text", {x: X(m) - 14, y: H - bottom + 14}, s, fmtBytes(m));
    });
    ticks(t0, t1, 5).forEach(function (t) {
      el("svg:line", {x1: left, x2: W - right, y1: Y(t), y2: Y(t), stroke: "#eceef2"}, s);
      el("svg:text", {x: 2, y: Y(t) + 4}, s, fmtTime(t));
    });
    el("svg:line", {x1: X(p.limit_bytes), x2: X(p.limit_bytes), y1: top, y2: H - bottom, stroke: "#e45756",
      "stroke-dasharray": "5,4"}, s);
    el("svg:text", {x: X(p.limit_bytes) - 90, y: top + 12, fill: "#e45756"}, s, "memory limit");
    var front = p.pareto.map(function (i) { return X(pts[i][0]).toFixed(2) + "," + Y(pts[i][1]).toFixed(2); });
    el("svg:polyline", {points: front.join(" "), fill: "none", stroke: "#54a24b", "stroke-width": 2}, s);
    // The top k last, on top of the others.
    pts.filter(function (q) { return !q[3]; }).concat(pts.filter(function (q) { return q[3]; })).forEach(function (q) {
      var ranked = q[3] > 0;
      var dot = el("svg:circle", {cx: X(q[0]).toFixed(2), cy: Y(q[1]).toFixed(2), r: ranked ? 5 : 3.5,
        fill: q[2] || p.network === "analytical" ? (ranked ? "#f58518" : "#4c78a8") : "none", stroke: ranked ? "#f58518" : "#4c78a8",
        "fill-opacity": ranked ? 1 : 0.85}, s);
      el("svg:title", {}, dot, (ranked ? "#" + q[3] + " " : "") + q[4] + ": " + fmtTime(q[1]) + ", " + fmtBytes(q[0]) +
        " per GPU (" + (q[2] ? p.network : "analytical") + " network)");
    });
    el("svg:text", {x: left, y: H - 8}, s, "memory per GPU; orange: the top " + p.top.length +
      (p.network === "analytical" ? "" : "; filled: " + p.network + " network, hollow: analytical (no contention)") +
      "; green line: the Pareto front");
  }

  warnings(D.warnings);
  var runs = D.runs || [], best = runs.length ? fastest(runs) : -1;
  Z.end = Z.hi = Math.max.apply(null, [0].concat(runs.map(function (r) { return r.timeline.end_s; }))) || 1;
  if (runs.length > 1) comparison(runs, best);
  runs.forEach(function (r, i) { runSection(r, i, runs.length > 1, runs.length > 1 && i === best); });
  // A page opened at #zoom=LO,HI (seconds) starts zoomed there, every timeline alike.
  var zoomAt = /zoom=([0-9.eE+-]+),([0-9.eE+-]+)/.exec(location.hash);
  if (zoomAt && runs.length && +zoomAt[2] > +zoomAt[1])
    setZoom(Math.max(0, +zoomAt[1]), Math.min(Z.end, +zoomAt[2]));
  if (D.sweep) sweep(D.sweep);
  if (D.plan) plan(D.plan);
  if (D.validation) validation(D.validation);
  // #sort=N (N: a column of the ranked table; ",desc" clicks it twice) opens it sorted so.
  var sortAt = /sort=(\d+)(,desc)?/.exec(location.hash);
  var header = sortAt && document.querySelectorAll("table.ranked th.sort")[+sortAt[1]];
  if (header) { header.click(); if (sortAt[2]) header.click(); }
  document.body.setAttribute("data-status", errors.length ? "errors" : "rendered");
  // The one console line a report prints (tests/e2e/html_report.py expects exactly this).
  if (!errors.length) console.log("clustersim-report: rendered");
})();
