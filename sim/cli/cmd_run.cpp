// clustersim run [EXPERIMENT.yaml] [--set key=value]... [--json FILE] [--trace FILE]
#include <spdlog/spdlog.h>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "cli/commands.hpp"
#include "cli/log.hpp"
#include "cli/tables.hpp"
#include "cli/text.hpp"
#include "config/document.hpp"
#include "core/atomic_file.hpp"
#include "ingest/inputs.hpp"
#include "report/summary_writers.hpp"
#include "report/trace_sink.hpp"
#include "schedule/schedule.hpp"
#include "session/jobs.hpp"
#include "session/report.hpp"
#include "session/run.hpp"

namespace cs::cli {

namespace {

// Counts the passes of a run for the terminal's progress line: every worker runs each microbatch
// forward and backward (backward input and weight passes when the schedule splits it) per chunk.
class PassProgress final : public replay::ReplayObserver {
  public:
    PassProgress(Progress& progress, std::size_t total) : progress_(progress), total_(total) {}
    void on_pass(const replay::PassRecord& pass) override {
        progress_.update(++done_, total_, "passes, simulated " + format_time(pass.end));
    }

  private:
    Progress& progress_;
    std::size_t total_;
    std::size_t done_ = 0;
};

struct RunArgs {
    std::string experiment;
    std::vector<std::string> sets;
    std::string megatron_args;
    std::string json;
    std::vector<std::string> summaries;
    std::string trace;
    std::string trace_ranks;
    std::string trace_links = "auto";
    std::string schedule;
    std::string html;
    std::string max_memory;
    bool no_fold = false;
    bool no_fast_paths = false;
};

// A jobs file (`jobs:`, docs/what-if.md): every job alone and all together on one fabric.
void run_jobs(const RunArgs& a, const std::optional<workload::ExperimentText>& streamed) {
    const auto refuse = [](bool given, const char* option) {
        if (given)
            throw ConfigError(
                std::string(option) +
                " does not apply to a jobs file: each job's experiment holds its "
                "own settings (edit them there); --json, --trace, --trace-links none, "
                "--max-memory, --no-fold and --no-fast-paths are accepted");
    };
    // The jobs file is read first, so that its own errors come before those about options.
    const std::int64_t max_memory = api::parse_max_memory(a.max_memory);
    const auto spec =
        streamed ? api::load_jobs(*streamed, max_memory) : api::load_jobs(a.experiment, max_memory);
    refuse(!a.sets.empty(), "--set");
    refuse(!a.megatron_args.empty(), "--megatron-args");
    refuse(!a.schedule.empty(), "--schedule");
    refuse(!a.summaries.empty(), "--summary");
    refuse(!a.trace_ranks.empty(), "--trace-ranks");
    refuse(!a.html.empty(), "--html");
    if (a.trace_links != "auto" && a.trace_links != "none")
        throw ConfigError("--trace-links " + a.trace_links +
                          " does not apply to a jobs file: its trace has no link counters");
    OutputSet outputs;
    outputs.declare("--json", a.json);
    outputs.declare("--trace", a.trace);
    outputs.guard_input("the jobs file", a.experiment);
    for (const auto& job : spec.jobs)
        api::guard_experiment_inputs(outputs, job.experiment);
    for (const auto& job : spec.jobs)
        for (const auto& w : job.experiment.warnings)
            spdlog::warn("job '{}': {}", job.name, w);
    api::JobsOptions options;
    if (!a.trace.empty()) options.trace = a.trace;
    options.outputs = &outputs;
    options.max_memory = max_memory;
    options.fast_paths = !a.no_fast_paths;
    const auto result = api::run_jobs(spec, options);
    for (const auto& w : result.warnings)
        spdlog::warn("{}", w);
    if (!a.json.empty())
        write_file_atomically(
            a.json, [&](std::ostream& out) { out << json_text(api::to_json(result)); }, &outputs);
    outputs.commit();
    print_jobs(std::cout, spec, result);
    if (!a.trace.empty())
        std::cout << "\ntrace written to " << a.trace
                  << " (one process per job; open it in ui.perfetto.dev)\n";
}

// The run's options from the command line's (the trace's among them). Warnings known before the
// run (a trace of many GB) are printed at once and kept in `said`, so that they are not printed
// again with the run's warnings.
api::RunOptions run_options(const RunArgs& a, std::int64_t max_memory, OutputSet& outputs,
                            std::set<std::string>& said) {
    api::RunOptions opt;
    opt.schedule = a.schedule;
    opt.max_memory = max_memory;
    opt.fold = !a.no_fold;
    opt.fast_paths = !a.no_fast_paths;
    opt.warn_now = [&said](const std::string& w) {
        spdlog::warn("{}", w);
        said.insert(w);
    };
    if (!a.trace.empty()) opt.trace = a.trace;
    if (!a.trace_ranks.empty())
        opt.trace_options.ranks = api::parse_rank_list(a.trace_ranks, "--trace-ranks");
    opt.trace_options.links = *report::trace_links_from_name(a.trace_links);
    opt.trace_options.outputs = &outputs;
    opt.detail = !a.html.empty();
    return opt;
}

// --json, --summary (each with its writer) and --html, all committed together.
void write_run_files(const RunArgs& a, const workload::ExperimentSpec& spec,
                     const api::RunResult& result,
                     const std::vector<const report::SummaryWriterEntry*>& writers,
                     OutputSet& outputs) {
    if (!a.json.empty())
        report::write_summary_file(a.json, result.summary, report::summary_writer("json"),
                                   &outputs);
    for (std::size_t i = 0; i < writers.size(); ++i)
        report::write_summary_file(a.summaries[i], result.summary, *writers[i], &outputs);
    if (!a.html.empty()) {
        report::HtmlReport page;
        page.title = "clustersim run";
        page.experiment = spec.source;
        page.runs = {result.summary};
        page.details = {*result.detail};
        page.warnings = spec.warnings;
        page.warnings.insert(page.warnings.end(), result.warnings.begin(), result.warnings.end());
        page.validation = api::validation_confidence(spec);
        api::write_html(a.html, page, &outputs);
    }
    outputs.commit();
}

void run(const RunArgs& a) {
    // A stream (a FIFO, `run <(cat jobs.yaml)`) is read once, here: its text tells a jobs file
    // from an experiment and goes to that loader.
    const auto streamed = api::read_streamed_input(a.experiment);
    if (streamed ? api::is_jobs_text(*streamed)
                 : !a.experiment.empty() && api::is_jobs_file(a.experiment)) {
        run_jobs(a, streamed);
        return;
    }
    // Options that shape a trace do nothing without one: refused rather than ignored.
    if (a.trace.empty() && !a.trace_ranks.empty())
        throw ConfigError(SourceLocation{"--trace-ranks " + a.trace_ranks},
                          "chooses the GPUs of a trace, and no --trace FILE is given");
    if (a.trace.empty() && a.trace_links != "auto")
        throw ConfigError(SourceLocation{"--trace-links " + a.trace_links},
                          "chooses the link counters of a trace, and no --trace FILE is given");
    // Unknown summary formats and unusable output paths are reported before anything runs.
    std::vector<const report::SummaryWriterEntry*> writers;
    for (const auto& file : a.summaries)
        writers.push_back(&report::summary_writer_for(file));
    OutputSet outputs;
    outputs.declare("--json", a.json);
    for (const auto& file : a.summaries)
        outputs.declare("--summary", file);
    outputs.declare("--trace", a.trace);
    outputs.declare("--html", a.html);
    const std::int64_t max_memory = api::parse_max_memory(a.max_memory);
    auto spec = api::load_experiment({a.experiment, a.sets, a.megatron_args, max_memory, streamed});
    api::guard_experiment_inputs(outputs, spec, a.megatron_args);
    if (!a.schedule.empty()) {
        // Messages about the schedule name the option, not the file's `schedule:` line.
        spec.schedule = a.schedule;
        spec.schedule_where = SourceLocation{"--schedule " + a.schedule};
    }
    for (const auto& w : spec.warnings)
        spdlog::warn("{}", w);
    std::set<std::string> said;  // warnings printed as soon as they were known
    api::RunOptions opt = run_options(a, max_memory, outputs, said);
    Progress progress("simulating");
    std::unique_ptr<PassProgress> counter;
    std::size_t passes = 0;  // every worker's passes, from the prepared iteration
    if (progress.enabled()) {
        opt.on_prepared = [&passes](const replay::PreparedIteration& it) {
            passes = static_cast<std::size_t>(it.passes());
        };
        opt.attach = [&counter, &progress, &passes](replay::Replay& replay) {
            counter = std::make_unique<PassProgress>(progress, passes);
            replay.add_observer(*counter);
        };
    }
    const auto result = api::run(spec, opt);
    counter.reset();
    for (const auto& w : result.warnings)
        if (!said.contains(w)) spdlog::warn("{}", w);
    write_run_files(a, spec, result, writers, outputs);
    std::cout << "experiment            " << spec.source << "\n"
              << "network               " << network::fidelity_name(spec.network.fidelity);
    // Routing only chooses among paths between nodes.
    if (spec.cluster->node_count() > 1)
        std::cout << ", routing " << name_of(topology::kRoutingNames, spec.cluster->routing());
    std::cout << "\n";
    report::summary_writer("text").write(std::cout, result.summary);
    if (!a.html.empty()) std::cout << "\nreport written to " << a.html << "\n";
    if (!a.trace.empty())
        std::cout << "\ntrace written to " << a.trace << " (open it in ui.perfetto.dev)\n";
}
}  // namespace

void register_run(CLI::App& app) {
    auto args = std::make_shared<RunArgs>();
    auto* cmd = app.add_subcommand("run", "Simulate one training iteration of an experiment");
    cmd->add_option("experiment", args->experiment,
                    "Experiment YAML (default: the bundled workloads/default.yaml)");
    cmd->add_option("--set", args->sets, "Override a key: parallelism.tp=4, topology.nodes=8")
        ->type_name("KEY=VALUE");
    cmd->add_option("--megatron-args", args->megatron_args,
                    "Megatron-LM flags (or @FILE) that set the model, layout and training keys")
        ->type_name("\"--tensor-model-parallel-size 8 ...\"");
    cmd->add_option("--schedule", args->schedule,
                    "Override the experiment's schedule: " +
                        config::join_alternatives(schedule::schedule_names()));
    cmd->add_option("--json", args->json, "Write the summary as JSON");
    cmd->add_option("--summary", args->summaries,
                    "Write the summary, format by extension: " +
                        report::SummaryWriterRegistry::builtin().help())
        ->type_name("FILE");
    cmd->add_option("--trace", args->trace,
                    "Write a timeline: " + report::TraceFormatRegistry::builtin().help());
    cmd->add_option("--html", args->html,
                    "Write a self-contained HTML report (timeline, link heat map, memory)")
        ->type_name("FILE");
    cmd->add_option("--trace-ranks", args->trace_ranks, "Trace only these GPUs: 0-63, 0,8,16")
        ->type_name("RANKS");
    cmd->add_option("--trace-links", args->trace_links,
                    "Link utilisation counters: auto (all on one node, else inter-node), "
                    "inter-node, all, none")
        ->check(CLI::IsMember({"auto", "inter-node", "all", "none"}));
    cmd->add_option(
           "--max-memory", args->max_memory,
           "The memory a run may take (default 16GiB); larger runs are refused before they start")
        ->type_name("SIZE");
    cmd->add_flag("--no-fold", args->no_fold,
                  "Simulate every tensor-parallel member's transfers on the network (and, "
                  "under analytical and ideal networks, every data-parallel replica) instead "
                  "of folding identical ones (same results; for checking and timing)");
    cmd->add_flag("--no-fast-paths", args->no_fast_paths,
                  "Turn off every fast path (folding, kept plans and capacities, batched sends "
                  "and link sums, the replay's scratch): the same results, computed the plain "
                  "way (for checking)");
    cmd->callback([args] { run(*args); });
}

}  // namespace cs::cli
