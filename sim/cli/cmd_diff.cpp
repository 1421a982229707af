// clustersim diff SIMULATED MEASURED [--rank R] [--iterations N] [--json J]
// A simulated trace of one rank against a measured PyTorch profiler trace (fit/diff.hpp).
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/tables.hpp"
#include "cli/text.hpp"
#include "core/atomic_file.hpp"
#include "fit/diff.hpp"
#include "ingest/inputs.hpp"

namespace cs::cli {

namespace {

struct DiffArgs {
    api::DiffOptions options;
    std::string json;
    std::string max_memory;
};

void run(DiffArgs a) {
    a.options.max_memory = api::parse_max_memory(a.max_memory);
    OutputSet outputs;
    outputs.declare("--json", a.json);
    outputs.guard_input("the simulated trace", a.options.simulated);
    outputs.guard_input("the measured trace", a.options.measured);
    const auto result = api::diff_traces(a.options);
    print_diff(std::cout, result);
    if (!a.json.empty())
        write_file_atomically(
            a.json, [&](std::ostream& out) { out << json_text(api::diff_json(result)); }, &outputs);
    outputs.commit();
}

}  // namespace

void register_diff(CLI::App& app) {
    auto args = std::make_shared<DiffArgs>();
    auto* cmd = app.add_subcommand(
        "diff",
        "A simulated trace of one rank against a measured PyTorch profiler trace, per op "
        "kind and pass");
    cmd->add_option("SIMULATED", args->options.simulated,
                    "clustersim's Chrome JSON trace (clustersim run --trace F.json)")
        ->required();
    cmd->add_option("MEASURED", args->options.measured,
                    "PyTorch profiler trace of the same configuration (.json, .json.gz)")
        ->required();
    cmd->add_option("--rank", args->options.rank, "The simulated GPU to compare")
        ->capture_default_str();
    cmd->add_option("--iterations", args->options.iterations,
                    "Training iterations the measured profile holds (its times are divided by it)")
        ->capture_default_str();
    cmd->add_option("--json", args->json, "Write the comparison as JSON");
    cmd->add_option("--max-memory", args->max_memory,
                    "Memory the traces may take (default 16GiB): larger ones are refused");
    cmd->callback([args] { run(*args); });
}

}  // namespace cs::cli
