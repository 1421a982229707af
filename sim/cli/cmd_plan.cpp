// clustersim plan EXPERIMENT.yaml [--fix KEY=VALUE|V1,V2|MIN..MAX]... [--schedules a,b]
//                 [--headroom FRACTION] [--top K] [--objective time|mfu|cost|energy]
//                 [--gpu-hour-price PRICE] [--margin FRACTION] [--set k=v]... [--json FILE]
//                 [--html FILE] [--guide] [--hsdp] [--partial-recompute] [--uneven-stages]
//                 [--cp-comm] [--gpus N,N,...] [--global-batch N|MIN..MAX[:STEP],...]
//                 [--threads N]
// The search itself is api::plan (sim/session/plan.hpp), MPI sharding included.
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "cli/log.hpp"
#include "cli/tables.hpp"
#include "cli/text.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "session/plan.hpp"
#include "session/report.hpp"

namespace cs::cli {

namespace {

struct PlanArgs {
    std::string experiment;
    std::vector<std::string> sets, fixes;
    std::string schedules;
    double headroom = 0;
    std::int64_t top = 5;
    std::string objective = "time";
    double gpu_hour_price = 0;
    double margin = 0.1;
    std::string confirm;
    int max_micro_batch_size = 8;
    std::string json, html;
    std::string max_memory;
    bool no_fast_paths = false;
    bool guide = false;
    bool hsdp = false, partial_recompute = false, uneven_stages = false, cp_comm = false;
    std::vector<int> gpus;
    std::string global_batch;
    int threads = 0;
};

void run_plan(const PlanArgs& a, const api::SweepRanks& ranks) {
    api::PlanOptions options;
    options.experiment = a.experiment;
    options.sets = a.sets;
    options.fixes = a.fixes;
    if (!a.schedules.empty()) {
        std::stringstream ss(a.schedules);
        for (std::string s; std::getline(ss, s, ',');) {
            if (s.empty())
                throw ConfigError(SourceLocation{"--schedules " + a.schedules},
                                  "an empty schedule name in the list");
            options.schedules.push_back(s);
        }
    }
    const auto objective = find_named(api::kPlanObjectiveNames, a.objective);
    if (!objective)
        throw ConfigError(SourceLocation{"--objective " + a.objective},
                          "unknown objective; expected time, mfu, cost or energy");
    options.objective = *objective;
    options.gpu_hour_price = a.gpu_hour_price;
    options.headroom = a.headroom;
    options.margin = a.margin;
    if (!a.confirm.empty()) options.confirm = api::parse_confirm(a.confirm);
    if (a.top < 1)
        throw ConfigError(SourceLocation{"--top " + std::to_string(a.top)},
                          "expected a number of layouts, 1 or more");
    options.top = static_cast<std::size_t>(a.top);
    if (a.max_micro_batch_size < 1)
        throw ConfigError(SourceLocation{"--max-micro-batch"}, "expected 1 or more");
    options.max_micro_batch_size = a.max_micro_batch_size;
    options.keep_entries = !a.json.empty() || !a.html.empty();
    options.fast_paths = !a.no_fast_paths;
    options.guide = a.guide;
    options.hsdp = a.hsdp;
    options.cp_comm = a.cp_comm;
    options.gpus = a.gpus;
    if (!a.global_batch.empty()) options.global_batches = api::parse_global_batches(a.global_batch);
    options.partial_recompute = a.partial_recompute;
    options.uneven_stages = a.uneven_stages;
    options.threads = a.threads;
    options.max_memory = api::parse_max_memory(a.max_memory);
    OutputSet outputs;
    outputs.declare("--json", a.json);
    outputs.declare("--html", a.html);
    outputs.guard_input("the experiment", a.experiment);
    auto progress = std::make_unique<Progress>("plan");
    if (ranks.rank() == 0 && progress->enabled())
        options.on_progress = [p = progress.get()](const char* phase, std::size_t done,
                                                   std::size_t total) {
            p->update(done, total, std::string("layouts (") + phase + ")");
        };
    const auto result = api::plan(options, ranks);
    progress.reset();
    if (!result) return;  // rank 0 reports
    const auto& took = result->seconds;
    spdlog::debug(
        "plan: search {:.2f} s, simulations {:.2f} s (wall); the threads' seconds: load {:.2f}, "
        "prepare and memory {:.2f}, bounds {:.2f}, analytical runs {:.2f}, confirming runs {:.2f}; "
        "{} of {} survivors bounded in full",
        took.search, took.simulate, took.load, took.prepare, took.bound, took.analytical,
        took.confirm, result->bounded,
        result->pruned_bound + result->left_by_limit + result->simulated);
    if (!a.json.empty())
        write_file_atomically(
            a.json,
            [&](std::ostream& out) {
                api::write_plan_json(out, *result);
                out << '\n';
            },
            &outputs);
    if (!a.html.empty()) {
        report::HtmlReport page;
        page.title = "clustersim plan";
        page.experiment = result->source;
        page.plan = api::plan_html_data(*result);
        // --fix keys as --set: a fixed axis is set again, to the same value, by each layout's
        // overrides (a bounded one is not: each layout sets its own value).
        auto sets = a.sets;
        const auto fixed = api::plan_fixes_as_sets(a.fixes);
        sets.insert(sets.end(), fixed.begin(), fixed.end());
        page.command = run_command(a.experiment, sets);
        api::write_html(a.html, page, &outputs);
    }
    outputs.commit();
    print_plan(std::cout, *result);
}

void plan(const PlanArgs& a) {
    const api::SweepRanks ranks;
    try {
        run_plan(a, ranks);
    } catch (const ConfigError&) {
        if (ranks.rank() == 0) throw;
    }
}

// The options that widen the space searched: other GPU counts and global batches, HSDP, partial
// recomputation and uneven pipeline splits.
void add_searched_axes(CLI::App& cmd, PlanArgs& args) {
    cmd.add_option("--gpus", args.gpus,
                   "Search these GPU counts (whole nodes of the topology, which is scaled by "
                   "topology.nodes) instead of the experiment's own; compare them by --objective "
                   "cost, energy or mfu (time favours the most GPUs)")
        ->delimiter(',')
        ->type_name("N,N,...");
    cmd.add_option("--global-batch", args.global_batch,
                   "Search these global batch sizes (sequences per step) instead of the "
                   "experiment's: N, MIN..MAX (the multiples of MIN up to MAX) or MIN..MAX:STEP, "
                   "comma-separated; with more than one, time ranks seconds per 1M tokens")
        ->type_name("N|MIN..MAX[:STEP],...");
    cmd.add_flag("--hsdp", args.hsdp,
                 "Also search HSDP: each sharded layout with every shard group size dividing dp "
                 "(parallelism.shard_size); multiplies the sharded layouts");
    cmd.add_flag("--partial-recompute", args.partial_recompute,
                 "Also search partial recomputation: full recomputation of the first N layers of "
                 "each chunk (Megatron-LM's block method), for every N below the chunk's layers");
    cmd.add_flag("--cp-comm", args.cp_comm,
                 "Also search how context parallelism exchanges (parallelism.cp_comm_type): each "
                 "layout with cp > 1 also with p2p, a2a, allgather and a2a+p2p at every "
                 "all-to-all group size (those the experiment does not use already)");
    cmd.add_flag("--uneven-stages", args.uneven_stages,
                 "Also search uneven pipeline splits: where a pp does not split the layers "
                 "evenly, the first and last stages take the rest (Megatron-LM's "
                 "--decoder-first/last-pipeline-num-layers)");
}

}  // namespace

void register_plan(CLI::App& app) {
    auto args = std::make_shared<PlanArgs>();
    auto* cmd = app.add_subcommand(
        "plan", "Search every layout of the experiment's model on its GPUs and rank the best");
    cmd->add_option("experiment", args->experiment,
                    "Experiment YAML: model, topology, sequence length, global batch")
        ->required();
    cmd->add_option("--fix", args->fixes,
                    "Hold a key at one value (parallelism.tp=8, schedule=1f1b, "
                    "training.recompute=selective, or any parallelism./training. key), or bound a "
                    "searched one to a set or range: parallelism.tp=4,8, parallelism.pp=4..16, "
                    "parallelism.tp=..8, training.recompute=none,full")
        ->type_name("KEY=VALUE");
    cmd->add_option("--schedules", args->schedules,
                    "Schedules to search (default: every registered one)")
        ->type_name("A,B,...");
    cmd->add_option("--headroom", args->headroom, "Fraction of HBM kept free")
        ->capture_default_str();
    cmd->add_option("--top", args->top, "Layouts to rank")->capture_default_str();
    cmd->add_option("--objective", args->objective,
                    "time (iteration time), mfu, cost (with --gpu-hour-price) or energy")
        ->capture_default_str();
    cmd->add_option("--gpu-hour-price", args->gpu_hour_price,
                    "Price of one GPU for an hour (for --objective cost)");
    cmd->add_option("--margin", args->margin,
                    "Before the first confirmation under the experiment's network, layouts whose "
                    "lower bound divided by 1 + margin beats the k-th best analytical time are "
                    "simulated; the stop rule extends that as needed, so the margin changes the "
                    "work, not the ranking")
        ->capture_default_str();
    cmd->add_option(
           "--confirm", args->confirm,
           "Re-simulate at most N layouts under the experiment's network (default 3 x "
           "--top), or all that the stop rule needs (exact, but at thousands of GPUs under "
           "flow each run takes seconds); plan says what the limit left unconfirmed")
        ->type_name("N|all");
    cmd->add_option("--max-micro-batch", args->max_micro_batch_size,
                    "Largest micro-batch size searched")
        ->capture_default_str();
    cmd->add_option("--set", args->sets, "Override a key of the experiment (see run)")
        ->type_name("KEY=VALUE");
    cmd->add_option("--json", args->json,
                    "Write every layout looked at (figures, or why it was dropped) as JSON")
        ->type_name("FILE");
    cmd->add_option("--html", args->html,
                    "Write an HTML page: the top layouts and every simulated one as memory per GPU "
                    "against iteration time, with the Pareto front")
        ->type_name("FILE");
    cmd->add_option("--max-memory", args->max_memory,
                    "Memory the plan may take (default 16GiB): the topology is checked against it")
        ->type_name("SIZE");
    cmd->add_flag("--guide", args->guide,
                  "Also run what the parallelism guide recommends for this model, cluster and "
                  "sequence, and place it among the layouts found (docs/plan.md)");
    add_searched_axes(*cmd, *args);
    cmd->add_option("--threads,-j", args->threads,
                    "Worker threads for the search and the simulations (0: one per core, one "
                    "under mpirun); the result is the same for any number")
        ->capture_default_str();
    cmd->add_flag("--no-fast-paths", args->no_fast_paths,
                  "Turn off every fast path (as sweep): the same results, computed the plain way");
    cmd->callback([args] { plan(*args); });
}

}  // namespace cs::cli
