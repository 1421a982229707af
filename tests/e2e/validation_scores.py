#!/usr/bin/env python3
"""The validation scores the build writes next to the binary (build/share/clustersim/
validation-scores.json, `clustersim validate --scores`), which `run --html` reads instead of
running the suite again (api::validation_confidence).

1. The page made with the build's scores file is byte-identical to the page made by a copy of the
   binary that has no scores file beside it (and so runs the suite itself).
2. The file is used: a copy of the binary with a scores file whose gemm-h200 mean error was
   changed to 0.123 shows that figure in its page.
3. The file is checked: the same changed file with a different suite digest, or from another
   program (a different program digest), is ignored, and the page is the one of step 1.
4. `validate --scores` with `--only` is refused (exit 2): the file must hold every family.

Usage: validation_scores.py CLUSTERSIM_BINARY
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

binary = os.path.abspath(sys.argv[1])
root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
built_scores = os.path.join(os.path.dirname(os.path.dirname(binary)), "share", "clustersim",
                            "validation-scores.json")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def html(program, out):
    r = subprocess.run([program, "-q", "run", "workloads/default.yaml", "--html", out], cwd=root,
                       capture_output=True, text=True, timeout=900)
    check(r.returncode == 0, "run --html with " + program + ": " + r.stderr[-2000:])
    with open(out, "rb") as f:
        return f.read()


def page_families(page):
    text = page.decode("ascii")
    start = text.index('<script type="application/json" id="data">') + 42
    data = json.loads(text[start:text.index("</script>", start)])
    return {f["id"]: f for f in data["validation"]["families"]}


check(os.path.isfile(built_scores), "the build wrote no " + built_scores)
with tempfile.TemporaryDirectory() as tmp:
    with_file = html(binary, os.path.join(tmp, "with.html"))

    # A copy of the binary in tmp/bin, with nothing in tmp/share: the suite runs.
    os.makedirs(os.path.join(tmp, "bin"))
    copy = os.path.join(tmp, "bin", "clustersim")
    shutil.copy2(binary, copy)
    without = html(copy, os.path.join(tmp, "without.html"))
    check(with_file == without, "the page from the scores file differs from the page made by "
          "running the suite")

    with open(built_scores) as f:
        scores = json.load(f)
    for family in scores["families"]:
        if family["id"] == "gemm-h200":
            family["mean_abs_error"] = 0.123
    share = os.path.join(tmp, "share", "clustersim")
    os.makedirs(share)

    def place(doc):
        with open(os.path.join(share, "validation-scores.json"), "w") as f:
            json.dump(doc, f)

    # The default experiment uses roofline compute: gemm-h200 ("roofline microbenchmark") is
    # among its families.
    place(scores)
    used = page_families(html(copy, os.path.join(tmp, "used.html")))
    check(used.get("gemm-h200", {}).get("mean_abs_error") == 0.123,
          "a scores file written for this binary and suite was not used")

    for key in ("suite_digest", "program_digest"):
        stale = dict(scores)
        stale[key] = str((int(scores[key]) + 1) % 2**64)
        place(stale)
        ignored = html(copy, os.path.join(tmp, key + ".html"))
        check(ignored == without, "a scores file with another " + key + " was used")

    r = subprocess.run([binary, "validate", "--only", "gemm", "--scores",
                        os.path.join(tmp, "partial.json")], cwd=root, capture_output=True,
                       text=True, timeout=300)
    check(r.returncode == 2 and "--scores" in r.stderr and "--only" in r.stderr,
          "validate --scores --only: exit %d, %s" % (r.returncode, r.stderr[-500:]))
    check(not os.path.exists(os.path.join(tmp, "partial.json")), "a partial scores file was written")

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("validation_scores: the scores file gives the same page, is used, and is checked")
