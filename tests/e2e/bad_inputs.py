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


def check(name, argv, expect, cwd):
    global cases
    cases += 1
    with tempfile.TemporaryDirectory() as out:
        argv = argv + ["--json", os.path.join(out, "s.json"), "--trace", os.path.join(out, "t.json")]
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
check("--set without =", ["run", "unknown-top-key.yaml", "--set", "parallelism.tp"],
      "expected key=value", corpus)

for f in failures:
    print("FAIL", f)
print(f"bad inputs: {cases - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
