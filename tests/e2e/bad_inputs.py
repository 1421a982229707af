#!/usr/bin/env python3
"""Bad-input corpus: every file in tests/bad_inputs/ must make `clustersim run` exit with code 2,
print the message in its `# expect:` line (which names file:line:column where there is one), and
leave no output file behind. Usage: bad_inputs.py CLUSTERSIM_BINARY"""
import os
import shlex
import subprocess
import sys
import tempfile

binary = os.path.abspath(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
corpus = os.path.join(here, "..", "bad_inputs")
failures = []
cases = 0


def check(name, argv, expect, cwd, outputs=("--json", "--trace")):
    global cases
    cases += 1
    with tempfile.TemporaryDirectory() as out:
        for option in outputs:
            argv = argv + [option, os.path.join(out, option.strip("-") + ".json")]
        r = subprocess.run([binary] + argv, cwd=cwd, capture_output=True, text=True, timeout=120)
        left = os.listdir(out)
    problems = []
    if r.returncode != 2:
        problems.append(f"exit code {r.returncode}, expected 2")
    if expect not in r.stderr:
        problems.append(f"stderr lacks {expect!r}")
    if left:
        problems.append(f"left files behind: {left}")
    if "terminate called" in r.stderr or "Traceback" in r.stderr:
        problems.append("crashed")
    if problems:
        failures.append(f"{name}: {'; '.join(problems)}\n  stderr: {r.stderr.strip()}")


for f in sorted(os.listdir(corpus)):
    if not f.endswith(".yaml"):
        continue
    expect, args = None, []
    with open(os.path.join(corpus, f)) as fh:
        for line in fh:
            if line.startswith("# expect: "):
                expect = line[len("# expect: "):].rstrip("\n")
            elif line.startswith("# args: "):
                args = shlex.split(line[len("# args: "):])
    if expect is None:
        failures.append(f"{f}: no '# expect:' line")
        continue
    check(f, ["run", f] + args, expect, corpus)

# Inputs that are not files in the corpus.
check("missing experiment", ["run", "does-not-exist.yaml"], "does-not-exist.yaml: no such file", corpus)
check("directory", ["run", "."], ".: is a directory", corpus)
check("unknown option", ["run", "unknown-top-key.yaml", "--bogus"], "--bogus", corpus)
# A first word that is no command names it and the commands (CLI11 alone said "A subcommand is
# required"), in JSON too under --log-json.
check("unknown command", ["bogus"],
      "error: unknown command 'bogus'; expected run, compare, sweep, plan, topology, collective, "
      "validate, calibrate, chakra or diff", corpus, outputs=())
check("unknown command, --log-json", ["--log-json", "bogus"],
      '{"level":"error","kind":"error","message":"unknown command \'bogus\'', corpus, outputs=())
check("--set without =", ["run", "unknown-top-key.yaml", "--set", "parallelism.tp"],
      "expected key=value", corpus)

# Chakra export writes DDP and ZeRO-1 only (issue 16): ZeRO-3 is refused, nothing written.
check("chakra export of zero3",
      ["chakra", "export", "sharding-unknown.yaml", "--set", "parallelism.sharding=zero3"],
      "sharding-unknown.yaml:4:14: 'parallelism': chakra export does not write sharded data "
      "parallelism beyond ZeRO-1 (sharding zero3)", corpus, outputs=("--out",))

# Streams that never end, numbers that would overflow or exhaust memory, and command-line values,
# each named in the message (issue #20).
check("endless experiment", ["run", "/dev/zero"],
      "/dev/zero: holds more than the 64 MiB an input file may hold", corpus)
many = []
for i in range(16):
    many += ["--vary", f"training.seed{i}=" + ",".join(str(v) for v in range(16))]
check("2^64 combinations", ["sweep", "unknown-top-key.yaml"] + many,
      "--vary: the 16 --vary options give 16 x 16 x", corpus, outputs=("--json",))
check("negative --top", ["sweep", "world-size.yaml", "--vary", "schedule=1f1b,gpipe", "--top", "-1"],
      "--top -1: expected a number of rows, 0 or more", corpus, outputs=("--json",))
# plan: an unknown --fix key, an objective that does not exist or has no figure, no valid layout.
small = os.path.join(here, "..", "api", "data", "plan-small.yaml")
plan = ["plan", small, "--set", "topology.nodes=2", "--schedules", "1f1b"]
check("plan --fix unknown key", plan + ["--fix", "model.layers=4"],
      "--fix model.layers=4: unknown key 'model.layers'", corpus, outputs=("--json",))
check("plan bad objective", plan + ["--objective", "speed"],
      "--objective speed: unknown objective; expected time, mfu, cost or energy", corpus,
      outputs=("--json",))
check("plan energy without board power", plan + ["--objective", "energy"],
      "the GPU catalogue gives no board power for H100-SXM", corpus, outputs=("--json",))
check("plan cost without price", plan + ["--objective", "cost"],
      "--objective cost: needs --gpu-hour-price", corpus, outputs=("--json",))
check("plan --fix that does not divide", plan + ["--fix", "parallelism.tp=3"],
      "--fix parallelism.tp=3: does not divide the experiment's 8 GPUs", corpus,
      outputs=("--json",))
check("plan no layout fits", plan + ["--headroom", "0.999"],
      "layouts searched is valid and fits in 80 MB per GPU", corpus, outputs=("--json",))
topology = os.path.join(here, "..", "..", "topologies", "h200-2gpu-nvlink.yaml")
check("--ranks twice", ["collective", "--topology", topology, "--ranks", "0,1,1"],
      "--ranks 0,1,1: GPU 1 is listed twice", corpus, outputs=("--json",))
check("--algo that does not apply",
      ["collective", "--topology", topology, "--op", "all_to_all", "--algo", "ring"],
      "--algo ring: algorithm 'ring' does not apply to all_to_all", corpus, outputs=("--json",))
check("collective beyond the clock",
      ["collective", "--topology", topology, "--sizes", "8000000TB"],
      "--sizes 8000000000000000000B: a collective of this size takes longer than the simulator's "
      "clock can hold", corpus, outputs=("--json",))
superpod = os.path.join(here, "..", "..", "topologies", "dgx-h100-superpod.yaml")
check("node far beyond the devices", ["topology", os.path.join(corpus, "files", "node-far.yaml")],
      "node-far.yaml:5:5: device 'gpu1' is on node 99999999, but 2 devices are listed", corpus,
      outputs=("--json",))
# 10^7 nodes of 8 GPUs, 8 NICs and an NVSwitch: hundreds of GB, refused before anything is built.
check("10^7 nodes", ["topology", superpod, "--set", "nodes=10000000"],
      "--set nodes=10000000: this topology would need about", corpus, outputs=("--json",))
check("20,000-GPU NVLink mesh",
      ["topology", superpod, "--set", "node.gpus=20000", "--set", "node.intra.kind=nvlink"],
      "GB of memory to build (", corpus, outputs=("--json",))
check("10^8 NICs per node", ["topology", superpod, "--set", "node.nics.count=100000000"],
      "'node.nics.count': must be at most 65536 NICs per node, found 100000000", corpus,
      outputs=("--json",))
valid = os.path.join(here, "..", "..", "workloads", "h200-pipeline-profile.yaml")
check("--max-memory below the run's estimate",
      ["run", valid, "--set", "parallelism.tp=1", "--set", "training.global_batch_size=100000000",
       "--max-memory", "1GiB"],
      "microbatches per replica), more than the limit of 1.074 GB", corpus)
# 128 combinations of the default experiment, each summary about 190 kB (it lists every link):
# about 24 MB kept for --json, above a 20 MiB limit that the topology itself (about 18 MB) fits.
# Refused after the first combination, with nothing written.
default = os.path.join(here, "..", "..", "workloads", "default.yaml")
check("sweep --json summaries above --max-memory",
      ["sweep", default, "--vary",
       "training.global_batch_size=" + ",".join(str(256 * k) for k in range(1, 129)),
       "--set", "network.model=analytical", "--max-memory", "20MiB"],
      "--json: keeping every combination's summary would take about", corpus, outputs=("--json",))
check("--max-memory unreadable", ["run", valid, "--max-memory", "lots"],
      "--max-memory lots: expected a positive size", corpus)
# Jobs files (docs/yaml/jobs.md): options that belong to one experiment are refused, and a jobs
# file given to a command that takes one experiment says so.
two_jobs = os.path.join(here, "..", "..", "workloads", "two-jobs.yaml")
check("jobs file with --set", ["run", two_jobs, "--set", "parallelism.tp=2"],
      "--set does not apply to a jobs file", corpus)
check("jobs file with --trace-links all", ["run", two_jobs, "--trace-links", "all"],
      "--trace-links all does not apply to a jobs file", corpus)
check("jobs file with an unknown trace extension", ["run", two_jobs, "--trace", "out.txt"],
      "out.txt", corpus, outputs=("--json",))
check("jobs file above --max-memory", ["run", two_jobs, "--max-memory", "40MiB"],
      "the shared run of these jobs would need at least", corpus)
check("jobs file given to compare", ["compare", two_jobs, "--schedules", "1f1b"],
      "two-jobs.yaml:11:3: 'jobs': a jobs file (several jobs on one topology) runs with "
      "`clustersim run`", corpus, outputs=("--json",))

for f in failures:
    print("FAIL", f)
print(f"bad inputs: {cases - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
