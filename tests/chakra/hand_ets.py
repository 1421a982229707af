#!/usr/bin/env python3
"""Hand-written Chakra ETs for the tests, encoded with a protobuf writer of its own (Python
standard library only, independent of clustersim's C++ codec), from the field numbers of
sim/chakra/et_def.proto.

    python3 hand_ets.py OUT_DIR      writes the hand-computed set (hand.0.et, hand.1.et)

The module also gives the bad-ET cases of chakra_cli.py their bytes.
"""
import struct
import sys
from pathlib import Path

# NodeType and CollectiveCommType of et_def.proto.
COMP, MEM_LOAD, SEND, RECV, COLL, METADATA = 4, 2, 5, 6, 7, 1
ALL_REDUCE, ALL_GATHER = 0, 2


def varint(v):
    out = bytearray()
    v &= (1 << 64) - 1  # negative int32/int64 are sign-extended to 64 bits
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field, wire):
    return varint(field << 3 | wire)


def f_varint(field, v):
    return tag(field, 0) + varint(v)


def f_bytes(field, b):
    if isinstance(b, str):
        b = b.encode()
    return tag(field, 2) + varint(len(b)) + b


def f_fixed64(field, v):
    return tag(field, 1) + struct.pack("<Q", v)


# AttributeProto: name 1, then one oneof member: int32_val 7, int64_val 9, uint64_val 13,
# bool_val 27, bool_list 28 (BoolList: values 1, packed), string_val 29, double_val 3.
def attr(name, kind, value):
    body = f_bytes(1, name)
    if kind == "int32":
        body += f_varint(7, value)
    elif kind == "int64":
        body += f_varint(9, value)
    elif kind == "uint64":
        body += f_varint(13, value)
    elif kind == "bool":
        body += f_varint(27, 1 if value else 0)
    elif kind == "bool_list":
        body += f_bytes(28, f_bytes(1, bytes(1 if v else 0 for v in value)))
    elif kind == "string":
        body += f_bytes(29, value)
    elif kind == "double":
        body += f_fixed64(3, struct.unpack("<Q", struct.pack("<d", value))[0])
    else:
        raise ValueError(kind)
    return body


def node(id, name, type, data_deps=(), ctrl_deps=(), duration_micros=0, attrs=()):
    """A Node message: id 1, name 2, type 3, ctrl_deps 4 and data_deps 5 (packed),
    duration_micros 7, attr 10."""
    body = f_varint(1, id) + f_bytes(2, name) + f_varint(3, type)
    if ctrl_deps:
        body += f_bytes(4, b"".join(varint(d) for d in ctrl_deps))
    if data_deps:
        body += f_bytes(5, b"".join(varint(d) for d in data_deps))
    if duration_micros:
        body += f_varint(7, duration_micros)
    for a in attrs:
        body += f_bytes(10, attr(*a))
    return body


def metadata(version="0.0.4"):
    return f_bytes(1, version)  # GlobalMetadata.version


def delimited(messages):
    """ASTRA-sim 2.x's framing: each message preceded by its length as a varint."""
    return b"".join(varint(len(m)) + m for m in messages)


def et_file(nodes):
    return delimited([metadata()] + list(nodes))


# The hand-computed set: two ranks on tests/chakra/data/two-gpus.yaml (one 100 GB/s NVLink each
# way, 1 us latency, nominal links: two-gpus-nominal.yaml). Expected iteration time, by hand:
#   rank 0 node 1, COMP 100 us:               [0, 100 us]
#   rank 1 node 1, COMP 200 us:               [0, 200 us]
#   node 2 of both, ALL_REDUCE of 100 MB:     starts when both reach it, at 200 us. A two-rank
#       ring sends 2(n-1)/n x S = 100 MB each way over 2 steps: 100e6 B / 100e9 B/s = 1000 us
#       plus 2 x 1 us of latency = 1002 us                              -> [200, 1202 us]
#   rank 0 node 3, COMP 50 us after it:       [1202, 1252 us]
#   rank 0 node 4, SEND 100 MB to rank 1:     1 us + 1000 us = 1001 us  -> arrives at 2253 us
#   rank 1 node 3, RECV (after node 2):       completes on arrival, 2253 us
#   rank 1 node 4, COMP 30 us:                [2253, 2283 us]
#   rank 1 node 5, COMP by roofline: num_ops 989e9 at 989 TFLOPS = 1000 us, tensor_size 2.4e9 B
#       at 4.8 TB/s = 500 us; the larger                                -> [2283, 3283 us]
#   rank 0 node 5, MEM_LOAD of 480 MB at 4.8 TB/s = 100 us beside the compute stream, [0, 100 us]
#   rank 0 node 6, METADATA_NODE: no time (reported once)
# Iteration: 3283 us = 3,283,000,000 ps.
HAND_ITERATION_PS = 3_283_000_000
MB100 = 100_000_000


def hand_set():
    rank0 = [
        node(1, "fwd", COMP, duration_micros=100, attrs=[("is_cpu_op", "bool", False)]),
        node(2, "grad all-reduce", COLL, data_deps=[1],
             attrs=[("comm_type", "int64", ALL_REDUCE), ("comm_size", "int64", MB100)]),
        node(3, "post", COMP, data_deps=[2], duration_micros=50),
        node(4, "send act", SEND, data_deps=[3],
             attrs=[("comm_dst", "int32", 1), ("comm_tag", "int32", 7),
                    ("comm_size", "int64", MB100), ("my_custom_attr", "string", "x")]),
        node(5, "load", MEM_LOAD, attrs=[("tensor_size", "uint64", 480_000_000)]),
        node(6, "meta", METADATA, attrs=[("my_custom_attr", "string", "y")]),
    ]
    rank1 = [
        node(1, "fwd", COMP, duration_micros=200),
        node(2, "grad all-reduce", COLL, data_deps=[1],
             attrs=[("comm_type", "int64", ALL_REDUCE), ("comm_size", "int64", MB100)]),
        node(3, "recv act", RECV, ctrl_deps=[2],
             attrs=[("comm_src", "int32", 0), ("comm_tag", "int32", 7),
                    ("comm_size", "int64", MB100)]),
        node(4, "use", COMP, data_deps=[3], duration_micros=30),
        node(5, "gemm", COMP, ctrl_deps=[4],
             attrs=[("num_ops", "int64", 989_000_000_000), ("tensor_size", "uint64", 2_400_000_000)]),
    ]
    return {"hand.0.et": et_file(rank0), "hand.1.et": et_file(rank1)}


def involved_dim_set(ranks, dims_bits, size=64 << 20):
    """ASTRA-sim's GPT-like form: one ALL_REDUCE per rank with involved_dim and no pg_name."""
    nodes = [node(1, "allreduce", COLL, attrs=[("comm_type", "int64", ALL_REDUCE),
                                               ("comm_size", "int64", size),
                                               ("involved_dim", "bool_list", dims_bits)])]
    return {f"gpt.{r}.et": et_file(nodes) for r in range(ranks)}


def write(folder, files):
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: hand_ets.py OUT_DIR")
    write(sys.argv[1], hand_set())
