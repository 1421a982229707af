// The command line's messages (issue 39, "Units and messages"): one time convention on the
// console, calibrate's warnings in the input's terms, one HBM warning per run, CLI11's errors as
// JSON under --log-json, diff's warning when the two sides are different configurations.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/units.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using cs::test::kPipeline;
using cs::test::kRoot;
using cs::test::kTwoGpus;
using cs::test::run_binary;

namespace {

// The lines of `text` that contain `what`.
std::vector<std::string> lines_with(const std::string& text, const std::string& what) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.find(what) != std::string::npos) out.push_back(line);
    return out;
}
}  // namespace

TEST_CASE("chakra run prints the iteration time as run prints it (format_time), not ms and ps") {
    const fs::path dir = cs::test::scratch("msg_chakra");
    const fs::path ets = dir / "ets", json = dir / "s.json", run_json = dir / "run.json";
    REQUIRE(run_binary({"chakra", "export", kPipeline, "--out", ets.string()}).status == 0);
    const auto r = run_binary(
        {"chakra", "run", ets.string(), "--experiment", kPipeline, "--json", json.string()});
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(cs::test::slurp(json));
    const auto t = cs::Time::ps(j["iteration_time_ps"].get<std::int64_t>());
    CHECK(r.out.find("\niteration time        " + cs::format_time(t) + "\n") != std::string::npos);
    CHECK(r.out.find(" ps") == std::string::npos);
    // `run`'s line, the convention: the same function of its summary's time.
    const auto run = run_binary({"run", kPipeline, "--json", run_json.string()});
    REQUIRE(run.status == 0);
    const double s = nlohmann::json::parse(cs::test::slurp(run_json))["iteration_time_s"];
    CHECK(run.out.find("\niteration time        " +
                       cs::format_time(cs::Time::from_seconds_ceil(s)) + "\n") !=
          std::string::npos);
}

TEST_CASE(
    "calibrate: a time equal to the model's floor does not warn; a faster one is named in the "
    "file's bytes") {
    const fs::path dir = cs::test::scratch("msg_calibrate");
    // The floor calibrate holds each row against: the links at full rate, no fixed cost, the
    // protocols' latencies at the smallest factor it tries (1/8).
    std::ofstream(dir / "floor.yaml")
        << "clustersim_calibration: 2\nnetwork:\n  all_gather:\n"
           "    nvlink: {efficiency: 1, latency: 0ns, protocol_latency: 0.125}\n";
    const std::vector<std::string> sizes{"--op", "all_gather", "-b", "1K",       "-e",
                                         "256M", "-f",         "4",  "--format", "nccl-tests"};
    const auto collective = [&](std::vector<std::string> args) {
        args.insert(args.end(), sizes.begin(), sizes.end());
        return run_binary(args);
    };
    // nccl-tests output of that floor itself: every row's time is the floor, as nccl-tests
    // rounds it (two decimals below 100 us, one above), so some print just below it.
    const auto equal = collective(
        {"collective", "--topology", kTwoGpus, "--calibration", (dir / "floor.yaml").string()});
    REQUIRE(equal.status == 0);
    std::ofstream(dir / "equal.txt") << equal.out;
    const auto r = run_binary({"calibrate", "--nccl-tests", (dir / "equal.txt").string(),
                               "--topology", kTwoGpus, "--out", (dir / "a.yaml").string()});
    REQUIRE(r.status == 0);
    // calibrate prints its warnings with its report, on stdout.
    CHECK(r.out.find("all_gather      nvlink") != std::string::npos);
    CHECK(r.out.find("faster than the model can be") == std::string::npos);
    CHECK(r.err.find("faster than the model can be") == std::string::npos);

    // The same on links twice as fast: the rows where bandwidth counts are faster than the floor
    // on the real links, and the warning names the largest as the file gives it, in bytes.
    const auto fast =
        collective({"collective", "--topology", kTwoGpus, "--set", "links.0.bandwidth=50GB/s",
                    "--calibration", (dir / "floor.yaml").string()});
    REQUIRE(fast.status == 0);
    std::ofstream(dir / "fast.txt") << fast.out;
    const auto w = run_binary({"calibrate", "--nccl-tests", (dir / "fast.txt").string(),
                               "--topology", kTwoGpus, "--out", (dir / "b.yaml").string()});
    REQUIRE(w.status == 0);
    const auto warned = lines_with(w.out, "faster than the model can be");
    REQUIRE(warned.size() == 1);
    const std::string largest = std::to_string(256LL << 20);  // -e 256M, the last row
    // nccl-tests' size column: right-aligned in 12 characters. (Built by append: GCC 12's
    // -Wrestrict misfires on `"..." + std::string(n, ' ')`.)
    std::string row = "\n";
    row.append(12 - largest.size(), ' ').append(largest).append(" ");
    CHECK(fast.out.find(row) != std::string::npos);
    CHECK(warned[0].find("up to " + largest + " B are faster than the model can be (at " + largest +
                         " B: ") != std::string::npos);
    CHECK(warned[0].find("MB") == std::string::npos);
}

TEST_CASE("an HBM shortfall is one warning per run, one per schedule in compare") {
    // 1F1B on the two-GPU pipeline with 128-sequence microbatches: both stages need more than the
    // H200's 141 GB (tests/api/test_run.cpp derives the text from the stages' memory).
    const std::vector<std::string> sets{"--set", "training.micro_batch_size=128", "--set",
                                        "training.global_batch_size=1024"};
    std::vector<std::string> args{"run", kPipeline, "--schedule", "1f1b"};
    args.insert(args.end(), sets.begin(), sets.end());
    const auto r = run_binary(args);
    REQUIRE(r.status == 0);
    const auto hbm = lines_with(r.err, "of HBM");
    REQUIRE(hbm.size() == 1);
    CHECK(hbm[0].rfind("warning: stages 0-1 need ", 0) == 0);
    std::vector<std::string> cmp{"compare", kPipeline, "--schedules", "gpipe,1f1b"};
    cmp.insert(cmp.end(), sets.begin(), sets.end());
    const auto c = run_binary(cmp);
    REQUIRE(c.status == 0);
    CHECK(lines_with(c.err, "of HBM").size() == 2);
    CHECK(lines_with(c.err, "under gpipe, more than").size() == 1);
    CHECK(lines_with(c.err, "under 1f1b, more than").size() == 1);
}

TEST_CASE("--log-json: CLI11's own errors (unknown option, missing argument) are JSON lines") {
    const std::vector<std::vector<std::string>> cases{
        {"--log-json", "run", kPipeline, "--bogus"},         // an unknown option
        {"run", kPipeline, "--log-json", "--set"},           // an option without its argument
        {"--log-json", "collective", "--op", "all_reduce"},  // a required option missing
    };
    for (const auto& args : cases) {
        const auto r = run_binary(args);
        CAPTURE(r.err);
        CHECK(r.status == 2);  // as without --log-json (docs/user-guide.md: bad input is exit 2)
        REQUIRE(lines_with(r.err, "").size() == 1);
        const auto j = nlohmann::json::parse(r.err);
        CHECK(j["level"] == "error");
        CHECK(j["kind"] == "error");
        CHECK(j["exit"] == 2);
        CHECK(!j["message"].get<std::string>().empty());
    }
    // validate --check's failure (exit 3, not a CLI11 error) is a JSON line too: a case published
    // at 1 GB/s, against the model's 299 GB/s for 1 GiB on the two H200s, is outside its 10%.
    const fs::path dir = cs::test::scratch("msg_validate");
    std::ofstream(dir / "cases.yaml")
        << "families:\n  - {id: n, title: NCCL, mode: network, tolerance: 0.1, error: relative}\n"
        << "cases:\n  - {id: a, family: n, source: t, kind: collective, op: all_reduce, ranks: "
           "\"0,1\", size: 1GiB, published: 1, topology: "
        << kTwoGpus << "}\n";
    const auto failed = run_binary({"validate", dir.string(), "--check", "--log-json"});
    CHECK(failed.status == 3);
    REQUIRE(lines_with(failed.err, "").size() == 1);
    const auto v = nlohmann::json::parse(failed.err);
    CHECK(v["level"] == "error");
    CHECK(v["exit"] == 3);
    CHECK(v["message"].get<std::string>().find("validation failed") != std::string::npos);
    // Without --log-json the same errors are text, with the hint.
    const auto text = run_binary({"run", kPipeline, "--bogus"});
    CHECK(text.status == 2);
    CHECK(text.err.rfind("error: The following argument was not expected: --bogus\n", 0) == 0);
}

TEST_CASE("diff: a trace of another configuration than the profile's is said once, first") {
    const fs::path dir = cs::test::scratch("msg_diff");
    const fs::path trace = dir / "llama.json", json = dir / "d.json";
    // The bundled Llama configuration (SwiGLU, rotary, RMSNorm, 8 layers) against the GPT
    // profile (GELU, LayerNorm, 12 layers, h = 3072).
    REQUIRE(run_binary({"run", kRoot + "/tests/validation/experiments/h200-llama-h2048.yaml",
                        "--trace", trace.string()})
                .status == 0);
    const auto r = run_binary({"diff", trace.string(),
                               kRoot + "/tests/validation/data/gpt-h3072-profile.json.gz",
                               "--iterations", "2", "--json", json.string()});
    REQUIRE(r.status == 0);
    const auto warned = lines_with(r.out, "look like different configurations");
    REQUIRE(warned.size() == 1);
    // Before the tables it qualifies.
    CHECK(r.out.find(warned[0]) < r.out.find("\nkind "));
    const auto j = nlohmann::json::parse(cs::test::slurp(json));
    REQUIRE(!j["warnings"].empty());
    CHECK("warning: " + j["warnings"][0].get<std::string>() == warned[0]);
    // What differs, from the JSON: the kinds on one side only worth 2% of that side's time, the
    // norm operators per forward pass, the compute time off by more than 2x.
    const double sim = j["simulated_busy_ms"], meas = j["measured_busy_ms"];
    std::string sim_only, meas_only;
    for (const auto& k : j["kinds"]) {
        const std::string name = k["name"];
        if (k["measured_kernels"] == 0 && k["simulated_ms"].get<double>() >= 0.02 * sim)
            sim_only += (sim_only.empty() ? "" : ", ") + name;
        if (k["simulated_ops"] == 0 && k["measured_ms"].get<double>() >= 0.02 * meas)
            meas_only += (meas_only.empty() ? "" : ", ") + name;
    }
    REQUIRE(!sim_only.empty());
    REQUIRE(!meas_only.empty());
    CHECK(warned[0].find("the simulated rank runs " + sim_only + " (") != std::string::npos);
    CHECK(warned[0].find("the profile runs " + meas_only + " (") != std::string::npos);
    // 12 layers x 2 LayerNorms + the final one, against 8 x 2 + 1.
    CHECK(warned[0].find("a measured forward pass holds 25 norm operators, a simulated one 17 (2 "
                         "per layer x 8 layers + 1)") != std::string::npos);
    REQUIRE(meas > 2 * sim);
    CHECK(warned[0].find("the simulated compute takes") != std::string::npos);

    // The profile's own configuration: no such warning (the check the bundled pairs pass).
    const fs::path own = dir / "gpt.json";
    REQUIRE(run_binary({"run", kRoot + "/tests/validation/experiments/h200-gpt-h3072.yaml",
                        "--trace", own.string()})
                .status == 0);
    const auto same = run_binary({"diff", own.string(),
                                  kRoot + "/tests/validation/data/gpt-h3072-profile.json.gz",
                                  "--iterations", "2"});
    REQUIRE(same.status == 0);
    CHECK(same.out.find("different configurations") == std::string::npos);
}

TEST_CASE("plan: why a layout ranks lower says its times as run says times (format_time)") {
    const fs::path json = cs::test::scratch("msg_plan") / "p.json";
    const auto r =
        run_binary({"plan", kRoot + "/tests/api/data/plan-small.yaml", "--set", "topology.nodes=2",
                    "--headroom", "0.98", "--top", "3", "--json", json.string()});
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(cs::test::slurp(json));
    const auto& top = j["top"];
    REQUIRE(top.size() == 3);
    const double t1 = top[0]["figures"]["iteration_time_s"];
    const double t3 = top[2]["figures"]["iteration_time_s"];
    REQUIRE(t3 > t1);
    const std::string why = top[2]["why_lost"];
    // The difference first, then the part that grew most with its two times. (Strings built by
    // append: GCC 12's -Wrestrict misfires on `"..." + std::string`.)
    std::string head("+");
    head.append(cs::format_time(cs::Time::from_seconds_ceil(t3 - t1)))
        .append(" per iteration; the most: ");
    CHECK(why.rfind(head, 0) == 0);
    CHECK(why.find(" ms)") != std::string::npos);  // 5.485 ms against 5.288 ms, say
    std::string line("  #3: ");
    line.append(why).append("\n");
    CHECK(r.out.find(line) != std::string::npos);
}
