#!/usr/bin/env python3
"""`pip install .` and `pip install -e .` into a fresh virtual environment, offline, then
`import clustersim` from another folder (issue 39: "pip install . in a fresh venv, then python3 -c
"import clustersim; print(clustersim.run().mfu)" from another folder, in CI").

The backend (sim/python/clustersim_build.py) builds `_clustersim` in BUILD_DIR, the tree ctest
runs from, through CLUSTERSIM_BUILD_DIR: the module there is up to date, so the check costs the
venv (about 6 s) and two wheels, not a build. Checked:
  - pip needs no index (--no-index: the build requirements are empty, the backend is in the tree);
  - the installed package is the venv's (site-packages), with the bundled data, and prints the
    same MFU as the package of the source tree does (the same library and default experiment);
  - `__version__` and the installed distribution's version are the project's (CMakeLists.txt);
  - the editable install imports clustersim from the source tree, and only clustersim;
  - nothing in the source tree changed (docs_examples, which may run at the same time, checks
    that the tree is untouched).

Usage: pip_install.py BUILD_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
# The source tree's files (size and mtime), build folders, .git and __pycache__ aside: the same
# snapshot docs_examples holds the tree to.
from docs_examples import snapshot  # noqa: E402

PRINT_MFU = "import clustersim; print(clustersim.run().mfu)"


def run(command, cwd, env, expect=0):
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    if done.returncode != expect:
        sys.exit("FAIL: %s exited %d, expected %d:\n%s" %
                 (" ".join(command), done.returncode, expect, done.stdout))
    return done.stdout


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = os.path.abspath(sys.argv[1])
    before = snapshot(ROOT)
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        version = re.search(r"project\(clustersim VERSION ([0-9.]+)", f.read()).group(1)
    # The package of the source tree, imported from the root: what the wheel must reproduce.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_CACHE_DIR="1", PIP_NO_INPUT="1", CLUSTERSIM_BUILD_DIR=build)
    env.pop("PYTHONPATH", None)
    env.pop("CLUSTERSIM_DATA", None)
    expected = run([sys.executable, "-c", PRINT_MFU], ROOT, env).strip()
    with tempfile.TemporaryDirectory() as tmp:
        venv = os.path.join(tmp, "venv")
        run([sys.executable, "-m", "venv", venv], tmp, env)
        python = os.path.join(venv, "bin", "python")
        elsewhere = os.path.join(tmp, "elsewhere")
        os.mkdir(elsewhere)

        run([python, "-m", "pip", "install", "--no-index", ROOT], elsewhere, env)
        got = run([python, "-c", PRINT_MFU], elsewhere, env).strip()
        if got != expected:
            sys.exit("FAIL: the installed package printed %r, the source tree's %r" %
                     (got, expected))
        where = run([python, "-c", "import clustersim, os, importlib.metadata as m; "
                     "print(clustersim.__file__); print(os.environ['CLUSTERSIM_DATA']); "
                     "print(clustersim.__version__, m.version('clustersim'))"],
                    elsewhere, env).split("\n")
        site = os.path.join(venv, "lib")
        if not (where[0].startswith(site) and where[1].startswith(site)):
            sys.exit("FAIL: clustersim and its data should come from the venv, not %s" % where)
        if where[2] != "%s %s" % (version, version):
            sys.exit("FAIL: versions %r, expected %s (CMakeLists.txt)" % (where[2], version))
        for typed in ("py.typed", "_clustersim.pyi", "errors.py"):
            if not os.path.isfile(os.path.join(os.path.dirname(where[0]), typed)):
                sys.exit("FAIL: the wheel has no clustersim/%s" % typed)

        run([python, "-m", "pip", "install", "--no-index", "-e", ROOT], elsewhere, env)
        source = run([python, "-c", "import clustersim; print(clustersim.__file__)"],
                     elsewhere, env).strip()
        if source != os.path.join(ROOT, "clustersim", "__init__.py"):
            sys.exit("FAIL: the editable install imports %s, not the source tree's" % source)
        got = run([python, "-c", PRINT_MFU], elsewhere, env).strip()
        if got != expected:
            sys.exit("FAIL: the editable install printed %r, expected %r" % (got, expected))
        # Only clustersim comes from the source tree: its root's other folders stay hidden.
        run([python, "-c", "import tools"], elsewhere, env, expect=1)
    after = snapshot(ROOT)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    if changed:
        sys.exit("FAIL: installing changed the source tree: %s" % ", ".join(changed[:10]))
    print("pip install . and -e . in a fresh venv: mfu %s from another folder" % got)
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
