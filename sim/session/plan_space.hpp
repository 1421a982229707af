// plan's search space, private to plan.cpp and plan_space.cpp: the --fix values, the schedules,
// GPU counts and batches searched, the enumeration of every layout in enumeration order, the
// pipeline splits plan derives, and the shape rules that refuse every variant of a shape at once.
// The search over it is plan.cpp's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "core/name_table.hpp"
#include "schedule/schedule.hpp"
#include "session/plan.hpp"
#include "workload/experiment.hpp"

namespace cs::api::plan_space {

// --fix values: an axis held at one value, or another key applied to every layout.
struct Fixes {
    std::map<std::string, std::string> axes;
    std::vector<std::string> others;  // key=value, in the order given

    // The axis `key` as a positive whole number; none when not fixed.
    std::optional<int> number(const std::string& key) const;
    template <typename E, std::size_t N>
    std::optional<E> choice(const std::string& key, const std::array<Named<E>, N>& table) const {
        const auto at = axes.find(key);
        if (at == axes.end()) return std::nullopt;
        const auto found = find_named(table, at->second);
        if (!found) {
            std::string names;
            for (const auto& row : table)
                names += (names.empty() ? "" : ", ") + std::string(row.name);
            throw ConfigError(SourceLocation{"--fix " + key + "=" + at->second},
                              "unknown value \"" + at->second + "\"; expected " + names);
        }
        return *found;
    }
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
void check_profile_fixes(const workload::ExperimentSpec& base, const Fixes& fixes);

// The result's headline: what is searched, the memory a layout must fit in (`limit` bytes per
// GPU), and what is ranked under which network.
PlanResult result_header(const PlanOptions& options, const workload::ExperimentSpec& base,
                         const std::vector<int>& node_counts, int per_node,
                         const std::vector<std::int64_t>& batches, double limit);

// --global-batch's sizes; {0} (the experiment's) without it.
std::vector<std::int64_t> batches_of(const PlanOptions& options, const Fixes& fixes);

// The axes searched only when asked for (PlanOptions).
struct Extras {
    bool hsdp = false, partial_recompute = false, uneven = false;
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
