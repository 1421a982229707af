// clustersim._clustersim: the Python bindings' compiled half. A thin layer over sim/api: every
// function takes the experiment (a path, or YAML/JSON text with a display name and a folder) and
// the overrides as the command line does, releases the GIL while it loads and simulates, and
// returns JSON text that the pure-Python package (clustersim/__init__.py) turns into objects.
// ConfigError becomes clustersim.InputError (a ValueError carrying file, line and column),
// SimulationError clustersim.SimulationError.
//
// Ctrl-C and progress: Python runs a signal handler only when C++ gives the GIL back and asks
// (PyErr_CheckSignals). run and plan ask from the simulation's own hooks (a pass observer, the
// planner's progress), at most every kCheckInterval, with the GIL taken for the moment; sweep asks
// after each combination, which it runs one at a time for that reason. What the handler or a
// progress callback raises stops the work: a sweep keeps the rows it finished.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "ingest/inputs.hpp"
#include "replay/prepare.hpp"
#include "replay/replay.hpp"
#include "report/summary.hpp"
#include "schedule/schedule.hpp"
#include "session/compare.hpp"
#include "session/jobs.hpp"
#include "session/plan.hpp"
#include "session/report.hpp"
#include "session/run.hpp"
#include "session/sweep.hpp"
#include "session/sweep_cache.hpp"

#ifndef CLUSTERSIM_VERSION
#define CLUSTERSIM_VERSION "0"
#endif

namespace py = pybind11;

namespace {

using namespace cs;

// How Python names an experiment: `text` (when not None) is the experiment itself, shown as
// `display` in messages with relative paths resolved against `folder`; otherwise `path` (empty:
// the bundled default experiment).
struct Source {
    std::string path;
    std::optional<std::string> text;
    std::string display;
    std::string folder;

    std::optional<workload::ExperimentText> experiment_text() const {
        if (!text) return std::nullopt;
        return workload::ExperimentText{*text, display, folder.empty() ? "." : folder};
    }
    workload::ExperimentSpec load(const std::vector<std::string>& sets) const {
        if (text) return api::load_experiment(*experiment_text(), sets);
        return api::load_experiment(api::ExperimentRequest{path, sets, ""});
    }
};

std::string summary_text(const report::Summary& s) {
    return report::to_json(s).dump();
}

// Unwinds a simulation from inside a hook once Python raised there (Hooks::check). It derives
// from no standard exception, so that no `catch (const std::exception&)` on the way takes it for
// a failure of the run.
struct Stop {};

// How often a long run or plan gives Python its signal handlers and progress callback.
constexpr std::chrono::milliseconds kCheckInterval{100};

// A Python progress callback (None: none) and the signal check, for hooks called with the GIL
// released. What either raises is kept and the work unwound with Stop; rethrow() raises it again
// once the GIL is held.
class Hooks {
  public:
    explicit Hooks(py::object progress) : progress_(std::move(progress)) {}

    // Runs signal handlers, then progress(done, total[, phase]); at most every kCheckInterval
    // unless `now` (a phase's first and last step).
    void check(std::size_t done, std::size_t total, const char* phase, bool now) {
        const auto t = std::chrono::steady_clock::now();
        if (!now && t - last_ < kCheckInterval) return;
        last_ = t;
        py::gil_scoped_acquire gil;
        try {
            if (PyErr_CheckSignals() != 0) throw py::error_already_set();
            if (progress_.is_none()) return;
            if (phase)
                progress_(done, total, phase);
            else
                progress_(done, total);
        } catch (py::error_already_set&) {
            raised_ = std::current_exception();
            throw Stop{};
        }
    }

    // With the GIL held, after the work unwound with Stop.
    [[noreturn]] void rethrow() const { std::rethrow_exception(raised_); }

  private:
    py::object progress_;
    std::exception_ptr raised_;
    std::chrono::steady_clock::time_point last_{};
};

// Counts a run's passes for Hooks: every worker's forward and backward passes per microbatch and
// chunk, as the command line's progress line does. It copies followers (replica folding stays
// on): a folded replica's passes are counted when they are copied, at the end.
// `phase` (a compare's schedule name, or null) is passed on as progress's third argument.
class PassCounter final : public replay::ReplayObserver, public replay::FollowerCopier {
  public:
    PassCounter(Hooks& hooks, std::size_t total, const char* phase = nullptr)
        : hooks_(hooks), total_(total), phase_(phase) {}
    void on_pass(const replay::PassRecord& pass) override {
        ++per_worker_[pass.worker];
        ++done_;
        hooks_.check(done_, total_, phase_, done_ == 1);
    }
    void copy_worker(int from, int to) override {
        per_worker_[to] = per_worker_[from];
        done_ += per_worker_[from];
    }
    void on_iteration_end(Time) override { hooks_.check(done_, total_, phase_, true); }

  private:
    Hooks& hooks_;
    std::size_t total_;
    const char* phase_;
    std::size_t done_ = 0;
    std::unordered_map<int, std::size_t> per_worker_;
};

// A compare's progress: each schedule's run counted by a PassCounter of its own, named by the
// schedule (progress(done, total, schedule)). Installs itself in `options`, which it outlives.
class ScheduleProgress {
  public:
    ScheduleProgress(Hooks& hooks, api::CompareOptions& options)
        : hooks_(hooks), names_(options.schedules) {
        options.on_prepared = [this](std::size_t, const replay::PreparedIteration& it) {
            passes_ = static_cast<std::size_t>(it.passes());
        };
        options.attach = [this](std::size_t i, replay::Replay& replay) {
            counter_ = std::make_unique<PassCounter>(hooks_, passes_, names_[i].c_str());
            replay.add_observer(*counter_);
        };
    }

  private:
    Hooks& hooks_;
    std::vector<std::string> names_;
    std::size_t passes_ = 0;
    std::unique_ptr<PassCounter> counter_;
};

// Runs `work` with the GIL released; what a hook raised is raised again with the GIL held.
template <typename Work>
auto without_gil(const Hooks& hooks, Work&& work) {
    try {
        py::gil_scoped_release release;
        return work();
    } catch (const Stop&) {
        hooks.rethrow();
    }
}

// Counts one run's passes for `hooks` (RunOptions::on_prepared and ::attach). Installs itself in
// `options`, which it outlives.
class RunProgress {
  public:
    RunProgress(Hooks& hooks, api::RunOptions& options) : hooks_(hooks) {
        options.on_prepared = [this](const replay::PreparedIteration& it) {
            passes_ = static_cast<std::size_t>(it.passes());
        };
        options.attach = [this](replay::Replay& replay) {
            counter_ = std::make_unique<PassCounter>(hooks_, passes_);
            replay.add_observer(*counter_);
        };
    }

  private:
    Hooks& hooks_;
    std::size_t passes_ = 0;
    std::unique_ptr<PassCounter> counter_;
};

// (summary JSON, load and run warnings, experiment display path, HBM per GPU in bytes)
std::tuple<std::string, std::vector<std::string>, std::string, std::int64_t> run(
    const Source& source, const std::vector<std::string>& sets, const std::string& schedule,
    const std::string& trace, bool fast_paths, py::object progress) {
    Hooks hooks(std::move(progress));
    return without_gil(hooks, [&] {
        OutputSet outputs;
        outputs.declare("trace", trace);
        const auto spec = source.load(sets);
        api::RunOptions options;
        options.schedule = schedule;
        options.fast_paths = fast_paths;
        if (!trace.empty()) options.trace = trace;
        options.trace_options.outputs = &outputs;
        RunProgress counting(hooks, options);
        const auto result = api::run(spec, options);
        outputs.commit();
        std::vector<std::string> warnings = spec.warnings;
        warnings.insert(warnings.end(), result.warnings.begin(), result.warnings.end());
        return std::make_tuple(summary_text(result.summary), warnings, spec.source,
                               spec.cluster->gpu_model(0).hbm.value);
    });
}

// (summary JSON per schedule, warnings, experiment display path, HBM per GPU in bytes)
std::tuple<std::vector<std::string>, std::vector<std::string>, std::string, std::int64_t> compare(
    const Source& source, const std::vector<std::string>& sets, const std::string& schedules,
    bool fast_paths, py::object progress) {
    Hooks hooks(std::move(progress));
    return without_gil(hooks, [&] {
        api::CompareOptions options;
        options.fast_paths = fast_paths;
        options.schedules = api::parse_schedule_list(schedules, "schedules");
        ScheduleProgress counting(hooks, options);
        const auto spec = source.load(sets);
        const auto result = api::compare(spec, options);
        std::vector<std::string> summaries;
        for (const auto& s : result.summaries)
            summaries.push_back(summary_text(s));
        std::vector<std::string> warnings = spec.warnings;
        warnings.insert(warnings.end(), result.warnings.begin(), result.warnings.end());
        return std::make_tuple(summaries, warnings, spec.source,
                               spec.cluster->gpu_model(0).hbm.value);
    });
}

// The JSON `plan --json` writes (every layout's entry included). Options as `clustersim plan`'s;
// `progress` (None: none) is called as progress(done, total, phase) with the planner's phases.
std::string plan(const Source& source, const std::vector<std::string>& sets,
                 const std::vector<std::string>& fixes, const std::vector<std::string>& schedules,
                 double headroom, std::size_t top, const std::string& objective,
                 double gpu_hour_price, double margin, const std::string& confirm,
                 int max_micro_batch, bool fast_paths, bool guide, bool hsdp,
                 bool partial_recompute, bool uneven_stages, bool cp_comm,
                 const std::vector<int>& gpus, const std::vector<std::int64_t>& global_batches,
                 int threads, py::object progress) {
    Hooks hooks(std::move(progress));
    return without_gil(hooks, [&] {
        api::PlanOptions options;
        options.experiment = source.path.empty() ? api::default_experiment().string() : source.path;
        options.text = source.experiment_text();
        options.sets = sets;
        options.fixes = fixes;
        options.schedules = schedules;
        options.headroom = headroom;
        options.top = top;
        const auto o = find_named(api::kPlanObjectiveNames, objective);
        if (!o)
            throw ConfigError(SourceLocation{"objective"}, "unknown objective \"" + objective +
                                                               "\"; expected time, mfu, cost or "
                                                               "energy");
        options.objective = *o;
        options.gpu_hour_price = gpu_hour_price;
        options.margin = margin;
        if (!confirm.empty()) options.confirm = api::parse_confirm(confirm);
        options.max_micro_batch_size = max_micro_batch;
        options.keep_entries = true;
        options.fast_paths = fast_paths;
        options.guide = guide;
        options.hsdp = hsdp;
        options.partial_recompute = partial_recompute;
        options.uneven_stages = uneven_stages;
        options.cp_comm = cp_comm;
        options.gpus = gpus;  // each >= 0 (the caller); plan refuses what is not whole nodes
        options.global_batches = global_batches;  // parse_global_batches's (the caller)
        options.threads = threads;  // checked by the caller (clustersim/__init__.py): >= 0
        options.on_progress = [&hooks](const char* phase, std::size_t done, std::size_t total) {
            hooks.check(done, total, phase, done <= 1 || done == total);
        };
        const api::SweepRanks ranks;  // one process, as sweep
        std::ostringstream text;
        api::write_plan_json(text, *api::plan(options, ranks), -1);
        return std::move(text).str();
    });
}

// The combination of `axes` numbered n (the last axis varying fastest, as sweep enumerates), as
// axes of one value each.
std::vector<api::SweepAxis> combination(const std::vector<api::SweepAxis>& axes, std::size_t n) {
    std::vector<api::SweepAxis> one(axes.size());
    for (std::size_t i = axes.size(); i-- > 0;) {
        one[i] = {axes[i].key, {axes[i].values[n % axes[i].values.size()]}};
        n /= axes[i].values.size();
    }
    return one;
}

// (sweep JSON as `sweep --json` writes it, with each entry's `index` and `hbm_bytes`; experiment
// display path; whether Ctrl-C stopped it). `axes` are checked by the caller (clustersim/
// __init__.py: values, combinations). Combinations run one at a time, in enumeration order (each
// is a sweep of one: the rows and ranking are the whole sweep's), so that between two the GIL is
// taken to run signal handlers and progress(done, total). Ctrl-C, or a KeyboardInterrupt from the
// callback, ends the sweep with the rows done; anything else the callback raises propagates.
// The combinations share one SweepCache (SweepOptions::cache): files parsed and clusters built
// once, as in `clustersim sweep`.
std::tuple<std::string, std::string, bool> sweep(
    const Source& source, const std::vector<std::string>& sets,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& vary, bool fast_paths,
    const py::object& progress) {
    std::vector<api::SweepAxis> axes;
    for (const auto& [key, values] : vary)
        axes.push_back({key, values});
    std::size_t total = 1;
    for (const auto& axis : axes)
        total *= axis.values.size();
    api::SweepOptions options;
    options.fast_paths = fast_paths;
    options.experiment = source.path.empty() ? api::default_experiment().string() : source.path;
    options.text = source.experiment_text();
    options.sets = sets;
    if (fast_paths) options.cache = std::make_shared<api::SweepCache>();
    std::vector<api::SweepRow> rows;
    std::vector<std::int64_t> hbm(total, 0);
    bool interrupted = false;
    std::size_t kept = 0;  // bytes of summary text
    for (std::size_t n = 0; n < total && !interrupted; ++n) {
        options.axes = combination(axes, n);
        options.on_loaded = [&hbm, n](const workload::ExperimentSpec& spec) {
            hbm[n] = spec.cluster->gpu_model(0).hbm.value;
        };
        {
            py::gil_scoped_release release;
            auto one = api::sweep(options, api::SweepRanks{});
            rows.push_back(std::move(one->front()));
        }
        const api::SweepRow& row = rows.back();
        rows.back().index = n;
        // Every summary is about the size of the first: refuse, before running the rest, a sweep
        // whose summaries would not fit where `clustersim sweep --json` would refuse it.
        if (row.result && kept == 0) {
            kept = row.result->summary.size() + 512;
            const double need = static_cast<double>(total) * static_cast<double>(kept);
            if (need > static_cast<double>(topology::kDefaultMaxMemory))
                throw ConfigError(SourceLocation{"vary"},
                                  std::to_string(total) + " combinations' summaries would take " +
                                      format_bytes(Bytes{static_cast<std::int64_t>(need)}) +
                                      ", more than " +
                                      format_bytes(Bytes{topology::kDefaultMaxMemory}) +
                                      "; vary fewer keys or values (or use `clustersim sweep`)");
        }
        try {
            if (!progress.is_none()) progress(n + 1, total);
            if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        } catch (py::error_already_set& e) {
            if (!e.matches(PyExc_KeyboardInterrupt)) throw;
            interrupted = true;
        }
    }
    const std::string shown = source.text ? source.display : options.experiment.string();
    const bool any_valid =
        std::any_of(rows.begin(), rows.end(), [](const api::SweepRow& r) { return r.result; });
    api::SweepRanking ranking;
    ranking.source = shown;
    if (any_valid || !interrupted) ranking = api::rank_sweep(rows, shown);
    auto json = api::sweep_json(axes, rows, ranking);
    // Each entry's combination number, from its settings (every value is distinct on its axis).
    for (auto& entry : json) {
        std::size_t n = 0;
        for (const auto& axis : axes) {
            const auto& value = entry.at("settings").at(axis.key).get_ref<const std::string&>();
            n = n * axis.values.size() +
                static_cast<std::size_t>(std::find(axis.values.begin(), axis.values.end(), value) -
                                         axis.values.begin());
        }
        entry["index"] = n;
        entry["hbm_bytes"] = hbm[n];
    }
    return {json.dump(), ranking.source, interrupted};
}

// Writes the HTML report of one run (`schedules` empty: the experiment's own schedule) or of a
// comparison (a comma-separated list) to `path`, as `run --html` and `compare --html` do; the
// runs tell `hooks` of their passes as run and compare do. Called with the GIL released.
void write_report(const Source& source, const std::vector<std::string>& sets,
                  const std::string& schedules, const std::string& path, Hooks& hooks) {
    OutputSet outputs;
    outputs.declare("path", path);
    const auto spec = source.load(sets);
    report::HtmlReport page;
    page.experiment = spec.source;
    page.warnings = spec.warnings;
    std::vector<std::string> warnings;
    if (schedules.empty()) {
        api::RunOptions options;
        options.detail = true;
        RunProgress counting(hooks, options);
        auto result = api::run(spec, options);
        page.title = "clustersim run";
        page.runs = {result.summary};
        page.details = {std::move(*result.detail)};
        warnings = result.warnings;
    } else {
        api::CompareOptions options;
        options.schedules = api::parse_schedule_list(schedules, "schedules");
        options.details = true;
        ScheduleProgress counting(hooks, options);
        auto result = api::compare(spec, options);
        page.title = "clustersim compare";
        page.runs = result.summaries;
        page.details = std::move(result.details);
        warnings = result.warnings;
    }
    page.warnings.insert(page.warnings.end(), warnings.begin(), warnings.end());
    page.validation = api::validation_confidence(spec);
    api::write_html(path, page, &outputs);
    outputs.commit();
}

// write_report with `progress` (None: none) and Ctrl-C: progress(done, total) with one run's
// passes, progress(done, total, schedule) with each schedule's of a comparison.
void html_report(const Source& source, const std::vector<std::string>& sets,
                 const std::string& schedules, const std::string& path, py::object progress) {
    Hooks hooks(std::move(progress));
    without_gil(hooks, [&] { write_report(source, sets, schedules, path, hooks); });
}

// A jobs file (docs/yaml/jobs.md): the JSON `clustersim run JOBS --json` writes.
// `progress` (None: none): progress(done, total) with the job iterations finished
// (JobsOptions::on_progress); Ctrl-C is checked at every pass.
std::string run_jobs(const std::string& path, const std::string& trace, bool fast_paths,
                     py::object progress) {
    Hooks hooks(std::move(progress));
    return without_gil(hooks, [&] {
        OutputSet outputs;
        outputs.declare("trace", trace);
        const auto spec = api::load_jobs(path);
        api::JobsOptions options;
        if (!trace.empty()) options.trace = trace;
        options.outputs = &outputs;
        options.fast_paths = fast_paths;
        options.on_progress = [&hooks](std::size_t done, std::size_t total) {
            hooks.check(done, total, nullptr, done == 0 || done == total);
        };
        const auto result = api::run_jobs(spec, options);
        outputs.commit();
        return api::to_json(result).dump();
    });
}

}  // namespace

PYBIND11_MODULE(_clustersim, m) {
    m.doc() = "clustersim's compiled core; use the clustersim package instead";

    py::class_<Source>(m, "Source")
        .def(py::init<std::string, std::optional<std::string>, std::string, std::string>(),
             py::arg("path"), py::arg("text"), py::arg("display"), py::arg("folder"));

    m.attr("__version__") = CLUSTERSIM_VERSION;
    m.attr("max_sweep_combinations") = api::kMaxSweepCombinations;

    m.def("run", &run, py::arg("source"), py::arg("sets"), py::arg("schedule"), py::arg("trace"),
          py::arg("fast_paths"), py::arg("progress"));
    m.def("compare", &compare, py::arg("source"), py::arg("sets"), py::arg("schedules"),
          py::arg("fast_paths"), py::arg("progress"));
    m.def("sweep", &sweep, py::arg("source"), py::arg("sets"), py::arg("vary"),
          py::arg("fast_paths"), py::arg("progress"));
    m.def("plan", &plan, py::arg("source"), py::arg("sets"), py::arg("fixes"), py::arg("schedules"),
          py::arg("headroom"), py::arg("top"), py::arg("objective"), py::arg("gpu_hour_price"),
          py::arg("margin"), py::arg("confirm"), py::arg("max_micro_batch"), py::arg("fast_paths"),
          py::arg("guide"), py::arg("hsdp"), py::arg("partial_recompute"), py::arg("uneven_stages"),
          py::arg("cp_comm"), py::arg("gpus"), py::arg("global_batches"), py::arg("threads"),
          py::arg("progress"));
    m.def("html_report", &html_report, py::arg("source"), py::arg("sets"), py::arg("schedules"),
          py::arg("path"), py::arg("progress"));
    m.def("run_jobs", &run_jobs, py::arg("path"), py::arg("trace"), py::arg("fast_paths"),
          py::arg("progress"));
    m.def("schedule_names", [] { return schedule::schedule_names(); });
    // report/summary_fields.def as data: one dict {path, column, unit, label, description} per
    // field, in the summary JSON's order (clustersim.summary_fields()).
    m.def("summary_fields", [] {
        py::list out;
        for (const auto& f : report::summary_fields()) {
            py::dict d;
            d["path"] = std::string(f.path);
            d["column"] = std::string(f.column);
            d["unit"] = std::string(f.unit);
            d["label"] = std::string(f.label);
            d["description"] = std::string(f.description);
            out.append(d);
        }
        return out;
    });
    m.def("parse_global_batches", &api::parse_global_batches, py::arg("text"));
    m.def("default_experiment", [] { return api::default_experiment().string(); });

    // The exception types live in clustersim/errors.py; they are looked up when an error is
    // raised, so that this module keeps no Python objects in static storage.
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const ConfigError& e) {
            const py::object cls = py::module_::import("clustersim.errors").attr("InputError");
            const auto& w = e.where();
            const py::object err = cls(e.what(), e.message(), w.file, w.line, w.column);
            PyErr_SetObject(cls.ptr(), err.ptr());
        } catch (const SimulationError& e) {
            const py::object cls = py::module_::import("clustersim.errors").attr("SimulationError");
            PyErr_SetObject(cls.ptr(), cls(e.what()).ptr());
        }
    });
}
