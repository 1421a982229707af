// The HTML report (`run --html`, `compare --html`, `sweep --html`): one self-contained file, the
// data embedded as JSON and drawn as inline SVG by a small hand-written script
// (sim/report/html/report.js, .css, compiled in). Nothing is fetched when it is viewed, and the
// file depends only on its inputs: no dates, host names, paths of outputs or wall-clock times.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "report/run_detail.hpp"
#include "report/summary.hpp"

namespace cs::report {

struct HtmlReport {
    std::string title;               // "clustersim run", ...
    std::string experiment;          // display path
    std::vector<Summary> runs;       // one per schedule (empty for a sweep)
    std::vector<RunDetail> details;  // index for index with runs
    std::vector<std::string> warnings;
    // A sweep: the varied keys and its rows as `sweep --json` writes them (ranked, then invalid).
    std::vector<std::string> sweep_keys;
    std::optional<nlohmann::ordered_json> sweep_rows;
    // A plan (`plan --html`): api::plan_html_data.
    std::optional<nlohmann::ordered_json> plan;
    // Sweep and plan: the command that runs the experiment as the sweep or plan loaded it
    // ("clustersim", "run", path, "--set", "k=v", ...); each ranked row's "copy as command" adds
    // its own "--set" keys (a sweep row's settings, a plan layout's overrides).
    std::vector<std::string> command;
    // The validation confidence of the models used: {"note": ..., "families": [...]} (see
    // session/report.cpp), or null.
    nlohmann::ordered_json validation;
};

// The data the page draws, as embedded (for tests).
nlohmann::ordered_json html_data(const HtmlReport& report);
void write_html_report(std::ostream& out, const HtmlReport& report);

}  // namespace cs::report
