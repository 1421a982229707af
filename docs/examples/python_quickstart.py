# clustersim from Python, notebook style: each "# %%" cell runs on its own in Jupyter or VS Code,
# and the whole file runs as a script from the repository root (ctest runs it as
# `python3 docs/examples/python_quickstart.py`, so what it shows stays true). docs/python.md
# explains each call.
# %%
import os
import sys

# From the repository root `import clustersim` finds the package; run as a script from elsewhere,
# the root is added here.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
import clustersim  # noqa: E402

# %% One iteration of the bundled default experiment (GPT-3 175B on 32 DGX H100 nodes).
r = clustersim.run(os.path.join(ROOT, "workloads/default.yaml"))
print(r)
print(f"iteration {r.iteration_time_s:.3f} s, MFU {r.mfu:.1%}, bubble {r.bubble_fraction:.1%}, "
      f"host-bound {r.host_fraction:.1%}")
assert 0 < r.mfu < 1

# %% Per-stage rows: a list of dicts; r.table("stages") is a dict of columns, which is what
# pandas.DataFrame takes (pandas is not needed for anything else).
for s in r.stages:
    print(f"stage {s['stage']}: busy {s['busy_s']:.3f} s, bubble {s['bubble_fraction']:.1%}")
busiest = max(r.links, key=lambda link: link["utilization"])
print("busiest link:", busiest["name"], f"{busiest['utilization']:.1%}")
try:
    import pandas  # optional
    print(pandas.DataFrame(r.table("stages")).head())
except ImportError:
    pass

# %% An experiment as a dict, overridden like --set: a two-stage pipeline with measured layer
# times on two H200s. The topology path resolves against base_dir.
pipeline = {
    "topology": "topologies/h200-2gpu-nvlink.yaml",
    "model": {"layers": 8, "hidden_size": 4096, "attention_heads": 32, "vocab_size": 0},
    "parallelism": {"tp": 1, "pp": 2, "dp": 1},
    "training": {"micro_batch_size": 1, "global_batch_size": 8, "seq_length": 2048},
    "compute": {"model": "profile", "layer_forward": "1.3057ms", "layer_backward": "3.3197ms"},
}
exp = clustersim.load(pipeline, base_dir=ROOT).set("network.model", "ideal")
one = exp.run(schedule="1f1b")
# p = 2 stages, m = 8 microbatches: 1F1B's bubble is (p - 1) / (m + p - 1) = 1/9.
print(f"1F1B bubble {one.bubble_fraction:.4f} (closed form {1 / 9:.4f})")
assert abs(one.bubble_fraction - 1 / 9) < 1e-9

# %% Schedules side by side.
cmp = exp.set("parallelism.vpp", 2).compare(["gpipe", "1f1b", "interleaved"])
for row in cmp.rows():
    print(f"{row['schedule']:12} {row['iteration_time_s'] * 1e3:8.3f} ms  "
          f"bubble {row['bubble_fraction']:.3f}")
assert cmp["interleaved"].iteration_time_s < cmp["1f1b"].iteration_time_s

# %% A sweep, ranked by throughput; invalid combinations stay with their reason.
sw = exp.sweep({"training.global_batch_size": [8, 16, 32], "schedule": ["gpipe", "1f1b"]})
for row in sw.rows()[:3]:
    print(row["training.global_batch_size"], row["schedule"], f"{row['tokens_per_s']:.0f} tokens/s")
assert sw.best.microbatches == 32

# %% Bad input raises clustersim.InputError, a ValueError that says where and what is accepted.
try:
    exp.set("schedule", "zigzag").run()
except clustersim.InputError as e:
    print(e)  # the same message as the command line's: where, what, what is accepted
    print("file:", e.file, "accepted:", ", ".join(e.accepted))
    assert "1f1b" in e.accepted
else:
    raise AssertionError("an unknown schedule should raise clustersim.InputError")
