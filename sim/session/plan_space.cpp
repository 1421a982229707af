// plan's search space (plan_space.hpp): the --fix values, the axes searched, the layouts
// enumerated, the pipeline splits derived and the shape rules; and a layout's overrides and text,
// and --global-batch's sizes (plan.hpp).
#include "session/plan_space.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>

#include "workload/pipeline_split.hpp"

namespace cs::api {

namespace plan_space {

namespace {

// The divisors of n >= 1 in increasing order, up to `most`: by the pairs (d, n / d) with
// d <= sqrt(n), so that a global batch of 2^40 sequences takes a million steps, not 2^40.
std::vector<int> divisors(std::int64_t n, std::int64_t most = std::numeric_limits<int>::max()) {
    std::vector<int> low, high;
    for (std::int64_t d = 1; d <= n / d; ++d) {
        if (n % d) continue;
        if (d <= most) low.push_back(static_cast<int>(d));
        if (const std::int64_t e = n / d; e != d && e <= most) high.push_back(static_cast<int>(e));
    }
    low.insert(low.end(), high.rbegin(), high.rend());
    return low;
}

// The axes plan enumerates, by their --set key.
constexpr std::array<std::string_view, 10> kAxisKeys{
    "parallelism.tp",     "parallelism.pp",  "parallelism.dp",       "parallelism.cp",
    "parallelism.ep",     "parallelism.vpp", "parallelism.sharding", "training.micro_batch_size",
    "training.recompute", "schedule"};

// The axes whose values are whole numbers (the others are choices).
constexpr std::array<std::string_view, 7> kNumberAxes{
    "parallelism.tp", "parallelism.pp",  "parallelism.dp",           "parallelism.cp",
    "parallelism.ep", "parallelism.vpp", "training.micro_batch_size"};

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

// The variants of one shape (tp, pp, cp, dp, ep, schedule, vpp: `shape`'s fields) in enumeration
// order: the pipeline split, the micro-batch size, recompute (and with --partial-recompute the
// block method's N), sharding (and with --hsdp its shard group sizes). Calls f(layout).
template <typename F>
void variants(const PlanLayout& shape, const std::vector<std::pair<int, int>>& splits,
              const std::vector<int>& mbss, const std::vector<workload::Recompute>& recomputes,
              const std::vector<workload::Sharding>& shardings, bool any_sharding, int chunk_layers,
              const Extras& extras, const std::vector<std::pair<workload::CpCommType, int>>& cps,
              F&& f) {
    PlanLayout l = shape;
    // The layout as it stands, or with --cp-comm once per exchange of context parallelism (the
    // experiment's own first).
    const auto emit = [&] {
        if (cps.empty()) f(l);
        for (const auto& [type, size] : cps) {
            l.cp_comm = type;
            l.cp_a2a_size = size;
            f(l);
        }
        l.cp_comm.reset();
        l.cp_a2a_size = 0;
    };
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
                        emit();
                        if (!extras.hsdp || sharding == workload::Sharding::None) continue;
                        for (const int s : divisors(l.dp))
                            if (s >= 2 && s < l.dp) {
                                l.shard_size = s;
                                emit();
                            }
                    }
                }
            }
        }
    }
}

}  // namespace

namespace {

// A whole number of `text`, 1 .. 2^31 - 1, or none.
std::optional<int> whole_number(const std::string& text) {
    if (text.empty() || text.size() > 10 ||
        text.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
    const long long n = std::stoll(text);
    if (n < 1 || n > 2147483647) return std::nullopt;
    return static_cast<int>(n);
}

// A whole-number axis's --fix value: N, V1,V2,... or MIN..MAX (either end open).
Fixes::Bound read_bound(const std::string& key, const std::string& value) {
    const SourceLocation where{"--fix " + key + "=" + value};
    const std::string forms =
        "expected a positive whole number N, a set N1,N2,... or a range MIN..MAX (MIN.. or "
        "..MAX leave an end open)";
    Fixes::Bound b;
    if (const auto dots = value.find(".."); dots != std::string::npos) {
        const std::string low = value.substr(0, dots), high = value.substr(dots + 2);
        const auto lo = low.empty() ? std::optional<int>{1} : whole_number(low);
        const auto hi = high.empty() ? std::optional<int>{2147483647} : whole_number(high);
        if (!lo || !hi || (low.empty() && high.empty())) throw ConfigError(where, forms);
        if (*hi < *lo) throw ConfigError(where, "the range runs backwards (" + forms + ")");
        b.low = *lo;
        b.high = *hi;
        return b;
    }
    for (const auto& v : Fixes::split_values(key, value)) {
        const auto n = whole_number(v);
        if (!n) throw ConfigError(where, forms);
        // "2" and "02" are one value.
        if (std::find(b.values.begin(), b.values.end(), *n) != b.values.end())
            throw ConfigError(where, std::to_string(*n) + " is given twice");
        b.values.push_back(*n);
    }
    return b;
}

}  // namespace

std::vector<std::string> Fixes::split_values(const std::string& key, const std::string& value) {
    const SourceLocation where{"--fix " + key + "=" + value};
    std::vector<std::string> out;
    std::size_t pos = 0;
    for (;;) {
        const std::size_t comma = std::min(value.find(',', pos), value.size());
        std::string v = value.substr(pos, comma - pos);
        if (v.empty()) throw ConfigError(where, "an empty value in the list");
        if (std::find(out.begin(), out.end(), v) != out.end())
            throw ConfigError(where, "\"" + v + "\" is given twice");
        out.push_back(std::move(v));
        if (comma == value.size()) break;
        pos = comma + 1;
    }
    return out;
}

bool Fixes::held(const std::string& key) const {
    const auto at = axes.find(key);
    if (at == axes.end()) return false;
    const auto b = bounds.find(key);
    if (b != bounds.end()) return b->second.values.size() == 1;
    return at->second.find(',') == std::string::npos;
}

const char* Fixes::other(std::string_view key) const {
    for (const auto& o : others)
        if (o.size() > key.size() && o.compare(0, key.size(), key) == 0 && o[key.size()] == '=')
            return o.c_str() + key.size() + 1;
    return nullptr;
}

std::optional<int> Fixes::number(const std::string& key) const {
    const auto b = bounds.find(key);
    if (b == bounds.end() || b->second.values.size() != 1) return std::nullopt;
    return b->second.values.front();
}

std::optional<int> Fixes::most(const std::string& key) const {
    const auto b = bounds.find(key);
    if (b == bounds.end()) return std::nullopt;
    if (!b->second.values.empty())
        return *std::max_element(b->second.values.begin(), b->second.values.end());
    return b->second.high;
}

std::vector<int> Fixes::allowed(const std::string& key, std::vector<int> candidates) const {
    if (const auto one = number(key)) return {*one};
    const auto b = bounds.find(key);
    if (b == bounds.end()) return candidates;
    std::erase_if(candidates, [&](int v) { return !b->second.allows(v); });
    return candidates;
}

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
            if (std::find(kNumberAxes.begin(), kNumberAxes.end(), key) != kNumberAxes.end())
                out.bounds[key] = read_bound(key, value);
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

}  // namespace plan_space

std::vector<std::string> plan_fixes_as_sets(const std::vector<std::string>& fixes) {
    const plan_space::Fixes parsed = plan_space::parse_fixes(fixes);
    std::vector<std::string> sets;
    for (const auto& f : fixes) {
        const std::string key = f.substr(0, f.find('='));
        if (!parsed.axes.contains(key) || parsed.held(key)) sets.push_back(f);
    }
    return sets;
}

namespace plan_space {

// The exchanges of context parallelism --cp-comm searches for a layout of `cp`: the experiment's
// own first (named, so that every cp > 1 layout says which it runs), then every other
// parallelism.cp_comm_type, a2a+p2p once per all-to-all group size s (2 <= s < cp, dividing cp);
// none at cp 1, without --cp-comm, or when --fix holds the type or the group size (applied to
// every layout, as --set).
std::vector<std::pair<workload::CpCommType, int>> cp_comm_variants(
    const workload::ExperimentSpec& base, const Fixes& fixes, const Extras& extras, int cp) {
    std::vector<std::pair<workload::CpCommType, int>> out;
    if (!extras.cp_comm || cp < 2 ||
        std::any_of(fixes.others.begin(), fixes.others.end(), cp_exchange_fix))
        return out;
    const auto own = base.layout.cp_comm_type;
    out.emplace_back(own, own == workload::CpCommType::A2aP2p ? base.layout.cp_a2a_size : 0);
    for (const auto type :
         {workload::CpCommType::P2p, workload::CpCommType::A2a, workload::CpCommType::AllGather})
        if (type != own) out.emplace_back(type, 0);
    for (const int s : divisors(cp))
        if (s >= 2 && s < cp &&
            !(own == workload::CpCommType::A2aP2p && base.layout.cp_a2a_size == s))
            out.emplace_back(workload::CpCommType::A2aP2p, s);
    return out;
}

std::optional<std::pair<int, int>> derived_split(const workload::ExperimentSpec& base, int pp,
                                                 const schedule::Schedule& sched, int vpp) {
    const int per_stage = chunks_per_stage(sched, vpp);
    const int layers = base.model.layers;
    if (pp < 2 || pp == base.layout.pp || layers % (pp * per_stage) == 0) return std::nullopt;
    return first_last_split(layers, pp, per_stage);
}

void enumerate(const workload::ExperimentSpec& base, const Fixes& fixes,
               const std::vector<std::string>& schedules, int max_mbs, const Extras& extras,
               const std::function<void(const PlanLayout&)>& f) {
    const int n = base.layout.world_size();
    // Micro-batch sizes up to --max-micro-batch, or up to the largest a bound allows (every
    // divisor for a range open above).
    const int most_mbs = fixes.most("training.micro_batch_size").value_or(max_mbs);
    const auto recomputes = fixes.choices(
        "training.recompute", workload::kRecomputeNames,
        {workload::Recompute::None, workload::Recompute::Selective, workload::Recompute::Full});
    const auto shardings =
        fixes.choices("parallelism.sharding", workload::kShardingNames,
                      {workload::Sharding::None, workload::Sharding::Optimizer,
                       workload::Sharding::Gradients, workload::Sharding::Parameters});
    const int layers = base.model.layers;
    const std::int64_t gbs = base.training.global_batch_size;
    for (const int tp : fixes.allowed("parallelism.tp", divisors(n))) {
        if (n % tp) continue;
        for (const int pp : fixes.allowed("parallelism.pp", divisors(n / tp))) {
            if ((n / tp) % pp) continue;
            for (const int cp : fixes.allowed("parallelism.cp", divisors(n / tp / pp))) {
                if ((n / tp / pp) % cp) continue;
                const int dp = n / tp / pp / cp;
                if (!fixes.allows("parallelism.dp", dp)) continue;
                const auto eps = base.model.experts > 0 ? divisors(dp * cp) : std::vector<int>{1};
                const auto cps = cp_comm_variants(base, fixes, extras, cp);
                for (const int ep : fixes.allowed("parallelism.ep", eps)) {
                    for (const auto& schedule : schedules) {
                        // Virtual stages only where the schedule takes a vpp (chunks_for(v) = v):
                        // v >= 2 dividing the stage's layers.
                        std::vector<int> vpps{1};
                        const auto sched = schedule::make_schedule(schedule);
                        const bool takes_vpp =
                            sched->chunks_for(3) == 3 && sched->chunks_for(4) == 4;
                        // A vpp held or bounded above 1 asks for virtual stages: not a schedule
                        // without them (it was searched labelled with a vpp it ignores).
                        if (!takes_vpp && !fixes.allows("parallelism.vpp", 1)) continue;
                        if (takes_vpp) {
                            // Virtual stages on one pipeline stage: refused by the schedule's
                            // check as Megatron-Core refuses them, and not enumerated at all
                            // (rather than listed as invalid once per pp-1 variant).
                            if (pp == 1) continue;
                            vpps.clear();
                            if (layers % pp == 0)
                                for (const int v : divisors(layers / pp))
                                    if (v >= 2) vpps.push_back(v);
                            if (vpps.empty()) vpps.push_back(2);  // refused: said so
                        }
                        for (const int vpp : fixes.allowed("parallelism.vpp", vpps)) {
                            std::vector<int> mbss;
                            if (gbs % dp == 0) {
                                mbss = divisors(gbs / dp, most_mbs);
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
                            PlanLayout shape;  // the shape's fields; variants() sets the rest
                            shape.tp = tp;
                            shape.pp = pp;
                            shape.dp = dp;
                            shape.cp = cp;
                            shape.ep = ep;
                            shape.vpp = vpp;
                            shape.schedule = schedule;
                            variants(shape, splits,
                                     fixes.allowed("training.micro_batch_size", mbss), recomputes,
                                     shardings, fixes.held("parallelism.sharding"), chunk_layers,
                                     extras, cps, f);
                        }
                    }
                }
            }
        }
    }
}

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

bool same_shape(const PlanLayout& a, const PlanLayout& b) {
    return a.tp == b.tp && a.pp == b.pp && a.cp == b.cp && a.dp == b.dp && a.ep == b.ep &&
           a.vpp == b.vpp && a.schedule == b.schedule &&
           a.first_stage_layers == b.first_stage_layers &&
           a.last_stage_layers == b.last_stage_layers;
}

std::vector<std::string> searched_schedules(const PlanOptions& options, const Fixes& fixes) {
    std::vector<std::string> schedules = options.schedules;
    if (schedules.empty()) schedules = schedule::schedule_names();
    for (const auto& s : schedules)
        schedule::require_schedule(s, SourceLocation{"--schedules"});
    if (const auto at = fixes.axes.find("schedule"); at != fixes.axes.end()) {
        // One schedule, or a set: those of --schedules it names, in --schedules' order.
        const SourceLocation where{"--fix schedule=" + at->second};
        const auto named = Fixes::split_values("schedule", at->second);
        for (const auto& s : named) {
            schedule::require_schedule(s, where);
            if (std::find(schedules.begin(), schedules.end(), s) == schedules.end())
                throw ConfigError(where, "the schedule " + s + " is not among --schedules");
        }
        std::erase_if(schedules, [&](const std::string& s) {
            return std::find(named.begin(), named.end(), s) == named.end();
        });
    }
    return schedules;
}

std::vector<int> node_counts_of(const std::vector<int>& gpus, int per_node) {
    std::vector<int> node_counts;
    std::set<int> seen;
    for (const int g : gpus) {
        const SourceLocation where{"--gpus " + std::to_string(g)};
        if (g < 1 || per_node < 1 || g % per_node != 0)
            throw ConfigError(where, "expected a whole number of nodes of " +
                                         std::to_string(per_node) + " GPUs (the topology's " +
                                         "node), e.g. " + std::to_string(per_node * 2));
        if (!seen.insert(g).second) throw ConfigError(where, "given twice");
        node_counts.push_back(g / per_node);
    }
    if (node_counts.empty()) node_counts.push_back(0);
    return node_counts;
}

void check_profile_fixes(const workload::ExperimentSpec& base, const Fixes& fixes,
                         bool partial_recompute) {
    // A measured layer time holds for the shape it was measured at: at another tp, cp, ep or
    // micro-batch size the profile model would charge the same time for different work (an MFU
    // above 100% at a larger micro-batch).
    if (base.compute.kind == workload::ComputeSpec::Kind::Profile) {
        const std::pair<const char*, int> held[] = {
            {"parallelism.tp", base.layout.tp},
            {"parallelism.cp", base.layout.cp},
            {"parallelism.ep", base.layout.ep},
            {"training.micro_batch_size", static_cast<int>(base.training.micro_batch_size)}};
        std::string missing;
        for (const auto& [key, value] : held)
            if (!fixes.held(key))
                missing += " --fix " + std::string(key) + "=" + std::to_string(value);
        // Without compute.profiled_recompute the profiled backward is charged whatever is
        // recomputed (it holds the run's own); with it, each recomputation is charged its
        // difference from the measured one, and plan searches them.
        if (!base.compute.profile.measured_recompute && !fixes.held("training.recompute"))
            missing += " --fix training.recompute=" +
                       std::string(name_of(workload::kRecomputeNames, base.training.recompute)) +
                       " (or give compute.profiled_recompute, the recomputation the backward "
                       "was measured with)";
        // A stage's profiled time is that of the experiment's stage: at another pp a stage
        // holds other layers.
        if (base.compute.profile.stage_forward && !fixes.held("parallelism.pp"))
            missing += " --fix parallelism.pp=" + std::to_string(base.layout.pp) +
                       " (stage_forward and stage_backward time one stage of that pipeline)";
        if (!missing.empty())
            throw ConfigError(SourceLocation{base.source},
                              "compute.model: profile gives each layer the time measured at one "
                              "tp, cp, ep, micro-batch size and recomputation, so plan cannot "
                              "compare layouts that change them; hold them at the experiment's "
                              "with" +
                                  missing + ", or use compute.model: roofline");
        // Block recomputation of N layers charges the measured backward for each N alike.
        if (partial_recompute && !base.compute.profile.measured_recompute)
            throw ConfigError(SourceLocation{"--partial-recompute"},
                              "compute.model: profile charges each layer's measured backward "
                              "whatever is recomputed, so the layers recomputed cannot be "
                              "compared; give compute.profiled_recompute (the recomputation the "
                              "backward was measured with) or leave --partial-recompute out");
    }
}

PlanResult result_header(const PlanOptions& options, const workload::ExperimentSpec& base,
                         const std::vector<int>& node_counts, int per_node,
                         const std::vector<std::int64_t>& batches, double limit) {
    PlanResult result;
    result.source = base.source;
    result.gpus = base.layout.world_size();
    for (const int nodes : node_counts)
        if (nodes > 0) result.gpu_counts.push_back(nodes * per_node);
    for (const auto batch : batches)
        if (batch > 0) result.global_batches.push_back(batch);
    result.hbm_bytes = base.cluster->gpu_model(0).hbm.value;
    result.network = std::string(name_of(network::kFidelityNames, base.network.fidelity));
    result.objective = options.objective;
    result.objective_unit = options.objective == PlanObjective::Mfu      ? "MFU"
                            : options.objective == PlanObjective::Cost   ? "per 1M tokens"
                            : options.objective == PlanObjective::Energy ? "J per token"
                            : batches.size() > 1                         ? "s per 1M tokens"
                                                                         : "s";
    result.margin = options.margin;
    result.limit_bytes = static_cast<std::int64_t>(limit);
    return result;
}

std::vector<Count> counts_of(const std::function<workload::ExperimentSpec(int nodes)>& load_at,
                             const workload::ExperimentSpec& base,
                             const std::vector<int>& node_counts,
                             const std::vector<std::int64_t>& batches, const Fixes& fixes) {
    std::vector<Count> counts;
    for (const int nodes : node_counts) {
        const auto at_nodes = [&] {
            if (nodes == 0) return base;
            try {
                return load_at(nodes);
            } catch (const ConfigError& e) {
                // The user gave --gpus, not the override it is loaded as.
                throw ConfigError(
                    SourceLocation{"--gpus " +
                                   std::to_string(nodes * base.cluster->gpu_count() /
                                                  std::max(1, base.cluster->node_count()))},
                    "the topology at " + std::to_string(nodes) +
                        " nodes (topology.nodes) is refused: " + e.message());
            }
        }();
        for (const auto batch : batches) {
            // What the enumeration reads of the batch is its size (the micro-batch sizes divide
            // it over dp); the experiment's own layout need not divide it, so it is not loaded.
            Count c{nodes, batch, at_nodes};
            if (batch > 0) c.base.training.global_batch_size = batch;
            counts.push_back(std::move(c));
        }
    }
    // A held value must divide some count's GPUs (the others have no layout with it).
    for (const char* key : {"parallelism.tp", "parallelism.pp", "parallelism.cp", "parallelism.dp"})
        if (const auto v = fixes.number(key);
            v && std::none_of(counts.begin(), counts.end(), [&](const Count& c) {
                return c.base.layout.world_size() % *v == 0;
            })) {
            std::vector<int> gpus;  // each count's, once
            for (const auto& c : counts)
                if (std::find(gpus.begin(), gpus.end(), c.base.layout.world_size()) == gpus.end())
                    gpus.push_back(c.base.layout.world_size());
            std::string sizes;
            for (const int g : gpus)
                sizes += (sizes.empty() ? "" : ", ") + std::to_string(g);
            const bool own = counts.size() == 1 && counts.front().nodes == 0;
            throw ConfigError(
                SourceLocation{"--fix " + std::string(key) + "=" + std::to_string(*v)},
                gpus.size() > 1 ? "divides none of the GPU counts searched (" + sizes + ")"
                                : "does not divide the " + std::string(own ? "experiment's " : "") +
                                      sizes + " GPUs");
        }
    return counts;
}

std::string profile_mismatch(const workload::ExperimentSpec& base, const Fixes& fixes,
                             const PlanLayout& l) {
    if (base.compute.kind != workload::ComputeSpec::Kind::Profile) return {};
    const std::pair<const char*, int> shape[] = {{"parallelism.tp", l.tp},
                                                 {"parallelism.cp", l.cp},
                                                 {"parallelism.ep", l.ep},
                                                 {"parallelism.pp", l.pp},
                                                 {"training.micro_batch_size", l.micro_batch_size}};
    // A layer's profiled time holds at any pp; a stage's only at the experiment's.
    const bool stage = base.compute.profile.stage_forward.has_value();
    for (const auto& [key, value] : shape)
        if (const auto held = fixes.number(key);
            held && *held != value && (stage || std::string_view(key) != "parallelism.pp"))
            return std::string("compute.model: profile: its times were measured at ") + key + " " +
                   std::to_string(*held) + " (--fix), not this layout's " + std::to_string(value) +
                   "; not timed";
    if (!base.compute.profile.measured_recompute)
        if (const auto held =
                fixes.choices("training.recompute", workload::kRecomputeNames,
                              {workload::Recompute::None, workload::Recompute::Selective,
                               workload::Recompute::Full});
            held.size() == 1 && held.front() != l.recompute)
            return "compute.model: profile: its backward was measured at recompute " +
                   std::string(name_of(workload::kRecomputeNames, held.front())) +
                   " (--fix), not this layout's; not timed";
    return {};
}

bool cp_exchange_fix(const std::string& fix) {
    return fix.rfind("parallelism.cp_comm_type=", 0) == 0 ||
           fix.rfind("parallelism.cp_a2a_size=", 0) == 0;
}

std::vector<std::int64_t> batches_of(const PlanOptions& options, const Fixes& fixes) {
    std::vector<std::int64_t> batches;
    if (!options.global_batches.empty())
        if (const char* b = fixes.other("training.global_batch_size"))
            throw ConfigError(SourceLocation{"--fix training.global_batch_size=" + std::string(b)},
                              "the global batch is searched (--global-batch): fix it there");
    std::set<std::int64_t> seen;
    for (const auto b : options.global_batches) {
        const SourceLocation where{"--global-batch " + std::to_string(b)};
        if (b < 1) throw ConfigError(where, "expected a number of sequences, 1 or more");
        if (!seen.insert(b).second) throw ConfigError(where, "given twice");
        batches.push_back(b);
    }
    if (batches.empty()) batches.push_back(0);
    return batches;
}

void check_options(const PlanOptions& options) {
    if (options.top == 0) throw ConfigError(SourceLocation{"--top"}, "expected 1 or more");
    // Each thread keeps its own caches (a cluster's routes, op orders): past a few hundred they
    // only cost memory, and the system refuses to start many thousands.
    if (options.threads < 0 || options.threads > PlanOptions::kMostThreads)
        throw ConfigError(SourceLocation{"--threads " + std::to_string(options.threads)},
                          "expected a number of threads from 1 to " +
                              std::to_string(PlanOptions::kMostThreads) + " (or 0: one per core)");
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
    // Far above any price, the cost per token of a large layout would not be finite.
    if (options.gpu_hour_price != 0 &&
        !(options.gpu_hour_price > 0 && options.gpu_hour_price <= 1e9))
        throw ConfigError(SourceLocation{"--gpu-hour-price"},
                          "expected the price of one GPU for an hour, above 0 and at most 1e9");
}

double peak_flops(const workload::ExperimentSpec& spec) {
    const auto& gpu = spec.cluster->gpu_model(0);
    if (spec.training.precision == workload::Precision::Fp16) return gpu.peak_fp16.flops_per_s;
    if (spec.training.precision == workload::Precision::Fp8) return gpu.peak_fp8.flops_per_s;
    return gpu.peak_bf16.flops_per_s;
}

// Energy counts every GPU at its board power for the whole iteration, times the PUE, as the
// summary's goodput block does (docs/what-if.md).
double board_power(const PlanOptions& options, const workload::ExperimentSpec& base) {
    const auto& gpu = base.cluster->gpu_model(0);
    const double board_power_w = base.goodput.gpu_power_w.value_or(gpu.board_power_w);
    if (options.objective == PlanObjective::Energy && !(board_power_w > 0))
        throw ConfigError(SourceLocation{"--objective energy"},
                          "no board power is known for the GPU model " + gpu.name +
                              ": give it in the topology (gpu_models: {" + gpu.name +
                              ": {board_power: WATTS, ...}}) or the experiment (goodput: "
                              "{gpu_power: WATTS}), or use --objective time, mfu or cost");
    return board_power_w;
}

}  // namespace plan_space

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
    if (cp_comm) {
        out.push_back("parallelism.cp_comm_type=" +
                      std::string(name_of(workload::kCpCommTypeNames, *cp_comm)));
        // The experiment's group size, if it gave one, goes with its own a2a+p2p only.
        out.push_back("parallelism.cp_a2a_size=" +
                      (cp_a2a_size > 0 ? std::to_string(cp_a2a_size) : std::string("~")));
    }
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
    if (cp_comm) {
        o << " cp_comm " << name_of(workload::kCpCommTypeNames, *cp_comm);
        if (cp_a2a_size > 0) o << " " << cp_a2a_size;
    }
    if (nodes > 0) o << " on " << gpus() << " GPUs";
    return o.str();
}

std::vector<std::int64_t> parse_global_batches(const std::string& text) {
    const auto fail = [&](const std::string& item, const std::string& what) {
        throw ConfigError(SourceLocation{"--global-batch " + text},
                          (item.empty() ? std::string("an empty item") : "'" + item + "'") + ": " +
                              what +
                              "; expected sizes N, ranges MIN..MAX (the multiples of MIN up to "
                              "MAX) or MIN..MAX:STEP, comma-separated, in sequences");
    };
    // A whole number of sequences, 1 .. 2^31 - 1: training.global_batch_size's range (a count).
    constexpr std::int64_t kMax = std::numeric_limits<int>::max();
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

}  // namespace cs::api
