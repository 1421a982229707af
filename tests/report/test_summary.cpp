// The summary reports facts owned elsewhere: per-stage activation memory from the memory model
// (which knows the schedule's placement of virtual stages), links from the link accounting.
#include <doctest/doctest.h>

#include <algorithm>

#include "../replay/test_support.hpp"
#include "network/accelerator.hpp"
#include "replay/replay.hpp"
#include "report/summary.hpp"
#include "schedule/schedule.hpp"
#include "session/run.hpp"
#include "workload/memory.hpp"
#include "workload/plan.hpp"

using namespace cs;

namespace {

// Two pipeline stages of a GPT with a vocabulary (embedding on the first virtual stage, output
// layer on the last), roofline compute, so that the chunk holding the output layer keeps more
// activation memory per microbatch (its logits) than the others.
workload::ExperimentSpec two_stage_gpt_with_vocabulary() {
    auto spec =
        test::profile_experiment(2, 8, 8, Time::us(1), Time::us(2), network::Fidelity::Ideal);
    spec.model.vocab_size = 50304;
    spec.compute.kind = workload::ComputeSpec::Kind::Roofline;
    spec.layout.vpp = 2;  // for interleaved; schedules without virtual stages ignore it
    return spec;
}

}  // namespace

TEST_CASE(
    "per-stage activation memory follows the schedule's placement (zb-v puts the output "
    "layer on stage 0)") {
    const auto spec = two_stage_gpt_with_vocabulary();
    for (const auto& name : schedule::schedule_names()) {
        CAPTURE(name);
        auto sched = schedule::make_schedule(name);
        REQUIRE(sched);
        const int chunks = sched->chunks_for(spec.layout.vpp);
        const schedule::PipelineShape shape{2, 8, chunks};
        if (!sched->check(shape).empty()) continue;
        const auto device_of = [&](int vs) { return sched->place(shape, vs, 0).device; };
        // As api::run: dualpipe (two model copies) splits the layers over one copy's stages,
        // and device s also holds the stage placed on device 1 - s.
        const int copies = sched->model_copies();
        const auto plan = workload::plan_iteration(spec, chunks / copies, sched->splits_backward(),
                                                   device_of, copies);
        const int vstages = sched->virtual_stages(shape);
        const auto holds = [&](int vs, int s) {
            return device_of(vs) == s || (copies == 2 && device_of(vs) == 1 - s);
        };
        // The last virtual stage carries the output layer's logits on top of the same layers as
        // every other chunk, so it holds the most activation memory per microbatch.
        for (int vs = 0; vs + 1 < vstages; ++vs)
            REQUIRE(plan.virtual_stages[static_cast<std::size_t>(vs)].activation_memory <
                    plan.virtual_stages.back().activation_memory);

        api::RunOptions opt;
        opt.schedule = name;
        const auto summary = api::run(spec, opt).summary;
        REQUIRE(summary.stages.size() == 2);
        // Expected, per stage s: walking the stage's op order, the most bytes held at once, each
        // forward adding its own chunk's activation memory until the pass that releases it (the
        // backward, or the weight-gradient pass of split schedules); at most the largest chunk
        // times the peak count of chunks held, at least the smallest times it.
        const auto bytes_of = [&](int vs) {
            return plan.virtual_stages[static_cast<std::size_t>(vs)].activation_memory.value;
        };
        const auto releasing =
            sched->splits_backward() ? schedule::Pass::BackwardWeight : schedule::Pass::Backward;
        for (int s = 0; s < 2; ++s) {
            std::int64_t largest = 0, smallest = bytes_of(vstages - 1), held = 0, peak = 0;
            for (int vs = 0; vs < vstages; ++vs)
                if (holds(vs, s)) {
                    largest = std::max(largest, bytes_of(vs));
                    smallest = std::min(smallest, bytes_of(vs));
                }
            for (const auto& op : sched->order(shape, s)) {
                const int vs = sched->virtual_stage(shape, s, op.chunk, op.microbatch);
                if (op.pass == schedule::Pass::Forward) peak = std::max(peak, held += bytes_of(vs));
                if (op.pass == releasing) held -= bytes_of(vs);
            }
            const int inflight = schedule::peak_inflight_microbatches(*sched, shape, s);
            CHECK(summary.stages[static_cast<std::size_t>(s)].peak_inflight_microbatches ==
                  inflight);
            // The stage with the output layer adds the loss's transient buffers at its backward
            // (Megatron-LM's cross entropy: the logits' 16-bit gradient, memory.hpp).
            const auto loss = workload::loss_buffer_bytes(spec.model, spec.layout, spec.training,
                                                          workload::Framework::Megatron);
            const std::int64_t transient = holds(vstages - 1, s) ? loss.transient.value : 0;
            CHECK(summary.stages[static_cast<std::size_t>(s)].peak_activation_bytes ==
                  peak + transient);
            CHECK(peak <= largest * inflight);
            CHECK(peak >= smallest * inflight);
        }
        // The output layer's stage: the last for linear placements, stage 0 for V-shaped ones
        // (zb-v, dualpipev: virtual stages 0 1 | 1 0, so virtual stage 3 is on device 0).
        const int output_stage = device_of(vstages - 1);
        if (name == "zb-v") {
            CHECK(output_stage == 0);
            // ZB-V holds the same number of chunk activations on both devices at its peak (the V
            // balances them), so the stage with the output layer needs more.
            CHECK(summary.stages[0].peak_inflight_microbatches ==
                  summary.stages[1].peak_inflight_microbatches);
            CHECK(summary.stages[0].peak_activation_bytes >
                  summary.stages[1].peak_activation_bytes);
        }
        if (name == "1f1b" || name == "gpipe") CHECK(output_stage == 1);
    }
}

TEST_CASE("link accounting from the network's notifications, per fidelity") {
    // One 100 GB/s, 1 us link each way (link 0: gpu0 -> gpu1, link 1 back). Two sends of 0.5 GB and
    // 1 GB start together.
    //   flow: both run from 1 us at 50 GB/s; the small one ends after 10 ms, the big one has
    //         0.5 GB left at 100 GB/s: 5 ms more. busy 15 ms, shared 10 ms, 2 flows at once.
    //   analytical: no sharing; each holds the link for its own time, 5 ms + 10 ms = 15 ms busy,
    //         nothing shared or concurrent.
    //   ideal: free; the bytes still count.
    const auto cluster = test::chain_cluster(2);
    struct Expect {
        network::Fidelity fidelity;
        Time busy, shared;
        int max_flows;
    };
    for (const auto& e : {Expect{network::Fidelity::Flow, Time::ms(15), Time::ms(10), 2},
                          Expect{network::Fidelity::Analytical, Time::ms(15), Time::zero(), 0},
                          Expect{network::Fidelity::Ideal, Time::zero(), Time::zero(), 0}}) {
        CAPTURE(network::fidelity_name(e.fidelity));
        Simulation sim;
        network::NetworkConfig config;
        config.fidelity = e.fidelity;
        auto net = network::make_network(sim, *cluster, config);
        struct Ignore final : network::TransferClient {
            void on_transfer_done(Simulation&, std::uint64_t) override {}
        } client;
        net->set_client(&client);
        report::LinkAccounting links(cluster->links().size());
        net->add_observer(&links);
        net->send(0, 1, Bytes{500'000'000}, 1);
        net->send(0, 1, Bytes{1'000'000'000}, 2);
        sim.run();
        REQUIRE(links.links().size() == 2);
        CHECK(links.links()[1].bytes == 0.0);
        const auto& l = links.links()[0];
        CHECK(l.bytes == 1.5e9);
        CHECK(l.busy == e.busy);
        CHECK(l.shared == e.shared);
        CHECK(l.max_concurrent_flows == e.max_flows);
    }
}

TEST_CASE(
    "link accounting from link tallies: the same sums, told at the flush; late ones hear flows") {
    // The flow case above's link 0 (100 GB/s, 1 us) on a network with fast paths whose totals
    // are held, as the replay's own network: an accounting added before any flow is told link
    // tallies at flush_link_totals() and nothing before. A (0.5 GB) alone: 5 ms; then, with a
    // second accounting added (flows were added, so it is told flow by flow), B (1 GB) alone:
    // 10 ms. First flush: the first has 1.5 GB, busy 15 ms, nothing shared, one flow at most;
    // the late one B's 1 GB, busy 10 ms. Then C (0.25 GB, 2.5 ms) and a second flush: the
    // tallies since the first are added, 1.75 GB and 17.5 ms.
    const auto cluster = test::chain_cluster(2);
    Simulation sim;
    network::NetworkConfig config;
    config.fidelity = network::Fidelity::Flow;
    network::KeptState kept(*cluster);
    auto net = network::make_network(sim, *cluster, config, &kept);
    network::Accelerator* accel = net->accelerator();
    REQUIRE(accel != nullptr);
    accel->hold_link_totals();
    struct Ignore final : network::TransferClient {
        void on_transfer_done(Simulation&, std::uint64_t) override {}
    } client;
    net->set_client(&client);
    report::LinkAccounting tallied(cluster->links().size()), late(cluster->links().size());
    net->add_observer(&tallied);
    net->send(0, 1, Bytes{500'000'000}, 1);
    sim.run();
    net->add_observer(&late);
    net->send(0, 1, Bytes{1'000'000'000}, 2);
    sim.run();
    CHECK(tallied.links()[0].bytes == 0.0);  // nothing told before the flush
    CHECK(late.links()[0].bytes == 1e9);
    accel->flush_link_totals();
    const auto first = tallied.links()[0];
    CHECK(first.bytes == 1.5e9);
    CHECK(first.busy == Time::ms(15));
    CHECK(first.shared == Time::zero());
    CHECK(first.max_concurrent_flows == 1);
    CHECK(tallied.links()[1].bytes == 0.0);
    const auto told = late.links()[0];
    CHECK(told.bytes == 1e9);
    CHECK(told.busy == Time::ms(10));
    CHECK(told.max_concurrent_flows == 1);
    net->send(0, 1, Bytes{250'000'000}, 3);
    sim.run();
    accel->flush_link_totals();
    CHECK(tallied.links()[0].bytes == 1.75e9);
    CHECK(tallied.links()[0].busy == Time::us(17'500));
    CHECK(late.links()[0].bytes == 1.25e9);
}

TEST_CASE("link accounting: busy and shared time follow the flows' starts and ends") {
    // Shared flows on link 3 alone (link 5 carries one of them too): A from 0 to 5 ms, B from
    // 2 ms to 9 ms, C from 4 ms to 6 ms. Link 3 has at least one flow from 0 to 9 ms (busy 9 ms)
    // and two or more from 2 to 6 ms (shared 4 ms), three at once from 4 to 5 ms. Link 5
    // carries B alone: busy 7 ms, nothing shared. Rate notifications in between change nothing
    // (they come at the same instants in a network; here one comes at 3 ms with a made-up count).
    report::LinkAccounting acc(8);
    const std::vector<topology::LinkId> a{3}, b{3, 5}, c{3};
    using Start = network::NetworkObserver::FlowStart;
    acc.on_flow_start(Start{Time::zero(), a, 1000, true, Time::zero()});
    acc.on_flow_start(Start{Time::ms(2), b, 2000, true, Time::zero()});
    const network::NetworkObserver::LinkRate rate{3, 1e9, 7};
    acc.on_link_rates(Time::ms(3), std::span(&rate, 1));
    acc.on_flow_start(Start{Time::ms(4), c, 500, true, Time::zero()});
    acc.on_flow_end(Time::ms(5), a);
    acc.on_flow_end(Time::ms(6), c);
    acc.on_flow_end(Time::ms(9), b);
    const auto l3 = acc.links()[3];
    CHECK(l3.bytes == 3500.0);
    CHECK(l3.busy == Time::ms(9));
    CHECK(l3.shared == Time::ms(4));
    CHECK(l3.max_concurrent_flows == 3);
    const auto l5 = acc.links()[5];
    CHECK(l5.bytes == 2000.0);
    CHECK(l5.busy == Time::ms(7));
    CHECK(l5.shared == Time::zero());
    CHECK(l5.max_concurrent_flows == 1);
    // It reads no rates, so a network whose observers are all like it gathers none.
    CHECK_FALSE(acc.wants_link_rates());
    // A reset forgets them.
    acc.reset();
    CHECK(acc.links()[3].busy == Time::zero());
    CHECK(acc.links()[3].max_concurrent_flows == 0);
}

TEST_CASE("the summary's links are the link accounting's") {
    // Two stages, one microbatch on two GPUs joined by a 100 GB/s, 1 us link each way: the
    // activation (b s h = 1 x 1024 x 1024 in 16 bits = 2,097,152 bytes) goes 0 -> 1, its
    // gradient 1 -> 0.
    auto spec =
        test::profile_experiment(2, 1, 2, Time::us(3), Time::us(7), network::Fidelity::Flow);
    api::RunOptions opt;
    opt.schedule = "1f1b";
    const auto s = api::run(spec, opt).summary;
    // Each direction carried one 2 MiB message, alone: busy for 2,097,152 / 1e11 s (the 1 us
    // latency passes before the flow starts).
    REQUIRE(s.links.size() == 2);
    for (const auto& l : s.links) {
        CHECK(l.bytes == 2097152.0);
        CHECK(l.busy_s == doctest::Approx(2097152 / 1e11).epsilon(1e-9));
        CHECK(l.shared_s == 0.0);
        CHECK(l.max_concurrent_flows == 1);
    }
}

TEST_CASE("exposed communication by kind: TP, CP and DP parts add up to the total") {
    // tp 2 x cp 2 x dp 2 on 8 fully connected GPUs (pp = 1), roofline compute, flow network: every
    // layer has TP collectives and CP gathers; the replicas wait for their gradient all-reduce
    // at the end (DP). No expert parallelism, no pipeline.
    auto spec =
        test::profile_experiment(1, 4, 2, Time::us(1), Time::us(2), network::Fidelity::Flow);
    spec.cluster = test::mesh_cluster(8, spec.cluster->gpu_model(0),
                                      [](int, int) { return Bandwidth{100e9}; });
    spec.layout.tp = 2;
    spec.layout.cp = 2;
    spec.layout.dp = 2;
    spec.model.head_dim = 128;
    spec.compute.kind = workload::ComputeSpec::Kind::Roofline;
    spec.compute.framework = workload::Framework::Megatron;
    auto sched = schedule::make_schedule("1f1b");
    const schedule::PipelineShape shape{1, 2, 1};
    const auto plan = workload::plan_iteration(spec, 1, false, [](int) { return 0; });
    replay::Replay replay(spec, plan, *sched, shape);
    report::MetricsObserver metrics(replay.workers().size());
    replay.add_observer(metrics);
    const auto result = replay.run();
    const auto idx = [](workload::CommKind k) { return static_cast<std::size_t>(k); };
    for (const auto& w : metrics.per_worker()) {
        // Each worker's parts sum to its exposed time to the picosecond.
        Time parts = Time::zero();
        for (Time t : w.exposed)
            parts += t;
        CHECK(parts == w.collective + w.idle_collective);
        CHECK(w.exposed[idx(workload::CommKind::Tp)] > Time::zero());
        CHECK(w.exposed[idx(workload::CommKind::Cp)] > Time::zero());
        // The DP part is the wait for the gradient all-reduce after the last backward.
        CHECK(w.exposed[idx(workload::CommKind::Dp)] == w.idle_collective);
        CHECK(w.idle_collective > Time::zero());
        CHECK(w.exposed[idx(workload::CommKind::Ep)] == Time::zero());
        CHECK(w.exposed[idx(workload::CommKind::Pipeline)] == Time::zero());
    }
    report::SummaryInputs in;
    in.spec = &spec;
    in.plan = &plan;
    in.replay = &replay;
    in.metrics = &metrics;
    in.result = result;
    in.schedule = "1f1b";
    const auto s = report::summarize(in);
    double sum = 0;
    for (double f : s.exposed_by_kind)
        sum += f;
    // Fractions of whole picoseconds: equal up to the rounding of the divisions and the sums.
    CHECK(sum == doctest::Approx(s.exposed_comm_fraction).epsilon(1e-12));
    CHECK(s.exposed_by_kind[idx(workload::CommKind::Tp)] > 0);
    CHECK(s.exposed_by_kind[idx(workload::CommKind::Cp)] > 0);
    CHECK(s.exposed_by_kind[idx(workload::CommKind::Dp)] > 0);
    const auto j = report::to_json(s);
    CHECK(j["exposed_tp_fraction"].get<double>() == s.exposed_by_kind[0]);
    CHECK(j["stages"][0]["exposed_pipeline_fraction"].get<double>() == 0.0);
}
