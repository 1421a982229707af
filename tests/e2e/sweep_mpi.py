#!/usr/bin/env python3
"""`mpirun -n N clustersim sweep` must print the same table and write the same --json file as one
process, for N = 2 and 3, with nothing on stderr (only rank 0 speaks); bad input, found by every
rank or by rank 0 after the gather, must exit 2 with the message once and leave no rank waiting.
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


def run(ranks, args, out):
    """Runs the sweep in one process (ranks 0) or under mpirun; returns (code, stdout, stderr,
    --json text or None)."""
    json_path = os.path.join(out, f"sweep-{ranks}.json")
    argv = [binary, "sweep"] + args + ["--json", json_path]
    if ranks:
        argv = [mpiexec, "-n", str(ranks)] + argv
    try:
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    except subprocess.TimeoutExpired:
        failures.append(f"{ranks} ranks: no answer after 60 s (a rank left waiting?)")
        return None
    text = None
    if os.path.exists(json_path):
        with open(json_path) as f:
            text = f.read()
    return r.returncode, r.stdout, r.stderr, text


def stable(json_text):
    # Host time of each run: the one field two serial runs do not share either.
    return re.sub(r'"wall_time_s": [^,\n]+', '"wall_time_s": 0', json_text)


def same_as_serial(name, args, must_contain):
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
        for ranks in (2, 3):
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
