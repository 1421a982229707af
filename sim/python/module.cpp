// clustersim._clustersim: the Python bindings' compiled half. A thin layer over sim/api: every
// function takes the experiment (a path, or YAML/JSON text with a display name and a folder) and
// the overrides as the command line does, releases the GIL while it loads and simulates, and
// returns JSON text that the pure-Python package (clustersim/__init__.py) turns into objects.
// ConfigError becomes clustersim.InputError (a ValueError carrying file, line and column),
// SimulationError clustersim.SimulationError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "ingest/inputs.hpp"
#include "report/summary.hpp"
#include "schedule/schedule.hpp"
#include "session/compare.hpp"
#include "session/jobs.hpp"
#include "session/plan.hpp"
#include "session/report.hpp"
#include "session/run.hpp"
#include "session/sweep.hpp"

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

// (summary JSON, load and run warnings, experiment display path)
std::tuple<std::string, std::vector<std::string>, std::string> run(
    const Source& source, const std::vector<std::string>& sets, const std::string& schedule,
    const std::string& trace, bool fast_paths) {
    py::gil_scoped_release release;
    OutputSet outputs;
    outputs.declare("trace", trace);
    const auto spec = source.load(sets);
    api::RunOptions options;
    options.schedule = schedule;
    options.fast_paths = fast_paths;
    if (!trace.empty()) options.trace = trace;
    options.trace_options.outputs = &outputs;
    const auto result = api::run(spec, options);
    outputs.commit();
    std::vector<std::string> warnings = spec.warnings;
    warnings.insert(warnings.end(), result.warnings.begin(), result.warnings.end());
    return {summary_text(result.summary), warnings, spec.source};
}

// (summary JSON per schedule, warnings, experiment display path)
std::tuple<std::vector<std::string>, std::vector<std::string>, std::string> compare(
    const Source& source, const std::vector<std::string>& sets, const std::string& schedules,
    bool fast_paths) {
    py::gil_scoped_release release;
    api::CompareOptions options;
    options.fast_paths = fast_paths;
    options.schedules = api::parse_schedule_list(schedules, "schedules");
    const auto spec = source.load(sets);
    const auto result = api::compare(spec, options);
    std::vector<std::string> summaries;
    for (const auto& s : result.summaries)
        summaries.push_back(summary_text(s));
    std::vector<std::string> warnings = spec.warnings;
    warnings.insert(warnings.end(), result.warnings.begin(), result.warnings.end());
    return {summaries, warnings, spec.source};
}

// The JSON `plan --json` writes (every layout's entry included). Options as `clustersim plan`'s.
std::string plan(const Source& source, const std::vector<std::string>& sets,
                 const std::vector<std::string>& fixes, const std::vector<std::string>& schedules,
                 double headroom, std::size_t top, const std::string& objective,
                 double gpu_hour_price, double margin, int max_micro_batch, bool fast_paths,
                 bool guide) {
    py::gil_scoped_release release;
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
        throw ConfigError(SourceLocation{"objective " + objective},
                          "unknown objective; expected time, mfu, cost or energy");
    options.objective = *o;
    options.gpu_hour_price = gpu_hour_price;
    options.margin = margin;
    options.max_micro_batch_size = max_micro_batch;
    options.keep_entries = true;
    options.fast_paths = fast_paths;
    options.guide = guide;
    const api::SweepRanks ranks;  // one process, as sweep
    return api::plan_json(*api::plan(options, ranks)).dump();
}

// (sweep JSON as `sweep --json` writes it, experiment display path). `vary` as --vary takes it.
std::tuple<std::string, std::string> sweep(const Source& source,
                                           const std::vector<std::string>& sets,
                                           const std::vector<std::string>& vary, bool fast_paths) {
    py::gil_scoped_release release;
    api::SweepOptions options;
    options.fast_paths = fast_paths;
    options.experiment = source.path.empty() ? api::default_experiment().string() : source.path;
    options.text = source.experiment_text();
    options.sets = sets;
    options.axes = api::parse_sweep_axes(vary);
    // Python is one process: a sweep never joins an MPI job from here.
    const api::SweepRanks ranks;
    const auto rows = api::sweep(options, ranks);
    if (!rows) return {"[]", ""};
    const std::string shown = source.text ? source.display : options.experiment.string();
    const auto ranking = api::rank_sweep(*rows, shown);
    return {api::sweep_json(options.axes, *rows, ranking).dump(), ranking.source};
}

// Writes the HTML report of one run (`schedules` empty: the experiment's own schedule) or of a
// comparison (a comma-separated list) to `path`, as `run --html` and `compare --html` do.
void html_report(const Source& source, const std::vector<std::string>& sets,
                 const std::string& schedules, const std::string& path) {
    py::gil_scoped_release release;
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
        auto result = api::run(spec, options);
        page.title = "clustersim run";
        page.runs = {result.summary};
        page.details = {std::move(*result.detail)};
        warnings = result.warnings;
    } else {
        api::CompareOptions options;
        options.schedules = api::parse_schedule_list(schedules, "schedules");
        options.details = true;
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

// A jobs file (docs/yaml/jobs.md): the JSON `clustersim run JOBS --json` writes.
std::string run_jobs(const std::string& path, const std::string& trace, bool fast_paths) {
    py::gil_scoped_release release;
    OutputSet outputs;
    outputs.declare("trace", trace);
    const auto spec = api::load_jobs(path);
    api::JobsOptions options;
    if (!trace.empty()) options.trace = trace;
    options.outputs = &outputs;
    options.fast_paths = fast_paths;
    const auto result = api::run_jobs(spec, options);
    outputs.commit();
    return api::to_json(result).dump();
}

}  // namespace

PYBIND11_MODULE(_clustersim, m) {
    m.doc() = "clustersim's compiled core; use the clustersim package instead";

    py::class_<Source>(m, "Source")
        .def(py::init<std::string, std::optional<std::string>, std::string, std::string>(),
             py::arg("path"), py::arg("text"), py::arg("display"), py::arg("folder"));

    m.def("run", &run, py::arg("source"), py::arg("sets"), py::arg("schedule"), py::arg("trace"),
          py::arg("fast_paths"));
    m.def("compare", &compare, py::arg("source"), py::arg("sets"), py::arg("schedules"),
          py::arg("fast_paths"));
    m.def("sweep", &sweep, py::arg("source"), py::arg("sets"), py::arg("vary"),
          py::arg("fast_paths"));
    m.def("plan", &plan, py::arg("source"), py::arg("sets"), py::arg("fixes"), py::arg("schedules"),
          py::arg("headroom"), py::arg("top"), py::arg("objective"), py::arg("gpu_hour_price"),
          py::arg("margin"), py::arg("max_micro_batch"), py::arg("fast_paths"), py::arg("guide"));
    m.def("html_report", &html_report, py::arg("source"), py::arg("sets"), py::arg("schedules"),
          py::arg("path"));
    m.def("run_jobs", &run_jobs, py::arg("path"), py::arg("trace"), py::arg("fast_paths"));
    m.def("schedule_names", [] { return schedule::schedule_names(); });
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
