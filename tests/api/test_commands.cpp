// The other library entry points: sweep, topology, collective, validate.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/tables.hpp"
#include "core/errors.hpp"
#include "fit/validate.hpp"
#include "ingest/topology.hpp"
#include "session/collective.hpp"
#include "session/run.hpp"
#include "session/sweep.hpp"
#include "topology/summary.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kRoot = CLUSTERSIM_SOURCE_DIR;
const std::string kPipeline = kRoot + "/workloads/h200-2gpu-pipeline.yaml";
const std::string kTwoGpus = kRoot + "/topologies/h200-2gpu-nvlink.yaml";

}  // namespace

TEST_CASE("api::sweep in one process: every combination, ranked, repeats listed once") {
    cs::api::SweepOptions options;
    options.experiment = kPipeline;
    options.sets = {"network.model=ideal"};
    options.axes = cs::api::parse_sweep_axes({"schedule=gpipe,interleaved", "parallelism.vpp=1,2"});
    const cs::api::SweepRanks ranks;  // no launcher: a job of one
    const auto rows = cs::api::sweep(options, ranks);
    REQUIRE(rows);
    REQUIRE(rows->size() == 4);  // enumeration order, the last axis fastest
    CHECK((*rows)[0].values == std::vector<std::string>{"gpipe", "1"});
    CHECK((*rows)[3].values == std::vector<std::string>{"interleaved", "2"});
    // interleaved needs vpp >= 2: row 2 is not valid, with the reason.
    CHECK_FALSE((*rows)[2].result);
    CHECK((*rows)[2].error.find("vpp >= 2") != std::string::npos);
    const auto ranking = cs::api::rank_sweep(*rows, kPipeline);
    // Ideal network: interleaved 157.26 ms beats GPipe's 166.51 ms (see test_run.cpp); GPipe's
    // vpp = 2 run is its vpp = 1 run again, so 3 ranked rows are 2 listed and 1 repeat.
    REQUIRE(ranking.ranked.size() == 3);
    CHECK(ranking.listed.size() == 2);
    CHECK(ranking.repeats == 1);
    CHECK(ranking.listed[0]->values[0] == "interleaved");
    const auto json = cs::api::sweep_json(options.axes, *rows, ranking);
    REQUIRE(json.size() == 4);  // ranked rows (repeats included), then the invalid one
    CHECK(json[3].contains("error"));
    std::ostringstream text;
    cs::cli::print_sweep(text, options.axes, cs::api::tally_rows(*rows, 20), 20);
    CHECK(text.str().find("4 combinations: 3 simulated, 1 not valid; 1 gave the same result") !=
          std::string::npos);

    // The streamed ranking (sweep without --json) keeps the same rows in the same order, and
    // with --top 1 only the best one, while still counting every combination.
    const auto tally = cs::api::sweep_tally(options, ranks, 1);
    REQUIRE(tally);
    CHECK(tally->combinations() == 4);
    CHECK(tally->valid() == 3);
    CHECK(tally->listed() == 2);
    CHECK(tally->repeats() == 1);
    const auto top = tally->top_rows();
    REQUIRE(top.size() == 1);
    CHECK(top[0]->index == ranking.listed[0]->index);
    CHECK(top[0]->result->summary.empty());  // the table needs no summaries
    REQUIRE(tally->reasons().size() == 1);
    CHECK(tally->reasons()[0].count == 1);
    CHECK(tally->reasons()[0].first_index == 2);
    std::ostringstream streamed, full;
    cs::cli::print_sweep(streamed, options.axes, *tally, 1);
    cs::cli::print_sweep(full, options.axes, cs::api::tally_rows(*rows, 1), 1);
    CHECK(streamed.str() == full.str());
}

TEST_CASE(
    "sweep caches: kept routes, a reused link accounting and the link digest change nothing") {
    // GPT-3 175B on the default 256-GPU cluster, analytical network (replica folding on). The
    // combinations run in order (the last axis fastest) on one cached cluster: (vpp 1, tp 4)
    // first, on a cold cluster; then tp 8, then (vpp 2, tp 4) and (vpp 2, tp 8) with their routes
    // kept from the first two and the accounting reused. 1f1b ignores vpp, so the vpp 2 rows are
    // repeats of the vpp 1 rows, and tp 4 and tp 8 differ.
    cs::api::SweepOptions options;
    options.experiment = kRoot + "/workloads/default.yaml";
    options.sets = {"network.model=analytical", "schedule=1f1b"};
    options.axes = cs::api::parse_sweep_axes({"parallelism.vpp=1,2", "parallelism.tp=4,8"});
    const cs::api::SweepRanks ranks;
    const auto full = cs::api::sweep(options, ranks);  // summaries kept: their texts
    REQUIRE(full);
    REQUIRE(full->size() == 4);
    for (const auto& row : *full) {
        REQUIRE(row.result);
        // The same experiment loaded and run alone, with no cache of any kind: the same summary
        // text (links included) as in the sweep, cold or warm.
        const auto spec = cs::workload::load_experiment(
            options.experiment,
            {"parallelism.dp=~", "network.model=analytical", "schedule=1f1b",
             "parallelism.vpp=" + row.values[0], "parallelism.tp=" + row.values[1]});
        auto alone = cs::report::to_json(cs::api::run(spec).summary);
        alone.erase("wall_time_s");
        CHECK(alone["links"].size() > 0);
        CHECK(alone.dump() == row.result->summary);
    }
    CHECK((*full)[0].result->summary == (*full)[2].result->summary);
    CHECK((*full)[1].result->summary == (*full)[3].result->summary);
    CHECK((*full)[0].result->summary != (*full)[1].result->summary);

    // A table-only sweep digests the links from the accounting: equal digests exactly where the
    // texts are equal, the same figures, and the same digests when run again.
    options.keep_summaries = false;
    const auto lean = cs::api::sweep(options, ranks);
    const auto again = cs::api::sweep(options, ranks);
    REQUIRE(lean);
    REQUIRE(again);
    REQUIRE(lean->size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
        const auto& a = *(*lean)[i].result;
        const auto& b = *(*full)[i].result;
        CHECK(a.summary.empty());
        CHECK(a.tokens_per_s == b.tokens_per_s);
        CHECK(a.figures == b.figures);
        CHECK(a.summary_digest == (*again)[i].result->summary_digest);
        for (std::size_t j = 0; j < 4; ++j)
            CHECK((b.summary == (*full)[j].result->summary) ==
                  (a.summary_digest == (*lean)[j].result->summary_digest));
    }
}

namespace {

// A valid row of a made-up sweep: `fits`, `tokens` per second and the digest of its summary.
cs::api::SweepRow made_row(std::size_t index, bool fits, double tokens, std::uint64_t digest) {
    cs::api::SweepRow row;
    row.index = index;
    row.values = {std::to_string(index)};
    row.result = cs::api::SweepResult{};
    row.result->fits = fits;
    row.result->tokens_per_s = tokens;
    row.result->summary_digest = digest;
    row.result->summary = "{}";
    return row;
}

std::vector<std::size_t> indices(const std::vector<const cs::api::SweepRow*>& rows) {
    std::vector<std::size_t> out;
    for (const auto* r : rows)
        out.push_back(r->index);
    return out;
}

}  // namespace

TEST_CASE("SweepTally: merged shares rank as one process would, repeats at their best row") {
    // Ten rows. By hand, ranked (fits first, then tokens, ties by index):
    //   fits: 9 (900, d1), 2 (800, d2), 5 (800, d3), 0 (700, d1), 7 (600, d4), 3 (500, d5)
    //   not fitting: 1 (1000, d6), 4 (50, d6)
    // and rows 6 and 8 invalid. Distinct results by best row: 9, 2, 5, 7, 3, 1 (6 listed); rows 0
    // (d1 under 9) and 4 (d6 under 1) are repeats. Top 3: 9, 2, 5.
    std::vector<cs::api::SweepRow> rows = {made_row(0, true, 700, 1),
                                           made_row(1, false, 1000, 6),
                                           made_row(2, true, 800, 2),
                                           made_row(3, true, 500, 5),
                                           made_row(4, false, 50, 6),
                                           {},
                                           {},
                                           made_row(7, true, 600, 4),
                                           {},
                                           made_row(9, true, 900, 1)};
    rows[5] = made_row(5, true, 800, 3);
    rows[6].index = 6;
    rows[6].values = {"6"};
    rows[6].error = "too few microbatches";
    rows[8].index = 8;
    rows[8].values = {"8"};
    rows[8].error = "too few microbatches";

    const auto one = cs::api::tally_rows(rows, 3);
    CHECK(one.combinations() == 10);
    CHECK(one.valid() == 8);
    CHECK(one.listed() == 6);
    CHECK(one.repeats() == 2);
    CHECK(indices(one.top_rows()) == std::vector<std::size_t>{9, 2, 5});
    REQUIRE(one.reasons().size() == 1);
    CHECK(one.reasons()[0].count == 2);
    CHECK(one.reasons()[0].first_index == 6);

    // The same rows dealt to three processes in a scrambled order, each tallied alone, merged
    // through the CBOR every process sends: the same ranking. Process 2 keeps row 0 (d1, 700) in
    // its own top; merging process 0's better d1 row (9) must make row 0 a repeat and drop it.
    const std::vector<std::vector<std::size_t>> deal = {{9, 4, 6}, {2, 3, 7, 8}, {0, 1, 5}};
    std::vector<cs::api::SweepTally> parts;
    for (const auto& share : deal) {
        cs::api::SweepTally t(3);
        for (const auto i : share)
            t.add(rows[i]);
        parts.push_back(cs::api::SweepTally::decode(t.encode()));
    }
    cs::api::SweepTally merged = parts[2];
    merged.merge(parts[1]);
    merged.merge(parts[0]);
    CHECK(merged.combinations() == 10);
    CHECK(merged.listed() == 6);
    CHECK(merged.repeats() == 2);
    CHECK(indices(merged.top_rows()) == std::vector<std::size_t>{9, 2, 5});
    REQUIRE(merged.reasons().size() == 1);
    CHECK(merged.reasons()[0].first_index == 6);
    CHECK(merged.reasons()[0].count == 2);

    // --top 0 keeps no row but still counts.
    const auto none = cs::api::tally_rows(rows, 0);
    CHECK(none.top_rows().empty());
    CHECK(none.listed() == 6);
}

TEST_CASE("api::topology: two H200s on 18 bonded NVLinks") {
    const auto loaded = cs::api::load_topology(kTwoGpus, {});
    const auto s = cs::topology::summarize(loaded.cluster);
    CHECK(s.gpus == 2);
    // 18 links x 25 GB/s = 450 GB/s each way.
    CHECK(s.intra_node_bandwidth_per_gpu.gb_per_s() == doctest::Approx(450));
    const auto j = cs::api::topology_json(s);
    CHECK(j["gpus"] == 2);
    CHECK(cs::api::topology_dot(loaded.cluster, "--dot x").find("gpu0") != std::string::npos);
    CHECK_THROWS_AS(cs::api::load_topology(kTwoGpus, {"no_such_key=1"}), cs::ConfigError);
}

TEST_CASE("api::run_collective: a ring all-reduce on two GPUs by hand") {
    cs::api::CollectiveRequest request;
    request.topology = kTwoGpus;
    request.ranks = {0, 1};
    request.sizes = cs::api::parse_size_range("1GiB", 2);
    request.nominal = true;
    // Ring all-reduce on n = 2: 2(n - 1) = 2 steps of S / n = 512 MiB over one direction of the
    // 450 GB/s NVLink, 536870912 B / 450e9 B/s = 1.193046471 ms each, plus 1 us latency per step:
    // 2.388092942 ms. busbw = algbw x 2(n-1)/n = algbw.
    const auto report = cs::api::run_collective(request);
    REQUIRE(report.rows.size() == 1);
    CHECK(report.rows[0].time.seconds() == doctest::Approx(2.388092942e-3).epsilon(1e-9));
    CHECK(report.rows[0].busbw_GBps == doctest::Approx(report.rows[0].algbw_GBps));
    // Sizes double from the first to the last.
    CHECK(cs::api::parse_size_range("1KiB:8KiB", 2).size() == 4);
    // Hostile step factors: infinity and NaN are refused; 1 + 1e-7 over 1 B..1 TB would need
    // ln(1e12) / 1e-7 = 2.8e8 rows, past the 10,000-row limit.
    CHECK_THROWS_WITH_AS(cs::api::parse_size_range("1B:1TB", HUGE_VAL),
                         doctest::Contains("--step-factor inf: the step factor must be a finite "
                                           "number above 1"),
                         cs::ConfigError);
    CHECK_THROWS_WITH_AS(cs::api::parse_size_range("1B:1TB", std::nan("")),
                         doctest::Contains("finite number above 1"), cs::ConfigError);
    CHECK_THROWS_WITH_AS(cs::api::parse_size_range("1B:1TB", 1.0000001),
                         doctest::Contains("more than 10000 sizes"), cs::ConfigError);
    request.ranks = {0, 5};
    CHECK_THROWS_WITH_AS(cs::api::run_collective(request),
                         doctest::Contains("GPU 5 does not exist"), cs::ConfigError);
}

TEST_CASE("api::validate: scores each case against its family's tolerance") {
    // A cases file of its own: one GEMM whose roofline time is checked against itself twice,
    // once as published (error 0, pass) and once 50% off (fail).
    const fs::path dir = fs::temp_directory_path() / "cs_api_validate";
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "cases.yaml")
        << "families:\n"
        << "  - {id: g, title: GEMMs, mode: microbenchmark, tolerance: 0.1, error: relative}\n"
        << "cases:\n"
        << "  - {id: ok, family: g, source: test, kind: gemm, topology: " << kTwoGpus
        << ", gemm: {m: 4096, n: 4096, k: 4096}, published: 1, unit: ms}\n";
    const auto first = cs::api::validate({dir, "", {}, {}});
    REQUIRE(first.cases.size() == 1);
    const double t = first.cases[0].predicted;
    CHECK(t > 0);
    std::ofstream(dir / "cases.yaml")
        << "families:\n"
        << "  - {id: g, title: GEMMs, mode: microbenchmark, tolerance: 0.1, error: relative}\n"
        << "cases:\n"
        << "  - {id: same, family: g, source: test, kind: gemm, topology: " << kTwoGpus
        << ", gemm: {m: 4096, n: 4096, k: 4096}, published: " << t << ", unit: ms}\n"
        << "  - {id: off, family: g, source: test, kind: gemm, topology: " << kTwoGpus
        << ", gemm: {m: 4096, n: 4096, k: 4096}, published: " << 2 * t << ", unit: ms}\n";
    int seen = 0;
    const auto report = cs::api::validate(
        {dir,
         "",
         [&](const cs::api::ValidationCase&, const cs::api::ValidationFamily&) { ++seen; },
         {}});
    CHECK(seen == 2);
    REQUIRE(report.cases.size() == 2);
    CHECK(report.cases[0].status == cs::api::ValidationStatus::Pass);
    // predicted / published - 1 = 1/2 - 1 = -0.5, outside 10%.
    CHECK(report.cases[1].error == doctest::Approx(-0.5).epsilon(1e-6));
    CHECK(report.cases[1].status == cs::api::ValidationStatus::Fail);
    CHECK(report.failed);
    std::ostringstream text;
    cs::cli::print_validation_summary(text, report);
    // The family row: 2 cases, 1 pass, 1 fail.
    CHECK(text.str().find("2     1     1") != std::string::npos);
}

TEST_CASE("api::validate: a layer's backward row is (forward + backward) - forward of two calls") {
    // The h200-layer experiment (eager PyTorch: 15 forward and 45 backward kernels, host lead
    // host.pass + host.backward before the backward). Its kernel sums come from `time: kernels`
    // cases of the same layer, so the wall rows are checked against closed forms of them.
    const fs::path dir = fs::temp_directory_path() / "cs_api_validate_layer";
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string exp = kRoot + "/tests/validation/experiments/h200-layer.yaml";
    const auto row = [&](const std::string& id, const std::string& rest, const std::string& sets) {
        return "  - {id: " + id + ", family: l, source: test, kind: layer, experiment: \"" + exp +
               "\", " + rest + ", set: [" + sets + "], published: 1, unit: ms}\n";
    };
    // h = 8192: the forward's 4.6 ms of kernels outlast the host's 15 launches and its 0.4 ms
    // lead, which are hidden. h = 256, s = 128 with 100 us launches: every kernel is far shorter
    // than a launch, so the host sets both calls.
    // The wall rows' GPU time holds a launch gap per kernel and the kernel sums none (a
    // profiler's kernel sum has no gaps): with launch_overhead at 0 the two agree, so the closed
    // forms below are exact; the `-gap` rows then take 5 us gaps.
    const std::string big =
        "\"model.hidden_size=8192\", \"model.attention_heads=64\", \"compute.launch_overhead=0us\"";
    const std::string big_gap =
        "\"model.hidden_size=8192\", \"model.attention_heads=64\", \"compute.launch_overhead=5us\"";
    const std::string tiny =
        "\"model.hidden_size=256\", \"model.attention_heads=4\", \"training.seq_length=128\", "
        "\"compute.host.launch=100us\"";
    const std::string sus = big + ", \"compute.clocks=sustained\"";
    std::ofstream(dir / "cases.yaml")
        << "families:\n"
        << "  - {id: l, title: layers, mode: microbenchmark, tolerance: 100, error: relative}\n"
        << "cases:\n"
        << row("kf", "layer_pass: forward, time: kernels", big)
        << row("kfb", "layer_pass: forward_backward, time: kernels", big)
        << row("kfb-sus", "layer_pass: forward_backward, time: kernels", sus)
        << row("bwd", "layer_pass: backward", big)
        << row("bwd-sus", "layer_pass: backward, fwd_bwd_clocks: sustained", big)
        << row("tiny-fwd", "layer_pass: forward", tiny)
        << row("tiny-bwd", "layer_pass: backward", tiny)
        << row("tiny-kfb", "layer_pass: forward_backward, time: kernels", tiny)
        << row("kf-gap", "layer_pass: forward, time: kernels", big_gap)
        << row("bwd-gap", "layer_pass: backward", big_gap);
    const auto report = cs::api::validate({dir, "", {}, {}});
    REQUIRE(report.cases.size() == 10);
    for (const auto& c : report.cases)
        INFO(c.id << ": " << c.note);
    const double kf = report.cases[0].predicted, kfb = report.cases[1].predicted,
                 kfb_sus = report.cases[2].predicted;
    // Lead hidden: the call ends at the forward's end + the backward's kernels, so the row is
    // the backward's GPU time, kfb - kf (the forward's own end cancels).
    CHECK(report.cases[3].predicted == doctest::Approx(kfb - kf).epsilon(1e-6));
    // The (forward + backward) loop at sustained clocks, the forward loop at burst: the row is
    // kfb(sustained) - kf(burst), longer than the burst row by the sustained factor's share.
    CHECK(report.cases[4].predicted == doctest::Approx(kfb_sus - kf).epsilon(1e-6));
    CHECK(report.cases[4].predicted > report.cases[3].predicted * 1.02);
    // Host-bound: the forward's 15 kernels take the host 100 us x their weight (docs/compute-
    // model.md section 6): the module calls' 11 (2 LayerNorms, 4 addmm of a memset and a GEMM,
    // GELU) 1.2 each, the functions' 4 (attention's memset and kernel, 2 adds) 0.75 each:
    // 1.62 ms + its last kernel; forward + backward = that + 0.4 ms + 45 x 100 us (the
    // backward's weight 1) + the backward's last kernel, so the row is 4.9 ms plus the
    // difference of two last kernels (a few us at this size).
    CHECK(report.cases[5].predicted == doctest::Approx(1.62).epsilon(0.01));
    CHECK(report.cases[6].predicted == doctest::Approx(4.9).epsilon(0.01));
    CHECK(report.cases[7].predicted < 0.5);  // all 60 kernels: the host, not the GPU, sets it
    // The kernel sum does not move with the gap; the backward's wall takes one per kernel, 45 x
    // 5 us = 0.225 ms more (its lead stays hidden behind the forward's 4.6 ms).
    CHECK(report.cases[8].predicted == doctest::Approx(kf).epsilon(1e-9));
    CHECK(report.cases[9].predicted ==
          doctest::Approx(report.cases[3].predicted + 0.225).epsilon(1e-6));
    // fwd_bwd_clocks on a forward row is refused at its key.
    std::ofstream(dir / "cases.yaml")
        << "families:\n"
        << "  - {id: l, title: layers, mode: microbenchmark, tolerance: 100, error: relative}\n"
        << "cases:\n"
        << row("f", "layer_pass: forward, fwd_bwd_clocks: sustained", big);
    CHECK_THROWS_WITH_AS(cs::api::validate({dir, "", {}, {}}),
                         doctest::Contains("applies to backward rows only"), cs::ConfigError);
}
