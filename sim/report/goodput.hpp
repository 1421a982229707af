// Goodput over a whole training run (docs/what-if.md "Goodput"): the fraction of wall-clock time
// that trains, given the iteration time, exponential failures, checkpoints and restarts.
//
// The model (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart
// dumps"): the job fails at rate 1/M (M = MTBF of the whole job = 1 / (GPUs x failures per
// GPU-hour)); work proceeds in segments of tau seconds of training followed by a checkpoint
// write of delta; a failure loses the segment in progress and costs a restart of R, during which
// failures may strike again. The expected wall time of a segment is then exactly
//     E = M e^(R/M) (e^((tau + delta)/M) - 1)
// and the goodput fraction is tau / E. The interval: Daly's optimum
//     tau_D = sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta  (delta < 2M)
//     tau_D = M                                                                     (otherwise)
// against Young's first-order sqrt(2 delta M). A seeded Monte Carlo of the same process checks
// the closed form.
#pragma once

#include <cstdint>

namespace cs::report {

struct GoodputInputs {
    double mtbf_s = 0;        // M > 0
    double checkpoint_s = 0;  // delta >= 0
    double restart_s = 0;     // R >= 0
};

double young_interval(const GoodputInputs& in);
double daly_interval(const GoodputInputs& in);
// tau / E for segments of tau seconds of training (tau > 0).
double goodput_fraction(const GoodputInputs& in, double interval_s);

struct MonteCarloGoodput {
    int runs = 0;
    double mean = 0;  // mean over runs of (training time / wall time)
    double ci95 = 0;  // half-width of the 95% confidence interval of the mean (1.96 s / sqrt(n))
};
// `runs` independent runs of `segments` segments each, failures drawn from the seeded stream.
MonteCarloGoodput monte_carlo_goodput(const GoodputInputs& in, double interval_s, int runs,
                                      int segments, std::uint64_t seed);

}  // namespace cs::report
