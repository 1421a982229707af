#include "replay/durations/variability.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/errors.hpp"

namespace cs::replay {

namespace {

using workload::Slowdown;
using workload::SlowdownKind;

// One factor of `s` for one pass.
double draw(const Slowdown& s, RandomStream& random) {
    switch (s.kind) {
        case SlowdownKind::Fixed:
            return s.factor;
        case SlowdownKind::Normal:
            // Truncated below at kMinSlowdown by drawing again; after 64 draws (a mean far below
            // it) the floor itself.
            for (int i = 0; i < 64; ++i) {
                const double f = s.factor + s.spread * random.normal();
                if (f > workload::kMinSlowdown) return std::min(f, workload::kMaxSlowdown);
            }
            return workload::kMinSlowdown;
        case SlowdownKind::Lognormal:
            return std::clamp(s.factor * std::exp(s.spread * random.normal()),
                              workload::kMinSlowdown, workload::kMaxSlowdown);
    }
    return 1;
}

class Variability final : public DurationModel {
  public:
    Variability(const workload::VariabilitySpec& spec, int gpu_count)
        : entries_(spec.gpus), of_gpu_(static_cast<std::size_t>(gpu_count)) {
        for (std::size_t e = 0; e < entries_.size(); ++e)
            for (int g : entries_[e].gpus)
                of_gpu_[static_cast<std::size_t>(g)].push_back(e);
    }

    Time pass_duration(const DurationContext& ctx, Time nominal) override {
        double slowest = 0;
        bool any = false;
        for (int g : ctx.gpus) {
            const auto& mine = of_gpu_[static_cast<std::size_t>(g)];
            double f = 1;
            for (std::size_t e : mine)
                f *= draw(entries_[e], *ctx.random);
            any = any || !mine.empty();
            slowest = std::max(slowest, f);
        }
        if (!any || slowest == 1) return nominal;
        // A product of several entries' factors can leave [min, max]: keep it there too.
        slowest = std::clamp(slowest, workload::kMinSlowdown, workload::kMaxSlowdown);
        const double ps = static_cast<double>(nominal.count_ps()) * slowest;
        if (!(ps < 9.0e18))
            // The input's factor and durations did it: api::run reports it as an input error.
            throw ClockOverflow("variability", "a pass of worker " + std::to_string(ctx.worker) +
                                                   " slowed " + std::to_string(slowest) +
                                                   "x overflows the 64-bit picosecond clock");
        return Time::ps(static_cast<std::int64_t>(std::llround(ps)));
    }

  private:
    std::vector<Slowdown> entries_;
    std::vector<std::vector<std::size_t>> of_gpu_;  // per GPU: indices into entries_
};

}  // namespace

std::unique_ptr<DurationModel> make_variability(const workload::VariabilitySpec& spec,
                                                int gpu_count) {
    return std::make_unique<Variability>(spec, gpu_count);
}

double fixed_slowdown(const workload::VariabilitySpec& spec, int gpu) {
    double f = 1;
    for (const auto& s : spec.gpus)
        if (s.kind == SlowdownKind::Fixed && std::binary_search(s.gpus.begin(), s.gpus.end(), gpu))
            f *= s.factor;
    return f;
}

}  // namespace cs::replay
