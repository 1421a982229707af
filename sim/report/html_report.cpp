#include "report/html_report.hpp"

#include <algorithm>

#include "report/html_assets.hpp"  // generated from html/report.js and html/report.css
#include "report/svg_timeline.hpp"

namespace cs::report {

namespace {

nlohmann::ordered_json memory_json(const workload::MemoryBreakdown& m) {
    return {{"parameters", m.parameters.value},
            {"gradients", m.gradients.value},
            {"optimizer_states", m.optimizer_states.value},
            {"activations", m.activations.value},
            {"total", m.total.value}};
}

nlohmann::ordered_json run_json(const Summary& s, const RunDetail& d) {
    nlohmann::ordered_json run;
    auto summary = to_json(s);
    summary.erase("wall_time_s");  // the only non-deterministic field
    summary.erase("links");        // the heat map shows the busiest; the table is in --json
    run["summary"] = summary;

    auto blocks = nlohmann::ordered_json::array();
    for (const auto& b : d.timeline.blocks)
        blocks.push_back({b.row, b.microbatch, b.chunk, schedule::pass_letter(b.pass),
                          b.start.seconds(), b.end.seconds()});
    // pass_letter gives "B" for a split backward's input-gradient pass and "W" for its weight pass.
    // Tracks: [stage, track (an index into track_names), kind (into kinds), start, end].
    auto tracks = nlohmann::ordered_json::array();
    for (const auto& t : d.tracks)
        tracks.push_back({t.row, static_cast<int>(t.track), static_cast<int>(t.kind),
                          t.start.seconds(), t.end.seconds()});
    auto kinds = nlohmann::ordered_json::array();
    for (const auto& k : workload::kCommKindNames)
        kinds.push_back(k.name);
    run["timeline"] = {{"rows", d.timeline.rows},
                       {"chunks", d.timeline.chunks},
                       {"end_s", d.timeline.iteration_time.seconds()},
                       {"blocks", blocks},
                       {"track_names", {"comm", "dp sync", "optimizer"}},
                       {"kinds", kinds},
                       {"tracks", tracks}};

    auto series = nlohmann::ordered_json::array();
    for (const auto& l : d.links)
        series.push_back({{"name", l.name},
                          {"kind", l.kind},
                          {"bytes", l.bytes},
                          {"mean", l.mean_utilization},
                          {"peak", l.peak_utilization},
                          {"u", l.utilization}});
    auto by_kind = nlohmann::ordered_json::array();
    for (const auto& k : d.link_kinds)
        by_kind.push_back({{"kind", k.kind},
                           {"links", k.links},
                           {"bytes", k.bytes},
                           {"mean", k.mean_utilization},
                           {"busiest", k.busiest},
                           {"busiest_mean", k.busiest_utilization},
                           {"peak", k.peak_utilization}});
    run["links"] = {{"bin_s", d.bin_width.seconds()},
                    {"total", d.links_total},
                    {"kinds", by_kind},
                    {"series", series}};

    auto stages = nlohmann::ordered_json::array();
    for (const auto& m : d.stage_memory)
        stages.push_back(memory_json(m));
    auto over_time = nlohmann::ordered_json::array();
    for (const auto& steps : d.memory_steps) {
        auto points = nlohmann::ordered_json::array();
        for (const auto& p : steps)
            points.push_back({p.at.seconds(), p.activation_bytes});
        over_time.push_back(points);
    }
    run["memory"] = {{"hbm", d.hbm_bytes}, {"stages", stages}, {"over_time", over_time}};
    return run;
}

}  // namespace

nlohmann::ordered_json html_data(const HtmlReport& report) {
    nlohmann::ordered_json data;
    data["title"] = report.title;
    data["experiment"] = report.experiment;
    // One block of warnings: each once, in the order first given (a compare's runs repeat the
    // experiment's).
    auto warnings = nlohmann::ordered_json::array();
    std::vector<std::string> seen;
    for (const auto& w : report.warnings)
        if (std::find(seen.begin(), seen.end(), w) == seen.end()) {
            seen.push_back(w);
            warnings.push_back(w);
        }
    data["warnings"] = warnings;
    auto runs = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < report.runs.size() && i < report.details.size(); ++i)
        runs.push_back(run_json(report.runs[i], report.details[i]));
    data["runs"] = runs;
    // The summary's scalar fields (summary_fields.def): the page labels and prints them by these.
    data["fields"] = summary_fields_json();
    if (report.sweep_rows)
        data["sweep"] = {{"keys", report.sweep_keys}, {"rows", *report.sweep_rows}};
    if (report.plan) data["plan"] = *report.plan;
    if (!report.command.empty()) data["command"] = report.command;
    data["validation"] = report.validation;
    return data;
}

void write_html_report(std::ostream& out, const HtmlReport& report) {
    // ASCII-only JSON (so U+2028 and U+2029 arrive as \u escapes), with every '<', '>' and '&'
    // written as a \u escape too: no name can then close the script element ("</script>") or put
    // the HTML parser in its escaped state ("<!--<script>", which made the page render nothing).
    // Outside strings JSON has none of these characters, so the text stays the same JSON.
    // Bytes that are not UTF-8 (a path named in another encoding) become U+FFFD rather than
    // stopping the page.
    const std::string dumped =
        html_data(report).dump(-1, ' ', true, nlohmann::ordered_json::error_handler_t::replace);
    std::string json;
    json.reserve(dumped.size());
    for (const char c : dumped) {
        if (c == '<')
            json += "\\u003c";
        else if (c == '>')
            json += "\\u003e";
        else if (c == '&')
            json += "\\u0026";
        else
            json += c;
    }
    const std::string title = markup_escape(report.title + " - " + report.experiment);
    out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        << "<title>" << title << "</title>\n<style>\n"
        << kHtmlReportCss << "</style>\n</head>\n<body>\n<header><h1>"
        << markup_escape(report.title) << "</h1><p>" << markup_escape(report.experiment)
        << "</p></header>\n<main id=\"main\"></main>\n"
        << "<script type=\"application/json\" id=\"data\">" << json << "</script>\n<script>\n"
        << kHtmlReportJs << "</script>\n</body>\n</html>\n";
}

}  // namespace cs::report
