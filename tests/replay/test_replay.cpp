#include <doctest/doctest.h>

#include <cstdlib>

#include "replay/replay.hpp"
#include "replay/replay_state.hpp"
#include "schedule/schedule.hpp"
#include "session/run.hpp"
#include "test_support.hpp"
#include "workload/plan.hpp"
#include "workload/roofline.hpp"

using namespace cs;

TEST_CASE("pipeline transfers over a link add their time to the critical path") {
    // Two stages, one microbatch, one layer each: F = 3 us, B = 7 us. The activation of
    // b s h = 1 x 1024 x 1024 values in 16 bits is 2,097,152 bytes; over a 100 GB/s link that is
    // 20.97152 us, plus the link's 1 us latency. The path is F0, send, F1, B1, send back, B0:
    // 3 + 21.97152 + 3 + 7 + 21.97152 + 7 = 63.94304 us.
    auto spec =
        test::profile_experiment(2, 1, 2, Time::us(3), Time::us(7), network::Fidelity::Flow);
    api::RunOptions opt;
    opt.schedule = "1f1b";
    const auto s = api::run(spec, opt).summary;
    CHECK(s.iteration_time_s == doctest::Approx(63.94304e-6).epsilon(1e-9));
    // Each stage computes 10 us; the rest of the 63.94 us is pipeline wait (the network is the
    // dependency), so bubble = 1 - 10/63.94304 on both stages and nothing is exposed collective.
    CHECK(s.bubble_fraction == doctest::Approx(1 - 10 / 63.94304).epsilon(1e-9));
    CHECK(s.exposed_comm_fraction == 0.0);
    // Both directions of the link carried one 2 MiB message.
    REQUIRE(s.links.size() == 2);
    CHECK(s.links[0].bytes == 2097152.0);
    CHECK(s.p2p_bytes == 2 * 2097152.0);
}

TEST_CASE("analytical and ideal fidelities") {
    auto spec =
        test::profile_experiment(2, 1, 2, Time::us(3), Time::us(7), network::Fidelity::Analytical);
    api::RunOptions opt;
    // Alpha-beta without contention gives the same single-transfer times as flow: 63.94304 us.
    CHECK(api::run(spec, opt).summary.iteration_time_s ==
          doctest::Approx(63.94304e-6).epsilon(1e-9));
    spec.network.fidelity = network::Fidelity::Ideal;
    // Free transfers: 2 (F + B) = 20 us.
    CHECK(api::run(spec, opt).summary.iteration_time_s == doctest::Approx(20e-6).epsilon(1e-12));
}

TEST_CASE("results are deterministic: two runs give identical summaries") {
    auto spec =
        test::profile_experiment(4, 16, 8, Time::us(3), Time::us(7), network::Fidelity::Flow);
    api::RunOptions opt;
    auto a = report::to_json(api::run(spec, opt).summary);
    auto b = report::to_json(api::run(spec, opt).summary);
    a.erase("wall_time_s");
    b.erase("wall_time_s");
    CHECK(a.dump() == b.dump());
}

TEST_CASE("profile extras: embedding, output layer, optimizer step and op overhead") {
    // One stage (p = 1), two microbatches, two layers: per microbatch the forward is
    // embedding 1 us + 2 x (3 us + 0.5 us overhead) + output 2 us... each extra op also pays the
    // 0.5 us overhead: F = (1+0.5) + 2(3+0.5) + (2+0.5) = 11 us; B = 2(7+0.5) + (4+0.5) + (1+0.5)
    // = 21 us with output_backward 4 us and embedding_backward 1 us. Optimizer 5 us once:
    // T = 2 (11 + 21) + 5 = 69 us.
    auto spec =
        test::profile_experiment(1, 2, 2, Time::us(3), Time::us(7), network::Fidelity::Ideal);
    auto& p = spec.compute.profile;
    p.embedding_forward = Time::us(1);
    p.embedding_backward = Time::us(1);
    p.output_forward = Time::us(2);
    p.output_backward = Time::us(4);
    p.optimizer_step = Time::us(5);
    p.op_overhead = Time::ns(500);
    api::RunOptions opt;
    CHECK(api::run(spec, opt).summary.iteration_time_s == doctest::Approx(69e-6).epsilon(1e-12));
}

TEST_CASE("profile compute: unprofiled parts cost nothing, or the roofline's estimate") {
    // 2 stages of 2 layers with a 4096-token vocabulary: the embedding sits on the first chunk,
    // the output layer on the last; every GPU runs an optimizer step.
    auto spec =
        test::profile_experiment(2, 4, 4, Time::ms(1), Time::ms(2), network::Fidelity::Ideal);
    spec.model.vocab_size = 4096;
    const auto device = [](int vs) { return vs; };
    const auto sum = [](const workload::PassPlan& p) {
        Time t = Time::zero();
        for (const auto& s : p.steps)
            if (s.kind == workload::Step::Kind::Compute) t += s.duration * s.repeat;
        return t;
    };
    const auto zero = workload::plan_iteration(spec, 1, false, device);
    // Default: the layers alone, 2 x 1 ms forward and 2 x 2 ms backward per chunk; no optimizer.
    CHECK(sum(zero.virtual_stages[0].forward) == Time::ms(2));
    CHECK(sum(zero.virtual_stages[1].backward) == Time::ms(4));
    CHECK(zero.devices[0].optimizer_step == Time::zero());

    spec.compute.profile.estimate_unprofiled = true;
    const auto est = workload::plan_iteration(spec, 1, false, device);
    const auto& gpu = spec.cluster->gpu_model(0);
    const auto& rc = spec.compute.roofline;
    const auto emb = workload::roofline_embedding(spec.model, spec.layout, spec.training, gpu, rc);
    const auto out =
        workload::roofline_output_layer(spec.model, spec.layout, spec.training, gpu, rc);
    // First chunk: the layers plus the roofline embedding; last chunk: plus the output layer.
    CHECK(sum(est.virtual_stages[0].forward) == Time::ms(2) + sum(emb.forward));
    CHECK(sum(est.virtual_stages[0].backward) == Time::ms(4) + sum(emb.backward));
    CHECK(sum(est.virtual_stages[1].forward) == Time::ms(2) + sum(out.forward));
    CHECK(sum(est.virtual_stages[1].backward) == Time::ms(4) + sum(out.backward));
    CHECK(sum(out.forward) > Time::zero());
    // The optimizer step of each stage's parameters, from the roofline.
    CHECK(est.devices[0].optimizer_step > Time::zero());
    CHECK(est.devices[1].optimizer_step > Time::zero());

    // A profiled time wins over the estimate, part by part.
    spec.compute.profile.output_given = true;
    spec.compute.profile.output_forward = Time::ms(7);
    spec.compute.profile.optimizer_given = true;
    spec.compute.profile.optimizer_step = Time::ms(9);
    const auto mixed = workload::plan_iteration(spec, 1, false, device);
    CHECK(sum(mixed.virtual_stages[0].forward) == Time::ms(2) + sum(emb.forward));
    CHECK(sum(mixed.virtual_stages[1].forward) == Time::ms(2) + Time::ms(7));
    CHECK(mixed.devices[0].optimizer_step == Time::ms(9));
}

TEST_CASE("overlap_grad_reduce: gradient buckets reduced during the last backward pass") {
    // One stage, two data-parallel replicas on two GPUs joined by a 100 GB/s, 1 us link, one
    // microbatch each: F = 1 ms, B = 4 ms. A 2-GPU ring all-reduce of S bytes takes 2 steps of
    // 1 us latency plus S / 100 GB/s (each direction carries 2(n-1)/n x S = S), so without
    // overlap the iteration is F + B + 2 us + G / 100 GB/s for the layer's G gradient bytes.
    auto spec =
        test::profile_experiment(1, 2, 1, Time::ms(1), Time::ms(4), network::Fidelity::Flow);
    spec.cluster = test::chain_cluster(2);
    spec.layout.dp = 2;
    api::RunOptions opt;
    opt.schedule = "1f1b";
    const auto plain = api::run(spec, opt).summary;
    const auto device = workload::plan_iteration(spec, 1, false, [](int) { return 0; }).devices[0];
    const double g = static_cast<double>(device.dp_gradient_bytes.value);
    const auto params = device.dp_parameters;
    REQUIRE(g > 1e6);
    // bf16 (the default): gradients are reduced in fp32, 4 bytes per parameter.
    CHECK(g == doctest::Approx(4.0 * static_cast<double>(params)));
    CHECK(plain.iteration_time_s == doctest::Approx(5e-3 + 2e-6 + g / 1e11).epsilon(1e-9));

    // Megatron's default bucket, max(40M, 1M x dp) parameters, holds this layer's G / 4
    // parameters whole: one bucket, ready at the end of the pass, the same time.
    spec.layout.overlap_grad_reduce = true;
    CHECK(api::run(spec, opt).summary.iteration_time_s == plain.iteration_time_s);

    // Buckets of a quarter of the parameters: ready at B/4, B/2, 3B/4 and B. Each takes 2 us +
    // G / 4 / 100 GB/s = about 65 us, well inside the 1 ms between them, so only the last is
    // exposed: the iteration shrinks by the other three buckets' bytes over 100 GB/s.
    spec.layout.ddp_bucket_size = (params + 3) / 4;
    const auto overlapped = api::run(spec, opt).summary;
    const double last_bucket =
        g - std::llround(g * 3.0 * static_cast<double>(spec.layout.ddp_bucket_size) /
                         static_cast<double>(params));
    CHECK(overlapped.iteration_time_s ==
          doctest::Approx(5e-3 + 2e-6 + last_bucket / 1e11).epsilon(1e-9));

    // With B = 40 us the buckets are ready every 10 us but take about 65 us each: they queue on
    // the one communicator and run back to back from the first one's readiness at B x f0, f0 =
    // bucket / parameters: F + B f0 + 4 x 2 us + G / 100 GB/s (the four buckets' bytes sum to G).
    spec.compute.profile.layer_backward = Time::us(40);
    const double f0 =
        static_cast<double>(spec.layout.ddp_bucket_size) / static_cast<double>(params);
    CHECK(api::run(spec, opt).summary.iteration_time_s ==
          doctest::Approx(1e-3 + 40e-6 * f0 + 8e-6 + g / 1e11).epsilon(1e-9));
}

TEST_CASE("isolated_collective_time: a 2-GPU ring all-reduce in closed form") {
    // Ring all-reduce of S = 1 MB on n = 2 GPUs over one 100 GB/s, 1 us link each way: 2(n-1) = 2
    // steps of S/n = 0.5 MB, each 1 us + 0.5e6 / 1e11 s = 6 us: 12 us.
    const auto cluster = test::chain_cluster(2);
    const Time t = network::isolated_collective_time(*cluster, network::NetworkConfig{},
                                                     network::CollectiveKind::AllReduce, {0, 1},
                                                     Bytes{1'000'000});
    CHECK(t == Time::us(12));
    // The reverse ring order is the same ring.
    CHECK(network::isolated_collective_time(*cluster, network::NetworkConfig{},
                                            network::CollectiveKind::AllReduce, {1, 0},
                                            Bytes{1'000'000}) == t);
}

TEST_CASE("passes carry their step times: compute from the plan, collectives costed alone") {
    // tp 2 x cp 2 on 4 fully connected GPUs (one stage, one replica): rank = t + 2c, so worker 0
    // is GPUs 0-3, member m = 2c + t; its TP group (c = 0) is {0, 1}, its CP group (t = 0) {0, 2}.
    auto spec =
        test::profile_experiment(1, 2, 2, Time::us(1), Time::us(2), network::Fidelity::Flow);
    // One link each way per pair, 100 GB/s / |i - j|, so that a collective on the wrong pair of
    // GPUs takes a different time.
    spec.cluster = test::mesh_cluster(4, spec.cluster->gpu_model(0), [](int i, int j) {
        return Bandwidth{100e9 / std::abs(i - j)};
    });
    spec.layout.tp = 2;
    spec.layout.cp = 2;
    // The all-gather of keys and values: every collective stands alone (p2p's ring exchanges
    // overlap the attention blocks; tests/workload/test_context_parallel.cpp).
    spec.layout.cp_comm_type = workload::CpCommType::AllGather;
    spec.model.head_dim = 128;  // hidden 1024 / 8 heads (load_experiment derives it)
    spec.compute.kind = workload::ComputeSpec::Kind::Roofline;
    auto sched = schedule::make_schedule("1f1b");
    const schedule::PipelineShape shape{1, 2, 1};
    const auto plan = workload::plan_iteration(spec, 1, false, [](int) { return 0; });
    replay::Replay replay(spec, plan, *sched, shape);
    CHECK(replay.group(0, 0, workload::GroupKind::Tp).gpus == std::vector<int>{0, 1});
    CHECK(replay.group(0, 0, workload::GroupKind::Cp).gpus == std::vector<int>{0, 2});
    CHECK(replay.group(0, 3, workload::GroupKind::Cp).gpus == std::vector<int>{1, 3});

    struct Recorder final : replay::ReplayObserver {
        std::vector<replay::PassRecord> passes;
        void on_pass(const replay::PassRecord& p) override { passes.push_back(p); }
    } recorder;
    replay.add_observer(recorder);
    replay.run();
    REQUIRE(recorder.passes.size() == 4);  // F and B of two microbatches
    int tp_steps = 0, cp_steps = 0;
    for (const auto& p : recorder.passes) {
        const auto& steps = p.plan->steps;
        REQUIRE(p.step_times.size() == steps.size());
        Time compute = Time::zero(), collective = Time::zero();
        for (std::size_t i = 0; i < steps.size(); ++i) {
            const auto& s = steps[i];
            if (s.kind == workload::Step::Kind::Compute) {
                CHECK(p.step_times[i] == s.duration);
                compute += s.duration * s.repeat;
                continue;
            }
            const std::vector<int> group = s.group == workload::GroupKind::Tp
                                               ? std::vector<int>{0, 1}
                                               : std::vector<int>{0, 2};
            (s.group == workload::GroupKind::Tp ? tp_steps : cp_steps) += 1;
            CHECK(p.step_times[i] == network::isolated_collective_time(
                                         *spec.cluster, spec.network, s.collective, group, s.size));
            CHECK(p.step_times[i] > Time::zero());
            collective += p.step_times[i] * s.repeat;
        }
        CHECK(p.compute == compute);
        CHECK(p.collective == collective);
        CHECK(p.end - p.start == compute + collective);
    }
    // The roofline layer has TP all-reduces (or gathers) and CP all-gathers of K and V.
    CHECK(tp_steps > 0);
    CHECK(cp_steps > 0);
}

TEST_CASE("overlapped F&B: the longest of each chain and the shared compute and network") {
    using cs::replay::overlapped_time;
    // Compute-bound: F = 10 compute + 4 all-to-all, B = 20 + 6, interference 0.25. Chains 14
    // and 26; C = 30, A = 10 < C (1 + i) = 37.5, so the collectives hide in the compute, which
    // runs 1.25x as long while they run: C + A i / (1 + i) = 30 + 10 x 0.2 = 32. Beyond C: 2 of
    // slowed compute, nothing exposed.
    auto t = overlapped_time(30, 10, 14, 26, 0.25);
    CHECK(t.group == 32);
    CHECK(t.slowed == 2);
    CHECK(t.exposed == 0);
    // Communication-bound: F = 2 + 10, B = 3 + 10, no interference. Chains 12 and 13; A = 20 >=
    // C = 5, so the compute hides in the 20 of communication: 15 exposed beyond C.
    t = overlapped_time(5, 20, 12, 13, 0.0);
    CHECK(t.group == 20);
    CHECK(t.slowed == 0);
    CHECK(t.exposed == 15);
    // Chain-bound: F = 10 + 0, B = 1 + 12. Shared bound max(C = 11, A = 12) = 12, but B's own
    // chain (its compute then its collective) takes 13: 2 exposed beyond C.
    t = overlapped_time(11, 12, 10, 13, 0.0);
    CHECK(t.group == 13);
    CHECK(t.exposed == 2);
    // Nothing to hide: the group is the compute alone, as the two passes back to back.
    t = overlapped_time(30, 0, 10, 20, 0.25);
    CHECK(t.group == 30);
    CHECK(t.slowed + t.exposed == 0);
}

TEST_CASE("exposed_by_kind: a pass's collectives by kind, summing to its exposed time exactly") {
    workload::CommTimes kinds{};
    const auto at = [&](workload::CommKind k) -> Time& {
        return kinds[static_cast<std::size_t>(k)];
    };
    at(workload::CommKind::Tp) = Time::ps(30);
    at(workload::CommKind::Ep) = Time::ps(10);
    replay::PassRecord r;
    r.collective_kinds = &kinds;
    const auto of = [](const workload::CommTimes& t, workload::CommKind k) {
        return t[static_cast<std::size_t>(k)].count_ps();
    };
    // As costed: 30 ps of TP and 10 ps of EP collectives, and 5 ps waiting for ZeRO-3 gathers
    // (data parallelism).
    r.collective = Time::ps(40);
    r.gather_wait = Time::ps(5);
    auto got = replay::exposed_by_kind(r);
    CHECK(of(got, workload::CommKind::Tp) == 30);
    CHECK(of(got, workload::CommKind::Ep) == 10);
    CHECK(of(got, workload::CommKind::Dp) == 5);
    CHECK(of(got, workload::CommKind::Cp) + of(got, workload::CommKind::Pipeline) == 0);
    // An overlapped group left 20 of the 40 exposed: shared 3 : 1, TP round(20 x 30/40) = 15,
    // EP 20 - 15 = 5.
    r.collective = Time::ps(20);
    r.gather_wait = Time::zero();
    got = replay::exposed_by_kind(r);
    CHECK(of(got, workload::CommKind::Tp) == 15);
    CHECK(of(got, workload::CommKind::Ep) == 5);
    // Three equal kinds sharing 2 ps: cumulative rounding gives round(2/3) = 1, round(4/3) - 1 =
    // 0 and 2 - 1 = 1: the parts add up where rounding each alone (1 + 1 + 1) would not.
    kinds = {};
    at(workload::CommKind::Tp) = at(workload::CommKind::Cp) = at(workload::CommKind::Ep) =
        Time::ps(7);
    r.collective = Time::ps(2);
    got = replay::exposed_by_kind(r);
    CHECK(of(got, workload::CommKind::Tp) == 1);
    CHECK(of(got, workload::CommKind::Cp) == 0);
    CHECK(of(got, workload::CommKind::Ep) == 1);
    // No collective time: only the gather wait.
    r.collective = Time::zero();
    r.gather_wait = Time::ps(9);
    got = replay::exposed_by_kind(r);
    CHECK(of(got, workload::CommKind::Dp) == 9);
    CHECK(of(got, workload::CommKind::Tp) == 0);
}

TEST_CASE("a worker's running passes: first in, first out through the ring, fresh records") {
    // Capacity 4 (an overlapped group's most). Passes 1, 2, 3 in, 1 out, 4 and 5 in: the ring
    // holds 2, 3, 4, 5 from its second slot round to its first; a fifth is refused. A record
    // taken into a slot that held pass 1 comes back default-constructed, not as pass 1.
    replay::RunningPasses running;
    static_assert(replay::RunningPasses::kCapacity == 4);
    CHECK(running.empty());
    for (std::uint64_t id : {1, 2, 3}) {
        auto& r = running.emplace_back();
        CHECK(r.id == 0);
        r.id = id;
        r.microbatch = 7;
    }
    CHECK(running.front().id == 1);
    running.pop_front();
    for (std::uint64_t id : {4, 5}) {
        auto& r = running.emplace_back();
        CHECK(r.microbatch == 0);  // slot 0 held pass 1 (microbatch 7) before pass 5
        r.id = id;
    }
    REQUIRE(running.size() == 4);
    for (std::size_t k = 0; k < 4; ++k)
        CHECK(running[k].id == k + 2);
    CHECK_THROWS_AS(running.emplace_back(), SimulationError);
    while (!running.empty())
        running.pop_front();
    running.emplace_back().id = 6;
    CHECK(running.front().id == 6);
    running.clear();
    CHECK(running.size() == 0);
}
