// run, topology, collective and validate as a user runs them: output, files, exit codes.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support.hpp"

namespace fs = std::filesystem;
using cs::test::kPipeline;
using cs::test::kRoot;
using cs::test::kTwoGpus;
using cs::test::run_binary;

TEST_CASE("run: summary printed, --json written, warnings on stderr, bad input exit 2") {
    const fs::path json = cs::test::scratch("run") / "s.json";
    const auto r = run_binary({"run", kPipeline, "--schedule", "1f1b", "--set",
                               "network.model=ideal", "--json", json.string()});
    REQUIRE(r.status == 0);
    CHECK(r.out.find("iteration time") != std::string::npos);
    CHECK(r.err.find("vpp = 2 is ignored") != std::string::npos);
    const auto s = nlohmann::json::parse(cs::test::slurp(json));
    // (m + p - 1)(F + B) = 9 x 18.5016 ms on the ideal network (tests/api/test_run.cpp).
    CHECK(s["iteration_time_s"].get<double>() == doctest::Approx(0.1665144).epsilon(1e-12));

    const fs::path none = cs::test::scratch("run_bad") / "s.json";
    const auto bad =
        run_binary({"run", kPipeline, "--set", "parallelism.tpp=2", "--json", none.string()});
    CHECK(bad.status == 2);
    CHECK(bad.err.find("tpp") != std::string::npos);
    CHECK_FALSE(fs::exists(none));
}

TEST_CASE("run with no experiment simulates the bundled default from any folder") {
    const auto r = run_binary({"run", "--set", "topology.nodes=8", "--set", "parallelism.dp=1",
                               "--set", "training.global_batch_size=16"});
    CHECK(r.status == 0);
    CHECK(r.out.find("workloads/default.yaml") != std::string::npos);
}

TEST_CASE("topology: the GPU count on its own line; --json and --dot") {
    const fs::path dir = cs::test::scratch("topology");
    const auto r = run_binary({"topology", kTwoGpus, "--json", (dir / "t.json").string(), "--dot",
                               (dir / "t.dot").string()});
    REQUIRE(r.status == 0);
    CHECK(r.out.find("\ngpus: 2\n") != std::string::npos);
    CHECK(nlohmann::json::parse(cs::test::slurp(dir / "t.json"))["gpus"] == 2);
    CHECK(cs::test::slurp(dir / "t.dot").find("graph") != std::string::npos);
    CHECK(run_binary({"topology", kRoot + "/topologies/no-such.yaml"}).status == 2);
}

TEST_CASE("topology: each routing says how it picks paths; adaptive counts physical switches") {
    // The superpod at 256 nodes: 2 pods of 32 leaves, 32 spines each, 32 x 32 cores. Under
    // adaptive the fabric is built with one switch per pod and tier, but the report counts the
    // switches it stands for: 64 + 64 + 1024 = 1152, as under ECMP.
    const std::string superpod = kRoot + "/topologies/dgx-h100-superpod.yaml";
    for (const auto& [routing, rule] : std::vector<std::pair<std::string, std::string>>{
             {"ecmp", "a hash of each flow"},
             {"d_mod_k", "the destination GPU picks"},
             {"adaptive", "every flow spread over all equal-cost paths"}}) {
        const auto r =
            run_binary({"topology", superpod, "--set", "nodes=256", "--set", "routing=" + routing});
        REQUIRE(r.status == 0);
        CHECK(r.out.find("routing: " + routing + " (" + rule) != std::string::npos);
        CHECK(r.out.find("1152 switch (switches: 64 tier 1, 64 tier 2, 1024 tier 3)") !=
              std::string::npos);
    }
}

TEST_CASE("collective: nccl-tests rows and JSON; a rank outside the cluster is exit 2") {
    const fs::path json = cs::test::scratch("collective") / "c.json";
    const auto r = run_binary({"collective", "--topology", kTwoGpus, "--op", "all_reduce",
                               "--ranks", "0-1", "--sizes", "1MiB:4MiB", "--json", json.string()});
    REQUIRE(r.status == 0);
    // 1, 2 and 4 MiB: three rows.
    const auto rows = nlohmann::json::parse(cs::test::slurp(json));
    REQUIRE(rows.size() == 3);
    CHECK(rows[2]["bytes"] == 4 * 1048576);
    CHECK(r.out.find("4194304") != std::string::npos);
    const auto bad = run_binary({"collective", "--topology", kTwoGpus, "--ranks", "0-2"});
    CHECK(bad.status == 2);
    CHECK(bad.err.find("GPU 2 does not exist") != std::string::npos);
}

TEST_CASE("validate: a failing case exits 3 under --check, 0 without") {
    const fs::path dir = cs::test::scratch("validate");
    std::ofstream(dir / "cases.yaml")
        << "families:\n"
        << "  - {id: g, title: GEMMs, mode: microbenchmark, tolerance: 0.1, error: relative}\n"
        << "cases:\n"
        << "  - {id: off, family: g, source: test, kind: gemm, topology: " << kTwoGpus
        << ", gemm: {m: 4096, n: 4096, k: 4096}, published: 1000, unit: ms}\n";
    const auto plain = run_binary({"validate", dir.string()});
    CHECK(plain.status == 0);
    CHECK(plain.out.find("FAIL") != std::string::npos);
    const auto checked = run_binary({"validate", dir.string(), "--check"});
    CHECK(checked.status == 3);
    CHECK(checked.err.find("validation failed") != std::string::npos);
}

namespace {
// `clustersim validate` on a cases file holding `cases` (lines under `cases:`, the first on line 4)
// and one family `n`; every case names the two-GPU topology last, so columns before it are fixed.
cs::test::CliResult validate_cases(const std::string& name, const std::string& cases) {
    const fs::path dir = cs::test::scratch(name);
    std::ofstream(dir / "cases.yaml")
        << "families:\n"
        << "  - {id: n, title: NCCL, mode: network, tolerance: 0.1, error: relative}\n"
        << "cases:\n"
        << cases;
    return run_binary({"validate", dir.string()});
}

std::string cases_file(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("cs_cli_tests_" + name) / "cases.yaml")
        .string();
}
}  // namespace

TEST_CASE("validate: a case's ranks outside its topology are a located error, exit 2") {
    // "0,7": the value starts at column 70 of line 4; the topology has GPUs 0 and 1.
    const auto send =
        validate_cases("validate_send_range",
                       "  - {id: a, family: n, source: t, kind: collective, op: send, "
                       "ranks: \"0,7\", size: 16MiB, published: 1, topology: " +
                           kTwoGpus + "}\n");
    CHECK(send.status == 2);
    CHECK(send.err == "error: " + cases_file("validate_send_range") +
                          ":4:70: 'cases.0.ranks': GPU 7 does not exist; " + kTwoGpus +
                          " has GPUs 0-1\n");
    // "0-2": column 76 (op: all_reduce is six characters longer than op: send).
    const auto all_reduce =
        validate_cases("validate_coll_range",
                       "  - {id: a, family: n, source: t, kind: collective, op: all_reduce, "
                       "ranks: \"0-2\", size: 16MiB, published: 1, topology: " +
                           kTwoGpus + "}\n");
    CHECK(all_reduce.status == 2);
    CHECK(all_reduce.err == "error: " + cases_file("validate_coll_range") +
                                ":4:76: 'cases.0.ranks': GPU 2 does not exist; " + kTwoGpus +
                                " has GPUs 0-1\n");
}

TEST_CASE("validate: a send from a GPU to itself is a located error, exit 2") {
    const auto r = validate_cases("validate_self",
                                  "  - {id: a, family: n, source: t, kind: collective, op: send, "
                                  "ranks: \"1,1\", size: 16MiB, published: 1, topology: " +
                                      kTwoGpus + "}\n");
    CHECK(r.status == 2);
    // Rank lists name each GPU once (api::parse_rank_list), which also rules out a self-send.
    CHECK(r.err == "error: " + cases_file("validate_self") +
                       ":4:70: 'cases.0.ranks': GPU 1 is listed twice; list each GPU once\n");
}

TEST_CASE("validate: zero-byte sends and collectives are refused, exit 2") {
    // `size: 0B` starts at column 83 for a send, 89 for an all_reduce.
    const auto send =
        validate_cases("validate_send0",
                       "  - {id: a, family: n, source: t, kind: collective, op: send, "
                       "ranks: \"0,1\", size: 0B, published: 1, topology: " +
                           kTwoGpus + "}\n");
    CHECK(send.status == 2);
    CHECK(send.err == "error: " + cases_file("validate_send0") +
                          ":4:83: 'cases.0.size': must be more than 0 bytes; expected a size "
                          "such as \"16MiB\"\n");
    const auto all_reduce =
        validate_cases("validate_coll0",
                       "  - {id: a, family: n, source: t, kind: collective, op: all_reduce, "
                       "ranks: \"0,1\", size: 0B, published: 1, topology: " +
                           kTwoGpus + "}\n");
    CHECK(all_reduce.status == 2);
    CHECK(all_reduce.err == "error: " + cases_file("validate_coll0") +
                                ":4:89: 'cases.0.size': must be more than 0 bytes; expected a "
                                "size such as \"16MiB\"\n");
}

TEST_CASE("validate: a duplicate case id names both places, exit 2") {
    // Both ids start at column 10, on lines 4 and 5.
    const auto r =
        validate_cases("validate_dup_id",
                       "  - {id: a, family: n, source: t, kind: not_reproduced, reason: r}\n"
                       "  - {id: a, family: n, source: t, kind: not_reproduced, reason: r}\n");
    CHECK(r.status == 2);
    CHECK(r.err == "error: " + cases_file("validate_dup_id") +
                       ":5:10: 'cases.1.id': duplicate case id \"a\", first used at 4:10; expected "
                       "each case id once\n");
}

TEST_CASE(
    "calibrate --nccl-tests: fit report, file and JSON; a malformed file is exit 2 at "
    "file:line:col with nothing written") {
    const fs::path dir = cs::test::scratch("calibrate_nccl");
    // nccl-tests output of the model itself (all_gather on the two H200 with the measured
    // defaults: 0.590 of 450 GB/s and 18 us fixed) fits back to those defaults.
    const auto sim = run_binary({"collective", "--topology", kTwoGpus, "--op", "all_gather", "-b",
                                 "1M", "-e", "256M", "-f", "4", "--format", "nccl-tests"});
    REQUIRE(sim.status == 0);
    std::ofstream(dir / "ag.txt") << sim.out;
    const fs::path out = dir / "cal.yaml", json = dir / "fit.json";
    const auto r = run_binary({"calibrate", "--nccl-tests", (dir / "ag.txt").string(), "--topology",
                               kTwoGpus, "--out", out.string(), "--json", json.string()});
    REQUIRE(r.status == 0);
    CHECK(r.out.find("all_gather      nvlink") != std::string::npos);
    CHECK(cs::test::slurp(out).find("all_gather:\n    nvlink: {efficiency: 0.59, latency: ") !=
          std::string::npos);
    const auto j = nlohmann::json::parse(cs::test::slurp(json));
    CHECK(j["network"]["ops"][0]["samples"] == 5);  // 1, 4, 16, 64, 256 MiB
    CHECK(j["network"]["ops"][0]["efficiency"].get<double>() ==
          doctest::Approx(0.59).epsilon(2e-3));
    CHECK(j["network"]["ops"][0]["latency_us"].get<double>() == doctest::Approx(18).epsilon(0.01));

    // The 5th row cut short: located, exit 2, neither output written.
    std::string text = sim.out;
    std::size_t at = 0;
    for (int rows = 0; rows < 3;)
        if (text[at++] == '\n' && text[at] != '#') ++rows;
    const std::size_t end = text.find('\n', at);
    text = text.substr(0, end - 20) + text.substr(end);
    std::ofstream(dir / "bad.txt") << text;
    fs::remove(out);
    fs::remove(json);
    const auto bad =
        run_binary({"calibrate", "--nccl-tests", (dir / "bad.txt").string(), "--topology", kTwoGpus,
                    "--out", out.string(), "--json", json.string()});
    CHECK(bad.status == 2);
    CHECK(bad.err.find("bad.txt:") != std::string::npos);
    CHECK(bad.err.find("a result row with") != std::string::npos);
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(fs::exists(json));
    // nccl-tests without a topology.
    const auto no_topo =
        run_binary({"calibrate", "--nccl-tests", (dir / "ag.txt").string(), "--out", out.string()});
    CHECK(no_topo.status == 2);
    CHECK(no_topo.err.find("give --topology") != std::string::npos);
}

TEST_CASE("diff: the bundled H200 profile against a simulated trace of its configuration") {
    const fs::path dir = cs::test::scratch("diff");
    const fs::path trace = dir / "sim.json", json = dir / "diff.json";
    const auto run = run_binary({"run", kRoot + "/tests/validation/experiments/h200-gpt-h3072.yaml",
                                 "--set", "compute.calibration=../calibrations/h200-gpt-h3072.yaml",
                                 "--trace", trace.string()});
    REQUIRE(run.status == 0);
    const auto r = run_binary({"diff", trace.string(),
                               kRoot + "/tests/validation/data/gpt-h3072-profile.json.gz",
                               "--iterations", "2", "--json", json.string()});
    REQUIRE(r.status == 0);
    CHECK(r.out.find("largest departures") != std::string::npos);
    const auto j = nlohmann::json::parse(cs::test::slurp(json));
    CHECK(j["microbatches"] == 2);
    CHECK(j["layers"] == 12);
    // The calibrated model reproduces the profiled iteration's kernel time within 3% (171.6 ms
    // simulated, 170.6 ms of kernels and launch gaps per iteration measured).
    CHECK(j["simulated_busy_ms"].get<double>() / j["measured_busy_ms"].get<double>() ==
          doctest::Approx(1).epsilon(0.03));
    bool gemm = false;
    for (const auto& k : j["kinds"])
        if (k["name"] == "gemm") {
            gemm = true;
            CHECK(std::abs(k["relative"].get<double>()) < 0.05);
        }
    CHECK(gemm);
    CHECK(j["passes"].size() == 3);  // forward, backward, optimizer
    // Per layer pass: embedding, 12 layers and head forward, head, 12 layers and embedding
    // backward, gradient accumulation = 29 rows. The profile's 2 iterations x 2 microbatches give
    // 4 forward and 4 backward passes of 25 LayerNorm operators each (2 per layer + the final
    // one), which cut into the 12 layers.
    const auto& lp = j["layer_passes"];
    REQUIRE(lp.size() == 29);
    CHECK(lp[0]["name"] == "embedding forward");
    CHECK(lp[4]["name"] == "layer 3 forward");
    CHECK(lp[4]["layer"] == 3);
    CHECK(lp[14]["name"] == "head backward");
    CHECK(lp[15]["name"] == "layer 11 backward");
    CHECK(lp[28]["name"] == "grad accumulate");
    for (const auto& row : lp) {
        CAPTURE(row["name"].get<std::string>());
        CHECK(row["measured_passes"] == 4);
        if (row["layer"].is_null()) continue;
        CHECK(row["simulated_passes"] == 2);
        // Every layer's forward and backward within 6% (the catalogue's calibrated layer is within
        // 5% of each measured layer: 1.538 ms against 1.47-1.50 forward, 3.577 against 3.42-3.54
        // backward).
        CHECK(std::abs(row["relative"].get<double>()) < 0.06);
        // A layer's forward is the same 15 kernels in every layer and pass of the profile (norm,
        // GEMMs, attention, activation, bias, dropout and residual elementwise): 60 over the 4.
        if (row["pass"] == "forward") CHECK(row["measured_kernels"] == 60);
    }
    // The layer rows of one pass are the same simulated time: the model's layers are identical.
    CHECK(lp[1]["simulated_ms"] == lp[12]["simulated_ms"]);
    CHECK(j["largest_layer_passes"].size() == 5);
    CHECK(r.out.find("layer 3 forward") != std::string::npos);
    // Stage 0 of the same model on 2 GPUs (pp = 2) holds 6 layers and no final norm: 2 x 6 = 12
    // norms per pass against the profile's 25, so no layer rows, and a warning saying why.
    const fs::path trace2 = dir / "sim-pp2.json";
    REQUIRE(run_binary({"run", kRoot + "/tests/validation/experiments/h200-gpt-h3072.yaml", "--set",
                        "parallelism.pp=2", "--set",
                        "topology=../../../topologies/h200-2gpu-nvlink.yaml", "--trace",
                        trace2.string()})
                .status == 0);
    const auto r2 = run_binary({"diff", trace2.string(),
                                kRoot + "/tests/validation/data/gpt-h3072-profile.json.gz",
                                "--iterations", "2"});
    CHECK(r2.status == 0);
    CHECK(r2.out.find("the simulated one 2 per layer x 6 layers + 0 = 12: not the same model (or "
                      "not the same pipeline stage)") != std::string::npos);
    CHECK(r2.out.find("layer 3 forward") == std::string::npos);
    // A file that is not a trace: exit 2, nothing written.
    fs::remove(json);
    const auto bad =
        run_binary({"diff", (dir / "nope.json").string(), trace.string(), "--json", json.string()});
    CHECK(bad.status == 2);
    CHECK_FALSE(fs::exists(json));
}
