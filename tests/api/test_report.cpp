// What the HTML report draws (api::run with RunOptions::detail) against closed forms, and the page
// itself: self-contained, deterministic, and no string of the data can end its script element.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>
#include <sstream>
#include <string>

#include "ingest/inputs.hpp"
#include "session/compare.hpp"
#include "session/report.hpp"
#include "session/run.hpp"

namespace {

using cs::Time;

const std::string kPipeline =
    std::string(CLUSTERSIM_SOURCE_DIR) + "/workloads/h200-2gpu-pipeline.yaml";

cs::api::RunResult run_detail(const std::vector<std::string>& sets, const std::string& schedule) {
    const auto spec = cs::api::load_experiment({kPipeline, sets, ""});
    cs::api::RunOptions options;
    options.schedule = schedule;
    options.detail = true;
    return cs::api::run(spec, options);
}

}  // namespace

TEST_CASE("run detail: timeline blocks and activation memory over time, 1F1B") {
    // p = 2 stages, m = 8 microbatches, one chunk each: 2 x 8 forward + 2 x 8 backward = 32
    // blocks of replica 0. 1F1B holds at most p - s microbatches on stage s (2 on stage 0, 1 on
    // stage 1): the peak of the memory timeline is that many chunks' activation memory, exactly
    // the memory model's `activations` for the stage, and everything is freed by the end.
    const auto r = run_detail({"network.model=ideal"}, "1f1b");
    REQUIRE(r.detail);
    const auto& d = *r.detail;
    CHECK(d.timeline.rows == 2);
    CHECK(d.timeline.blocks.size() == 32);
    CHECK(d.timeline.iteration_time.seconds() == doctest::Approx(0.1665144).epsilon(1e-12));
    REQUIRE(d.stage_memory.size() == 2);
    REQUIRE(d.memory_steps.size() == 2);
    for (std::size_t s = 0; s < 2; ++s) {
        std::int64_t peak = 0;
        for (const auto& step : d.memory_steps[s])
            peak = std::max(peak, step.activation_bytes);
        CHECK(peak == d.stage_memory[s].activations.value);
        CHECK(d.memory_steps[s].back().activation_bytes == 0);
        CHECK(r.summary.stages[s].peak_inflight_microbatches == static_cast<int>(2 - s));
    }
    CHECK(d.stage_memory[0].activations.value == 2 * d.stage_memory[1].activations.value);
    // The ideal network takes no time: the links are the summary's (as `run` lists them), but no
    // time bin has anything to show.
    CHECK(d.links_total == r.summary.links.size());
    for (const auto& l : d.links)
        CHECK(l.peak_utilization == 0);
}

TEST_CASE("run detail: link utilisation bins hold every byte the summary counts (flow)") {
    // Under `flow`, a link's bins integrate its notified rate over time, so their sum is the
    // bytes the summary's link table counts (per flow, at its start), up to the rounding of flow
    // ends up to whole picoseconds (a relative 1e-6 here), and no bin is above the link's
    // capacity. The 166.5 ms iteration at 1 us bins doubles to fit 256 bins: 1 us x 2^10
    // = 1.024 ms (a bin count of 163), since 2^9 us x 256 = 131 ms is too short.
    const auto r = run_detail({}, "1f1b");
    const auto& d = *r.detail;
    CHECK(d.bin_width.count_ps() == 1'024'000'000);
    REQUIRE(!d.links.empty());
    CHECK(d.links_total == d.links.size());
    for (const auto& series : d.links) {
        const auto it = std::find_if(r.summary.links.begin(), r.summary.links.end(),
                                     [&](const auto& l) { return l.name == series.name; });
        REQUIRE(it != r.summary.links.end());
        CHECK(series.bytes == doctest::Approx(it->bytes).epsilon(1e-6));
        CHECK(series.utilization.size() ==
              static_cast<std::size_t>(
                  (d.timeline.iteration_time.count_ps() + d.bin_width.count_ps() - 1) /
                  d.bin_width.count_ps()));
        for (const double u : series.utilization) {
            CHECK(u >= 0);
            CHECK(u <= 1 + 1e-9);
        }
    }
    // Ranked as the summary's `links` (the console's "busiest links"), with the summary's
    // utilisation, and every link counted once in its kind.
    REQUIRE(d.links.size() <= r.summary.links.size());
    for (std::size_t i = 0; i < d.links.size(); ++i) {
        CHECK(d.links[i].name == r.summary.links[i].name);
        CHECK(d.links[i].mean_utilization == r.summary.links[i].utilization);
        CHECK(d.links[i].peak_utilization ==
              *std::max_element(d.links[i].utilization.begin(), d.links[i].utilization.end()));
    }
    std::size_t counted = 0;
    for (const auto& k : d.link_kinds) {
        // The kind's mean is the mean of its links' utilisations; its busiest is its first.
        double sum = 0;
        std::size_t n = 0;
        std::string first;
        for (const auto& l : r.summary.links)
            if (l.kind == k.kind) {
                if (first.empty()) first = l.name;
                sum += l.utilization;
                ++n;
            }
        CHECK(k.links == n);
        CHECK(k.busiest == first);
        CHECK(k.mean_utilization == doctest::Approx(sum / static_cast<double>(n)).epsilon(1e-12));
        counted += k.links;
    }
    CHECK(counted == d.links_total);
}

TEST_CASE("run detail: tracks of DP sync, optimizer and communication, replica 0") {
    // pp 1, dp 2 on the two GPUs: one stage, whose gradients are reduced over the two replicas
    // after the last backward pass, then the optimizer step; pp 2 sends activations and
    // gradients between the stages (pipeline communication on the sender's row).
    const auto dp =
        run_detail({"parallelism.pp=1", "parallelism.dp=2", "compute.optimizer_step=1ms"}, "1f1b");
    const auto& d = *dp.detail;
    const auto end = d.timeline.iteration_time;
    Time last_pass = Time::zero();
    for (const auto& b : d.timeline.blocks)
        last_pass = std::max(last_pass, b.end);
    int sync = 0, optimizer = 0;
    for (const auto& t : d.tracks) {
        CHECK(t.row == 0);
        CHECK(t.start < t.end);
        CHECK(t.end <= end);
        if (t.track == cs::report::TrackBlock::Track::DpSync) ++sync;
        if (t.track == cs::report::TrackBlock::Track::Optimizer) {
            ++optimizer;
            CHECK(t.start >= last_pass);
        }
    }
    CHECK(sync >= 1);
    CHECK(optimizer == 1);
    const auto pp = run_detail({}, "1f1b");
    int sends[2] = {0, 0};
    for (const auto& t : pp.detail->tracks)
        if (t.track == cs::report::TrackBlock::Track::Comm &&
            t.kind == cs::workload::CommKind::Pipeline)
            ++sends[t.row];
    // Stage 0 sends 8 activations, stage 1 8 gradients; some may touch and merge.
    CHECK(sends[0] >= 1);
    CHECK(sends[1] >= 1);
}

TEST_CASE("html report: one page, deterministic, data that cannot close its script") {
    const auto spec = cs::api::load_experiment({kPipeline, {"network.model=ideal"}, ""});
    cs::api::CompareOptions options;
    options.schedules = {"gpipe", "1f1b"};
    options.details = true;
    const auto result = cs::api::compare(spec, options);
    REQUIRE(result.details.size() == 2);
    cs::report::HtmlReport page;
    page.title = "clustersim compare";
    // A name that closes the script element, one that puts the HTML parser in its escaped state
    // ("<!--<script>": the page once rendered nothing), an ampersand and U+2028 (a line end in
    // older JavaScript) and U+2029 (a paragraph end, the same), all embedded in the page's JSON.
    page.experiment = "a </script><script>alert(1)</script> name <!--<script> & \u2028\u2029";
    page.runs = result.summaries;
    page.details = result.details;
    std::ostringstream a, b;
    cs::report::write_html_report(a, page);
    cs::report::write_html_report(b, page);
    CHECK(a.str() == b.str());
    const std::string html = a.str();
    // Exactly the page's two script elements end, and the data holds no '<' at all: the name
    // appears escaped in the header and with \u escapes in the data.
    std::size_t ends = 0;
    for (auto at = html.find("</script>"); at != std::string::npos;
         at = html.find("</script>", at + 1))
        ++ends;
    CHECK(ends == 2);
    CHECK(html.find("a &lt;/script&gt;&lt;script&gt;alert(1)") != std::string::npos);
    const auto data_start = html.find("<script type=\"application/json\" id=\"data\">") + 42;
    const std::string embedded =
        html.substr(data_start, html.find("</script>", data_start) - data_start);
    CHECK(embedded.find_first_of("<>&") == std::string::npos);
    // Neither line end reaches the script element as its raw UTF-8 bytes.
    CHECK(embedded.find("\xe2\x80\xa8") == std::string::npos);
    CHECK(embedded.find("\xe2\x80\xa9") == std::string::npos);
    CHECK(embedded.find(
              "a \\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e name "
              "\\u003c!--\\u003cscript\\u003e \\u0026 \\u2028\\u2029") != std::string::npos);
    // What the page's script reads back (JSON.parse of the element's text) is the name itself.
    CHECK(nlohmann::json::parse(embedded)["experiment"] == page.experiment);
    const auto data = cs::report::html_data(page);
    CHECK(data["runs"].size() == 2);
    CHECK(data["runs"][0]["summary"]["schedule"] == "gpipe");
    CHECK(!data["runs"][0]["summary"].contains("wall_time_s"));
}

TEST_CASE("validation confidence: the families of the models used") {
    // Four families as a scores file lists them (only id and mode matter to the choice). By the
    // rule of api::validation_confidence, profile compute keeps the modes naming "profile",
    // roofline compute those naming "roofline", and a network that is not ideal adds those
    // naming "network":
    //   h200-2gpu-pipeline (profile compute, flow network): prof, net, roofnet
    //   the same with network.model=ideal:                 prof
    //   default (roofline compute, flow network):          roof, net, roofnet
    //   the same with network.model=ideal:                 roof, roofnet
    const auto family = [](const char* id, const char* mode) {
        return nlohmann::ordered_json{{"id", id}, {"mode", mode}, {"cases", 1}};
    };
    const nlohmann::ordered_json all = nlohmann::ordered_json::array(
        {family("roof", "roofline microbenchmark"), family("prof", "profile pipeline"),
         family("net", "network microbenchmark"), family("roofnet", "roofline + network")});
    const std::string kDefault = std::string(CLUSTERSIM_SOURCE_DIR) + "/workloads/default.yaml";
    const auto chosen = [&](const std::string& file, const std::vector<std::string>& sets) {
        const auto v =
            cs::api::validation_confidence(cs::api::load_experiment({file, sets, ""}), all);
        std::vector<std::string> ids;
        for (const auto& f : v.at("families"))
            ids.push_back(f.at("id").get<std::string>());
        return std::make_pair(ids, v.at("note").get<std::string>());
    };
    using Ids = std::vector<std::string>;
    const auto [profile_flow, profile_flow_note] = chosen(kPipeline, {});
    CHECK(profile_flow == Ids{"prof", "net", "roofnet"});
    CHECK(profile_flow_note.find("profile compute and the flow network.") != std::string::npos);
    const auto [profile_ideal, profile_ideal_note] = chosen(kPipeline, {"network.model=ideal"});
    CHECK(profile_ideal == Ids{"prof"});
    CHECK(profile_ideal_note.find("uses: profile compute.") != std::string::npos);
    CHECK(chosen(kDefault, {}).first == Ids{"roof", "net", "roofnet"});
    CHECK(chosen(kDefault, {"network.model=ideal"}).first == Ids{"roof", "roofnet"});
    // The families are copied whole, in the scores' order.
    CHECK(cs::api::validation_confidence(cs::api::load_experiment({kPipeline, {}, ""}), all)
              .at("families")[0] == all[1]);
}
