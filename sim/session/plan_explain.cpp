// What plan says about its answer: why each runner-up lost to the best layout, and the
// Megatron-LM flags that run the best.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/errors.hpp"
#include "core/units.hpp"
#include "schedule/schedule.hpp"
#include "session/plan.hpp"
#include "workload/megatron_args.hpp"

namespace cs::api {

namespace {

// A time as the console prints times (format_time: "1.803 s", "252.6 ms"), with a sign when
// `sign` (a difference).
std::string time_text(double seconds, bool sign = false) {
    // Beyond the clock (about 106 days; a rate near 0 per 1M tokens) or not a number: in seconds.
    char big[32];
    std::snprintf(big, sizeof big, "%.4g s", std::abs(seconds));
    const std::string t = std::abs(seconds) < 1e6
                              ? format_time(Time::from_seconds_ceil(std::abs(seconds)))
                              : std::string(big);
    if (!sign) return t;
    std::string out(seconds < 0 ? "-" : "+");
    out += t;
    return out;
}

// The objective's value as the plan's table shows it (an MFU of -score, a price, joules).
std::string objective_text(PlanObjective objective, double value) {
    char text[64];
    switch (objective) {
        case PlanObjective::Mfu:
            std::snprintf(text, sizeof text, "MFU %.1f%%", -100 * value);
            break;
        case PlanObjective::Cost:
            std::snprintf(text, sizeof text, "%.4g per 1M tokens", value);
            break;
        case PlanObjective::Energy:
            std::snprintf(text, sizeof text, "%.4g J per token", value);
            break;
        default:
            return time_text(value);
    }
    return text;
}

}  // namespace

std::string why_lost(const PlanFigures& loser, const PlanFigures& winner, bool per_token,
                     PlanObjective objective) {
    // The time the parts are fractions of: the iteration's, or that of 1M tokens at its rate.
    const auto span = [per_token](const PlanFigures& f) {
        return per_token ? 1e6 / f.tokens_per_s : f.iteration_time_s;
    };
    struct Part {
        const char* name;
        double (*value)(const PlanFigures&);
    };
    static const std::array<Part, 8> parts{{
        {"compute", [](const PlanFigures& f) { return 1 - f.idle_fraction; }},
        {"pipeline bubble", [](const PlanFigures& f) { return f.bubble_fraction; }},
        {"exposed TP communication", [](const PlanFigures& f) { return f.exposed_by_kind[0]; }},
        {"exposed CP communication", [](const PlanFigures& f) { return f.exposed_by_kind[1]; }},
        {"exposed EP communication", [](const PlanFigures& f) { return f.exposed_by_kind[2]; }},
        {"exposed DP communication", [](const PlanFigures& f) { return f.exposed_by_kind[3]; }},
        {"exposed pipeline communication",
         [](const PlanFigures& f) { return f.exposed_by_kind[4]; }},
        {"host", [](const PlanFigures& f) { return f.host_fraction; }},
    }};
    static_assert(workload::kCommKinds == 5, "one part per kind of communication");
    const double slower = span(loser) - span(winner);
    const std::string per = per_token ? " per 1M tokens" : " per iteration";
    if (!(slower > 0)) {
        // Not slower: the same score, listed after the winner by enumeration order, or a lower
        // score on an objective other than time (another GPU count costs more, say).
        if (loser.objective == winner.objective)
            return "ties with the best" +
                   (slower == 0 ? std::string(" (the same time)")
                                : " (" + time_text(slower, true) + per + ")") +
                   "; listed after it in enumeration order";
        return time_text(slower, true) + per + ", not slower; ranks lower on " +
               objective_text(objective, loser.objective) + " against " +
               objective_text(objective, winner.objective);
    }
    const Part* worst = &parts[0];
    double most = -std::numeric_limits<double>::infinity();
    for (const auto& part : parts) {
        const double d = part.value(loser) * span(loser) - part.value(winner) * span(winner);
        if (d > most) {
            most = d;
            worst = &part;
        }
    }
    return time_text(slower, true) + per + "; the most: " + worst->name + " " +
           time_text(most, true) + " (" + time_text(worst->value(loser) * span(loser)) +
           " against " + time_text(worst->value(winner) * span(winner)) + ")";
}

std::string guide_versus(const PlanFigures& guide, const PlanFigures& best, bool per_token,
                         PlanObjective objective) {
    if (!(guide.objective < best.objective)) return why_lost(guide, best, per_token, objective);
    return "scores better than #1 (" + objective_text(objective, guide.objective) + " against " +
           objective_text(objective, best.objective) +
           "): outside the space searched (left out by --fix, --schedules or --max-micro-batch)";
}

std::string megatron_args_for(const workload::ExperimentSpec& spec,
                              std::vector<std::string>* notes) {
    const auto schedule = schedule::require_schedule(spec.schedule, SourceLocation{});
    return workload::megatron_args_for(
        spec, {schedule->in_megatron_lm(), schedule->chunks_for(spec.layout.vpp)}, notes);
}

ConfigError nothing_fits(const PlanResult& result) {
    return ConfigError(
        SourceLocation{result.source},
        "none of the " + std::to_string(result.layouts) +
            " layouts searched is valid and fits in " + format_bytes(Bytes{result.limit_bytes}) +
            " per GPU (" + std::to_string(result.invalid) + " invalid, " +
            std::to_string(result.pruned_memory) + " above the memory limit)" +
            (result.invalid_reasons.empty()
                 ? std::string()
                 : "; the most common reason: " +
                       std::max_element(
                           result.invalid_reasons.begin(), result.invalid_reasons.end(),
                           [](const auto& x, const auto& y) { return x.second < y.second; })
                           ->first));
}

}  // namespace cs::api
