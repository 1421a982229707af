// clustersim sweep end to end, in process: enumeration, validity, ranking, repeats and errors.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "support.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kExperiment =
    std::string(CLUSTERSIM_SOURCE_DIR) + "/workloads/h200-2gpu-pipeline.yaml";

std::string run_sweep(std::vector<std::string> args) {
    return cs::test::run_cli("sweep", std::move(args));
}

}  // namespace

TEST_CASE("sweep: every combination, invalid ones with their reason, repeats listed once") {
    const fs::path json = cs::test::scratch("sweep") / "sweep.json";
    // 3 schedules x 2 vpp = 6 combinations. interleaved with vpp 1 is not valid (it needs 2 chunks
    // per device); gpipe and 1f1b ignore vpp, so their vpp = 2 runs repeat their vpp = 1 runs.
    const std::string out = run_sweep({kExperiment, "--vary", "schedule=gpipe,1f1b,interleaved",
                                       "--vary", "parallelism.vpp=1,2", "--json", json.string()});
    CHECK(out.find("6 combinations: 5 simulated, 1 not valid; 2 gave the same result") !=
          std::string::npos);
    CHECK(out.find("1 x, e.g. schedule=interleaved vpp=1:") != std::string::npos);
    CHECK(out.find("vpp >= 2") != std::string::npos);

    const auto list = nlohmann::json::parse(cs::test::slurp(json));
    REQUIRE(list.size() == 6);  // 5 simulated (repeats included) then the invalid one
    double previous = 1e300;
    for (std::size_t i = 0; i < 5; ++i) {
        REQUIRE(list[i].contains("summary"));
        CHECK(list[i]["fits_hbm"] == true);  // a 2-layer-per-stage model on 141 GB GPUs
        const double tokens = list[i]["summary"]["tokens_per_s"].get<double>();
        CHECK(tokens <= previous);  // ranked by throughput
        previous = tokens;
    }
    CHECK(list[5]["settings"]["schedule"] == "interleaved");
    CHECK(list[5]["settings"]["parallelism.vpp"] == "1");
    CHECK(list[5]["error"].get<std::string>().find("vpp >= 2") != std::string::npos);
    // Closed-form lower bounds with F = 5.2228 ms, B = 13.2788 ms per stage, p = 2, m = 8:
    // interleaved (v = 2) 157.26 ms against 166.51 ms for gpipe and 1f1b; the measured profile's
    // communication is the same for all, so interleaved ranks first.
    CHECK(list[0]["settings"]["schedule"] == "interleaved");
    // A gpipe row and its vpp repeat have the same summary.
    int gpipe = 0;
    for (std::size_t i = 0; i < 5; ++i)
        if (list[i]["settings"]["schedule"] == "gpipe") ++gpipe;
    CHECK(gpipe == 2);
    // Without --json the rows are tallied and each summary digested without its text (links as
    // bytes): the same repeats are found, and the table is the one printed with --json.
    const std::string table = run_sweep({kExperiment, "--vary", "schedule=gpipe,1f1b,interleaved",
                                         "--vary", "parallelism.vpp=1,2"});
    CHECK(table == out);
}

TEST_CASE("sweep: dp follows a varied layout unless the sweep fixes it") {
    const fs::path json = cs::test::scratch("sweep_dp") / "sweep.json";
    // 2 GPUs: pp 1 leaves dp 2, pp 2 leaves dp 1 (the experiment file says dp: 1).
    run_sweep({kExperiment, "--vary", "parallelism.pp=1,2", "--set", "schedule=1f1b", "--json",
               json.string()});
    const auto list = nlohmann::json::parse(cs::test::slurp(json));
    REQUIRE(list.size() == 2);
    for (const auto& row : list) {
        const int pp = row["summary"]["parallelism"]["pp"].get<int>();
        CHECK(row["summary"]["parallelism"]["dp"].get<int>() == 2 / pp);
    }
    // With dp fixed at 1, pp 1 uses one of the two GPUs: not a valid layout.
    const std::string out =
        run_sweep({kExperiment, "--vary", "parallelism.pp=1,2", "--set", "parallelism.dp=1"});
    CHECK(out.find("2 combinations: 1 simulated, 1 not valid") != std::string::npos);
}

TEST_CASE("sweep: malformed --vary and all-invalid sweeps are errors that write nothing") {
    const fs::path json = cs::test::scratch("sweep_bad") / "sweep.json";
    const auto message = [&](std::vector<std::string> args) -> std::string {
        args.insert(args.end(), {"--json", json.string()});
        try {
            run_sweep(args);
        } catch (const cs::ConfigError& e) {
            return e.what();
        }
        return "";
    };
    CHECK(message({kExperiment, "--vary", "parallelism.tp"}).find("expected KEY=VALUE1") !=
          std::string::npos);
    CHECK(message({kExperiment, "--vary", "parallelism.tp=1,,2"}).find("an empty value") !=
          std::string::npos);
    CHECK(message({kExperiment, "--vary", "parallelism.tp=1,1"}).find("listed twice") !=
          std::string::npos);
    CHECK(message({kExperiment, "--vary", "parallelism.tp=1", "--vary", "parallelism.tp=2"})
              .find("varied twice") != std::string::npos);
    CHECK(message({kExperiment, "--vary", "parallelism.tp=3,5"})
              .find("none of the 2 combinations is a valid experiment") != std::string::npos);
    // A varied value's error names the --vary option with that combination's value, not the
    // --set override it is applied as.
    const auto typo = message({kExperiment, "--vary", "parallelism.tp=x,y"});
    CHECK_MESSAGE(typo.find("--vary parallelism.tp=x: 'parallelism.tp': expected a whole number") !=
                      std::string::npos,
                  typo);
    CHECK(typo.find("--set") == std::string::npos);
    const auto misspelt = message({kExperiment, "--vary", "Schedule=gpipe,1f1b"});
    CHECK_MESSAGE(
        misspelt.find("--vary Schedule=gpipe: unknown key 'Schedule'") != std::string::npos,
        misspelt);
    CHECK_FALSE(fs::exists(json));
}
