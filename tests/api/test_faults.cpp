// `faults:` through api::run: a failed GPU ends the job at its time with what was done so far, a
// failed spine link moves the traffic to the other spine, compare and sweep take the key.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "ingest/inputs.hpp"
#include "session/compare.hpp"
#include "session/run.hpp"
#include "session/shard.hpp"
#include "session/sweep.hpp"

namespace {

const std::string kPipeline =
    std::string(CLUSTERSIM_SOURCE_DIR) + "/workloads/h200-2gpu-pipeline.yaml";

// Two nodes of 8 GPUs, one leaf each (8 NICs), two spines: every inter-node route crosses
// leaf0 -> spine0 or leaf0 -> spine1.
const std::string kTwoLeaves = R"(
topology:
  node: {gpus: 8, gpu_model: H100-SXM, intra: {kind: nvswitch, bandwidth: 450GB/s},
         nics: {count: 8, kind: infiniband, bandwidth: 400Gbps}}
  nodes: 2
  fabric: {kind: leaf_spine, latency: 1us, leaf: {down: 8, up: 2}}
model: {layers: 4, hidden_size: 4096, attention_heads: 32, vocab_size: 0}
parallelism: {tp: 8, pp: 1, dp: 2}
training: {micro_batch_size: 1, global_batch_size: 4, seq_length: 2048}
compute: {model: profile, layer_forward: 1ms, layer_backward: 2ms}
)";

// The summary lists the links that carried bytes.
double link_bytes(const cs::report::Summary& s, const std::string& name) {
    for (const auto& l : s.links)
        if (l.name == name) return l.bytes;
    return 0;
}

}  // namespace

TEST_CASE("faults: a GPU failing mid-iteration ends the job there, with what was done") {
    // h200-2gpu-pipeline on the ideal network under 1F1B: F = 4 x 1.3057 ms = 5.2228 ms and
    // B = 4 x 3.3197 ms = 13.2788 ms per stage, m = 8. Stage 0 runs F0 [0, F] and F1 [F, 2F], then
    // waits for B0's gradient; stage 1 runs F0 [F, 2F] and B0 [2F, 2F + B]. GPU 1 (stage 1) fails
    // at 2F + B/2 = 17.0850 ms: three passes are done (F0, F1 of stage 0, F0 of stage 1) of
    // 2 stages x 2 passes x 8 microbatches = 32, and 2 GPUs x 17.085 ms are lost.
    auto spec = cs::api::load_experiment(
        {kPipeline, {"network.model=ideal", "faults={gpus: [{gpus: 1, at: 17.085ms}]}"}, ""});
    cs::api::RunOptions options;
    options.schedule = "1f1b";
    const auto r = cs::api::run(spec, options);
    const auto& f = r.summary.faults;
    REQUIRE(f.present);
    CHECK(f.job_failed);
    CHECK(f.failed_at_s == doctest::Approx(0.017085).epsilon(1e-12));
    CHECK(r.summary.iteration_time_s == doctest::Approx(0.017085).epsilon(1e-12));
    CHECK(f.failed_what == "GPU 1");
    CHECK(f.failed_gpus == std::vector<int>{1});
    CHECK(f.failed_stages == std::vector<int>{1});
    CHECK(f.failed_replicas == std::vector<int>{0});
    CHECK(f.passes_done == 3);
    CHECK(f.passes_total == 32);
    CHECK(f.lost_gpu_s == doctest::Approx(2 * 0.017085).epsilon(1e-12));
    // The clean iteration, (m + p - 1)(F + B) = 9 x 18.5016 ms; nothing of it was trained.
    CHECK(f.clean_iteration_time_s == doctest::Approx(0.1665144).epsilon(1e-12));
    CHECK(r.summary.mfu == 0);
    CHECK(r.summary.tokens_per_s == 0);
    const auto json = cs::report::to_json(r.summary);
    CHECK(json["faults"]["failure"]["passes_done"] == 3);

    // A failure after the iteration's end (166.5 ms) leaves it whole, with a warning.
    auto late = cs::api::load_experiment(
        {kPipeline, {"network.model=ideal", "faults={gpus: [{nodes: 0, at: 1s}]}"}, ""});
    const auto lr = cs::api::run(late, options);
    CHECK_FALSE(lr.summary.faults.job_failed);
    CHECK(lr.summary.iteration_time_s == doctest::Approx(0.1665144).epsilon(1e-12));
    CHECK(lr.summary.faults.cost_s == 0);
    REQUIRE(lr.warnings.size() == 2);  // vpp = 2 ignored by 1f1b, and the late failure
    CHECK(lr.warnings[1] ==
          "node 0 fails at 1 s, after the iteration ended (166.5 ms): the "
          "iteration is unaffected");
}

TEST_CASE("faults: a failed job's trace ends at the failure with the passes done") {
    // The failure of the case above (GPU 1 at 2F + B/2 = 17.085 ms, under 1F1B on the ideal
    // network): the trace was an internal error ("finish() before the end of the iteration").
    // It now holds the three passes done (F0, F1 of stage 0, F0 of stage 1) and ends at 17.085 ms.
    auto spec = cs::api::load_experiment(
        {kPipeline, {"network.model=ideal", "faults={gpus: [{gpus: 1, at: 17.085ms}]}"}, ""});
    const auto path = std::filesystem::temp_directory_path() / "clustersim-failed-trace.json";
    cs::api::RunOptions options;
    options.schedule = "1f1b";
    options.trace = path;
    const auto r = cs::api::run(spec, options);
    CHECK(r.summary.faults.job_failed);
    std::ifstream in(path);
    const auto trace = nlohmann::json::parse(in);
    int forwards = 0;
    double end_us = -1;
    for (const auto& e : trace["traceEvents"]) {
        const auto name = e.value("name", std::string());
        if (e.value("ph", "") == "X" && name.rfind("F", 0) == 0 && e.contains("args") &&
            e["args"].contains("microbatch"))
            ++forwards;
        if (name == "iteration end") end_us = e["ts"].get<double>();
    }
    CHECK(forwards == 3);
    CHECK(end_us == doctest::Approx(17085).epsilon(1e-9));
    std::filesystem::remove(path);
}

TEST_CASE("faults: a failed spine link carries nothing; its traffic takes the other spine") {
    // The DP all-reduce between the two nodes crosses leaf0 -> spine0 or leaf0 -> spine1 by
    // ECMP. With the leaf0 - spine0 cable failed, every byte goes by spine1: leaf0->spine0 and
    // spine0->leaf0 carry nothing and the spine1 links carry all that both spines carried.
    const auto clean =
        cs::api::run(cs::api::load_experiment(cs::workload::ExperimentText{kTwoLeaves}, {}));
    const double before =
        link_bytes(clean.summary, "leaf0->spine0") + link_bytes(clean.summary, "leaf0->spine1");
    REQUIRE(before > 0);
    const auto failed = cs::api::run(cs::api::load_experiment(
        cs::workload::ExperimentText{kTwoLeaves +
                                     "faults: {links: [{link: spine0->leaf0, failed: true}]}\n"},
        {}));
    CHECK(link_bytes(failed.summary, "leaf0->spine0") == 0);
    CHECK(link_bytes(failed.summary, "spine0->leaf0") == 0);
    CHECK(link_bytes(failed.summary, "leaf0->spine1") == doctest::Approx(before).epsilon(1e-12));
    const auto& f = failed.summary.faults;
    REQUIRE(f.links.size() == 1);
    CHECK(f.links[0].link == "spine0->leaf0");
    CHECK(f.links[0].fraction == 0);
    CHECK(f.clean_iteration_time_s == clean.summary.iteration_time_s);
    CHECK(f.cost_s == failed.summary.iteration_time_s - clean.summary.iteration_time_s);
    // Half the traffic on one spine instead of two can only slow the all-reduce.
    CHECK(f.cost_s >= 0);

    // The same cable failing during the run (at 1 ms, before the all-reduce starts at the end of
    // the backward passes, 4 x (1 + 2) ms x 2 microbatches = 24 ms) gives the same run.
    const auto timed = cs::api::run(cs::api::load_experiment(
        cs::workload::ExperimentText{
            kTwoLeaves + "faults: {links: [{link: leaf0->spine0, failed: true, at: 1ms}]}\n"},
        {}));
    CHECK(timed.summary.iteration_time_s == failed.summary.iteration_time_s);
    CHECK(link_bytes(timed.summary, "leaf0->spine0") == 0);

    // Both of leaf0's cables failed: no path from node 0 to node 1, a ConfigError that names
    // the links and the GPUs cut off.
    try {
        cs::api::run(cs::api::load_experiment(
            cs::workload::ExperimentText{kTwoLeaves +
                                         "faults: {links: [{link: leaf0->spine0, failed: true}, "
                                         "{link: leaf0->spine1, failed: true, at: 1ms}]}\n"},
            {}));
        FAIL("expected a ConfigError");
    } catch (const cs::ConfigError& e) {
        const std::string msg = e.what();
        CHECK(msg.find("leaf0->spine0, leaf0->spine1 (from 1 ms) no path remains from GPU") !=
              std::string::npos);
        CHECK(msg.find(": GPUs 8-15 (the run stops") != std::string::npos);
    }
}

TEST_CASE("faults: compare runs each schedule with the faults, sweep varies a fraction") {
    // A clean and a degraded run of the same experiment through compare: with faults each
    // schedule's summary carries its own clean time, the same as the run without faults.
    auto spec = cs::api::load_experiment(
        {kPipeline, {"faults={links: [{link: gpu0->gpu1, fraction: 0.25}]}"}, ""});
    cs::api::CompareOptions options;
    options.schedules = {"gpipe", "1f1b"};
    const auto compared = cs::api::compare(spec, options);
    auto clean_spec = cs::api::load_experiment({kPipeline, {}, ""});
    const auto clean = cs::api::compare(clean_spec, options);
    REQUIRE(compared.summaries.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
        const auto& f = compared.summaries[i].faults;
        CHECK(f.present);
        CHECK(f.clean_iteration_time_s == clean.summaries[i].iteration_time_s);
        // A quarter of the link's bandwidth: every activation and gradient takes longer.
        CHECK(compared.summaries[i].iteration_time_s > clean.summaries[i].iteration_time_s);
    }
}

TEST_CASE("faults: sweep over a link's fraction") {
    // The pipeline's activations and gradients cross gpu0 -> gpu1 and back: the iteration grows
    // as the link's fraction falls, and a fraction of 1 is the clean run (a fault that changes
    // nothing costs nothing).
    cs::api::SweepOptions options;
    options.experiment = kPipeline;
    options.sets = {"schedule=1f1b", "faults={links: [{link: gpu0->gpu1, fraction: 1}]}"};
    options.axes = cs::api::parse_sweep_axes({"faults.links.0.fraction=1,0.5,0.1"});
    const cs::api::SweepRanks ranks;
    const auto rows = cs::api::sweep(options, ranks);
    REQUIRE(rows);
    REQUIRE(rows->size() == 3);
    for (const auto& row : *rows)
        REQUIRE(row.result);
    const auto clean = cs::api::run(cs::api::load_experiment({kPipeline, {"schedule=1f1b"}, ""}));
    CHECK((*rows)[0].result->iteration_time_s() == clean.summary.iteration_time_s);
    CHECK((*rows)[1].result->iteration_time_s() > (*rows)[0].result->iteration_time_s());
    CHECK((*rows)[2].result->iteration_time_s() > (*rows)[1].result->iteration_time_s());
}

TEST_CASE(
    "faults: a degraded link from the start or from 1 ps is the same run; after the end, none") {
    // The pipeline's first transfer (stage 0's first activation) starts after its first forward
    // pass, milliseconds in: a capacity change scheduled at 1 ps (Network::schedule_link_capacity)
    // and the cluster built with that capacity (Cluster::with_faults, at: 0) give the same
    // transfers, so the same iteration to the picosecond. A fault after the iteration's end
    // changes nothing.
    const auto with = [](const std::string& faults) {
        return cs::api::run(
                   cs::api::load_experiment({kPipeline, {"schedule=1f1b", "faults=" + faults}, ""}))
            .summary.iteration_time_s;
    };
    const double from_start = with("{links: [{link: gpu1->gpu0, fraction: 0.5}]}");
    CHECK(with("{links: [{link: gpu1->gpu0, fraction: 0.5, at: 1ps}]}") == from_start);
    const double clean = cs::api::run(cs::api::load_experiment({kPipeline, {"schedule=1f1b"}, ""}))
                             .summary.iteration_time_s;
    CHECK(from_start > clean);
    CHECK(with("{links: [{link: gpu1->gpu0, fraction: 0.5, at: 10s}]}") == clean);
}

TEST_CASE("GPU lists: ranges merged before they are expanded, each GPU once (issue 40)") {
    // 20,000 copies of "0-1" and a lone 1: the two GPUs, once each. Before, every range was
    // expanded before de-duplication (40,001 entries here; a 900 KB list reached 4.2 GB).
    std::string list = "1";
    for (int i = 0; i < 20000; ++i)
        list += ",0-1";
    const auto spec = cs::api::load_experiment(
        {kPipeline, {"variability={gpus: [{gpus: \"" + list + "\", factor: 1.2}]}"}, ""});
    REQUIRE(spec.variability.gpus.size() == 1);
    CHECK(spec.variability.gpus[0].gpus == std::vector<int>{0, 1});
    // Merged ranges still report the first number outside the cluster (two GPUs: 0-1).
    CHECK_THROWS_WITH_AS(
        cs::api::load_experiment(
            {kPipeline, {"variability={gpus: [{gpus: \"0-1,1-2\", factor: 1.2}]}"}, ""}),
        doctest::Contains("GPU 2 is not in the cluster, whose GPUs are numbered 0-1"),
        cs::ConfigError);
}

TEST_CASE("faults: each distinct failure time counts a copy of the cluster in the estimate") {
    // kTwoLeaves with leaf0 -> spine0 failing at 1, 2 and 3 ms, and again at 2 ms (the same
    // time: one copy). The estimate grows by 3 x (512 B per device + 320 B per directed link)
    // over the same run without faults; a degraded link (fraction > 0) copies nothing.
    const auto clean = cs::api::load_experiment(cs::workload::ExperimentText{kTwoLeaves}, {});
    const auto timed = cs::api::load_experiment(
        cs::workload::ExperimentText{
            kTwoLeaves +
            "faults: {links: [{link: leaf0->spine0, failed: true, at: 1ms}, "
            "{link: leaf0->spine0, failed: true, at: 2ms}, {link: leaf0->spine1, failed: true, "
            "at: 2ms}, {link: leaf0->spine0, failed: true, at: 3ms}, {link: leaf0->spine1, "
            "fraction: 0.5, at: 4ms}]}\n"},
        {});
    const double copy = 512.0 * static_cast<double>(clean.cluster->devices().size()) +
                        320.0 * static_cast<double>(clean.cluster->links().size());
    CHECK(cs::api::estimate_run_bytes(timed, 1) - cs::api::estimate_run_bytes(clean, 1) ==
          doctest::Approx(3 * copy));
}

TEST_CASE("faults: a run stopped by a GPU failure under flow lists the links it used") {
    // Under `flow` a network with fast paths counts the summary's link figures itself and tells
    // them at the end of the iteration (link tallies, docs/network.md); a run that a GPU failure
    // stops ends early and must still tell them. The DP all-reduce between the two nodes starts
    // after the backward passes, 4 layers x (1 + 2) ms x 2 microbatches = 24 ms; GPU 1 fails at
    // 24.5 ms, during it. The links listed, with their bytes, busy and shared times and flow
    // counts, are those of the same run told flow by flow (without fast paths), and the
    // all-reduce's links are among them.
    const auto spec = cs::api::load_experiment(
        cs::workload::ExperimentText{kTwoLeaves + "network: {model: flow}\n"
                                                  "faults: {gpus: [{gpus: 1, at: 24.5ms}]}\n"},
        {});
    const auto fast = cs::api::run(spec);
    cs::api::RunOptions slow_options;
    slow_options.fast_paths = false;
    const auto slow = cs::api::run(spec, slow_options);
    REQUIRE(fast.summary.faults.job_failed);
    REQUIRE(slow.summary.faults.job_failed);
    CHECK(link_bytes(fast.summary, "leaf0->spine0") + link_bytes(fast.summary, "leaf0->spine1") >
          0);
    REQUIRE(fast.summary.links.size() == slow.summary.links.size());
    for (std::size_t i = 0; i < fast.summary.links.size(); ++i) {
        const auto& a = fast.summary.links[i];
        const auto& b = slow.summary.links[i];
        CAPTURE(a.name);
        CHECK(a.name == b.name);
        CHECK(a.bytes == b.bytes);
        CHECK(a.busy_s == b.busy_s);
        CHECK(a.shared_s == b.shared_s);
        CHECK(a.max_concurrent_flows == b.max_concurrent_flows);
    }
}
