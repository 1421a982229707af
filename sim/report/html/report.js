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
  function fmtTime(s) {
    var a = Math.abs(s);
    if (a >= 1) return s.toFixed(3) + " s";
    if (a >= 1e-3) return (s * 1e3).toFixed(3) + " ms";
    if (a >= 1e-6) return (s * 1e6).toFixed(2) + " us";
    return (s * 1e9).toFixed(1) + " ns";
  }
  // The console's convention (core/units.cpp format_bytes): decimal units, 4 significant digits.
  function fmtBytes(b) {
    var u = ["B", "KB", "MB", "GB", "TB"], i = 0;
    while (Math.abs(b) >= 1000 && i < u.length - 1) { b /= 1000; i++; }
    return (+b.toPrecision(4)).toString() + " " + u[i];
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
  function summaryCards(parent, s) {
    var cards = el("div", {"class": "cards"}, parent);
    [["iteration", fmtTime(s.iteration_time_s)], ["MFU", pct(s.mfu)], ["HFU", pct(s.hfu)],
     ["bubble", pct(s.bubble_fraction)], ["exposed comm", pct(s.exposed_comm_fraction)],
     ["exposed comm by kind", exposedText(s)],
     ["host-bound", pct(s.host_fraction)], ["tokens/s", num(s.tokens_per_s)],
     ["TFLOP/s per GPU", num(s.tflops_per_gpu)],
     ["memory per GPU", fmtBytes(s.memory_per_gpu_bytes.total)],
     ["layout", layout(s.parallelism)],
     ["GPUs", String(s.world_size)], ["microbatches", String(s.microbatches)]
    ].forEach(function (c) { var d = el("div", {"class": "card"}, cards); el("b", {}, d, c[1]); el("span", {}, d, c[0]); });
  }

  // A zoomable timeline: one row per pipeline stage, wheel to zoom, drag to pan.
  function timeline(parent, tl) {
    var W = 1100, left = 70, rowH = 18, top = 6, H = top + tl.rows * (rowH + 3) + 30;
    var bar = el("div", {}, parent);
    var reset = el("button", {type: "button"}, bar, "reset zoom");
    el("span", {"class": "note"}, bar, "wheel: zoom, drag: pan; data-parallel replica 0, one row per stage");
    var s = svg(parent, W, H, "timeline");
    var lo = 0, hi = tl.end_s || 1, plotW = W - left - 14;
    var g = el("svg:g", {}, s), axis = el("svg:g", {"class": "axis"}, s);
    for (var r = 0; r < tl.rows; r++) {
      el("svg:text", {x: 4, y: top + r * (rowH + 3) + 13}, s, "stage " + r);
    }
    function x(t) { return left + (t - lo) / (hi - lo) * plotW; }
    function draw() {
      while (g.firstChild) g.removeChild(g.firstChild);
      while (axis.firstChild) axis.removeChild(axis.firstChild);
      for (var r = 0; r < tl.rows; r++)
        el("svg:rect", {x: left, y: top + r * (rowH + 3), width: plotW, height: rowH, fill: "#eceef2"}, g);
      tl.blocks.forEach(function (b) {
        if (b[5] < lo || b[4] > hi) return;
        var x0 = Math.max(left, x(b[4])), x1 = Math.min(left + plotW, x(b[5]));
        var rect = el("svg:rect", {x: x0.toFixed(2), y: top + b[0] * (rowH + 3),
          width: Math.max(0.5, x1 - x0).toFixed(2), height: rowH, fill: passFill(b[1], b[3]),
          "class": "pass " + b[3]}, g);
        el("svg:title", {}, rect, b[3] + " microbatch " + b[1] + (tl.chunks > 1 ? " chunk " + b[2] : "") +
          ": " + fmtTime(b[4]) + " - " + fmtTime(b[5]));
      });
      var y = top + tl.rows * (rowH + 3) + 2;
      el("svg:line", {x1: left, x2: left + plotW, y1: y, y2: y}, axis);
      ticks(lo, hi, 8).forEach(function (t) {
        el("svg:line", {x1: x(t), x2: x(t), y1: y, y2: y + 4}, axis);
        el("svg:text", {x: x(t) - 14, y: y + 16}, axis, fmtTime(t));
      });
    }
    s.addEventListener("wheel", function (e) {
      e.preventDefault();
      var rect = s.getBoundingClientRect();
      var t = lo + (e.clientX - rect.left - left) / plotW * (hi - lo);
      var k = e.deltaY < 0 ? 0.8 : 1.25;
      lo = Math.max(0, t - (t - lo) * k); hi = Math.min(tl.end_s, t + (hi - t) * k);
      draw();
    });
    var drag = null;
    s.addEventListener("mousedown", function (e) { drag = {x: e.clientX, lo: lo, hi: hi}; });
    window.addEventListener("mouseup", function () { drag = null; });
    s.addEventListener("mousemove", function (e) {
      if (!drag) return;
      var dt = (e.clientX - drag.x) / plotW * (drag.hi - drag.lo);
      dt = Math.max(-drag.lo, Math.min(tl.end_s - drag.hi, -dt));
      lo = drag.lo + dt; hi = drag.hi + dt; draw();
    });
    reset.addEventListener("click", function () { lo = 0; hi = tl.end_s; draw(); });
    draw();
  }

  // Link utilisation over time: a row per link, a column per time bin, darker = busier.
  function heatmap(parent, lk, end_s) {
    if (!lk.series.length) { el("p", {"class": "note"}, parent, "No link carried traffic (ideal network, or one GPU)."); return; }
    var left = 250, cell = 14, bins = lk.series[0].u.length, W = 1100, plotW = W - left - 60;
    var cw = plotW / bins, H = 8 + lk.series.length * cell + 30;
    var s = svg(parent, W, H, "heatmap");
    lk.series.forEach(function (ser, i) {
      var y = 8 + i * cell;
      el("svg:text", {x: 4, y: y + 11}, s, ser.name + " (" + ser.kind + ")");
      ser.u.forEach(function (u, j) {
        if (u <= 0) return;
        var l = Math.round(96 - 70 * Math.min(1, u));
        var r = el("svg:rect", {x: (left + j * cw).toFixed(2), y: y, width: (cw + 0.3).toFixed(2), height: cell - 1,
          fill: "hsl(222,75%," + l + "%)"}, s);
        el("svg:title", {}, r, ser.name + " " + fmtTime(j * lk.bin_s) + ": " + pct(u));
      });
      el("svg:rect", {x: left, y: y, width: plotW, height: cell - 1, fill: "none", stroke: "#e2e5ec"}, s);
    });
    var y = 8 + lk.series.length * cell + 2;
    ticks(0, bins * lk.bin_s, 8).forEach(function (t) {
      var xx = left + t / lk.bin_s * cw;
      el("svg:text", {x: xx - 14, y: y + 14}, s, fmtTime(t));
    });
    el("p", {"class": "note"}, parent, "The " + lk.series.length + " busiest of " + lk.total +
      " links that carried traffic; bins of " + fmtTime(lk.bin_s) + "; white 0%, dark blue 100% of the link's capacity.");
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

  function runSection(run, idx, many) {
    var s = run.summary, sec = el("section", {id: "run-" + idx}, main);
    el("h2", {}, sec, (many ? "Schedule " : "Run: ") + s.schedule);
    summaryCards(sec, s);
    el("h3", {}, sec, "Pipeline timeline");
    timeline(sec, run.timeline);
    el("h3", {}, sec, "Link utilisation over time");
    heatmap(sec, run.links, run.timeline.end_s);
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

  function comparison(runs) {
    var sec = el("section", {id: "comparison"}, main);
    el("h2", {}, sec, "Schedules compared");
    var best = Math.min.apply(null, runs.map(function (r) { return r.summary.iteration_time_s; }));
    table(sec, ["schedule", "iteration", "vs best", "bubble", "exposed comm"]
      .concat(KINDS.map(function (k) { return "exp. " + k; })).concat(["MFU", "memory per GPU"]),
      runs.map(function (r) {
        var s = r.summary;
        return [s.schedule, fmtTime(s.iteration_time_s), "+" + pct(s.iteration_time_s / best - 1), pct(s.bubble_fraction),
                pct(s.exposed_comm_fraction)].concat(exposedKinds(s))
          .concat([pct(s.mfu), fmtBytes(s.memory_per_gpu_bytes.total)]);
      }));
    var W = 1100, left = 120, bh = 20, H = 10 + runs.length * (bh + 6) + 10, pw = W - left - 260;
    var worst = Math.max.apply(null, runs.map(function (r) { return r.summary.iteration_time_s; }));
    var s = svg(sec, W, H, "compare-bars");
    runs.forEach(function (r, i) {
      var y = 10 + i * (bh + 6), w = r.summary.iteration_time_s / worst * pw;
      el("svg:text", {x: 4, y: y + 14}, s, r.summary.schedule);
      el("svg:rect", {x: left, y: y, width: w.toFixed(2), height: bh, fill: "hsl(" + hue(i).toFixed(1) + ",55%,55%)"}, s);
      el("svg:text", {x: left + w + 6, y: y + 14}, s, fmtTime(r.summary.iteration_time_s) + ", bubble " + pct(r.summary.bubble_fraction));
    });
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

  function sweep(sw) {
    var sec = el("section", {id: "sweep"}, main);
    el("h2", {}, sec, "Sweep: ranked by throughput");
    var valid = sw.rows.filter(function (r) { return r.summary; });
    var invalid = sw.rows.length - valid.length;
    el("p", {"class": "note"}, sec, sw.rows.length + " combinations: " + valid.length + " simulated, " + invalid +
      " not valid. Layouts that fit in HBM first, each group by throughput.");
    table(sec, ["rank"].concat(sw.keys, ["tokens/s", "iteration", "MFU", "bubble", "memory per GPU", "fits HBM"]),
      valid.slice(0, 60).map(function (r, i) {
        var s = r.summary;
        return [String(i + 1)].concat(sw.keys.map(function (k) { return r.settings[k]; }),
          [num(s.tokens_per_s), fmtTime(s.iteration_time_s), pct(s.mfu), pct(s.bubble_fraction),
           fmtBytes(s.memory_per_gpu_bytes.total), r.fits_hbm ? "yes" : "no"]);
      }), 1 + sw.keys.length);
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
      num(c.simulated) + " simulated, " + num(c.confirmed) + " under the " + p.network + " network.");
    table(sec, ["#", "layout", "iteration", p.objective, "MFU", "memory per GPU", "bubble", "exposed comm."],
      p.top.map(function (t, i) {
        var f = t.figures;
        return [String(i + 1), t.layout, fmtTime(f.iteration_time_s), value(f), pct(f.mfu),
                fmtBytes(f.memory_per_gpu_bytes), pct(f.bubble_fraction), pct(f.exposed_comm_fraction)];
      }), 2);
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

  (D.warnings || []).forEach(function (w) { el("div", {"class": "warn"}, main, w); });
  if (D.runs && D.runs.length > 1) comparison(D.runs);
  (D.runs || []).forEach(function (r, i) { runSection(r, i, D.runs.length > 1); });
  if (D.sweep) sweep(D.sweep);
  if (D.plan) plan(D.plan);
  if (D.validation) validation(D.validation);
  document.body.setAttribute("data-status", errors.length ? "errors" : "rendered");
  // The one console line a report prints (tests/e2e/html_report.py expects exactly this).
  if (!errors.length) console.log("clustersim-report: rendered");
})();
