#include "session/plan.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <future>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "core/units.hpp"
#include "network/network.hpp"
#include "replay/bound.hpp"
#include "replay/prepare.hpp"
#include "replay/replay.hpp"
#include "schedule/schedule.hpp"
#include "session/plan_guide.hpp"
#include "session/run.hpp"
#include "session/sweep_cache.hpp"
#include "session/worker_pool.hpp"
#include "workload/megatron_args.hpp"
#include "workload/pipeline_split.hpp"

namespace cs::api {

namespace {

std::vector<int> divisors(int n) {
    std::vector<int> out;
    for (int d = 1; d <= n; ++d)
        if (n % d == 0) out.push_back(d);
    return out;
}

// The axes plan enumerates, by their --set key.
constexpr std::array<std::string_view, 10> kAxisKeys{
    "parallelism.tp",     "parallelism.pp",  "parallelism.dp",       "parallelism.cp",
    "parallelism.ep",     "parallelism.vpp", "parallelism.sharding", "training.micro_batch_size",
    "training.recompute", "schedule"};

// --fix values: an axis held at one value, or another key applied to every layout.
struct Fixes {
    std::map<std::string, std::string> axes;
    std::vector<std::string> others;  // key=value, in the order given

    std::optional<int> number(const std::string& key) const {
        const auto at = axes.find(key);
        if (at == axes.end()) return std::nullopt;
        const std::string& v = at->second;
        int n = 0;
        std::size_t used = 0;
        try {
            n = std::stoi(v, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != v.size() || v.empty() || n < 1)
            throw ConfigError(SourceLocation{"--fix " + key + "=" + v},
                              "expected a positive whole number");
        return n;
    }
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

Fixes parse_fixes(const std::vector<std::string>& fixes) {
    Fixes out;
    std::set<std::string> seen;
    for (const auto& f : fixes) {
        const SourceLocation where{"--fix " + f};
        const auto eq = f.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == f.size())
            throw ConfigError(where, "expected KEY=VALUE, e.g. parallelism.tp=8");
        const std::string key = f.substr(0, eq), value = f.substr(eq + 1);
        if (!seen.insert(key).second) throw ConfigError(where, "'" + key + "' is fixed twice");
        if (std::find(kAxisKeys.begin(), kAxisKeys.end(), key) != kAxisKeys.end()) {
            out.axes[key] = value;
        } else if (key.rfind("parallelism.", 0) == 0 || key.rfind("training.", 0) == 0) {
            out.others.push_back(f);  // the loader checks the key and value
        } else {
            std::string axes;
            for (const auto k : kAxisKeys)
                axes += (axes.empty() ? "" : ", ") + std::string(k);
            throw ConfigError(where, "unknown key '" + key +
                                         "'; expected a parallelism., training. or schedule key "
                                         "(the searched ones: " +
                                         axes + ")");
        }
    }
    return out;
}

template <typename T>
std::vector<T> only_or(const std::optional<T>& fixed, std::vector<T> all) {
    if (!fixed) return all;
    return {*fixed};
}

double peak_flops(const workload::ExperimentSpec& spec) {
    // As report::summarize takes the peak for the MFU.
    const auto& gpu = spec.cluster->gpu_model(0);
    if (spec.training.precision == workload::Precision::Fp16) return gpu.peak_fp16.flops_per_s;
    if (spec.training.precision == workload::Precision::Fp8) return gpu.peak_fp8.flops_per_s;
    return gpu.peak_bf16.flops_per_s;
}

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

// A layout that passed the memory check, with what its bound needs. Small, so that holding
// every survivor stays cheap; its settings are made again from `layout` when simulated.
struct Survivor {
    PlanLayout layout;
    std::size_t index = 0;
    double bound_s = 0;
    double bound_score = 0;
    double flops = 0, peak = 0, tokens = 0;
    std::int64_t memory = 0;
};

PlanFigures figures_of(const report::Summary& s, const Scorer& scorer, double flops, double peak,
                       double tokens, double gpus) {
    PlanFigures f;
    f.iteration_time_s = s.iteration_time_s;
    f.tokens_per_s = s.tokens_per_s;
    f.mfu = s.mfu;
    f.objective = scorer.score(s.iteration_time_s, flops, peak, tokens, gpus);
    f.memory_bytes = s.memory.total.value;
    f.bubble_fraction = s.bubble_fraction;
    f.exposed_comm_fraction = s.exposed_comm_fraction;
    f.host_fraction = s.host_fraction;
    f.idle_fraction = s.idle_fraction;
    f.exposed_by_kind = s.exposed_by_kind;
    return f;
}

// The most memory any GPU of the layout needs (the plan's device memory).
std::int64_t worst_memory(const replay::PreparedIteration& p) {
    std::int64_t memory = 0;
    for (const auto& d : p.plan.devices)
        memory = std::max(memory, d.memory.total.value);
    return memory;
}

// Thrown by plan's admit hook: the layout's memory floor is above the limit.
struct OverMemory {};

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

// Why `loser` ranks below `winner`: the part of the iteration that grew the most; per 1M
// tokens rather than per iteration when their batches differ (`per_token`: --global-batch).
std::string why_lost(const PlanFigures& loser, const PlanFigures& winner, bool per_token) {
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
    const Part* worst = &parts[0];
    double most = -std::numeric_limits<double>::infinity();
    for (const auto& part : parts) {
        const double d = part.value(loser) * span(loser) - part.value(winner) * span(winner);
        if (d > most) {
            most = d;
            worst = &part;
        }
    }
    return time_text(span(loser) - span(winner), true) +
           (per_token ? " per 1M tokens" : " per iteration") + "; the most: " + worst->name + " " +
           time_text(most, true) + " (" + time_text(worst->value(loser) * span(loser)) +
           " against " + time_text(worst->value(winner) * span(winner)) + ")";
}

nlohmann::ordered_json figures_json(const PlanFigures& f) {
    nlohmann::ordered_json j{{"iteration_time_s", f.iteration_time_s},
                             {"tokens_per_s", f.tokens_per_s},
                             {"mfu", f.mfu},
                             {"objective", f.objective},
                             {"memory_per_gpu_bytes", f.memory_bytes},
                             {"bubble_fraction", f.bubble_fraction},
                             {"exposed_comm_fraction", f.exposed_comm_fraction}};
    // The summary's own keys for the parts (exposed_tp_fraction, ...).
    for (std::size_t k = 0; k < f.exposed_by_kind.size(); ++k)
        j[report::exposed_kind_keys()[k]] = f.exposed_by_kind[k];
    j["host_fraction"] = f.host_fraction;
    j["idle_fraction"] = f.idle_fraction;
    return j;
}

nlohmann::ordered_json layout_json(const PlanLayout& l) {
    nlohmann::ordered_json j{
        {"tp", l.tp},
        {"pp", l.pp},
        {"dp", l.dp},
        {"cp", l.cp},
        {"ep", l.ep},
        {"vpp", l.vpp},
        {"micro_batch_size", l.micro_batch_size},
        {"recompute", std::string(name_of(workload::kRecomputeNames, l.recompute))},
        {"sharding", std::string(name_of(workload::kShardingNames, l.sharding))},
        {"schedule", l.schedule}};
    // Only where searched (--gpus, --uneven-stages, --hsdp, --partial-recompute) and set.
    if (l.nodes > 0) {
        j["gpus"] = l.gpus();
        j["nodes"] = l.nodes;
    }
    if (l.first_stage_layers > 0) {
        j["first_stage_layers"] = l.first_stage_layers;
        j["last_stage_layers"] = l.last_stage_layers;
    }
    if (l.shard_size > 0) j["shard_size"] = l.shard_size;
    if (l.recompute_layers > 0) {
        j["recompute_method"] = "block";
        j["recompute_layers"] = l.recompute_layers;
    }
    if (l.global_batch > 0) j["global_batch_size"] = l.global_batch;
    return j;
}

// The axes searched only when asked for (PlanOptions).
struct Extras {
    bool hsdp = false, partial_recompute = false, uneven = false;
};

// A first/last split of `layers` over `pp` stages of `chunks` chunks each, as Megatron-LM's
// --decoder-first/last-pipeline-num-layers take it: the pp - 2 middle stages hold m layers each,
// stage 0 and stage pp - 1 the rest, every count a multiple of the chunks and at least one per
// chunk. Of m = the chunks' multiples just below and above layers / pp, the one whose largest
// stage is smallest (the first on a tie), the rest halved with the odd chunk's layers on stage 0.
// None when no such split exists.
std::optional<std::pair<int, int>> first_last_split(int layers, int pp, int chunks) {
    std::optional<std::pair<int, int>> best;
    int best_max = 0;
    const int down = chunks * (layers / (pp * chunks));
    for (const int m : {down, down + chunks}) {
        if (pp > 2 && m < chunks) continue;
        const int rest = layers - (pp > 2 ? m * (pp - 2) : 0);
        if (rest < 2 * chunks || rest % chunks != 0) continue;
        const int first = chunks * ((rest / chunks + 1) / 2);
        const int last = rest - first;
        if (last < chunks) continue;
        const int most = std::max({first, last, pp > 2 ? m : 0});
        if (!best || most < best_max) {
            best = std::pair{first, last};
            best_max = most;
        }
        if (pp == 2) break;  // no middle stages: m does not matter
    }
    return best;
}

// The layers a chunk of `schedule` holds per stage: its chunks of one model copy (DualPipe holds
// two copies of one chunk each).
int chunks_per_stage(const schedule::Schedule& sched, int vpp) {
    return sched.chunks_for(vpp) / sched.model_copies();
}

// The first/last split plan derives for `pp` stages (--uneven-stages, and the guide's layouts):
// none at the experiment's own pp (its split is for that pp), at pp 1, or where the layers
// divide evenly.
std::optional<std::pair<int, int>> derived_split(const workload::ExperimentSpec& base, int pp,
                                                 const schedule::Schedule& sched, int vpp) {
    const int per_stage = chunks_per_stage(sched, vpp);
    const int layers = base.model.layers;
    if (pp < 2 || pp == base.layout.pp || layers % (pp * per_stage) == 0) return std::nullopt;
    return first_last_split(layers, pp, per_stage);
}

// The variants of one shape (tp, pp, cp, dp, ep, schedule, vpp: `shape`'s fields) in enumeration
// order: the pipeline split, the micro-batch size, recompute (and with --partial-recompute the
// block method's N), sharding (and with --hsdp its shard group sizes). Calls f(layout).
template <typename F>
void variants(const PlanLayout& shape, const std::vector<std::pair<int, int>>& splits,
              const std::vector<int>& mbss, const std::vector<workload::Recompute>& recomputes,
              const std::vector<workload::Sharding>& shardings, bool any_sharding, int chunk_layers,
              const Extras& extras, F&& f) {
    PlanLayout l = shape;
    for (const auto& [first, last] : splits) {
        l.first_stage_layers = first;
        l.last_stage_layers = last;
        for (const int mbs : mbss) {
            l.micro_batch_size = mbs;
            for (const auto recompute : recomputes) {
                l.recompute = recompute;
                // N recomputed layers of a chunk's (rounded up when the chunks are uneven: the
                // loader refuses what does not fit); 0: the uniform method.
                const bool blocks =
                    extras.partial_recompute && recompute == workload::Recompute::Full;
                for (int block = 0; block == 0 || (blocks && block < chunk_layers); ++block) {
                    l.recompute_layers = block;
                    for (const auto sharding : shardings) {
                        // Sharding shards over the data-parallel replicas.
                        if (l.dp == 1 && sharding != workload::Sharding::None && !any_sharding)
                            continue;
                        l.sharding = sharding;
                        l.shard_size = 0;
                        f(l);
                        if (!extras.hsdp || sharding == workload::Sharding::None) continue;
                        for (const int s : divisors(l.dp))
                            if (s >= 2 && s < l.dp) {
                                l.shard_size = s;
                                f(l);
                            }
                    }
                }
            }
        }
    }
}

// Every layout of the space, in enumeration order (tp, pp, cp, then ep, the schedule, vpp, the
// micro-batch size, recompute and sharding; the last varying fastest). Calls f(layout).
template <typename F>
void enumerate(const workload::ExperimentSpec& base, const Fixes& fixes,
               const std::vector<std::string>& schedules, int max_mbs, const Extras& extras,
               F&& f) {
    const int n = base.layout.world_size();
    const auto fixed_dp = fixes.number("parallelism.dp");
    const auto fixed_ep = fixes.number("parallelism.ep");
    const auto fixed_vpp = fixes.number("parallelism.vpp");
    const auto fixed_mbs = fixes.number("training.micro_batch_size");
    const auto recomputes = only_or(
        fixes.choice("training.recompute", workload::kRecomputeNames),
        {workload::Recompute::None, workload::Recompute::Selective, workload::Recompute::Full});
    const auto shardings = only_or(fixes.choice("parallelism.sharding", workload::kShardingNames),
                                   {workload::Sharding::None, workload::Sharding::Optimizer,
                                    workload::Sharding::Gradients, workload::Sharding::Parameters});
    const int layers = base.model.layers;
    const std::int64_t gbs = base.training.global_batch_size;
    for (const int tp : only_or(fixes.number("parallelism.tp"), divisors(n))) {
        if (n % tp) continue;
        for (const int pp : only_or(fixes.number("parallelism.pp"), divisors(n / tp))) {
            if ((n / tp) % pp) continue;
            for (const int cp : only_or(fixes.number("parallelism.cp"), divisors(n / tp / pp))) {
                if ((n / tp / pp) % cp) continue;
                const int dp = n / tp / pp / cp;
                if (fixed_dp && *fixed_dp != dp) continue;
                const auto eps = base.model.experts > 0 ? divisors(dp * cp) : std::vector<int>{1};
                for (const int ep : only_or(fixed_ep, eps)) {
                    for (const auto& schedule : schedules) {
                        // Virtual stages only where the schedule takes a vpp (chunks_for(v) = v):
                        // v >= 2 dividing the stage's layers.
                        std::vector<int> vpps{1};
                        const auto sched = schedule::make_schedule(schedule);
                        if (sched->chunks_for(3) == 3 && sched->chunks_for(4) == 4) {
                            // Megatron-Core refuses virtual stages on one pipeline stage
                            // ("pipeline-model-parallel size should be greater than 1 with
                            // interleaved schedule"): not a layout it runs.
                            if (pp == 1) continue;
                            vpps.clear();
                            if (layers % pp == 0)
                                for (const int v : divisors(layers / pp))
                                    if (v >= 2) vpps.push_back(v);
                            if (vpps.empty()) vpps.push_back(2);  // refused: said so
                        }
                        for (const int vpp : only_or(fixed_vpp, vpps)) {
                            std::vector<int> mbss;
                            if (gbs % dp == 0) {
                                for (const int m : divisors(static_cast<int>(gbs / dp)))
                                    if (m <= max_mbs) mbss.push_back(m);
                            } else {
                                mbss.push_back(1);  // refused by the loader: said so
                            }
                            std::vector<std::pair<int, int>> splits{{0, 0}};
                            if (extras.uneven)
                                if (const auto split = derived_split(base, pp, *sched, vpp))
                                    splits.push_back(*split);
                            // Partial recomputation's N goes up to a chunk's layers (the
                            // schedule's chunks per stage, both copies of DualPipe's counted).
                            const int chunks = pp * sched->chunks_for(vpp);
                            const int chunk_layers = (layers + chunks - 1) / chunks;
                            variants(PlanLayout{tp, pp, dp, cp, ep, vpp, 1, {}, {}, schedule},
                                     splits, only_or(fixed_mbs, mbss), recomputes, shardings,
                                     fixes.axes.count("parallelism.sharding") > 0, chunk_layers,
                                     extras, f);
                        }
                    }
                }
            }
        }
    }
}

struct Loader {
    const PlanOptions& options;
    std::vector<std::string> base;  // --set, then the --fix keys that are not axes
    SweepCache* cache = nullptr;
    workload::ExperimentSpec load(const PlanLayout& l, bool analytical) const {
        std::vector<std::string> more = l.overrides();
        if (analytical) more.emplace_back("network.model=analytical");
        return load(more);
    }
    // The experiment with `base`, then `more`.
    workload::ExperimentSpec load(const std::vector<std::string>& more) const {
        auto overrides = base;
        overrides.insert(overrides.end(), more.begin(), more.end());
        auto* clusters = cache ? &cache->clusters : nullptr;
        auto* documents = cache ? &cache->documents : nullptr;
        return options.text ? workload::load_experiment(*options.text, overrides,
                                                        options.max_memory, clusters, documents)
                            : workload::load_experiment(options.experiment, overrides,
                                                        options.max_memory, clusters, documents);
    }
};

report::Summary simulate(const workload::ExperimentSpec& spec, SweepCache* cache, bool fast_paths) {
    RunOptions run_options;
    run_options.fast_paths = fast_paths;
    // plan's figures read no link, so none is accounted (the transfers' kept costs are reused
    // without telling anyone of their links).
    if (cache) cache->links = SweepCache::Links::None;
    return run(spec, run_options, cache).summary;
}

// What one process (or one chunk of its share) found in the search.
struct Search {
    std::size_t layouts = 0, invalid = 0, pruned_memory = 0;
    std::map<std::string, std::size_t> invalid_reasons;
    std::vector<Survivor> survivors;
    std::vector<PlanEntry> entries;  // with keep_entries

    // Appends `part` (a later chunk: the order of survivors and entries stays the enumeration's).
    void absorb(Search&& part) {
        layouts += part.layouts;
        invalid += part.invalid;
        pruned_memory += part.pruned_memory;
        for (auto& [reason, count] : part.invalid_reasons)
            invalid_reasons[reason] += count;
        survivors.insert(survivors.end(), std::make_move_iterator(part.survivors.begin()),
                         std::make_move_iterator(part.survivors.end()));
        entries.insert(entries.end(), std::make_move_iterator(part.entries.begin()),
                       std::make_move_iterator(part.entries.end()));
    }
};

// What each worker thread keeps for itself: its caches (SweepCache's parts and a cluster's
// mutable route caches are not shared between threads) and the collective costs of its bounds.
struct Worker {
    std::shared_ptr<SweepCache> cache;
    Loader loader;
    std::unique_ptr<replay::CollectiveCosts> costs;
    const topology::Cluster* costs_cluster = nullptr;

    // The costs for `cluster`: one CollectiveCosts per cluster (its cache serves the layouts
    // that share groups and sizes).
    replay::CollectiveCosts& costs_for(const workload::ExperimentSpec& spec) {
        if (!costs || costs_cluster != spec.cluster.get()) {
            costs = std::make_unique<replay::CollectiveCosts>(*spec.cluster, spec.network);
            costs_cluster = spec.cluster.get();
        }
        return *costs;
    }
};

// Why every variant of `l`'s shape is invalid, or empty. A shape is what the loader's and the
// pipeline split's rules below read: tp, cp, ep, pp, vpp, the schedule's chunks and the split
// (and the GPU count and batch of `base`); its variants (micro-batch size, recompute, sharding)
// change none of it, so one check stands for all of them, without loading any (DeepSeek-V3's
// search: most of its layouts are such shapes). The rules are the loader's own
// (workload::model_split_refusal) and the split replay::prepare makes (workload::split_layers,
// on the experiment with this shape; its message located as the loader's would be, at the
// experiment's split keys). A layout refused by both these and another rule may be named by
// these: it is invalid either way.
std::string shape_refusal(const workload::ExperimentSpec& base, const PlanLayout& l) {
    if (auto [key, why] =
            workload::model_split_refusal(base.model, base.training.seq_length, l.tp, l.cp, l.ep);
        !why.empty()) {
        // Located as the loader locates it: at the override that set the key (plan sets tp, cp
        // and ep on every layout: PlanLayout::overrides).
        const int value = key == "tp" ? l.tp : key == "cp" ? l.cp : l.ep;
        return "--set parallelism." + key + "=" + std::to_string(value) + ": 'parallelism." + key +
               "': " + why;
    }
    workload::ExperimentSpec spec = base;
    spec.layout.tp = l.tp;
    spec.layout.cp = l.cp;
    spec.layout.ep = l.ep;
    spec.layout.pp = l.pp;
    spec.layout.dp = l.dp;
    spec.layout.vpp = l.vpp;
    if (l.first_stage_layers > 0) {
        // PlanLayout::overrides: the derived split replaces the experiment's.
        spec.pipeline_split = {};
        spec.pipeline_split.first_stage_layers = l.first_stage_layers;
        spec.pipeline_split.last_stage_layers = l.last_stage_layers;
    }
    const auto sched = schedule::make_schedule(l.schedule);
    const int chunks = sched->chunks_for(l.vpp);
    // Where virtual stages sit does not depend on the microbatches, but for DualPipe's, whose
    // microbatch 0 enters at device 0 when there are at least 2 (fewer: the schedule refuses).
    const schedule::PipelineShape shape{l.pp, 2, chunks};
    try {
        (void)workload::split_layers(spec, chunks / sched->model_copies(),
                                     [&](int vs) { return sched->place(shape, vs, 0).device; });
    } catch (const ConfigError& e) {
        return e.what();
    }
    return {};
}

// Steps 1-3 for one layout (see plan.hpp), into `out`.
struct SearchStep {
    const PlanOptions& options;
    const Scorer& scorer;
    const topology::GpuModel& gpu;
    double limit = 0;

    // `refused`: shape_refusal's reason for the layout's shape (empty: none).
    void operator()(const PlanLayout& l, std::size_t index, const std::string& refused, Worker& w,
                    Search& out) const {
        ++out.layouts;
        PlanEntry entry;
        entry.layout = l;
        entry.index = index;
        // What the loader would refuse for the sharding alone is counted without loading (a
        // third of GPT-3's layouts, 40% of DeepSeek-V3's): the same rule and message.
        // Then the shape's refusal (shape_refusal), after the sharding's as the loader reads
        // the sharding first.
        auto why = workload::sharding_refusal(l.sharding, l.cp, l.ep);
        if (why.empty()) why = refused;
        if (!why.empty()) {
            entry.status = PlanEntry::Status::Invalid;
            ++out.invalid;
            ++out.invalid_reasons[why];
            entry.reason = std::move(why);
            if (options.keep_entries) out.entries.push_back(std::move(entry));
            return;
        }
        try {
            const auto spec = w.loader.load(l, true);
            // A layout whose memory floor (one microbatch in flight) is already above the
            // limit is refused before its op orders are made: they grow with the microbatches.
            std::int64_t memory = 0;
            bool floor_only = false;
            replay::PrepareOptions prepare_options;
            prepare_options.admit = [&](const replay::PreparedIteration& it) {
                const std::int64_t floor = worst_memory(it);
                if (gpu.hbm.value > 0 && static_cast<double>(floor) > limit) {
                    memory = floor;
                    floor_only = true;
                    throw OverMemory{};
                }
            };
            std::optional<replay::PreparedIteration> prepared;
            try {
                prepared.emplace(replay::prepare(spec, "", prepare_options));
                memory = worst_memory(*prepared);
            } catch (const OverMemory&) {
            }
            entry.memory_bytes = memory;
            if (gpu.hbm.value > 0 && static_cast<double>(memory) > limit) {
                entry.status = PlanEntry::Status::PrunedMemory;
                entry.reason = "needs " + std::string(floor_only ? "at least " : "") +
                               format_bytes(Bytes{memory}) + " per GPU" +
                               (floor_only ? " (one microbatch in flight)" : "") + ", above " +
                               format_bytes(Bytes{static_cast<std::int64_t>(limit)}) + " (HBM " +
                               format_bytes(gpu.hbm) + " less the headroom)";
                ++out.pruned_memory;
            } else {
                Survivor s;
                s.layout = l;
                s.index = index;
                s.bound_s = replay::iteration_lower_bound(*prepared, w.costs_for(spec)).seconds();
                s.flops = prepared->plan.model_flops_per_iteration.value;
                s.peak = peak_flops(spec);
                s.tokens = static_cast<double>(prepared->plan.tokens_per_iteration);
                s.bound_score = scorer.score(s.bound_s, s.flops, s.peak, s.tokens, l.gpus());
                s.memory = memory;
                entry.lower_bound_s = s.bound_s;
                entry.status = PlanEntry::Status::PrunedBound;  // until simulated
                out.survivors.push_back(std::move(s));
            }
        } catch (const ConfigError& e) {
            entry.status = PlanEntry::Status::Invalid;
            entry.reason = e.what();
            ++out.invalid;
            ++out.invalid_reasons[e.what()];
        }
        if (options.keep_entries) out.entries.push_back(std::move(entry));
    }
};

nlohmann::json survivor_cbor(const Survivor& s) {
    const auto& l = s.layout;
    return {l.tp,
            l.pp,
            l.dp,
            l.cp,
            l.ep,
            l.vpp,
            l.micro_batch_size,
            static_cast<int>(l.recompute),
            static_cast<int>(l.sharding),
            l.schedule,
            l.shard_size,
            l.recompute_layers,
            l.nodes,
            l.first_stage_layers,
            l.last_stage_layers,
            s.index,
            s.bound_s,
            s.bound_score,
            s.flops,
            s.peak,
            s.tokens,
            s.memory};
}
Survivor survivor_from(const nlohmann::json& j) {
    Survivor s;
    auto& l = s.layout;
    l.tp = j.at(0);
    l.pp = j.at(1);
    l.dp = j.at(2);
    l.cp = j.at(3);
    l.ep = j.at(4);
    l.vpp = j.at(5);
    l.micro_batch_size = j.at(6);
    l.recompute = static_cast<workload::Recompute>(j.at(7).get<int>());
    l.sharding = static_cast<workload::Sharding>(j.at(8).get<int>());
    l.schedule = j.at(9);
    l.shard_size = j.at(10);
    l.recompute_layers = j.at(11);
    l.nodes = j.at(12);
    l.first_stage_layers = j.at(13);
    l.last_stage_layers = j.at(14);
    s.index = j.at(15);
    s.bound_s = j.at(16);
    s.bound_score = j.at(17);
    s.flops = j.at(18);
    s.peak = j.at(19);
    s.tokens = j.at(20);
    s.memory = j.at(21);
    return s;
}

}  // namespace

std::vector<std::string> PlanLayout::overrides() const {
    std::vector<std::string> out{
        "parallelism.tp=" + std::to_string(tp),
        "parallelism.pp=" + std::to_string(pp),
        "parallelism.dp=" + std::to_string(dp),
        "parallelism.cp=" + std::to_string(cp),
        "parallelism.ep=" + std::to_string(ep),
        "parallelism.vpp=" + std::to_string(vpp),
        "parallelism.sequence_parallel=" + std::string(tp > 1 ? "true" : "false"),
        "parallelism.sharding=" + std::string(name_of(workload::kShardingNames, sharding)),
        "training.micro_batch_size=" + std::to_string(micro_batch_size),
        "training.recompute=" + std::string(name_of(workload::kRecomputeNames, recompute)),
        "schedule=" + schedule};
    if (shard_size > 0) out.push_back("parallelism.shard_size=" + std::to_string(shard_size));
    if (nodes > 0) out.push_back("topology.nodes=" + std::to_string(nodes));
    if (first_stage_layers > 0) {
        // The experiment's own split (a list, or the embedding and loss counted as layers) is
        // replaced by this one.
        out.emplace_back("parallelism.stage_layers=null");
        out.emplace_back("parallelism.account_for_embedding=false");
        out.emplace_back("parallelism.account_for_loss=false");
        out.push_back("parallelism.first_stage_layers=" + std::to_string(first_stage_layers));
        out.push_back("parallelism.last_stage_layers=" + std::to_string(last_stage_layers));
    }
    if (recompute_layers > 0) {
        out.emplace_back("training.recompute_method=block");
        out.push_back("training.recompute_layers=" + std::to_string(recompute_layers));
    }
    if (global_batch > 0)
        out.push_back("training.global_batch_size=" + std::to_string(global_batch));
    return out;
}

std::string PlanLayout::text() const {
    std::ostringstream o;
    o << "tp " << tp << " pp " << pp << " dp " << dp << " cp " << cp << " ep " << ep << " vpp "
      << vpp << " mbs " << micro_batch_size << " recompute "
      << name_of(workload::kRecomputeNames, recompute);
    if (recompute_layers > 0) o << " block " << recompute_layers;
    o << " sharding " << name_of(workload::kShardingNames, sharding);
    if (shard_size > 0) o << " shard " << shard_size;
    o << " " << schedule;
    if (first_stage_layers > 0)
        o << " stages " << first_stage_layers << "/../" << last_stage_layers;
    if (global_batch > 0) o << " batch " << global_batch;
    if (nodes > 0) o << " on " << gpus() << " GPUs";
    return o.str();
}

const char* plan_status_name(PlanEntry::Status s) {
    switch (s) {
        case PlanEntry::Status::Invalid:
            return "invalid";
        case PlanEntry::Status::PrunedMemory:
            return "pruned_memory";
        case PlanEntry::Status::PrunedBound:
            return "pruned_bound";
        case PlanEntry::Status::Simulated:
            return "simulated";
        case PlanEntry::Status::Confirmed:
            return "confirmed";
    }
    return "?";
}

std::optional<PlanResult> plan(const PlanOptions& options, const SweepRanks& ranks) {
    const Fixes fixes = parse_fixes(options.fixes);
    if (options.top == 0) throw ConfigError(SourceLocation{"--top"}, "expected 1 or more");
    if (options.threads < 0)
        throw ConfigError(SourceLocation{"--threads " + std::to_string(options.threads)},
                          "expected a number of threads, 1 or more (or 0: one per core)");
    if (!(options.headroom >= 0 && options.headroom < 1))
        throw ConfigError(SourceLocation{"--headroom"},
                          "expected a fraction of HBM to keep free, at least 0 and below 1");
    if (options.confirm && *options.confirm != 0 &&
        (*options.confirm < options.top || *options.confirm > 1000000))
        throw ConfigError(SourceLocation{"--confirm " + std::to_string(*options.confirm)},
                          "expected a number of layouts from --top (" +
                              std::to_string(options.top) + ") to 1000000, or all");
    if (!(options.margin >= 0) || !std::isfinite(options.margin))
        throw ConfigError(SourceLocation{"--margin"}, "expected a fraction, 0 or more");
    if (options.objective == PlanObjective::Cost &&
        !(options.gpu_hour_price > 0 && std::isfinite(options.gpu_hour_price)))
        throw ConfigError(SourceLocation{"--objective cost"},
                          "needs --gpu-hour-price PRICE (a positive price of one GPU for an "
                          "hour)");

    // One worker per thread (PlanOptions::threads), each with its own caches; worker 0's also
    // serve this thread while no task runs (the experiment as given, the guide, the flags).
    const std::size_t threads = options.threads > 0 ? static_cast<std::size_t>(options.threads)
                                : ranks.size() > 1
                                    ? 1
                                    : std::max(1u, std::thread::hardware_concurrency());
    std::vector<Worker> workers;
    workers.reserve(threads);
    for (std::size_t t = 0; t < threads; ++t) {
        auto cache = options.fast_paths ? std::make_shared<SweepCache>() : nullptr;
        Loader loader{options, options.sets, cache.get()};
        for (const auto& o : fixes.others)
            loader.base.push_back(o);
        workers.push_back(Worker{std::move(cache), std::move(loader), nullptr, nullptr});
    }
    auto& cache = workers[0].cache;
    const Loader& loader = workers[0].loader;
    // The experiment as given (with --set and the fixed keys): the GPU count, the model, the
    // batch. Its errors are the plan's.
    const auto base = loader.load(std::vector<std::string>{});
    const auto& gpu = base.cluster->gpu_model(0);
    // Energy counts every GPU at its board power for the whole iteration, times the PUE, as the
    // summary's goodput block does (docs/what-if.md).
    const double board_power_w = base.goodput.gpu_power_w.value_or(gpu.board_power_w);
    if (options.objective == PlanObjective::Energy && !(board_power_w > 0))
        throw ConfigError(SourceLocation{"--objective energy"},
                          "no board power is known for the GPU model " + gpu.name +
                              ": give it in the topology (gpu_models: {" + gpu.name +
                              ": {board_power: WATTS, ...}}) or the experiment (goodput: "
                              "{gpu_power: WATTS}), or use --objective time, mfu or cost");

    std::vector<std::string> schedules = options.schedules;
    if (schedules.empty()) schedules = schedule::schedule_names();
    for (const auto& s : schedules)
        schedule::require_schedule(s, SourceLocation{"--schedules"});
    if (const auto at = fixes.axes.find("schedule"); at != fixes.axes.end()) {
        schedule::require_schedule(at->second, SourceLocation{"--fix schedule=" + at->second});
        if (std::find(schedules.begin(), schedules.end(), at->second) == schedules.end())
            throw ConfigError(SourceLocation{"--fix schedule=" + at->second},
                              "the schedule is not among --schedules");
        schedules = {at->second};
    }

    // --gpus and --global-batch: the experiment's topology at each count's node count
    // (topology.nodes) and each global batch, each pair searched as the experiment is without
    // them.
    struct Count {
        int nodes = 0;                  // 0: the experiment's
        std::int64_t global_batch = 0;  // 0: the experiment's
        workload::ExperimentSpec base;
    };
    std::vector<Count> counts;
    const int per_node = base.cluster->gpu_count() / std::max(1, base.cluster->node_count());
    std::vector<int> node_counts;
    {
        std::set<int> seen;
        for (const int g : options.gpus) {
            const SourceLocation where{"--gpus " + std::to_string(g)};
            if (g < 1 || per_node < 1 || g % per_node != 0)
                throw ConfigError(where, "expected a whole number of nodes of " +
                                             std::to_string(per_node) + " GPUs (the topology's " +
                                             "node), e.g. " + std::to_string(per_node * 2));
            if (!seen.insert(g).second) throw ConfigError(where, "given twice");
            node_counts.push_back(g / per_node);
        }
        if (node_counts.empty()) node_counts.push_back(0);
    }
    std::vector<std::int64_t> batches;
    if (!options.global_batches.empty())
        for (const auto& o : fixes.others)
            if (o.rfind("training.global_batch_size=", 0) == 0)
                throw ConfigError(SourceLocation{"--fix " + o},
                                  "the global batch is searched (--global-batch): fix it there");
    {
        std::set<std::int64_t> seen;
        for (const auto b : options.global_batches) {
            const SourceLocation where{"--global-batch " + std::to_string(b)};
            if (b < 1) throw ConfigError(where, "expected a number of sequences, 1 or more");
            if (!seen.insert(b).second) throw ConfigError(where, "given twice");
            batches.push_back(b);
        }
        if (batches.empty()) batches.push_back(0);
    }
    for (const int nodes : node_counts) {
        const auto at_nodes =
            nodes > 0 ? loader.load({"topology.nodes=" + std::to_string(nodes)}) : base;
        for (const auto batch : batches) {
            // What the enumeration reads of the batch is its size (the micro-batch sizes divide
            // it over dp); the experiment's own layout need not divide it, so it is not loaded.
            Count c{nodes, batch, at_nodes};
            if (batch > 0) c.base.training.global_batch_size = batch;
            counts.push_back(std::move(c));
        }
    }
    for (const auto& c : counts)
        for (const char* key :
             {"parallelism.tp", "parallelism.pp", "parallelism.cp", "parallelism.dp"})
            if (const auto v = fixes.number(key); v && c.base.layout.world_size() % *v != 0)
                throw ConfigError(
                    SourceLocation{"--fix " + std::string(key) + "=" + std::to_string(*v)},
                    "does not divide the " + std::string(c.nodes ? "" : "experiment's ") +
                        std::to_string(c.base.layout.world_size()) + " GPUs");

    PlanResult result;
    result.source = base.source;
    result.gpus = base.layout.world_size();
    for (const int nodes : node_counts)
        if (nodes > 0) result.gpu_counts.push_back(nodes * per_node);
    for (const auto batch : batches)
        if (batch > 0) result.global_batches.push_back(batch);
    const bool per_token = batches.size() > 1;
    result.hbm_bytes = gpu.hbm.value;
    result.network = std::string(name_of(network::kFidelityNames, base.network.fidelity));
    result.objective = options.objective;
    result.objective_unit = options.objective == PlanObjective::Mfu      ? "MFU"
                            : options.objective == PlanObjective::Cost   ? "per 1M tokens"
                            : options.objective == PlanObjective::Energy ? "J per token"
                            : per_token                                  ? "s per 1M tokens"
                                                                         : "s";
    result.margin = options.margin;
    const Scorer scorer{options.objective, options.gpu_hour_price, board_power_w * base.goodput.pue,
                        per_token};
    const double limit = static_cast<double>(gpu.hbm.value) * (1 - options.headroom);
    result.limit_bytes = static_cast<std::int64_t>(limit);

    const auto started = std::chrono::steady_clock::now();
    const auto seconds_since = [](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    };
    // 1-3: load, prepare, memory, bound. Layout n goes to rank n mod size; a rank's share goes to
    // its threads in chunks, merged in enumeration order (each layout's entry is its own: the
    // caches change no result).
    WorkerPool pool(threads);
    const SearchStep search_one{options, scorer, gpu, limit};
    Search search;
    std::size_t n = 0;
    std::size_t total = 0;
    const Extras extras{options.hsdp, options.partial_recompute, options.uneven_stages};
    for (const auto& c : counts)
        enumerate(c.base, fixes, schedules, options.max_micro_batch_size, extras,
                  [&](const PlanLayout&) { ++total; });
    constexpr std::size_t kChunk = 64;
    struct Item {
        std::size_t index;
        PlanLayout layout;
        std::shared_ptr<const std::string> refused;  // shape_refusal's, shared by the shape
    };
    struct Chunk {
        std::vector<Item> layouts;
        std::future<Search> found;
    };
    std::deque<Chunk> chunks;
    std::vector<Item> filling;
    const auto merge_oldest = [&] {
        Chunk& c = chunks.front();
        search.absorb(c.found.get());
        if (options.on_progress && ranks.rank() == 0)
            options.on_progress("search", c.layouts.back().index + 1, total);
        chunks.pop_front();
    };
    const auto submit = [&] {
        if (filling.empty()) return;
        while (chunks.size() >= 2 * pool.size())
            merge_oldest();
        chunks.push_back(Chunk{std::move(filling), {}});
        filling.clear();
        const auto* layouts = &chunks.back().layouts;  // a deque keeps it in place
        chunks.back().found = pool.submit([&, layouts](std::size_t w) {
            Search part;
            for (const auto& item : *layouts)
                search_one(item.layout, item.index, *item.refused, workers[w], part);
            return part;
        });
    };
    {
        // Whatever is thrown, no chunk may still run when what it refers to goes.
        struct Drain {
            std::deque<Chunk>& chunks;
            ~Drain() {
                for (auto& c : chunks)
                    if (c.found.valid()) c.found.wait();
            }
        } drain{chunks};
        for (const auto& c : counts) {
            // The variants of a shape come one after another: its refusal is worked out once.
            std::optional<PlanLayout> shape;
            std::shared_ptr<const std::string> refused;
            const auto same_shape = [](const PlanLayout& a, const PlanLayout& b) {
                return a.tp == b.tp && a.pp == b.pp && a.cp == b.cp && a.dp == b.dp &&
                       a.ep == b.ep && a.vpp == b.vpp && a.schedule == b.schedule &&
                       a.first_stage_layers == b.first_stage_layers &&
                       a.last_stage_layers == b.last_stage_layers;
            };
            enumerate(
                c.base, fixes, schedules, options.max_micro_batch_size, extras, [&](PlanLayout l) {
                    const std::size_t index = n++;
                    if (static_cast<int>(index % static_cast<std::size_t>(ranks.size())) !=
                        ranks.rank())
                        return;
                    l.nodes = c.nodes;
                    l.global_batch = c.global_batch;
                    if (!shape || !same_shape(*shape, l)) {
                        shape = l;
                        refused = std::make_shared<const std::string>(shape_refusal(c.base, l));
                    }
                    filling.push_back(Item{index, std::move(l), refused});
                    if (filling.size() == kChunk) submit();
                });
        }
        submit();
        while (!chunks.empty())
            merge_oldest();
    }

    // Rank 0 gathers the other ranks' shares.
    if (ranks.size() > 1) {
        nlohmann::json mine;
        if (ranks.rank() != 0) {
            nlohmann::json survivors = nlohmann::json::array();
            for (const auto& s : search.survivors)
                survivors.push_back(survivor_cbor(s));
            nlohmann::json entries = nlohmann::json::array();
            for (const auto& e : search.entries)
                entries.push_back({survivor_cbor(Survivor{e.layout, e.index, e.lower_bound_s, 0, 0,
                                                          0, 0, e.memory_bytes}),
                                   static_cast<int>(e.status), e.reason});
            mine = {search.layouts,         search.invalid, search.pruned_memory,
                    search.invalid_reasons, survivors,      entries};
        }
        auto parts = ranks.gather_to_root(ranks.rank() == 0 ? std::vector<std::uint8_t>{}
                                                            : nlohmann::json::to_cbor(mine));
        if (ranks.rank() != 0) return std::nullopt;
        for (std::size_t from = 1; from < parts.size(); ++from) {
            const auto j = nlohmann::json::from_cbor(parts[from]);
            search.layouts += j.at(0).get<std::size_t>();
            search.invalid += j.at(1).get<std::size_t>();
            search.pruned_memory += j.at(2).get<std::size_t>();
            for (const auto& [reason, count] : j.at(3).get<std::map<std::string, std::size_t>>())
                search.invalid_reasons[reason] += count;
            for (const auto& s : j.at(4))
                search.survivors.push_back(survivor_from(s));
            for (const auto& e : j.at(5)) {
                PlanEntry entry;
                const auto s = survivor_from(e.at(0));
                entry.layout = s.layout;
                entry.index = s.index;
                entry.lower_bound_s = s.bound_s;
                entry.memory_bytes = s.memory;
                entry.status = static_cast<PlanEntry::Status>(e.at(1).get<int>());
                entry.reason = e.at(2).get<std::string>();
                search.entries.push_back(std::move(entry));
            }
        }
    }
    result.layouts = search.layouts;
    result.invalid = search.invalid;
    result.pruned_memory = search.pruned_memory;
    result.invalid_reasons = std::move(search.invalid_reasons);
    if (search.survivors.empty())
        throw ConfigError(
            SourceLocation{result.source},
            "none of the " + std::to_string(result.layouts) +
                " layouts searched is valid and fits in " +
                format_bytes(Bytes{static_cast<std::int64_t>(limit)}) + " per GPU (" +
                std::to_string(result.invalid) + " invalid, " +
                std::to_string(result.pruned_memory) + " above the memory limit)" +
                (result.invalid_reasons.empty()
                     ? std::string()
                     : "; the most common reason: " +
                           std::max_element(
                               result.invalid_reasons.begin(), result.invalid_reasons.end(),
                               [](const auto& x, const auto& y) { return x.second < y.second; })
                               ->first));

    result.seconds.search = seconds_since(started);
    const auto simulating = std::chrono::steady_clock::now();
    // 4 and 5. The survivors are taken in the order of their bound and simulated with the
    // analytical network (4); those simulated are confirmed under the experiment's own network
    // in the order of their analytical score (5). Both stop by the same rule: a layout cannot
    // reach the top k once what it can at best score is no better than the k-th best confirmed
    // score. At best it scores its bound before step 4 (no replay is faster) and its analytical
    // score before step 5 (contention only lengthens an iteration: the premise, checked on
    // every confirmed layout and reported when it fails). Until k layouts are confirmed, step 4
    // stops where the bound, shortened by the margin, loses to the k-th best analytical score;
    // when the confirmed k-th best is worse than that, step 4 resumes up to it, and so on until
    // neither step has a layout left that could enter the top k.
    auto& survivors = search.survivors;
    std::sort(survivors.begin(), survivors.end(), [](const Survivor& x, const Survivor& y) {
        if (x.bound_score != y.bound_score) return x.bound_score < y.bound_score;
        return x.index < y.index;
    });
    const double shrink = 1 / (1 + options.margin);
    struct Simulated {
        const Survivor* survivor;
        PlanFigures figures;
        bool confirmed = false;
    };
    std::deque<Simulated> simulated;  // stable addresses
    std::multiset<double> best;       // the k best analytical scores
    std::multiset<double> best_confirmed;
    std::map<std::size_t, PlanFigures> analytical_of;  // with keep_entries: by index
    const auto kth_of = [&](const std::multiset<double>& scores) {
        return scores.size() < options.top ? std::numeric_limits<double>::infinity()
                                           : *std::prev(scores.end());
    };
    const auto keep_best = [&](std::multiset<double>& scores, double score) {
        scores.insert(score);
        if (scores.size() > options.top) scores.erase(std::prev(scores.end()));
    };
    const bool same_network = base.network.fidelity == network::Fidelity::Analytical;
    std::vector<PlanChoice> confirmed;
    std::map<std::size_t, PlanFigures> confirmed_of;
    // With the analytical network step 5 reuses step 4's results: nothing to limit.
    const std::size_t limit_confirm = same_network ? 0 : options.confirm.value_or(3 * options.top);
    result.confirm_limit = limit_confirm;
    std::size_t next = 0, step = 0, confirm_step = 0;
    // A layout's figures under the analytical network (or its own), on worker w.
    const auto figures_on = [&](std::size_t w, const PlanLayout& l, bool analytical,
                                const Survivor& s) {
        Worker& worker = workers[w];
        const auto spec = worker.loader.load(l, analytical);
        return figures_of(simulate(spec, worker.cache.get(), options.fast_paths), scorer, s.flops,
                          s.peak, s.tokens, l.gpus());
    };
    // Step 4 over the survivors from `next` while their bound (times `scale`) does not lose to
    // `beaten()`, the threads running ahead (run_ahead: the same layouts as one thread).
    const auto simulate_while = [&](double scale, const auto& beaten) {
        // Analytical runs are short and uneven: four per thread in flight (one thread runs
        // none ahead: it would only drop them at a stop).
        next = run_ahead(
            pool, pool.size() > 1 ? 4 * pool.size() : 1, next, survivors.size(),
            [&](std::size_t i) {
                const Survivor& s = survivors[i];
                return scorer.score(s.bound_s * scale, s.flops, s.peak, s.tokens,
                                    s.layout.gpus()) <= beaten();
            },
            [&](std::size_t i, std::size_t w) {
                return figures_on(w, survivors[i].layout, true, survivors[i]);
            },
            [&](std::size_t i, PlanFigures f) {
                const Survivor& s = survivors[i];
                if (options.on_progress) options.on_progress("simulate", ++step, survivors.size());
                simulated.push_back({&s, f});
                keep_best(best, f.objective);
                if (options.keep_entries) analytical_of[s.index] = f;
            });
    };
    simulate_while(shrink, [&] { return kth_of(best); });
    for (;;) {
        // 5: the unconfirmed in the order of their analytical score, while it beats the k-th
        // best confirmed score.
        std::vector<Simulated*> order;
        for (auto& x : simulated)
            if (!x.confirmed) order.push_back(&x);
        std::sort(order.begin(), order.end(), [](const Simulated* x, const Simulated* y) {
            if (x->figures.objective != y->figures.objective)
                return x->figures.objective < y->figures.objective;
            return x->survivor->index < y->survivor->index;
        });
        // Runs under the experiment's network are long: one per thread.
        run_ahead(
            pool, pool.size(), 0, order.size(),
            [&](std::size_t i) {
                return order[i]->figures.objective <= kth_of(best_confirmed) &&
                       (limit_confirm == 0 || confirmed.size() < limit_confirm);
            },
            [&](std::size_t i, std::size_t w) {
                const Simulated& x = *order[i];
                return same_network ? x.figures
                                    : figures_on(w, x.survivor->layout, false, *x.survivor);
            },
            [&](std::size_t i, PlanFigures figures) {
                Simulated* x = order[i];
                if (options.on_progress)
                    options.on_progress("confirm", ++confirm_step, simulated.size());
                x->confirmed = true;
                PlanChoice c;
                c.layout = x->survivor->layout;
                c.index = x->survivor->index;
                c.analytical = x->figures;
                c.lower_bound_s = x->survivor->bound_s;
                c.figures = std::move(figures);
                // The premise of the stop rule: no layout scores better under its own network than
                // under the analytical one (relative 1e-9: the two sum their parts differently).
                if (c.figures.objective <
                    c.analytical.objective - 1e-9 * std::abs(c.analytical.objective))
                    ++result.faster_than_analytical;
                keep_best(best_confirmed, c.figures.objective);
                if (options.keep_entries) confirmed_of[c.index] = c.figures;
                confirmed.push_back(std::move(c));
            });
        // 4 again (also once the confirmation limit is reached: analytical runs are cheap, and
        // they leave as contenders only the layouts that could beat the k-th confirmed score):
        // survivors whose bound still beats the k-th best confirmed score.
        const std::size_t before = next;
        simulate_while(1.0, [&] { return kth_of(best_confirmed); });
        if (next == before) break;
    }
    // What the confirmation limit left: layouts whose analytical score beats the k-th best
    // confirmed one (every other layout's bound does not: the loop above ran step 4 to its end).
    for (const auto& x : simulated)
        if (!x.confirmed && x.figures.objective < kth_of(best_confirmed)) {
            result.best_contender = result.contenders++ == 0
                                        ? x.figures.objective
                                        : std::min(result.best_contender, x.figures.objective);
        }
    result.seconds.simulate = seconds_since(simulating);
    result.simulated = simulated.size();
    result.pruned_bound = survivors.size() - simulated.size();
    result.confirmed = confirmed.size();
    std::sort(confirmed.begin(), confirmed.end(), [](const PlanChoice& x, const PlanChoice& y) {
        if (x.figures.objective != y.figures.objective)
            return x.figures.objective < y.figures.objective;
        return x.index < y.index;
    });
    if (confirmed.size() > options.top) confirmed.resize(options.top);
    for (std::size_t i = 0; i < confirmed.size(); ++i) {
        auto& c = confirmed[i];
        if (i == 0) {
            c.megatron_args = workload::megatron_args_for(loader.load(c.layout, false), &c.notes);
        } else {
            c.why_lost = why_lost(c.figures, confirmed[0].figures, per_token);
        }
    }
    result.top = std::move(confirmed);

    if (options.guide) {
        auto advice = guide_advice(base);
        result.guide_reasoning = std::move(advice.reasoning);
        result.guide_not_dividing = std::move(advice.not_dividing);
        for (auto l : advice.layouts) {
            // The guide says nothing of the pipeline split: at another pp than the experiment's,
            // where the layers do not divide, the derived first/last split (that of
            // --uneven-stages) rather than the experiment's split for its own pp.
            if (const auto split =
                    derived_split(base, l.pp, *schedule::make_schedule(l.schedule), l.vpp)) {
                l.first_stage_layers = split->first;
                l.last_stage_layers = split->second;
            }
            PlanGuideEntry g;
            g.layout = l;
            try {
                const auto spec = loader.load(l, false);
                const auto prepared = replay::prepare(spec, "");
                const double flops = prepared.plan.model_flops_per_iteration.value;
                const double tokens = static_cast<double>(prepared.plan.tokens_per_iteration);
                g.figures = figures_of(simulate(spec, cache.get(), options.fast_paths), scorer,
                                       flops, peak_flops(spec), tokens, l.gpus());
                g.rank = 1;
                for (const auto& c : result.top)
                    if (c.figures.objective <= g.figures->objective) ++g.rank;
                if (!result.top.empty()) {
                    g.versus = why_lost(*g.figures, result.top.front().figures, per_token);
                    if (static_cast<double>(g.figures->memory_bytes) > limit)
                        g.versus += "; needs " + format_bytes(Bytes{g.figures->memory_bytes}) +
                                    " per GPU, above the limit of " +
                                    format_bytes(Bytes{static_cast<std::int64_t>(limit)});
                }
            } catch (const ConfigError& e) {
                g.reason = e.what();
            }
            result.guide.push_back(std::move(g));
        }
    }

    if (options.keep_entries) {
        // Every layout in enumeration order (the ranks' shares interleave).
        result.entries = std::move(search.entries);
        std::sort(result.entries.begin(), result.entries.end(),
                  [](const PlanEntry& x, const PlanEntry& y) { return x.index < y.index; });
        for (auto& e : result.entries) {
            if (e.status != PlanEntry::Status::PrunedBound) continue;
            if (const auto a = analytical_of.find(e.index); a != analytical_of.end()) {
                e.analytical = a->second;
                e.status = PlanEntry::Status::Simulated;
            } else {
                e.reason = "its lower bound " + std::to_string(e.lower_bound_s) +
                           " s cannot beat the " + std::to_string(options.top) +
                           "-th best result under the " + result.network + " network";
            }
            if (const auto c = confirmed_of.find(e.index); c != confirmed_of.end()) {
                e.confirmed = c->second;
                e.status = PlanEntry::Status::Confirmed;
            }
        }
    }
    return result;
}

std::size_t parse_confirm(const std::string& text) {
    if (text == "all") return 0;
    if (text.empty() || text.size() > 7 ||
        text.find_first_not_of("0123456789") != std::string::npos || std::stoll(text) < 1)
        throw ConfigError(SourceLocation{"--confirm " + text},
                          "expected a number of layouts, 1 to 1000000, or all");
    const auto n = static_cast<std::size_t>(std::stoll(text));
    if (n > 1000000)
        throw ConfigError(SourceLocation{"--confirm " + text},
                          "expected a number of layouts, 1 to 1000000, or all");
    return n;
}

std::vector<std::int64_t> parse_global_batches(const std::string& text) {
    const auto fail = [&](const std::string& item, const std::string& what) {
        throw ConfigError(SourceLocation{"--global-batch " + text},
                          (item.empty() ? std::string("an empty item") : "'" + item + "'") + ": " +
                              what +
                              "; expected sizes N, ranges MIN..MAX (the multiples of MIN up to "
                              "MAX) or MIN..MAX:STEP, comma-separated, in sequences");
    };
    // A whole number of sequences, 1 .. 2^40 (far above any batch, far below overflow).
    constexpr std::int64_t kMax = std::int64_t{1} << 40;
    const auto number = [&](const std::string& item, const std::string& digits) {
        if (digits.empty() || digits.size() > 13 ||
            digits.find_first_not_of("0123456789") != std::string::npos)
            fail(item, "'" + digits + "' is not a whole number");
        const std::int64_t v = std::stoll(digits);
        if (v < 1 || v > kMax) fail(item, "sizes go from 1 to " + std::to_string(kMax));
        return v;
    };
    constexpr std::size_t kMost = 256;
    if (text.empty()) fail("", "nothing to search");
    std::set<std::int64_t> sizes;
    std::stringstream items(text);
    for (std::string item; std::getline(items, item, ',');) {
        const auto dots = item.find("..");
        if (dots == std::string::npos) {
            sizes.insert(number(item, item));
        } else {
            const auto colon = item.find(':', dots);
            const std::int64_t lo = number(item, item.substr(0, dots));
            const std::int64_t hi =
                number(item, item.substr(dots + 2, colon == std::string::npos ? std::string::npos
                                                                              : colon - dots - 2));
            const std::int64_t step =
                colon == std::string::npos ? lo : number(item, item.substr(colon + 1));
            if (hi < lo) fail(item, "the range ends below its start");
            if ((hi - lo) / step + 1 > static_cast<std::int64_t>(kMost))
                fail(item, "more than " + std::to_string(kMost) + " sizes");
            for (std::int64_t v = lo; v <= hi; v += step)
                sizes.insert(v);
        }
        if (sizes.size() > kMost) fail(item, "more than " + std::to_string(kMost) + " sizes");
    }
    if (text.back() == ',') fail("", "a trailing comma");
    return {sizes.begin(), sizes.end()};
}

nlohmann::ordered_json plan_json(const PlanResult& r) {
    nlohmann::ordered_json j;
    j["experiment"] = r.source;
    j["gpus"] = r.gpus;
    if (!r.gpu_counts.empty()) j["gpu_counts"] = r.gpu_counts;
    if (!r.global_batches.empty()) j["global_batch_sizes"] = r.global_batches;
    j["hbm_bytes"] = r.hbm_bytes;
    j["network"] = r.network;
    j["objective"] = std::string(name_of(kPlanObjectiveNames, r.objective));
    j["objective_unit"] = r.objective_unit;
    j["margin"] = r.margin;
    j["layouts"] = r.layouts;
    j["invalid"] = r.invalid;
    j["pruned_memory"] = r.pruned_memory;
    j["pruned_bound"] = r.pruned_bound;
    j["simulated"] = r.simulated;
    j["confirmed"] = r.confirmed;
    j["faster_than_analytical"] = r.faster_than_analytical;
    // The confirmation limit (0: none) and what it left that could enter the top k.
    j["confirm_limit"] = r.confirm_limit;
    j["contenders"] = r.contenders;
    if (r.contenders > 0) j["best_contender"] = r.best_contender;
    auto top = nlohmann::ordered_json::array();
    for (const auto& c : r.top) {
        nlohmann::ordered_json t;
        t["layout"] = layout_json(c.layout);
        t["figures"] = figures_json(c.figures);
        t["analytical"] = figures_json(c.analytical);
        t["lower_bound_s"] = c.lower_bound_s;
        if (!c.megatron_args.empty()) t["megatron_args"] = c.megatron_args;
        if (!c.why_lost.empty()) t["why_lost"] = c.why_lost;
        top.push_back(std::move(t));
    }
    j["top"] = std::move(top);
    auto entries = nlohmann::ordered_json::array();
    for (const auto& e : r.entries) {
        nlohmann::ordered_json t;
        t["layout"] = layout_json(e.layout);
        t["status"] = plan_status_name(e.status);
        if (!e.reason.empty()) t["reason"] = e.reason;
        if (e.status != PlanEntry::Status::Invalid) t["memory_per_gpu_bytes"] = e.memory_bytes;
        if (e.lower_bound_s > 0) t["lower_bound_s"] = e.lower_bound_s;
        if (e.analytical) t["analytical"] = figures_json(*e.analytical);
        if (e.confirmed) t["confirmed"] = figures_json(*e.confirmed);
        entries.push_back(std::move(t));
    }
    j["layouts_evaluated"] = std::move(entries);
    if (!r.guide_reasoning.empty()) {
        nlohmann::ordered_json g;
        g["reasoning"] = r.guide_reasoning;
        auto layouts = nlohmann::ordered_json::array();
        for (const auto& e : r.guide) {
            nlohmann::ordered_json t;
            t["layout"] = layout_json(e.layout);
            if (e.figures) {
                t["figures"] = figures_json(*e.figures);
                t["rank"] = e.rank;
                if (!e.versus.empty()) t["versus_best"] = e.versus;
            } else {
                t["reason"] = e.reason;
            }
            layouts.push_back(std::move(t));
        }
        g["layouts"] = std::move(layouts);
        g["not_dividing"] = r.guide_not_dividing;
        j["guide"] = std::move(g);
    }
    return j;
}

nlohmann::ordered_json plan_html_data(const PlanResult& r) {
    nlohmann::ordered_json j;
    j["objective"] = std::string(name_of(kPlanObjectiveNames, r.objective));
    j["objective_unit"] = r.objective_unit;
    j["network"] = r.network;
    j["gpus"] = r.gpus;
    if (!r.gpu_counts.empty()) j["gpu_counts"] = r.gpu_counts;
    j["hbm_bytes"] = r.hbm_bytes;
    j["limit_bytes"] = r.limit_bytes;
    j["counts"] = {{"layouts", r.layouts},
                   {"invalid", r.invalid},
                   {"pruned_memory", r.pruned_memory},
                   {"pruned_bound", r.pruned_bound},
                   {"simulated", r.simulated},
                   {"confirmed", r.confirmed}};
    auto top = nlohmann::ordered_json::array();
    for (const auto& c : r.top)
        top.push_back({{"layout", c.layout.text()},
                       {"figures", figures_json(c.figures)},
                       {"megatron_args", c.megatron_args},
                       {"why_lost", c.why_lost},
                       {"overrides", c.layout.overrides()}});
    j["top"] = top;
    // Points: [memory per GPU (bytes), iteration time (s), 1 if under the experiment's network,
    // rank in the top k (0: none), layout].
    struct Point {
        std::int64_t memory;
        double time;
        bool confirmed;
        std::size_t rank;
        std::string text;
    };
    std::vector<Point> points;
    for (const auto& e : r.entries) {
        if (!e.analytical) continue;
        Point p{e.memory_bytes, (e.confirmed ? *e.confirmed : *e.analytical).iteration_time_s,
                e.confirmed.has_value(), 0, e.layout.text()};
        for (std::size_t i = 0; i < r.top.size(); ++i)
            if (r.top[i].index == e.index) p.rank = i + 1;
        points.push_back(std::move(p));
    }
    auto out = nlohmann::ordered_json::array();
    for (const auto& p : points)
        out.push_back({p.memory, p.time, p.confirmed ? 1 : 0, p.rank, p.text});
    j["points"] = out;
    // The front, by memory then time: a point is on it when it is faster than every point that
    // needs no more memory (ties in memory: the fastest, the first in enumeration order).
    std::vector<std::size_t> order(points.size());
    for (std::size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        if (points[a].memory != points[b].memory) return points[a].memory < points[b].memory;
        return points[a].time < points[b].time;
    });
    auto front = nlohmann::ordered_json::array();
    double fastest = std::numeric_limits<double>::infinity();
    for (const std::size_t i : order)
        if (points[i].time < fastest) {
            fastest = points[i].time;
            front.push_back(i);
        }
    j["pareto"] = front;
    return j;
}

}  // namespace cs::api
