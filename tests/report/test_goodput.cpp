// Goodput over a whole run (report/goodput.hpp, docs/what-if.md): Young's and Daly's checkpoint
// intervals, Daly's exact expected segment time for exponential failures, the Monte Carlo that
// checks it, and the summary block that `goodput:` adds to a run.
#include <doctest/doctest.h>

#include <cmath>

#include "../replay/test_support.hpp"
#include "report/goodput.hpp"
#include "session/run.hpp"

using namespace cs;

TEST_CASE("goodput: Young's and Daly's intervals and Daly's exact fraction, by hand") {
    // M = 1 h, a 60 s checkpoint, a 300 s restart.
    const report::GoodputInputs in{3600, 60, 300};
    // Young: sqrt(2 x 60 x 3600) = sqrt(432,000) = 657.2670690...
    CHECK(report::young_interval(in) == doctest::Approx(657.2670690061993).epsilon(1e-12));
    // Daly: x = 60 / 7200 = 1/120; 657.267 x (1 + sqrt(1/120)/3 + 1/1080) - 60 = 617.8756496...
    CHECK(report::daly_interval(in) == doctest::Approx(617.8756496256495).epsilon(1e-12));
    // tau = 600: E = 3600 e^(300/3600) (e^(660/3600) - 1) = 787.3240411... s; 600 / E.
    CHECK(report::goodput_fraction(in, 600) == doctest::Approx(0.762075039799333).epsilon(1e-12));
    // Daly's interval is the optimum of the exact model (its argmax over whole seconds is 618 s):
    // shorter and longer intervals lose.
    const double best = report::goodput_fraction(in, report::daly_interval(in));
    CHECK(best > report::goodput_fraction(in, 0.8 * report::daly_interval(in)));
    CHECK(best > report::goodput_fraction(in, 1.25 * report::daly_interval(in)));
    // A checkpoint longer than 2M: Daly's interval is M.
    CHECK(report::daly_interval({100, 300, 0}) == 100);
    // No checkpoint cost and no restart, tau << M: tau / (M (e^(tau/M) - 1)) ~ 1 - tau / 2M.
    CHECK(report::goodput_fraction({1e6, 0, 0}, 100) ==
          doctest::Approx(1 - 100 / 2e6).epsilon(1e-9));
}

TEST_CASE("goodput: the Monte Carlo agrees with the closed form within its confidence interval") {
    // 400 runs of 200 segments of the process the closed form describes; the seed makes it
    // reproducible, so this is not a flaky check: it fails only if the two models disagree.
    const report::GoodputInputs in{3600, 60, 300};
    const double tau = report::daly_interval(in);
    const auto mc = report::monte_carlo_goodput(in, tau, 400, 200, 7);
    CHECK(mc.runs == 400);
    CHECK(mc.ci95 > 0);
    CHECK(mc.ci95 < 0.01);
    CHECK(std::abs(mc.mean - report::goodput_fraction(in, tau)) <= mc.ci95);
    // The same seed, the same numbers.
    CHECK(report::monte_carlo_goodput(in, tau, 400, 200, 7).mean == mc.mean);
}

TEST_CASE("goodput: the summary block of a run") {
    // One stage of 4 layers, one microbatch: T = 4 x (10 + 20) us = 120 us on 1 GPU.
    auto spec =
        test::profile_experiment(1, 1, 4, Time::us(10), Time::us(20), network::Fidelity::Ideal);
    auto& g = spec.goodput;
    g.present = true;
    g.failures_per_gpu_hour = 1;  // M = 3600 s on one GPU
    g.write_time = Time::ms(60'000);
    g.restart = Time::ms(300'000);
    g.tokens = 1e9;
    g.gpu_power_w = 500;
    g.pue = 1.2;
    api::RunOptions opt;
    opt.schedule = "1f1b";
    const auto s = api::run(spec, opt).summary;
    REQUIRE(s.iteration_time_s == doctest::Approx(120e-6).epsilon(1e-12));
    const auto& o = s.goodput;
    REQUIRE(o.present);
    CHECK(o.mtbf_s == doctest::Approx(3600));
    CHECK(o.checkpoint_write_s == doctest::Approx(60));
    // Daly's 617.8756 s in whole 120 us iterations: 5,148,964 (617.87568 s).
    CHECK(o.interval_iterations == 5'148'964);
    CHECK(o.interval_s == doctest::Approx(5'148'964 * 120e-6).epsilon(1e-12));
    CHECK(o.fraction == doctest::Approx(0.76213).epsilon(1e-4));
    // 1e9 tokens at 1024 tokens per 120 us: 117,187.5 s of training / fraction.
    const double train = 1e9 / (1024 / 120e-6) / o.fraction;
    CHECK(o.train_time_s == doctest::Approx(train).epsilon(1e-12));
    CHECK(o.gpu_hours == doctest::Approx(train / 3600).epsilon(1e-12));
    // 500 W x 1.2 over the wall clock, in kWh; per token in joules.
    CHECK(o.energy_kwh == doctest::Approx(500 * 1.2 * train / 3.6e6).epsilon(1e-12));
    CHECK(o.energy_per_token_j == doctest::Approx(500 * 1.2 * train / 1e9).epsilon(1e-12));
    CHECK(o.iteration_energy_j == doctest::Approx(500 * 1.2 * 120e-6).epsilon(1e-12));
}
