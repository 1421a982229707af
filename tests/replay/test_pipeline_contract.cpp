// Contract test over the schedules replayed as events: with equal stages and an ideal network the
// iteration time and bubble fraction equal their closed forms exactly, every microbatch runs each
// pass once per virtual stage, and no pass starts before the passes it depends on have ended.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "../schedule/toy_schedule.hpp"
#include "replay/replay.hpp"
#include "schedule/schedule.hpp"
#include "session/run.hpp"
#include "test_support.hpp"
#include "workload/plan.hpp"

using namespace cs;

namespace {

// Records every pass and checks the dependency rules of schedule.hpp as passes complete.
struct Checker final : replay::ReplayObserver {
    int virtual_stages = 1;
    std::map<std::tuple<int, int, int, int>, std::pair<Time, Time>> seen;  // (dp, vs, mb, pass)
    std::map<int, int> stage_of_worker;
    int violations = 0, duplicates = 0;
    void on_pass(const replay::PassRecord& p) override {
        const int pass = static_cast<int>(p.pass);
        auto key = std::make_tuple(0, p.virtual_stage, p.microbatch, pass);
        if (!seen.emplace(key, std::make_pair(p.start, p.end)).second) ++duplicates;
        auto ended_before = [&](int vs, int kind) {
            auto it = seen.find(std::make_tuple(0, vs, p.microbatch, kind));
            return it != seen.end() && it->second.second <= p.start;
        };
        using schedule::Pass;
        const int F = static_cast<int>(Pass::Forward), B = static_cast<int>(Pass::Backward),
                  Bi = static_cast<int>(Pass::BackwardInput);
        if (p.pass == Pass::Forward && p.virtual_stage > 0 && !ended_before(p.virtual_stage - 1, F))
            ++violations;
        if (p.pass == Pass::Backward || p.pass == Pass::BackwardInput) {
            if (!ended_before(p.virtual_stage, F)) ++violations;
            if (p.virtual_stage + 1 < virtual_stages && !ended_before(p.virtual_stage + 1, B) &&
                !ended_before(p.virtual_stage + 1, Bi))
                ++violations;
        }
        if (p.pass == Pass::BackwardWeight && !ended_before(p.virtual_stage, Bi)) ++violations;
    }
};

struct Outcome {
    report::Summary summary;
    Checker checker;
};

Outcome run(const workload::ExperimentSpec& spec, const schedule::Schedule& schedule) {
    const schedule::Schedule* sched = &schedule;
    const std::string name = schedule.name();
    const int chunks = sched->chunks_for(spec.layout.vpp);
    schedule::PipelineShape shape{spec.layout.pp, spec.training.microbatches(spec.layout), chunks};
    REQUIRE(sched->check(shape).empty());
    // As api::run: a schedule holding two model copies splits the layers over one copy.
    const int copies = sched->model_copies();
    auto plan = workload::plan_iteration(
        spec, chunks / copies, sched->splits_backward(),
        [&](int vs) { return sched->place(shape, vs, 0).device; }, copies);
    replay::Replay replay(spec, plan, *sched, shape);
    Outcome out;
    out.checker.virtual_stages = sched->virtual_stages(shape);
    report::MetricsObserver metrics(replay.workers().size());
    replay.add_observer(metrics);
    replay.add_observer(out.checker);
    const auto result = replay.run();
    report::SummaryInputs in{&spec, &plan, &replay, &metrics, result, name, {}};
    out.summary = report::summarize(in);
    return out;
}

Outcome run(const workload::ExperimentSpec& spec, const std::string& name) {
    auto sched = schedule::make_schedule(name);
    REQUIRE(sched);
    return run(spec, *sched);
}

// Replays `sched` on p in {1, 2, 4} stages and m in {2p, 4p} microbatches over a flow network:
// no pass starts before the passes it depends on have ended, and each runs exactly once.
void check_replays(const schedule::Schedule& sched) {
    const bool split = sched.splits_backward();
    for (int p : {1, 2, 4}) {
        for (int m : {2 * p, 4 * p}) {
            auto spec = test::profile_experiment(p, m, 4 * p, Time::us(3), Time::us(7),
                                                 network::Fidelity::Flow);
            if (split) {
                spec.compute.profile.layer_backward.reset();
                spec.compute.profile.layer_backward_input = Time::us(4);
                spec.compute.profile.layer_backward_weight = Time::us(3);
            }
            spec.layout.vpp = 2;
            CAPTURE(sched.name());
            CAPTURE(p);
            CAPTURE(m);
            const schedule::PipelineShape shape{p, m, sched.chunks_for(2)};
            // dualpipe takes an even p only.
            if (!sched.check(shape).empty()) continue;
            auto out = run(spec, sched);
            CHECK(out.checker.violations == 0);
            CHECK(out.checker.duplicates == 0);
            // One F and one B (or B and W) per (virtual stage, microbatch).
            CHECK(out.checker.seen.size() ==
                  static_cast<std::size_t>((split ? 3 : 2) * sched.virtual_stages(shape) * m));
        }
    }
}

}  // namespace

TEST_CASE("gpipe and 1f1b: (m+p-1)(F+B) and bubble (p-1)/(m+p-1), exactly") {
    // Per stage with one layer each: F = 3 us, B = 7 us. With an ideal network the first stage
    // starts at 0, the last microbatch's forward reaches the last stage after (p-1) F, and the
    // critical path is (m+p-1)(F+B) for both schedules.
    const Time f = Time::us(3), b = Time::us(7);
    for (const char* name : {"gpipe", "1f1b"}) {
        for (int p = 1; p <= 8; ++p) {
            for (int m = 1; m <= 32; ++m) {
                auto spec = test::profile_experiment(p, m, p, f, b, network::Fidelity::Ideal);
                auto out = run(spec, name);
                const Time expect = (f + b) * (m + p - 1);
                CAPTURE(name);
                CAPTURE(p);
                CAPTURE(m);
                CHECK(out.summary.iteration_time_s == Time::ps(expect.count_ps()).seconds());
                const double bubble = static_cast<double>(p - 1) / (m + p - 1);
                CHECK(out.summary.bubble_fraction == doctest::Approx(bubble).epsilon(1e-12));
                CHECK(std::abs(out.summary.bubble_fraction - bubble) < 1e-9);
                CHECK(out.summary.exposed_comm_fraction == 0.0);
                // Every (virtual stage, microbatch) has exactly one F and one B.
                CHECK(out.checker.seen.size() == static_cast<std::size_t>(2 * p * m));
                CHECK(out.checker.duplicates == 0);
                CHECK(out.checker.violations == 0);
            }
        }
    }
}

TEST_CASE("interleaved 1F1B: (v m + p - 1)(F+B)/v and bubble (p-1)/(v m + p - 1), exactly") {
    // One layer per chunk, so a whole stage's forward is F = v f and backward B = v b; the closed
    // form (v m + p - 1)(F + B)/v is (v m + p - 1)(f + b).
    // From p = 2: interleaving refuses one stage (as Megatron-Core does).
    const Time f = Time::us(3), b = Time::us(7);
    for (int p = 2; p <= 8; ++p) {
        for (int v = 2; v <= 4; ++v) {
            for (int m = p; m <= 4 * p; m += p) {
                auto spec = test::profile_experiment(p, m, p * v, f, b, network::Fidelity::Ideal);
                spec.layout.vpp = v;
                auto out = run(spec, "interleaved");
                CAPTURE(p);
                CAPTURE(v);
                CAPTURE(m);
                const Time expect = (f + b) * (v * m + p - 1);
                CHECK(out.summary.iteration_time_s == expect.seconds());
                const double bubble = static_cast<double>(p - 1) / (v * m + p - 1);
                CHECK(std::abs(out.summary.bubble_fraction - bubble) < 1e-9);
                CHECK(out.checker.seen.size() == static_cast<std::size_t>(2 * p * v * m));
                CHECK(out.checker.duplicates == 0);
                CHECK(out.checker.violations == 0);
            }
        }
    }
}

TEST_CASE("every schedule runs without deadlock and respects dependencies") {
    for (const auto& name : schedule::schedule_names())
        check_replays(*schedule::make_schedule(name));
}

TEST_CASE("a schedule registered by a test replays like the bundled ones") {
    schedule::ScheduleRegistry registry = schedule::ScheduleRegistry::builtin();
    registry.add({"gpipe-lifo", [] { return std::make_unique<schedule::test::GpipeLifo>(); }, ""});
    auto toy = schedule::make_schedule("gpipe-lifo", registry);
    REQUIRE(toy);
    check_replays(*toy);
    // Equal stages, ideal network: gpipe-lifo's critical path is GPipe's, (m+p-1)(F+B)
    // (tests/schedule/test_schedule_registry.cpp derives it), with F = 3 us, B = 7 us.
    const Time f = Time::us(3), b = Time::us(7);
    for (int p = 1; p <= 4; ++p) {
        for (int m = 1; m <= 8; ++m) {
            auto spec = test::profile_experiment(p, m, p, f, b, network::Fidelity::Ideal);
            CAPTURE(p);
            CAPTURE(m);
            const auto out = run(spec, *toy);
            CHECK(out.summary.iteration_time_s == ((f + b) * (m + p - 1)).seconds());
            CHECK(out.checker.violations == 0);
        }
    }
}

TEST_CASE("1f1b with a short first and last stage: iteration time and bubbles by hand") {
    // 4 layers on p = 3 stages with first_stage_layers = last_stage_layers = 1: stage 1 holds the
    // other 2. Per layer f = 1 ms forward, b = 2 ms backward, ideal network, so per stage
    // F = (1, 2, 1) ms and B = (2, 4, 2) ms.
    //
    // Stage 1 is the bottleneck (F1 + B1 = 6 ms per microbatch). Its timeline under 1F1B (one
    // warm-up forward, then F, B alternating):
    //  - it waits F0 = 1 ms for stage 0's first forward, then runs F(0) and F(1): 1..5 ms;
    //  - B(0) needs stage 2's B(0), which starts when F(0) arrives at 3 ms and ends after
    //    F2 + B2 = 3 ms, at 6 ms: stage 1 idles (F2 + B2) - F1 = 1 ms;
    //  - from then on it never waits: between the end of F(i) and the start of B(i) it runs
    //    B(i-1) and F(i+1), 6 ms >= the 3 ms stage 2 needs for F(i) and B(i); and the forwards it
    //    needs from stage 0 are ready earlier still (stage 0 needs 1 ms per forward).
    //  So it ends its last backward at 1 + 1 + 6m ms, and stage 0 then runs the last B0 = 2 ms:
    //    T = F0 + (F2 + B2 - F1) + m (F1 + B1) + B0 = 6m + 4 ms.
    // (An even split of 6 layers, 2 per stage, would take (m + p - 1)(F + B) = 6m + 12 ms.)
    // Every idle interval waits on another stage, so each stage's bubble is 1 - busy / T with
    // busy = m (F + B): stages 0 and 2 (T - 3m) / T, stage 1 (T - 6m) / T = 4 / T.
    for (int m : {2, 4, 8}) {
        auto spec =
            test::profile_experiment(3, m, 4, Time::ms(1), Time::ms(2), network::Fidelity::Ideal);
        spec.pipeline_split.first_stage_layers = 1;
        spec.pipeline_split.last_stage_layers = 1;
        auto out = run(spec, "1f1b");
        CAPTURE(m);
        const double T = (6.0 * m + 4) / 1000;
        CHECK(out.summary.iteration_time_s == doctest::Approx(T).epsilon(1e-12));
        REQUIRE(out.summary.stages.size() == 3);
        const double short_bubble = (T - 3e-3 * m) / T, long_bubble = 4e-3 / T;
        CHECK(out.summary.stages[0].busy_s == doctest::Approx(3e-3 * m).epsilon(1e-12));
        CHECK(out.summary.stages[1].busy_s == doctest::Approx(6e-3 * m).epsilon(1e-12));
        CHECK(out.summary.stages[0].bubble_fraction ==
              doctest::Approx(short_bubble).epsilon(1e-12));
        CHECK(out.summary.stages[1].bubble_fraction == doctest::Approx(long_bubble).epsilon(1e-12));
        CHECK(out.summary.stages[2].bubble_fraction ==
              doctest::Approx(short_bubble).epsilon(1e-12));
        CHECK(out.summary.bubble_fraction ==
              doctest::Approx((2 * short_bubble + long_bubble) / 3).epsilon(1e-12));
        CHECK(out.summary.exposed_comm_fraction == 0.0);
        CHECK(out.checker.violations == 0);
    }
}

TEST_CASE("every schedule replays an uneven split (embedding and loss counted as layers)") {
    // 14 layers + embedding + loss = 16 counted layers on p = 4 stages: 4 per stage, and with 2
    // chunks 2 per chunk. Virtual stages 0 and the last hold one transformer layer fewer. Each
    // pass runs once, after its dependencies, and every stage computes exactly its layers:
    // busy = m x layers x (f + b).
    const Time f = Time::us(3), b = Time::us(7);
    for (const auto& name : schedule::schedule_names()) {
        auto sched = schedule::make_schedule(name);
        const bool split = sched->splits_backward();
        auto spec = test::profile_experiment(4, 8, 14, f, b, network::Fidelity::Flow);
        if (split) {
            spec.compute.profile.layer_backward.reset();
            spec.compute.profile.layer_backward_input = Time::us(4);
            spec.compute.profile.layer_backward_weight = Time::us(3);
        }
        spec.layout.vpp = 2;
        spec.pipeline_split.account_for_embedding = true;
        spec.pipeline_split.account_for_loss = true;
        CAPTURE(name);
        const int chunks = sched->chunks_for(2);
        auto out = run(spec, *sched);
        const schedule::PipelineShape shape{4, 8, chunks};
        const int stages = sched->virtual_stages(shape);  // 4 x chunks, or 4 for dualpipe
        CHECK(out.checker.violations == 0);
        CHECK(out.checker.duplicates == 0);
        CHECK(out.checker.seen.size() == static_cast<std::size_t>((split ? 3 : 2) * stages * 8));
        // Layers: virtual stage vs holds 16 / stages counted layers, minus one on vs 0 and on
        // the last. Each microbatch runs every virtual stage on the device the placement gives
        // it (for dualpipe, microbatches 0-3 on devices 0..3, 4-7 on devices 3..0), so a stage's
        // busy time is the sum over microbatches of its virtual stages' layers x (f + b).
        std::vector<int> layers(4, 0);
        for (int i = 0; i < 8; ++i)
            for (int vs = 0; vs < stages; ++vs)
                layers[static_cast<std::size_t>(sched->place(shape, vs, i).device)] +=
                    16 / stages - (vs == 0 ? 1 : 0) - (vs == stages - 1 ? 1 : 0);
        for (int s = 0; s < 4; ++s) {
            CAPTURE(s);
            CHECK(out.summary.stages[static_cast<std::size_t>(s)].busy_s ==
                  doctest::Approx(layers[static_cast<std::size_t>(s)] * (f + b).seconds())
                      .epsilon(1e-9));
        }
    }
}
