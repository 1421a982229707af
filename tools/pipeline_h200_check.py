#!/usr/bin/env python3
"""Issue 37's bar for the public 2 x H200 pipeline runs (the `pipeline-h200` validation family):
the mean absolute percentage error over the family's cases, and every ordering of two schedules at
one microbatch count that the measurement settles, predicted the same way.

The cases are the `pipe-h200-*` rows of tests/validation/cases.yaml (h = 2048: GPipe, 1F1B and
interleaved 1F1B with v = 2 at 2, 4, 8 and 16 microbatches); each is run with
`clustersim run EXPERIMENT --set ... --json` and its `iteration_time_s` compared with the row's
`published` value (the median of five runs). The five runs of each schedule and microbatch count
come from tests/validation/data/h200-pipeline-runtime.json (`iteration_ms_all`).

Ordering: two schedules at one microbatch count are settled when their five runs do not overlap
(the slowest run of one is faster than the fastest of the other); the prediction must order them
the same way (a tie counts as a miss). Pairs whose runs overlap are listed and not counted.

Usage: tools/pipeline_h200_check.py [--binary build/bin/clustersim] [--check] [--max-mape 4]
--check exits with status 1 when the MAPE is above --max-mape percent or a settled ordering is
predicted the other way. Python 3 standard library only.
"""
import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VALIDATION = os.path.join(ROOT, "tests", "validation")
CASES = os.path.join(VALIDATION, "cases.yaml")
RUNS = os.path.join(VALIDATION, "data", "h200-pipeline-runtime.json")
FAMILY = "pipeline-h200"
# The measured file names interleaved "interleaved (v=2)"; the cases name it by the schedule key.
MEASURED_NAME = {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved": "interleaved (v=2)"}


def family_cases():
    """The family's rows as (id, experiment path, [--set values], published seconds)."""
    rows = []
    with open(CASES, encoding="utf-8") as f:
        for line in f:
            if f'family: "{FAMILY}"' not in line:
                continue
            case_id = re.search(r'id: "([^"]+)"', line).group(1)
            experiment = re.search(r'experiment: "([^"]+)"', line).group(1)
            sets = re.findall(r'"([^"]+)"', re.search(r"set: \[([^\]]*)\]", line).group(1))
            published = float(re.search(r"published: ([0-9.eE+-]+)", line).group(1))
            rows.append((case_id, os.path.join(VALIDATION, experiment), sets, published))
    if not rows:
        sys.exit(f"pipeline_h200_check: no case of family {FAMILY} in {CASES}")
    return rows


def setting(sets, key):
    for s in sets:
        k, _, v = s.partition("=")
        if k == key:
            return v
    raise SystemExit(f"pipeline_h200_check: a case does not set {key}: {sets}")


def predict(binary, experiment, sets):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "summary.json")
        cmd = [binary, "run", experiment, "--json", out]
        for s in sets:
            cmd += ["--set", s]
        # stderr carries the expected "vpp = 2 is ignored" warning of gpipe and 1f1b.
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out, encoding="utf-8") as f:
            return json.load(f)["iteration_time_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "clustersim"))
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--max-mape", type=float, default=4.0, help="percent")
    args = ap.parse_args()

    with open(RUNS, encoding="utf-8") as f:
        measured_runs = json.load(f)["runs"]
    runs_of = {(r["schedule"], r["microbatches"]): r["iteration_ms_all"] for r in measured_runs}

    rows = []
    for case_id, experiment, sets, published in family_cases():
        schedule = setting(sets, "schedule")
        m = int(setting(sets, "training.global_batch_size"))  # micro-batch 1, dp 1
        predicted = predict(args.binary, experiment, sets)
        rows.append({"id": case_id, "schedule": schedule, "m": m, "published": published,
                     "predicted": predicted, "runs": runs_of[(MEASURED_NAME[schedule], m)]})

    print("| case | measured median (ms) | five runs (ms) | predicted (ms) | error |")
    print("|---|---|---|---|---|")
    errors = []
    for r in rows:
        err = r["predicted"] / r["published"] - 1
        errors.append(abs(err))
        print(f"| {r['id']} | {r['published'] * 1e3:.2f} | {min(r['runs']):.1f}-{max(r['runs']):.1f}"
              f" | {r['predicted'] * 1e3:.2f} | {err * 100:+.1f}% |")
    mape = 100 * sum(errors) / len(errors)
    print(f"\nMAPE over {len(rows)} cases: {mape:.2f}% (bar: at most {args.max_mape:g}%)\n")

    print("| m | pair | measured (five runs) | predicted | verdict |")
    print("|---|---|---|---|---|")
    settled = wrong = 0
    for a, b in itertools.combinations(rows, 2):
        if a["m"] != b["m"]:
            continue
        if max(a["runs"]) < min(b["runs"]):
            faster, slower = a, b
        elif max(b["runs"]) < min(a["runs"]):
            faster, slower = b, a
        else:
            print(f"| {a['m']} | {a['schedule']} / {b['schedule']} | runs overlap "
                  f"({min(a['runs']):.1f}-{max(a['runs']):.1f} and "
                  f"{min(b['runs']):.1f}-{max(b['runs']):.1f}) | "
                  f"{a['predicted'] * 1e3:.2f} / {b['predicted'] * 1e3:.2f} | not settled |")
            continue
        settled += 1
        kept = faster["predicted"] < slower["predicted"]
        wrong += not kept
        print(f"| {a['m']} | {faster['schedule']} < {slower['schedule']} | "
              f"{max(faster['runs']):.1f} < {min(slower['runs']):.1f} | "
              f"{faster['predicted'] * 1e3:.2f} vs {slower['predicted'] * 1e3:.2f} | "
              f"{'kept' if kept else 'REVERSED'} |")
    print(f"\nsettled orderings: {settled}, predicted the same way: {settled - wrong}")

    if args.check and (mape > args.max_mape or wrong):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
