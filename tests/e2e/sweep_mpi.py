#!/usr/bin/env python3
"""`mpirun -n N clustersim sweep` must print the same table and write the same --json file as one
process, for N = 2 and 3, with nothing on stderr (only rank 0 speaks); bad input, found by every
rank or by rank 0 after the gather, must exit 2 with the message once and leave no rank waiting;
a failure found while running, on any rank, must be reported as one process reports it.
Which rank runs which combination is decided at run time (api/sweep.cpp, ShapeDeal); the cases
below are built so that the deal's rules (a shape's chunks to the rank on it, untouched shapes
next, then chunks of other ranks' shapes) come into play whatever the timing.
Usage: sweep_mpi.py CLUSTERSIM_BINARY MPIEXEC"""
import os
import re
import subprocess
import sys
import tempfile

binary = os.path.abspath(sys.argv[1])
mpiexec = sys.argv[2]
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
experiment = os.path.join(root, "workloads", "default.yaml")

env = dict(os.environ)
env.update({
    # CI runs as root in a container with 2 cores: allow root, and more ranks than cores.
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    # Not needed on CI today, but containers often forbid the ptrace-based single-copy (CMA) path
    # of shared memory, which then fails loudly; plain copies are as fast for these few bytes.
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
})
failures = []

# 2 x 2 x 2 x 2 = 16 combinations of GPT-3 175B on 256 GPUs: tp 1 does not fit in HBM,
# interleaved needs vpp 2 (not valid) and 1f1b ignores vpp (repeats). The analytical network
# keeps it well under a second.
SWEEP = [experiment, "--vary", "parallelism.tp=1,8", "--vary", "parallelism.pp=4,16",
         "--vary", "parallelism.vpp=1,2", "--vary", "schedule=1f1b,interleaved",
         "--set", "network.model=analytical"]


def run(ranks, args, out, json_path=None):
    """Runs the sweep in one process (ranks 0) or under mpirun; returns (code, stdout, stderr,
    --json text or None). --json goes to a file of its own in `out` unless `json_path` is given."""
    json_path = json_path or os.path.join(out, f"sweep-{ranks}.json")
    argv = [binary, "sweep"] + args + ["--json", json_path]
    if ranks:
        argv = [mpiexec, "-n", str(ranks)] + argv
    try:
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    except subprocess.TimeoutExpired:
        failures.append(f"{ranks} ranks: no answer after 60 s (a rank left waiting?)")
        return None
    text = None
    if os.path.exists(json_path) and json_path.startswith(out):
        with open(json_path) as f:
            text = f.read()
    return r.returncode, r.stdout, r.stderr, text


def stable(json_text):
    # Host time of each run: the one field two serial runs do not share either.
    return re.sub(r'"wall_time_s": [^,\n]+', '"wall_time_s": 0', json_text)


def same_as_serial(name, args, must_contain, all_ranks=(2, 3)):
    with tempfile.TemporaryDirectory() as out:
        serial = run(0, args, out)
        if serial is None:
            return
        code, stdout, stderr, text = serial
        if code != 0 or text is None:
            failures.append(f"{name}: serial run exit {code}: {stderr.strip()}")
            return
        for needle in must_contain:
            if needle not in stdout:
                failures.append(f"{name}: serial table lacks {needle!r}; the case tests less")
        for ranks in all_ranks:
            got = run(ranks, args, out)
            if got is None:
                continue
            code, mpi_stdout, mpi_stderr, mpi_text = got
            where = f"{name}, mpirun -n {ranks}"
            if code != 0:
                failures.append(f"{where}: exit {code}: {mpi_stderr.strip()}")
                continue
            if mpi_stdout != stdout:
                failures.append(f"{where}: stdout differs\n--- serial\n{stdout}--- mpi\n{mpi_stdout}")
            if mpi_text is None or stable(mpi_text) != stable(text):
                failures.append(f"{where}: --json differs from the serial one")
            if mpi_stderr:
                failures.append(f"{where}: printed on stderr: {mpi_stderr.strip()}")


def fails_once(name, args, expect):
    with tempfile.TemporaryDirectory() as out:
        got = run(2, args, out)
        if got is None:
            return
        code, stdout, stderr, text = got
        if code != 2:
            failures.append(f"{name}: exit {code}, expected 2\n  stderr: {stderr.strip()}")
        if stderr.count(expect) != 1:
            failures.append(f"{name}: {expect!r} printed {stderr.count(expect)} times, not once")
        if stdout or text is not None:
            failures.append(f"{name}: wrote a table or a --json file")


def fails_as_serial(name, args, expect, json_path=None, all_ranks=(2, 3)):
    """A sweep that fails while it runs: under mpirun -n 2 and -n 3 it must exit with the serial
    run's code and print the serial run's message, once (the earliest failure in enumeration
    order, wherever it was found), write nothing, and leave no rank waiting."""
    with tempfile.TemporaryDirectory() as out:
        serial = run(0, args, out, json_path)
        if serial is None:
            return
        code, stdout, stderr, _ = serial
        if code != 2 or expect not in stderr:
            failures.append(f"{name}: serial run exit {code}, stderr {stderr.strip()!r}; "
                            f"expected exit 2 and {expect!r}: the case tests less")
            return
        for ranks in all_ranks:
            got = run(ranks, args, out, json_path)
            if got is None:
                continue
            mpi_code, mpi_stdout, mpi_stderr, mpi_text = got
            where = f"{name}, mpirun -n {ranks}"
            if mpi_code != code:
                failures.append(f"{where}: exit {mpi_code}, serial {code}: {mpi_stderr.strip()}")
            # mpirun adds its own lines after a rank's non-zero exit: the message is rank 0's
            # first line.
            if mpi_stderr.splitlines()[:1] != stderr.splitlines()[:1] or \
                    mpi_stderr.count(expect) != 1:
                failures.append(f"{where}: stderr differs\n--- serial\n{stderr}--- mpi\n"
                                f"{mpi_stderr}")
            if mpi_stdout or mpi_text is not None:
                failures.append(f"{where}: wrote a table or a --json file")


same_as_serial("16 combinations", SWEEP,
               ["NO\n", "not valid:", "gave the same result"])
# Eight shapes (pp x schedule) of two combinations each (micro_batch_size, which does not change a
# run's shape): 2 ranks take four whole shapes each; 3 ranks take two whole shapes each and share
# the combinations of the two shapes left over.
same_as_serial("8 shapes of 2", [experiment, "--vary", "parallelism.pp=2,4,8,16",
                                 "--vary", "schedule=1f1b,gpipe",
                                 "--vary", "training.micro_batch_size=1,2",
                                 "--set", "network.model=analytical"], ["gpipe", "1f1b"])
# Fewer combinations than ranks: rank 2 has none.
same_as_serial("2 combinations", [experiment, "--vary", "schedule=gpipe,1f1b",
                                  "--set", "network.model=analytical"], ["gpipe", "1f1b"])
# One shape (only training. keys vary) of 4 combinations: rank 0 starts on it and the other
# ranks take chunks of it from the start (one each). Three ranks only, to keep the test short
# (under the sanitizers a run of this experiment takes about a second).
same_as_serial("1 shape, 3 ranks", [experiment,
                                    "--vary", "training.micro_batch_size=4,8",
                                    "--vary", "training.recompute=selective,full",
                                    "--set", "network.model=analytical"], ["NO\n", "full"],
               all_ranks=(3,))
# Two shapes of very unequal cost: tp 3 does not divide the 256 GPUs (4 combinations not valid,
# no run), tp 8 runs all 4. The rank on tp 3 is done at once and takes chunks of tp 8's; of 3
# ranks, the third has no shape of its own from the start.
same_as_serial("2 shapes, unequal", [experiment, "--vary", "parallelism.tp=3,8",
                                     "--vary", "training.global_batch_size=256,512",
                                     "--vary", "training.micro_batch_size=1,2",
                                     "--set", "network.model=analytical"],
               ["not valid:", "512"])
# A failure while running, on a rank other than 0: --json keeps every summary, and 384
# combinations of about 171 KB each (66 MB) are more than --max-memory (50 MiB, 52.4 MB; the
# topology needs 18.4 MB, and each combination's run is estimated at 50.3 MB at most, which
# counts against the limit too), found at the first valid combination, index 1 (tp 8; index 0
# has tp 3). Index 1 opens the
# tp 8 shape, which rank 1 starts with. The other ranks find the same error at later indices,
# each with its own combination's summary size in the message: the earliest must be reported.
fails_as_serial("summaries above --max-memory",
                [experiment, "--vary", "training.global_batch_size=256,512,768,1024,1280,1536,"
                                       "1792,2048",
                 "--vary", "training.micro_batch_size=1,2",
                 "--vary", "training.recompute=none,selective,full",
                 "--vary", "training.seq_length=1024,2048",
                 "--vary", "parallelism.sequence_parallel=false,true", "--vary", "parallelism.tp=3,8",
                 "--set", "network.model=analytical", "--max-memory", "50MiB"],
                "more than --max-memory")
# Refused by rank 0 at its first combination (SweepOptions::on_loaded): --json names the model
# file every combination reads. The other two ranks are told to stop and still reach the gather;
# the file is kept. (A failing mpirun takes over a second to tear down: three ranks only.)
with tempfile.TemporaryDirectory() as scratch:
    model = os.path.join(scratch, "model.yaml")
    model_text = "layers: 16\nhidden_size: 2048\nattention_heads: 16\nvocab_size: 50304\n"
    with open(model, "w") as f:
        f.write(model_text)
    fails_as_serial("--json is the model file",
                    [experiment, "--set", "model.from=" + model,
                     "--vary", "schedule=1f1b,gpipe,interleaved",
                     "--vary", "training.micro_batch_size=1,2",
                     "--set", "network.model=analytical"],
                    "is the model file", json_path=model, all_ranks=(3,))
    with open(model) as f:
        if f.read() != model_text:
            failures.append("--json is the model file: the model file was replaced")
# Refused by a rank other than 0: two model files varied, --json names the second. Its shape is
# dealt to rank 1 in the first round, and rank 0 never loads it, so the rank that loads a
# combination must refuse it (every rank guards the outputs; rank 0 alone writes them).
with tempfile.TemporaryDirectory() as scratch:
    models = [os.path.join(scratch, name) for name in ("a.yaml", "b.yaml")]
    model_text = "layers: 16\nhidden_size: 2048\nattention_heads: 16\nvocab_size: 50304\n"
    for path in models:
        with open(path, "w") as f:
            f.write(model_text)
    fails_as_serial("--json is a varied model file",
                    [experiment, "--vary", "model.from=" + ",".join(models),
                     "--vary", "training.micro_batch_size=1,2",
                     "--set", "network.model=analytical"],
                    "is the model file", json_path=models[1], all_ranks=(2,))
    with open(models[1]) as f:
        if f.read() != model_text:
            failures.append("--json is a varied model file: the model file was replaced")
# Found by every rank while parsing, before anything is exchanged.
fails_once("bad --vary", [experiment, "--vary", "parallelism.tp"], "expected KEY=VALUE1,VALUE2")
# A command-line error, found by every process's parser in main() before any sweep starts.
fails_once("unknown option", [experiment, "--vary", "schedule=1f1b", "--no-such-option"],
          "--no-such-option")
# Found by rank 0 alone, after the gather.
fails_once("none valid", [experiment, "--vary", "parallelism.tp=3,5"],
           "none of the 2 combinations is a valid experiment")

for f in failures:
    print("FAIL", f)
print(f"sweep_mpi: {len(failures)} failures")
sys.exit(1 if failures else 0)
