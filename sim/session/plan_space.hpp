// plan's search space, private to plan.cpp and plan_space.cpp: the --fix values, the schedules,
// GPU counts and batches searched, the enumeration of every layout in enumeration order, the
// pipeline splits plan derives, and the shape rules that refuse every variant of a shape at once.
// The search over it is plan.cpp's.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "core/name_table.hpp"
#include "schedule/schedule.hpp"
#include "session/plan.hpp"
#include "workload/experiment.hpp"

namespace cs::api::plan_space {

// The objective of a layout whose iteration takes `T` (lower is better): what is ranked, and,
// with the bound for T, the bound of the objective.
struct Scorer {
    PlanObjective objective = PlanObjective::Time;
    double price = 0;
    double watts = 0;  // energy: a GPU's board power times the PUE
    // Time over several global batches (--global-batch): seconds per 1M tokens, not per
    // iteration.
    bool per_token = false;
    // For a layout of `gpus` GPUs (PlanLayout::gpus: they differ with --gpus).
    double score(double T, double flops, double peak, double tokens, double gpus) const {
        switch (objective) {
            case PlanObjective::Mfu:
                return -(flops / (T * gpus * peak));
            case PlanObjective::Cost:
                return price * gpus * T / 3600.0 / tokens * 1e6;
            case PlanObjective::Energy:
                return watts * gpus * T / tokens;
            default:
                return per_token ? T / tokens * 1e6 : T;
        }
    }
};

// --fix values: an axis held at one value or bounded to some (a set V1,V2,... of values, or for a
// whole-number axis a range MIN..MAX with either end left open), or another key applied to every
// layout.
struct Fixes {
    std::map<std::string, std::string> axes;  // the value as given
    std::vector<std::string> others;          // key=value, in the order given

    // A whole-number axis's bound: its values (a set or one value), or its range.
    struct Bound {
        std::vector<int> values;  // empty: the range
        int low = 1, high = 2147483647;
        bool allows(int v) const {
            return values.empty() ? v >= low && v <= high
                                  : std::find(values.begin(), values.end(), v) != values.end();
        }
    };
    std::map<std::string, Bound> bounds;  // of whole-number axes, read by parse_fixes

    // The axis `key` held at one value; none when not fixed or bounded to several.
    std::optional<int> number(const std::string& key) const;
    // Of `candidates`, those --fix allows, in their order: all without a --fix of `key`; the
    // fixed value alone when held at one (the loader or the shape rules then say why it cannot
    // run, as for any fixed value).
    std::vector<int> allowed(const std::string& key, std::vector<int> candidates) const;
    bool allows(const std::string& key, int v) const {
        const auto at = bounds.find(key);
        return at == bounds.end() || at->second.allows(v);
    }
    // The largest value a bound of `key` allows (its set's largest or its range's high,
    // 2^31 - 1 for a range open above), none without a bound.
    std::optional<int> most(const std::string& key) const;
    // Held at one value: a single value given (not a set or a range).
    bool held(const std::string& key) const;
    // The value of a --fix of `key` that is not an axis (one of `others`), null when none.
    const char* other(std::string_view key) const;

    // A choice axis's values: `all` (in that order) without a --fix of `key`, else those named
    // (one, or a set V1,V2,...; `all` holds every name of `table`), in the order of `all`; an
    // unknown name is refused.
    template <typename E, std::size_t N>
    std::vector<E> choices(const std::string& key, const std::array<Named<E>, N>& table,
                           const std::vector<E>& all) const {
        const auto at = axes.find(key);
        if (at == axes.end()) return all;
        std::vector<E> named;
        for (const auto& name : split_values(key, at->second)) {
            const auto found = find_named(table, name);
            // Two names of one value (an alias: zero1 and optim) are one value given twice.
            if (found && std::find(named.begin(), named.end(), *found) != named.end())
                throw ConfigError(SourceLocation{"--fix " + key + "=" + at->second},
                                  "\"" + name + "\" names a value given already");
            if (!found) {
                std::string names;
                for (const auto& row : table)
                    names += (names.empty() ? "" : ", ") + std::string(row.name);
                throw ConfigError(SourceLocation{"--fix " + key + "=" + at->second},
                                  "unknown value \"" + name + "\"; expected " + names +
                                      " (one, or several separated by commas)");
            }
            named.push_back(*found);
        }
        std::vector<E> out;
        for (const E e : all)
            if (std::find(named.begin(), named.end(), e) != named.end()) out.push_back(e);
        return out;
    }
    // A set's values, split at commas (each non-empty, none twice).
    static std::vector<std::string> split_values(const std::string& key, const std::string& value);
};

Fixes parse_fixes(const std::vector<std::string>& fixes);

// Refuses options out of range (each error names its option); parse_fixes reads --fix first.
void check_options(const PlanOptions& options);

// The schedules searched: --schedules (every registered one without it), or the one --fix names.
std::vector<std::string> searched_schedules(const PlanOptions& options, const Fixes& fixes);

// --gpus as node counts of the topology's nodes of `per_node` GPUs; {0} (the experiment's)
// without it.
std::vector<int> node_counts_of(const std::vector<int>& gpus, int per_node);

// Refuses a profile compute model (compute.model: profile) unless --fix holds tp, cp, ep, the
// micro-batch size and recomputation: its layer times were measured at one of each.
// A stage profile needs pp held too; --partial-recompute needs compute.profiled_recompute.
void check_profile_fixes(const workload::ExperimentSpec& base, const Fixes& fixes,
                         bool partial_recompute);

// The result's headline: what is searched, the memory a layout must fit in (`limit` bytes per
// GPU), and what is ranked under which network.
PlanResult result_header(const PlanOptions& options, const workload::ExperimentSpec& base,
                         const std::vector<int>& node_counts, int per_node,
                         const std::vector<std::int64_t>& batches, double limit);

// One pair of --gpus and --global-batch: the experiment's topology at the count's node count
// (topology.nodes) and that global batch, searched as the experiment is without them.
struct Count {
    int nodes = 0;                  // 0: the experiment's
    std::int64_t global_batch = 0;  // 0: the experiment's
    workload::ExperimentSpec base;
};

// Every pair of a node count and a batch, in that order (`load_at(nodes)`: the experiment at
// that node count); a tp, pp, cp or dp --fix holds must divide some pair's GPUs.
std::vector<Count> counts_of(const std::function<workload::ExperimentSpec(int nodes)>& load_at,
                             const workload::ExperimentSpec& base,
                             const std::vector<int>& node_counts,
                             const std::vector<std::int64_t>& batches, const Fixes& fixes);

// Under compute.model: profile, why a layout cannot be timed (the guide's): a shape other than
// the one the profile was measured at (the values --fix holds; check_profile_fixes); empty
// otherwise.
std::string profile_mismatch(const workload::ExperimentSpec& base, const Fixes& fixes,
                             const PlanLayout& l);

// A --fix of context parallelism's exchange (cp_comm_type, cp_a2a_size), which each layout
// applies after its own cp.
bool cp_exchange_fix(const std::string& fix);

// --global-batch's sizes; {0} (the experiment's) without it.
std::vector<std::int64_t> batches_of(const PlanOptions& options, const Fixes& fixes);

// The axes searched only when asked for (PlanOptions).
struct Extras {
    bool hsdp = false, partial_recompute = false, uneven = false, cp_comm = false;
};

// The first/last split plan derives for `pp` stages (--uneven-stages, and the guide's layouts):
// none at the experiment's own pp (its split is for that pp), at pp 1, or where the layers
// divide evenly.
std::optional<std::pair<int, int>> derived_split(const workload::ExperimentSpec& base, int pp,
                                                 const schedule::Schedule& sched, int vpp);

// Every layout of the space, in enumeration order (tp, pp, cp, then ep, the schedule, vpp, the
// micro-batch size, recompute and sharding; the last varying fastest). Calls f(layout).
void enumerate(const workload::ExperimentSpec& base, const Fixes& fixes,
               const std::vector<std::string>& schedules, int max_mbs, const Extras& extras,
               const std::function<void(const PlanLayout&)>& f);

// Why every variant of `l`'s shape is invalid, or empty. A shape is what the loader's and the
// pipeline split's rules below read: tp, cp, ep, pp, vpp, the schedule's chunks and the split
// (and the GPU count and batch of `base`); its variants (micro-batch size, recompute, sharding)
// change none of it, so one check stands for all of them, without loading any (DeepSeek-V3's
// search: most of its layouts are such shapes). The rules are the loader's own
// (workload::model_split_refusal) and the split replay::prepare makes (workload::split_layers,
// on the experiment with this shape; its message located as the loader's would be, at the
// experiment's split keys). A layout refused by both these and another rule may be named by
// these: it is invalid either way.
std::string shape_refusal(const workload::ExperimentSpec& base, const PlanLayout& l);

// Whether `a` and `b` are of one shape (shape_refusal's).
bool same_shape(const PlanLayout& a, const PlanLayout& b);

// The GPU's peak FLOP/s at the experiment's precision, as report::summarize takes it for the MFU.
double peak_flops(const workload::ExperimentSpec& spec);
// The GPU's board power (the experiment's goodput.gpu_power, else the GPU model's), which
// --objective energy needs (ConfigError without one).
double board_power(const PlanOptions& options, const workload::ExperimentSpec& base);

}  // namespace cs::api::plan_space
