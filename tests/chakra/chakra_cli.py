#!/usr/bin/env python3
"""`clustersim chakra` as a user runs it (issue #21).

    chakra_cli.py CLUSTERSIM hand       the hand-computed ET set runs in the derived time; bad ETs
                                        exit 2 naming the file and node id, leaving no output
    chakra_cli.py CLUSTERSIM protoc     every message of an exported ET set (with --host)
                                        decodes with `protoc --decode` and the published schema,
                                        field by field (every node of a file in one call through a
                                        wrapper message; rank 0's also one call per node)

The ETs of the first part are written by hand_ets.py's own encoder; the second part reads what
clustersim writes with a framing parser of its own and protoc, independent of the C++ codec.
"""
import json
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import hand_ets as h  # noqa: E402

NOMINAL = HERE / "data" / "two-gpus-nominal.yaml"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(cli, *args):
    return subprocess.run([cli, *map(str, args)], capture_output=True, text=True)


def hand(cli, tmp):
    folder = tmp / "hand"
    h.write(folder, h.hand_set())
    out = tmp / "hand.json"
    r = run(cli, "chakra", "run", folder, "--experiment", NOMINAL, "--json", out)
    check(r.returncode == 0, f"hand set runs (exit {r.returncode}: {r.stderr})")
    if r.returncode == 0:
        summary = json.loads(out.read_text())
        # tests/chakra/hand_ets.py derives 3283 us.
        check(summary["iteration_time_ps"] == h.HAND_ITERATION_PS,
              f"hand set: {summary['iteration_time_ps']} ps, derived {h.HAND_ITERATION_PS}")
        check(summary["world_size"] == 2 and summary["nodes"] == 11, "hand set: 2 ranks, 11 nodes")
    # The unknown attribute (on two nodes) and the METADATA_NODE are reported once each.
    check(r.stderr.count("my_custom_attr") == 1, "an unknown attribute is reported once")
    check(r.stderr.count("METADATA_NODE") == 1, "an unknown node type is reported once")
    # A rank map: rank 0 on GPU 1, rank 1 on GPU 0 mirrors the time (one symmetric link).
    mapped = tmp / "hand-mapped.json"
    r = run(cli, "chakra", "run", folder, "--experiment", NOMINAL, "--rank-map", "1,0", "--json",
            mapped)
    check(r.returncode == 0
          and json.loads(mapped.read_text())["iteration_time_ps"] == h.HAND_ITERATION_PS,
          "--rank-map 1,0 runs the same")
    # The console prints the time as `run` does (format_time: 4 significant digits, one unit).
    check(f"\niteration time        {h.HAND_ITERATION_PS / 1e9:.4g} ms\n" in r.stdout,
          f"chakra run prints the time as run does: {r.stdout!r}")

    # involved_dim (ASTRA-sim's GPT-like ETs): 16 ranks on two DGX H100 nodes, an all-reduce on
    # dimension 0 (each node's 8 GPUs). The topology's dimensions (8 GPUs per node, 2 nodes)
    # and --dims 8,2 give one time; --dims 16 makes the same list the 16 ranks of one dimension,
    # a larger ring over the inter-node links: another time.
    folder = tmp / "gpt"
    h.write(folder, h.involved_dim_set(16, [True, False]))
    two_nodes = ["--experiment", HERE / "data" / "two-nodes-nominal.yaml", "--set", "topology.nodes=2"]
    times = []
    for n, extra in enumerate(([], ["--dims", "8,2"], ["--dims", "16"])):
        out = tmp / f"involved-{n}.json"
        r = run(cli, "chakra", "run", folder, *two_nodes, *extra, "--json", out)
        check(r.returncode == 0, f"involved_dim {extra}: exit {r.returncode} ({r.stderr})")
        times.append(json.loads(out.read_text())["iteration_time_ps"] if r.returncode == 0
                     else None)
    check(times[0] is not None and times[0] == times[1] and times[2] != times[0],
          f"involved_dim: the topology's dimensions are --dims 8,2, not 16: {times}")
    r = run(cli, "chakra", "run", folder, *two_nodes, "--dims", "8,x")
    check(r.returncode == 2 and "--dims 8,x" in r.stderr, f"--dims 8,x: exit 2 ({r.stderr})")

    # Bad ETs: (name, files, expected fragments of the message).
    good = h.hand_set()
    r0 = good["hand.0.et"]
    cases = []
    # Truncated: the file ends inside node 5's message (node 6 is shorter than 40 bytes).
    cases.append(("truncated", {**good, "hand.0.et": r0[: len(r0) - 40]},
                  ["hand.0.et", "truncated", "after node 4"]))
    # Wrong framing: nodes without the GlobalMetadata message first.
    nodes_only = h.delimited([h.node(1, "a", h.COMP, duration_micros=1)])
    cases.append(("no metadata", {**good, "hand.1.et": nodes_only},
                  ["hand.1.et", "not a GlobalMetadata"]))
    # Not delimited at all: a bare Node message.
    cases.append(("no framing", {**good, "hand.1.et": h.metadata() + h.node(1, "a", h.COMP)},
                  ["hand.1.et", "GlobalMetadata"]))
    dangling = h.et_file([h.node(1, "a", h.COMP, duration_micros=1),
                          h.node(2, "b", h.COMP, data_deps=[99])])
    cases.append(("dangling", {"x.0.et": dangling},
                  ["x.0.et", "node 2", "data dependency on node 99"]))
    cycle = h.et_file([h.node(1, "a", h.COMP, ctrl_deps=[3]), h.node(2, "b", h.COMP, data_deps=[1]),
                       h.node(3, "c", h.COMP, data_deps=[2])])
    cases.append(("cycle", {"x.0.et": cycle}, ["x.0.et", "dependency cycle", "node "]))
    to_nowhere = h.et_file([h.node(1, "s", h.SEND, attrs=[("comm_dst", "int32", 5),
                                                          ("comm_size", "int64", 8)])])
    cases.append(("peer rank", {"x.0.et": to_nowhere, "x.1.et": h.et_file([])},
                  ["x.0.et", "node 1", "comm_dst 5 is not a rank"]))
    three = {f"x.{r}.et": h.et_file([h.node(1, "a", h.COMP, duration_micros=1)]) for r in range(3)}
    cases.append(("no GPU", three, ["x.2.et", "rank 2 has no GPU", "--rank-map"]))
    cases.append(("missing rank", {"x.0.et": h.et_file([]), "x.2.et": h.et_file([])},
                  ["rank 1 is missing", "x.1.et"]))
    no_partner = {"hand.0.et": good["hand.0.et"],
                  "hand.1.et": h.et_file([h.node(1, "fwd", h.COMP, duration_micros=200)])}
    cases.append(("unmatched", no_partner, ["hand.0.et", "node 2", "collective", "no match"]))
    # 9e18 bytes at 4.8 TB/s: 1.9e6 s, beyond the 1e6 s a node may take.
    huge = h.et_file([h.node(7, "huge", h.COMP, attrs=[("tensor_size", "uint64", 9 * 10**18)])])
    cases.append(("huge", {"x.0.et": huge}, ["x.0.et", "node 7", "at most 1e6 s"]))
    # involved_dim on two GPUs of explicit devices: no dimensions to map it to.
    cases.append(("involved_dim", h.involved_dim_set(2, [True, False]),
                  ["gpt.0.et", "node 1", "involved_dim", "--dims"]))
    for name, files, fragments in cases:
        folder = tmp / ("bad-" + name.replace(" ", "-"))
        h.write(folder, files)
        out = tmp / "bad.json"
        r = run(cli, "chakra", "run", folder, "--experiment", NOMINAL, "--json", out)
        check(r.returncode == 2, f"bad ET '{name}': exit {r.returncode}, expected 2 ({r.stderr})")
        for f in fragments:
            check(f in r.stderr, f"bad ET '{name}': message lacks '{f}': {r.stderr.strip()}")
        check(not out.exists(), f"bad ET '{name}': no --json left behind")


def read_varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def protoc_decode(message_type, payload, proto="et_def.proto", extra_path=None):
    paths = [f"--proto_path={ROOT / 'sim' / 'chakra'}"]
    if extra_path:
        paths.append(f"--proto_path={extra_path}")
    r = subprocess.run(["protoc", *paths, f"--decode={message_type}", proto],
                       input=payload, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode())
    return r.stdout.decode()


# Every node of a file in one protoc call: the nodes as the repeated Node field of a wrapper
# message, so that protoc decodes each with ChakraProtoMsg.Node all the same.
WRAPPER = '''syntax = "proto3";
package chakra_check;
import "et_def.proto";
message NodeStream { repeated ChakraProtoMsg.Node node = 1; }
'''


def decode_nodes(messages, tmp):
    (tmp / "node_stream.proto").write_text(WRAPPER)
    payload = b"".join(b"\x0a" + h.varint(len(m)) + m for m in messages)
    text = protoc_decode("chakra_check.NodeStream", payload, "node_stream.proto", tmp)
    nodes = []
    for block in text.split("node {\n")[1:]:
        body = block.rstrip().removesuffix("}").rstrip("\n")
        nodes.append("\n".join(line[2:] for line in body.split("\n")) + "\n")
    return nodes


# What the ASTRA-sim 2.x feeder reads, and the oneof member it reads it from.
ATTR_FIELDS = {"is_cpu_op": "bool_val", "num_ops": "int64_val", "tensor_size": "uint64_val",
               "comm_type": "int64_val", "comm_size": "int64_val", "comm_src": "int32_val",
               "comm_dst": "int32_val", "comm_tag": "int32_val", "pg_name": "string_val",
               "cs_duration_ps": "int64_val", "cs_costed_alone": "bool_val",
               "cs_delay": "bool_val"}
REQUIRED = {"COMP_NODE": {"is_cpu_op", "cs_duration_ps"},
            "COMM_COLL_NODE": {"comm_type", "comm_size", "pg_name"},
            "COMM_SEND_NODE": {"comm_dst", "comm_tag", "comm_size"},
            "COMM_RECV_NODE": {"comm_src", "comm_tag", "comm_size"}}


def protoc(cli, tmp):
    shutil.which("protoc") or sys.exit("protoc is not installed (tools/install-deps.sh)")
    folder = tmp / "export"
    # With the host model (--host): CPU nodes and cs_delay waits are checked too.
    r = run(cli, "chakra", "export", HERE / "data" / "small-8gpu.yaml", "--set",
            "topology.nodes=1", "--set", "compute.host.enabled=true", "--host", "--out", folder)
    check(r.returncode == 0, f"export runs ({r.stderr})")
    groups = json.loads((folder / "comm_groups.json").read_text())
    files = sorted(folder.glob("clustersim.*.et"), key=lambda p: int(p.name.split(".")[1]))
    check(len(files) == 8, f"8 ET files, got {len(files)}")
    decoded = 0
    for path in files:
        rank = int(path.name.split(".")[1])
        data = path.read_bytes()
        messages, i = [], 0
        while i < len(data):
            n, i = read_varint(data, i)
            check(i + n <= len(data), f"{path.name}: a message runs past the end")
            messages.append(data[i:i + n])
            i += n
        meta = protoc_decode("ChakraProtoMsg.GlobalMetadata", messages[0])
        check(meta.startswith('version: "0.0.4"'), f"{path.name}: GlobalMetadata first")
        check(f'name: "rank"\n  int64_val: {rank}' in meta, f"{path.name}: metadata rank")
        ids = []
        cpu_nodes = 0
        texts = decode_nodes(messages[1:], tmp)
        check(len(texts) == len(messages) - 1, f"{path.name}: every node decoded")
        if rank == 0:
            # The first file node by node, as `protoc --decode=ChakraProtoMsg.Node` sees each:
            # the same text.
            with ThreadPoolExecutor(max_workers=4) as pool:
                single = list(pool.map(lambda m: protoc_decode("ChakraProtoMsg.Node", m),
                                       messages[1:]))
            check(single == texts, f"{path.name}: node-by-node decoding agrees")
        for text in texts:
            decoded += 1
            # Every field is one of the schema's: protoc prints unknown ones by number.
            check(not re.search(r"^\s*\d+\s*[:{]", text, re.M), f"{path.name}: unknown field in\n{text}")
            node_id = int(re.search(r"^id: (\d+)$", text, re.M).group(1))
            ids.append(node_id)
            ntype = re.search(r"^type: (\w+)$", text, re.M).group(1)
            deps = [int(d) for d in re.findall(r"^(?:ctrl|data)_deps: (\d+)$", text, re.M)]
            check(all(d in ids[:-1] for d in deps), f"{path.name} node {node_id}: deps on earlier nodes")
            attrs = dict(re.findall(r'attr \{\n  name: "(\w+)"\n  (\w+): ', text))
            for name, field in attrs.items():
                check(ATTR_FIELDS.get(name) == field,
                      f"{path.name} node {node_id}: attribute {name} in {field}")
            cpu_nodes += 'name: "is_cpu_op"\n  bool_val: true' in text
            missing = REQUIRED.get(ntype, set()) - attrs.keys()
            check(not missing, f"{path.name} node {node_id} ({ntype}) lacks {missing}")
            pg = re.search(r'name: "pg_name"\n  string_val: "(\w+)"', text)
            if pg:
                check(rank in groups.get(pg.group(1), []),
                      f"{path.name} node {node_id}: rank in communicator {pg.group(1)}")
        check(ids == list(range(1, len(ids) + 1)), f"{path.name}: ids 1..n in order")
        check(cpu_nodes > 0, f"{path.name}: host (is_cpu_op) nodes")
    check(decoded > 100, f"decoded {decoded} nodes")
    print(f"protoc decoded {decoded} nodes of {len(files)} files")


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("hand", "protoc"):
        sys.exit(__doc__)
    cli = sys.argv[1]
    with tempfile.TemporaryDirectory() as t:
        (hand if sys.argv[2] == "hand" else protoc)(cli, Path(t))
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("ok")


if __name__ == "__main__":
    main()
