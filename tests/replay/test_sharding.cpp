// Sharded data parallelism (parallelism.sharding: ZeRO-1/2/3, HSDP) in the replay: the units'
// all-gathers and reduce-scatters as events on the network, their overlap with compute, and the
// iteration times they give, derived by hand.
#include <doctest/doctest.h>

#include "replay/replay.hpp"
#include "session/run.hpp"
#include "test_support.hpp"
#include "workload/flops.hpp"
#include "workload/plan.hpp"

using namespace cs;

namespace {

// One stage, dp = 2 replicas on two GPUs joined by a 100 GB/s, 1 us link, one microbatch each,
// two layers of h = 1024 (no bias, no embedding): F = 1 ms and B = 2 ms per layer.
workload::ExperimentSpec two_replicas(workload::Sharding sharding) {
    auto spec =
        test::profile_experiment(1, 2, 2, Time::ms(1), Time::ms(2), network::Fidelity::Flow);
    spec.cluster = test::chain_cluster(2);
    spec.model.head_dim = 128;  // hidden 1024 / 8 heads (load_experiment derives it)
    spec.layout.dp = 2;
    spec.layout.sharding = sharding;
    spec.layout.distributed_optimizer = sharding != workload::Sharding::None;
    return spec;
}

// n GPUs, every pair joined by its own 100 GB/s, 1 us link (GPUs do not forward traffic).
std::shared_ptr<topology::Cluster> full_cluster(int n) {
    topology::ClusterBuilder b;
    const int model = b.add_gpu_model(test::chain_cluster(2)->gpu_model(0));
    std::vector<topology::DeviceIndex> ids;
    for (int g = 0; g < n; ++g) {
        topology::Device d;
        d.id = "gpu" + std::to_string(g);
        d.kind = topology::DeviceKind::Gpu;
        d.model = model;
        ids.push_back(b.add_device(d));
    }
    for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j)
            b.add_link(ids[i], ids[j], topology::LinkKind::NvLink, Bandwidth{100e9}, Time::us(1));
    return std::make_shared<topology::Cluster>(b.build());
}

double run_time(const workload::ExperimentSpec& spec) {
    api::RunOptions opt;
    opt.schedule = "1f1b";
    return api::run(spec, opt).summary.iteration_time_s;
}

// Transfers of DP collectives, as observers see them.
struct DpRecorder final : replay::ReplayObserver {
    std::vector<replay::TransferRecord> dp;
    std::vector<replay::PassRecord> passes;
    void on_transfer(const replay::TransferRecord& t) override {
        using K = replay::TransferRecord::Kind;
        if (t.kind == K::DpGradients || t.kind == K::DpParameters) dp.push_back(t);
    }
    void on_pass(const replay::PassRecord& p) override { passes.push_back(p); }
};

}  // namespace

TEST_CASE(
    "ZeRO-3: a unit's all-gather moves its 16-bit parameters, its reduce-scatter the "
    "gradients") {
    auto spec = two_replicas(workload::Sharding::Parameters);
    // A layer of h = 1024 without biases: attention 4h^2, MLP 2 x h x 4h = 8h^2, two LayerNorms
    // of 2h: P = 12h^2 + 4h = 12,582,912 + 4,096 = 12,587,008 parameters.
    const std::int64_t p = 12'587'008;
    REQUIRE(workload::layer_parameter_count(spec.model, false) == p);
    // Two units, one per layer; the last stage's final LayerNorm (gamma and beta, 2h = 2048)
    // belongs to the last unit.
    const auto plan = workload::plan_iteration(spec, 1, false, [](int) { return 0; });
    CHECK(plan.virtual_stages[0].unit_parameters == std::vector<std::int64_t>{p, p + 2048});

    DpRecorder rec;
    api::RunOptions opt;
    opt.schedule = "1f1b";
    opt.attach = [&](replay::Replay& r) { r.add_observer(rec); };
    api::run(spec, opt);
    // Per replica pair: forward gathers both units, backward gathers both again
    // (reshard_after_forward), and reduce-scatters both units' gradients: 4 all-gathers of
    // 2 bytes x P = 25,174,016 bytes (bf16 weights; + 2 x 2048 for the last unit) and 2
    // reduce-scatters of 4 bytes x P = 50,348,032 bytes (gradients reduced in fp32; + 4 x 2048).
    // No parameter all-gather after the step.
    int gathers = 0, reduces = 0;
    for (const auto& t : rec.dp) {
        CHECK(t.replica_count == 2);
        CHECK(t.scope == replay::TransferRecord::Scope::Shard);
        if (t.kind == replay::TransferRecord::Kind::DpParameters) {
            ++gathers;
            CHECK((t.bytes.value == 25'174'016 || t.bytes.value == 25'174'016 + 2 * 2048));
        } else {
            ++reduces;
            CHECK((t.bytes.value == 50'348'032 || t.bytes.value == 50'348'032 + 4 * 2048));
        }
    }
    CHECK(gathers == 4);
    CHECK(reduces == 2);

    // Kept gathered from forward to backward: the backward's two all-gathers are gone.
    spec.layout.reshard_after_forward = false;
    rec.dp.clear();
    api::run(spec, opt);
    gathers = 0;
    for (const auto& t : rec.dp)
        gathers += t.kind == replay::TransferRecord::Kind::DpParameters;
    CHECK(gathers == 2);
}

TEST_CASE("ZeRO-0/1/2/3: iteration times with the collectives exposed or hidden, by hand") {
    // Units (previous test): P0 = P parameters (layer 0), P1 = P + 2048 (layer 1 and the final
    // norm).
    const double P0 = 12'587'008, P1 = P0 + 2048;
    // On 2 GPUs every collective used here is one ring step of S/2 bytes each way (two for the
    // all-reduce), each step 1 us of latency plus S/2 over 100 GB/s:
    //   a_i = all-gather of unit i's 2 P_i bytes:      1 us + P_i / 1e11 s
    //   r_i = reduce-scatter of unit i's 4 P_i bytes:  1 us + 2 P_i / 1e11 s
    const auto cluster = test::chain_cluster(2);
    const auto isolated = [&](network::CollectiveKind k, double bytes) {
        return network::isolated_collective_time(*cluster, network::NetworkConfig{}, k, {0, 1},
                                                 Bytes{static_cast<std::int64_t>(bytes)})
            .seconds();
    };
    const double a0 = 1e-6 + P0 / 1e11, a1 = 1e-6 + P1 / 1e11, r0 = 1e-6 + 2 * P0 / 1e11;
    CHECK(isolated(network::CollectiveKind::AllGather, 2 * P0) ==
          doctest::Approx(a0).epsilon(1e-9));
    CHECK(isolated(network::CollectiveKind::ReduceScatter, 4 * P0) ==
          doctest::Approx(r0).epsilon(1e-9));
    // Compute: F = 2 x 1 ms and B = 2 x 2 ms: 6 ms on each replica. The stage's gradients are
    // 4 (P0 + P1) bytes, its weights 2 (P0 + P1).
    const double compute = 6e-3, both = P0 + P1;

    // ZeRO-0 (DDP): one all-reduce of the gradients at the end: 2 steps of 1 us + 2(P0+P1)/1e11.
    CHECK(run_time(two_replicas(workload::Sharding::None)) ==
          doctest::Approx(compute + 2 * (1e-6 + 2 * both / 1e11)).epsilon(1e-9));
    // ZeRO-1 (distributed optimizer): a reduce-scatter of the gradients, then after the step an
    // all-gather of the updated weights: (1 us + 2(P0+P1)/1e11) + (1 us + (P0+P1)/1e11).
    const double weights_gather = 1e-6 + both / 1e11;
    CHECK(run_time(two_replicas(workload::Sharding::Optimizer)) ==
          doctest::Approx(compute + (1e-6 + 2 * both / 1e11) + weights_gather).epsilon(1e-9));
    // ZeRO-2: each unit's gradients reduce-scattered as its backward ends; unit 1's (at 4 ms)
    // runs under unit 0's 2 ms backward, unit 0's is exposed (r0); then the weights' all-gather
    // after the step as in ZeRO-1.
    CHECK(run_time(two_replicas(workload::Sharding::Gradients)) ==
          doctest::Approx(compute + r0 + weights_gather).epsilon(1e-9));
    // ZeRO-3 with prefetch: each pass waits for its first unit's all-gather (the forward for
    // unit 0, a0; the backward for unit 1, a1); the second unit's, issued as the first starts,
    // ends long before it is needed; the last reduce-scatter (unit 0) is exposed. No all-gather
    // after the step: 6 ms + a0 + a1 + r0.
    auto spec = two_replicas(workload::Sharding::Parameters);
    api::RunOptions opt;
    opt.schedule = "1f1b";
    const auto prefetched = api::run(spec, opt).summary;
    const double hidden = compute + a0 + a1 + r0;
    CHECK(prefetched.iteration_time_s == doctest::Approx(hidden).epsilon(1e-9));
    // Exposed communication: the two waits inside passes and the last reduce-scatter.
    CHECK(prefetched.exposed_comm_fraction ==
          doctest::Approx((a0 + a1 + r0) / hidden).epsilon(1e-6));
    // Without prefetch every all-gather is exposed. The backward's second all-gather (unit 0)
    // starts with unit 1's reduce-scatter and shares the link with it (max-min: 50 GB/s each
    // until the gather's P0 bytes per direction are through): a0' = 1 us + 2 P0 / 1e11. The
    // forward pays a0 + a1, the backward a1 + a0', the end r0.
    spec.layout.shard_prefetch = false;
    const double contended = 1e-6 + 2 * P0 / 1e11;
    CHECK(run_time(spec) == doctest::Approx(compute + a0 + 2 * a1 + contended + r0).epsilon(1e-9));
}

TEST_CASE("HSDP: shard groups of 2 inside dp = 4, all-reduce of the shards across them") {
    // Four fully connected GPUs, dp = 4 replicas of one stage, shard_size = 2: shard groups {0, 1}
    // and {2, 3} (consecutive replicas), replica groups {0, 2} and {1, 3}.
    auto spec = two_replicas(workload::Sharding::Parameters);
    spec.cluster = full_cluster(4);
    spec.layout.dp = 4;
    spec.layout.shard_size = 2;
    spec.training.global_batch_size = 4;                     // one microbatch per replica
    const std::int64_t p = 12'587'008, both = 2 * p + 2048;  // the two units (first test)
    DpRecorder rec;
    api::RunOptions opt;
    opt.schedule = "1f1b";
    opt.attach = [&](replay::Replay& r) { r.add_observer(rec); };
    const auto s = api::run(spec, opt).summary;
    int gathers = 0, reduces = 0, all_reduces = 0;
    for (const auto& t : rec.dp) {
        if (t.scope == replay::TransferRecord::Scope::Replica) {
            // The stage's gradient shard: 4 bytes x (P0 + P1) / 2, across the 2 groups.
            ++all_reduces;
            CHECK(t.bytes.value == 4 * both / 2);
            continue;
        }
        // Unit collectives run inside one shard group: replicas {0, 1} or {2, 3}.
        CHECK(t.scope == replay::TransferRecord::Scope::Shard);
        CHECK(t.replica_count == 2);
        CHECK((t.replica_first == 0 || t.replica_first == 2));
        (t.kind == replay::TransferRecord::Kind::DpParameters ? gathers : reduces) += 1;
    }
    // Per shard group 4 all-gathers and 2 reduce-scatters (as with dp = 2); one all-reduce.
    CHECK(gathers == 8);
    CHECK(reduces == 4);
    CHECK(all_reduces == 1);
    // Memory: the model states are sharded over the group of 2, not over dp = 4:
    // optimizer states 12 bytes x (P0 + P1) / 2.
    CHECK(static_cast<double>(s.memory.optimizer_states.value) ==
          doctest::Approx(12.0 * static_cast<double>(both) / 2));
}

TEST_CASE("ZeRO-3 with pipeline parallelism and split backward schedules completes") {
    // pp = 2 with 1f1b, gpipe and a zero-bubble schedule (split backward), dp = 2: every stage
    // gathers its own units; the run ends (no deadlock) with the same compute on every GPU.
    for (const char* schedule : {"1f1b", "gpipe", "zb-h1"}) {
        CAPTURE(schedule);
        auto spec = test::profile_experiment(2, 8, 4, Time::us(300), Time::us(600),
                                             network::Fidelity::Flow);
        spec.cluster = full_cluster(4);
        spec.model.head_dim = 128;
        spec.layout.dp = 2;
        spec.layout.sharding = workload::Sharding::Parameters;
        spec.layout.distributed_optimizer = true;
        if (std::string(schedule) == "zb-h1") {
            spec.compute.profile.layer_backward.reset();
            spec.compute.profile.layer_backward_input = Time::us(300);
            spec.compute.profile.layer_backward_weight = Time::us(300);
        }
        api::RunOptions opt;
        opt.schedule = schedule;
        const auto s = api::run(spec, opt).summary;
        // 4 microbatches per replica x 2 layers per stage x (300 + 600) us = 7.2 ms of compute.
        CHECK(s.iteration_time_s > 7.2e-3);
        for (const auto& st : s.stages)
            CHECK(st.busy_s == doctest::Approx(7.2e-3).epsilon(1e-9));
    }
}
