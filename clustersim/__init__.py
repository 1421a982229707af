"""clustersim from Python: load an experiment, override keys, run, compare schedules, sweep.

    import clustersim
    r = clustersim.run("workloads/default.yaml", {"parallelism.tp": 4})
    print(r.iteration_time_s, r.mfu, r.bubble_fraction)
    rows = r.stages                      # list of dicts, one per pipeline stage
    cols = r.table("links")              # dict of columns: pandas.DataFrame(cols) works

Every function simulates with the same C++ library as the command line (sim/api), with the GIL
released; bad input raises clustersim.InputError (a ValueError with file, line, column and the
accepted values), exactly where `clustersim run` would exit with status 2. See docs/python.md.
"""

import json
import os
from collections.abc import Mapping

from .errors import InputError, SimulationError

try:
    from . import _clustersim as _core
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "clustersim's compiled module is missing from " + os.path.dirname(__file__) +
        ": build the repository first (tools/build.sh; it needs python3-dev and pybind11-dev, "
        "see docs/python.md)") from e

__all__ = ["Experiment", "Result", "Comparison", "Sweep", "InputError", "SimulationError",
           "load", "run", "compare", "sweep", "report", "schedules", "columns", "run_jobs"]


def schedules():
    """The schedule names `schedule` and compare() accept."""
    return list(_core.schedule_names())


def columns(rows):
    """A list of dicts as a dict of columns (keys in first-seen order, None where a row has no
    value): the shape pandas.DataFrame() takes, without needing pandas."""
    keys = []
    for row in rows:
        for k in row:
            if k not in keys:
                keys.append(k)
    return {k: [row.get(k) for row in rows] for k in keys}


def _yaml_value(value):
    """A Python value as the YAML text --set takes."""
    if value is None:
        return "~"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return json.dumps(value)  # lists and mappings: JSON is YAML


def _overrides(overrides):
    """{"parallelism.tp": 4} or ["parallelism.tp=4", ...] as --set assignments."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return ["%s=%s" % (k, _yaml_value(v)) for k, v in overrides.items()]
    if isinstance(overrides, str):
        return [overrides]
    return [str(o) for o in overrides]


class Experiment:
    """An experiment and the overrides applied to it, not yet simulated.

    `source` is a path to an experiment YAML (None: the bundled workloads/default.yaml) or a dict
    with the same keys (relative paths in it, such as `topology`, resolve against `base_dir`,
    default the current folder; messages name it `name`). `overrides` are --set assignments: a
    dict {"parallelism.tp": 4} or a list of "key=value" strings.
    """

    def __init__(self, source=None, overrides=None, *, base_dir=None, name="<dict>"):
        if isinstance(source, Mapping):
            text = json.dumps(source, indent=2)
            folder = _path("base_dir", base_dir) if base_dir is not None else os.getcwd()
            self._source = _core.Source("", text, name, folder)
            self.path = None
            self._name = name
        elif source is None or isinstance(source, (str, os.PathLike)):
            self.path = _path("source", source) if source is not None else None
            self._source = _core.Source(self.path or "", None, "", "")
            self._name = self.path or "workloads/default.yaml (bundled)"
        else:
            raise TypeError("an experiment is a path or a dict, not " + type(source).__name__)
        self.overrides = _overrides(overrides)

    def set(self, key, value):
        """A copy with one more override (later overrides win), as --set key=value."""
        copy = Experiment.__new__(Experiment)
        copy._source, copy.path, copy._name = self._source, self.path, self._name
        copy.overrides = self.overrides + ["%s=%s" % (key, _yaml_value(value))]
        return copy

    def run(self, schedule=None, trace=None, fast_paths=True):
        """Simulates one iteration (under `schedule`, default the experiment's own); `trace`
        writes a timeline (.json Chrome JSON, .pftrace Perfetto). `fast_paths=False` turns off
        every fast path (as --no-fast-paths: the same results, computed the plain way). Returns
        a Result."""
        summary, warnings, source = _core.run(
            self._source, self.overrides, schedule or "", _path("trace", trace) if trace else "",
            bool(fast_paths))
        return Result(json.loads(summary), warnings, source)

    def compare(self, schedules, fast_paths=True):
        """Simulates each schedule ("gpipe,1f1b" or a list). Returns a Comparison."""
        if not isinstance(schedules, str):
            schedules = ",".join(schedules)
        summaries, warnings, source = _core.compare(self._source, self.overrides, schedules,
                                                    bool(fast_paths))
        return Comparison([Result(json.loads(s), [], source) for s in summaries], warnings)

    def sweep(self, vary, fast_paths=True):
        """Simulates every combination of `vary` ({"parallelism.tp": [2, 4, 8], ...}, the last
        key varying fastest), ranked as `clustersim sweep` ranks them. Returns a Sweep."""
        axes = ["%s=%s" % (k, ",".join(_yaml_value(v) for v in values))
                for k, values in vary.items()]
        text, source = _core.sweep(self._source, self.overrides, axes, bool(fast_paths))
        return Sweep(json.loads(text), list(vary), source)

    def plan(self, fix=None, *, schedules=None, headroom=0.0, top=5, objective="time",
             gpu_hour_price=0.0, margin=0.1, max_micro_batch=8, fast_paths=True, guide=False):
        """Searches every layout of this experiment's model on its GPUs, as `clustersim plan`
        does (docs/plan.md). `fix` holds keys at one value ({"parallelism.tp": 8, ...}).
        Returns the dict `plan --json` writes: the counts, `top` (best first, each with its
        `layout`, `figures`, `megatron_args` for the best and `why_lost` for the others) and
        `layouts_evaluated` (every layout with its status and figures or reason); with
        `guide=True` also `guide`: the parallelism guide's layouts, simulated and ranked."""
        fixes = ["%s=%s" % (k, _yaml_value(v)) for k, v in (fix or {}).items()]
        if isinstance(schedules, str):
            schedules = schedules.split(",")
        text = _core.plan(self._source, self.overrides, fixes, list(schedules or []),
                          float(headroom), int(top), str(objective), float(gpu_hour_price),
                          float(margin), int(max_micro_batch), bool(fast_paths), bool(guide))
        return json.loads(text)

    def report(self, path, schedules=None):
        """Writes the HTML report (as `clustersim run --html`, or `compare --html` when
        `schedules` names several) to `path`: one self-contained file, written whole or not at
        all. Returns the path."""
        if schedules is not None and not isinstance(schedules, str):
            schedules = ",".join(schedules)
        _core.html_report(self._source, self.overrides, schedules or "", _path("path", path))
        return path

    def __repr__(self):
        return "clustersim.Experiment(%r, overrides=%r)" % (self._name, self.overrides)


class Result:
    """One simulated iteration. Every key of the summary JSON (`clustersim run --json`, see
    docs/user-guide.md) is an attribute: iteration_time_s, mfu, hfu, bubble_fraction,
    exposed_comm_fraction (and its parts exposed_tp_fraction, exposed_cp_fraction,
    exposed_ep_fraction, exposed_dp_fraction, exposed_pipeline_fraction), idle_fraction,
    host_fraction, tokens_per_s, tflops_per_gpu, ...
    `stages` and `links` are lists of dicts; table("stages") gives them as columns."""

    def __init__(self, summary, warnings, source):
        self.summary = summary
        self.warnings = list(warnings)
        self.source = source

    def __getattr__(self, name):
        summary = self.__dict__.get("summary", {})
        if name in summary:
            return summary[name]
        raise AttributeError("clustersim.Result has no attribute %r (summary keys: %s)" %
                             (name, ", ".join(summary)))

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self.summary))

    @property
    def stages(self):
        return self.summary.get("stages", [])

    @property
    def links(self):
        return self.summary.get("links", [])

    def table(self, name):
        """"stages" or "links" as a dict of columns."""
        if name not in ("stages", "links"):
            raise ValueError("unknown table %r; expected stages or links" % name)
        return columns(self.summary.get(name, []))

    def to_dict(self):
        return dict(self.summary)

    def __repr__(self):
        return "<clustersim.Result %s: iteration %.6g s, mfu %.4f, bubble %.4f>" % (
            self.summary.get("schedule"), self.summary.get("iteration_time_s", 0),
            self.summary.get("mfu", 0), self.summary.get("bubble_fraction", 0))


# The scalar summary fields a comparison's and a sweep's rows carry.
_ROW_FIELDS = ("iteration_time_s", "tokens_per_s", "mfu", "hfu", "bubble_fraction",
               "exposed_comm_fraction", "exposed_tp_fraction", "exposed_cp_fraction",
               "exposed_ep_fraction", "exposed_dp_fraction", "exposed_pipeline_fraction",
               "idle_fraction", "host_fraction", "tflops_per_gpu",
               "world_size", "microbatches", "tp", "pp", "dp", "cp", "ep", "vpp")


def _row(summary):
    flat = dict(summary, **summary.get("parallelism", {}))
    return {k: flat[k] for k in _ROW_FIELDS if k in flat}


class Comparison:
    """Several schedules on one experiment: `results` (Results, in the order given), indexable by
    schedule name; rows() one dict per schedule; table() the same as columns."""

    def __init__(self, results, warnings):
        self.results = results
        self.warnings = list(warnings)

    def __getitem__(self, key):
        if isinstance(key, int):
            return self.results[key]
        for r in self.results:
            if r.summary.get("schedule") == key:
                return r
        raise KeyError(key)

    def __iter__(self):
        return iter(self.results)

    def __len__(self):
        return len(self.results)

    def rows(self):
        return [dict(schedule=r.summary.get("schedule"), **_row(r.summary)) for r in self.results]

    def table(self):
        return columns(self.rows())

    def __repr__(self):
        return "<clustersim.Comparison %s>" % ", ".join(
            str(r.summary.get("schedule")) for r in self.results)


class Sweep:
    """Every combination of a sweep. rows(): one dict per combination, ranked as `clustersim
    sweep` ranks them (layouts that fit in HBM first, each group by throughput), then the invalid
    ones; each row has the varied keys, `valid`, `fits_hbm`, the summary's scalars and `error`.
    `best` is the first ranked Result; results() every valid combination's Result."""

    def __init__(self, entries, keys, source):
        self.entries = entries  # as `clustersim sweep --json` writes them
        self.keys = keys
        self.source = source

    def rows(self):
        out = []
        for e in self.entries:
            row = dict(e["settings"])
            row["valid"] = "summary" in e
            row["fits_hbm"] = e.get("fits_hbm")
            row.update(_row(e.get("summary", {})))
            row["error"] = e.get("error", "")
            out.append(row)
        return out

    def table(self):
        return columns(self.rows())

    def results(self):
        return [Result(e["summary"], [], self.source) for e in self.entries if "summary" in e]

    @property
    def best(self):
        for e in self.entries:
            if "summary" in e:
                return Result(e["summary"], [], self.source)
        return None

    def __len__(self):
        return len(self.entries)

    def __repr__(self):
        valid = sum(1 for e in self.entries if "summary" in e)
        return "<clustersim.Sweep %d combinations, %d valid>" % (len(self.entries), valid)


def load(source=None, overrides=None, *, base_dir=None):
    """An Experiment from a path (None: the bundled default) or a dict, with overrides."""
    return Experiment(source, overrides, base_dir=base_dir)


def run(source=None, overrides=None, *, schedule=None, trace=None, base_dir=None,
        fast_paths=True):
    """Simulates an experiment (a path, a dict or an Experiment). Returns a Result."""
    return _with(source, overrides, base_dir).run(schedule=schedule, trace=trace,
                                                  fast_paths=fast_paths)


def compare(source, schedules, overrides=None, *, base_dir=None, fast_paths=True):
    """Simulates each of `schedules` on an experiment. Returns a Comparison."""
    return _with(source, overrides, base_dir).compare(schedules, fast_paths=fast_paths)


def sweep(source, vary, overrides=None, *, base_dir=None, fast_paths=True):
    """Simulates every combination of `vary` ({key: [values]}). Returns a Sweep."""
    return _with(source, overrides, base_dir).sweep(vary, fast_paths=fast_paths)


def plan(source, fix=None, overrides=None, *, base_dir=None, **options):
    """Searches every layout of an experiment's model on its GPUs (`clustersim plan`); options
    as Experiment.plan. Returns the dict `plan --json` writes."""
    return _with(source, overrides, base_dir).plan(fix, **options)


def report(source, path, overrides=None, *, schedules=None, base_dir=None):
    """Writes the HTML report of an experiment (one run, or the comparison of `schedules`)."""
    return _with(source, overrides, base_dir).report(path, schedules=schedules)


def run_jobs(path, *, trace=None, fast_paths=True):
    """Simulates a jobs file (several jobs on one topology, docs/yaml/jobs.md) together and each
    job alone. Returns the dict `clustersim run JOBS --json` writes: `jobs` (each with `name`,
    `gpus`, `iteration_time_s`, `alone_iteration_time_s`, `slowdown`, and the `shared` and
    `alone` summaries), `contested_links`, `makespan_s`."""
    return json.loads(_core.run_jobs(_path("path", path),
                                     "" if trace is None else _path("trace", trace),
                                     bool(fast_paths)))


def _path(argument, value):
    """`value` (a str or os.PathLike naming a file) as a str; an InputError naming `argument`
    for anything else, and for a path with a NUL byte, which the operating system would cut
    there ('x.yaml\\0y' would read x.yaml)."""
    try:
        path = os.fspath(value)
    except TypeError:
        path = None
    if not isinstance(path, str):
        raise InputError("%s: expected a path (str or os.PathLike), not %s" %
                         (argument, type(value).__name__))
    if "\0" in path:
        raise InputError("%s: the path %r contains a NUL byte; expected a path without one" %
                         (argument, path))
    return path


def _with(source, overrides, base_dir):
    if isinstance(source, Experiment):
        exp = source
        for assignment in _overrides(overrides):
            key, _, value = assignment.partition("=")
            exp = exp.set(key, value)
        return exp
    return Experiment(source, overrides, base_dir=base_dir)
