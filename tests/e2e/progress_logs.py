#!/usr/bin/env python3
"""Progress on a terminal, quiet when piped; --log-json.

- `run` and `sweep` with stderr on a pseudo-terminal draw a progress line ("simulating: N/N",
  "sweep: 3/3 (100%) combinations", rewritten with carriage returns and erased at the end); with
  stderr piped they print no progress at all, and stdout is the same either way.
- a warning never lands on the progress line: the line is erased before anything is logged.
- --log-json: every stderr line is a JSON object with a level and a message (a warning here),
  and a bad input is one JSON error line with file, line, column and exit 2.

Usage: progress_logs.py CLUSTERSIM_BINARY
"""
import json
import os
import pty
import re
import select
import subprocess
import sys
import threading

binary = os.path.abspath(sys.argv[1])
root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PIPELINE = os.path.join(root, "workloads", "h200-2gpu-pipeline.yaml")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def on_terminal(args):
    """(exit status, stdout, what the terminal got on stderr).

    The parent keeps its own copy of the terminal's slave side open until the child has exited
    and the terminal has been quiet for half a second: closing it at once and reading until EIO
    loses what the child wrote last on some kernels (the master reports the hang-up before the
    last writes have been moved to its side), which is how a run's final lines went missing
    once in CI."""
    master, slave = pty.openpty()
    p = subprocess.Popen([binary] + args, cwd=root, stdout=subprocess.PIPE, stderr=slave)
    out = []
    reader = threading.Thread(target=lambda: out.append(p.stdout.read()))
    reader.start()
    seen = b""
    exited = False
    while True:
        ready, _, _ = select.select([master], [], [], 0.5 if exited else 0.05)
        if ready:
            seen += os.read(master, 65536)
        elif exited:
            break
        else:
            exited = p.poll() is not None
    status = p.wait(timeout=600)
    reader.join()
    os.close(slave)
    os.close(master)
    return status, out[0].decode(), seen.decode(errors="replace")


def piped(args):
    r = subprocess.run([binary] + args, cwd=root, capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout, r.stderr


sweep = ["sweep", PIPELINE, "--vary", "training.global_batch_size=4,8,16"]
status, out, tty = on_terminal(sweep)
check(status == 0, "sweep on a terminal: exit %d" % status)
# The last update is always drawn: all three combinations.
check("sweep: 3/3 (100%) combinations" in tty, "sweep on a terminal: no progress in %r" % tty)
check("\r" in tty and tty.endswith("\x1b[K"), "sweep: the progress line is not erased: %r" % tty)
status2, out2, err2 = piped(sweep)
check(status2 == 0 and err2 == "", "sweep piped: stderr %r" % err2)
check(out == out2, "sweep: stdout differs between a terminal and a pipe")

run = ["run", PIPELINE, "--schedule", "interleaved"]
# 2 workers x 8 microbatches x 2 chunks x 2 passes = 64 passes.
status, out, tty = on_terminal(run)
check(status == 0 and "simulating: 64/64 (100%)" in tty, "run on a terminal: exit %d, %r" % (status, tty))
status2, out2, err2 = piped(run)
check(status2 == 0 and "simulating" not in err2 and "\r" not in err2, "run piped: %r" % err2)
check(out == out2, "run: stdout differs between a terminal and a pipe")

# A warning logged while the progress line is drawn starts a line of its own: the progress line is
# erased first (here the HBM warning, logged after the last update, "simulating: 64/64 (100%)",
# and the MFU one: the profile's layer times, measured at a micro-batch of 1, charged at 64).
status, out, tty = on_terminal(run + ["--set", "training.micro_batch_size=64",
                                      "--set", "training.global_batch_size=512"])
check(status == 0 and "simulating: 64/64 (100%)" in tty,
      "run with a warning on a terminal: exit %d, %r" % (status, tty))
warned = [m.start() for m in re.finditer("warning", tty)]
check(len(warned) == 2, "run with a warning on a terminal: %d warnings in %r" % (len(warned), tty))
for at in warned:
    # What the terminal shows before the word on its line: only escape sequences (the erase,
    # colours), no progress text.
    before = re.split(r"[\r\n]", tty[:at])[-1]
    check(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", before) == "",
          "a warning shares its line with the progress line: %r" % tty)

# --log-json: 1F1B has no use for the file's vpp = 2, a warning.
status, out, err = piped(["run", PIPELINE, "--schedule", "1f1b", "--log-json"])
lines = [json.loads(l) for l in err.splitlines()]
check(status == 0 and lines, "run --log-json: exit %d, stderr %r" % (status, err))
check(all(set(l) == {"level", "message"} for l in lines), "run --log-json: %r" % lines)
check(any(l["level"] == "warning" and "vpp = 2 is ignored" in l["message"] for l in lines),
      "run --log-json: no vpp warning in %r" % lines)
# ... and with a terminal the JSON log stays machine-readable: no progress line.
status, out, tty = on_terminal(["run", PIPELINE, "--schedule", "1f1b", "--log-json"])
check("simulating" not in tty, "--log-json on a terminal drew progress: %r" % tty)

status, out, err = piped(["run", PIPELINE, "--set", "network.model=telepathy", "--log-json"])
lines = err.splitlines()
check(status == 2 and len(lines) == 1, "bad input --log-json: exit %d, %r" % (status, err))
if lines:
    e = json.loads(lines[0])
    check(e["level"] == "error" and e["exit"] == 2 and e["file"] == "--set network.model=telepathy"
          and e["line"] == 0 and "telepathy" in e["message"], "bad input --log-json: %r" % e)
status, out, err = piped(["run", os.path.join(root, "tests", "python", "no-such.yaml"),
                          "--log-json"])
check(status == 2 and json.loads(err)["message"].endswith("no such file"),
      "missing file --log-json: %r" % err)

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("progress_logs: all checks passed")
