// Export and import: clustersim's generated programs written as Chakra ETs and run again give
// the replay's iteration time to the picosecond (issue #21), and the reader's checks on
// programs built in memory.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "../error_of.hpp"
#include "chakra/execute.hpp"
#include "chakra/export.hpp"
#include "chakra/program.hpp"
#include "ingest/inputs.hpp"
#include "replay/replay.hpp"
#include "session/chakra.hpp"
#include "session/run.hpp"

using namespace cs;
using cs::test::error_of;

namespace {

const std::string kData = std::string(CLUSTERSIM_SOURCE_DIR) + "/tests/chakra/data/";

// The replay's exact iteration end, from its observer notification.
struct EndObserver final : replay::ReplayObserver {
    Time end;
    void on_iteration_end(Time t) override { end = t; }
};

Time replay_time(const workload::ExperimentSpec& spec, const std::string& schedule) {
    EndObserver end;
    api::RunOptions options;
    options.schedule = schedule;
    options.attach = [&](replay::Replay& r) { r.add_observer(end); };
    api::run(spec, options);
    return end.end;
}

std::filesystem::path fresh_folder(const std::string& name) {
    auto dir = std::filesystem::temp_directory_path() /
               ("clustersim-chakra-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    return dir;
}

}  // namespace

TEST_CASE("chakra round trip: a 64-GPU GPT layout, export then import, to the picosecond") {
    // tests/chakra/data/gpt-64gpu.yaml on 8 DGX H100 nodes: tp 4, pp 4, dp 4, interleaved with
    // 2 chunks, distributed optimizer, 16 microbatches, flow network with contention. The files
    // go to disk and come back through load_program, as `chakra export` and `chakra run` do.
    const auto spec = api::load_experiment({kData + "gpt-64gpu.yaml", {"topology.nodes=8"}, ""});
    REQUIRE(spec.cluster->gpu_count() == 64);
    for (const std::string schedule : {"interleaved", "1f1b", "zb-v"}) {
        CAPTURE(schedule);
        const Time expected = replay_time(spec, schedule);
        const auto dir = fresh_folder(schedule);
        OutputSet outputs;
        const auto exported = api::chakra_export(spec, schedule, dir, "gpt", outputs);
        outputs.commit();
        CHECK(exported.ranks == 64);
        CHECK(exported.warnings.empty());  // host model off, no --overlap-grad-reduce
        const chakra::Program program = chakra::load_program(dir);
        CHECK(program.ranks.size() == 64);
        CHECK(program.warnings.empty());  // every attribute it wrote is one it reads
        const auto result = chakra::execute(program, *spec.cluster, spec.network);
        CHECK(result.iteration_time.count_ps() == expected.count_ps());
        CHECK(result.iteration_time > Time::ms(10));
        std::filesystem::remove_all(dir);
    }
}

TEST_CASE("chakra round trip with the host model: export --host, to the picosecond") {
    // The same layout with compute.host on (Megatron-LM's host: 25 us per launch, 100 us per
    // pass, 300 us more per backward, 200 us per p2p, sync after p2p), where the host holds back
    // part of the passes (the run's host_fraction is about 14%). The ETs are kept in memory.
    const auto spec = api::load_experiment(
        {kData + "gpt-64gpu.yaml", {"topology.nodes=8", "compute.host.enabled=true"}, ""});
    const Time expected = replay_time(spec, "interleaved");
    auto set = chakra::export_experiment(spec, "interleaved", "gpt", /*with_host=*/true);
    CHECK(set.warnings.empty());
    std::vector<std::string> names;
    for (std::size_t r = 0; r < set.files.size(); ++r)
        names.push_back("gpt." + std::to_string(r) + ".et");
    const auto program =
        chakra::build_program(std::move(set.files), names, std::move(set.groups), "gpt");
    CHECK(program.warnings.empty());
    const auto result = chakra::execute(program, *spec.cluster, spec.network);
    CHECK(result.iteration_time.count_ps() == expected.count_ps());
    // Without --host the ETs hold GPU work only: the run is shorter than the replay's and the
    // export says why.
    auto gpu_only = chakra::export_experiment(spec, "interleaved", "gpt");
    REQUIRE(gpu_only.warnings.size() == 1);
    CHECK(gpu_only.warnings[0].find("--host") != std::string::npos);
    const auto shorter = chakra::execute(
        chakra::build_program(std::move(gpu_only.files), names, std::move(gpu_only.groups), "gpt"),
        *spec.cluster, spec.network);
    CHECK(shorter.iteration_time < expected);
}

TEST_CASE("chakra round trip with --overlap-grad-reduce: buckets during the last backward pass") {
    // The DP gradients in buckets of 20M parameters, launched while the last backward pass of
    // each chunk runs (ready at even shares of its time) and one after the other; the pass slowed
    // by the interference (10% of the overlap, Megatron-LM framework).
    const auto spec =
        api::load_experiment({kData + "gpt-64gpu.yaml",
                              {"topology.nodes=8", "parallelism.overlap_grad_reduce=true",
                               "parallelism.ddp_bucket_size=20000000"},
                              ""});
    for (const std::string schedule : {"1f1b", "zb-v"}) {
        CAPTURE(schedule);
        const Time expected = replay_time(spec, schedule);
        auto set = chakra::export_experiment(spec, schedule, "gpt");
        CHECK(set.warnings.empty());
        std::vector<std::string> names;
        for (std::size_t r = 0; r < set.files.size(); ++r)
            names.push_back("gpt." + std::to_string(r) + ".et");
        const auto program =
            chakra::build_program(std::move(set.files), names, std::move(set.groups), "gpt");
        const auto result = chakra::execute(program, *spec.cluster, spec.network);
        CHECK(result.iteration_time.count_ps() == expected.count_ps());
    }
}

TEST_CASE("chakra export: what it cannot reproduce is said, and the folder holds one workload") {
    auto spec = api::load_experiment(
        {kData + "small-8gpu.yaml", {"topology.nodes=1", "compute.host.enabled=true"}, ""});
    const auto set = chakra::export_experiment(spec, "", "clustersim");
    REQUIRE(set.warnings.size() == 1);
    CHECK(set.warnings[0].find("compute.host") != std::string::npos);
    // An export into a folder that holds another workload's ETs is refused before writing.
    const auto dir = fresh_folder("stale");
    std::filesystem::create_directories(dir);
    { std::ofstream(dir / "other.0.et") << "x"; }
    OutputSet outputs;
    CHECK(error_of([&] {
              chakra::write_et_set(set, dir, outputs);
          }).find("already holds other.0.et") != std::string::npos);
    CHECK(!std::filesystem::exists(dir / "clustersim.0.et"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("chakra execute: a deadlock names the node that waits") {
    // Two ranks, each receives before it sends: neither message is ever sent.
    auto recv_then_send = [](int peer) {
        chakra::EtFile f;
        chakra::Node r;
        r.id = 1;
        r.type = static_cast<std::uint64_t>(chakra::NodeType::CommRecv);
        r.attrs = {chakra::Attribute::int32("comm_src", peer),
                   chakra::Attribute::int64("comm_size", 8)};
        chakra::Node s;
        s.id = 2;
        s.type = static_cast<std::uint64_t>(chakra::NodeType::CommSend);
        s.data_deps = {1};
        s.attrs = {chakra::Attribute::int32("comm_dst", peer),
                   chakra::Attribute::int64("comm_size", 8)};
        f.nodes = {r, s};
        return f;
    };
    const auto program = chakra::build_program({recv_then_send(1), recv_then_send(0)},
                                               {"d.0.et", "d.1.et"}, {}, "d");
    const auto spec = api::load_experiment({kData + "two-gpus-nominal.yaml", {}, ""});
    CHECK(error_of([&] { chakra::execute(program, *spec.cluster, spec.network); }) ==
          "d.0.et: node 1 (COMM_RECV_NODE) never ran to completion: the message from rank 1 never "
          "came: its send, node 2 of d.1.et, never ran; the ranks wait for each other (a "
          "deadlock)");
}
