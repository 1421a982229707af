#include "session/run.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <utility>

#include "config/document.hpp"
#include "replay/durations/variability.hpp"
#include "replay/prepare.hpp"
#include "replay/replay.hpp"
#include "report/critical_path.hpp"
#include "schedule/schedule.hpp"
#include "session/sweep_cache.hpp"
#include "workload/plan.hpp"

namespace cs::api {

namespace {

// One warning for all the stages whose memory is above the GPU's HBM: the stages (runs of
// consecutive ones as ranges), the range of their needs, and the worst stage (the first of the
// largest need) when they differ. The per-stage figures are in the summary's memory.
void warn_memory(const workload::ExperimentSpec& spec, const workload::IterationPlan& plan,
                 int devices, std::vector<std::string>& warnings) {
    const auto& gpu = spec.cluster->gpu_model(0);
    if (gpu.hbm.value <= 0) return;
    std::vector<int> over;
    for (int s = 0; s < devices; ++s)
        if (plan.devices[static_cast<std::size_t>(s)].memory.total > gpu.hbm) over.push_back(s);
    if (over.empty()) return;
    const auto need = [&](int s) { return plan.devices[static_cast<std::size_t>(s)].memory.total; };
    std::string stages;
    for (std::size_t i = 0; i < over.size();) {
        std::size_t j = i;
        while (j + 1 < over.size() && over[j + 1] == over[j] + 1)
            ++j;
        stages += (i == 0 ? "" : ", ") + std::to_string(over[i]) +
                  (j > i ? "-" + std::to_string(over[j]) : std::string());
        i = j + 1;
    }
    int low = over.front(), worst = over.front();
    for (int s : over) {
        if (need(s) < need(low)) low = s;
        if (need(s) > need(worst)) worst = s;
    }
    const bool one = over.size() == 1;
    const bool same = need(low) == need(worst);
    // "81.6-115.7 GB": both ends in the larger's unit, each as format_bytes writes a number.
    std::string needs = format_bytes(need(worst));
    if (!same) {
        static const std::pair<double, const char*> kUnits[] = {
            {1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "KB"}, {1, "B"}};
        const double high = static_cast<double>(need(worst).value);
        std::size_t u = 0;
        while (u + 1 < std::size(kUnits) && high < kUnits[u].first)
            ++u;
        char text[64];
        std::snprintf(text, sizeof text, "%.4g-%.4g %s",
                      static_cast<double>(need(low).value) / kUnits[u].first,
                      high / kUnits[u].first, kUnits[u].second);
        needs = text;
    }
    warnings.push_back((one ? "stage " : "stages ") + stages + (one ? " needs " : " need ") +
                       needs + " per GPU under " + spec.schedule + ", more than the " +
                       format_bytes(gpu.hbm) + " of HBM of a " + gpu.name +
                       (same ? std::string() : "; the worst: stage " + std::to_string(worst)));
}

// The heat map's rows: the busiest links, as the summary ranks them.
constexpr std::size_t kReportLinks = 32;

// A trace holds a slice per step of every pass on every traced GPU: a million microbatches make a
// file of several GB. Said before the run, with the way to make it smaller.
void warn_trace_size(const workload::ExperimentSpec& spec, const workload::IterationPlan& plan,
                     const RunOptions& options, std::vector<std::string>& warnings) {
    // Bytes per step counted below, fitted to the measured traces of docs/limits.md (within a
    // factor of three: steps of a layer share slices, collectives add some): a rough figure.
    const bool json = options.trace->extension() == ".json";
    const double per_slice = json ? 64 : 24;
    double slices_per_microbatch = 0;  // summed over the virtual stages, per GPU running them
    for (const auto& vs : plan.virtual_stages) {
        slices_per_microbatch += 2;  // the passes
        for (const auto* pass : {&vs.forward, &vs.backward})
            for (const auto& step : pass->steps)
                slices_per_microbatch += step.repeat;
    }
    const double gpus = spec.cluster->gpu_count();
    const double traced = options.trace_options.ranks.empty()
                              ? 1.0
                              : static_cast<double>(options.trace_options.ranks.size()) / gpus;
    const double bytes =
        slices_per_microbatch * plan.microbatches * (gpus / spec.layout.pp) * traced * per_slice;
    constexpr double kWarnAbove = 1e9;
    if (bytes <= kWarnAbove) return;
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", bytes / 1e9);
    warnings.push_back("the trace " + options.trace->string() + " will be about " + text +
                       " GB; --trace-ranks keeps only some GPUs (e.g. one per pipeline stage)");
    if (options.warn_now) options.warn_now(warnings.back());
}

// Counts the passes that complete (a failed GPU's job reports how far it got).
struct PassCounter final : replay::ReplayObserver {
    std::int64_t passes = 0;
    void on_pass(const replay::PassRecord&) override { ++passes; }
};

// The cluster of `spec` with its link faults from the start (`at` 0) applied; the topology's own
// cluster when there are none.
std::shared_ptr<const topology::Cluster> faulted_at_start(const workload::ExperimentSpec& spec) {
    std::vector<topology::LinkId> failed;
    std::vector<std::pair<topology::LinkId, Bandwidth>> degraded;
    for (const auto& f : spec.faults.links) {
        if (f.at > Time::zero()) continue;
        for (topology::LinkId l : f.links) {
            if (f.fraction > 0)
                degraded.emplace_back(
                    l, Bandwidth{spec.cluster->links()[l].bandwidth.bytes_per_s * f.fraction});
            else
                failed.push_back(l);
        }
    }
    if (failed.empty() && degraded.empty()) return spec.cluster;
    return std::make_shared<const topology::Cluster>(spec.cluster->with_faults(failed, degraded));
}

// Link faults from a time on: capacities for degraded links, and for failed ones the routes of a
// cluster without every link failed by then (kept in `routings`, which must outlive the replay).
void schedule_link_faults(const workload::ExperimentSpec& experiment,
                          const topology::Cluster& start, replay::Replay& replay,
                          std::vector<std::unique_ptr<topology::Cluster>>& routings) {
    std::vector<Time> times;
    for (const auto& f : experiment.faults.links) {
        if (f.at == Time::zero()) continue;
        if (f.fraction > 0) {
            for (topology::LinkId l : f.links)
                replay.network().schedule_link_capacity(
                    f.at, l,
                    Bandwidth{experiment.cluster->links()[l].bandwidth.bytes_per_s * f.fraction});
        } else {
            times.push_back(f.at);
        }
    }
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    for (Time t : times) {
        std::vector<topology::LinkId> failed;
        for (const auto& f : experiment.faults.links)
            if (f.fraction == 0 && f.at <= t)
                failed.insert(failed.end(), f.links.begin(), f.links.end());
        routings.push_back(std::make_unique<topology::Cluster>(start.with_faults(failed, {})));
        replay.network().schedule_routing(t, *routings.back());
    }
}

// The message for a route that failed links cut: the links, the two GPUs, and every GPU the
// source can no longer reach once all the failed links are down.
ConfigError no_path_error(const workload::ExperimentSpec& spec, const NoPathError& e) {
    std::vector<topology::LinkId> failed;
    std::string names;
    SourceLocation where{spec.source};
    for (const auto& f : spec.faults.links) {
        if (f.fraction > 0) continue;
        if (failed.empty()) where = f.where;
        failed.insert(failed.end(), f.links.begin(), f.links.end());
        names += (names.empty() ? "" : ", ") + f.name +
                 (f.at > Time::zero() ? " (from " + format_time(f.at) + ")" : "");
    }
    const topology::Cluster cut = spec.cluster->with_faults(failed, {});
    std::vector<int> unreachable;
    std::vector<topology::LinkId> path;
    for (int g = 0; g < cut.gpu_count(); ++g) {
        if (g == e.src()) continue;
        path.clear();
        try {
            cut.route(e.src(), g, 0, path);
        } catch (const NoPathError&) {
            unreachable.push_back(g);
        }
    }
    return ConfigError(where, "with the failed link" + std::string(failed.size() > 2 ? "s " : " ") +
                                  names + " no path remains from GPU " + std::to_string(e.src()) +
                                  " to GPU " + std::to_string(e.dst()) +
                                  ", which this run sends data between; cut off from GPU " +
                                  std::to_string(e.src()) + ": GPU" +
                                  (unreachable.size() > 1 ? "s " : " ") +
                                  workload::gpu_list_text(unreachable) +
                                  " (the run stops: no fabric is left to re-route over)");
}

}  // namespace

ConfigError unreachable_gpu_error(const NoPathError& e, const SourceLocation& where,
                                  const std::string& between) {
    return ConfigError(where, "GPU " + std::to_string(e.src()) + " cannot reach GPU " +
                                  std::to_string(e.dst()) + between +
                                  " without passing through another GPU; routes never transit a "
                                  "GPU (link them directly or through a switch or NIC)");
}

double estimate_run_bytes(const workload::ExperimentSpec& spec, int chunks, bool detail) {
    // Measured (Release, docs/limits.md): the default experiment at 16,384 GPUs peaks at 160 MiB,
    // about 10 KiB per GPU with its cluster; a pipeline of two workers grows by about 150 bytes
    // per microbatch and worker. Both rounded up to leave room.
    constexpr double kBase = 32 << 20, kPerGpu = 16 << 10, kPerPass = 128;
    const auto& l = spec.layout;
    const double workers = static_cast<double>(l.pp) * l.dp;
    const double passes = workers * spec.training.microbatches(l) * chunks * 3;
    // A cluster copy per distinct failure time (schedule_link_faults): its devices and directed
    // links at the topology estimate's per-object costs (docs/robustness.md).
    std::vector<Time> times;
    for (const auto& f : spec.faults.links)
        if (f.fraction == 0 && f.at > Time::zero()) times.push_back(f.at);
    std::sort(times.begin(), times.end());
    const auto copies =
        static_cast<double>(std::unique(times.begin(), times.end()) - times.begin());
    const double cluster_bytes = 512.0 * static_cast<double>(spec.cluster->devices().size()) +
                                 320.0 * static_cast<double>(spec.cluster->links().size());
    // Sharded gradients and parameters (ZeRO-2/3, FSDP) run passes unit by unit: each layer's
    // gradient shard is reduced per microbatch (ZeRO-3 also gathers its parameters in the forward
    // and the backward), a message kept for the whole run each. Measured 137 bytes (ZeRO-2) and
    // 163 (ZeRO-3) per layer, microbatch, sharding group and message at dp 2 (8 and 16 layers,
    // 65,536 to 1,048,576 microbatches), rounded up.
    constexpr double kPerUnitMessage = 256;
    double unit_messages = 0;
    if (const auto mode = replay::DataParallelMode::of(l); mode.sharded_units)
        unit_messages = static_cast<double>(spec.model.layers) *
                        static_cast<double>(spec.training.microbatches(l)) *
                        (l.dp / mode.shard_size) *
                        (l.sharding == workload::Sharding::Parameters ? 3 : 1);
    // Each MoE layer's dispatch and combine: an all-to-all over ep GPUs.
    const double ep = spec.model.experts > 0 ? l.ep : 1;
    // The HTML report's detail (replica 0's timeline, link use and memory over time) grows with
    // the passes: measured about 710 bytes a pass (two-GPU pipeline, 100,000 microbatches:
    // 962 MB with --html, 108 MB without), rounded up.
    constexpr double kDetailPerPass = 1024;
    return kBase + kPerGpu * spec.cluster->gpu_count() + kPerPass * passes +
           kPerUnitMessage * unit_messages + copies * cluster_bytes + all_to_all_bytes(ep) +
           (detail ? kDetailPerPass * passes : 0);
}

double all_to_all_bytes(double ranks) {
    constexpr double kPerFlow = 256;
    return kPerFlow * ranks * (ranks - 1);
}

std::string above_peak_reason() {
    return "the compute times are faster than the GPU's peak, as times given for another shape "
           "are (compute.model: profile charges the times given whatever the layout, so they hold "
           "only for the micro-batch size, tp, cp and sequence length they were measured at)";
}

void check_run_memory(const workload::ExperimentSpec& spec, const schedule::PipelineShape& shape,
                      std::int64_t max_memory, bool detail) {
    const double need = estimate_run_bytes(spec, shape.chunks, detail);
    if (need <= static_cast<double>(max_memory)) return;
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", need / 1e9);
    throw ConfigError(spec.layout_where,
                      std::string("this run would need about ") + text + " GB of memory (" +
                          std::to_string(spec.cluster->gpu_count()) + " GPUs, " +
                          std::to_string(shape.microbatches) +
                          " microbatches per replica), more than the limit of " +
                          format_bytes(Bytes{max_memory}) +
                          "; use fewer microbatches or GPUs, or raise the limit with "
                          "--max-memory");
}

namespace {

// The iteration time of `experiment` with `strip` applied (its variability or faults removed),
// run first as a baseline (which makes no clean runs of its own): what a variability or fault
// run's cost is against.
template <typename Strip>
double baseline_time(const workload::ExperimentSpec& experiment, const RunOptions& options,
                     Strip strip) {
    workload::ExperimentSpec clean = experiment;
    strip(clean);
    RunOptions plain;
    plain.schedule = options.schedule;
    plain.baseline = true;
    plain.fast_paths = options.fast_paths;
    return run(clean, plain).summary.iteration_time_s;
}

// The iteration prepared on the cluster with its link faults from the start: routes, blocking
// collectives' costs and the network all see them.
replay::PreparedIteration prepare_run(const workload::ExperimentSpec& experiment,
                                      const RunOptions& options) {
    workload::ExperimentSpec faulted = experiment;
    faulted.cluster = faulted_at_start(experiment);
    replay::PrepareOptions how;
    // The plan is small (a few passes per model chunk, at most one chunk per layer); what grows
    // with the microbatches and GPUs is checked before it is built.
    how.admit = [&options](const replay::PreparedIteration& it) {
        check_run_memory(it.spec, it.shape, options.max_memory, options.detail);
    };
    return replay::prepare(std::move(faulted), options.schedule, how);
}

// Attaches what accounts for the links: the sweep's sketch or accounting of the cluster
// (SweepCache::links, `kept`), else an accounting of the run's own (`own`). Returns the
// accounting the summary lists the links of, if any.
report::LinkAccounting* observe_links(replay::Replay& replay, SweepCache::Cluster* kept,
                                      SweepCache::Links mode, std::size_t links,
                                      std::optional<report::LinkAccounting>& own) {
    if (mode == SweepCache::Links::Sketched) {
        kept->sketched().reset();
        replay.add_network_observer(*kept->sketch);
        return nullptr;
    }
    // None: nothing observes the network, its transfers' costs are reused as they are.
    if (mode == SweepCache::Links::None) return nullptr;
    report::LinkAccounting* seen = kept ? &kept->accounted() : &own.emplace(links);
    seen->reset();
    replay.add_network_observer(*seen);
    return seen;
}

// The trace writer of RunOptions::trace, watching the replay and its network.
std::unique_ptr<report::TraceWriter> attach_trace(replay::Replay& replay,
                                                  const replay::PreparedIteration& prepared,
                                                  const RunOptions& options) {
    auto trace = std::make_unique<report::TraceWriter>(
        *options.trace, report::TraceContext::of(prepared.spec, prepared.plan, replay),
        options.trace_options);
    replay.add_observer(*trace);
    replay.add_network_observer(*trace);
    // A trace draws every pass's dependency arrows by pass id: each replica's own passes.
    replay.refuse_replica_fold("a trace is written (it needs every replica's own passes)");
    return trace;
}

// Variability: the GPUs' durations drawn from it (where it names GPUs), and the critical path
// recorded to say which worker set the iteration time.
std::unique_ptr<report::CriticalPath> attach_variability(replay::Replay& replay,
                                                         const workload::ExperimentSpec& spec) {
    if (!spec.variability.gpus.empty())
        replay.set_duration_model(
            replay::make_variability(spec.variability, spec.cluster->gpu_count()));
    auto critical = std::make_unique<report::CriticalPath>(replay.workers().size());
    replay.add_observer(*critical);
    return critical;
}

// The run's summary with its goodput; `listed`: the links' accounting it lists, if any.
report::Summary summarize_run(const replay::PreparedIteration& prepared,
                              const replay::Replay& replay, const report::MetricsObserver& metrics,
                              const replay::ReplayResult& result,
                              const report::LinkAccounting* listed) {
    report::SummaryInputs in;
    in.spec = &prepared.spec;
    in.plan = &prepared.plan;
    in.replay = &replay;
    in.metrics = &metrics;
    in.result = result;
    in.schedule = prepared.spec.schedule;
    in.peak_inflight = prepared.peak_inflight;
    in.links = listed;
    report::Summary summary = report::summarize(in);
    report::add_goodput(summary, prepared.spec);
    return summary;
}

// The HTML report's recorders (RunOptions::detail): the passes' timeline and tracks, memory over
// time and the links' load over time.
struct DetailRecorders {
    std::unique_ptr<report::TimelineRecorder> timeline;
    std::unique_ptr<report::LinkTimeline> link_timeline;
    std::unique_ptr<report::MemoryTimeline> memory_timeline;
    std::unique_ptr<report::TrackRecorder> tracks;

    void attach(replay::Replay& replay, const workload::IterationPlan& plan, std::size_t links) {
        timeline = std::make_unique<report::TimelineRecorder>(replay);
        replay.add_observer(*timeline);
        tracks = std::make_unique<report::TrackRecorder>(replay);
        replay.add_observer(*tracks);
        memory_timeline = std::make_unique<report::MemoryTimeline>(replay, plan);
        replay.add_observer(*memory_timeline);
        link_timeline = std::make_unique<report::LinkTimeline>(links);
        replay.add_network_observer(*link_timeline);
    }

    // The detail of the run that ended at `end`, summarised as `summary`; `listed`: the links'
    // accounting the summary lists, if any.
    report::RunDetail finish(const replay::PreparedIteration& prepared,
                             const report::Summary& summary, Time end,
                             const report::LinkAccounting* listed) {
        const auto& spec = prepared.spec;
        report::RunDetail d;
        d.timeline = {spec.schedule, timeline->rows(),        prepared.shape.chunks,
                      end,           summary.bubble_fraction, timeline->blocks()};
        link_timeline->finish(end);
        d.bin_width = link_timeline->bin_width();
        d.tracks = tracks->blocks();
        d.links = report::busiest_links(*link_timeline, *spec.cluster, end, kReportLinks,
                                        &d.links_total, listed, &d.link_kinds);
        d.hbm_bytes = spec.cluster->gpu_model(0).hbm.value;  // as warn_memory compares
        for (int s = 0; s < prepared.shape.devices; ++s)
            d.stage_memory.push_back(prepared.plan.devices[static_cast<std::size_t>(s)].memory);
        d.memory_steps = memory_timeline->steps();
        return d;
    }
};

// The summary's faults block: the link faults, and either the failed GPUs' stop (what failed,
// where, how far the iteration got; it trained nothing) or, when they failed after the
// iteration ended, a warning that it is unaffected.
void summarize_faults(RunResult& out, const replay::PreparedIteration& prepared,
                      const replay::Replay& replay, const replay::ReplayResult& result,
                      std::optional<Time> gpu_failure, std::int64_t passes_done,
                      double unfaulted_time_s) {
    const auto& spec = prepared.spec;
    auto& f = out.summary.faults;
    f.present = true;
    f.clean_iteration_time_s = unfaulted_time_s;
    for (const auto& l : spec.faults.links)
        f.links.push_back({l.name, l.fraction, l.at.seconds()});
    if (!result.stopped) {
        f.cost_s = out.summary.iteration_time_s - unfaulted_time_s;
        for (const auto& g : spec.faults.gpus)
            out.warnings.push_back(
                g.what + " fails at " + format_time(g.at) + ", after the iteration ended (" +
                format_time(result.iteration_time) + "): the iteration is unaffected");
        return;
    }
    f.job_failed = true;
    f.failed_at_s = gpu_failure->seconds();
    for (const auto& g : spec.faults.gpus) {
        if (g.at != *gpu_failure) continue;
        f.failed_what += (f.failed_what.empty() ? "" : "; ") + g.what;
        f.failed_gpus.insert(f.failed_gpus.end(), g.gpus.begin(), g.gpus.end());
    }
    std::sort(f.failed_gpus.begin(), f.failed_gpus.end());
    f.failed_gpus.erase(std::unique(f.failed_gpus.begin(), f.failed_gpus.end()),
                        f.failed_gpus.end());
    const auto& workers = replay.workers();
    for (std::size_t w = 0; w < workers.size(); ++w)
        for (int g : workers[w].gpus)
            if (std::binary_search(f.failed_gpus.begin(), f.failed_gpus.end(), g)) {
                f.failed_workers.push_back(static_cast<int>(w));
                f.failed_stages.push_back(workers[w].stage);
                f.failed_replicas.push_back(workers[w].dp);
                break;
            }
    f.passes_done = passes_done;
    f.passes_total = prepared.passes();
    f.lost_gpu_s = f.failed_at_s * spec.cluster->gpu_count();
    // The iteration trained nothing: no optimizer step ran.
    out.summary.mfu = out.summary.hfu = 0;
    out.summary.tokens_per_s = out.summary.tflops_per_gpu = 0;
}

// The summary's variability block: the cost against the clean run, and the critical path's
// worker with the slowest of its GPUs.
void summarize_variability(report::Summary& summary, const workload::ExperimentSpec& spec,
                           const replay::Replay& replay, const report::CriticalPath& critical,
                           double clean_time_s) {
    auto& v = summary.variability;
    v.present = true;
    v.clean_iteration_time_s = clean_time_s;
    v.cost_s = summary.iteration_time_s - clean_time_s;
    const auto path = critical.result();
    if (path.worker < 0) return;
    const auto& w = replay.workers()[static_cast<std::size_t>(path.worker)];
    v.critical_worker = path.worker;
    v.critical_stage = w.stage;
    v.critical_dp = w.dp;
    v.critical_gpus = w.gpus;
    v.critical_share = path.passes > Time::zero()
                           ? path.per_worker[static_cast<std::size_t>(path.worker)].seconds() /
                                 path.passes.seconds()
                           : 0.0;
    for (int g : w.gpus) {
        const double f = replay::fixed_slowdown(spec.variability, g);
        if (v.slowest_gpu < 0 || f > v.slowest_factor) {
            v.slowest_gpu = g;
            v.slowest_factor = f;
        }
    }
}

RunResult run_unchecked(const workload::ExperimentSpec& experiment, const RunOptions& options,
                        SweepCache* cache) {
    const auto wall_start = std::chrono::steady_clock::now();
    RunResult out;
    double clean_time_s = 0;
    if (experiment.variability.any() && !options.baseline)
        clean_time_s = baseline_time(experiment, options,
                                     [](workload::ExperimentSpec& e) { e.variability = {}; });
    double unfaulted_time_s = 0;
    if (experiment.faults.any() && !options.baseline)
        unfaulted_time_s =
            baseline_time(experiment, options, [](workload::ExperimentSpec& e) { e.faults = {}; });
    const replay::PreparedIteration prepared = prepare_run(experiment, options);
    const auto& spec = prepared.spec;  // names the schedule actually run, for messages
    const auto& plan = prepared.plan;
    out.warnings = prepared.warnings;
    if (options.on_prepared) options.on_prepared(prepared);
    if (options.trace) warn_trace_size(spec, plan, options, out.warnings);
    warn_memory(spec, plan, prepared.shape.devices, out.warnings);

    // What the sweep keeps for this run's cluster (its experiment's: link faults from the start
    // run on another, for which nothing is kept).
    if (!options.fast_paths) cache = nullptr;
    SweepCache::Cluster* kept = cache ? &cache->of(experiment.cluster) : nullptr;
    if (kept && kept->cluster != spec.cluster) kept = nullptr;
    replay::FastPaths fast;
    fast.enabled = options.fast_paths;
    fast.scratch = cache ? &cache->replay : nullptr;
    fast.network = kept ? &kept->network : nullptr;
    std::vector<std::unique_ptr<topology::Cluster>> routings;  // outlives the replay's network
    replay::Replay replay(spec, plan, *prepared.schedule, prepared.shape, nullptr, fast);
    schedule_link_faults(experiment, *spec.cluster, replay, routings);
    // A failed GPU or node: the job stops at the earliest failure (all GPUs failing then).
    std::optional<Time> gpu_failure;
    for (const auto& f : spec.faults.gpus)
        gpu_failure = gpu_failure ? std::min(*gpu_failure, f.at) : f.at;
    PassCounter passes;
    if (gpu_failure) {
        replay.stop_at(*gpu_failure);
        replay.add_observer(passes);
    }
    // The caller's stop, when it comes first (before a failure at the same instant: a stop at
    // t means only that the iteration did not end before t).
    if ((options.stop_at || options.stop_when) && (options.trace || options.detail))
        throw SimulationError("run", "a run stopped early writes no trace or report detail",
                              Time::zero());
    const bool own_stop = options.stop_at && (!gpu_failure || *options.stop_at <= *gpu_failure);
    // A moving stop beside a GPU failure only with a fixed stop before it: else it could end
    // the run after the failure, which is the failure's to report.
    const bool moving_stop = options.stop_when && (!gpu_failure || own_stop);
    if (own_stop) replay.stop_at(*options.stop_at);
    if (moving_stop) replay.stop_when(options.stop_when, options.stop_check_every);
    report::MetricsObserver metrics(replay.workers().size());
    replay.add_observer(metrics);
    const auto link_mode = kept ? cache->links : SweepCache::Links::Listed;
    std::optional<report::LinkAccounting> own_links;
    report::LinkAccounting* links_seen =
        observe_links(replay, kept, link_mode, spec.cluster->links().size(), own_links);
    std::unique_ptr<report::TraceWriter> trace;
    if (options.trace) trace = attach_trace(replay, prepared, options);
    std::unique_ptr<report::CriticalPath> critical;
    if (spec.variability.any()) critical = attach_variability(replay, spec);
    DetailRecorders detail;
    if (options.detail) detail.attach(replay, plan, spec.cluster->links().size());
    replay.set_fold(options.fold);
    if (options.attach) options.attach(replay);
    const replay::ReplayResult result = replay.run();
    out.solver = replay.network().solver_stats();
    if (result.stopped && (own_stop || moving_stop)) {
        out.stopped = true;
        return out;
    }

    // The links the summary lists: those of an accounting of every link.
    const report::LinkAccounting* listed =
        link_mode == SweepCache::Links::Listed ? links_seen : nullptr;
    out.summary = summarize_run(prepared, replay, metrics, result, listed);
    if (spec.faults.any())
        summarize_faults(out, prepared, replay, result, gpu_failure, passes.passes,
                         unfaulted_time_s);
    if (critical) summarize_variability(out.summary, spec, replay, *critical, clean_time_s);
    // Above the GPU's peak: only times given for another shape do that (a profile's layer times
    // at another micro-batch size, tp or sequence length, which it charges as given).
    if (out.summary.mfu > 1) {
        char mfu[32];
        std::snprintf(mfu, sizeof mfu, "%.1f%%", 100 * out.summary.mfu);
        out.warnings.push_back("MFU " + std::string(mfu) +
                               " is above 100%: " + above_peak_reason());
    }
    if (trace) {
        // A job that failed ends where it failed: what ran until then is the trace (the
        // replay, stopped there, ended no iteration).
        if (result.stopped) trace->on_iteration_end(result.iteration_time);
        trace->finish(report::trace_summary(out.summary));
    }
    if (options.detail)
        out.detail = detail.finish(prepared, out.summary, result.iteration_time, listed);
    out.summary.wall_time_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    return out;
}

}  // namespace

RunResult run(const workload::ExperimentSpec& experiment, const RunOptions& options,
              SweepCache* cache) {
    try {
        return run_unchecked(experiment, options, cache);
    } catch (const NoPathError& e) {
        if (!std::any_of(experiment.faults.links.begin(), experiment.faults.links.end(),
                         [](const workload::LinkFault& f) { return f.fraction == 0; }))
            throw unreachable_gpu_error(e, SourceLocation{experiment.topology_source},
                                        ", which this run sends data between,");
        throw no_path_error(experiment, e);
    } catch (const ClockOverflow& e) {
        // Every time in a run is derived from the input's sizes, rates and durations, so a time
        // beyond the clock is an input out of range, not a bug.
        throw ConfigError(SourceLocation{experiment.source},
                          "a time in this run is longer than the simulator's clock can hold "
                          "(2^63 ps, about 106 days): " +
                              std::string(e.what()) +
                              "; check durations, sizes and rates (seq_length, layers, "
                              "efficiency_scale, host and launch overheads, bandwidths)");
    }
}

}  // namespace cs::api
