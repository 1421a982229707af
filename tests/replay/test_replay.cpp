#include <doctest/doctest.h>

#include "api/run.hpp"
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
    CHECK(api::run(spec, opt).summary.iteration_time_s == doctest::Approx(63.94304e-6).epsilon(1e-9));
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
