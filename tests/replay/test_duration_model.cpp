// Seams for per-GPU behaviour in a replay: per-worker duration models (replay/duration_model.hpp)
// defined here, in the test, the experiment's seed and its random streams, and link capacity
// changes seen by pipeline transfers.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/errors.hpp"
#include "ingest/inputs.hpp"
#include "replay/duration_model.hpp"
#include "replay/replay.hpp"
#include "session/run.hpp"
#include "test_support.hpp"

using namespace cs;

namespace {

// A toy slow GPU: worker `worker` computes `percent` per cent slower (integer arithmetic, so
// the times stay exact picoseconds).
class SlowGpu final : public replay::DurationModel {
  public:
    SlowGpu(int worker, int percent) : worker_(worker), percent_(percent) {}
    Time pass_duration(const replay::DurationContext& ctx, Time nominal) override {
        if (ctx.worker != worker_) return nominal;
        return Time::ps(nominal.count_ps() * (100 + percent_) / 100);
    }

  private:
    int worker_, percent_;
};

// Every worker takes the nominal time: a model installed, nothing changed.
class Nominal final : public replay::DurationModel {
  public:
    Time pass_duration(const replay::DurationContext&, Time nominal) override { return nominal; }
};

// What iteration_s installs: a model made fresh for each run, or none.
using MakeModel = std::function<std::unique_ptr<replay::DurationModel>()>;

MakeModel nominal() {
    return [] { return std::make_unique<Nominal>(); };
}
MakeModel slow_gpu(int worker, int percent) {
    return [=] { return std::make_unique<SlowGpu>(worker, percent); };
}

// One iteration of `spec` under `schedule` with the model `make` makes installed.
double iteration_s(const workload::ExperimentSpec& spec, const std::string& schedule,
                   const MakeModel& make) {
    api::RunOptions opt;
    opt.schedule = schedule;
    opt.attach = [&](replay::Replay& r) { r.set_duration_model(make()); };
    return api::run(spec, opt).summary.iteration_time_s;
}

// Four GPUs, every pair joined by a 100 GB/s link each way (GPUs do not forward traffic).
std::shared_ptr<topology::Cluster> mesh_cluster(int gpus) {
    auto ring = test::chain_cluster(1);
    topology::ClusterBuilder b;
    const int model = b.add_gpu_model(ring->gpu_model(0));
    std::vector<topology::DeviceIndex> ids;
    for (int g = 0; g < gpus; ++g) {
        topology::Device d;
        d.id = "gpu" + std::to_string(g);
        d.kind = topology::DeviceKind::Gpu;
        d.node = 0;
        d.model = model;
        ids.push_back(b.add_device(d));
    }
    for (int x = 0; x < gpus; ++x)
        for (int y = x + 1; y < gpus; ++y)
            b.add_link(ids[x], ids[y], topology::LinkKind::NvLink, Bandwidth{100e9}, Time::us(1));
    return std::make_shared<topology::Cluster>(b.build());
}

struct PassLog final : replay::ReplayObserver {
    std::vector<replay::PassRecord> passes;
    void on_pass(const replay::PassRecord& p) override { passes.push_back(p); }
};

}  // namespace

TEST_CASE("a slow GPU stretches the pipeline: GPipe and 1F1B closed forms") {
    // p = 4 stages of one layer, m = 8 microbatches, F = 10 us, B = 20 us per stage, free
    // network. With stage times f_i, b_i, GPipe is a flow shop of m identical jobs forwards and
    // then backwards: T = sum f + (m - 1) max f + sum b + (m - 1) max b.
    //   all alike:          (p + m - 1)(f + b) = 11 x 30 = 330 us
    //   one stage 20% slower (f' = 12, b' = 24), wherever it is:
    //     42 + 7 x 12 + 84 + 7 x 24 = 126 + 252 = 378 us.
    // 1F1B with the last stage slow: that stage runs F, B alternately without a gap from its first
    // forward at 3 f = 30 us (the faster stages before it always have the next activation ready:
    // stage 2 sends F(j+1) 30 us after receiving B(j)'s gradient, within the slow stage's 36 us
    // cycle), so it ends at 30 + 8 x 36 = 318 us; the last gradient then crosses stages 2, 1, 0
    // (3 x 20 us, each free by then): 378 us, the same as sum (f + b) + (m - 1)(f' + b').
    const auto spec =
        test::profile_experiment(4, 8, 4, Time::us(10), Time::us(20), network::Fidelity::Ideal);
    CHECK(iteration_s(spec, "gpipe", nominal()) == doctest::Approx(330e-6).epsilon(1e-12));
    CHECK(iteration_s(spec, "1f1b", nominal()) == doctest::Approx(330e-6).epsilon(1e-12));
    const auto last = slow_gpu(3, 20);
    const auto second = slow_gpu(1, 20);
    CHECK(iteration_s(spec, "gpipe", last) == doctest::Approx(378e-6).epsilon(1e-12));
    CHECK(iteration_s(spec, "gpipe", second) == doctest::Approx(378e-6).epsilon(1e-12));
    CHECK(iteration_s(spec, "1f1b", last) == doctest::Approx(378e-6).epsilon(1e-12));
}

TEST_CASE("only the slow worker's compute changes; collectives keep their nominal cost") {
    // tp = 2, pp = 2 on a 4-GPU mesh, roofline compute: every pass has blocking TP all-reduces,
    // costed once per plan and shared by both workers. The slow worker 1 (stage 1) must get
    // 1.25 x its nominal compute and the same collective time as without a model; worker 0 is
    // untouched.
    auto spec =
        test::profile_experiment(2, 2, 2, Time::us(1), Time::us(1), network::Fidelity::Flow);
    spec.cluster = mesh_cluster(4);
    spec.layout.tp = 2;
    spec.compute.kind = workload::ComputeSpec::Kind::Roofline;
    auto run = [&](bool slow) {
        PassLog log;
        api::RunOptions opt;
        opt.schedule = "1f1b";
        opt.attach = [&](replay::Replay& r) {
            r.add_observer(log);
            if (slow) r.set_duration_model(std::make_unique<SlowGpu>(1, 25));
        };
        api::run(spec, opt).summary;
        return log.passes;
    };
    const auto nominal = run(false);
    const auto slowed = run(true);
    REQUIRE(nominal.size() == 8);  // 2 workers x 2 microbatches x (F, B)
    REQUIRE(slowed.size() == nominal.size());
    auto find = [](const std::vector<replay::PassRecord>& v, const replay::PassRecord& like) {
        for (const auto& p : v)
            if (p.worker == like.worker && p.microbatch == like.microbatch && p.pass == like.pass)
                return p;
        FAIL("pass not found");
        return like;
    };
    for (const auto& n : nominal) {
        const auto s = find(slowed, n);
        CHECK(n.collective > Time::zero());
        CHECK(s.collective == n.collective);
        if (n.worker == 1) {
            CHECK(s.compute == Time::ps(n.compute.count_ps() * 125 / 100));
            CHECK(s.end - s.start == s.compute + s.collective);
        } else {
            CHECK(s.compute == n.compute);
        }
    }
}

TEST_CASE("the duration model sees each pass once, with its worker, GPUs, stage and step") {
    struct Seen {
        std::vector<replay::DurationContext> contexts;  // gpus and random not kept (call only)
        std::vector<std::vector<int>> gpus;
    };
    struct Recorder final : replay::DurationModel {  // owned by the replay; logs outside it
        Seen* out;
        explicit Recorder(Seen* o) : out(o) {}
        Time pass_duration(const replay::DurationContext& ctx, Time nominal) override {
            out->contexts.push_back(ctx);
            out->gpus.emplace_back(ctx.gpus.begin(), ctx.gpus.end());
            CHECK(ctx.random != nullptr);
            return nominal;
        }
    };
    // pp = 2, m = 3, 1F1B: 2 workers x 3 microbatches x (F, B) = 12 calls; stage s runs on GPU s.
    const auto spec =
        test::profile_experiment(2, 3, 2, Time::us(3), Time::us(7), network::Fidelity::Ideal);
    Seen seen;
    std::vector<std::vector<int>> worker_gpus;
    api::RunOptions opt;
    opt.attach = [&](replay::Replay& r) {
        r.set_step(5);
        r.set_duration_model(std::make_unique<Recorder>(&seen));
        for (const auto& w : r.workers())
            worker_gpus.push_back(w.gpus);
    };
    const auto s = api::run(spec, opt).summary;
    // The model is the identity: 1F1B with p = 2, m = 3 is (m + p - 1)(F + B) = 4 x 10 = 40 us.
    CHECK(s.iteration_time_s == doctest::Approx(40e-6).epsilon(1e-12));
    REQUIRE(seen.contexts.size() == 12);
    int forwards[2] = {0, 0}, backwards[2] = {0, 0};
    for (std::size_t i = 0; i < seen.contexts.size(); ++i) {
        const auto& c = seen.contexts[i];
        CHECK(c.step == 5);
        CHECK(c.stage == c.worker);
        CHECK(c.dp == 0);
        CHECK(c.virtual_stage == c.stage);
        CHECK(seen.gpus[i] == worker_gpus[static_cast<std::size_t>(c.worker)]);
        CHECK(seen.gpus[i] == std::vector<int>{c.worker});
        auto& count = c.pass == schedule::Pass::Forward ? forwards : backwards;
        CHECK(c.microbatch == count[c.worker]++);  // each worker's passes in microbatch order
    }
    CHECK(forwards[0] == 3);
    CHECK(forwards[1] == 3);
    CHECK(backwards[0] == 3);
    CHECK(backwards[1] == 3);
}

TEST_CASE("random draws come from the worker's own stream, keyed by the experiment seed") {
    // A jitter model adds 0 .. 999 ns drawn from ctx.random and logs each draw per worker. The
    // draws of worker w must be exactly RandomStream(seed, duration_stream_id(step, w)) in order:
    // the experiment's seed reaches the replay's Simulation, and streams are per worker and step.
    using Draws = std::vector<std::vector<std::uint64_t>>;  // per worker
    struct Jitter final : replay::DurationModel {
        Draws* draws;
        explicit Jitter(Draws* d) : draws(d) {}
        Time pass_duration(const replay::DurationContext& ctx, Time nominal) override {
            const std::uint64_t d = ctx.random->below(1000);
            (*draws)[static_cast<std::size_t>(ctx.worker)].push_back(d);
            return nominal + Time::ns(static_cast<std::int64_t>(d));
        }
    };
    auto spec =
        test::profile_experiment(2, 4, 2, Time::us(3), Time::us(7), network::Fidelity::Ideal);
    auto run = [&](std::uint64_t seed, std::int64_t step, Draws* out) {
        spec.seed = seed;
        Draws local(2);
        api::RunOptions opt;
        opt.attach = [&](replay::Replay& r) {
            r.set_step(step);
            r.set_duration_model(std::make_unique<Jitter>(&local));
        };
        const double t = api::run(spec, opt).summary.iteration_time_s;
        if (out) *out = local;
        return t;
    };
    Draws draws;
    const double t42 = run(42, 3, &draws);
    for (int w = 0; w < 2; ++w) {
        RandomStream expect(42, replay::duration_stream_id(3, w));
        REQUIRE(draws[static_cast<std::size_t>(w)].size() == 8);  // 4 microbatches x (F, B)
        for (std::uint64_t d : draws[static_cast<std::size_t>(w)])
            CHECK(d == expect.below(1000));
    }
    // Same seed and step: the same iteration; the nominal one is 5 x 10 = 50 us and every pass
    // is stretched by less than 1 us, so the result lies in [50, 50 + 16) us.
    CHECK(run(42, 3, nullptr) == t42);
    CHECK(t42 >= 50e-6);
    CHECK(t42 < 66e-6);
    // Another seed or another step draws other numbers (the stream ids or keys differ).
    Draws other_seed, other_step;
    run(43, 3, &other_seed);
    run(42, 4, &other_step);
    CHECK(other_seed != draws);
    CHECK(other_step != draws);
}

TEST_CASE("a model that keeps the nominal times gives byte-identical summaries to no model") {
    const auto spec =
        test::profile_experiment(4, 8, 8, Time::us(3), Time::us(7), network::Fidelity::Flow);
    api::RunOptions plain;
    auto a = report::to_json(api::run(spec, plain).summary);
    api::RunOptions with_nominal;
    with_nominal.attach = [](replay::Replay& r) {
        r.set_duration_model(std::make_unique<Nominal>());
    };
    auto b = report::to_json(api::run(spec, with_nominal).summary);
    a.erase("wall_time_s");
    b.erase("wall_time_s");
    CHECK(a.dump() == b.dump());
}

TEST_CASE("per-worker draws do not depend on the order of simultaneous events") {
    // Jitter of 0 .. 999 ns per pass from each worker's own stream, p = 4, m = 8, free network
    // (a pass's output arrives at the instant it ends, so many events share a time). Shuffling
    // same-time ties in the replay's engine must give the same draws and the same iteration.
    struct Jitter final : replay::DurationModel {
        Time pass_duration(const replay::DurationContext& ctx, Time nominal) override {
            return nominal + Time::ns(static_cast<std::int64_t>(ctx.random->below(1000)));
        }
    };
    auto spec =
        test::profile_experiment(4, 8, 4, Time::us(10), Time::us(20), network::Fidelity::Ideal);
    spec.seed = 11;
    auto run = [&](bool shuffle) {
        PassLog log;
        api::RunOptions opt;
        opt.attach = [&](replay::Replay& r) {
            if (shuffle) r.simulation().set_tie_shuffle(2024);
            r.add_observer(log);
            r.set_duration_model(std::make_unique<Jitter>());
        };
        const double t = api::run(spec, opt).summary.iteration_time_s;
        std::vector<std::tuple<int, int, int, std::int64_t>> passes;
        for (const auto& p : log.passes)
            passes.emplace_back(p.worker, p.microbatch, static_cast<int>(p.pass),
                                p.compute.count_ps());
        std::sort(passes.begin(), passes.end());
        return std::make_pair(t, passes);
    };
    const auto plain = run(false);
    const auto shuffled = run(true);
    // Nominal 330 us (p + m - 1)(f + b); the jitter stretches it by less than 22 passes x 1 us.
    CHECK(plain.first > 330e-6);
    CHECK(plain.first < 352e-6);
    CHECK(shuffled.first == plain.first);
    CHECK(shuffled.second == plain.second);
}

TEST_CASE("a link halved before the run doubles the pipeline transfers' time") {
    // As in test_replay.cpp: two stages, one microbatch, F = 3 us, B = 7 us, 2,097,152-byte
    // activations over a 100 GB/s link with 1 us latency. Halving both directions of the link
    // (links 0 and 1) makes each transfer 2 x 20.97152 = 41.94304 us + 1 us:
    // T = 3 + 42.94304 + 3 + 7 + 42.94304 + 7 = 105.88608 us (63.94304 us at full capacity).
    const auto spec =
        test::profile_experiment(2, 1, 2, Time::us(3), Time::us(7), network::Fidelity::Flow);
    api::RunOptions opt;
    opt.attach = [](replay::Replay& r) {
        r.network().set_link_capacity(0, Bandwidth{50e9});
        r.network().set_link_capacity(1, Bandwidth{50e9});
    };
    CHECK(api::run(spec, opt).summary.iteration_time_s ==
          doctest::Approx(105.88608e-6).epsilon(1e-9));
    // Halved from 20 us on (an engine event), in the middle of the forward activation: it
    // started at 3 + 1 = 4 us and has sent 16 us x 100 GB/s = 1,600,000 bytes; the other 497,152
    // take 9.94304 us at 50 GB/s, so it arrives at 29.94304 us. Then F1 and B1 (10 us), the
    // gradient at half rate (42.94304 us) and B0 (7 us): T = 89.88608 us.
    api::RunOptions later;
    later.attach = [](replay::Replay& r) {
        r.network().schedule_link_capacity(Time::us(20), 0, Bandwidth{50e9});
        r.network().schedule_link_capacity(Time::us(20), 1, Bandwidth{50e9});
    };
    CHECK(api::run(spec, later).summary.iteration_time_s ==
          doctest::Approx(89.88608e-6).epsilon(1e-9));
}

TEST_CASE("the experiment's seed: default 0, set with --set, negative refused") {
    const auto experiment = api::data_root() / "workloads" / "default.yaml";
    CHECK(workload::load_experiment(experiment, {}).seed == 0);
    CHECK(workload::load_experiment(experiment, {"seed=7"}).seed == 7);
    CHECK_THROWS_AS(workload::load_experiment(experiment, {"seed=-1"}), ConfigError);
    CHECK_THROWS_AS(workload::load_experiment(experiment, {"seed=1.5"}), ConfigError);
}
