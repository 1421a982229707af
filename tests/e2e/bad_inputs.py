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
# A GPU model of the topology's own, unknown to the catalogue and given no board_power.
no_power = os.path.join(here, "..", "api", "data", "plan-no-board-power.yaml")
check("plan energy without board power", ["plan", no_power, "--objective", "energy"],
      "--objective energy: no board power is known for the GPU model X1", corpus,
      outputs=("--json",))
check("plan cost without price", plan + ["--objective", "cost"],
      "--objective cost: needs --gpu-hour-price", corpus, outputs=("--json",))
check("plan --fix that does not divide", plan + ["--fix", "parallelism.tp=3"],
      "--fix parallelism.tp=3: does not divide the experiment's 8 GPUs", corpus,
      outputs=("--json",))
check("plan --fix range backwards", plan + ["--fix", "parallelism.pp=8..2"],
      "--fix parallelism.pp=8..2: the range runs backwards", corpus, outputs=("--json", "--html"))
check("plan --fix set with an unknown choice", plan + ["--fix", "parallelism.sharding=zero1,zero4"],
      "--fix parallelism.sharding=zero1,zero4: unknown value \"zero4\"", corpus,
      outputs=("--json",))
check("plan --fix bounds that leave no layout", plan + ["--fix", "parallelism.tp=16.."],
      "--fix parallelism.tp=16..: no layout is inside these bounds: tp x pp x cp x dp must make "
      "the 8 GPUs", corpus, outputs=("--json",))
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
# 256 combinations of the default experiment, each summary about 190 kB (it lists every link):
# about 49 MB kept for --json, above a 40 MiB limit that the topology itself (about 18 MB) and
# the first combination's run (estimated at 39.3 MB: each combination's run counts against the
# limit too) fit. Refused after the first combination, with nothing written.
default = os.path.join(here, "..", "..", "workloads", "default.yaml")
check("sweep --json summaries above --max-memory",
      ["sweep", default, "--vary",
       "training.global_batch_size=" + ",".join(str(256 * k) for k in range(1, 257)),
       "--set", "network.model=analytical", "--max-memory", "40MiB"],
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


# Fabrics whose tiers multiply (issue 40): 1e8 spines, and a core count (leaf up x spine up) that
# passes an int, refused by the estimate before anything is built (both took over 60 s).
# The estimate names the `up` whose spines and cores take most of it (it named `nodes: 32`).
check("10^8 spines", ["topology", superpod, "--set", "fabric.leaf.up=100000000",
                      "--set", "fabric.leaf.radix=~"],
      "--set fabric.leaf.up=100000000: this topology would need about", corpus,
      outputs=("--json",))
check("core count beyond an int",
      ["topology", superpod, "--set", "nodes=2048", "--set", "fabric.leaf.up=65536",
       "--set", "fabric.leaf.radix=~", "--set", "fabric.spine.up=65536",
       "--set", "fabric.spine.radix=~"],
      "GB of memory to build (", corpus, outputs=("--json",))
# chakra export holds the plan and one rank's ET (written as soon as it is complete): estimated
# before it allocates; 65,536 sequences are 16,384 microbatches per replica, about 6.9 GB.
check("chakra export above --max-memory",
      ["chakra", "export", default, "--set", "training.global_batch_size=65536",
       "--max-memory", "1GiB"],
      "chakra export would hold about", corpus, outputs=("--out",))
# A Megatron-LM flag beyond an int names the flag, not the key it becomes.
check("Megatron flag beyond an int",
      ["run", valid, "--megatron-args", "--num-layers 3000000000"],
      "--megatron-args: --num-layers: expected a positive integer up to 2147483647", corpus)
check("Megatron flag above the layer limit names the flag",
      ["run", valid, "--megatron-args", "--num-layers 2000000"],
      "--megatron-args --num-layers 2000000", corpus)

# Hostile input III (issue 40): the readers of the newer features, each bounded and refusing
# what it cannot read to an end; numbers checked before use; outputs checked before writing.
import gzip
import json
import shutil

hostile = tempfile.mkdtemp(prefix="clustersim-hostile-")
def hostile_file(name, data):
    path = os.path.join(hostile, name)
    with open(path, "wb") as fh:
        fh.write(data if isinstance(data, bytes) else data.encode())
    return path

def fifo(name):
    path = os.path.join(hostile, name)
    os.mkfifo(path)
    return path

def to_zero(name):
    path = os.path.join(hostile, name)
    os.symlink("/dev/zero", path)
    return path

def kernel_trace(extra_event=None, extra_args=None):
    """A PyTorch profiler trace of one GEMM operator and its kernel (as the unit tests' hand
    trace), with one event or some args replaced to be hostile."""
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100,
          "dur": 20, "args": {"External id": 1, "Input Dims": [[4096, 4096], [4096, 4096]],
                              "Input type": ["c10::BFloat16", "c10::BFloat16"]}}
    if extra_args:
        op["args"].update(extra_args)
    kernel = {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7,
              "ts": 1000, "dur": 178, "args": {"External id": 1, "stream": 7, "correlation": 11}}
    events = [op, kernel] + ([extra_event] if extra_event else [])
    return json.dumps({"traceEvents": events})

calibrate = ["calibrate", "--gpu-model", "H200-SXM", "--torch-trace"]
def check_trace(name, path, expect, extra=()):
    check(name, calibrate + [path] + list(extra), expect, corpus, outputs=("--out",))

check_trace("torch trace that is a FIFO", fifo("trace-fifo.json"),
            "trace-fifo.json: is not a regular file (a FIFO): a PyTorch profiler trace is read "
            "to its end, so it must be a regular file of at most 4 GiB")
check_trace("torch trace linked to /dev/zero", to_zero("trace-zero.json"),
            "trace-zero.json: is not a regular file (a character device)")
# 20 MiB of one string, gzipped to about 20 kB: refused at the string's 16 MiB, not inflated whole.
check_trace("gzip bomb of one endless string",
            hostile_file("bomb.json.gz",
                         gzip.compress(b'{"traceEvents": [{"name": "' + b"a" * (20 << 20) + b'"}]}')),
            "a string longer than 16 MiB, the longest a trace may hold")
check_trace("trace nested 1,000 deep", hostile_file("deep.json", '{"traceEvents": ' + "[" * 1000),
            "arrays and objects nested more than 100 deep")
check_trace("kernel duration beyond the clock",
            hostile_file("long-kernel.json", kernel_trace(
                {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2000,
                 "dur": 1e300, "args": {"stream": 7}})),
            "traceEvents entry 2 (byte ")
check_trace("kernel duration beyond the clock names the limit",
            hostile_file("long-kernel2.json", kernel_trace(
                {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2000,
                 "dur": 1e13, "args": {"stream": 7}})),
            "\"dur\" is more than the 9.2e12 microseconds (about 106 days) the simulator's clock holds")
check_trace("tensor dimension 1e30 (a float beyond int64)",
            hostile_file("dims-float.json", kernel_trace(extra_args={"Input Dims": [[1e30, 2], [2, 2]]})),
            "a dimension in \"Input Dims\" is 1e+30; expected a whole number from 0 to 2^40")
check_trace("negative tensor dimension",
            hostile_file("dims-negative.json", kernel_trace(extra_args={"Input Dims": [[-4096, 2], [2, 2]]})),
            "a dimension in \"Input Dims\" is -4096")
check_trace("tensor of more than 2^50 elements",
            hostile_file("dims-product.json",
                         kernel_trace(extra_args={"Input Dims": [[2 ** 40, 2 ** 40], [2, 2]]})),
            "a shape in \"Input Dims\" has more than 2^50 elements")
check_trace("External id 1e300",
            hostile_file("external-id.json", kernel_trace(extra_args={"External id": 1e300})),
            "args \"External id\" is not a whole number within int64")
many_kernels = {"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "k" * 64, "pid": 0, "tid": 7, "ts": i, "dur": 1,
     "args": {"stream": 7}} for i in range(20000)]}
check_trace("trace above --max-memory",
            hostile_file("many-kernels.json", json.dumps(many_kernels)),
            "trace events read so far keep about", extra=("--max-memory", "1MiB"))
# 70 MiB of zeros in an array, gzipped about 1,000 to 1: refused as a bomb once 64 MiB are
# inflated, instead of parsed to the 4 GiB limit (a 4.5 MB gzip of them took minutes).
check_trace("gzip bomb of small numbers",
            hostile_file("bomb-zeros.json.gz",
                         gzip.compress(b'{"traceEvents": [], "x": [' + b"0," * (35 << 20) + b"0]}")),
            "inflates to more than 200 times its compressed size")
check("calibrate --max-memory unreadable",
      calibrate + [hostile_file("ok.json", kernel_trace()), "--max-memory", "lots"],
      "--max-memory lots: expected a positive size", corpus, outputs=("--out",))

# diff: the simulated trace is read whole (64 MiB at most) and its fields are type-checked.
measured = hostile_file("measured.json", kernel_trace())
def check_diff(name, simulated, expect, measured=measured):
    check(name, ["diff", simulated, measured], expect, corpus, outputs=("--json",))

def simulated_trace(slice_fields):
    meta = {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "GPU 0 compute"}}
    step = {"ph": "X", "pid": 1, "tid": 2, "ts": 0, "dur": 10, "name": "F0",
            "args": {"microbatch": 0, "pass": "forward", "layers": 2, "first_layer": 0}}
    step.update(slice_fields)
    return json.dumps({"traceEvents": [meta, step]})

check_diff("diff: simulated trace is a FIFO", fifo("sim-fifo.json"),
           "sim-fifo.json: is not a regular file (a FIFO): a clustersim trace is read to its end")
check_diff("diff: measured trace linked to /dev/zero",
           hostile_file("sim-ok.json", simulated_trace({})),
           "measured-zero.json: is not a regular file (a character device)",
           measured=to_zero("measured-zero.json"))
check_diff("diff: ts of the wrong JSON type",
           hostile_file("sim-ts.json", simulated_trace({"ts": "soon"})),
           "sim-ts.json: traceEvents entry 1: \"ts\" is not a finite number of microseconds")
check_diff("diff: first_layer near INT_MAX",
           hostile_file("sim-layer.json",
                        simulated_trace({"args": {"microbatch": 0, "layers": 2, "first_layer": 2147483647}})),
           "\"first_layer\" is not a whole number from 0 to 1000000")
check_diff("diff: layers as a float beyond int64",
           hostile_file("sim-layers.json",
                        simulated_trace({"args": {"microbatch": 0, "layers": 1e300}})),
           "\"layers\" is not a whole number from 0 to 1000000")
check_diff("diff: args of the wrong type",
           hostile_file("sim-args.json", simulated_trace({"args": [1, 2]})),
           "\"args\" is not an object")
check_diff("diff: a step slice without its kind (a trace of an older clustersim)",
           hostile_file("sim-old.json",
                        simulated_trace({"name": "qkv", "args": {"model_flops": 1}})),
           "traceEvents entry 1: step \"qkv\" has no \"kernel\" argument (a trace of an older "
           "clustersim); re-run `clustersim run --trace F.json` to write it anew")

check("diff: simulated trace above --max-memory",
      ["diff", hostile_file("sim-big.json", simulated_trace({"name": "F0" + " " * (1 << 20)})),
       measured, "--max-memory", "8MiB"],
      "sim-big.json: a trace of 1048", corpus, outputs=("--json",))

# nccl-tests output: read to its end, so a regular file.
topology2 = os.path.join(here, "..", "..", "topologies", "h200-2gpu-nvlink.yaml")
check("nccl-tests output that is a FIFO",
      ["calibrate", "--nccl-tests", fifo("nccl.txt"), "--topology", topology2],
      "nccl.txt: is not a regular file (a FIFO): an nccl-tests output file is read to its end",
      corpus, outputs=("--out",))

# Chakra ETs: rank files and comm_groups.json regular files, decoded nodes within --max-memory,
# communicator ranks in range.
def et_folder(name, files):
    folder = os.path.join(hostile, name)
    os.mkdir(folder)
    for file, data in files.items():
        if data == "fifo":
            os.mkfifo(os.path.join(folder, file))
        elif data == "zero":
            os.symlink("/dev/zero", os.path.join(folder, file))
        else:
            with open(os.path.join(folder, file), "wb") as fh:
                fh.write(data if isinstance(data, bytes) else data.encode())
    return folder

def check_chakra(name, folder, expect, extra=()):
    check(name, ["chakra", "run", folder, "--topology", topology2] + list(extra), expect, corpus,
          outputs=("--json",))

check_chakra("Chakra rank file that is a FIFO", et_folder("et-fifo", {"w.0.et": "fifo"}),
             "w.0.et: is not a regular file (a FIFO): a Chakra ET file is read to its end")
check_chakra("Chakra rank file linked to /dev/zero", et_folder("et-zero", {"w.0.et": "zero"}),
             "w.0.et: is not a regular file (a character device)")
# A metadata message, then 4 MiB of zeros: each zero byte is an empty node message, all of id 0,
# refused at the second (48 MiB of them were all decoded first: 10 GB and 37 s).
zeros = bytes([2, 0x0a, 0]) + bytes(4 << 20)
check_chakra("Chakra file of zeros", et_folder("et-zeros", {"w.0.et": zeros}),
             "w.0.et: node message 2: node 0: a second node with this id")
# About 4 MiB of nodes that hold only their (distinct) id: above a 64 MiB --max-memory.
def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))
ids = b"".join(bytes([1 + len(varint(i)), 0x08]) + varint(i) for i in range(900000))
check_chakra("Chakra file of distinct empty nodes above --max-memory",
             et_folder("et-ids", {"w.0.et": bytes([2, 0x0a, 0]) + ids}),
             "the ETs' nodes read so far, and the program built from them, would take more than "
             "--max-memory", extra=("--max-memory", "64MiB"))
check_chakra("comm_groups.json that is a FIFO",
             et_folder("et-groups-fifo", {"w.0.et": bytes([2, 0x0a, 0]), "comm_groups.json": "fifo"}),
             "comm_groups.json: is not a regular file (a FIFO)")
check_chakra("communicator rank beyond int",
             et_folder("et-groups-rank",
                       {"w.0.et": bytes([2, 0x0a, 0]), "comm_groups.json": '{"0": [0, 4294967296]}'}),
             "communicator \"0\": rank 4294967296 is not a rank number (0 to 0)")

# A GPU that no route reaches in a topology above 4,096 GPUs (not checked when built): 4,098 GPUs
# in a chain, where GPU 0 reaches GPU 2049 only through other GPUs. An internal error before.
chain = ["gpu_models:", "  G: {peak: {bf16: 989TFLOPS}, hbm: 141GB, hbm_bandwidth: 4.8TB/s}",
         "devices:"]
chain += [f"  - {{id: g{i}, type: gpu, model: G}}" for i in range(4098)]
chain += ["links:"] + [f"  - {{from: g{i}, to: g{i + 1}, kind: nvlink, bandwidth: 25GB/s}}"
                       for i in range(4097)]
chain_topology = hostile_file("chain.yaml", "\n".join(chain) + "\n")
chain_run = hostile_file("chain-run.yaml", """topology: chain.yaml
model: {layers: 2, hidden_size: 1024, attention_heads: 8, vocab_size: 0}
parallelism: {tp: 1, pp: 2, dp: 2049}
training: {micro_batch_size: 1, global_batch_size: 2049, seq_length: 1024}
compute: {model: profile, layer_forward: 1ms, layer_backward: 2ms}
network: {model: analytical}
""")
check("unreachable GPU above 4,096 GPUs (run)", ["run", chain_run],
      "chain.yaml: GPU 0 cannot reach GPU 2049, which this run sends data between, without passing", corpus)
# chakra run of a two-rank pipeline's ETs with its ranks on GPUs 0 and 2049 of the chain: the
# same error, exit 2 (exit 1 and "internal error" before).
et_chain = os.path.join(hostile, "et-chain")
subprocess.run([binary, "chakra", "export",
                os.path.join(here, "..", "..", "workloads", "h200-2gpu-pipeline.yaml"),
                "--out", et_chain], check=True, capture_output=True)
check("unreachable GPU above 4,096 GPUs (chakra run)",
      ["chakra", "run", et_chain, "--topology", chain_topology, "--rank-map", "0,2049"],
      "chain.yaml: GPU 0 cannot reach GPU 2049, which the ETs in", corpus)
check("unreachable GPU above 4,096 GPUs (collective)",
      ["collective", "--topology", chain_topology, "--ranks", "0,2", "--sizes", "1MiB"],
      "--ranks: GPU 0 cannot reach GPU 2 in this topology", corpus, outputs=("--json",))

# Every distinct time at which links fail copies the cluster's routing: 2,000 of them on two
# nodes (about 84 kB a copy) are counted in the run's estimate, above a 100 MiB limit.
times = ", ".join(f"{{link: leaf0->spine0, failed: true, at: {t + 1}us}}" for t in range(2000))
fault_times = hostile_file("fault-times.yaml", """topology:
  node: {gpus: 8, gpu_model: H100-SXM, intra: {kind: nvswitch, bandwidth: 450GB/s},
         nics: {count: 8, kind: infiniband, bandwidth: 400Gbps}}
  nodes: 2
  fabric: {kind: leaf_spine, latency: 1us, leaf: {down: 8, up: 2}}
model: {layers: 4, hidden_size: 4096, attention_heads: 32, vocab_size: 0}
parallelism: {tp: 8, pp: 1, dp: 2}
training: {micro_batch_size: 1, global_batch_size: 4, seq_length: 2048}
compute: {model: profile, layer_forward: 1ms, layer_backward: 2ms}
faults: {links: [""" + times + "]}\n")
check("2,000 distinct fault times above --max-memory",
      ["run", fault_times, "--max-memory", "100MiB"],
      "fault-times.yaml:7:14: this run would need about", corpus)
# A 900 kB GPU list repeating a range: merged, not expanded (it reached 4.2 GB), and its one bad
# number still found.
gpu_list = ",".join(["0-1"] * 300000) + ",2"
check("900 kB GPU list with one GPU outside the cluster",
      ["run", hostile_file("gpu-list.yaml", "topology: " + os.path.abspath(topology2) + """
model: {layers: 8, hidden_size: 4096, attention_heads: 32, vocab_size: 0}
parallelism: {tp: 1, pp: 2, dp: 1}
training: {micro_batch_size: 1, global_batch_size: 8, seq_length: 2048}
compute: {model: profile, layer_forward: 1ms, layer_backward: 2ms}
variability: {gpus: [{gpus: \"""" + gpu_list + """\", factor: 1.2}]}
"""), "--max-memory", "1GiB"],
      "gpu-list.yaml:6:29: 'variability.gpus.0.gpus': GPU 2 is not in the cluster", corpus)

# A name that is not UTF-8 reached the JSON writer, which refused it: an internal error after
# the run. Now the YAML is refused where the byte is.
check("YAML that is not UTF-8",
      ["run", hostile_file("latin1.yaml", b"topology: " + os.path.abspath(topology2).encode() +
                           b"\nmodel: {layers: 8, hidden_size: 4096, attention_heads: 32, "
                           b"vocab_size: 0}\n# caf\xe9\n")],
      "latin1.yaml:3:6: is not UTF-8 text", corpus)
check("diff: pid of the wrong JSON type",
      ["diff", hostile_file("sim-pid.json", json.dumps({"traceEvents": [
          {"ph": "M", "name": "thread_name", "pid": "one", "tid": 2,
           "args": {"name": "GPU 0 compute"}}]})), measured],
      "sim-pid.json: traceEvents entry 0: \"pid\" is not a whole number", corpus,
      outputs=("--json",))

# Numbers beyond a double: nlohmann reports them as out_of_range, which was an internal error
# (found by the first fuzz session of issue 40).
check("diff: a number beyond a double",
      ["diff", hostile_file("sim-1e999.json", '{"traceEvents": [{"ts": 1e999}]}'), measured],
      "sim-1e999.json: not a JSON trace clustersim reads (", corpus, outputs=("--json",))
check_chakra("comm_groups.json with a number beyond a double",
             et_folder("et-groups-1e999",
                       {"w.0.et": bytes([2, 0x0a, 0]), "comm_groups.json": '{"0": [1e999]}'}),
             "comm_groups.json: not valid JSON: ")

# A hostile re-audit at stop 59 (issue 40), one check per defect found.
# Times below the resolution of the tool that wrote them gave residuals of 300 digits.
check_trace("kernel duration below a nanosecond",
            hostile_file("tiny-kernel.json", kernel_trace(
                {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2000,
                 "dur": 1e-300, "args": {"stream": 7}})),
            "\"dur\" below a nanosecond (0.001 microseconds), the profiler's resolution")
# Each dimension within 2^40 and the shape within 2^50 elements, but a GEMM of 2^91 FLOPs: its
# time beyond the clock was an internal error.
check_trace("shapes whose time is beyond the clock",
            hostile_file("dims-clock.json", kernel_trace(
                extra_args={"Input Dims": [[2 ** 40, 1024], [1024, 2 ** 40]]})),
            "--torch-trace: a kernel's shapes (\"Input Dims\" of its operator) give a time longer "
            "than the simulator's clock can hold")
seed = open(os.path.join(here, "..", "fuzz", "corpus", "nccl-seed-ag2.nccl.txt")).read()
check("nccl-tests time below 0.01 us",
      ["calibrate", "--nccl-tests",
       hostile_file("nccl-tiny.txt", seed.replace("    29.57   35.46", "    1e-300   35.46", 1)),
       "--topology", topology2],
      "nccl-tiny.txt:12:57: the out-of-place time is below 0.01 us, the smallest time nccl-tests "
      "prints", corpus, outputs=("--out",))
check_diff("diff: negative duration",
           hostile_file("sim-dur.json", simulated_trace({"dur": -5})),
           "sim-dur.json: traceEvents entry 1: \"dur\" is not a duration of 0 microseconds or more")
# validate: a case whose sizes overflow the clock, a published value the relative error cannot
# divide by, a collective of one rank (exit 1, +inf%, inf busbw before).
def validate_case(name, case, expect):
    folder = os.path.join(hostile, name)
    os.mkdir(folder)
    with open(os.path.join(folder, "cases.yaml"), "w") as fh:
        fh.write("families:\n  - {id: f, tolerance: 0.10, error: relative, mode: x, title: t}\n"
                 "cases:\n  - {id: a, family: f, topology: " + os.path.abspath(topology2) + ", "
                 + case + ", source: s}\n")
    check(name, ["validate", folder], expect, corpus, outputs=())
validate_case("validate-clock", 'kind: gemm, gemm: {m: 2147483647, n: 2147483647, k: 2147483647}, '
              'launch_overhead: 16us, published: 1.4, unit: ms',
              "cases.yaml:4:5: 'cases.0': the case's sizes give a time longer than the simulator's "
              "clock can hold")
validate_case("validate-zero", "kind: gemm, gemm: {m: 8, n: 8, k: 8}, published: 1e-320, unit: ms",
              "'cases.0.published': the error predicted / published - 1 is not finite")
validate_case("validate-negative", "kind: gemm, gemm: {m: 8, n: 8, k: 8}, published: -1, unit: ms",
              "'cases.0.published': expected the measured or published value in the case's unit, "
              "above 0")
validate_case("validate-one-rank", 'kind: collective, op: all_reduce, size: 1MiB, ranks: "0-0", '
              "published: 10, unit: GB/s",
              "'cases.0.ranks': a collective needs two ranks or more")
# Experiment values in range that made nonsense or a hang: 10^10 Monte Carlo segments (60 s), a
# fabric oversubscribed 1e308 times (a link of no capacity, exit 1), a checkpoint of 0 bytes
# (written in 22.6 s), factors whose product is 1e21.
profile_run = """topology: """ + os.path.abspath(topology2) + """
model: {layers: 8, hidden_size: 4096, attention_heads: 32, vocab_size: 0}
parallelism: {tp: 1, pp: 2, dp: 1}
training: {micro_batch_size: 1, global_batch_size: 8, seq_length: 2048}
compute: {model: profile, layer_forward: 1ms, layer_backward: 2ms}
"""
check("Monte Carlo of 10^10 segments",
      ["run", hostile_file("mc.yaml", profile_run + "goodput: {failures_per_gpu_hour: 1e-3, "
                           "checkpoint: {write_time: 1s}, monte_carlo: {runs: 100000, "
                           "segments: 100000}}\n")],
      "'goodput.monte_carlo.segments': runs x segments = 10000000000 must be at most 100,000,000",
      corpus)
check("checkpoint of 0 bytes",
      ["run", hostile_file("ckpt.yaml", profile_run + "goodput: {failures_per_gpu_hour: 1e-3, "
                           "checkpoint: {bytes: 0B, write_bandwidth: 1GB/s}}\n")],
      "'goodput.checkpoint.bytes': a checkpoint holds more than 0 bytes", corpus)
check("a GPU's factors multiplying past 1000",
      ["run", hostile_file("factors.yaml", profile_run + "variability: {gpus: [{gpus: all, "
                           "factor: 100}, {gpus: 1, factor: 20}]}\n")],
      "'variability.gpus.1.factor': makes GPU 1's factor (the product of its entries' factors) "
      "2000; expected it in [0.05, 1000]", corpus)
check("fabric oversubscribed 1e308 times",
      ["topology", superpod, "--set", "fabric.leaf.oversubscription=1e308"],
      "'fabric.leaf.oversubscription': must be from 1 to 1000", corpus, outputs=("--json",))
# plan: the simulator's own memory per layout (a batch of 16M sequences reached 11.5 GB and
# bad_alloc under --max-memory 1GiB), thread counts the system cannot start (SIGABRT), a failed
# job ranked first, a price whose cost is not finite, a profile's times compared at other shapes
# (MFU 234%), errors naming what the user typed.
pipeline = os.path.join(here, "..", "..", "workloads", "h200-2gpu-pipeline.yaml")
profile_fixes = ["--fix", "parallelism.tp=1", "--fix", "parallelism.cp=1", "--fix",
                 "parallelism.ep=1", "--fix", "training.micro_batch_size=1", "--fix",
                 "training.recompute=none"]
check("plan --threads 100000", plan + ["--threads", "100000"],
      "--threads 100000: expected a number of threads from 1 to 256", corpus, outputs=("--json",))
check("plan with a GPU failure",
      plan + ["--set", "faults={gpus: [{gpus: 0, at: 0s}]}"],
      "plan ranks layouts by the time of a whole iteration, which a GPU or node failure ends",
      corpus, outputs=("--json",))
check("plan --gpu-hour-price 1e308", plan + ["--objective", "cost", "--gpu-hour-price", "1e308"],
      "--gpu-hour-price: expected the price of one GPU for an hour, above 0 and at most 1e9",
      corpus, outputs=("--json",))
check("plan of a profile model over its measured shape", ["plan", pipeline],
      "compute.model: profile gives each layer the time measured at one tp, cp, ep, micro-batch "
      "size and recomputation", corpus, outputs=("--json",))
check("plan --global-batch beyond training.global_batch_size's range",
      plan + ["--global-batch", "2147483648"], "'2147483648': sizes go from 1 to 2147483647",
      corpus, outputs=("--json",))
check("plan --gpus whose topology is refused names --gpus",
      ["plan", pipeline, "--gpus", "4"] + profile_fixes, "--gpus 4: the topology at 2 nodes",
      corpus, outputs=("--json",))
check("plan --fix refused by the loader names --fix",
      plan + ["--fix", "parallelism.cp_a2a_size=2"], "--fix parallelism.cp_a2a_size=2: ", corpus,
      outputs=("--json",))
check("plan --gpus beyond an int", plan + ["--gpus", "2147483648"],
      "--gpus = 2147483648: not a value of the option's type", corpus, outputs=("--json",))
# A 10 MB value quoted in a message is cut to its first 2,000 characters.
check("10 MB YAML value in a message",
      ["run", hostile_file("long-value.yaml", profile_run + "schedule: " + "a" * 10_000_000 + "\n")],
      " more characters)", corpus)

# A second audit at stop 59: memory the run estimate did not count (the HTML report's detail,
# compare's reports kept side by side, all-to-all flows), a hang in `topology`'s diameter, and
# values accepted that printed inf or a misleading message.
check("run --html above --max-memory",
      ["run", pipeline, "--set", "training.global_batch_size=1000000", "--max-memory", "4GiB"],
      "this run would need about 13.9 GB", corpus, outputs=("--html",))
check("compare --html above --max-memory",
      ["compare", pipeline, "--set", "training.global_batch_size=1000000", "--schedules",
       "1f1b,gpipe", "--max-memory", "7GiB"],
      "more than the limit of 3.758 GB", corpus, outputs=("--html",))
check("all-to-all of 4,096 ranks above --max-memory",
      ["collective", "--topology", superpod, "--set", "nodes=512", "--sizes", "1MiB", "--op",
       "all_to_all", "--max-memory", "1GiB"],
      "--op all_to_all: an all-to-all of 4096 ranks is 4096 x 4095 flows", corpus,
      outputs=("--json",))
check("expert parallelism over 4,096 GPUs above --max-memory",
      ["run", hostile_file("ep4096.yaml", "topology: " + os.path.abspath(superpod) + """
model: {family: moe, layers: 2, hidden_size: 1024, attention_heads: 16, ffn_hidden_size: 2048,
        moe_ffn_hidden_size: 512, experts: 4096, top_k: 2, vocab_size: 1000}
parallelism: {tp: 1, pp: 1, dp: 4096, ep: 4096}
training: {micro_batch_size: 1, global_batch_size: 4096, seq_length: 1024}
"""), "--set", "topology.nodes=512", "--max-memory", "1GiB"],
      "this run would need about", corpus)
check("a GPU model of 1e-300 FLOP/s",
      ["topology", hostile_file("slow-gpu.yaml", """gpu_models:
  X: {peak: {bf16: 1TFLOPS, fp8: 1e-300FLOPS}, hbm: 80GB, hbm_bandwidth: 1TB/s}
devices:
  - {id: gpu0, type: gpu, model: X}
  - {id: gpu1, type: gpu, model: X}
links:
  - {from: gpu0, to: gpu1, kind: nvlink, bandwidth: 25GB/s, latency: 1us}
""")],
      "slow-gpu.yaml:2:34: 'gpu_models.X.peak.fp8': a compute rate must be at least 1 MFLOP/s",
      corpus, outputs=("--json",))
check("a NIC that serves no GPU",
      ["topology", hostile_file("serves.yaml", """node:
  gpus: 4
  gpu_model: H100-SXM
  intra: {kind: nvswitch, bandwidth: 450GB/s}
  nics: {count: 4, bandwidth: 400Gbps, serves: [[0, 1, 2, 3], [], [], []]}
nodes: 2
fabric: {kind: single_switch}
""")],
      "'node.nics.serves': entry 1 is empty (every NIC serves a GPU)", corpus, outputs=("--json",))
check_chakra("comm_groups.json naming a communicator twice",
             et_folder("et-groups-twice", {"w.0.et": bytes([2, 0x0a, 0]),
                                           "comm_groups.json": '{"1": [0], "1": [0]}'}),
             "comm_groups.json: communicator \"1\" is given twice")
check("collective beyond the clock by the topology's bandwidth",
      ["collective", "--topology", superpod, "--sizes", "8", "--ranks", "0-1",
       "--set", "nodes=2", "--set", "node.intra.bandwidth=1e-300B/s"],
      "check the topology's bandwidths and latencies", corpus, outputs=("--json",))

# A third audit at stop 59: sweep's --max-memory was not applied to each combination (its
# message said to raise a limit that did nothing), a job's refusal had no line, and a jobs file
# given as a job's experiment was told to use `clustersim run`.
oversub = os.path.join(here, "..", "..", "topologies", "h100-4node-oversubscribed.yaml")
gpt_1b = hostile_file("gpt-1b.yaml", "topology: " + os.path.abspath(oversub) + """
model: {layers: 24, hidden_size: 2048, attention_heads: 16, vocab_size: 50304}
parallelism: {tp: 4, pp: 1, dp: 4}
training: {micro_batch_size: 4, global_batch_size: 16, seq_length: 2048}
schedule: 1f1b
""")
check("sweep --max-memory applies to every combination",
      ["sweep", gpt_1b, "--vary", "training.global_batch_size=20000000,40000000",
       "--max-memory", "1GiB"],
      "more than the limit of 1.074 GB", corpus, outputs=("--json",))
check("a jobs file as a job's experiment",
      ["run", hostile_file("nested-jobs.yaml", "topology: " + os.path.abspath(oversub) +
                           "\njobs:\n  - name: job-a\n    experiment: " + os.path.abspath(two_jobs) +
                           "\n")],
      "nested-jobs.yaml:4:17: 'jobs.0.experiment': is a jobs file (it has a 'jobs' key)", corpus)

shutil.rmtree(hostile, ignore_errors=True)
for f in failures:
    print("FAIL", f)
print(f"bad inputs: {cases - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
