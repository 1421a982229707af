#!/usr/bin/env python3
"""Issue 40's large hostile inputs at the issue's own sizes (tests/e2e/bad_inputs.py holds small
stand-ins of the same inputs): a 4.5 MB gzip bomb, 40 million kernel events, a 48 MiB Chakra file
of zeros, 900 KB GPU lists, chakra export of 16,384 ranks, FIFOs and links to /dev/zero given to
every reader that reads a file, fabrics with 1e8 spines. Each case is generated in a temporary
folder (streamed: no multi-GB string is ever held in memory here), run under a wall-clock timeout
and `/usr/bin/time -f %M` (peak RSS), and printed as one table row:

    case | exit | seconds | peak RSS MiB | first line of stderr | PASS/FAIL

A case passes when clustersim exits with code 2 (0 for the two inputs that are valid: a FIFO
without a writer as `--megatron-args @FILE` reads as no flags, and a Chakra ET of ten million
empty nodes runs), its message holds the expected text (the file with line:column where the format
has lines, or the option), a refusal took under 10 s of wall-clock and of CPU time, and its peak RSS stayed under
the --max-memory it was given (16 GiB when none is). The temporary folder (about 220 MB on disk)
is removed at the end.

Usage: tools/hostile_large.py [--binary build/bin/clustersim] [--check] [--only TEXT]
                              [--wall-limit SECONDS] [--cpu-limit SECONDS]
  --check: exit 1 if any case fails.
  --wall-limit, --cpu-limit: the limits on wall-clock and CPU (user + system) time, 10 s each.
    ctest (label hostile_large) gives 30 s and 20 s, so that a loaded machine does not fail it
    (the 40 M events case takes 7.6 s of CPU alone, 10.2 s with the rest of ctest running on two
    cores), while a reader that blocks or runs for minutes is still caught.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOPOLOGY2 = os.path.join(ROOT, "topologies", "h200-2gpu-nvlink.yaml")
SUPERPOD = os.path.join(ROOT, "topologies", "dgx-h100-superpod.yaml")
DEFAULT = os.path.join(ROOT, "workloads", "default.yaml")
VALID = os.path.join(ROOT, "workloads", "h200-pipeline-profile.yaml")
JOB = os.path.join(ROOT, "workloads", "jobs", "dp-gpt-1b.yaml")
TIME_LIMIT_S = 10.0
KILL_AFTER_S = 60.0
DEFAULT_MAX_MEMORY = 16 << 30
MiB = 1 << 20


# ---------------------------------------------------------------------------------------------
# Streamed gzip of a long repetition: the chunk is deflated once after a full flush (which
# forgets the history, so every later copy deflates to the same bytes) and those bytes are
# written again and again; the CRC-32 of the repetition is combined, not computed over GBs.

def _apply(op, crc):
    """A linear map on 32-bit CRC registers (op[n]: the image of bit n) applied to `crc`."""
    out, n = 0, 0
    while crc:
        if crc & 1:
            out ^= op[n]
        crc >>= 1
        n += 1
    return out


def _compose(op):
    """The map applied twice."""
    return [_apply(op, image) for image in op]


def crc32_combine(crc1, crc2, len2):
    """The CRC-32 of A+B from crc(A), crc(B) and len(B) in bytes. Feeding B's bytes into the
    register is linear: the register after A is advanced through len(B) zero bytes (a linear map,
    built by squaring the map of one zero byte for each bit of len(B)), then crc(B) is added."""
    # One zero bit shifts the reflected register right, folding in the polynomial on a carry.
    op = [0xEDB88320] + [1 << (n - 1) for n in range(1, 32)]
    for _ in range(3):  # one zero bit -> one zero byte
        op = _compose(op)
    while len2 > 0:
        if len2 & 1:
            crc1 = _apply(op, crc1)
        op = _compose(op)
        len2 >>= 1
    return crc1 ^ crc2


def write_gzip(path, head, chunk, copies, tail):
    """A gzip file of head + chunk * copies + tail, written as it is deflated."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    flush = zlib.Z_FULL_FLUSH
    first = deflate.compress(head) + deflate.flush(flush)
    body = deflate.compress(chunk) + deflate.flush(flush)
    again = deflate.compress(chunk) + deflate.flush(flush)
    assert body == again, "a chunk after a full flush deflates to the same bytes"
    crc = zlib.crc32(head)
    chunk_crc = zlib.crc32(chunk)
    repeated_crc, repeated_len, step_crc, step_len, n = 0, 0, chunk_crc, len(chunk), copies
    while n:  # the CRC of `copies` chunks by doubling
        if n & 1:
            repeated_crc = crc32_combine(repeated_crc, step_crc, step_len) if repeated_len else step_crc
            repeated_len += step_len
        step_crc = crc32_combine(step_crc, step_crc, step_len)
        step_len *= 2
        n >>= 1
    crc = crc32_combine(crc, repeated_crc, repeated_len)
    crc = crc32_combine(crc, zlib.crc32(tail), len(tail))
    size = len(head) + repeated_len + len(tail)
    with open(path, "wb") as out:
        out.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")  # gzip header, no name, no time
        out.write(first)
        for _ in range(copies):
            out.write(body)
        out.write(deflate.compress(tail) + deflate.flush(zlib.Z_FINISH))
        out.write(crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little"))
    return size


# ---------------------------------------------------------------------------------------------
# The inputs.

class Inputs:
    def __init__(self, folder):
        self.folder = folder

    def path(self, name):
        return os.path.join(self.folder, name)

    def text(self, name, data):
        with open(self.path(name), "w") as out:
            out.write(data)
        return self.path(name)

    def fifo(self, name):
        os.mkfifo(self.path(name))
        return self.path(name)

    def to_zero(self, name):
        os.symlink("/dev/zero", self.path(name))
        return self.path(name)

    def folder_of(self, name, files):
        """A folder of Chakra rank files: bytes, "fifo", "zero" or a writer function each."""
        folder = self.path(name)
        os.mkdir(folder)
        for file, data in files.items():
            target = os.path.join(folder, file)
            if data == "fifo":
                os.mkfifo(target)
            elif data == "zero":
                os.symlink("/dev/zero", target)
            elif callable(data):
                data(target)
            else:
                with open(target, "wb") as out:
                    out.write(data)
        return folder


def chakra_zeros(mib):
    """A Chakra ET of a metadata message followed by `mib` MiB of zeros (each zero byte decodes
    as an empty node message), written a MiB at a time."""
    def write(target):
        with open(target, "wb") as out:
            out.write(bytes([2, 0x0A, 0]))
            zeros = bytes(MiB)
            for _ in range(mib):
                out.write(zeros)
    return write


def chakra_ids(mib):
    """A Chakra ET of a metadata message followed by `mib` MiB of nodes that hold only their
    id, each distinct (about 8.4 million of them). Ids from 2^21 are 4-byte varints, so each node
    message is 6 bytes (length 5, tag 0x08, the id); written 16,384 nodes at a time, the id's low
    14 bits laid out by slices."""
    low0 = bytes(range(0x80, 0x100)) * 128
    low1 = b"".join(bytes([0x80 | j]) * 128 for j in range(128))

    def write(target):
        with open(target, "wb") as out:
            out.write(bytes([2, 0x0A, 0]))
            block = bytearray(6 * 16384)
            block[0::6] = bytes([5]) * 16384
            block[1::6] = bytes([0x08]) * 16384
            block[2::6] = low0
            block[3::6] = low1
            high = 1 << 7  # id >> 14: ids from 2^21
            for _ in range(mib * MiB // len(block)):
                block[4::6] = bytes([0x80 | (high & 0x7F)]) * 16384
                block[5::6] = bytes([high >> 7]) * 16384
                out.write(block)
                high += 1
    return write


def kernel_trace_small():
    return ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
            '"ts": 0, "dur": 1, "args": {"stream": 7}}]}')


def simulated_trace_small():
    return ('{"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, '
            '"args": {"name": "GPU 0 compute"}}, {"ph": "X", "pid": 1, "tid": 2, "ts": 0, '
            '"dur": 10, "name": "F0", "args": {"microbatch": 0, "pass": "forward", "layers": 2, '
            '"first_layer": 0}}]}')


def experiment(topology, extra, dp=1):
    return (f"topology: {topology}\n"
            "model: {layers: 8, hidden_size: 4096, attention_heads: 32, vocab_size: 0}\n"
            f"parallelism: {{tp: 1, pp: 2, dp: {dp}}}\n"
            f"training: {{micro_batch_size: 1, global_batch_size: {8 * dp}, seq_length: 2048}}\n"
            "compute: {model: profile, layer_forward: 1ms, layer_backward: 2ms}\n" + extra)


def gpu_list(range_text, last, size=900_000):
    """About `size` bytes of `range_text` repeated, ending with `last`."""
    return ",".join([range_text] * (size // (len(range_text) + 1))) + "," + last


def superpod_512():
    """The superpod topology at 512 nodes (4,096 GPUs), as YAML text of its own."""
    with open(SUPERPOD) as f:
        text = f.read()
    assert "\nnodes: 32\n" in text
    return text.replace("\nnodes: 32\n", "\nnodes: 512\n")


def job_experiment():
    """workloads/jobs/dp-gpt-1b.yaml without its topology (a jobs file's job takes the file's)."""
    with open(JOB) as f:
        return "".join(l for l in f if not l.startswith("topology:"))


class Case:
    def __init__(self, name, argv, expect, max_memory=None, writer=None, code=2):
        self.name, self.argv, self.expect = name, argv, expect
        self.max_memory = max_memory  # bytes given as --max-memory, None: the default
        self.writer = writer          # a FIFO to hold open for writing without writing
        self.code = code              # the exit code expected: 2 (a refusal) but for valid input


def mem_option(text):
    units = {"MiB": 1 << 20, "GiB": 1 << 30}
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(text[:-len(unit)]) * scale
    raise ValueError(text)


def cases(inputs):
    """Every case, its inputs generated in `inputs.folder`."""
    out = []

    def add(name, argv, expect, writer=None, code=2):
        limit = None
        if "--max-memory" in argv:
            limit = mem_option(argv[argv.index("--max-memory") + 1])
        out.append(Case(name, argv, expect, limit, writer, code))

    calibrate = ["calibrate", "--gpu-model", "H200-SXM", "--torch-trace"]
    # --- gzip bombs: about 4.5 MB of gzip each.
    bomb = inputs.path("bomb-string.json.gz")
    write_gzip(bomb, b'{"traceEvents": [{"name": "', b"a" * MiB, 4400, b'"}]}')
    add("gzip bomb: 4.5 MB, one 4.6 GB string", calibrate + [bomb, "--out", inputs.path("o.yaml")],
        "bomb-string.json.gz: ")
    blanks = inputs.path("bomb-blanks.json.gz")
    write_gzip(blanks, b'{"traceEvents": [', b" " * MiB, 4400, b"]}")
    add("gzip bomb: 4.5 MB, 4.6 GB of blanks, --max-memory 1GiB",
        calibrate + [blanks, "--out", inputs.path("o.yaml"), "--max-memory", "1GiB"],
        "bomb-blanks.json.gz: ")
    numbers = inputs.path("bomb-numbers.json.gz")
    write_gzip(numbers, b'{"traceEvents": [], "x": [', b"0," * (MiB // 2), 4400, b"0]}")
    add("gzip bomb: 4.5 MB, 4.6 GB of numbers", calibrate + [numbers, "--out", inputs.path("o.yaml")],
        "bomb-numbers.json.gz: ")
    # --- 40 million kernel events (3.6 GB of JSON, gzipped): a block of 1,000 events repeated.
    events = inputs.path("kernels-40m.json.gz")
    block = "".join(
        f'{{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":{i},"dur":1,'
        f'"args":{{"stream":7}}}},' for i in range(1000)).encode()
    write_gzip(events, b'{"traceEvents": [', block, 40_000,
               b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":0,"dur":1,'
               b'"args":{"stream":7}}]}')
    add("40 M kernel events, --max-memory 1GiB",
        calibrate + [events, "--out", inputs.path("o.yaml"), "--max-memory", "1GiB"],
        "--max-memory")
    # --- A 48 MiB Chakra file of zeros.
    zeros = inputs.folder_of("et-zeros", {"w.0.et": chakra_zeros(48)})
    add("Chakra 48 MiB of zeros", ["chakra", "run", zeros, "--topology", TOPOLOGY2],
        "w.0.et")
    add("Chakra 48 MiB of zeros, --max-memory 1GiB",
        ["chakra", "run", zeros, "--topology", TOPOLOGY2, "--max-memory", "1GiB"], "w.0.et")
    ids = inputs.folder_of("et-ids", {"w.0.et": chakra_ids(48)})
    # Nodes of no type are valid (they take no time, with a warning): this one runs, exit 0.
    add("Chakra 48 MiB of distinct empty nodes", ["chakra", "run", ids, "--topology", TOPOLOGY2],
        "w.0.et", code=0)
    add("Chakra 48 MiB of distinct empty nodes, --max-memory 1GiB",
        ["chakra", "run", ids, "--topology", TOPOLOGY2, "--max-memory", "1GiB"], "--max-memory")
    # --- 900 KB GPU lists, in a cluster of 4,096 GPUs (the superpod at 512 nodes).
    pod = inputs.text("pod512.yaml", superpod_512())
    job = inputs.text("job.yaml", job_experiment())
    big = gpu_list("0-4095", "4096")
    add("variability: 900 KB GPU list, one GPU outside",
        ["run", inputs.text("var.yaml", experiment(TOPOLOGY2, f'variability: {{gpus: [{{gpus: "{gpu_list("0-1", "2")}", factor: 1.2}}]}}\n')),
         "--max-memory", "1GiB"],
        "var.yaml:6:")
    add("variability: 900 KB of 0-4095 at 4,096 GPUs, then a bad fault",
        ["run", inputs.text("var4k.yaml", experiment(
            pod, f'variability: {{gpus: [{{gpus: "{gpu_list("0-4095", "0")}", factor: 1.2}}]}}\n'
                 "faults: {links: [{link: nowhere->nothing, failed: true}]}\n", dp=2048)),
         "--max-memory", "1GiB"],
        "var4k.yaml:7:")
    add("faults: 900 KB GPU list at 4,096 GPUs, one outside",
        ["run", inputs.text("faults4k.yaml", experiment(
            pod, f'faults: {{gpus: [{{gpus: "{big}", at: 1ms}}]}}\n', dp=2048)),
         "--max-memory", "1GiB"],
        "faults4k.yaml:6:")
    add("jobs placement: 900 KB GPU list at 4,096 GPUs, one outside",
        ["run", inputs.text("jobs4k.yaml",
                            f"topology: {pod}\njobs:\n  - name: a\n    experiment: {job}\n"
                            f'    placement: {{gpus: "{big}"}}\n'),
         "--max-memory", "1GiB"],
        "jobs4k.yaml:5:")
    # --- chakra export of 16,384 ranks (the default experiment at 2,048 nodes).
    add("chakra export: 16,384 ranks, --max-memory 1GiB",
        ["chakra", "export", DEFAULT, "--set", "topology.nodes=2048", "--set", "parallelism.dp=~",
         "--set", "training.global_batch_size=4194304", "--out", inputs.path("et-out"),
         "--max-memory", "1GiB"],
        "--max-memory")
    # --- Fabrics that multiply.
    add("fabric: 1e8 spines", ["topology", SUPERPOD, "--set", "fabric.leaf.up=100000000",
                               "--set", "fabric.leaf.radix=~"], "--set fabric.leaf.up")
    add("fabric: core count beyond an int",
        ["topology", SUPERPOD, "--set", "nodes=2048", "--set", "fabric.leaf.up=65536",
         "--set", "fabric.leaf.radix=~", "--set", "fabric.spine.up=65536",
         "--set", "fabric.spine.radix=~"], "--set")
    # --- FIFOs and links to /dev/zero, for every reader that reads a file.
    measured = inputs.text("measured.json", kernel_trace_small())
    simulated = inputs.text("simulated.json", simulated_trace_small())
    one_rank = bytes([2, 0x0A, 0])
    for kind in ("fifo", "fifo+writer", "zero"):
        def source(name, kind=kind):
            return inputs.to_zero(name) if kind == "zero" else inputs.fifo(name)

        def held(path, kind=kind):
            return path if kind == "fifo+writer" else None
        label = {"fifo": "FIFO", "fifo+writer": "FIFO held open", "zero": "/dev/zero"}[kind]
        p = source(f"exp-{kind}.yaml")
        add(f"{label}: experiment", ["run", p], f"exp-{kind}.yaml", held(p))
        p = source(f"topo-{kind}.yaml")
        add(f"{label}: topology", ["topology", p], f"topo-{kind}.yaml", held(p))
        p = source(f"topo-ref-{kind}.yaml")
        add(f"{label}: experiment's topology:",
            ["run", inputs.text(f"ref-{kind}.yaml", experiment(p, ""))],
            f"topo-ref-{kind}.yaml", held(p))
        p = source(f"megatron-{kind}.txt")
        # A FIFO without a writer reads as empty: no flags, as `@/dev/null`; the run goes on.
        add(f"{label}: --megatron-args @FILE", ["run", VALID, "--megatron-args", "@" + p],
            "" if kind == "fifo" else "--megatron-args", held(p), 0 if kind == "fifo" else 2)
        p = source(f"trace-{kind}.json")
        add(f"{label}: torch trace", calibrate + [p, "--out", inputs.path("o.yaml")],
            f"trace-{kind}.json", held(p))
        p = source(f"sim-{kind}.json")
        add(f"{label}: diff simulated trace", ["diff", p, measured], f"sim-{kind}.json", held(p))
        p = source(f"meas-{kind}.json")
        add(f"{label}: diff measured trace", ["diff", simulated, p], f"meas-{kind}.json", held(p))
        folder = inputs.folder_of(f"et-{kind}", {})
        p = os.path.join(folder, "w.0.et")
        if kind == "zero":
            os.symlink("/dev/zero", p)
        else:
            os.mkfifo(p)
        add(f"{label}: Chakra rank file", ["chakra", "run", folder, "--topology", TOPOLOGY2],
            "w.0.et", held(p))
        folder = inputs.folder_of(f"et-groups-{kind}", {"w.0.et": one_rank})
        p = os.path.join(folder, "comm_groups.json")
        if kind == "zero":
            os.symlink("/dev/zero", p)
        else:
            os.mkfifo(p)
        add(f"{label}: Chakra comm_groups.json",
            ["chakra", "run", folder, "--topology", TOPOLOGY2], "comm_groups.json", held(p))
        p = source(f"nccl-{kind}.txt")
        add(f"{label}: nccl-tests output",
            ["calibrate", "--nccl-tests", p, "--topology", TOPOLOGY2, "--out",
             inputs.path("o.yaml")], f"nccl-{kind}.txt", held(p))
    return out


# ---------------------------------------------------------------------------------------------
# Running.

def hold_open(fifo):
    """A writer that opens `fifo` and never writes or closes (until killed)."""
    return subprocess.Popen(["sh", "-c", 'exec sleep 600 > "$0"', fifo],
                            start_new_session=True)


def run_case(binary, case, scratch, wall_limit, cpu_limit):
    rss_file = os.path.join(scratch, "rss.txt")
    writer = hold_open(case.writer) if case.writer else None
    if writer:
        time.sleep(0.05)
    start = time.monotonic()
    proc = subprocess.Popen(["/usr/bin/time", "-f", "%M %U %S", "-o", rss_file, binary] + case.argv,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, cwd=scratch)
    timed_out = False
    try:
        _, err = proc.communicate(timeout=KILL_AFTER_S)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    seconds = time.monotonic() - start
    if writer:
        os.killpg(writer.pid, signal.SIGKILL)
        writer.wait()
    err = err.decode(errors="replace")
    rss_mib, cpu = None, None
    try:
        with open(rss_file) as f:
            fields = f.read().split("\n")[-2].split()  # the last line: "KB user system"
            rss_mib, cpu = int(fields[0]) / 1024, float(fields[1]) + float(fields[2])
        os.remove(rss_file)
    except (OSError, IndexError, ValueError):
        pass
    code = proc.returncode
    # /usr/bin/time reports the child's status as its own exit code.
    first = next((l for l in err.split("\n") if l.strip() and not l.startswith("Command ")), "")
    limit = case.max_memory or DEFAULT_MAX_MEMORY
    problems = []
    if timed_out:
        problems.append(f"killed after {KILL_AFTER_S:.0f} s")
    elif code != case.code:
        problems.append(f"exit {code}")
    if case.expect not in err:
        problems.append(f"message lacks {case.expect!r}")
    # The time limits hold for refusals; a valid input (exit 0) runs as long as it needs.
    if seconds >= wall_limit and case.code != 0:
        problems.append(f"over {wall_limit:g} s")
    if cpu is not None and cpu >= cpu_limit and case.code != 0:
        problems.append(f"over {cpu_limit:g} s of CPU")
    if rss_mib is not None and rss_mib * MiB >= limit:
        problems.append("over --max-memory")
    return code if not timed_out else "killed", seconds, cpu, rss_mib, first, problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "clustersim"))
    parser.add_argument("--check", action="store_true", help="exit 1 if any case fails")
    parser.add_argument("--only", default="", help="run only cases whose name holds this text")
    parser.add_argument("--wall-limit", type=float, default=TIME_LIMIT_S,
                        help="wall-clock seconds a case may take")
    parser.add_argument("--cpu-limit", type=float, default=TIME_LIMIT_S,
                        help="CPU seconds (user + system) a case may take")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    folder = tempfile.mkdtemp(prefix="clustersim-hostile-large-")
    failed = 0
    began = time.monotonic()
    try:
        inputs = Inputs(folder)
        scratch = os.path.join(folder, "cwd")
        os.mkdir(scratch)
        generated = time.monotonic()
        all_cases = cases(inputs)
        print(f"inputs generated in {time.monotonic() - generated:.1f} s "
              f"({sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs if os.path.isfile(os.path.join(r, f)) and not os.path.islink(os.path.join(r, f))) / MiB:.0f} MiB)",
              flush=True)
        print("| Case | Exit | Seconds (CPU) | Peak RSS MiB | First line of stderr | Result |")
        print("|---|---|---|---|---|---|")
        for case in all_cases:
            if args.only not in case.name:
                continue
            code, seconds, cpu, rss, first, problems = run_case(binary, case, scratch, args.wall_limit, args.cpu_limit)
            result = "PASS" if not problems else "FAIL: " + "; ".join(problems)
            failed += bool(problems)
            shown = first.replace(folder + "/", "").replace(ROOT + "/", "").replace("|", "\\|")
            if len(shown) > 160:
                shown = shown[:157] + "..."
            rss_text = f"{rss:.0f}" if rss is not None else "?"
            cpu_text = f" ({cpu:.1f})" if cpu is not None else ""
            print(f"| {case.name} | {code} | {seconds:.1f}{cpu_text} | {rss_text} | {shown} | {result} |",
                  flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{failed} failed; {time.monotonic() - began:.0f} s in all")
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
