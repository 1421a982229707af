// The summary reports facts owned elsewhere: per-stage activation memory from the memory model
// (which knows the schedule's placement of virtual stages), links from the link accounting.
#include <doctest/doctest.h>

#include <algorithm>

#include "../replay/test_support.hpp"
#include "cli/simulate.hpp"
#include "schedule/schedule.hpp"
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
        const auto plan =
            workload::plan_iteration(spec, chunks, sched->splits_backward(), device_of);
        const int vstages = 2 * chunks;
        // The last virtual stage carries the output layer's logits on top of the same layers as
        // every other chunk, so it holds the most activation memory per microbatch.
        for (int vs = 0; vs + 1 < vstages; ++vs)
            REQUIRE(plan.virtual_stages[static_cast<std::size_t>(vs)].activation_memory <
                    plan.virtual_stages.back().activation_memory);

        cli::SimulateOptions opt;
        opt.schedule = name;
        const auto summary = cli::simulate(spec, opt);
        REQUIRE(summary.stages.size() == 2);
        // Expected, per stage s: the largest chunk activation among the virtual stages the
        // schedule places on s, times the chunk activations s holds at its peak.
        for (int s = 0; s < 2; ++s) {
            std::int64_t per_chunk = 0;
            for (int vs = 0; vs < vstages; ++vs)
                if (device_of(vs) == s)
                    per_chunk = std::max(
                        per_chunk,
                        plan.virtual_stages[static_cast<std::size_t>(vs)].activation_memory.value);
            const int inflight = schedule::peak_inflight_microbatches(*sched, shape, s);
            CHECK(summary.stages[static_cast<std::size_t>(s)].peak_inflight_microbatches ==
                  inflight);
            CHECK(summary.stages[static_cast<std::size_t>(s)].peak_activation_bytes ==
                  per_chunk * inflight);
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
