#!/usr/bin/env python3
"""Golden end-to-end runs: each line of tests/golden/cases.txt is `NAME: ARGS...` for
`clustersim run`; the summary JSON (less wall_time_s) must equal tests/golden/NAME.json. Each case
also runs twice with a trace to prove byte-identical outputs. UPDATE_GOLDEN=1 rewrites the files
(review the diff before committing); a golden file without a case fails.

With --no-fast-paths the second run of each case turns every fast path off (folding, kept plans
and capacities, batched sends and link sums): its trace must equal the first's byte for byte, and
its summary the golden file with `events`, `fold` and `fold_refused` left out (the fields that
say how the run was computed, not what it gave; in a jobs file's summaries too).
Usage: golden.py CLUSTERSIM_BINARY [--no-fast-paths]"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

binary = os.path.abspath(sys.argv[1])
plain = "--no-fast-paths" in sys.argv[2:]
root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
golden = os.path.join(root, "tests", "golden")
update = os.environ.get("UPDATE_GOLDEN") == "1"
failures, cases = [], 0


# How a run was computed, not what it gave (docs/architecture.md, "One seam for speed"): a jobs
# file's `fold_refused` says why its shared fabric was not folded, empty when no fold was tried.
HOW = ("wall_time_s", "events", "fold", "fold_refused")


def results_only(summary):
    """`summary` without the fields of HOW, also in a jobs file's per-job summaries."""
    s = {k: v for k, v in summary.items() if k not in HOW}
    if "jobs" in s:
        s["jobs"] = [dict(j, shared=results_only(j["shared"]), alone=results_only(j["alone"]))
                     for j in s["jobs"]]
    return s


def run(args, out):
    summary, trace = os.path.join(out, "s.json"), os.path.join(out, "t.json")
    r = subprocess.run([binary, "run"] + args + ["--json", summary, "--trace", trace],
                       cwd=root, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}: {r.stderr.strip()}")
    with open(summary) as f:
        s = json.load(f)
    s.pop("wall_time_s", None)
    with open(trace, "rb") as f:
        return s, f.read()


with open(os.path.join(golden, "cases.txt")) as fh:
    lines = [l.strip() for l in fh if l.strip() and not l.startswith("#")]
for line in lines:
    name, args = line.split(":", 1)
    cases += 1
    try:
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            s1, t1 = run(shlex.split(args), a)
            s2, t2 = run(shlex.split(args) + (["--no-fast-paths"] if plain else []), b)
    except Exception as e:  # noqa: BLE001 - report every case
        failures.append(f"{name}: {e}")
        continue
    if plain:
        same = results_only(s1) == results_only(s2)
        if not same or t1 != t2:
            failures.append(f"{name}: --no-fast-paths differs (summary equal but for {HOW}: "
                            f"{same}, trace byte-identical: {t1 == t2})")
    elif s1 != s2 or t1 != t2:
        failures.append(f"{name}: two runs differ (summary equal: {s1 == s2}, trace equal: {t1 == t2})")
    path = os.path.join(golden, name + ".json")
    text = json.dumps(s1, indent=2, sort_keys=False) + "\n"
    if update and not plain:
        with open(path, "w") as f:
            f.write(text)
        continue
    if not os.path.exists(path):
        failures.append(f"{name}: no golden file {path} (run with UPDATE_GOLDEN=1)")
        continue
    with open(path) as f:
        expected = json.load(f)
    if expected != s1:
        diffs = [k for k in set(expected) | set(s1) if expected.get(k) != s1.get(k)]
        failures.append(f"{name}: summary differs from golden in {sorted(diffs)}")

failed_cases = len(failures)
# A golden file whose case was removed or renamed would otherwise linger unchecked.
names = {l.split(":", 1)[0] for l in lines}
for stale in sorted(f[:-5] for f in os.listdir(golden) if f.endswith(".json")):
    if stale not in names:
        failures.append(f"{stale}: golden file {stale}.json has no case in cases.txt (delete it)")

for f in failures:
    print("FAIL", f)
print(f"golden runs: {cases - failed_cases} passed, {failed_cases} failed")
sys.exit(1 if failures else 0)
