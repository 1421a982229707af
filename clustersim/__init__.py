"""clustersim from Python: load an experiment, override keys, run, compare schedules, sweep, plan.

    import clustersim
    r = clustersim.run("workloads/default.yaml", {"parallelism.tp": 4})
    print(r.iteration_time_s, r.mfu, r.bubble_fraction, r.fits_hbm)
    rows = r.stages                      # list of dicts, one per pipeline stage
    cols = r.table("links")              # dict of columns: pandas.DataFrame(cols) works
    s = clustersim.sweep(None, {"parallelism.tp": [2, 4, 8]}, progress=print)

Every function simulates with the same C++ library as the command line (sim/session), with the
GIL released. Bad input raises clustersim.InputError (a ValueError with the argument, or the file,
line and column, and the accepted values) where `clustersim run` would exit with status 2.
Ctrl-C stops a run within about 0.1 s, a plan at its next progress step and a sweep after the
combination in progress (SweepInterrupted, with the rows finished). See docs/python.md.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Mapping
from typing import Any, Callable, Dict, Generic, Iterator, List, Optional, Sequence, TypeVar, Union

from .errors import ArgumentTypeError, InputError, SimulationError, SweepInterrupted

try:
    from . import _clustersim as _core
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "clustersim's compiled module is missing from " + os.path.dirname(__file__) +
        ": build the repository first (tools/build.sh, or pip install .; it needs python3-dev "
        "and pybind11-dev, see docs/python.md)") from e

__version__: str = _core.__version__

# An installed package (pip install .) carries the bundled workloads/, topologies/ and validation
# suite in data/; the library finds them through CLUSTERSIM_DATA (unless the user set it). From a
# source tree there is no data/: the library finds the tree itself.
_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
if os.path.isfile(os.path.join(_DATA, "workloads", "default.yaml")):
    os.environ.setdefault("CLUSTERSIM_DATA", _DATA)

__all__ = ["Experiment", "Result", "Comparison", "Sweep", "InputError", "ArgumentTypeError",
           "SimulationError", "SweepInterrupted", "load", "run", "compare", "sweep", "plan",
           "report", "schedules", "columns", "run_jobs", "summary_fields", "__version__"]

PathLike = Union[str, "os.PathLike[str]"]
Source = Union[None, PathLike, Mapping, "Experiment"]
Overrides = Union[None, Mapping, str, Sequence[str]]
# progress(done, total); plan's: progress(done, total, phase); compare's (and a compare's
# report's): progress(done, total, schedule)
Progress = Optional[Callable[..., Any]]
Scalar = Union[bool, int, float, str]


def schedules() -> List[str]:
    """The schedule names `schedule` and compare() accept."""
    return list(_core.schedule_names())


def columns(rows: Sequence[Mapping[str, Any]]) -> Dict[str, List[Any]]:
    """A list of dicts as a dict of columns (keys in first-seen order, None where a row has no
    value): the shape pandas.DataFrame() takes, without needing pandas."""
    keys: List[str] = []
    for row in rows:
        for k in row:
            if k not in keys:
                keys.append(k)
    return {k: [row.get(k) for row in rows] for k in keys}


# Arguments. Each check names the argument and what it accepts; nothing of the wrong type reaches
# the compiled module (whose own TypeErrors would name its internals).

def _type_error(argument, expected, value):
    return ArgumentTypeError.of_argument(
        argument, "expected %s, not %s" % (expected, type(value).__name__))


def _bool(argument, value):
    if not isinstance(value, bool):
        raise _type_error(argument, "a bool (True or False)", value)
    return value


def _gpu_counts(value):
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _type_error("gpus", "a list of GPU counts (ints)", value)
    return [_count("gpus", g) for g in value]


def _confirm(value, top):
    """confirm: None (plan's default, 3 x top), a number of layouts from `top` up or "all", as
    plan --confirm's text ("" for the default). The limit is checked here, where both arguments
    are known, so that the error names `confirm` (plan's own message names --confirm)."""
    if value is None:
        return ""
    if value == "all":
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error("confirm", 'an int or "all"', value)
    if value < 1:
        raise InputError.of_argument("confirm", "expected a number of layouts, 1 or more, or all")
    if value < top:
        raise InputError.of_argument(
            "confirm", "expected a number of layouts from top (%d) to 1000000, or all" % top)
    return str(value)


def _global_batches(value):
    """global_batch: None, a size, a list of sizes, or plan --global-batch's text ("1024..4096",
    "512,1024"), as the sorted sizes plan searches."""
    if value is None:
        return []
    if isinstance(value, bool):
        raise _type_error("global_batch", "an int, a str or a list of ints", value)
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value
    elif isinstance(value, Sequence):
        text = ",".join(str(_number("global_batch", b, whole=True)) for b in value)
    else:
        raise _type_error("global_batch", "an int, a str or a list of ints", value)
    try:
        return _core.parse_global_batches(text)
    except InputError as e:
        raise InputError.of_argument("global_batch", e.message) from None


def _threads(value):
    if _number("threads", value, whole=True) < 0:
        raise InputError.of_argument("threads",
                                     "expected a number of threads, 1 or more (or 0: one per core)")
    return value


def _number(argument, value, whole=False):
    kinds = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise _type_error(argument, "an int" if whole else "a number (int or float)", value)
    if not whole and not math.isfinite(value):
        raise InputError.of_argument(argument, "expected a finite number, not %r" % value)
    return value


def _text(argument, value, what="a str"):
    if not isinstance(value, str):
        raise _type_error(argument, what, value)
    return value


def _callback(argument, value):
    if value is not None and not callable(value):
        raise _type_error(argument, "a callable progress(done, total) or None", value)
    return value


def _path(argument, value):
    """`value` (a str or os.PathLike naming a file) as a str; an InputError naming `argument`
    for anything else, and for a path with a NUL byte, which the operating system would cut
    there ('x.yaml\\0y' would read x.yaml)."""
    try:
        path = os.fspath(value)
    except TypeError:
        path = None
    if not isinstance(path, str):
        raise _type_error(argument, "a path (str or os.PathLike)", value)
    if "\0" in path:
        raise InputError.of_argument(
            argument, "the path %r contains a NUL byte; expected a path without one" % path)
    return path


def _schedule_names(argument, value):
    """A schedule name or several ("gpipe,1f1b" or a list) as a list, each a known schedule."""
    if isinstance(value, str):
        names = [n.strip() for n in value.split(",") if n.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(n, str) for n in value):
        names = list(value)
    else:
        raise _type_error(argument, 'a schedule name, a comma-separated str or a list of str',
                          value)
    known = schedules()
    for name in names:
        if name not in known:
            raise InputError.of_argument(
                argument, 'unknown schedule "%s"; expected %s or %s' %
                (name, ", ".join(known[:-1]), known[-1]))
    return names


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


def _overrides(overrides, argument="overrides"):
    """{"parallelism.tp": 4} or ["parallelism.tp=4", ...] as --set assignments."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        for k in overrides:
            _text(argument + " key", k, "a str key such as 'parallelism.tp'")
        return ["%s=%s" % (k, _yaml_value(v)) for k, v in overrides.items()]
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, (list, tuple)) and all(isinstance(o, str) for o in overrides):
        return list(overrides)
    raise _type_error(argument, 'a dict {"key": value}, a list of "key=value" str, or None',
                      overrides)


def _axes(vary):
    """`vary` ({key: [values]}) as the (key, [YAML texts]) pairs the sweep takes, and per key the
    values as given by YAML text (to give rows their typed values back)."""
    if not isinstance(vary, Mapping):
        raise _type_error("vary", "a dict {key: [values]}", vary)
    if not vary:
        raise InputError.of_argument("vary", 'expected at least one key to vary, e.g. '
                                     '{"parallelism.tp": [2, 4, 8]}')
    axes, typed = [], {}
    combinations = 1
    for key, values in vary.items():
        _text("vary key", key, "a str key such as 'parallelism.tp'")
        argument = "vary[%r]" % key
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, range)):
            raise _type_error(argument, "a list of values", values)
        if not values:
            raise InputError.of_argument(argument, "expected at least one value")
        texts, by_text = [], {}
        for v in values:
            if not isinstance(v, (bool, int, float, str, os.PathLike)):
                raise _type_error(argument + " value", "a bool, int, float or str", v)
            t = _yaml_value(v)
            if not t.strip():
                raise InputError.of_argument(argument, "an empty value in the list")
            if t in by_text:
                raise InputError.of_argument(argument, 'value "%s" is listed twice' % t)
            by_text[t] = v
            texts.append(t)
        axes.append((key, texts))
        typed[key] = by_text
        combinations *= len(texts)
    if combinations > _core.max_sweep_combinations:
        raise InputError.of_argument(
            "vary", "%d combinations, more than the %d a sweep may run; vary fewer keys or "
            "fewer values" % (combinations, _core.max_sweep_combinations))
    return axes, typed


def _as_experiment(source, overrides, base_dir):
    if isinstance(source, Experiment):
        exp = source
        for assignment in _overrides(overrides):
            key, _, value = assignment.partition("=")
            exp = exp.set(key, value)
        return exp
    return Experiment(source, overrides, base_dir=base_dir)


class Experiment:
    """An experiment and the overrides applied to it, not yet simulated.

    `source` is a path to an experiment YAML (None: the bundled workloads/default.yaml) or a dict
    with the same keys (relative paths in it, such as `topology`, resolve against `base_dir`,
    default the current folder; messages name it `name`). `overrides` are --set assignments: a
    dict {"parallelism.tp": 4} or a list of "key=value" strings.
    """

    def __init__(self, source: Union[None, PathLike, Mapping] = None,
                 overrides: Overrides = None, *, base_dir: Optional[PathLike] = None,
                 name: str = "<dict>") -> None:
        _text("name", name)
        folder = _path("base_dir", base_dir) if base_dir is not None else os.getcwd()
        if isinstance(source, Mapping):
            try:
                text = json.dumps(source, indent=2)
            except (TypeError, ValueError) as e:
                raise InputError.of_argument(
                    "source", "the dict cannot be written as JSON (%s); expected str, number, "
                    "bool, None, list and dict values" % e) from None
            self._source = _core.Source("", text, name, folder)
            self.path: Optional[str] = None
            self._name = name
        elif source is None or isinstance(source, (str, os.PathLike)):
            self.path = _path("source", source) if source is not None else None
            self._source = _core.Source(self.path or "", None, "", "")
            self._name = self.path or "workloads/default.yaml (bundled)"
        else:
            raise _type_error("source", "a path (str or os.PathLike), a dict, an Experiment or "
                              "None (the bundled default)", source)
        self.overrides: List[str] = _overrides(overrides)

    def set(self, key: str, value: Any) -> "Experiment":
        """A copy with one more override (later overrides win), as --set key=value."""
        _text("key", key)
        copy = Experiment.__new__(Experiment)
        copy._source, copy.path, copy._name = self._source, self.path, self._name
        copy.overrides = self.overrides + ["%s=%s" % (key, _yaml_value(value))]
        return copy

    def run(self, schedule: Optional[str] = None, trace: Optional[PathLike] = None,
            fast_paths: bool = True, *, progress: Progress = None) -> "Result":
        """Simulates one iteration (under `schedule`, default the experiment's own); `trace`
        writes a timeline (.json Chrome JSON, .pftrace Perfetto). `fast_paths=False` turns off
        every fast path (as --no-fast-paths: the same results, computed the plain way).
        `progress(done, total)` is called with the passes simulated (every GPU's forward and
        backward passes), at most ten times a second and at the end. Returns a Result."""
        if schedule is not None:
            (schedule,) = _schedule_names("schedule", _text(
                "schedule", schedule, "a str (a schedule name) or None"))
        summary, warnings, source, hbm = _core.run(
            self._source, self.overrides, schedule or "",
            _path("trace", trace) if trace is not None else "", _bool("fast_paths", fast_paths),
            _callback("progress", progress))
        return Result(json.loads(summary), warnings, source, hbm)

    def compare(self, schedules: Union[str, Sequence[str]], fast_paths: bool = True, *,
                progress: Progress = None) -> "Comparison":
        """Simulates each schedule ("gpipe,1f1b" or a list), one after the other.
        `progress(done, total, schedule)` is called with the passes of the schedule being
        simulated (as run's, named by the schedule), at most ten times a second and at each
        run's end. Ctrl-C (or what `progress` raises) stops the comparison within about 0.1 s;
        nothing is returned. Returns a Comparison."""
        names = _schedule_names("schedules", schedules)
        summaries, warnings, source, hbm = _core.compare(
            self._source, self.overrides, ",".join(names), _bool("fast_paths", fast_paths),
            _callback("progress", progress))
        return Comparison([Result(json.loads(s), [], source, hbm) for s in summaries], warnings)

    def sweep(self, vary: Mapping[str, Sequence[Scalar]], fast_paths: bool = True, *,
              progress: Progress = None) -> "Sweep":
        """Simulates every combination of `vary` ({"parallelism.tp": [2, 4, 8], ...}, the last
        key varying fastest), ranked as `clustersim sweep` ranks them. `progress(done, total)` is
        called after each combination. Ctrl-C (or a KeyboardInterrupt from `progress`) stops
        after the combination in progress and raises SweepInterrupted, whose `partial` is the
        Sweep of the finished ones; anything else `progress` raises propagates as it is.
        Returns a Sweep."""
        axes, typed = _axes(vary)
        text, source, interrupted = _core.sweep(
            self._source, self.overrides, axes, _bool("fast_paths", fast_paths),
            _callback("progress", progress))
        total = math.prod(len(values) for _, values in axes)
        result = Sweep(json.loads(text), list(vary), source, typed=typed, total=total,
                       interrupted=interrupted)
        if interrupted:
            raise SweepInterrupted(result)
        return result

    def plan(self, fix: Optional[Mapping[str, Any]] = None, *,
             schedules: Union[None, str, Sequence[str]] = None, headroom: float = 0.0,
             top: int = 5, objective: str = "time", gpu_hour_price: float = 0.0,
             margin: float = 0.1, confirm: Union[None, int, str] = None,
             max_micro_batch: int = 8, fast_paths: bool = True,
             guide: bool = False, hsdp: bool = False, partial_recompute: bool = False,
             uneven_stages: bool = False, cp_comm: bool = False,
             gpus: Optional[Sequence[int]] = None,
             global_batch: Union[None, int, str, Sequence[int]] = None, threads: int = 0,
             progress: Progress = None) -> Dict[str, Any]:
        """Searches every layout of this experiment's model on its GPUs, as `clustersim plan`
        does (docs/plan.md). `fix` holds keys at one value ({"parallelism.tp": 8, ...}) or
        bounds a searched axis to a set (a list: {"parallelism.tp": [4, 8]}) or, for a
        whole-number axis, a range (plan --fix's text: {"parallelism.pp": "4..16"}).
        Returns the dict `plan --json` writes: the counts, `top` (best first, each with its
        `layout`, `figures`, `megatron_args` for the best and `why_lost` for the others) and
        `layouts_evaluated` (every layout with its status and figures or reason); with
        `guide=True` also `guide`: the parallelism guide's layouts, simulated and ranked.
        `hsdp` and `partial_recompute` add HSDP shard sizes and block recomputation to the
        space (plan --hsdp, --partial-recompute), `uneven_stages` first/last pipeline splits where
        the layers do not divide (--uneven-stages), `cp_comm` the other ways context
        parallelism exchanges at cp > 1 (--cp-comm: parallelism.cp_comm_type); `gpus` searches these GPU counts instead of the
        experiment's (plan --gpus: whole nodes; compare them by cost, energy or mfu);
        `global_batch` these global batch sizes in sequences (plan --global-batch: an int, a list,
        or the option's text "MIN..MAX[:STEP]"; with several, time ranks seconds per 1M tokens).
        `confirm` bounds the layouts re-simulated under the experiment's network (plan --confirm:
        None for 3 x top, an int from top up, or "all" for the exact top k; the result's
        `contenders` and `left_by_limit` count what a limit left that could still enter the top
        k: simulated with the analytical network, and not simulated).
        `threads` worker threads search and simulate (0: one per core); the result is the
        same for any number. `progress(done, total, phase)` is called as each phase ("search", "simulate",
        "confirm") advances, at most ten times a second and at its first and last step.
        Ctrl-C stops the plan at its next progress step (KeyboardInterrupt)."""
        # A list of values is the set --fix takes (V1,V2,...); anything else as --set has it.
        if isinstance(fix, Mapping):
            fix = {k: ",".join(_yaml_value(x) for x in v) if isinstance(v, (list, tuple)) else v
                   for k, v in fix.items()}
        fixes = _overrides(fix, "fix")
        names = _schedule_names("schedules", schedules) if schedules is not None else []
        text = _core.plan(self._source, self.overrides, fixes, names,
                          float(_number("headroom", headroom)), _count("top", top),
                          _text("objective", objective, "a str: time, mfu, cost or energy"),
                          float(_number("gpu_hour_price", gpu_hour_price)),
                          float(_number("margin", margin)), _confirm(confirm, top),
                          _count("max_micro_batch", max_micro_batch),
                          _bool("fast_paths", fast_paths), _bool("guide", guide),
                          _bool("hsdp", hsdp), _bool("partial_recompute", partial_recompute),
                          _bool("uneven_stages", uneven_stages), _bool("cp_comm", cp_comm),
                          _gpu_counts(gpus), _global_batches(global_batch),
                          _threads(threads), _callback("progress", progress))
        return json.loads(text)

    def report(self, path: PathLike, schedules: Union[None, str, Sequence[str]] = None, *,
               progress: Progress = None) -> PathLike:
        """Writes the HTML report (as `clustersim run --html`, or `compare --html` when
        `schedules` names several) to `path`: one self-contained file, written whole or not at
        all. `progress` is called as run's (one run) or compare's (`schedules`); Ctrl-C stops
        it within about 0.1 s and writes nothing. Returns the path."""
        names = _schedule_names("schedules", schedules) if schedules is not None else []
        _core.html_report(self._source, self.overrides, ",".join(names), _path("path", path),
                          _callback("progress", progress))
        return path

    def __repr__(self) -> str:
        return "clustersim.Experiment(%r, overrides=%r)" % (self._name, self.overrides)


def _count(argument, value):
    _number(argument, value, whole=True)
    if value < 0:
        raise InputError.of_argument(argument, "expected a count (0 or more), not %d" % value)
    return value


# Results. Every field names its unit; the summary JSON (`clustersim run --json`) is the source.

T = TypeVar("T")


class _Field(Generic[T]):
    """A summary key as a typed, documented attribute of Result (help(Result) lists them)."""

    def __init__(self, doc: str, default: Any = KeyError) -> None:
        self.__doc__ = doc
        self._default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Any = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        if self.name in obj.summary:
            return obj.summary[self.name]
        if self._default is KeyError:
            raise AttributeError("this summary has no %r" % self.name)
        return self._default


class Result:
    """One simulated iteration: the summary `clustersim run --json` writes (`summary`), the
    warnings the command line would print (`warnings`) and the experiment's display path
    (`source`). Every summary key is an attribute, documented with its unit: the scalar ones as
    summary_fields() describes them (added below the class), the objects here. `stages` and
    `links` are lists of dicts; table("stages") gives them as columns."""

    # summary_fields()'s top-level fields, typed for static checkers (mypy sees `Any` through
    # __getattr__); the loop below the class makes each a documented attribute. By unit: float
    # for s, fraction, tokens/s and TFLOP/s, int for count and bytes, str for text; but
    # p2p_bytes is a float (the summary sums it as a double, its JSON writes 1.5e9 as a float).
    # tests/python's SummaryFieldsTest holds this list to the table.
    schedule: str
    iteration_time_s: float
    bubble_fraction: float
    exposed_comm_fraction: float
    exposed_tp_fraction: float
    exposed_cp_fraction: float
    exposed_ep_fraction: float
    exposed_dp_fraction: float
    exposed_pipeline_fraction: float
    idle_fraction: float
    host_fraction: float
    host_bound_passes: int
    mfu: float
    hfu: float
    tokens_per_s: float
    tflops_per_gpu: float
    world_size: int
    microbatches: int
    p2p_bytes: float
    events: int
    wall_time_s: float

    parallelism = _Field[Dict[str, int]]("The layout: tp, pp, dp, cp, ep, vpp (counts).")
    stages = _Field[List[Dict[str, Any]]](
        "One dict per pipeline stage: stage, busy_s and pass_span_s (seconds), the summary's "
        "fractions per stage, peak_inflight_microbatches (a count), peak_activation_bytes (bytes).",
        [])
    links = _Field[List[Dict[str, Any]]](
        "One dict per link that carried bytes: name, kind, bytes (bytes), busy_s and shared_s "
        "(seconds), utilization (0 to 1: bytes / (bandwidth x iteration time)), "
        "max_concurrent_flows (a count).", [])
    memory_per_gpu_bytes = _Field[Dict[str, int]](
        "The worst GPU's memory in bytes: parameters, gradients, optimizer_states, activations, "
        "temporary_gradients and total (its peak).", {})

    def __init__(self, summary: Dict[str, Any], warnings: Sequence[str], source: str,
                 hbm_bytes: int = 0) -> None:
        self.summary = summary
        self.warnings = list(warnings)
        self.source = source
        self._hbm_bytes = hbm_bytes

    def __getattr__(self, name: str) -> Any:
        summary = self.__dict__.get("summary", {})
        if name in summary:
            return summary[name]
        raise AttributeError("clustersim.Result has no attribute %r (summary keys: %s)" %
                             (name, ", ".join(summary)))

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(self.summary))

    @property
    def peak_memory_bytes(self) -> int:
        """Bytes: the peak memory of the worst GPU (memory_per_gpu_bytes["total"])."""
        return int(self.memory_per_gpu_bytes.get("total", 0))

    @property
    def hbm_bytes(self) -> int:
        """Bytes: the HBM capacity of a GPU of the cluster (GPU 0's model, as sweep ranks by);
        0 when the model gives none."""
        return self._hbm_bytes

    @property
    def fits_hbm(self) -> bool:
        """Whether peak_memory_bytes is within hbm_bytes (True when there is no capacity to
        hold it against), the rule by which sweep ranks layouts that fit first."""
        return self._hbm_bytes <= 0 or self.peak_memory_bytes <= self._hbm_bytes

    def table(self, name: str) -> Dict[str, List[Any]]:
        """"stages" or "links" as a dict of columns."""
        if name not in ("stages", "links"):
            raise InputError.of_argument("name", 'unknown table "%s"; expected stages or links'
                                         % name)
        return columns(self.summary.get(name, []))

    def to_dict(self) -> Dict[str, Any]:
        """The summary (as `run --json` writes it) with `peak_memory_bytes`, `hbm_bytes`,
        `fits_hbm` and `warnings` added: a copy, plain JSON types only."""
        out = json.loads(json.dumps(self.summary))
        out.update(peak_memory_bytes=self.peak_memory_bytes, hbm_bytes=self.hbm_bytes,
                   fits_hbm=self.fits_hbm, warnings=list(self.warnings))
        return out

    def to_json(self, path: Optional[PathLike] = None, indent: Optional[int] = 2) -> str:
        """to_dict() as JSON text (numbers to full precision); also written to `path` if given."""
        return _dump(self.to_dict(), path, indent)

    def row(self) -> Dict[str, Any]:
        """The headline figures as one flat dict (a comparison's and a sweep's row)."""
        return _row(self.summary, self.hbm_bytes)

    def _repr_html_(self) -> str:
        return _html_table([self.row()], caption="clustersim.Result " + self.source)

    def __repr__(self) -> str:
        return "<clustersim.Result %s: iteration %.6g s, mfu %.4f, bubble %.4f>" % (
            self.summary.get("schedule"), self.summary.get("iteration_time_s", 0),
            self.summary.get("mfu", 0), self.summary.get("bubble_fraction", 0))


def summary_fields() -> List[Dict[str, str]]:
    """The run summary's scalar fields, in the order of its JSON (sim/report/summary_fields.def):
    one dict each with `path` (its key; dotted inside an object: "parallelism.tp"), `column`
    (its name in rows and CSV; "" for none), `unit` (s, fraction, count, tokens/s, TFLOP/s, bytes
    or text), `label` and `description`."""
    return [dict(f) for f in _FIELDS]


_FIELDS = tuple(_core.summary_fields())

# How each unit of the table reads in help(Result).
_UNIT_WORDS = {"s": "seconds", "fraction": "a fraction, 0 to 1", "count": "a count",
               "tokens/s": "tokens per second", "TFLOP/s": "TFLOP/s", "bytes": "bytes",
               "text": "text"}
# The one key a summary may lack: the results-only summaries (a trace's) leave it out.
_DEFAULTS = {"wall_time_s": 0.0}

for _f in _FIELDS:
    if "." not in _f["path"]:
        _field: _Field[Any] = _Field("%s (%s)" % (_f["description"], _UNIT_WORDS[_f["unit"]]),
                                     _DEFAULTS.get(_f["path"], KeyError))
        _field.__set_name__(Result, _f["path"])
        setattr(Result, _f["path"], _field)

# The scalar fields a comparison's and a sweep's rows carry, (column, path) in the table's order,
# then the memory columns: the table's columns but text (a comparison's schedule, a sweep's
# settings) and bytes (the memory columns, against HBM).
_ROW_FIELDS = tuple((f["column"], f["path"]) for f in _FIELDS
                    if f["column"] and f["unit"] not in ("text", "bytes"))

# Units of row columns, for the HTML tables' headers.
_UNITS = {f["column"]: f["unit"] for f in _FIELDS
          if f["column"] and f["unit"] in ("s", "tokens/s", "TFLOP/s")}
_UNITS.update(peak_memory_bytes="GiB", hbm_bytes="GiB")


def _at(summary, path):
    """The value at a dotted path of a summary, or KeyError (the class) when there is none."""
    for key in path.split("."):
        if not isinstance(summary, dict) or key not in summary:
            return KeyError
        summary = summary[key]
    return summary


def _row(summary, hbm_bytes):
    row = {}
    for column, path in _ROW_FIELDS:
        value = _at(summary, path)
        if value is not KeyError:
            row[column] = value
    peak = int(summary.get("memory_per_gpu_bytes", {}).get("total", 0))
    row.update(peak_memory_bytes=peak, hbm_bytes=hbm_bytes,
               fits_hbm=hbm_bytes <= 0 or peak <= hbm_bytes)
    return row


def _dump(value, path, indent):
    text = json.dumps(value, indent=indent)
    if path is not None:
        with open(_path("path", path), "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return text


def _cell(key, value):
    if _UNITS.get(key) == "GiB" and isinstance(value, int):
        return "%.2f" % (value / 2**30)
    if isinstance(value, float):
        return "%.4g" % value
    return "" if value is None else str(value)


def _html_table(rows, caption, more=0):
    """A compact HTML table of rows (dicts), every text escaped; `more` rows not shown."""
    keys = list(columns(rows))
    head = "".join("<th>%s</th>" % html.escape(k + (" (%s)" % _UNITS[k] if k in _UNITS else ""))
                   for k in keys)
    body = "".join("<tr>%s</tr>" % "".join(
        "<td>%s</td>" % html.escape(_cell(k, row.get(k))) for k in keys) for row in rows)
    tail = "<tr><td colspan=%d>... %d more</td></tr>" % (len(keys), more) if more else ""
    return ("<table><caption>%s</caption><thead><tr>%s</tr></thead><tbody>%s%s</tbody></table>"
            % (html.escape(caption), head, body, tail))


# At most this many rows in a notebook's table of a comparison or a sweep.
_HTML_ROWS = 20


class Comparison:
    """Several schedules on one experiment: `results` (Results, in the order given), indexable by
    schedule name; rows() one dict per schedule; table() the same as columns."""

    def __init__(self, results: List[Result], warnings: Sequence[str]) -> None:
        self.results = results
        self.warnings = list(warnings)

    def __getitem__(self, key: Union[int, str]) -> Result:
        if isinstance(key, int):
            return self.results[key]
        for r in self.results:
            if r.summary.get("schedule") == key:
                return r
        raise KeyError(key)

    def __iter__(self) -> Iterator[Result]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def rows(self) -> List[Dict[str, Any]]:
        """One dict per schedule: `schedule`, the headline figures (units as Result's) and the
        memory columns peak_memory_bytes, hbm_bytes (bytes) and fits_hbm."""
        return [dict(schedule=r.schedule, **r.row()) for r in self.results]

    def table(self) -> Dict[str, List[Any]]:
        return columns(self.rows())

    def to_dict(self) -> Dict[str, Any]:
        """{"results": [each Result's to_dict()], "warnings": [...]}."""
        return {"results": [r.to_dict() for r in self.results], "warnings": list(self.warnings)}

    def to_json(self, path: Optional[PathLike] = None, indent: Optional[int] = 2) -> str:
        return _dump(self.to_dict(), path, indent)

    def _repr_html_(self) -> str:
        source = self.results[0].source if self.results else ""
        return _html_table(self.rows()[:_HTML_ROWS], "clustersim.Comparison " + source,
                           max(0, len(self) - _HTML_ROWS))

    def __repr__(self) -> str:
        return "<clustersim.Comparison %s>" % ", ".join(
            str(r.summary.get("schedule")) for r in self.results)


class Sweep:
    """Every combination of a sweep (or those finished before Ctrl-C: `interrupted`). rows():
    one dict per combination, ranked as `clustersim sweep` ranks them (layouts that fit in HBM
    first, each group by throughput), then the invalid ones; each row has the varied keys with
    their values as given (int, float, bool or str), `valid`, the headline figures, the memory
    columns and `error`. `best` is the first ranked Result; results() every valid combination's
    Result; `total` the number of combinations asked for."""

    def __init__(self, entries: List[Dict[str, Any]], keys: List[str], source: str, *,
                 typed: Optional[Dict[str, Dict[str, Any]]] = None, total: Optional[int] = None,
                 interrupted: bool = False) -> None:
        self.entries = entries  # as `clustersim sweep --json` writes them, with index, hbm_bytes
        self.keys = keys
        self.source = source
        self.total = len(entries) if total is None else total
        self.interrupted = interrupted
        self._typed = typed or {}

    def _settings(self, entry):
        return {k: self._typed.get(k, {}).get(v, v) for k, v in entry["settings"].items()}

    def rows(self) -> List[Dict[str, Any]]:
        """One dict per combination, ranked: the varied keys (values as given), `valid`, the
        headline figures (units as Result's: iteration_time_s in seconds, tokens_per_s, mfu and
        the fractions from 0 to 1, ...), peak_memory_bytes (the worst GPU's peak, bytes),
        hbm_bytes (a GPU's HBM, bytes), fits_hbm, and `error` (why an invalid one is not valid;
        "" otherwise). An invalid combination has None for the figures and memory columns."""
        out = []
        for e in self.entries:
            row = self._settings(e)
            row["valid"] = "summary" in e
            if "summary" in e:
                row.update(_row(e["summary"], e.get("hbm_bytes", 0)))
            else:
                row.update(peak_memory_bytes=None, hbm_bytes=None, fits_hbm=None)
            row["error"] = e.get("error", "")
            out.append(row)
        return out

    def table(self) -> Dict[str, List[Any]]:
        return columns(self.rows())

    def results(self) -> List[Result]:
        return [Result(e["summary"], [], self.source, e.get("hbm_bytes", 0))
                for e in self.entries if "summary" in e]

    @property
    def best(self) -> Optional[Result]:
        for e in self.entries:
            if "summary" in e:
                return Result(e["summary"], [], self.source, e.get("hbm_bytes", 0))
        return None

    def to_dict(self) -> Dict[str, Any]:
        """{"rows": rows(), "total": ..., "interrupted": ..., "source": ...}: the rows with the
        values as given; `entries` holds the full summaries."""
        return {"rows": self.rows(), "total": self.total, "interrupted": self.interrupted,
                "source": self.source}

    def to_json(self, path: Optional[PathLike] = None, indent: Optional[int] = 2) -> str:
        return _dump(self.to_dict(), path, indent)

    def _repr_html_(self) -> str:
        caption = "clustersim.Sweep %s: %d of %d combinations%s" % (
            self.source, len(self), self.total, ", interrupted" if self.interrupted else "")
        rows = self.rows()
        return _html_table(rows[:_HTML_ROWS], caption, max(0, len(rows) - _HTML_ROWS))

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        valid = sum(1 for e in self.entries if "summary" in e)
        return "<clustersim.Sweep %d combinations, %d valid%s>" % (
            len(self.entries), valid,
            ", interrupted after %d of %d" % (len(self), self.total) if self.interrupted else "")


def load(source: Union[None, PathLike, Mapping] = None, overrides: Overrides = None, *,
         base_dir: Optional[PathLike] = None) -> Experiment:
    """An Experiment from a path (None: the bundled default) or a dict, with overrides."""
    return Experiment(source, overrides, base_dir=base_dir)


def run(source: Source = None, overrides: Overrides = None, *, schedule: Optional[str] = None,
        trace: Optional[PathLike] = None, base_dir: Optional[PathLike] = None,
        fast_paths: bool = True, progress: Progress = None) -> Result:
    """Simulates an experiment (a path, a dict or an Experiment). Returns a Result."""
    return _as_experiment(source, overrides, base_dir).run(
        schedule=schedule, trace=trace, fast_paths=fast_paths, progress=progress)


def compare(source: Source, schedules: Union[str, Sequence[str]], overrides: Overrides = None,
            *, base_dir: Optional[PathLike] = None, fast_paths: bool = True,
            progress: Progress = None) -> Comparison:
    """Simulates each of `schedules` on an experiment; see Experiment.compare. Returns a
    Comparison."""
    return _as_experiment(source, overrides, base_dir).compare(schedules, fast_paths=fast_paths,
                                                               progress=progress)


def sweep(source: Source, vary: Mapping[str, Sequence[Scalar]], overrides: Overrides = None, *,
          base_dir: Optional[PathLike] = None, fast_paths: bool = True,
          progress: Progress = None) -> Sweep:
    """Simulates every combination of `vary` ({key: [values]}); see Experiment.sweep. Returns a
    Sweep, or raises SweepInterrupted (with `.partial`) on Ctrl-C."""
    return _as_experiment(source, overrides, base_dir).sweep(vary, fast_paths=fast_paths,
                                                             progress=progress)


def plan(source: Source, fix: Optional[Mapping[str, Any]] = None, overrides: Overrides = None,
         *, base_dir: Optional[PathLike] = None, **options: Any) -> Dict[str, Any]:
    """Searches every layout of an experiment's model on its GPUs (`clustersim plan`); options
    as Experiment.plan. Returns the dict `plan --json` writes."""
    return _as_experiment(source, overrides, base_dir).plan(fix, **options)


def report(source: Source, path: PathLike, overrides: Overrides = None, *,
           schedules: Union[None, str, Sequence[str]] = None,
           base_dir: Optional[PathLike] = None, progress: Progress = None) -> PathLike:
    """Writes the HTML report of an experiment (one run, or the comparison of `schedules`); see
    Experiment.report."""
    return _as_experiment(source, overrides, base_dir).report(path, schedules=schedules,
                                                              progress=progress)


def run_jobs(path: PathLike, *, trace: Optional[PathLike] = None, fast_paths: bool = True,
             progress: Progress = None) -> Dict[str, Any]:
    """Simulates a jobs file (several jobs on one topology, docs/yaml/jobs.md) together and each
    job alone. Returns the dict `clustersim run JOBS --json` writes: `jobs` (each with `name`,
    `gpus`, `iteration_time_s` and `alone_iteration_time_s` in seconds, `slowdown` (a ratio), and
    the `shared` and `alone` summaries), `contested_links`, `makespan_s` (seconds).
    `progress(done, total)` counts job iterations: each job's `iterations` in the shared run,
    then each job's one alone (total = jobs x (iterations + 1)); it is called at most ten times
    a second and at the end. Ctrl-C (or what `progress` raises) stops within about 0.1 s and
    writes no trace."""
    return json.loads(_core.run_jobs(_path("path", path),
                                     "" if trace is None else _path("trace", trace),
                                     _bool("fast_paths", fast_paths),
                                     _callback("progress", progress)))
