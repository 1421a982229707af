#include "report/goodput.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/errors.hpp"
#include "engine/random.hpp"
#include "report/summary.hpp"
#include "workload/flops.hpp"

namespace cs::report {

double young_interval(const GoodputInputs& in) {
    return std::sqrt(2 * in.checkpoint_s * in.mtbf_s);
}

double daly_interval(const GoodputInputs& in) {
    const double d = in.checkpoint_s, m = in.mtbf_s;
    if (d >= 2 * m) return m;
    const double x = d / (2 * m);
    return std::sqrt(2 * d * m) * (1 + std::sqrt(x) / 3 + x / 9) - d;
}

double goodput_fraction(const GoodputInputs& in, double interval_s) {
    const double m = in.mtbf_s;
    // expm1 keeps the precision where (tau + delta) << M.
    const double wall =
        m * std::exp(in.restart_s / m) * std::expm1((interval_s + in.checkpoint_s) / m);
    return interval_s / wall;
}

MonteCarloGoodput monte_carlo_goodput(const GoodputInputs& in, double interval_s, int runs,
                                      int segments, std::uint64_t seed) {
    MonteCarloGoodput out;
    out.runs = runs;
    double sum = 0, sum_sq = 0;
    const double segment = interval_s + in.checkpoint_s;
    for (int r = 0; r < runs; ++r) {
        RandomStream random(seed, static_cast<std::uint64_t>(r));
        // Time to the next failure, exponential with mean M (1 - u in (0, 1]).
        const auto next_failure = [&] { return -in.mtbf_s * std::log(1 - random.uniform()); };
        double wall = 0;
        for (int s = 0; s < segments; ++s) {
            for (;;) {
                const double t = next_failure();
                if (t >= segment) {
                    wall += segment;
                    break;
                }
                wall += t;  // the segment's progress is lost
                for (;;) {  // restart until one completes without a failure
                    const double u = next_failure();
                    if (u >= in.restart_s) {
                        wall += in.restart_s;
                        break;
                    }
                    wall += u;
                }
            }
        }
        const double fraction = segments * interval_s / wall;
        sum += fraction;
        sum_sq += fraction * fraction;
    }
    out.mean = sum / runs;
    const double var = runs > 1 ? (sum_sq - runs * out.mean * out.mean) / (runs - 1) : 0;
    out.ci95 = 1.96 * std::sqrt(std::max(0.0, var) / runs);
    return out;
}

// ---- The summary's goodput block --------------------------------------------------------------

namespace {
// Checkpoint intervals up to 1e15 iterations: whole numbers a double and an int64 hold exactly.
constexpr double kMaxCheckpointIterations = 1e15;
constexpr double kMaxSegmentMtbfs = 10;

std::string number_text(double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", v);
    return text;
}

}  // namespace

void add_goodput(Summary& s, const workload::ExperimentSpec& spec) {
    const auto& g = spec.goodput;
    if (!g.present) return;
    GoodputSummary& out = s.goodput;
    out.present = true;
    const double gpus = s.world_size;
    out.mtbf_s = 3600.0 / (gpus * g.failures_per_gpu_hour);
    if (g.write_time) {
        out.checkpoint_write_s = g.write_time->seconds();
    } else {
        double bytes = static_cast<double>(g.checkpoint_bytes.value);
        if (bytes <= 0) {
            // 16-bit weights + fp32 master weights, Adam m and v; fp32 training has no master.
            const double per = spec.training.precision == workload::Precision::Fp32 ? 12 : 14;
            bytes = per * static_cast<double>(workload::parameter_count(spec.model));
        }
        out.checkpoint_bytes = bytes;
        out.checkpoint_write_s = bytes / g.write_bandwidth.bytes_per_s;
    }
    out.restart_s = g.restart.seconds();
    const GoodputInputs in{out.mtbf_s, out.checkpoint_write_s, out.restart_s};
    out.young_interval_s = young_interval(in);
    out.daly_interval_s = daly_interval(in);
    const double wanted = g.interval ? g.interval->seconds() : out.daly_interval_s;
    // Checkpoints fall between iterations: a whole number of them, at least one.
    const double T = s.iteration_time_s;
    const double iterations = wanted / T;
    if (!(iterations <= kMaxCheckpointIterations))
        throw ConfigError(g.where, "'goodput': the checkpoint interval (" + number_text(wanted) +
                                       " s) would be " + number_text(iterations) +
                                       " iterations of " + number_text(T) +
                                       " s, more than the 1e15 the report holds; give a "
                                       "shorter goodput.interval or a higher failure rate");
    out.interval_iterations = std::max<std::int64_t>(1, std::llround(iterations));
    out.interval_s = static_cast<double>(out.interval_iterations) * T;
    // Beyond 10 MTBFs per segment the run keeps less than e^-10 of its time (and the closed
    // form's exponentials overflow soon after): refused, not reported as 0% or nan.
    const double mtbfs = (out.interval_s + out.checkpoint_write_s + out.restart_s) / out.mtbf_s;
    if (!(mtbfs <= kMaxSegmentMtbfs))
        throw ConfigError(g.where,
                          "'goodput': a checkpoint interval (" + number_text(out.interval_s) +
                              " s), its write (" + number_text(out.checkpoint_write_s) +
                              " s) and a restart (" + number_text(out.restart_s) +
                              " s) take more than 10 MTBFs (the job's MTBF is " +
                              number_text(out.mtbf_s) +
                              " s): the run would almost never progress; lower the failure rate, "
                              "or shorten the interval, the checkpoint write or the restart");
    out.fraction = goodput_fraction(in, out.interval_s);
    if (!(out.fraction > 0 && out.fraction <= 1))
        throw ConfigError(g.where, "'goodput': the goodput fraction comes out as " +
                                       number_text(out.fraction) +
                                       ", outside (0, 1]; check the failure rate, checkpoint "
                                       "and restart");
    if (g.monte_carlo_runs > 0) {
        const auto mc = monte_carlo_goodput(in, out.interval_s, g.monte_carlo_runs,
                                            g.monte_carlo_segments, g.monte_carlo_seed);
        out.monte_carlo_runs = mc.runs;
        out.monte_carlo_fraction = mc.mean;
        out.monte_carlo_ci95 = mc.ci95;
    }
    // The GPU model's board power (the catalogue's TDP, or the topology's board_power); 0 when
    // neither knows it: no energy unless goodput.gpu_power is given.
    out.gpu_power_w = g.gpu_power_w.value_or(spec.cluster->gpu_model(0).board_power_w);
    out.iteration_energy_j = gpus * out.gpu_power_w * T * g.pue;
    if (g.tokens > 0 && s.tokens_per_s > 0) {
        out.tokens = g.tokens;
        out.train_time_s = g.tokens / s.tokens_per_s / out.fraction;
        out.gpu_hours = out.train_time_s * gpus / 3600;
        out.energy_kwh = gpus * out.gpu_power_w * out.train_time_s * g.pue / 3.6e6;
        out.energy_per_token_j = out.energy_kwh * 3.6e6 / g.tokens;
        if (!std::isfinite(out.train_time_s) || !std::isfinite(out.energy_kwh))
            throw ConfigError(g.where, "'goodput.tokens': training " + number_text(g.tokens) +
                                           " tokens would take " + number_text(out.train_time_s) +
                                           " s, beyond what the report can state");
    }
}

}  // namespace cs::report
