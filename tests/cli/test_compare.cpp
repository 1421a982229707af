// clustersim compare end to end (through the CLI11 command, in process) and the SVG timeline
// writer on hand-made panels.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "report/svg_timeline.hpp"
#include "support.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kExperiment =
    std::string(CLUSTERSIM_SOURCE_DIR) + "/workloads/h200-2gpu-pipeline.yaml";

using cs::test::scratch;
using cs::test::slurp;

// Runs `clustersim compare ARGS...` in process; returns what it printed on stdout.
std::string run_compare(std::vector<std::string> args) {
    return cs::test::run_cli("compare", std::move(args));
}

std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1))
        ++n;
    return n;
}

// Every opened element is closed in order, "<x/>" closes itself; "<?...?>" is skipped. Returns an
// empty string when balanced, else what went wrong.
std::string check_balanced(const std::string& xml) {
    std::vector<std::string> open;
    std::size_t pos = 0;
    while ((pos = xml.find('<', pos)) != std::string::npos) {
        const std::size_t end = xml.find('>', pos);
        if (end == std::string::npos) return "unterminated tag at " + std::to_string(pos);
        const std::string tag = xml.substr(pos + 1, end - pos - 1);
        pos = end + 1;
        if (tag.empty()) return "empty tag";
        if (tag[0] == '?') continue;
        const auto name_of = [](const std::string& t) {
            return t.substr(0, t.find_first_of(" \t\n/"));
        };
        if (tag[0] == '/') {
            const std::string name = tag.substr(1);
            if (open.empty() || open.back() != name) return "unexpected </" + name + ">";
            open.pop_back();
        } else if (tag.back() != '/') {
            open.push_back(name_of(tag));
        }
    }
    return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

}  // namespace

TEST_CASE("compare --svg draws one rect per pass of replica 0, balanced and deterministic") {
    const fs::path dir = scratch("svg");
    const fs::path a = dir / "a.svg", b = dir / "b.svg";
    run_compare({kExperiment, "--schedules", "gpipe,1f1b,interleaved", "--svg", a.string()});
    run_compare({kExperiment, "--schedules", "gpipe,1f1b,interleaved", "--svg", b.string()});
    const std::string svg = slurp(a);
    REQUIRE_FALSE(svg.empty());
    CHECK(check_balanced(svg) == "");
    CHECK(count(svg, "<svg ") == 1);
    CHECK(count(svg, "class=\"panel\"") == 3);
    // p = 2 stages, m = 8 microbatches (global batch 8 / micro-batch 1 / dp 1), one F and one B
    // per microbatch and chunk: gpipe and 1f1b draw p*m*2 = 32 passes each; interleaved with
    // v = 2 chunks draws p*m*2*v = 64. Total 128, split 64 forward and 64 backward.
    CHECK(count(svg, "<rect class=\"pass ") == 32 + 32 + 64);
    CHECK(count(svg, "<rect class=\"pass F\"") == 64);
    CHECK(count(svg, "<rect class=\"pass B\"") == 64);
    // One grey idle row per stage per panel: 3 x 2.
    CHECK(count(svg, "<rect class=\"idle\"") == 6);
    CHECK(svg == slurp(b));
}

TEST_CASE("compare --json writes one summary per schedule, in order") {
    const fs::path dir = scratch("json");
    const fs::path json = dir / "out.json";
    const std::string out = run_compare(
        {kExperiment, "--schedules", "gpipe,1f1b,interleaved", "--json", json.string()});
    const auto list = nlohmann::json::parse(slurp(json));
    REQUIRE(list.is_array());
    REQUIRE(list.size() == 3);
    CHECK(list[0]["schedule"] == "gpipe");
    CHECK(list[1]["schedule"] == "1f1b");
    CHECK(list[2]["schedule"] == "interleaved");
    // Whole-stage F = 4 layers x 1.3057 ms = 5.2228 ms, B = 4 x 3.3197 ms = 13.2788 ms;
    // p = 2, m = 8. Communication only adds time, so the closed forms are lower bounds:
    // gpipe, 1f1b: (m+p-1)(F+B) = 9 x 18.5016 ms = 166.5144 ms;
    // interleaved, v = 2: (vm+p-1)(F+B)/v = 17 x 18.5016 / 2 ms = 157.2636 ms.
    CHECK(list[0]["iteration_time_s"].get<double>() >= 0.1665144);
    CHECK(list[1]["iteration_time_s"].get<double>() >= 0.1665144);
    CHECK(list[2]["iteration_time_s"].get<double>() >= 0.1572636);
    // The experiment's vpp = 2 reaches interleaved only.
    CHECK(list[0]["parallelism"]["vpp"] == 1);
    CHECK(list[2]["parallelism"]["vpp"] == 2);
    CHECK(out.find("note: vpp=2 is ignored by schedules without virtual stages (gpipe, 1f1b)") !=
          std::string::npos);
    // Peak in-flight on stage 0: gpipe holds all m = 8; 1f1b min(p, m) = 2 (docs/schedules.md).
    CHECK(list[0]["stages"][0]["peak_inflight_microbatches"] == 8);
    CHECK(list[1]["stages"][0]["peak_inflight_microbatches"] == 2);
    CHECK(out.find("peak activation memory per stage") != std::string::npos);
}

TEST_CASE("compare without vpp prints no note") {
    const std::string out =
        run_compare({kExperiment, "--schedules", "1f1b", "--set", "parallelism.vpp=1"});
    CHECK(out.find("note:") == std::string::npos);
    CHECK(out.find("1f1b") != std::string::npos);
}

TEST_CASE("compare rejects an unknown schedule, naming the valid ones, and writes nothing") {
    const fs::path dir = scratch("bad");
    const fs::path json = dir / "out.json";
    try {
        run_compare({kExperiment, "--schedules", "1f1b,zigzag", "--json", json.string()});
        FAIL("expected a ConfigError");
    } catch (const cs::ConfigError& e) {
        const std::string msg = e.what();
        CHECK(msg.find("zigzag") != std::string::npos);
        CHECK(msg.find("gpipe") != std::string::npos);
        CHECK(msg.find("1f1b") != std::string::npos);
        CHECK(msg.find("interleaved") != std::string::npos);
    }
    CHECK_FALSE(fs::exists(json));
}

TEST_CASE("svg timeline: blocks scale to the longest iteration") {
    using cs::Time;
    using cs::report::TimelineBlock;
    using cs::schedule::Pass;
    cs::report::TimelinePanel a;
    a.schedule = "one";
    a.rows = 2;
    a.iteration_time = Time::ms(10);
    a.bubble_fraction = 0.25;
    a.blocks = {TimelineBlock{0, 0, 0, Pass::Forward, Time::ms(0), Time::ms(5)},
                TimelineBlock{1, 0, 0, Pass::Backward, Time::ms(5), Time::ms(10)}};
    cs::report::TimelinePanel b = a;
    b.schedule = "two<&>";
    b.iteration_time = Time::ms(20);
    b.blocks = {TimelineBlock{1, 3, 1, Pass::BackwardWeight, Time::ms(10), Time::ms(20)}};
    // The checker itself rejects what it should.
    CHECK(check_balanced("<g><rect x=\"1\"></g>") != "");
    CHECK(check_balanced("<g><rect x=\"1\"/>") != "");
    CHECK(check_balanced("<g><rect x=\"1\"/></g>") == "");
    std::ostringstream out;
    cs::report::write_svg_timelines(out, {a, b});
    const std::string svg = out.str();
    CHECK(check_balanced(svg) == "");
    CHECK(count(svg, "<rect class=\"pass ") == 3);
    CHECK(count(svg, "<rect class=\"pass W\"") == 1);
    // The longest iteration (20 ms) spans the 1000-unit plot: a 5 ms block is 250 units wide,
    // a 10 ms block 500, panel one's idle rows 10 ms = 500, panel two's 1000.
    CHECK(count(svg, "width=\"250.00\"") == 2);
    CHECK(count(svg, "width=\"500.00\" height=\"20.00\"") == 1 + 2);
    CHECK(count(svg, "width=\"1000.00\" height=\"20.00\"") == 2);
    CHECK(svg.find("bubble 25.00%") != std::string::npos);
    CHECK(svg.find("two&lt;&amp;&gt;") != std::string::npos);
    CHECK(svg.find("two<&>") == std::string::npos);
}

TEST_CASE("compare shows host_fraction and explains host-bound passes") {
    // Profile compute without a framework: no host, 0.00% in the host column, no explanation.
    const std::string plain = run_compare({kExperiment, "--schedules", "1f1b"});
    CHECK(plain.find(" host ") != std::string::npos);
    CHECK(plain.find("waits for the host") == std::string::npos);
    // With PyTorch's host and a 5 ms launch per kernel (a profiled layer is one kernel, and each
    // runs for less than 5 ms), every pass issues its kernels slower than they run.
    const std::string slow =
        run_compare({kExperiment, "--schedules", "1f1b", "--set", "compute.framework=pytorch",
                     "--set", "compute.host.launch=5ms"});
    CHECK(slow.find("1f1b: ") != std::string::npos);
    CHECK(slow.find("of GPU time waits for the host: ") != std::string::npos);
    CHECK(slow.find("passes are host-bound (their kernels issue slower than they run)") !=
          std::string::npos);
}
