// Shared fabric (`jobs:`, session/jobs.hpp): placements give the GPU sets derived by hand, two
// identical jobs whose only shared resource is one NIC link each see the max-min slowdown, and
// member folding is off in a shared run while the results stay those of the job alone.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/errors.hpp"
#include "session/jobs.hpp"
#include "session/run.hpp"
#include "workload/plan.hpp"

namespace {

const std::string kData = std::string(CLUSTERSIM_SOURCE_DIR) + "/tests/api/data";

cs::api::JobsSpec jobs(const std::string& text) {
    return cs::api::load_jobs(cs::workload::ExperimentText{text, "<jobs>", kData});
}

// A data-parallel job of one layer on the profile compute model: F = 1 ms, B = 4 ms per
// microbatch, one microbatch per replica, nothing but the DP all-reduce on the network.
std::string dp_job(int dp) {
    return "{model: {layers: 1, hidden_size: 4096, attention_heads: 32, vocab_size: 0},"
           " parallelism: {tp: 1, pp: 1, dp: " +
           std::to_string(dp) +
           "}, schedule: 1f1b,"
           " training: {micro_batch_size: 1, global_batch_size: " +
           std::to_string(dp) +
           ", seq_length: 1024},"
           " compute: {model: profile, layer_forward: 1ms, layer_backward: 4ms},"
           " network: {model: flow, calibration: nominal}}";
}

// Two copies of dp_job(2) placed by rail on two-nodes-one-nic (job a on GPUs 0 and 2, b on 1 and
// 3), with `header` (e.g. "iterations: 2\n") before the jobs.
cs::api::JobsSpec two_rail_jobs(const std::string& header = "") {
    return jobs("topology: two-nodes-one-nic.yaml\n" + header +
                "jobs:\n"
                "  - {name: a, experiment: " +
                dp_job(2) +
                ", placement: rail}\n"
                "  - {name: b, experiment: " +
                dp_job(2) + ", placement: rail}\n");
}

}  // namespace

TEST_CASE("jobs: placements take the GPUs derived by hand") {
    // two-nodes-four-gpus: GPUs 0-3 on node 0 (local indices 0-3), 4-7 on node 1.
    const auto spec = jobs(
        "topology: two-nodes-four-gpus.yaml\njobs:\n"
        "  - {name: a, experiment: " +
        dp_job(1) + ", placement: contiguous}\n");
    const auto& cluster = *spec.cluster;
    std::vector<std::uint8_t> none(8, 0);
    using cs::api::Placement;
    // Contiguous: the first free GPUs in number order.
    CHECK(cs::api::place_gpus(cluster, Placement::Contiguous, 3, none) ==
          std::vector<int>{0, 1, 2});
    // Rail: local GPU 0 of nodes 0 and 1, then local GPU 1 of both: 0, 4, 1, 5.
    CHECK(cs::api::place_gpus(cluster, Placement::Rail, 4, none) == std::vector<int>{0, 4, 1, 5});
    // Scattered: rank r takes free GPU floor(r x 8 / 3): 0, 2, 5.
    CHECK(cs::api::place_gpus(cluster, Placement::Scattered, 3, none) == std::vector<int>{0, 2, 5});
    // With 0-2 taken, free = {3, 4, 5, 6, 7}. Rail orders them by (local index, node): 4 (0, 1),
    // 5 (1, 1), 6 (2, 1), 3 (3, 0), 7 (3, 1). Scattered 2 of F = 5: indices 0 and 5 x 1 / 2 = 2,
    // i.e. GPUs 3 and 5.
    std::vector<std::uint8_t> taken{1, 1, 1, 0, 0, 0, 0, 0};
    CHECK(cs::api::place_gpus(cluster, Placement::Rail, 3, taken) == std::vector<int>{4, 5, 6});
    CHECK(cs::api::place_gpus(cluster, Placement::Scattered, 2, taken) == std::vector<int>{3, 5});
    CHECK(cs::api::place_gpus(cluster, Placement::Contiguous, 6, taken).empty());  // 5 free

    // Through a jobs file: the explicit placement is made first (6-7), then a (contiguous, 3
    // GPUs) takes 0-2, then c (rail, 2) orders the free {3, 4, 5} by (local, node): 4 (0, 1),
    // 5 (1, 1), 3 (3, 0), and takes 4 and 5.
    const auto three = jobs(
        "topology: two-nodes-four-gpus.yaml\njobs:\n"
        "  - {name: a, experiment: " +
        dp_job(3) +
        ", placement: contiguous}\n"
        "  - {name: b, experiment: " +
        dp_job(2) +
        ", placement: {gpus: \"6-7\"}}\n"
        "  - {name: c, experiment: " +
        dp_job(2) + ", placement: rail}\n");
    REQUIRE(three.jobs.size() == 3);
    CHECK(three.jobs[0].gpus == std::vector<int>{0, 1, 2});
    CHECK(three.jobs[1].gpus == std::vector<int>{6, 7});
    CHECK(three.jobs[1].placement == Placement::Explicit);
    CHECK(three.jobs[2].gpus == std::vector<int>{4, 5});
}

TEST_CASE("jobs: two identical jobs sharing one NIC link each see the max-min slowdown") {
    // two-nodes-one-nic: node 0 holds GPUs 0-1, node 1 GPUs 2-3, one 50 GB/s NIC per node.
    // Rail placement gives job a GPUs {0, 2} (local 0 of both nodes) and job b {1, 3}. Each job
    // is dp = 2 with one microbatch: F + B = 5 ms of compute, then a 2-GPU ring all-reduce of the
    // layer's G gradient bytes, 2 steps each moving G / 2 per direction over GPU -> NIC (PCIe,
    // 64 GB/s, 1 us), NIC -> switch (50 GB/s, 1 us), switch -> NIC, NIC -> GPU: 4 us latency per
    // step. Alone the NIC links are the bottleneck: T_alone = 5 ms + 8 us + G / 50 GB/s.
    // Together both jobs reach the all-reduce at the same instant and their flows cross the same
    // NIC links in the same direction: max-min gives each 25 GB/s (still below the 64 GB/s PCIe
    // link each job has to itself), so T_shared = 5 ms + 8 us + G / 25 GB/s, and the slowdown is
    // T_shared / T_alone for both.
    const auto spec = two_rail_jobs();
    REQUIRE(spec.jobs.size() == 2);
    CHECK(spec.jobs[0].gpus == std::vector<int>{0, 2});
    CHECK(spec.jobs[1].gpus == std::vector<int>{1, 3});
    const auto device = cs::workload::plan_iteration(spec.jobs[0].experiment, 1, false, [](int) {
                            return 0;
                        }).devices[0];
    const double g = static_cast<double>(device.dp_gradient_bytes.value);
    REQUIRE(g > 1e6);
    const double alone = 5e-3 + 8e-6 + g / 50e9;
    const double shared = 5e-3 + 8e-6 + g / 25e9;
    const auto r = cs::api::run_jobs(spec);
    REQUIRE(r.jobs.size() == 2);
    for (const auto& j : r.jobs) {
        CHECK(j.alone.iteration_time_s == doctest::Approx(alone).epsilon(1e-9));
        CHECK(j.shared.iteration_time_s == doctest::Approx(shared).epsilon(1e-9));
        CHECK(j.slowdown == doctest::Approx(shared / alone).epsilon(1e-9));
    }
    CHECK(r.makespan_s == doctest::Approx(shared).epsilon(1e-9));
    // The contested links: the NIC-switch links of both nodes in both directions (each carries
    // G / 2 per step and job, G per job in all); the PCIe links are each one job's.
    REQUIRE(r.links.size() == 4);
    for (const auto& l : r.links) {
        CHECK(l.bytes.size() == 2);
        CHECK(l.bytes[0] == doctest::Approx(g));
        CHECK(l.bytes[1] == doctest::Approx(g));
        // Busy only while the all-reduce runs: 2 x G / 25 GB/s of the iteration, minus the
        // latency each step spends before its bytes reach the link.
        CHECK(l.busy_s == doctest::Approx(l.shared_s));
        CHECK(l.busy_s <= 8e-6 + g / 25e9);
        CHECK(l.busy_s >= g / 25e9);
    }
    const auto json = cs::api::to_json(r);
    CHECK(json["jobs"][0]["name"] == "a");
    CHECK(json["jobs"][1]["gpus"] == "1,3");
    CHECK(json["contested_links"].size() == 4);

    // With `iterations: 2` both jobs end their first iteration together at T_shared and start
    // the second together there, from the same state: T_shared again, for each.
    const auto spec2 = two_rail_jobs("iterations: 2\n");
    const auto r2 = cs::api::run_jobs(spec2);
    for (const auto& j : r2.jobs) {
        REQUIRE(j.shared_iteration_times_s.size() == 2);
        for (double t : j.shared_iteration_times_s)
            CHECK(t == doctest::Approx(shared).epsilon(1e-9));
        CHECK(j.slowdown == doctest::Approx(shared / alone).epsilon(1e-9));
    }
    CHECK(r2.makespan_s == doctest::Approx(2 * shared).epsilon(1e-9));
}

TEST_CASE("jobs: member folding is off in a shared run, and a job alone matches api::run") {
    // tp = 2, pp = 2 on GPUs 0-3 of node 0: api::run folds the two members' pipeline sends
    // (0 -> 2 and 1 -> 3 cross different NVSwitch links); the jobs run refuses folding and gets
    // the same iteration time, folding being exact.
    const std::string job =
        "{model: {layers: 2, hidden_size: 4096, attention_heads: 32, vocab_size: 0},"
        " parallelism: {tp: 2, pp: 2, dp: 1}, schedule: 1f1b,"
        " training: {micro_batch_size: 1, global_batch_size: 4, seq_length: 1024},"
        " compute: {model: profile, layer_forward: 1ms, layer_backward: 2ms},"
        " network: {model: flow, calibration: nominal}}";
    const auto spec =
        jobs("topology: two-nodes-four-gpus.yaml\njobs:\n  - {name: a, experiment: " + job + "}\n");
    REQUIRE(spec.jobs.front().gpus == std::vector<int>{0, 1, 2, 3});
    cs::api::RunOptions options;
    const auto single = cs::api::run(spec.jobs.front().experiment, options).summary;
    CHECK(single.fold_copies == 2);
    const auto r = cs::api::run_jobs(spec);
    CHECK(r.fold_refused == "a shared-fabric (jobs:) run is not folded");
    CHECK(r.jobs.front().shared.fold_copies == 1);
    CHECK(r.jobs.front().shared.iteration_time_s == single.iteration_time_s);
    CHECK(r.jobs.front().alone.iteration_time_s == single.iteration_time_s);
    CHECK(r.jobs.front().slowdown == 1.0);
    CHECK(r.links.empty());
}

TEST_CASE("jobs: bad jobs files are refused with the place and what is accepted") {
    const auto error = [](const std::string& text) {
        try {
            jobs(text);
        } catch (const cs::ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const std::string head = "topology: two-nodes-four-gpus.yaml\njobs:\n";
    CHECK(error("topology: two-nodes-four-gpus.yaml\njobs: []\n")
              .find("<jobs>:2:7: 'jobs': expected a non-empty list") != std::string::npos);
    CHECK(error(head + "  - {name: a, experiment: " + dp_job(2) +
                "}\n  - {name: a, experiment: " + dp_job(2) + "}\n")
              .find("duplicate job name 'a'") != std::string::npos);
    CHECK(error(head + "  - {name: a, experiment: " + dp_job(8) +
                "}\n  - {name: b, experiment: " + dp_job(2) + "}\n")
              .find("job 'b' needs 2 GPUs (tp x cp x dp x pp = 1 x 1 x 2 x 1 = 2), but only 0 of "
                    "the topology's 8 are free") != std::string::npos);
    CHECK(error(head + "  - {name: a, experiment: " + dp_job(2) +
                ", placement: {gpus: \"0-1\"}}\n  - {name: b, experiment: " + dp_job(2) +
                ", placement: {gpus: \"1-2\"}}\n")
              .find("GPU 1 already belongs to job 'a'") != std::string::npos);
    // A GPU named twice (it was merged away, and the count came out one short): named as such,
    // by GPU or by node, the smallest repeated number.
    CHECK(
        error(head + "  - {name: a, experiment: " + dp_job(2) + ", placement: {gpus: \"3,1,1\"}}\n")
            .find("'jobs.0.placement.gpus': GPU 1 is named more than once") != std::string::npos);
    CHECK(error(head + "  - {name: a, experiment: " + dp_job(8) +
                ", placement: {gpus: [\"4-7\", \"0-5\"]}}\n")
              .find("GPU 4 is named more than once") != std::string::npos);
    CHECK(
        error(head + "  - {name: a, experiment: " + dp_job(4) + ", placement: {nodes: \"1,1\"}}\n")
            .find("node 1 is named more than once; name each node once") != std::string::npos);
    CHECK(error(head + "  - {name: a, experiment: " + dp_job(2) + ", gpus: 2}\n").find("gpus") !=
          std::string::npos);
}

TEST_CASE("jobs: the trace has one process per job, each with its own GPUs") {
    // The two rail-placed jobs of the slowdown test: job a on GPUs 0 and 2, job b on 1 and 3.
    const auto spec = two_rail_jobs();
    const auto path = std::filesystem::temp_directory_path() / "clustersim-test-jobs-trace.json";
    cs::api::JobsOptions options;
    options.trace = path;
    cs::api::run_jobs(spec, options);
    std::ifstream in(path);
    const auto trace = nlohmann::json::parse(in);
    std::filesystem::remove(path);
    std::map<int, std::string> processes;
    std::map<int, std::set<std::string>> threads;  // per pid: the GPU compute threads
    for (const auto& e : trace["traceEvents"]) {
        if (e.value("name", "") == "process_name")
            processes[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
        if (e.value("name", "") == "thread_name") {
            const auto name = e["args"]["name"].get<std::string>();
            if (name.find("compute") != std::string::npos)
                threads[e["pid"].get<int>()].insert(name);
        }
    }
    CHECK(processes == std::map<int, std::string>{{1, "job a"}, {2, "job b"}});
    CHECK(threads[1] == std::set<std::string>{"GPU 0 compute", "GPU 2 compute"});
    CHECK(threads[2] == std::set<std::string>{"GPU 1 compute", "GPU 3 compute"});
}

TEST_CASE("jobs: one job on the whole topology gives api::run's iteration exactly") {
    // A shared-fabric replay with a single job is the single run with folding off (which is
    // exact): the same iteration time for every kind of transfer the replay issues (pipeline
    // sends, bucketed DP all-reduces, ZeRO-3 shard streams, HSDP's cross-group all-reduce), all
    // of them through the job's network-token range.
    const std::string common =
        "model: {layers: 4, hidden_size: 2048, attention_heads: 16, vocab_size: 0},"
        " compute: {model: profile, layer_forward: 1ms, layer_backward: 2ms},"
        " network: {model: flow, calibration: nominal}";
    const std::vector<std::string> layouts = {
        "parallelism: {tp: 2, pp: 2, dp: 2, overlap_grad_reduce: true, ddp_bucket_size: "
        "2000000}, schedule: 1f1b, training: {micro_batch_size: 1, global_batch_size: 8, "
        "seq_length: 1024}",
        "parallelism: {tp: 1, pp: 1, dp: 8, sharding: zero3}, schedule: 1f1b,"
        " training: {micro_batch_size: 1, global_batch_size: 16, seq_length: 1024}",
        "parallelism: {tp: 1, pp: 1, dp: 8, sharding: zero3, shard_size: 4}, schedule: 1f1b,"
        " training: {micro_batch_size: 1, global_batch_size: 16, seq_length: 1024}",
        "parallelism: {tp: 1, pp: 2, dp: 4, vpp: 2}, schedule: interleaved,"
        " training: {micro_batch_size: 1, global_batch_size: 16, seq_length: 1024}",
    };
    for (const auto& layout : layouts) {
        CAPTURE(layout);
        const auto spec = jobs(
            "topology: two-nodes-four-gpus.yaml\njobs:\n"
            "  - {name: a, experiment: {" +
            common + ", " + layout + "}}\n");
        cs::api::RunOptions options;
        options.fold = false;
        const auto single = cs::api::run(spec.jobs.front().experiment, options).summary;
        const auto r = cs::api::run_jobs(spec);
        CHECK(r.jobs.front().shared.iteration_time_s == single.iteration_time_s);
        CHECK(r.jobs.front().alone.iteration_time_s == single.iteration_time_s);
        CHECK(r.jobs.front().shared.mfu == single.mfu);
        CHECK(r.jobs.front().shared.bubble_fraction == single.bubble_fraction);
        // Three iterations back to back: each starts where the last ended and takes the single
        // run's time exactly (the replay counts from its start; the job's communicators are
        // registered again and reused, so its collectives keep their routes); the reported one
        // is the third, with the single run's figures.
        const auto spec3 = jobs(
            "topology: two-nodes-four-gpus.yaml\niterations: 3\njobs:\n"
            "  - {name: a, experiment: {" +
            common + ", " + layout + "}}\n");
        const auto r3 = cs::api::run_jobs(spec3);
        CHECK(r3.iterations == 3);
        const auto& times = r3.jobs.front().shared_iteration_times_s;
        REQUIRE(times.size() == 3);
        for (double t : times)
            CHECK(t == doctest::Approx(single.iteration_time_s).epsilon(1e-12));
        CHECK(r3.jobs.front().shared.iteration_time_s ==
              doctest::Approx(single.iteration_time_s).epsilon(1e-12));
        CHECK(r3.jobs.front().shared.mfu == doctest::Approx(single.mfu).epsilon(1e-12));
        CHECK(r3.jobs.front().shared.bubble_fraction ==
              doctest::Approx(single.bubble_fraction).epsilon(1e-12));
        CHECK(r3.makespan_s == doctest::Approx(3 * single.iteration_time_s).epsilon(1e-12));
    }
}

TEST_CASE("jobs: two identical pipelines share the NIC link their activations cross") {
    // two-nodes-one-nic again, rail placement: job a's stages on GPUs 0 (node 0) and 2 (node 1),
    // job b's on 1 and 3. Each job is pp = 2, one microbatch, F = 1 ms and B = 4 ms per stage
    // (one layer each), so the iteration alone is F, the activation send, F, B, the gradient
    // send, B: 2F + 2B + 2 (4 us + A / 50 GB/s), with A = s x b x h x 2 bytes (bf16) =
    // 1024 x 1 x 4096 x 2 = 8,388,608 and 4 us the four hops' latency (GPU-NIC, NIC-switch,
    // switch-NIC, NIC-GPU). Together both jobs send at the same instants in the same direction
    // over the NIC-switch links: 25 GB/s each, so shared = alone + 2 A / 50 GB/s.
    const std::string pipeline =
        "{model: {layers: 2, hidden_size: 4096, attention_heads: 32, vocab_size: 0},"
        " parallelism: {tp: 1, pp: 2, dp: 1}, schedule: 1f1b,"
        " training: {micro_batch_size: 1, global_batch_size: 1, seq_length: 1024},"
        " compute: {model: profile, layer_forward: 1ms, layer_backward: 4ms},"
        " network: {model: flow, calibration: nominal}}";
    const auto spec = jobs(
        "topology: two-nodes-one-nic.yaml\njobs:\n"
        "  - {name: a, experiment: " +
        pipeline +
        ", placement: rail}\n"
        "  - {name: b, experiment: " +
        pipeline + ", placement: rail}\n");
    const auto plan =
        cs::workload::plan_iteration(spec.jobs[0].experiment, 1, false, [](int vs) { return vs; });
    CHECK(plan.virtual_stages[0].activation_bytes.value == 8'388'608);
    const double a = 8'388'608;
    const double alone = 2e-3 + 8e-3 + 2 * (4e-6 + a / 50e9);
    const double shared = alone + 2 * a / 50e9;
    const auto r = cs::api::run_jobs(spec);
    for (const auto& j : r.jobs) {
        CHECK(j.alone.iteration_time_s == doctest::Approx(alone).epsilon(1e-9));
        CHECK(j.shared.iteration_time_s == doctest::Approx(shared).epsilon(1e-9));
    }
    // The activation crosses node 0 -> node 1, the gradient node 1 -> node 0: the four NIC-switch
    // links, each carrying A of each job.
    REQUIRE(r.links.size() == 4);
    for (const auto& l : r.links) {
        CHECK(l.bytes[0] == doctest::Approx(a));
        CHECK(l.bytes[1] == doctest::Approx(a));
    }
}

TEST_CASE("is_jobs_file: a FIFO is left to the experiment loader, unread (issue 40)") {
    // Peeking at a stream consumed it: `run <(cat experiment.yaml)` read an empty experiment, and
    // a FIFO whose writer sends nothing was waited for twice. Here the FIFO holds a jobs file's
    // text (this process is its writer); is_jobs_file says no and the text is still there.
    namespace fs = std::filesystem;
    const fs::path p = fs::temp_directory_path() / ("cs-jobs-fifo-" + std::to_string(::getpid()));
    fs::remove(p);
    REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
    const int fd = ::open(p.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, "jobs: []\n", 9) == 9);
    CHECK_FALSE(cs::api::is_jobs_file(p));
    char back[16] = {};
    CHECK(::read(fd, back, sizeof back) == 9);
    CHECK(std::string(back) == "jobs: []\n");
    ::close(fd);
    fs::remove(p);
    // A regular file is peeked at: workloads/two-jobs.yaml is one.
    CHECK(cs::api::is_jobs_file(std::string(CLUSTERSIM_SOURCE_DIR) + "/workloads/two-jobs.yaml"));
}
