// clustersim calibrate [--torch-trace F... --gpu-model NAME] [--nccl-tests F... --topology T]
//                      --out FILE [--json J]
//
// Fits the compute model on PyTorch profiler traces (fit/calibrate.hpp) and the network model on
// nccl-tests output (fit/calibrate_network.hpp), prints the fit report
// and writes the calibration file (and the report as JSON), each whole or not at all.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/tables.hpp"
#include "cli/text.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/quantity.hpp"
#include "fit/calibrate.hpp"
#include "ingest/inputs.hpp"

namespace cs::cli {

namespace {

struct CalibrateArgs {
    api::CalibrateOptions options;
    std::string out;
    std::string json;
    std::string iteration_time;
    std::string max_memory;
};

void run(const CalibrateArgs& a) {
    OutputSet outputs;
    outputs.declare("--out", a.out);
    outputs.declare("--json", a.json);
    for (const auto& trace : a.options.traces)
        outputs.guard_input("--torch-trace", trace);
    // "FILE", "OP=FILE" or "OP:RANKS=FILE".
    for (const auto& file : a.options.nccl_tests)
        outputs.guard_input("--nccl-tests", file.substr(file.find('=') + 1));
    outputs.guard_input("--topology", a.options.topology);
    outputs.guard_input("--experiment", a.options.experiment);
    api::CalibrateOptions options = a.options;
    if (!a.max_memory.empty() && options.traces.empty())
        throw ConfigError(SourceLocation{"--max-memory"},
                          "bounds the memory of --torch-trace's events; give the traces");
    options.max_memory = api::parse_max_memory(a.max_memory);
    if (!a.iteration_time.empty()) {
        const auto t = parse_time(a.iteration_time);
        if (!t || *t <= Time::zero())
            throw ConfigError(SourceLocation{"--iteration-time"},
                              "expected a positive time with its unit, e.g. 63.3ms; found \"" +
                                  a.iteration_time + "\"");
        options.iteration_time_s = t->seconds();
    }
    const auto result = api::calibrate(options);
    print_calibration(std::cout, result);
    write_file_atomically(
        a.out, [&](std::ostream& out) { out << api::calibration_file_text(result); }, &outputs);
    if (!a.json.empty())
        write_file_atomically(
            a.json, [&](std::ostream& out) { out << json_text(api::calibration_json(result)); },
            &outputs);
    outputs.commit();
    std::cout << "\nwrote " << a.out << "\n";
}

}  // namespace

void register_calibrate(CLI::App& app) {
    auto args = std::make_shared<CalibrateArgs>();
    auto* cmd = app.add_subcommand(
        "calibrate",
        "Fit the compute model on PyTorch profiler traces and the network on nccl-tests output, "
        "and write a calibration file");
    cmd->add_option("--torch-trace", args->options.traces,
                    "PyTorch profiler Chrome trace (.json or .json.gz; repeatable)")
        ->type_name("FILE");
    cmd->add_option("--gpu-model", args->options.gpu_model,
                    "The GPU the traces ran on: a catalogue name (H200) or a gpu_models entry of "
                    "--topology (required with --torch-trace)");
    cmd->add_option("--nccl-tests", args->options.nccl_tests,
                    "nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, "
                    "alltoall_perf, sendrecv_perf; repeatable); OP=FILE names the operation when "
                    "the file does not, OP:RANKS=FILE also the rank count (a table kept without "
                    "its device lines)")
        ->type_name("FILE");
    cmd->add_option("--nccl-sizes", args->options.nccl_sizes,
                    "Fit only nccl-tests rows whose size is in FIRST:LAST (e.g. 16M:1G)")
        ->type_name("FIRST:LAST");
    cmd->add_option("--nccl-fit", args->options.nccl_fit,
                    "What the nccl-tests fit minimises: worst (the largest relative residual, "
                    "the default) or rms (their squares' sum)")
        ->type_name("worst|rms");
    cmd->add_option("--topology", args->options.topology,
                    "The cluster the nccl-tests ran on (required with --nccl-tests); its "
                    "gpu_models also define --gpu-model");
    cmd->add_option("--set", args->options.sets, "Override a key of the topology: nodes=4")
        ->type_name("KEY=VALUE");
    cmd->add_option("--experiment", args->options.experiment,
                    "The experiment the traces ran (its model, layout and microbatches): the "
                    "model's own bytes for each kind, and a warning when the trace's model "
                    "differs")
        ->type_name("FILE");
    cmd->add_option("--experiment-set", args->options.experiment_sets,
                    "Override a key of --experiment: training.micro_batch_size=2")
        ->type_name("KEY=VALUE");
    cmd->add_option("--iteration-time", args->iteration_time,
                    "One training iteration measured without the profiler (e.g. 63.3ms): "
                    "corrects the host's cost for the profiler's overhead")
        ->type_name("TIME");
    cmd->add_option("--iterations", args->options.iterations,
                    "Training iterations the traces hold (default: their optimizer steps)")
        ->check(CLI::Range(1, 1000000));
    cmd->add_option("--out", args->out, "The calibration file to write (YAML)")->required();
    cmd->add_option("--json", args->json, "Write the fit report as JSON");
    cmd->add_option("--max-memory", args->max_memory,
                    "Memory the traces may take (default 16GiB): larger ones are refused");
    cmd->callback([args] { run(*args); });
}

}  // namespace cs::cli
