#include "cli/simulate.hpp"

#include <spdlog/spdlog.h>
#include <chrono>

#include "config/document.hpp"
#include "report/trace_writer.hpp"
#include "schedule/schedule.hpp"
#include "workload/plan.hpp"

namespace cs::cli {

report::Summary simulate(const workload::ExperimentSpec& experiment,
                         const SimulateOptions& options) {
    const auto wall_start = std::chrono::steady_clock::now();
    const std::string name = options.schedule.empty() ? experiment.schedule : options.schedule;
    // The copy names the schedule actually run, so that messages about it say so.
    workload::ExperimentSpec spec = experiment;
    spec.schedule = name;
    auto sched = schedule::require_schedule(name, spec.schedule_where);
    const int chunks = sched->chunks_for(spec.layout.vpp);
    if (spec.layout.vpp > 1 && chunks == 1)
        spdlog::warn("schedule {} has no virtual stages: vpp = {} is ignored", name,
                     spec.layout.vpp);
    schedule::PipelineShape shape{spec.layout.pp, spec.training.microbatches(spec.layout), chunks};
    if (auto problem = sched->check(shape); !problem.empty())
        throw ConfigError(spec.schedule_where, "schedule '" + name + "': " + problem);

    const auto device_of = [&](int vs) { return sched->place(shape, vs, 0).device; };
    workload::IterationPlan plan =
        workload::plan_iteration(spec, chunks, sched->splits_backward(), device_of);
    std::vector<int> peak_inflight;
    for (int s = 0; s < shape.devices; ++s)
        peak_inflight.push_back(schedule::peak_inflight_microbatches(*sched, shape, s));
    workload::fill_memory(spec, plan, peak_inflight, device_of);
    const auto& gpu = spec.cluster->gpu_model(0);
    // One warning per run of consecutive stages that need the same (too large) memory.
    for (int s = 0; s < shape.devices;) {
        const auto need = plan.devices[static_cast<std::size_t>(s)].memory.total;
        int end = s + 1;
        while (end < shape.devices &&
               plan.devices[static_cast<std::size_t>(end)].memory.total == need)
            ++end;
        if (gpu.hbm.value > 0 && need > gpu.hbm) {
            const std::string stages =
                end - s == 1 ? "stage " + std::to_string(s)
                             : "stages " + std::to_string(s) + "-" + std::to_string(end - 1);
            spdlog::warn("{} need{} {} per GPU under {}, more than the {} of HBM of a {}", stages,
                         end - s == 1 ? "s" : "", format_bytes(need), name, format_bytes(gpu.hbm),
                         gpu.name);
        }
        s = end;
    }

    replay::Replay replay(spec, plan, *sched, shape);
    report::MetricsObserver metrics(replay.workers().size());
    replay.add_observer(metrics);
    std::unique_ptr<report::TraceWriter> trace;
    if (options.trace) {
        trace = std::make_unique<report::TraceWriter>(
            *options.trace, report::TraceContext::of(spec, plan, replay), options.trace_options);
        replay.add_observer(*trace);
        replay.add_network_observer(*trace);
    }
    if (options.attach) options.attach(replay);
    const replay::ReplayResult result = replay.run();

    report::SummaryInputs in;
    in.spec = &spec;
    in.plan = &plan;
    in.replay = &replay;
    in.metrics = &metrics;
    in.result = result;
    in.schedule = name;
    in.peak_inflight = peak_inflight;
    report::Summary summary = report::summarize(in);
    if (trace) {
        auto meta = report::to_json(summary);
        meta.erase("wall_time_s");
        meta.erase("links");
        trace->finish(meta);
    }
    summary.wall_time_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    return summary;
}

}  // namespace cs::cli
