#!/usr/bin/env python3
"""Every clustersim command in the documentation runs (issue 39, "Every documented example runs").

Reads the fenced code blocks of README.md, docs/*.md and docs/yaml/*.md and takes every command
line that invokes clustersim (`clustersim ...`, `build/bin/clustersim ...`, `$ clustersim ...`,
`mpirun ... clustersim ...`, `/usr/bin/time ... clustersim ...`), joined and split as a shell
would (backslash-newlines joined, a quote left open continues on the next line, trailing
`# comments` dropped; shlex). Each one is either
- a synopsis (a `[...]` option, `A|B` alternatives or an UPPERCASE placeholder such as
  EXPERIMENT.yaml, T.yaml, DIR, FILE): not run;
- a placeholder: it names a file the user brings (their nccl-tests output, their profiler trace),
  listed with the reason in PLACEHOLDERS below, the only list of commands that do not run; or
- run: everything else, so a command added to the docs runs without being listed anywhere.
A placeholder entry that no command uses any more, or that names a file the repository has, fails
the test (the list stays true).

The commands of one doc file run in the order the file gives them (a later one may read what an
earlier one wrote: `chakra run ets/` after `chakra export --out ets/`), through bash as a user
pastes them, after the shell variable assignments written earlier in the same block
(`G=$(...)` in performance-history.md), in a scratch folder made to look like the repository:
symlinks to its top-level entries (workloads/, topologies/, tests/, tools/, ...), a real docs/
holding copies of the doc pages, docs/examples and docs/yaml as symlinks and an empty docs/images/
(so that
`--write-doc docs/validation.md` or `--svg docs/images/...` cannot touch the real docs), and
build/bin/clustersim a symlink to the binary under test, first on PATH (for the lines that say
`clustersim` alone). HOME and TMPDIR point into the scratch folder.

Checked for each command: the exit status is 0, or one the doc gives for that command
(EXIT_STATUSES below, with the doc's words); no argument is an absolute path (it would read or
write outside the scratch folder: the docs use relative names); and, after all of them, nothing
in the repository's tree changed (every file's size and mtime, build folders and .git aside:
writes through the symlinks) and nothing appeared next to the scratch repository.

`mpirun` lines run when mpirun is on PATH (counted as skipped otherwise) with what
docs/user-guide.md says they need: `--allow-run-as-root` when running as root (a container) and
`--oversubscribe` when -n exceeds the cores.

Time (measured with `time python3 tests/e2e/docs_examples.py build/bin/clustersim`): 91 s wall
in the Release build on the 2-core development machine at load average 7 (110 s with the docs run
one at a time; they run two at a time); 80 s of command time is the two documented
`chakra export` / `chakra run` pairs (256 ETs each), every other command takes under 4 s. In the
full `ctest -j2` at that load it took 215 s (one doc at a time), the longest test. Under the sanitizers (tools/sanitize.sh, a build whose CMAKE_CXX_FLAGS hold
-fsanitize) the commands would take several times as long, so tests/CMakeLists.txt passes
--skip-run there: the docs are still read and classified (a stale PLACEHOLDERS or EXIT_STATUSES
entry still fails), then the script exits 77, which ctest reports as skipped (SKIP_RETURN_CODE).

A command prefixed with `time` or `/usr/bin/time` is a documented measurement (the planner's full
searches in docs/plan.md and docs/performance-history.md take minutes each): classified and not run,
unless --measurements is given.

Usage: docs_examples.py CLUSTERSIM_BINARY [--skip-run] [--measurements] [--only TEXT] [--verbose]
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Files some documented commands need that the repository cannot have: the user's own
# measurements. A command naming one of them (as an argument, after `=` or after `@`) is listed
# as a placeholder and not run. Keep this the only list of commands that do not run.
PLACEHOLDERS = {
    "all_reduce_perf.txt": "the user's nccl-tests output from their own cluster",
    "all_gather_perf.txt": "the user's nccl-tests output from their own cluster",
    "reduce_scatter_perf.txt": "the user's nccl-tests output from their own cluster",
    "alltoall_perf.txt": "the user's nccl-tests output from their own cluster",
    "sendrecv_perf.txt": "the user's nccl-tests output from their own cluster",
    "my-cluster.yaml": "the user's topology file describing their own cluster",
    "my-profile.json.gz": "the user's PyTorch profiler trace of their own run",
    "my-model-profile.json.gz": "the user's PyTorch profiler trace of their own model",
}

# Exit statuses a doc gives for a command besides 0: (doc, regular expression on the arguments
# after `clustersim`, the statuses accepted, the doc's words, which must still be in that doc).
EXIT_STATUSES = [
    ("docs/validation.md", r"^validate\b.*\s--check\b", {0, 3},
     "exit status 3 if a case misses its tolerance"),
    ("docs/what-if.md", r"faults=\{links: \[\{link: n0\.nic0->leaf0, failed: true\}", {2},
     "The same NIC failed: exit 2, nothing written."),
]

WRAPPERS = {"mpirun", "mpiexec", "time"}
# Commands prefixed with `time` or `/usr/bin/time` are documented measurements: classified, and run
# only with --measurements (the planner's full searches take minutes each).
RUN_MEASUREMENTS = "--measurements" in sys.argv
TIMEOUT_S = 600


def doc_files():
    files = [os.path.join(ROOT, "README.md")]
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "yaml", "*.md")))
    return files


def fenced_blocks(text):
    """(line number of the block's first line, lines with the fence's indentation removed)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})", lines[i])
        if not m:
            i += 1
            continue
        indent, fence = len(m.group(1)), m.group(2)
        body, start, i = [], i + 2, i + 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            line = lines[i]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            i += 1
        i += 1
        yield start, body


def join_continuations(text):
    """Removes backslash-newline pairs the way bash does: outside single quotes only."""
    out, quote, i = [], None, 0
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "'" and i + 1 < len(text):
            if text[i + 1] == "\n":
                i += 2
                continue
            out.append(text[i:i + 2])
            i += 2
            continue
        if c in "'\"" and quote is None:
            quote = c
        elif c == quote:
            quote = None
        out.append(c)
        i += 1
    return "".join(out)


def shell_lines(body):
    """(offset in the block, shell text, argv) of each complete shell line of a block: a line
    ending in a backslash or leaving a quote open takes the next lines, as a shell reads them.
    A line that cannot be completed by the end of the block (prose, output) gives argv None."""
    i = 0
    while i < len(body):
        line = body[i]
        if line.startswith("$ "):
            line = line[2:]
        for j in range(i, len(body)):
            text = "\n".join([line] + body[i + 1:j + 1])
            joined = join_continuations(text)
            if joined.endswith("\\"):
                continue
            try:
                argv = shlex.split(joined, comments=True)
            except ValueError:  # a quote still open
                continue
            yield i, joined, argv
            i = j + 1
            break
        else:
            yield i, line, None
            i += 1


def is_assignment(token):
    return re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", token) is not None


def clustersim_index(argv):
    """Index of the clustersim program in argv, or None when the line does not invoke it."""
    k = 0
    while k < len(argv) and is_assignment(argv[k]):
        k += 1
    if k == len(argv):
        return None
    if os.path.basename(argv[k]) == "clustersim":
        return k
    if os.path.basename(argv[k]) in WRAPPERS:
        for n in range(k + 1, len(argv)):
            if os.path.basename(argv[n]) == "clustersim":
                return n
    return None


def synopsis_reason(args):
    for a in args:
        if a.startswith("[") or a.startswith("(") or re.search(r"\](\.\.\.)?$", a):
            return f"optional part {a!r}"
        if "|" in a and "{" not in a:
            return f"alternatives {a!r}"
        for part in re.split(r"[=@]", a):
            if re.match(r"^[A-Z][A-Z_]*(\.[a-z]+)?$", part):
                return f"placeholder {part!r}"
    return None


def placeholders_of(args):
    """The PLACEHOLDERS files the arguments name, in order."""
    names = []
    for a in args:
        for part in [a] + re.split(r"[=@]", a):
            name = part.rstrip("/")
            if name in PLACEHOLDERS and name not in names:
                names.append(name)
    return names


def expected_statuses(doc, args):
    text = " ".join(args)
    for where, pattern, statuses, words in EXIT_STATUSES:
        if where == doc and re.search(pattern, text):
            return statuses, f"{where}: {words!r}"
    return {0}, None


def extract():
    """Every clustersim command of the docs: dicts with doc, line, text, argv, kind, reason."""
    commands = []
    for path in doc_files():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        doc = os.path.relpath(path, ROOT)
        for start, body in fenced_blocks(text):
            assignments = []
            for offset, shell, argv in shell_lines(body):
                if not argv:
                    continue
                if all(is_assignment(t) for t in argv) or \
                        re.match(r"^[A-Za-z_][A-Za-z0-9_]*=\$\(.*\)\s*$", shell):
                    assignments.append(shell)
                    continue
                k = clustersim_index(argv)
                if k is None:
                    continue
                c = {"doc": doc, "line": start + offset, "text": shell.strip(), "argv": argv,
                     "args": argv[k + 1:], "prelude": list(assignments), "kind": "run",
                     "reason": None}
                why = synopsis_reason(argv[k + 1:])
                if why:
                    c["kind"], c["reason"] = "synopsis", why
                elif argv[0] in ("time", "/usr/bin/time") and not RUN_MEASUREMENTS:
                    # A documented measurement (docs/performance-history.md, docs/plan.md): the
                    # figure is its point, and a full plan search takes minutes.
                    c["kind"], c["reason"] = "measurement", "run with --measurements"
                else:
                    names = placeholders_of(argv[k + 1:])
                    c["placeholders"] = names
                    if names:
                        c["kind"] = "placeholder"
                        c["reason"] = "; ".join(f"{n}: {PLACEHOLDERS[n]}" for n in names)
                commands.append(c)
    return commands


def snapshot(root):
    """(relative path -> (size, mtime_ns)) of the repository's files, build folders and .git
    aside (ctest and the builds write there)."""
    state = {}
    for top in sorted(os.listdir(root)):
        if top == ".git" or top.startswith("build"):
            continue
        full = os.path.join(root, top)
        walk = [(root, [], [top])] if not os.path.isdir(full) else os.walk(full)
        for folder, dirs, files in walk:
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                p = os.path.join(folder, name)
                try:
                    st = os.lstat(p)
                except FileNotFoundError:
                    continue
                state[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return state


def make_scratch(base, binary):
    """A folder that looks like the repository, with the docs and build/ its own."""
    repo = os.path.join(base, "repo")
    os.makedirs(os.path.join(repo, "docs", "images"))
    os.makedirs(os.path.join(repo, "build", "bin"))
    for d in ("home", "tmp"):
        os.makedirs(os.path.join(base, d))
    for entry in os.listdir(ROOT):
        if entry in ("docs", ".git") or entry.startswith("build"):
            continue
        os.symlink(os.path.join(ROOT, entry), os.path.join(repo, entry))
    for entry in os.listdir(os.path.join(ROOT, "docs")):
        src = os.path.join(ROOT, "docs", entry)
        if entry == "images":
            continue
        if os.path.isdir(src):
            os.symlink(src, os.path.join(repo, "docs", entry))
        else:
            shutil.copyfile(src, os.path.join(repo, "docs", entry))
    os.symlink(binary, os.path.join(repo, "build", "bin", "clustersim"))
    return repo


def mpi_flags(argv):
    """What docs/user-guide.md says mpirun needs here: --allow-run-as-root as root,
    --oversubscribe for more processes than cores."""
    flags = []
    if os.geteuid() == 0:
        flags.append("--allow-run-as-root")
    for opt in ("-n", "-np", "--np", "-c"):
        if opt in argv:
            count = argv[argv.index(opt) + 1]
            if count.isdigit() and int(count) > (os.cpu_count() or 1):
                flags.append("--oversubscribe")
            break
    return flags


def run_doc(commands, binary, verbose):
    """Runs one doc's runnable commands in order in a scratch folder of their own; returns the
    lines to print and the failures."""
    log, failures = [], []
    with tempfile.TemporaryDirectory(prefix="docs-examples-") as base:
        repo = make_scratch(base, binary)
        env = dict(os.environ)
        env.update({"HOME": os.path.join(base, "home"), "TMPDIR": os.path.join(base, "tmp"),
                    "PATH": os.path.join(repo, "build", "bin") + os.pathsep + env["PATH"]})
        env.pop("CLUSTERSIM_DATA", None)
        for c in commands:
            where = f"{c['doc']}:{c['line']}"
            outside = [a for a in c["argv"][1:] if a.startswith("/")]
            if outside:
                failures.append(f"{where}: absolute path {outside[0]} reads or writes outside "
                                f"the scratch folder; use a path relative to the repository")
                continue
            shell = c["text"]
            prog = re.match(r"^((?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*)(mpirun|mpiexec)\b", shell)
            if prog:
                if shutil.which(prog.group(2)) is None:
                    c["kind"], c["reason"] = "skipped", f"no {prog.group(2)} on PATH"
                    continue
                shell = shell[:prog.end()] + "".join(" " + f for f in mpi_flags(c["argv"])) + \
                    shell[prog.end():]
            script = "\n".join(c["prelude"] + [shell])
            began = time.monotonic()
            try:
                r = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True,
                                   text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
                status, out, err = r.returncode, r.stdout, r.stderr
            except subprocess.TimeoutExpired:
                status, out, err = "timeout", "", f"no exit after {TIMEOUT_S} s"
            c["seconds"] = time.monotonic() - began
            statuses, why = expected_statuses(c["doc"], c["args"])
            ok = status in statuses
            log.append(f"{'ran ' if ok else 'FAIL'} {c['seconds']:6.2f} s  exit {status}  {where}  "
                  f"{shell.splitlines()[0][:100]}")
            if not ok:
                failures.append(f"{where}: exit {status}, expected "
                                f"{' or '.join(map(str, sorted(statuses)))}"
                                f"{f' ({why})' if why else ''}: {shell}\n"
                                f"  stderr: {err.strip()[-2000:]}")
            elif verbose:
                log.append(out[-1500:] + err[-1500:])
        strays = sorted(set(os.listdir(base)) - {"repo", "home", "tmp"})
        if strays:
            failures.append(f"{commands[0]['doc']}: the commands wrote {strays} outside the "
                            f"scratch repository")
    return log, failures


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    binary = os.path.abspath(args[0])
    skip_run = "--skip-run" in args
    verbose = "--verbose" in args
    only = args[args.index("--only") + 1] if "--only" in args else None
    failures = []

    commands = extract()
    if not any(c["kind"] == "run" for c in commands):
        failures.append("no runnable clustersim command found in the docs: the extraction broke")
    used = {n for c in commands for n in c.get("placeholders", [])}
    for name in sorted(set(PLACEHOLDERS) - used):
        failures.append(f"PLACEHOLDERS lists {name}, which no documented command names any more")
    for name in sorted(used):
        found = glob.glob(os.path.join(ROOT, "**", name), recursive=True)
        found = [f for f in found if "/build" not in os.path.relpath(f, ROOT)[:6]]
        if found:
            failures.append(f"PLACEHOLDERS lists {name}, but the repository has "
                            f"{os.path.relpath(found[0], ROOT)}: run the command instead")
    for where, pattern, statuses, words in EXIT_STATUSES:
        with open(os.path.join(ROOT, where), encoding="utf-8") as f:
            if words not in f.read():
                failures.append(f"EXIT_STATUSES quotes {where} as saying {words!r}; it does not "
                                f"any more")
        if not any(c["doc"] == where and re.search(pattern, " ".join(c["args"]))
                   for c in commands if c["kind"] == "run"):
            failures.append(f"EXIT_STATUSES has {pattern!r} for {where}, which matches no "
                            f"command there any more")
    for c in commands:
        if c["kind"] != "run":
            print(f"{c['kind']:<11} {c['doc']}:{c['line']}  {c['reason']}")

    if skip_run:
        for f in failures:
            print("FAIL:", f)
        print("docs_examples: not run in this build (--skip-run: sanitizers)")
        return 1 if failures else 77

    before = snapshot(ROOT)
    began = time.monotonic()
    # The docs run two at a time (their scratch folders are separate): the two chakra
    # export/run pairs, in README.md and user-guide.md, then overlap on a 2-core machine.
    todo = [[c for c in commands if c["doc"] == doc and c["kind"] == "run"
             and (only is None or only in c["text"] or only in doc)]
            for doc in dict.fromkeys(c["doc"] for c in commands)]
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        for log, found in pool.map(lambda cs: run_doc(cs, binary, verbose), [t for t in todo if t]):
            print("\n".join(log), flush=True)
            failures += found
    after = snapshot(ROOT)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    if changed:
        failures.append(f"the commands changed the repository's tree: {changed[:10]}")

    counts = {k: sum(1 for c in commands if c["kind"] == k)
              for k in ("synopsis", "placeholder", "skipped", "measurement")}
    ran = sum(1 for c in commands if "seconds" in c)
    print(f"docs_examples: {ran} ran, {counts['synopsis']} synopsis, "
          f"{counts['placeholder']} placeholder, {counts['measurement']} measurement, "
          f"{counts['skipped']} skipped (no mpirun); "
          f"{time.monotonic() - began:.1f} s")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
