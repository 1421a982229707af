#include "session/plan.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <set>

#include "core/errors.hpp"
#include "core/units.hpp"
#include "network/network.hpp"
#include "replay/bound.hpp"
#include "replay/prepare.hpp"
#include "replay/replay.hpp"
#include "schedule/schedule.hpp"
#include "session/plan_guide.hpp"
#include "session/plan_search.hpp"
#include "session/plan_space.hpp"
#include "session/run.hpp"
#include "session/sweep_cache.hpp"
#include "session/worker_pool.hpp"
#include "workload/megatron_args.hpp"

namespace cs::api {

namespace {

using plan_search::gather_shares;
using plan_search::Search;
using plan_search::Survivor;
using plan_space::batches_of;
using plan_space::board_power;
using plan_space::check_profile_fixes;
using plan_space::Count;
using plan_space::counts_of;
using plan_space::cp_exchange_fix;
using plan_space::derived_split;
using plan_space::enumerate;
using plan_space::Extras;
using plan_space::Fixes;
using plan_space::node_counts_of;
using plan_space::parse_fixes;
using plan_space::peak_flops;
using plan_space::profile_mismatch;
using plan_space::result_header;
using plan_space::same_shape;
using plan_space::Scorer;
using plan_space::searched_schedules;
using plan_space::shape_refusal;

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

struct Loader {
    const PlanOptions& options;
    std::vector<std::string> base;  // --set, then the --fix keys that are not axes
    SweepCache* cache = nullptr;
    // --fix parallelism.cp_comm_type / cp_a2a_size: a layout's own (a group size is checked
    // against the layout's cp, not the experiment's), after its overrides.
    std::vector<std::string> cp_exchange;
    // The experiment or --fix gives an a2a+p2p group size (set after the experiment is loaded):
    // a layout of cp 1, which exchanges nothing, runs without it (it would be refused there).
    bool group_size = false;
    workload::ExperimentSpec load(const PlanLayout& l, bool analytical) const {
        std::vector<std::string> more = l.overrides();
        more.insert(more.end(), cp_exchange.begin(), cp_exchange.end());
        if (l.cp < 2 && group_size) {
            more.emplace_back("parallelism.cp_comm_type=p2p");
            more.emplace_back("parallelism.cp_a2a_size=~");
        }
        if (analytical) more.emplace_back("network.model=analytical");
        return load(more);
    }
    // The experiment with `base`, then `more`.
    workload::ExperimentSpec load(const std::vector<std::string>& more) const {
        auto overrides = base;
        overrides.insert(overrides.end(), more.begin(), more.end());
        auto* clusters = cache ? &cache->clusters : nullptr;
        auto* documents = cache ? &cache->documents : nullptr;
        try {
            return options.text
                       ? workload::load_experiment(*options.text, overrides, options.max_memory,
                                                   clusters, documents)
                       : workload::load_experiment(options.experiment, overrides,
                                                   options.max_memory, clusters, documents);
        } catch (const ConfigError& e) {
            // The loader names every override "--set"; a --fix value is named as given.
            std::vector<std::string> fixed(
                base.begin() + static_cast<std::ptrdiff_t>(options.sets.size()), base.end());
            // The group size plan drops beside a held exchange is no --fix of the user's.
            for (const auto& f : cp_exchange)
                if (f != "parallelism.cp_a2a_size=~") fixed.push_back(f);
            for (const auto& f : fixed)
                if (e.where().file == "--set " + f)
                    throw ConfigError(
                        SourceLocation{"--fix " + f, e.where().line, e.where().column},
                        e.message());
            throw;
        }
    }
};

// Where a run may end before its iteration does: at `at` (RunOptions::stop_at), and with
// `when` at the first check, every `every`, at which when(now) holds (RunOptions::stop_when).
struct RunStop {
    std::optional<Time> at;
    std::function<bool(Time)> when;
    Time every;
};

// The run's summary, or none when `stop` ended it before its iteration ended. With a `budget`,
// the run holds its estimate (estimate_run_bytes of the prepared shape) against it from the end
// of its preparation to its end.
std::optional<report::Summary> simulate(const workload::ExperimentSpec& spec, SweepCache* cache,
                                        const PlanOptions& options, RunStop stop = {},
                                        MemoryBudget* budget = nullptr) {
    RunOptions run_options;
    std::optional<MemoryBudget::Hold> hold;
    if (budget)
        run_options.on_prepared = [&hold, budget](const replay::PreparedIteration& it) {
            hold.emplace(*budget, estimate_run_bytes(it.spec, it.shape.chunks));
        };
    run_options.fast_paths = options.fast_paths;
    run_options.max_memory = options.max_memory;
    run_options.stop_at = stop.at;
    run_options.stop_when = std::move(stop.when);
    run_options.stop_check_every = stop.every;
    // plan's figures read no link, so none is accounted (the transfers' kept costs are reused
    // without telling anyone of their links).
    if (cache) cache->links = SweepCache::Links::None;
    auto result = run(spec, run_options, cache);
    if (result.stopped) return std::nullopt;
    return std::move(result.summary);
}

// What each worker thread keeps for itself: its caches (SweepCache's parts and a cluster's
// mutable route caches are not shared between threads) and the collective costs of its bounds.
struct Worker {
    std::shared_ptr<SweepCache> cache;
    Loader loader;
    std::unique_ptr<replay::CollectiveCosts> costs;
    const topology::Cluster* costs_cluster = nullptr;
    // The op orders of the last shapes this worker's prepares met (the variants of a layout that
    // share its schedule and shape come one after another; the shape comes back for each ep).
    replay::OrdersMemo orders;
    // Seconds this worker spent in each step (for plan -v; PlanResult::seconds sums them).
    struct {
        double load = 0, prepare = 0, bound = 0, analytical = 0, confirm = 0;
    } spent;

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

// Steps 1-3 for one layout (see plan.hpp), into `out`.
struct SearchStep {
    const PlanOptions& options;
    const Scorer& scorer;
    const topology::GpuModel& gpu;
    double limit = 0;

    // `refused`: shape_refusal's reason for the layout's shape (empty: none), which the
    // layouts of that shape share.
    void operator()(const PlanLayout& l, std::size_t index,
                    const std::shared_ptr<const std::string>& refused, Worker& w,
                    Search& out) const {
        ++out.layouts;
        PlanEntries::Record entry;
        entry.layout = l;
        entry.index = index;
        // What the loader would refuse for the sharding alone is counted without loading (a
        // third of GPT-3's layouts, 40% of DeepSeek-V3's): the same rule and message.
        // Then the shape's refusal (shape_refusal), after the sharding's as the loader reads
        // the sharding first.
        auto why = workload::sharding_refusal(l.sharding, l.cp, l.ep);
        if (why.empty()) why = *refused;
        if (!why.empty()) {
            entry.status = PlanEntry::Status::Invalid;
            entry.invalid = out.invalid_for(std::move(why), refused);
            if (options.keep_entries) out.entries.push_back(std::move(entry));
            return;
        }
        try {
            auto clock = std::chrono::steady_clock::now();
            const auto lap = [&](double& into) {
                const auto now = std::chrono::steady_clock::now();
                into += std::chrono::duration<double>(now - clock).count();
                clock = now;
            };
            const auto spec = w.loader.load(l, true);
            lap(w.spent.load);
            // A layout whose memory floor (one microbatch in flight) is already above the
            // limit is refused before its op orders are made: they grow with the microbatches.
            std::int64_t memory = 0;
            bool floor_only = false;
            replay::PrepareOptions prepare_options;
            prepare_options.orders = &w.orders;
            prepare_options.admit = [&](const replay::PreparedIteration& it) {
                // What the simulator itself would need (its op orders grow with the
                // microbatches): refused as `run` refuses it, before anything is built.
                check_run_memory(it.spec, it.shape, options.max_memory);
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
            lap(w.spent.prepare);
            entry.memory_bytes = memory;
            if (gpu.hbm.value > 0 && static_cast<double>(memory) > limit) {
                entry.status = PlanEntry::Status::PrunedMemory;  // why: PlanEntries writes it
                entry.floor_only = floor_only;
                ++out.pruned_memory;
            } else {
                Survivor s;
                s.layout = l;
                s.index = index;
                // The census of these orders, made once for the layouts that share them (when
                // the memo kept them).
                std::shared_ptr<const replay::OpCensus> own;
                auto& census = w.orders.current() ? w.orders.current()->census : own;
                if (!census)
                    census = std::make_shared<const replay::OpCensus>(replay::op_census(*prepared));
                s.bound_s =
                    replay::iteration_floor(*prepared, w.costs_for(spec), census.get()).seconds();
                lap(w.spent.bound);
                s.flops = prepared->plan.model_flops_per_iteration.value;
                s.peak = peak_flops(spec);
                s.tokens = static_cast<double>(prepared->plan.tokens_per_iteration);
                s.bound_score = scorer.score(s.bound_s, s.flops, s.peak, s.tokens, l.gpus());
                s.floor_score = s.bound_score;
                s.memory = memory;
                entry.lower_bound_s = s.bound_s;
                entry.status = PlanEntry::Status::PrunedBound;  // until simulated
                out.survivors.push_back(std::move(s));
            }
        } catch (const ConfigError& e) {
            entry.status = PlanEntry::Status::Invalid;
            entry.invalid = out.invalid_for(e.what(), nullptr);
        }
        if (options.keep_entries) out.entries.push_back(std::move(entry));
    }
};

// One worker per thread (PlanOptions::threads; one under mpirun, where the ranks share the
// cores), each with its own caches; worker 0's also serve the calling thread while no task runs
// (the experiment as given, the guide, the flags).
std::vector<Worker> make_workers(const PlanOptions& options, const Fixes& fixes,
                                 const SweepRanks& ranks) {
    const std::size_t threads = options.threads > 0 ? static_cast<std::size_t>(options.threads)
                                : ranks.size() > 1
                                    ? 1
                                    : std::max(1u, std::thread::hardware_concurrency());
    std::vector<Worker> workers;
    workers.reserve(threads);
    for (std::size_t t = 0; t < threads; ++t) {
        auto cache = options.fast_paths ? std::make_shared<SweepCache>() : nullptr;
        Loader loader{options, options.sets, cache.get(), {}, false};
        for (const auto& o : fixes.others)
            (cp_exchange_fix(o) ? loader.cp_exchange : loader.base).push_back(o);
        // A held exchange other than a2a+p2p drops the experiment's group size, which goes
        // with a2a+p2p only (unless --fix gives one).
        const char* type = fixes.other("parallelism.cp_comm_type");
        if (type && std::string_view(type) != "a2a+p2p" && !fixes.other("parallelism.cp_a2a_size"))
            loader.cp_exchange.emplace_back("parallelism.cp_a2a_size=~");
        workers.push_back(Worker{std::move(cache), std::move(loader), nullptr, nullptr, {}, {}});
    }
    return workers;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A layout of this rank's share, with shape_refusal's reason, which its shape's variants share.
struct SearchItem {
    std::size_t index;
    PlanLayout layout;
    std::shared_ptr<const std::string> refused;
};

// Steps 1-3 over every layout of `counts`: load, prepare, memory, bound. Layout n goes to rank n
// mod size; a rank's share goes to its threads in chunks, merged in enumeration order (each
// layout's entry is its own: the caches change no result).
Search search_layouts(const PlanOptions& options, const Fixes& fixes,
                      const std::vector<Count>& counts, const std::vector<std::string>& schedules,
                      const SearchStep& search_one, std::vector<Worker>& workers, WorkerPool& pool,
                      const SweepRanks& ranks) {
    Search search;
    std::size_t n = 0;
    std::size_t total = 0;
    const Extras extras{options.hsdp, options.partial_recompute, options.uneven_stages,
                        options.cp_comm};
    for (const auto& c : counts)
        enumerate(c.base, fixes, schedules, options.max_micro_batch_size, extras,
                  [&](const PlanLayout&) { ++total; });
    constexpr std::size_t kChunk = 64;
    struct Chunk {
        std::vector<SearchItem> layouts;
        std::future<Search> found;
    };
    std::deque<Chunk> chunks;
    std::vector<SearchItem> filling;
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
                search_one(item.layout, item.index, item.refused, workers[w], part);
            return part;
        });
    };
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
        enumerate(c.base, fixes, schedules, options.max_micro_batch_size, extras,
                  [&](PlanLayout l) {
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
                      filling.push_back(SearchItem{index, std::move(l), refused});
                      if (filling.size() == kChunk) submit();
                  });
    }
    submit();
    while (!chunks.empty())
        merge_oldest();
    return search;
}

// A survivor simulated with the analytical network (step 4), and whether step 5 confirmed it.
struct SimulatedSurvivor {
    const Survivor* survivor;
    PlanFigures figures;
    bool confirmed = false;
};

// Steps 4 and 5 (see plan.hpp). The survivors, in the order of their bound, are simulated with
// the analytical network (4); those simulated are confirmed under the experiment's own network in
// the order of their analytical score (5). Both stop by the same rule: a layout cannot reach the
// top k once what it can at best score is no better than the k-th best confirmed score. At best
// it scores its bound before step 4 (no replay is faster) and its analytical score before step 5
// (contention only lengthens an iteration: the premise, checked on every confirmed layout and
// reported when it fails). Until k layouts are confirmed, step 4 stops where the bound, shortened
// by the margin, loses to the k-th best analytical score; when the confirmed k-th best is worse
// than that, step 4 resumes up to it, and so on until neither step has a layout left that could
// enter the top k.
struct Simulations {
    const PlanOptions& options;
    const Scorer& scorer;
    std::vector<Worker>& workers;
    WorkerPool& pool;
    // In the order of their floor (step 3); at(i) gives them in the order of their bound.
    std::vector<Survivor>& survivors;
    std::vector<Survivor*> by_bound;  // [0, ordered): in the order of their bound (score, index)
    std::size_t ordered = 0;
    std::size_t floored = 0;              // survivors[floored, end): not bounded yet
    std::vector<std::size_t> floored_at;  // `floored` when by_bound[i] was set
    std::vector<Survivor*> bounded;       // bounded, not yet in order: a heap, the first at front
    // With the analytical network step 5 reuses step 4's results: nothing to limit.
    bool same_network = false;
    std::size_t limit_confirm = 0;  // PlanOptions::confirm's (0: none)

    std::deque<SimulatedSurvivor> simulated;  // stable addresses
    // The best analytical scores: the k best, and with a confirmation limit the limit's number
    // (step 5 confirms no more than those, so step 4 need not look further before it).
    std::multiset<double> best;
    std::multiset<double> best_confirmed;  // the k best
    std::vector<PlanChoice> confirmed;     // those whose run ended (not stopped)
    std::size_t confirm_runs = 0;          // every run of step 5, stopped or not
    // The k-th best confirmed score as it stands, read by the confirming runs in flight: each
    // stops at a check once it can no longer beat it (RunStop::when). The k-th best only improves
    // and a run's commit judges it against the k-th best of the commits before it, which is no
    // worse than any value seen here while it ran: such a stop drops nothing confirm() would
    // keep. -infinity once step 5's loop ends, so that runs launched ahead and dropped stop.
    std::atomic<double> kth_now{std::numeric_limits<double>::infinity()};
    std::map<std::size_t, PlanFigures> analytical_of, confirmed_of;  // with keep_entries: by index
    std::map<std::size_t, double> stopped_of;  // with keep_entries: a stopped run's stop, by index

    std::size_t faster_than_analytical = 0;
    std::size_t next = 0, step = 0, confirm_step = 0;
    mutable MemoryBudget budget;

    Simulations(const PlanOptions& o, const Scorer& s, std::vector<Worker>& w, WorkerPool& p,
                std::vector<Survivor>& sorted, bool analytical)
        : options(o),
          scorer(s),
          workers(w),
          pool(p),
          survivors(sorted),
          by_bound(sorted.size(), nullptr),
          floored_at(sorted.size(), 0),
          same_network(analytical),
          limit_confirm(analytical ? 0 : o.confirm.value_or(3 * o.top)),
          budget(static_cast<double>(o.max_memory)) {}

    // Until neither step has a layout left that could enter the top k. Before the first
    // confirmation step 4 runs while a survivor's bound, shortened by the margin, beats the k-th
    // best analytical score, and with a confirmation limit L also its bound (not shortened)
    // beats the L-th best: step 5 then confirms the L best analytical results, which are all
    // simulated by then (no survivor left has a bound, and so a result, that beats the L-th), so
    // the limit changes nothing of what is confirmed, only what is simulated first.
    void run() {
        simulate_while([&](const Survivor& s) {
            return bound_score(s, 1 / (1 + options.margin)) <= nth_of(best, options.top) &&
                   (limit_confirm == 0 || bound_score(s, 1) <= nth_of(best, limit_confirm));
        });
        for (;;) {
            confirm_in_order();
            // Once the confirmation limit is reached nothing more is confirmed, so step 4 stops
            // too: its further runs could only count contenders (the layouts left are counted
            // by their bounds instead, count_contenders). On Llama 3 405B at 16,384 GPUs they
            // were 230 of its 264 analytical runs.
            if (limit_reached()) break;
            // 4 again: survivors whose bound still beats the k-th best confirmed score.
            const std::size_t before = next;
            simulate_while([&](const Survivor& s) {
                return bound_score(s, 1) <= nth_of(best_confirmed, options.top);
            });
            if (next == before) break;
        }
    }

    bool limit_reached() const { return limit_confirm > 0 && confirm_runs >= limit_confirm; }

    // The n-th best of `scores` (infinity while there are fewer).
    static double nth_of(const std::multiset<double>& scores, std::size_t n) {
        return scores.size() < n ? std::numeric_limits<double>::infinity()
                                 : *std::next(scores.begin(), static_cast<std::ptrdiff_t>(n - 1));
    }
    static void keep_best(std::multiset<double>& scores, double score, std::size_t n) {
        scores.insert(score);
        if (scores.size() > n) scores.erase(std::prev(scores.end()));
    }
    // What survivor s could at best score: its bound times `scale`.
    double bound_score(const Survivor& s, double scale) const {
        return scorer.score(s.bound_s * scale, s.flops, s.peak, s.tokens, s.layout.gpus());
    }

    // The i-th survivor in the order of its bound (score, then index), bounded. A survivor not
    // bounded yet has a bound no better than its floor, and the floors are in order: so the
    // best bounded one comes next once its score is below the next floor, else the next
    // survivors by floor are bounded (in parallel, a batch at a time) and it is asked again. The
    // order is the one of bounding every survivor first, whatever the threads; a survivor whose
    // floor already loses is never bounded (Llama 3 405B at 8,192 GPUs on two threads: 1,424 of
    // 25,860 bounded). Called on the calling thread only.
    const Survivor& at(std::size_t i) {
        const auto after = [](const Survivor* x, const Survivor* y) {
            if (x->bound_score != y->bound_score) return x->bound_score > y->bound_score;
            return x->index > y->index;
        };
        while (ordered <= i) {
            if (!bounded.empty() &&
                (floored == survivors.size() ||
                 bounded.front()->bound_score < survivors[floored].bound_score)) {
                std::pop_heap(bounded.begin(), bounded.end(), after);
                floored_at[ordered] = floored;
                by_bound[ordered++] = bounded.back();
                bounded.pop_back();
                continue;
            }
            // A batch of a fixed size, whatever the threads: which survivors get bounded (and
            // so the bounds --json reports) does not depend on them.
            constexpr std::size_t kBatch = 16;
            const std::size_t end = std::min(survivors.size(), floored + kBatch);
            std::vector<std::future<double>> bounds;
            for (std::size_t k = floored; k < end; ++k)
                bounds.push_back(pool.submit([this, k](std::size_t w) {
                    return full_bound(workers[w], survivors[k].layout);
                }));
            // Every task done before anything is thrown (a schedule whose orders deadlock
            // throws here): they refer to the survivors and the workers.
            std::exception_ptr failed;
            for (std::size_t k = floored; k < end; ++k) {
                Survivor& s = survivors[k];
                try {
                    s.bound_s = bounds[k - floored].get();
                } catch (...) {
                    if (!failed) failed = std::current_exception();
                    continue;
                }
                s.bound_score = bound_score(s, 1);
                bounded.push_back(&s);
                std::push_heap(bounded.begin(), bounded.end(), after);
            }
            if (failed) std::rethrow_exception(failed);
            floored = end;
        }
        return *by_bound[i];
    }

    // How many survivors (the first by floor) a single thread bounds: the threads run step 4
    // ahead of its stop (run_ahead), asking at() for survivors past it and bounding some more,
    // whose bounds are not reported (their floors are), so that what --json says does not
    // depend on the threads. One thread asks for the survivor where step 4 last stopped.
    std::size_t bounded_in_order() const {
        return next < survivors.size() ? floored_at[next] : floored;
    }

    // Layout l's bound (replay::iteration_lower_bound) on worker w, loaded and prepared again as
    // step 3 did (a prepared iteration is not kept: it holds every op order).
    static double full_bound(Worker& w, const PlanLayout& l) {
        const auto started = std::chrono::steady_clock::now();
        const auto spec = w.loader.load(l, true);
        replay::PrepareOptions options;
        options.orders = &w.orders;
        const auto prepared = replay::prepare(spec, "", options);
        const double bound = replay::iteration_lower_bound(prepared, w.costs_for(spec)).seconds();
        w.spent.bound += seconds_since(started);
        return bound;
    }

    // A layout's figures under the analytical network (or its own), on worker w; none when its
    // run was stopped at `stop` before its iteration ended.
    std::optional<PlanFigures> figures_on(std::size_t w, const PlanLayout& l, bool analytical,
                                          const Survivor& s, RunStop stop = {}) const {
        Worker& worker = workers[w];
        const auto started = std::chrono::steady_clock::now();
        std::optional<PlanFigures> figures;
        // A moving stop that already holds at the start (the loop that launched the run has
        // ended): stopped before anything is loaded.
        if (!stop.when || !stop.when(Time::zero())) {
            const auto spec = worker.loader.load(l, analytical);
            if (const auto summary =
                    simulate(spec, worker.cache.get(), options, std::move(stop), &budget))
                figures = figures_of(*summary, scorer, s.flops, s.peak, s.tokens, l.gpus());
        }
        (analytical ? worker.spent.analytical : worker.spent.confirm) += seconds_since(started);
        return figures;
    }

    // Where a run of survivor s may stop once it cannot score `limit` or better: the first
    // picosecond of the iteration at which its score, worked out as figures_of does from the
    // iteration time, is above `limit` (every objective grows with the iteration time), found by
    // bisection over whole picoseconds. An iteration that reaches it scores above `limit`, and
    // one that scores above `limit` reaches it. None for an infinite limit (fewer than k
    // confirmed yet) or beyond 10^6 s.
    std::optional<Time> stop_for(const Survivor& s, double limit) const {
        if (!std::isfinite(limit)) return std::nullopt;
        const auto above = [&](std::int64_t ps) {
            return scorer.score(Time::ps(ps).seconds(), s.flops, s.peak, s.tokens,
                                s.layout.gpus()) > limit;
        };
        constexpr std::int64_t kMost = 1'000'000'000'000'000'000;  // 10^6 s
        std::int64_t lo = 0, hi = 1'000'000'000'000;               // 1 s
        if (above(lo)) return Time::zero();
        while (!above(hi)) {
            lo = hi;
            if (hi > kMost / 2) return std::nullopt;
            hi *= 2;
        }
        while (hi - lo > 1) {  // above(hi), not above(lo)
            const std::int64_t mid = lo + (hi - lo) / 2;
            (above(mid) ? hi : lo) = mid;
        }
        return Time::ps(hi);
    }

    // Step 4 over the survivors from `next` while `worth(survivor)`, the threads running ahead
    // (run_ahead: the same layouts as one thread).
    template <typename Worth>
    void simulate_while(const Worth& worth) {
        // Analytical runs are short and uneven: four per thread in flight (one thread runs
        // none ahead: it would only drop them at a stop).
        next = run_ahead(
            pool, pool.size() > 1 ? 4 * pool.size() : 1, next, survivors.size(),
            [&](std::size_t i, std::size_t) { return worth(at(i)); },
            [&](std::size_t i, std::size_t w) {
                return *figures_on(w, by_bound[i]->layout, true, *by_bound[i]);
            },
            [&](std::size_t i, PlanFigures f) {
                const Survivor& s = *by_bound[i];
                if (options.on_progress) options.on_progress("simulate", ++step, survivors.size());
                simulated.push_back({&s, f});
                keep_best(best, f.objective, std::max(options.top, limit_confirm));
                if (options.keep_entries) analytical_of[s.index] = f;
            });
    }

    // Step 5: the unconfirmed in the order of their analytical score, while it beats the k-th
    // best confirmed score (and the confirmation limit allows).
    void confirm_in_order() {
        std::vector<SimulatedSurvivor*> order;
        for (auto& x : simulated)
            if (!x.confirmed) order.push_back(&x);
        std::sort(order.begin(), order.end(),
                  [](const SimulatedSurvivor* x, const SimulatedSurvivor* y) {
                      if (x->figures.objective != y->figures.objective)
                          return x->figures.objective < y->figures.objective;
                      return x->survivor->index < y->survivor->index;
                  });
        // Runs under the experiment's network are long and uneven: two per thread in flight, so
        // that a thread whose run ended takes the next while the oldest, which commits first,
        // goes on (with one per thread it waited: 9.5 of the threads' 75 s on Llama 3 405B at
        // 16,384 GPUs). Each stops where it can no longer beat the k-th best confirmed score as
        // it stood at its launch (limit_at: go runs on this thread before the run is
        // submitted; confirm judges it again at commit), and earlier as that score improves
        // (moving_stop, checked 128 times a run), so a run launched ahead stops about where one
        // launched at its turn would.
        // The runs in flight count against the limit: one launched past it would only be
        // dropped once it ended, the threads waiting for it.
        std::vector<double> limit_at(order.size(), std::numeric_limits<double>::infinity());
        kth_now.store(nth_of(best_confirmed, options.top));
        run_ahead(
            pool, 2 * pool.size(), 0, order.size(),
            [&](std::size_t i, std::size_t in_flight) {
                limit_at[i] = nth_of(best_confirmed, options.top);
                const bool go = order[i]->figures.objective <= limit_at[i] &&
                                (limit_confirm == 0 || confirm_runs + in_flight < limit_confirm);
                // Nothing in flight is committed once the loop ends: stop it.
                if (!go && in_flight == 0) kth_now.store(-std::numeric_limits<double>::infinity());
                return go;
            },
            [&](std::size_t i, std::size_t w) -> std::optional<PlanFigures> {
                const SimulatedSurvivor& x = *order[i];
                if (same_network) return x.figures;
                return figures_on(w, x.survivor->layout, false, *x.survivor,
                                  moving_stop(x, limit_at[i]));
            },
            [&](std::size_t i, std::optional<PlanFigures> figures) {
                confirm(*order[i], std::move(figures));
            });
    }

    // Where a confirming run of `x` launched against the k-th best `limit` stops: at
    // stop_for(limit) (none while fewer than k are confirmed), and earlier at a check (128 a run,
    // by its analytical time) once its score at that instant is above the k-th best as it stands
    // then (kth_now).
    RunStop moving_stop(const SimulatedSurvivor& x, double limit) const {
        RunStop stop;
        stop.at = stop_for(*x.survivor, limit);
        const Survivor& s = *x.survivor;
        stop.when = [this, &s](Time now) {
            return scorer.score(now.seconds(), s.flops, s.peak, s.tokens, s.layout.gpus()) >
                   kth_now.load();
        };
        stop.every =
            std::max(Time::ps(1), Time::from_seconds_ceil(x.figures.iteration_time_s / 128));
        return stop;
    }

    // Step 5's result for `x`: its figures under the experiment's network, or none when its run
    // was stopped. What is kept is what one thread would keep: a run is taken as stopped where
    // the k-th best confirmed score stands now would stop it (the threads may have launched it
    // against an earlier, larger k-th best, which stops it later or not at all), and then only
    // that it takes at least that long is kept: it cannot enter the top k.
    void confirm(SimulatedSurvivor& x, std::optional<PlanFigures> figures) {
        if (options.on_progress) options.on_progress("confirm", ++confirm_step, simulated.size());
        x.confirmed = true;
        ++confirm_runs;
        // A run that scores above the k-th best now cannot enter the top k (one that ties it
        // still can, on its index): one thread would have stopped it, at `stop`.
        const double kth = nth_of(best_confirmed, options.top);
        if (!figures || figures->objective > kth) {
            const auto stop = stop_for(*x.survivor, kth);
            if (!stop)
                throw SimulationError("plan", "a confirmation stopped without a limit",
                                      Time::zero());
            if (options.keep_entries) stopped_of[x.survivor->index] = stop->seconds();
            return;
        }
        PlanChoice c;
        c.layout = x.survivor->layout;
        c.index = x.survivor->index;
        c.analytical = x.figures;
        c.lower_bound_s = x.survivor->bound_s;
        c.figures = std::move(*figures);
        // The premise of the stop rule: no layout scores better under its own network than
        // under the analytical one (relative 1e-9: the two sum their parts differently).
        if (c.figures.objective < c.analytical.objective - 1e-9 * std::abs(c.analytical.objective))
            ++faster_than_analytical;
        keep_best(best_confirmed, c.figures.objective, options.top);
        kth_now.store(nth_of(best_confirmed, options.top));
        if (options.keep_entries) confirmed_of[c.index] = c.figures;
        confirmed.push_back(std::move(c));
    }

    // What the confirmation limit left that could still enter the top k: layouts simulated
    // with the analytical network whose score beats the k-th best confirmed one, and survivors
    // not simulated whose bound does (`left`, by index; the bound as reported: in full for those
    // bounded in order, else the floor). Without a limit, or when the stop rule stopped first,
    // there are none: run() ran step 4 until no bound beat it.
    void count_contenders(PlanResult& result) {
        const double kth = nth_of(best_confirmed, options.top);
        for (const auto& x : simulated)
            if (!x.confirmed && x.figures.objective < kth) {
                result.best_contender = result.contenders++ == 0
                                            ? x.figures.objective
                                            : std::min(result.best_contender, x.figures.objective);
            }
        std::vector<bool> done(survivors.size());  // by position in `survivors`
        for (const auto& x : simulated)
            done[static_cast<std::size_t>(x.survivor - survivors.data())] = true;
        const std::size_t in_order = bounded_in_order();
        for (std::size_t k = 0; k < survivors.size(); ++k) {
            const Survivor& s = survivors[k];
            if (done[k]) continue;
            // As step 4 takes them: a bound no worse than the k-th (a tie may win on its index).
            if ((k < in_order ? s.bound_score : s.floor_score) <= kth) left.push_back(s.index);
        }
        std::sort(left.begin(), left.end());
        result.left_by_limit = left.size();
    }
    std::vector<std::size_t> left;  // count_contenders: by index
};

// The top k of the confirmed layouts by score (the first enumerated on a tie): #1 with the
// Megatron-LM flags that run it, the others with why they rank below it.
std::vector<PlanChoice> top_of(std::vector<PlanChoice> confirmed, std::size_t top,
                               const Loader& loader, bool per_token, PlanObjective objective) {
    std::sort(confirmed.begin(), confirmed.end(), [](const PlanChoice& x, const PlanChoice& y) {
        if (x.figures.objective != y.figures.objective)
            return x.figures.objective < y.figures.objective;
        return x.index < y.index;
    });
    if (confirmed.size() > top) confirmed.resize(top);
    for (std::size_t i = 0; i < confirmed.size(); ++i) {
        auto& c = confirmed[i];
        if (i == 0) {
            c.megatron_args = megatron_args_for(loader.load(c.layout, false), &c.notes);
        } else {
            c.why_lost = why_lost(c.figures, confirmed[0].figures, per_token, objective);
        }
    }
    return confirmed;
}

// --guide: the guide's layouts, simulated under the experiment's network on `worker` (the
// calling thread's) and placed among the top k.
void add_guide(PlanResult& result, const workload::ExperimentSpec& base, const Worker& worker,
               const Scorer& scorer, const PlanOptions& options, const Fixes& fixes, double limit,
               bool per_token) {
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
        if (g.reason = profile_mismatch(base, fixes, l); !g.reason.empty()) {
            result.guide.push_back(std::move(g));
            continue;
        }
        try {
            const auto spec = worker.loader.load(l, false);
            replay::PrepareOptions how;
            how.admit = [&options](const replay::PreparedIteration& it) {
                check_run_memory(it.spec, it.shape, options.max_memory);
            };
            const auto prepared = replay::prepare(spec, "", how);
            const double flops = prepared.plan.model_flops_per_iteration.value;
            const double tokens = static_cast<double>(prepared.plan.tokens_per_iteration);
            g.figures = figures_of(*simulate(spec, worker.cache.get(), options), scorer, flops,
                                   peak_flops(spec), tokens, l.gpus());
            g.rank = 1;
            for (const auto& c : result.top)
                if (c.figures.objective <= g.figures->objective) ++g.rank;
            if (!result.top.empty()) {
                g.versus = guide_versus(*g.figures, result.top.front().figures, per_token,
                                        scorer.objective);
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

// --json: every layout in enumeration order (the ranks' shares interleave), with the figures of
// those simulated and confirmed, and why the others were not.
PlanEntries entries_of(std::vector<PlanEntries::Record> records, Simulations& sims,
                       const PlanResult& result) {
    std::sort(records.begin(), records.end(),
              [](const auto& x, const auto& y) { return x.index < y.index; });
    std::map<std::size_t, double> bound_of;  // by index
    for (std::size_t k = 0; k < sims.bounded_in_order(); ++k)
        bound_of[sims.survivors[k].index] = sims.survivors[k].bound_s;
    for (auto& r : records) {
        if (const auto b = bound_of.find(r.index); b != bound_of.end()) r.lower_bound_s = b->second;
        if (std::binary_search(sims.left.begin(), sims.left.end(), r.index))
            r.status = PlanEntry::Status::LeftByLimit;
    }
    return PlanEntries(std::move(records), std::move(sims.analytical_of),
                       std::move(sims.confirmed_of), std::move(sims.stopped_of),
                       PlanEntries::Context{result.limit_bytes, result.hbm_bytes, sims.options.top,
                                            result.network});
}

}  // namespace

std::optional<PlanResult> plan(const PlanOptions& options, const SweepRanks& ranks) {
    const Fixes fixes = parse_fixes(options.fixes);
    plan_space::check_options(options);
    std::vector<Worker> workers = make_workers(options, fixes, ranks);
    const Loader& loader = workers[0].loader;
    // The experiment as given (with --set and the fixed keys): the GPU count, the model, the
    // batch. Its errors are the plan's.
    const auto base = loader.load(std::vector<std::string>{});
    const char* size = fixes.other("parallelism.cp_a2a_size");
    for (auto& w : workers)
        w.loader.group_size = base.layout.cp_a2a_size > 0 || size;
    // A group size goes with a2a+p2p (the loader's rule, checked here once: each layout applies
    // the --fix after its own cp, so the experiment as loaded above has not seen it).
    if (size) {
        const char* type = fixes.other("parallelism.cp_comm_type");
        if (type ? std::string_view(type) != "a2a+p2p"
                 : base.layout.cp_comm_type != workload::CpCommType::A2aP2p)
            throw ConfigError(SourceLocation{"--fix parallelism.cp_a2a_size=" + std::string(size)},
                              "'parallelism.cp_a2a_size': applies only with cp_comm_type: "
                              "a2a+p2p");
    }
    if (!base.faults.gpus.empty())
        throw ConfigError(base.faults.gpus.front().where,
                          "plan ranks layouts by the time of a whole iteration, which a GPU or "
                          "node failure ends (every layout would fail); remove faults.gpus "
                          "(link faults are kept), or see a failure's cost with clustersim run");
    check_profile_fixes(base, fixes, options.partial_recompute);
    const double board_power_w = board_power(options, base);
    const auto schedules = searched_schedules(options, fixes);
    const int per_node = base.cluster->gpu_count() / std::max(1, base.cluster->node_count());
    const auto node_counts = node_counts_of(options.gpus, per_node);
    const auto batches = batches_of(options, fixes);
    const auto counts = counts_of(
        [&](int nodes) { return loader.load({"topology.nodes=" + std::to_string(nodes)}); }, base,
        node_counts, batches, fixes);

    const auto& gpu = base.cluster->gpu_model(0);
    const double limit = static_cast<double>(gpu.hbm.value) * (1 - options.headroom);
    PlanResult result = result_header(options, base, node_counts, per_node, batches, limit);
    const bool per_token = batches.size() > 1;
    const Scorer scorer{options.objective, options.gpu_hour_price, board_power_w * base.goodput.pue,
                        per_token};

    // 1-3: load, prepare, memory, bound; under mpirun each rank its share, gathered by rank 0.
    const auto started = std::chrono::steady_clock::now();
    WorkerPool pool(workers.size());
    Search search = search_layouts(options, fixes, counts, schedules,
                                   SearchStep{options, scorer, gpu, limit}, workers, pool, ranks);
    if (!gather_shares(search, ranks)) return std::nullopt;
    result.layouts = search.layouts;
    result.invalid = search.invalid;
    result.pruned_memory = search.pruned_memory;
    result.invalid_reasons = std::move(search.invalid_reasons);
    if (search.layouts == 0) {
        // Only --fix bounds leave nothing to enumerate (every GPU count has tp = pp = cp = 1).
        std::string bounds;
        for (const auto& [key, value] : fixes.axes)
            bounds += (bounds.empty() ? "" : " ") + ("--fix " + key + "=" + value);
        throw ConfigError(SourceLocation{bounds},
                          "no layout is inside these bounds: tp x pp x cp x dp must make the " +
                              (result.gpu_counts.empty() ? std::to_string(result.gpus)
                                                         : std::string("searched")) +
                              " GPUs, each value one the search takes (a divisor of the GPUs "
                              "left, a vpp dividing the layers of a stage, a micro-batch size "
                              "dividing the global batch over dp)");
    }
    if (search.survivors.empty()) throw nothing_fits(result);
    result.seconds.search = seconds_since(started);

    // 4 and 5: simulate in the order of the bound, confirm in the order of the analytical score.
    const auto simulating = std::chrono::steady_clock::now();
    auto& survivors = search.survivors;
    std::sort(survivors.begin(), survivors.end(), [](const Survivor& x, const Survivor& y) {
        if (x.bound_score != y.bound_score) return x.bound_score < y.bound_score;
        return x.index < y.index;
    });
    Simulations sims(options, scorer, workers, pool, survivors,
                     base.network.fidelity == network::Fidelity::Analytical);
    result.confirm_limit = sims.limit_confirm;
    sims.run();
    result.faster_than_analytical = sims.faster_than_analytical;
    sims.count_contenders(result);
    result.seconds.simulate = seconds_since(simulating);
    for (const auto& w : workers) {
        result.seconds.load += w.spent.load;
        result.seconds.prepare += w.spent.prepare;
        result.seconds.bound += w.spent.bound;
        result.seconds.analytical += w.spent.analytical;
        result.seconds.confirm += w.spent.confirm;
    }
    result.simulated = sims.simulated.size();
    result.pruned_bound = survivors.size() - sims.simulated.size() - result.left_by_limit;
    result.confirmed = sims.confirm_runs;
    result.bounded = sims.bounded_in_order();

    // The ranking, the guide's layouts placed in it, and every layout looked at.
    result.top =
        top_of(std::move(sims.confirmed), options.top, loader, per_token, options.objective);
    if (options.guide)
        add_guide(result, base, workers[0], scorer, options, fixes, limit, per_token);
    if (options.keep_entries) result.entries = entries_of(std::move(search.entries), sims, result);
    return result;
}

}  // namespace cs::api
