#!/usr/bin/env python3
"""Prints the cases.yaml rows of the Llama, MoE and H200-microbenchmark validation families
(docs/validation.md) from the committed data files, so that the rows are reproducible:

    tools/validation/h200_family_cases.py [FAMILY...] > rows.yaml

Families: layer-h200-llama, kernels-h200-llama, layer-h200-moe, kernels-h200-moe,
grouped-gemm-h200, attention-h200, fp8-gemm-h200 (all by default). Reads tests/validation/data/
h200-llama.json, h200-moe.json and h200-microbench.json; writes nothing else.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "validation", "data")
TOPO = "../../topologies/h200-2gpu-nvlink.yaml"


def load(name):
    with open(os.path.join(DATA, name)) as f:
        return json.load(f)


def sets_text(sets):
    return "[" + ", ".join('"%s"' % s for s in sets) + "]"


def layer_rows(family_layer, family_kernels, experiment, source, rows, sets_of, tag_of):
    out = []
    for r in rows:
        sets = sets_of(r)
        tag = tag_of(r)
        for p, key, extra in (("forward", "fwd_ms", ""),
                              ("backward", "bwd_ms", ', fwd_bwd_clocks: "sustained"')):
            out.append('  - {id: "%s-%s-%s", family: "%s", kind: "layer", layer_pass: "%s"%s, '
                       'experiment: "experiments/%s", set: %s, published: %s, unit: "ms", '
                       'source: "%s layers (%s)"}'
                       % (family_layer, tag, p[:3], family_layer, p, extra, experiment,
                          sets_text(sets), repr(r[key]), source, key))
        for p, key in (("forward", "kernel_sum_ms_forward"),
                       ("forward_backward", "kernel_sum_ms_forward_backward")):
            out.append('  - {id: "%s-%s-%s", family: "%s", kind: "layer", layer_pass: "%s", '
                       'time: "kernels", experiment: "experiments/%s", set: %s, published: %s, '
                       'unit: "ms", source: "%s layers (%s)"}'
                       % (family_kernels, tag, p, family_kernels, p, experiment, sets_text(sets),
                          repr(r[key]), source, key))
    return out


def llama():
    rows = load("h200-llama.json")["layers"]
    return layer_rows(
        "layer-h200-llama", "kernels-h200-llama", "h200-llama-layer.yaml", "H200-LLAMA", rows,
        lambda r: ["model.hidden_size=%d" % r["h"], "model.attention_heads=%d" % r["heads"],
                   "model.kv_heads=%d" % r["kv_heads"], "model.ffn_hidden_size=%d" % r["ffn"],
                   "training.seq_length=%d" % r["s"], "training.micro_batch_size=%d" % r["mbs"],
                   "training.global_batch_size=%d" % (2 * r["mbs"])],
        lambda r: "h%d-s%d-b%d" % (r["h"], r["s"], r["mbs"]))


def moe():
    rows = load("h200-moe.json")["layers"]
    return layer_rows(
        "layer-h200-moe", "kernels-h200-moe", "h200-moe-layer.yaml", "H200-MOE", rows,
        lambda r: ["model.hidden_size=%d" % r["h"], "model.attention_heads=%d" % r["heads"],
                   "model.kv_heads=%d" % r["kv_heads"], "model.experts=%d" % r["experts"],
                   "model.top_k=%d" % r["top_k"], "model.moe_ffn_hidden_size=%d" % r["moe_ffn"],
                   "model.shared_experts=%d" % r["shared_experts"],
                   "training.seq_length=%d" % r["s"], "training.micro_batch_size=%d" % r["mbs"],
                   "training.global_batch_size=%d" % (2 * r["mbs"])],
        lambda r: "e%d-k%d-b%d" % (r["experts"], r["top_k"], r["mbs"]))


def kernel_case(family, cid, body, published, unit, mhz, source):
    return ('  - {id: "%s", family: "%s", kind: "kernel", topology: "%s", %s, sm_mhz: %s, '
            'published: %s, unit: "%s", source: "%s"}'
            % (cid, family, TOPO, body, repr(mhz), repr(published), unit, source))


def grouped():
    # The points measured beside a dense GEMM of the same work (dense_rows): every model, linear
    # and pass at the paired experts and tokens per expert.
    g = load("h200-microbench.json")["sections"]["grouped_gemm"]
    paired = {(r["model"], r["linear"], r["gemm"], r["E"], r["tpe"]) for r in g["dense_rows"]}
    out = []
    for r in g["rows"]:
        key = (r["model"], r["linear"], r["gemm"], r["E"], r["tpe"])
        if key not in paired:
            continue
        n, k = (r["m"], r["n"]) if r["gemm"] == "wgrad" else (r["n"], r["k"])
        body = ("grouped_gemm: {experts: %d, tokens: %d, n: %d, k: %d, pass: %s}"
                % (r["E"], r["tpe"], n, k, r["gemm"]))
        cid = "grouped-%s-%s-%s-e%d-t%d" % (r["model"].replace("_", ""), r["linear"], r["gemm"],
                                            r["E"], r["tpe"])
        out.append(kernel_case("grouped-gemm-h200", cid, body, r["ms"], "ms", r["sm_mhz"],
                               "H200-MICRO grouped_gemm"))
    return out


def attention():
    a = load("h200-microbench.json")["sections"]["attention"]
    out = []
    for r in a["rows"]:
        if r["s"] not in (2048, 8192):
            continue
        for p, key in (("fwd", "fwd_ms"), ("bwd", "bwd_ms")):
            body = ("attention: {batch: %d, heads: %d, kv_heads: %d, seq: %d, head_dim: %d, "
                    "pass: %s}" % (r["b"], r["heads"], r["kv_heads"], r["s"], r["d"], p))
            cid = "attn-h%d-kv%d-s%d-%s" % (r["heads"], r["kv_heads"], r["s"], p)
            out.append(kernel_case("attention-h200", cid, body, r[key], "ms", r["sm_mhz"],
                                   "H200-MICRO attention"))
    return out


def fp8():
    f = load("h200-microbench.json")["sections"]["fp8_gemm"]
    out = []
    for r in f["rows"]:
        if r["shape"] not in ("fc1", "fc2") or r["h"] not in (4096, 8192) or \
                r["tp"] not in (1, 8) or r["M"] != 8192:
            continue
        recipe = {"fp8_tensorwise": "tensorwise", "fp8_rowwise": "rowwise",
                  "fp8_blockwise_1x128_128x128": "blockwise"}.get(r["variant"])
        if not recipe:
            continue
        body = "fp8_gemm: {m: %d, n: %d, k: %d, recipe: %s}" % (r["M"], r["N"], r["K"], recipe)
        cid = "fp8-%s-h%d-tp%d-%s" % (r["shape"], r["h"], r["tp"], recipe)
        out.append(kernel_case("fp8-gemm-h200", cid, body, r["ms"], "ms", r["sm_mhz"],
                               "H200-MICRO fp8_gemm (%s)" % r["variant"]))
    return out


BUILDERS = {"layer-h200-llama": llama, "kernels-h200-llama": llama, "layer-h200-moe": moe,
            "kernels-h200-moe": moe, "grouped-gemm-h200": grouped, "attention-h200": attention,
            "fp8-gemm-h200": fp8}


def main():
    wanted = sys.argv[1:] or list(BUILDERS)
    for name in wanted:
        if name not in BUILDERS:
            sys.exit("unknown family %s; expected %s" % (name, ", ".join(BUILDERS)))
        for line in BUILDERS[name]():
            if 'family: "%s"' % name in line:
                print(line)


if __name__ == "__main__":
    main()
