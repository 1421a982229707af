// `variability:` (docs/what-if.md): slow GPUs, per-pass draws and slow hosts, what they cost
// against the clean run, and the critical path that names the straggler. Expected values are
// hand-computed pipelines on the ideal network (no transfer time).
#include <doctest/doctest.h>

#include <string>

#include "replay/durations/variability.hpp"
#include "session/run.hpp"
#include "test_support.hpp"

using namespace cs;

namespace {

report::Summary run_1f1b(const workload::ExperimentSpec& spec) {
    api::RunOptions opt;
    opt.schedule = "1f1b";
    return api::run(spec, opt).summary;
}

workload::Slowdown fixed(std::vector<int> gpus, double factor) {
    workload::Slowdown s;
    s.gpus = std::move(gpus);
    s.factor = factor;
    return s;
}

}  // namespace

TEST_CASE("variability: a GPU 1.2x slower costs the part of the critical path its stage owns") {
    // p = 2, m = 2, one layer per stage (f = 10 us, b = 20 us), GPU s runs stage s. Clean:
    // T = 3f + 3b = 90 us. GPU 1 at 1.2x makes stage 1's passes 12 and 24 us:
    //   s0: F0 [0, 10), F1 [10, 20)
    //   s1: F0 [10, 22), B0 [22, 46), F1 [46, 58), B1 [58, 82)
    //   s0: B0 [46, 66), B1 [82, 102)
    // T = 102 us. The critical path F0s0 F0s1 B0s1 F1s1 B1s1 B1s0 has 10 + 20 = 30 us of stage 0
    // and 12 + 24 + 12 + 24 = 72 us of stage 1: the cost, 12 us, is 0.2 x stage 1's 60 us on
    // the clean path, and stage 1 owns 72 / 102 of the path.
    auto spec =
        test::profile_experiment(2, 2, 2, Time::us(10), Time::us(20), network::Fidelity::Ideal);
    spec.variability.gpus.push_back(fixed({1}, 1.2));
    const auto s = run_1f1b(spec);
    CHECK(s.iteration_time_s == doctest::Approx(102e-6).epsilon(1e-12));
    const auto& v = s.variability;
    REQUIRE(v.present);
    CHECK(v.clean_iteration_time_s == doctest::Approx(90e-6).epsilon(1e-12));
    CHECK(v.cost_s == doctest::Approx(12e-6).epsilon(1e-9));
    CHECK(v.critical_stage == 1);
    CHECK(v.critical_dp == 0);
    CHECK(v.critical_gpus == std::vector<int>{1});
    CHECK(v.critical_share == doctest::Approx(72.0 / 102).epsilon(1e-12));
    CHECK(v.slowest_gpu == 1);
    CHECK(v.slowest_factor == doctest::Approx(1.2));
    // --json carries the block; slowdown = 102 / 90.
    const auto j = report::to_json(s);
    CHECK(j["variability"]["slowdown"].get<double>() == doctest::Approx(102.0 / 90).epsilon(1e-12));
    CHECK(j["variability"]["critical_gpus"] == nlohmann::ordered_json::array({1}));
    CHECK_FALSE(report::to_json(run_1f1b(test::profile_experiment(
                                    2, 2, 2, Time::us(10), Time::us(20), network::Fidelity::Ideal)))
                    .contains("variability"));

    SUBCASE("the same slowdown on stage 0 moves the critical path there") {
        // GPU 0 at 1.2x: stage 0's passes 12 and 24 us.
        //   s0: F0 [0, 12), F1 [12, 24)      s1: F0 [12, 22), B0 [22, 42), F1 [42, 52), B1 [52, 72)
        //   s0: B0 [42, 66), B1 [72, 96)
        // T = 96 us: the path F0s0 F0s1 B0s1 F1s1 B1s1 B1s0 now holds 12 + 24 = 36 us of stage
        // 0 and 60 of stage 1, so stage 1 still owns more of it (60 / 96): a straggler on the
        // stage with less of the path costs less (6 us = 0.2 x 30).
        spec.variability.gpus = {fixed({0}, 1.2)};
        const auto s0 = run_1f1b(spec);
        CHECK(s0.iteration_time_s == doctest::Approx(96e-6).epsilon(1e-12));
        CHECK(s0.variability.cost_s == doctest::Approx(6e-6).epsilon(1e-9));
        CHECK(s0.variability.critical_stage == 1);
        CHECK(s0.variability.critical_share == doctest::Approx(60.0 / 96).epsilon(1e-12));
        CHECK(s0.variability.slowest_factor == 1.0);  // stage 1's GPU runs at the plan's pace
    }
    SUBCASE("factors on one GPU multiply") {
        // 1.2 x 1.25 = 1.5 on GPU 1: stage 1's passes 15 and 30 us; its path F0 B0 F1 B1 =
        // 90 us plus F0s0 10 and B1s0 20: T = 120 us.
        spec.variability.gpus.push_back(fixed({1}, 1.25));
        CHECK(run_1f1b(spec).iteration_time_s == doctest::Approx(120e-6).epsilon(1e-12));
    }
}

TEST_CASE("variability: per-pass draws are reproducible with the seed and change with it") {
    // Lognormal factors (median 1, sigma 0.2) on both GPUs of the 2-stage pipeline, m = 4: every
    // pass draws its own factor, so the iteration differs from the clean 3f + ... and from a run
    // with another seed, and equals itself with the same seed.
    auto spec =
        test::profile_experiment(2, 4, 2, Time::us(10), Time::us(20), network::Fidelity::Ideal);
    workload::Slowdown jitter;
    jitter.gpus = {0, 1};
    jitter.kind = workload::SlowdownKind::Lognormal;
    jitter.factor = 1;
    jitter.spread = 0.2;
    spec.variability.gpus.push_back(jitter);
    spec.seed = 7;
    const double a = run_1f1b(spec).iteration_time_s;
    CHECK(run_1f1b(spec).iteration_time_s == a);
    spec.seed = 8;
    const double b = run_1f1b(spec).iteration_time_s;
    CHECK(b != a);
    // Clean: 1F1B with p = 2, m = 4: (m + p - 1)(f + b) = 5 x 30 = 150 us.
    const auto s = run_1f1b(spec);
    CHECK(s.variability.clean_iteration_time_s == doctest::Approx(150e-6).epsilon(1e-12));
    CHECK(s.iteration_time_s != doctest::Approx(150e-6).epsilon(1e-9));

    SUBCASE("a normal draw is kept above the floor") {
        // Mean 0.01, far below kMinSlowdown = 0.05: every draw lands on the floor after 64
        // tries or above it, so no pass takes less than 0.05 of its time: T >= 0.05 x 150 us.
        jitter.kind = workload::SlowdownKind::Normal;
        jitter.factor = 0.01;
        jitter.spread = 0.001;
        spec.variability.gpus = {jitter};
        CHECK(run_1f1b(spec).iteration_time_s >= 0.05 * 150e-6 * (1 - 1e-9));
    }
}

TEST_CASE("variability: a slow host takes longer for everything it issues") {
    // One stage, 4 layers, one microbatch (F = 4 x 10 us, B = 4 x 20 us), host pass 5 us and
    // launch 30 us: host-bound, T = 270 us (test_host.cpp). The host of GPU 0 at 2x: pass 10,
    // launch 60. F's kernels issue at 10 + 60 (i + 1) = 70, 130, 190, 250 and run 10 us: F ends
    // at 260; the host is free at 10 + 4 x 60 = 250. B's issue at 250 + 10 + 60 = 320, 380,
    // 440, 500, 20 us each: T = 520 us.
    auto spec =
        test::profile_experiment(1, 1, 4, Time::us(10), Time::us(20), network::Fidelity::Ideal);
    spec.compute.host.enabled = true;
    spec.compute.host.pass = Time::us(5);
    spec.compute.host.launch = Time::us(30);
    workload::HostSlowdown slow;
    slow.gpus = {0};
    slow.factor = 2;
    spec.variability.hosts.push_back(slow);
    const auto s = run_1f1b(spec);
    CHECK(s.iteration_time_s == doctest::Approx(520e-6).epsilon(1e-12));
    CHECK(s.variability.clean_iteration_time_s == doctest::Approx(270e-6).epsilon(1e-12));
    CHECK(s.variability.critical_gpus == std::vector<int>{0});
    CHECK(s.variability.critical_share == 1.0);
}

TEST_CASE("variability: fixed_slowdown multiplies a GPU's fixed entries only") {
    workload::VariabilitySpec v;
    v.gpus = {fixed({0, 2}, 1.5), fixed({2}, 2)};
    workload::Slowdown drawn;
    drawn.gpus = {0};
    drawn.kind = workload::SlowdownKind::Normal;
    drawn.factor = 3;
    drawn.spread = 0.1;
    v.gpus.push_back(drawn);
    CHECK(replay::fixed_slowdown(v, 0) == 1.5);
    CHECK(replay::fixed_slowdown(v, 1) == 1.0);
    CHECK(replay::fixed_slowdown(v, 2) == 3.0);
}
