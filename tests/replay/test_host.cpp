// The host model (workload::HostModel): the closed form of replay/host.hpp and the replay's use of
// it. Every expectation is derived by hand in the comment above it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "replay/host.hpp"
#include "replay/replay.hpp"
#include "schedule/schedule.hpp"
#include "session/run.hpp"
#include "test_support.hpp"
#include "workload/plan.hpp"

using namespace cs;
using replay::host_issue;
using replay::KernelBlock;

TEST_CASE("host_issue: host-bound, GPU-bound and mixed passes") {
    SUBCASE("host-bound") {
        // pass 10 us, launch 5 us, 4 kernels of 2 us: issued at 15, 20, 25, 30 us, each runs
        // 2 us from its issue: D = 30 + 2 = 32 us. H = 10 + 4 x 5 = 30 us.
        const std::vector<KernelBlock> b{{Time::us(8), 4}};
        const auto h = host_issue(Time::us(10), Time::us(5), b);
        CHECK(h.launches == 4);
        CHECK(h.issue == Time::us(30));
        CHECK(h.first_issue == Time::us(15));
        CHECK(h.earliest_end == Time::us(32));
    }
    SUBCASE("GPU-bound") {
        // pass 10 us, launch 1 us, 4 kernels of 10 us: the first starts at 11 us and the GPU never
        // waits again: D = 11 + 40 = 51 us. H = 10 + 4 = 14 us.
        const std::vector<KernelBlock> b{{Time::us(40), 4}};
        const auto h = host_issue(Time::us(10), Time::us(1), b);
        CHECK(h.issue == Time::us(14));
        CHECK(h.earliest_end == Time::us(51));
    }
    SUBCASE("mixed: GPU-bound first, host-bound at the end") {
        // pass 0, launch 3 us; a 10 us kernel, then 5 kernels of 1 us. Issued at 3 (the long one),
        // 6, 9, 12, 15, 18. Long kernel 3-13; the short ones 13-14, 14-15, 15-16, then 16-17
        // (issued 15) and 18-19 (issued 18): D = 19 us. H = 6 x 3 = 18 us.
        const std::vector<KernelBlock> b{{Time::us(10), 1}, {Time::us(5), 5}};
        const auto h = host_issue(Time::zero(), Time::us(3), b);
        CHECK(h.launches == 6);
        CHECK(h.issue == Time::us(18));
        CHECK(h.earliest_end == Time::us(19));
    }
    SUBCASE("mixed: a long kernel in the middle decides") {
        // pass 0, launch 4 us; 2 kernels of 1 us, one of 20 us, 3 of 1 us. Issued at 4, 8, 12,
        // 16, 20, 24: 4-5, 8-9, 12-32, then 32-33, 33-34, 34-35: D = 35 us.
        const std::vector<KernelBlock> b{{Time::us(2), 2}, {Time::us(20), 1}, {Time::us(3), 3}};
        CHECK(host_issue(Time::zero(), Time::us(4), b).earliest_end == Time::us(35));
    }
    SUBCASE("blocks without kernels run with the kernels before them") {
        // pass 0, launch 5 us: a 2 us kernel issued at 5, 10 us of GPU time issued with it (5-17),
        // a 1 us kernel issued at 10 starting at 17: D = 18 us. No kernels at all: D = pass + G.
        const std::vector<KernelBlock> b{{Time::us(2), 1}, {Time::us(10), 0}, {Time::us(1), 1}};
        CHECK(host_issue(Time::zero(), Time::us(5), b).earliest_end == Time::us(18));
        const std::vector<KernelBlock> none{{Time::us(5), 0}};
        const auto h = host_issue(Time::us(7), Time::us(5), none);
        CHECK(h.launches == 0);
        CHECK(h.issue == Time::us(7));
        CHECK(h.earliest_end == Time::us(12));
    }
}

namespace {
struct HostRecorder final : replay::ReplayObserver {
    std::vector<replay::PassRecord> passes;
    struct Slice {
        int worker;
        Time start, end;
        replay::HostWork kind;
    };
    std::vector<Slice> host;
    void on_pass(const replay::PassRecord& p) override { passes.push_back(p); }
    void on_host(int worker, Time start, Time end, replay::HostWork kind, std::uint64_t) override {
        host.push_back({worker, start, end, kind});
    }
};

report::Summary run_with(const workload::ExperimentSpec& spec, HostRecorder* recorder = nullptr,
                         const std::string& schedule = "1f1b") {
    api::RunOptions opt;
    opt.schedule = schedule;
    if (recorder) opt.attach = [recorder](replay::Replay& r) { r.add_observer(*recorder); };
    return api::run(spec, opt).summary;
}
}  // namespace

TEST_CASE("host model: one stage, GPU-bound and host-bound") {
    // One stage of 4 layers (a profile layer is one kernel), one microbatch: F = 4 x 10 us,
    // B = 4 x 20 us; no optimizer step, ideal network; host pass 5 us.
    auto spec =
        test::profile_experiment(1, 1, 4, Time::us(10), Time::us(20), network::Fidelity::Ideal);
    spec.compute.host.enabled = true;
    spec.compute.host.pass = Time::us(5);

    SUBCASE("GPU-bound: only the first kernel's issue is exposed") {
        // launch 1 us: F's first kernel issues at 6 us, F = [6, 46); the host is done with F at
        // 9 us and issues B's first kernel at 15 < 46: B = [46, 126). T = 126 us, of which the
        // GPU waited 6 us for the host: host_fraction = 6 / 126.
        spec.compute.host.launch = Time::us(1);
        HostRecorder rec;
        const auto s = run_with(spec, &rec);
        CHECK(s.iteration_time_s == doctest::Approx(126e-6).epsilon(1e-12));
        CHECK(s.host_fraction == doctest::Approx(6.0 / 126).epsilon(1e-12));
        CHECK(s.bubble_fraction == 0.0);
        REQUIRE(rec.passes.size() == 2);
        CHECK(rec.passes[0].start == Time::us(6));
        CHECK(rec.passes[0].host_stall == Time::zero());
        CHECK(rec.passes[1].start == Time::us(46));
    }
    SUBCASE("host-bound: the GPU waits inside the passes") {
        // launch 30 us. F: kernels issued at 35, 65, 95, 125 us and run 10 us each: F = [35, 135),
        // 40 us of compute and a 60 us host stall; the host is free at 5 + 4 x 30 = 125 us.
        // B: kernels issued at 125 + 35 = 160, 190, 220, 250, 20 us each: B = [160, 270), a
        // 30 us stall. T = 270 us; the GPU waits for the host 35 + 25 (before the passes) +
        // 60 + 30 (inside) = 150 us: host_fraction = 150 / 270, all of the idle time.
        spec.compute.host.launch = Time::us(30);
        HostRecorder rec;
        const auto s = run_with(spec, &rec);
        CHECK(s.iteration_time_s == doctest::Approx(270e-6).epsilon(1e-12));
        CHECK(s.host_fraction == doctest::Approx(150.0 / 270).epsilon(1e-12));
        CHECK(s.idle_fraction == doctest::Approx(150.0 / 270).epsilon(1e-12));
        REQUIRE(rec.passes.size() == 2);
        CHECK(rec.passes[0].start == Time::us(35));
        CHECK(rec.passes[0].end == Time::us(135));
        CHECK(rec.passes[0].host_stall == Time::us(60));
        CHECK(rec.passes[1].start == Time::us(160));
        CHECK(rec.passes[1].host_stall == Time::us(30));
        // The host issued F over [0, 125) and B over [125, 250).
        REQUIRE(rec.host.size() == 2);
        CHECK(rec.host[0].end == Time::us(125));
        CHECK(rec.host[1].start == Time::us(125));
        CHECK(rec.host[1].kind == replay::HostWork::Issue);
    }
}

TEST_CASE("host model: runtime_pass is charged under the schedules torch runs on its runtime") {
    // The one-stage, GPU-bound case above (F = 4 x 10 us, B = 4 x 20 us, pass 5 us, launch 1 us)
    // with runtime_pass 7 us. gpipe and 1f1b (torch's single-stage schedules) do not pay it: F's
    // first kernel issues at pass + launch = 6 us, T = 126 us. zb-h1 runs on torch's pipeline
    // runtime: F's first kernel issues at 5 + 7 + 1 = 13 us and every later pass is issued while
    // the GPU is busy, so T = 126 + 7 = 133 us.
    auto spec =
        test::profile_experiment(1, 1, 4, Time::us(10), Time::us(20), network::Fidelity::Ideal);
    spec.compute.host.enabled = true;
    spec.compute.host.pass = Time::us(5);
    spec.compute.host.launch = Time::us(1);
    spec.compute.host.runtime_pass = Time::us(7);
    for (const char* single : {"gpipe", "1f1b"}) {
        CAPTURE(single);
        CHECK(run_with(spec, nullptr, single).iteration_time_s ==
              doctest::Approx(126e-6).epsilon(1e-12));
    }
    // zb-h1 splits each layer's 20 us backward into input and weight halves of 10 us.
    spec.compute.profile.layer_backward.reset();
    spec.compute.profile.layer_backward_input = Time::us(10);
    spec.compute.profile.layer_backward_weight = Time::us(10);
    HostRecorder rec;
    const auto s = run_with(spec, &rec, "zb-h1");
    CHECK(s.iteration_time_s == doctest::Approx(133e-6).epsilon(1e-12));
    REQUIRE_FALSE(rec.passes.empty());
    CHECK(rec.passes[0].start == Time::us(13));
    // The trait, read from each schedule (never from its name): torch runs gpipe and 1f1b as
    // classes of their own, every other schedule on its pipeline runtime.
    for (const auto& name : schedule::schedule_names())
        CHECK(schedule::make_schedule(name)->on_torch_pipeline_runtime() ==
              (name != "gpipe" && name != "1f1b"));
}

TEST_CASE("host model: a 2-stage 1F1B exposes pass + launch where a stage waits for its input") {
    // p = 2, m = 2, one layer (one kernel) per stage: f = 10 us, b = 20 us, ideal network.
    // Without a host, T = 3f + 3b = 90 us (s0: F0 F1 . B0 . B1; s1: F0 B0 F1 B1, the critical
    // path F0s0 F0s1 B0s1 F1s1 B1s1 B1s0).
    auto spec =
        test::profile_experiment(2, 2, 2, Time::us(10), Time::us(20), network::Fidelity::Ideal);
    const auto off = run_with(spec);
    CHECK(off.iteration_time_s == doctest::Approx(90e-6).epsilon(1e-12));
    CHECK(off.host_fraction == 0.0);

    // Host pass 2 us, launch 1 us: e = pass + launch = 3 us from the host starting a pass to its
    // kernel running. Without sync_after_p2p the host does not wait for received data (eager
    // torch.distributed: the GPU stream waits): it issues every pass ahead of the GPU, so e is
    // exposed only at the very start, where F0 on s0 starts at e and everything after it moves
    // by e: T = e + 3f + 3b = 93 us. Only s0's first 3 us wait for the host:
    // host_fraction = 3 / 93 / 2.
    spec.compute.host.enabled = true;
    spec.compute.host.pass = Time::us(2);
    spec.compute.host.launch = Time::us(1);
    const auto on = run_with(spec);
    CHECK(on.iteration_time_s == doctest::Approx(93e-6).epsilon(1e-12));
    CHECK(on.host_fraction == doctest::Approx(3.0 / 93 / 2).epsilon(1e-12));
    // The host's idle is not pipeline bubble: s0 is idle 93 - 60 = 33 us of which 3 wait for the
    // host; s1 is idle 33 us, all waiting for activations and gradients.
    CHECK(on.bubble_fraction == doctest::Approx((30.0 + 33.0) / 93 / 2).epsilon(1e-12));

    SUBCASE("p2p costs hide while the host runs ahead") {
        // p2p 1 us: each receive is posted and each send issued while the GPU is busy or the
        // data is still in flight, so nothing on the critical path moves: T = 93 us.
        spec.compute.host.p2p = Time::us(1);
        CHECK(run_with(spec).iteration_time_s == doctest::Approx(93e-6).epsilon(1e-12));
    }
    SUBCASE("sync_after_p2p: the host waits for the pass whose output it sends") {
        // Megatron's synchronisation: the host waits for each received tensor before issuing its
        // pass, which exposes e on the critical path at F0 on s0 (starts at e), F0 on s1
        // (arrives at e + f, starts at 2e + f) and B1 on s0 (arrives at 2e + 3f + 2b, starts e
        // later): 3e. And s1's host, after issuing B0 (which sends), waits until B0 ends at
        // 46 us; F1's input arrived at 26 us, so F1 is issued at 46 and starts at 49 instead of
        // 46: one more e. T = 4e + 3f + 3b = 102 us. (s0 also syncs after F0 and F1, which delays
        // F1 to 16 us, off the critical path.)
        spec.compute.host.sync_after_p2p = true;
        HostRecorder rec;
        const auto s = run_with(spec, &rec);
        CHECK(s.iteration_time_s == doctest::Approx(102e-6).epsilon(1e-12));
        // Sync slices: s0 after F0 [3, 13) and F1 [16, 26); s1 after B0 [19, 46) and B1 [52, 79).
        Time sync = Time::zero();
        for (const auto& h : rec.host)
            if (h.kind == replay::HostWork::Sync) sync += h.end - h.start;
        CHECK(sync == Time::us(10 + 10 + 27 + 27));
    }
}

TEST_CASE("host model: a profile run without a framework adds nothing") {
    // The same 1F1B with the HostModel of `model: profile` without `framework:` (disabled, even
    // with costs set): every pass lasts exactly its compute and the closed form holds.
    auto spec =
        test::profile_experiment(2, 2, 2, Time::us(10), Time::us(20), network::Fidelity::Ideal);
    spec.compute.framework = workload::Framework::None;
    spec.compute.host.launch = Time::us(30);
    spec.compute.host.pass = Time::us(100);
    HostRecorder rec;
    const auto s = run_with(spec, &rec);
    CHECK(s.iteration_time_s == doctest::Approx(90e-6).epsilon(1e-12));
    CHECK(s.host_fraction == 0.0);
    CHECK(rec.host.empty());
    for (const auto& p : rec.passes) {
        CHECK(p.end - p.start == p.compute + p.collective);
        CHECK(p.host_stall == Time::zero());
    }
}

TEST_CASE("interference: the last backward pass slows while gradient buckets reduce during it") {
    // The overlap_grad_reduce case of test_replay.cpp: one stage, dp 2 on two GPUs joined by a
    // 100 GB/s, 1 us link, one microbatch: F = 1 ms, B = 4 ms, buckets of a quarter of the
    // layer's parameters, ready at B/4, B/2, 3B/4 and B. Without interference only the last
    // bucket is exposed: T0 = F + B + 2 us + last / 100 GB/s.
    auto spec =
        test::profile_experiment(1, 2, 1, Time::ms(1), Time::ms(4), network::Fidelity::Flow);
    spec.cluster = test::chain_cluster(2);
    spec.layout.dp = 2;
    spec.layout.overlap_grad_reduce = true;
    const auto device = workload::plan_iteration(spec, 1, false, [](int) { return 0; }).devices[0];
    spec.layout.ddp_bucket_size = (device.dp_parameters + 3) / 4;
    const double g = static_cast<double>(device.dp_gradient_bytes.value);
    const double f = static_cast<double>(spec.layout.ddp_bucket_size) /
                     static_cast<double>(device.dp_parameters);
    const auto upto = [&](int b) {
        return static_cast<double>(std::llround(g * std::min(1.0, b * f)));
    };
    const double last = g - upto(3);
    const double t0 = 5e-3 + 2e-6 + last / 1e11;
    CHECK(run_with(spec).iteration_time_s == doctest::Approx(t0).epsilon(1e-9));

    // With a framework and interference 0.1, B grows by 0.1 x (the three overlapped buckets'
    // isolated times: 2 us + bytes / 100 GB/s each, i.e. 6 us + upto(3) / 100 GB/s), far less
    // than B's 4 ms; the buckets keep up, so T = T0 + that growth. Without a framework (above)
    // nothing is added.
    spec.compute.framework = workload::Framework::Megatron;
    spec.compute.interference = 0.1;
    const double growth = 0.1 * (6e-6 + upto(3) / 1e11);
    HostRecorder rec;
    const auto s = run_with(spec, &rec);
    CHECK(s.iteration_time_s == doctest::Approx(t0 + growth).epsilon(1e-9));
    // Both replicas' backward passes grew by it, their forward passes not.
    REQUIRE(rec.passes.size() == 4);
    for (const auto& p : rec.passes) {
        if (p.pass == schedule::Pass::Forward)
            CHECK(p.interference == Time::zero());
        else
            CHECK(p.interference.seconds() == doctest::Approx(growth).epsilon(1e-6));
    }
}

TEST_CASE("host model with a duration model: the pass's kernels scale with its compute") {
    // The one-stage host-bound case above (4 kernels per pass, host pass 5 us, launch 30 us),
    // every compute doubled by a duration model: F = 4 kernels of 20 us, B = 4 of 40 us.
    // F: issued at 35, 65, 95, 125, each 20 us < 30 us apart: F = [35, 145), stall 145 - 35 - 80
    // = 30 us. B: host from 125, issued at 160, 190, 220, 250, 40 us each: 160-200, 200-240,
    // 240-280, 280-320: B = [160, 320), GPU-bound after its first kernel (D = 35 + 160 = 195
    // from the host's 125: 320). T = 320 us.
    struct Double final : replay::DurationModel {
        Time pass_duration(const replay::DurationContext&, Time nominal) override {
            return nominal * 2;
        }
    };
    auto spec =
        test::profile_experiment(1, 1, 4, Time::us(10), Time::us(20), network::Fidelity::Ideal);
    spec.compute.host.enabled = true;
    spec.compute.host.pass = Time::us(5);
    spec.compute.host.launch = Time::us(30);
    auto sched = schedule::make_schedule("1f1b");
    const schedule::PipelineShape shape{1, 1, 1};
    const auto plan = workload::plan_iteration(spec, 1, false, [](int) { return 0; });
    replay::Replay replay(spec, plan, *sched, shape);
    replay.set_duration_model(std::make_unique<Double>());
    HostRecorder rec;
    replay.add_observer(rec);
    CHECK(replay.run().iteration_time == Time::us(320));
    REQUIRE(rec.passes.size() == 2);
    CHECK(rec.passes[0].end == Time::us(145));
    CHECK(rec.passes[0].host_stall == Time::us(30));
    CHECK(rec.passes[1].start == Time::us(160));
    CHECK(rec.passes[1].host_stall == Time::zero());
}
