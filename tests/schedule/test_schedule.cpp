// Contract tests (contract.hpp) over every schedule of schedule_names(), plus the closed forms of
// each schedule.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "contract.hpp"
#include "core/errors.hpp"
#include "schedule/schedule.hpp"

using namespace cs::schedule;
using namespace cs::schedule::test;

TEST_CASE("factory knows every listed name and nothing else") {
    const std::vector<std::string> names = schedule_names();
    for (const char* expected :
         {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev", "dualpipe"}) {
        CHECK(std::find(names.begin(), names.end(), expected) != names.end());
    }
    for (const std::string& name : names) {
        auto schedule = make_schedule(name);
        REQUIRE(schedule != nullptr);
        CHECK(schedule->name() == name);
    }
    CHECK(make_schedule("pipedream") == nullptr);
    CHECK(make_schedule("") == nullptr);
}

TEST_CASE("contract: every (virtual stage, microbatch) runs F and B once, and the orders run") {
    for (const std::string& name : schedule_names()) {
        INFO(name);
        check_contract(*make_schedule(name));
    }
}

TEST_CASE("contract: rejected shapes say so, and order() refuses them") {
    for (const std::string& name : schedule_names()) {
        INFO(name);
        check_rejections(*make_schedule(name));
    }
}

TEST_CASE("gpipe and 1f1b: makespan (m+p-1)(F+B), F=1, B=2") {
    // Closed form (published.md 1.2, DESIGN.md): every stage works m(F+B) and idles (p-1)(F+B)
    // in the fill and the drain. F=1, B=2 gives 3(m+p-1).
    for (const char* name : {"gpipe", "1f1b"}) {
        auto schedule = make_schedule(name);
        for (int p = 1; p <= 8; ++p) {
            for (int m = 1; m <= 32; ++m) {
                const PipelineShape shape{p, m, 1};
                INFO(describe(name, shape));
                const Run run = simulate(*schedule, shape, Costs{1, 2, 1, 1});
                REQUIRE(run.completed);
                CHECK(run.makespan == (m + p - 1) * 3L);
            }
        }
    }
}

TEST_CASE("interleaved: makespan (v*m+p-1)(F+B)/v with whole-stage F=v, B=2v") {
    // Per chunk F=1, B=2, so a whole stage costs F=v, B=2v and (v*m+p-1)(v+2v)/v = 3(v*m+p-1).
    // From p = 2: one stage is refused (the test below).
    auto schedule = make_schedule("interleaved");
    for (int p = 2; p <= 8; ++p) {
        for (int v = 2; v <= 4; ++v) {
            for (int m = p; m <= 32; m += p) {
                const PipelineShape shape{p, m, v};
                INFO(describe("interleaved", shape));
                REQUIRE(schedule->check(shape).empty());
                const Run run = simulate(*schedule, shape, Costs{1, 2, 1, 1});
                REQUIRE(run.completed);
                CHECK(run.makespan == 3L * (v * m + p - 1));
            }
        }
    }
}

TEST_CASE("interleaved: Megatron's order, p=2, v=2, m=4, by hand") {
    // Megatron's virtual microbatch table (groups of p=2 per chunk):
    //   k        0 1 2 3 4 5 6 7
    //   mb       0 1 0 1 2 3 2 3
    //   chunk    0 0 1 1 0 0 1 1   (backward chunk = 1 - chunk)
    // Device 0: warm-up (2-0-1)*2 + (2-1)*2 = 4 forwards k=0..3, then (F k+4, B k) for k=0..3,
    // then backwards k=4..7. Device 1: warm-up 0*2 + 2 = 2.
    auto schedule = make_schedule("interleaved");
    const PipelineShape shape{2, 4, 2};
    auto F = [](int i, int c) { return PipelineOp{Pass::Forward, i, c}; };
    auto B = [](int i, int c) { return PipelineOp{Pass::Backward, i, c}; };
    const std::vector<PipelineOp> device0 = {F(0, 0), F(1, 0), F(0, 1), F(1, 1),  // warm-up
                                             F(2, 0), B(0, 1), F(3, 0), B(1, 1),
                                             F(2, 1), B(0, 0),                     // steady
                                             F(3, 1), B(1, 0),                     //
                                             B(2, 1), B(3, 1), B(2, 0), B(3, 0)};  // cool-down
    const std::vector<PipelineOp> device1 = {F(0, 0), F(1, 0),                     // warm-up
                                             F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 0),
                                             B(0, 0), F(3, 0),                             // steady
                                             B(1, 0), F(2, 1), B(2, 1), F(3, 1), B(3, 1),  //
                                             B(2, 0), B(3, 0)};  // cool-down
    CHECK(schedule->order(shape, 0) == device0);
    CHECK(schedule->order(shape, 1) == device1);
    // Default placement: virtual stage = chunk * p + device.
    CHECK(schedule->virtual_stage(shape, 1, 1, 0) == 3);
    CHECK(schedule->place(shape, 2, 0).device == 0);
    CHECK(schedule->place(shape, 2, 0).chunk == 1);
}

TEST_CASE("interleaved: messages say what is wrong and what would be accepted") {
    auto schedule = make_schedule("interleaved");
    CHECK(schedule->check({4, 6, 2}) ==
          "interleaved needs microbatches to be a multiple of pipeline stages (p=4): m=6 is not; "
          "use 4, 8, 12, ...");
    const std::string one_chunk = schedule->check({4, 8, 1});
    CHECK(one_chunk.find("vpp >= 2") != std::string::npos);
    CHECK(one_chunk.find("vpp=1 given") != std::string::npos);
    CHECK(schedule->chunks_for(3) == 3);
    CHECK(make_schedule("1f1b")->check({4, 8, 2}).find("use v=1") != std::string::npos);
}

TEST_CASE("zb-h1: bubble (p-1)(F+B-W) for m >= p, W <= B") {
    // Published.md 4.2: ZB-H1's bubble per stage is (p-1)(T_F + T_B - T_W), so with every stage
    // busy m(F+B+W) the makespan is m(F+B+W) + (p-1)(F+B-W). Checked for three cost sets.
    auto schedule = make_schedule("zb-h1");
    for (const Costs& costs : {Costs{1, 0, 1, 1}, Costs{2, 0, 2, 1}, Costs{3, 0, 2, 2}}) {
        const long f = costs.forward;
        const long b = costs.backward_input;
        const long w = costs.backward_weight;
        for (int p = 1; p <= 8; ++p) {
            for (int m = p; m <= 32; ++m) {
                const PipelineShape shape{p, m, 1};
                INFO(describe("zb-h1", shape) << " F=" << f << " B=" << b << " W=" << w);
                const Run run = simulate(*schedule, shape, costs);
                REQUIRE(run.completed);
                CHECK(run.makespan == m * (f + b + w) + (p - 1) * (f + b - w));
                for (long busy : run.busy)
                    CHECK(busy == m * (f + b + w));
            }
        }
    }
}

TEST_CASE("zb-h1: never more than p activations held, like 1f1b") {
    // Stage s starts p-s forwards before its first B and holds back s W passes: p at most.
    auto zb = make_schedule("zb-h1");
    for (int p = 1; p <= 8; ++p) {
        for (int m = 1; m <= 32; ++m) {
            for (int d = 0; d < p; ++d) {
                INFO("p=" << p << " m=" << m << " device " << d);
                CHECK(peak_inflight_microbatches(*zb, {p, m, 1}, d) == std::min(p, m));
            }
        }
    }
}

TEST_CASE("zb-h2: stage span m(F+B+W) + (p-1)(F+B-2W), zero bubble with equal times") {
    // Published.md 4.2: ZB-H2's bubble is (p-1)(T_F + T_B - 2 T_W), measured as the paper does
    // on the longest stage span (first pass start to last pass end). With F = B = W it is 0:
    // every stage runs its 3m passes back to back. Holds once m >= 2p-1 (enough microbatches to
    // fill the longer warm-up); F + B >= 2W in every cost set below.
    auto schedule = make_schedule("zb-h2");
    for (const Costs& costs :
         {Costs{1, 0, 1, 1}, Costs{2, 0, 2, 1}, Costs{3, 0, 2, 2}, Costs{3, 0, 3, 1}}) {
        const long f = costs.forward;
        const long b = costs.backward_input;
        const long w = costs.backward_weight;
        for (int p = 1; p <= 8; ++p) {
            for (int m = 2 * p - 1; m <= 32; ++m) {
                const PipelineShape shape{p, m, 1};
                INFO(describe("zb-h2", shape) << " F=" << f << " B=" << b << " W=" << w);
                const Run run = simulate(*schedule, shape, costs);
                REQUIRE(run.completed);
                CHECK(run.longest_span() == m * (f + b + w) + (p - 1) * (f + b - 2 * w));
                for (long busy : run.busy)
                    CHECK(busy == m * (f + b + w));
            }
        }
    }
}

TEST_CASE("zb-h2: at most 2p-1 activations held, 2p-1 on the first stage") {
    // The first stage runs 2p-1 forwards before its first B arrives (published.md 4.2: peak
    // (2p-1) M_B); later stages start fewer. Capped by m.
    auto zb = make_schedule("zb-h2");
    for (int p = 1; p <= 8; ++p) {
        for (int m = 1; m <= 32; ++m) {
            INFO("p=" << p << " m=" << m);
            CHECK(peak_inflight_microbatches(*zb, {p, m, 1}, 0) == std::min(2 * p - 1, m));
            for (int d = 1; d < p; ++d)
                CHECK(peak_inflight_microbatches(*zb, {p, m, 1}, d) <= std::min(2 * p - 1, m));
        }
    }
}

TEST_CASE("interleaved refuses one pipeline stage, as Megatron-Core does") {
    // Megatron-Core's initialize_model_parallel raises "pipeline-model-parallel size should be
    // greater than 1 with interleaved schedule" for virtual stages at pp 1; every vpp and m.
    auto schedule = make_schedule("interleaved");
    for (int v = 2; v <= 4; ++v)
        for (int m = 1; m <= 8; ++m)
            CHECK(schedule->check({1, m, v}) ==
                  "interleaved needs at least 2 pipeline stages (pp >= 2), as Megatron-LM refuses "
                  "virtual stages on one: pp=1 given; use schedule 1f1b, or pp=2 or more");
    CHECK(schedule->check({2, 2, 2}).empty());
}

TEST_CASE("peak in-flight activations: 1f1b min(p-s, m), gpipe m, interleaved warm-up + 1") {
    auto one_f_one_b = make_schedule("1f1b");
    auto gpipe = make_schedule("gpipe");
    for (int p = 1; p <= 8; ++p) {
        for (int m = 1; m <= 32; ++m) {
            for (int d = 0; d < p; ++d) {
                INFO("p=" << p << " m=" << m << " device " << d);
                // 1F1B: p-s-1 warm-up forwards plus the first steady forward before a backward.
                CHECK(peak_inflight_microbatches(*one_f_one_b, {p, m, 1}, d) == std::min(p - d, m));
                // GPipe: every forward before any backward.
                CHECK(peak_inflight_microbatches(*gpipe, {p, m, 1}, d) == m);
            }
        }
    }
    auto interleaved = make_schedule("interleaved");
    for (int p = 2; p <= 8; ++p) {
        for (int v = 2; v <= 4; ++v) {
            for (int m = p; m <= 32; m += p) {
                // Megatron's warm-up W = (p-s-1)*2 + (v-1)*p forwards, then one more forward
                // before the first backward; all m*v if the warm-up covers everything.
                const int device0 = std::min((p - 1) * 2 + (v - 1) * p + 1, m * v);
                CHECK(peak_inflight_microbatches(*interleaved, {p, m, v}, 0) == device0);
            }
        }
    }
}

TEST_CASE("peak activation bytes from the peak states equal a walk of the order, any weights") {
    // peak_inflight_bytes weighs the few states peak_held_states keeps. The reference here walks
    // the order itself: + the virtual stage's bytes at each forward, - at each release (the
    // Backward, or the BackwardWeight for schedules that split it), the largest running sum. Over
    // every schedule, shapes it accepts, every device, and weights per virtual stage drawn from a
    // fixed linear congruential sequence (zero included, and chunks of very unequal size), the
    // two agree exactly, and no state kept holds as much as another in every virtual stage
    // (interleaved keeps several: its chunks' counts rise and fall in turn).
    std::uint64_t seed = 12345;
    const auto next_weight = [&seed]() {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const std::uint64_t r = seed >> 33;
        return static_cast<std::int64_t>(r % 4 == 0 ? 0 : r % 1000003);
    };
    for (const std::string& name : schedule_names()) {
        auto sched = make_schedule(name);
        for (const PipelineShape shape :
             {PipelineShape{1, 4, 1}, PipelineShape{2, 8, 2}, PipelineShape{4, 8, 1},
              PipelineShape{4, 16, 2}, PipelineShape{4, 12, 4}, PipelineShape{8, 32, 2}}) {
            if (!sched->check(shape).empty()) continue;
            const Pass releasing = sched->splits_backward() ? Pass::BackwardWeight : Pass::Backward;
            for (int round = 0; round < 3; ++round) {
                std::vector<std::int64_t> weight(
                    static_cast<std::size_t>(shape.devices * shape.chunks * 2));
                for (auto& w : weight)
                    w = next_weight();
                const auto bytes = [&](int vs) { return weight[static_cast<std::size_t>(vs)]; };
                for (int d = 0; d < shape.devices; ++d) {
                    INFO(name << " p=" << shape.devices << " m=" << shape.microbatches
                              << " v=" << shape.chunks << " device " << d);
                    const auto order = sched->order(shape, d);
                    std::int64_t held = 0, peak = 0;
                    for (const PipelineOp& op : order) {
                        const int vs = sched->virtual_stage(shape, d, op.chunk, op.microbatch);
                        if (op.pass == Pass::Forward) peak = std::max(peak, held += bytes(vs));
                        if (op.pass == releasing) held -= bytes(vs);
                    }
                    CHECK(held == 0);  // every activation released
                    CHECK(peak_inflight_bytes(*sched, shape, d, bytes) == peak);
                    const auto states = peak_held_states(*sched, shape, d, order);
                    CHECK(!states.empty());
                    for (std::size_t a = 0; a < states.size(); ++a)
                        for (std::size_t b = 0; b < states.size(); ++b) {
                            if (a == b) continue;
                            // b holds at least a's count of each of a's virtual stages?
                            bool covers = true;
                            for (const auto& [vs, count] : states[a]) {
                                int in_b = 0;
                                for (const auto& [ws, c] : states[b])
                                    if (ws == vs) in_b = c;
                                covers = covers && in_b >= count;
                            }
                            CHECK_FALSE(covers);
                        }
                }
            }
        }
    }
    CHECK_THROWS_AS(peak_held_bytes(std::vector<HeldState>{{{0, 1}}}, [](int) { return -1; }),
                    cs::SimulationError);
}

TEST_CASE("1f1b order follows Megatron: p=4, m=8, stage 1") {
    // Warm-up p-s-1 = 2 forwards, then (F i+2, B i) for i=0..5, then B6, B7.
    auto schedule = make_schedule("1f1b");
    std::string letters;
    for (const PipelineOp& op : schedule->order({4, 8, 1}, 1)) {
        letters += pass_letter(op.pass) + std::to_string(op.microbatch) + " ";
    }
    CHECK(letters == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7 ");
}

TEST_CASE("zb-v: V placement, device s holds virtual stages s and 2p-1-s") {
    auto schedule = make_schedule("zb-v");
    CHECK(schedule->chunks_for(1) == 2);
    CHECK(schedule->chunks_for(4) == 2);
    const PipelineShape shape{4, 8, 2};
    CHECK(schedule->virtual_stage(shape, 0, 1, 0) == 7);
    CHECK(schedule->virtual_stage(shape, 3, 1, 5) == 4);
    CHECK(schedule->place(shape, 5, 0).device == 2);
    CHECK(schedule->place(shape, 5, 0).chunk == 1);
    CHECK(schedule->check({4, 8, 3}).find("use v=2") != std::string::npos);
}

TEST_CASE("zb-v: idle (p-1)F per device for m >= 2p-1 when F = B and W <= B") {
    // With chunk times F = B = W (or W = B/2), the handcrafted ZB-V keeps every device busy
    // except for the ramp: device p-1's first forward (virtual stage p-1) cannot start before
    // p-1 chunk forwards, and the V returns that idle at the end of device 0. Every device works
    // 2m(F+B+W), so the makespan is 2m(F+B+W) + (p-1)F. Needs m >= 2p-1 microbatches to fill
    // the V. (ZB-V's table entry "0 when T_F = T_B = T_W" leaves out this ramp.)
    auto schedule = make_schedule("zb-v");
    for (const Costs& costs : {Costs{1, 0, 1, 1}, Costs{2, 0, 2, 1}}) {
        const long f = costs.forward;
        const long b = costs.backward_input;
        const long w = costs.backward_weight;
        for (int p = 1; p <= 8; ++p) {
            for (int m = 2 * p - 1; m <= 32; ++m) {
                const PipelineShape shape{p, m, 2};
                INFO(describe("zb-v", shape) << " F=" << f << " B=" << b << " W=" << w);
                const Run run = simulate(*schedule, shape, costs);
                REQUIRE(run.completed);
                CHECK(run.makespan == 2L * m * (f + b + w) + (p - 1) * f);
            }
        }
    }
}

TEST_CASE("zb-v: at most 2p chunk activations (p whole stages) held, like 1f1b") {
    // Device 0 runs 2p-1 chunk-0 forwards and then one chunk-1 forward before its first W
    // releases anything, once m >= 2p; published.md 4.2 gives ZB-V's peak as p*M_B (whole
    // stage), i.e. 2p chunk activations.
    auto schedule = make_schedule("zb-v");
    for (int p = 1; p <= 8; ++p) {
        for (int m = 1; m <= 32; ++m) {
            INFO("p=" << p << " m=" << m);
            int peak = 0;
            for (int d = 0; d < p; ++d) {
                peak = std::max(peak, peak_inflight_microbatches(*schedule, {p, m, 2}, d));
            }
            CHECK(peak <= 2 * p);
            if (m >= 2 * p) CHECK(peak_inflight_microbatches(*schedule, {p, m, 2}, 0) == 2 * p);
        }
    }
}

TEST_CASE("dualpipev: needs m >= 2p, says so") {
    auto schedule = make_schedule("dualpipev");
    CHECK(schedule->check({4, 7, 2}) ==
          "dualpipev needs at least 2p microbatches (p=4): m=7 is too few; use m >= 8");
    CHECK(schedule->check({4, 8, 2}).empty());
    CHECK(schedule->chunks_for(3) == 2);
    CHECK(schedule->virtual_stage({4, 8, 2}, 1, 1, 0) == 6);
}

TEST_CASE("dualpipev: reaches the ramp bound when F = B = W, stays within DeepSeek-V3's bubble") {
    // Lower bound: device p-1 cannot start before its first forward (virtual stage p-1) has had
    // p-1 chunk forwards upstream, and every device works 2m(F+B+W); so the makespan is at
    // least 2m(F+B+W) + (p-1)F. With F = B = W = 1 DualPipeV attains it. For other costs,
    // DeepSeek-V3 Table 2 (published.md 5.1) bounds the bubble by (p-1)(F&B + Bfull - 3W) with
    // p = PP/2 devices; here F&B is not overlapped, so F&B = F + B + W and Bfull = B + W.
    auto schedule = make_schedule("dualpipev");
    for (const Costs& costs :
         {Costs{1, 0, 1, 1}, Costs{2, 0, 2, 1}, Costs{2, 0, 1, 1}, Costs{1, 0, 2, 1}}) {
        const long f = costs.forward;
        const long b = costs.backward_input;
        const long w = costs.backward_weight;
        for (int p = 1; p <= 8; ++p) {
            for (int m = 2 * p; m <= 32; ++m) {
                const PipelineShape shape{p, m, 2};
                INFO(describe("dualpipev", shape) << " F=" << f << " B=" << b << " W=" << w);
                const Run run = simulate(*schedule, shape, costs);
                REQUIRE(run.completed);
                const long work = 2L * m * (f + b + w);
                CHECK(run.makespan >= work + (p - 1) * f);
                CHECK(run.makespan <= work + (p - 1) * ((f + b + w) + (b + w) - 3 * w));
                if (f == b && b == w) CHECK(run.makespan == work + (p - 1) * f);
            }
        }
    }
}

TEST_CASE("dualpipev: 2p+1 chunk activations held, DeepSeek-V3's PP+1") {
    // Steps 1-2 run 2(p-r-1) + 2(r+1) = 2p forwards before anything is released; step 3 frees
    // one (its W) before each new forward; step 4 opens with a forward: 2p+1. DeepSeek-V3
    // Table 2 gives PP+1 stage activations with PP = 2p stages of one chunk each.
    auto schedule = make_schedule("dualpipev");
    for (int p = 1; p <= 8; ++p) {
        for (int m = 2 * p; m <= 32; ++m) {
            for (int d = 0; d < p; ++d) {
                INFO("p=" << p << " m=" << m << " device " << d);
                CHECK(peak_inflight_microbatches(*schedule, {p, m, 2}, d) == 2 * p + 1);
            }
        }
    }
}

TEST_CASE("dualpipe: needs p even and m even with m >= 2p, says so") {
    auto schedule = make_schedule("dualpipe");
    CHECK(schedule->check({3, 8, 2}) ==
          "dualpipe needs an even number of pipeline stages (p=3 is odd): half of the "
          "microbatches enter at each end; use p = 4, or dualpipev for any p");
    CHECK(schedule->check({4, 7, 2}) ==
          "dualpipe needs an even number of microbatches, at least 2p (p=4): m=7 is not; use m "
          "= 8, 10, 12, ...");
    CHECK(schedule->check({4, 9, 2}).find("m=9 is not") != std::string::npos);
    CHECK(schedule->check({4, 6, 2}).find("m=6 is not") != std::string::npos);
    CHECK(schedule->check({4, 8, 2}).empty());
    CHECK(schedule->chunks_for(1) == 2);
    CHECK(schedule->model_copies() == 2);
    // p stages, each held twice: device 1 of 4 holds stage 1 of copy 0 and stage 2 of copy 1.
    CHECK(schedule->virtual_stages({4, 8, 2}) == 4);
    CHECK(schedule->virtual_stage({4, 8, 2}, 1, 0, 0) == 1);
    CHECK(schedule->virtual_stage({4, 8, 2}, 1, 1, 5) == 2);
    // Microbatches 0-3 enter at device 0 (chunk 0), 4-7 at device 3 (chunk 1).
    CHECK(schedule->place({4, 8, 2}, 0, 3).device == 0);
    CHECK(schedule->place({4, 8, 2}, 0, 4).device == 3);
    CHECK(schedule->place({4, 8, 2}, 0, 4).chunk == 1);
}

TEST_CASE("dualpipe: device d runs DualPipeV's steps for the half-pipeline, mirrored") {
    // dualpipe.py: half_rank = min(d, p-1-d), p/2 half ranks, m/2 chunks per direction, and the
    // phase swapped on the second half. So device d's order is dualpipev's order of device
    // min(d, p-1-d) of p/2 with m/2 microbatches, its chunk c becoming c xor (d >= p/2) and
    // the microbatches of chunk 1 numbered from m/2.
    auto dualpipe = make_schedule("dualpipe");
    auto dualpipev = make_schedule("dualpipev");
    for (int p = 2; p <= 8; p += 2) {
        for (int m = 2 * p; m <= 24; m += 2) {
            for (int d = 0; d < p; ++d) {
                INFO("p=" << p << " m=" << m << " device " << d);
                const auto half = dualpipev->order({p / 2, m / 2, 2}, std::min(d, p - 1 - d));
                const auto full = dualpipe->order({p, m, 2}, d);
                REQUIRE(half.size() == full.size());
                for (std::size_t k = 0; k < half.size(); ++k) {
                    const int chunk = d >= p / 2 ? 1 - half[k].chunk : half[k].chunk;
                    CHECK(full[k].pass == half[k].pass);
                    CHECK(full[k].chunk == chunk);
                    CHECK(full[k].microbatch == half[k].microbatch + (chunk == 1 ? m / 2 : 0));
                    CHECK(full[k].overlap == half[k].overlap);
                }
            }
        }
    }
}

TEST_CASE("dualpipe: makespan m(F+B+W) + (p/2-1)F when F = B = W, within DeepSeek-V3's bubble") {
    // Every device runs m forwards, m B and m W (m/2 microbatches on each of its two stages).
    // The two directions fill from both ends: a device waits at the start only for the forwards
    // that reach it from the nearer end, at most p/2-1 chunk forwards (the middle devices). So the
    // makespan is at least m(F+B+W) + (p/2-1)F, which DualPipe attains with F = B = W. DeepSeek-V3
    // Table 2 gives DualPipe's bubble as (PP/2-1)(F&B + B - 3W) with PP = p: here F&B is not
    // overlapped (F&B = F+B+W) and B is the full backward (B+W).
    // By hand for p = 4, m = 8, F = B = W = 1: work 8 x 3 = 24, ramp (4/2-1) x 1 = 1: 25 units;
    // Table 2's bound (2-1)(3 + 2 - 3) = 2 units of bubble, 26.
    auto schedule = make_schedule("dualpipe");
    CHECK(simulate(*schedule, {4, 8, 2}, Costs{1, 0, 1, 1}).makespan == 25);
    for (const Costs& costs :
         {Costs{1, 0, 1, 1}, Costs{2, 0, 2, 1}, Costs{2, 0, 1, 1}, Costs{1, 0, 2, 1}}) {
        const long f = costs.forward;
        const long b = costs.backward_input;
        const long w = costs.backward_weight;
        for (int p = 2; p <= 8; p += 2) {
            for (int m = 2 * p; m <= 32; m += 2) {
                const PipelineShape shape{p, m, 2};
                INFO(describe("dualpipe", shape) << " F=" << f << " B=" << b << " W=" << w);
                const Run run = simulate(*schedule, shape, costs);
                REQUIRE(run.completed);
                const long work = static_cast<long>(m) * (f + b + w);
                CHECK(run.makespan >= work + (p / 2 - 1) * f);
                CHECK(run.makespan <= work + (p / 2 - 1) * ((f + b + w) + (b + w) - 3 * w));
                if (f == b && b == w) CHECK(run.makespan == work + (p / 2 - 1) * f);
            }
        }
    }
}

TEST_CASE("dualpipe: p+1 stage activations held, DeepSeek-V3's PP+1") {
    // As dualpipev's 2q+1 for the half-pipeline of q = p/2 devices: p+1 chunks, each a whole
    // stage (Table 2: PP+1).
    auto schedule = make_schedule("dualpipe");
    for (int p = 2; p <= 8; p += 2) {
        for (int m = 2 * p; m <= 32; m += 2) {
            for (int d = 0; d < p; ++d) {
                INFO("p=" << p << " m=" << m << " device " << d);
                CHECK(peak_inflight_microbatches(*schedule, {p, m, 2}, d) == p + 1);
            }
        }
    }
}

TEST_CASE("exchange_rounds: Megatron-LM's batched p2p steps, by hand") {
    // 1f1b (forward_backward_pipelining_without_interleaving): a send_forward_recv_backward or
    // the like after every pass, so each op is a round of its own: 0, 1, ..., 2m - 1.
    const PipelineShape one{4, 8, 1};
    const auto f1b = make_schedule("1f1b");
    for (int d = 0; d < one.devices; ++d) {
        const auto rounds = f1b->exchange_rounds(one, d);
        REQUIRE(rounds.size() == f1b->order(one, d).size());
        for (std::size_t k = 0; k < rounds.size(); ++k)
            CHECK(rounds[k] == static_cast<int>(k));
    }
    // Interleaved, p = 4, m = 8, v = 2 (forward_backward_pipelining_with_interleaving): device d
    // runs w = min((p - d - 1) x 2 + (v - 1) x p, m v) warm-up forwards, one exchange each;
    // then m v - w steady (forward, backward) pairs, one exchange per pair (the forward's output
    // waits for the backward's); then w cool-down backwards, one each.
    //   d = 0: w = min(3 x 2 + 4, 16) = 10: rounds 0..9, then 10,10, 11,11, ..., 15,15,
    //   then 16..25. d = 3: w = min(0 + 4, 16) = 4: rounds 0..3, then 4,4, ..., 15,15, then 16..19.
    const PipelineShape two{4, 8, 2};
    const auto inter = make_schedule("interleaved");
    const auto expected = [](int warmup, int total) {
        std::vector<int> r;
        int round = 0;
        for (int k = 0; k < warmup; ++k)
            r.push_back(round++);
        for (int k = 0; k < total - warmup; ++k, ++round) {
            r.push_back(round);
            r.push_back(round);
        }
        for (int k = 0; k < warmup; ++k)
            r.push_back(round++);
        return r;
    };
    const auto r0 = inter->exchange_rounds(two, 0);
    REQUIRE(r0.size() == inter->order(two, 0).size());
    CHECK(r0 == expected(10, 16));
    CHECK(r0.back() == 25);
    const auto r3 = inter->exchange_rounds(two, 3);
    CHECK(r3 == expected(4, 16));
    CHECK(r3.back() == 19);
    // Schedules without such rounds (here the zero-bubble ones and DualPipe) say so with none.
    for (const char* name : {"zb-h1", "dualpipe"})
        CHECK(make_schedule(name)->exchange_rounds(one, 0).empty());
}
