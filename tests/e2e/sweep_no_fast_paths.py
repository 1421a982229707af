#!/usr/bin/env python3
"""`clustersim sweep --no-fast-paths` must print the table a sweep with its fast paths prints, byte
for byte, and write the same --json file but for the fields that say how each run was computed
(`wall_time_s`, `events`, `fold`). The fast sweep keeps a cache across its runs (parsed files,
built topologies, the replay's scratch, the networks' kept plans and capacities) and digests a
table-only run's links from a link sketch (outside `flow`) or a reused link accounting (under
`flow`); the plain one builds everything per combination and digests each summary's own link list.
The cases cover the three networks, repeats (runs the table lists once), invalid combinations and
several shapes. Usage: sweep_no_fast_paths.py CLUSTERSIM_BINARY"""
import json
import os
import subprocess
import sys
import tempfile

binary = os.path.abspath(sys.argv[1])
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
default = os.path.join(root, "workloads", "default.yaml")
pipeline = os.path.join(root, "tests", "golden", "experiments", "pipeline-4-stages.yaml")
HOW = ("wall_time_s", "events", "fold")
failures = []

CASES = {
    # 16 combinations of GPT-3 175B on 256 GPUs: tp 1 does not fit in HBM, interleaved needs vpp 2
    # (not valid) and 1f1b ignores vpp (repeats); analytical: replica folding and the link sketch.
    "analytical": [default, "--vary", "parallelism.tp=1,8", "--vary", "parallelism.pp=4,16",
                   "--vary", "parallelism.vpp=1,2", "--vary", "schedule=1f1b,interleaved",
                   "--set", "network.model=analytical"],
    # The same under `ideal`.
    "ideal": [default, "--vary", "parallelism.tp=4,8", "--vary", "schedule=1f1b,interleaved",
              "--vary", "parallelism.vpp=1,2", "--set", "network.model=ideal"],
    # A four-stage pipeline on one DGX H100 node under `flow` (member folding, the reused link
    # accounting): every schedule family, two batch sizes.
    "flow": [pipeline, "--set", "topology.nodes=1", "--vary", "schedule=gpipe,1f1b,zb-h1,zb-v",
             "--vary", "training.global_batch_size=16,32"],
}


def sweep(args, out, name, plain, with_json):
    argv = [binary, "sweep"] + args + (["--no-fast-paths"] if plain else [])
    json_path = os.path.join(out, f"{name}-{'plain' if plain else 'fast'}.json")
    if with_json:
        argv += ["--json", json_path]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        failures.append(f"{name}{' --no-fast-paths' if plain else ''}: exit {r.returncode}: "
                        f"{r.stderr.strip()}")
        return None, None
    rows = None
    if with_json:
        with open(json_path) as f:
            rows = json.load(f)
        for row in rows:
            if "summary" in row:
                row["summary"] = {k: v for k, v in row["summary"].items() if k not in HOW}
    return r.stdout, rows


with tempfile.TemporaryDirectory() as out:
    for name, args in CASES.items():
        for with_json in (False, True):
            label = name + (" --json" if with_json else "")
            fast_table, fast_rows = sweep(args, out, name, False, with_json)
            plain_table, plain_rows = sweep(args, out, name, True, with_json)
            if fast_table is None or plain_table is None:
                continue
            if "not valid" not in fast_table and name == "analytical":
                failures.append(f"{label}: no invalid combination; the case tests less")
            if fast_table != plain_table:
                failures.append(f"{label}: the tables differ")
            if fast_rows != plain_rows:
                failures.append(f"{label}: the --json rows differ (but for {HOW})")

for f in failures:
    print("FAIL", f)
print(f"sweeps without fast paths: {2 * len(CASES)} compared, {len(failures)} failures")
sys.exit(1 if failures else 0)
