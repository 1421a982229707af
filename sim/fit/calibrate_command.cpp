// `clustersim calibrate` below the CLI: calibrate() reads and checks its inputs (the GPU model,
// the experiment, the traces and nccl-tests output) and runs the compute fits (calibrate.cpp)
// and the network fits (calibrate_network.cpp); calibration_json and calibration_file_text give
// their results as the JSON report and as the calibration file with its header of comments.
#include "fit/calibrate.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "config/document.hpp"
#include "core/errors.hpp"
#include "fit/format.hpp"
#include "ingest/topology.hpp"
#include "network/collectives.hpp"
#include "topology/topology_yaml.hpp"
#include "workload/calibration.hpp"
#include "workload/experiment.hpp"

namespace cs::api {
namespace {

using detail::fmt;

// The calibration file's text, not yet read back (calibration_file_text checks it).
std::string calibration_text_unchecked(const CalibrationResult& r);

// The GPU model the traces ran on (--gpu-model): a model of --topology (loaded into `topo`,
// which owns it; a catalogue name matches its entry there), else the catalogue's.
const topology::GpuModel* traces_gpu(const CalibrateOptions& options,
                                     std::optional<LoadedTopology>& topo) {
    const topology::GpuModel* gpu = nullptr;
    if (options.topology.empty()) {
        gpu = topology::find_catalog_model(options.gpu_model);
        if (!gpu)
            throw ConfigError("--gpu-model " + options.gpu_model +
                              ": not in the GPU catalogue; expected " +
                              config::join_alternatives(topology::catalog_names()) +
                              ", or give --topology with a gpu_models entry of that name");
        return gpu;
    }
    topo = load_topology(options.topology, options.sets);
    for (const auto& m : topo->cluster.gpu_models())
        if (m.name == options.gpu_model) gpu = &m;
    if (gpu) return gpu;
    std::vector<std::string> names;
    for (const auto& m : topo->cluster.gpu_models())
        names.push_back(m.name);
    if (const auto* known = topology::find_catalog_model(options.gpu_model)) {
        for (const auto& m : topo->cluster.gpu_models())
            if (m.name == known->name) gpu = &m;
    }
    if (!gpu)
        throw ConfigError("--gpu-model " + options.gpu_model + ": not a GPU model of " +
                          options.topology + " (" + config::join_alternatives(names) + ")");
    return gpu;
}

// The experiment the traces ran (--experiment), if given: a roofline one without a calibration.
std::optional<workload::ExperimentSpec> traces_experiment(const CalibrateOptions& options) {
    if (options.experiment.empty()) return std::nullopt;
    auto spec = workload::load_experiment(options.experiment, options.experiment_sets);
    if (spec.compute.kind != workload::ComputeSpec::Kind::Roofline)
        throw ConfigError(SourceLocation{"--experiment"},
                          options.experiment +
                              ": calibrate needs a roofline experiment (compute.model: "
                              "roofline), whose kernels it fits");
    if (spec.compute.calibration_file.size() > 0)
        throw ConfigError(SourceLocation{"--experiment"},
                          options.experiment + " already applies a calibration (" +
                              spec.compute.calibration_file +
                              "): calibrate against the catalogue, without compute.calibration");
    return spec;
}

// The fits of each kind: what was measured, sampled and fitted, and the value written.
nlohmann::json kinds_json(const std::vector<KindFit>& fits) {
    nlohmann::json kinds = nlohmann::json::array();
    for (const auto& k : fits) {
        nlohmann::json o{{"kind", k.kind},
                         {"kernels", k.kernels},
                         {"samples", k.samples},
                         {"measured_ms", k.measured_ms},
                         {"fitted", k.fitted_ms >= 0},
                         {"note", k.note}};
        if (k.fitted_ms >= 0) {
            o["sample_ms"] = k.sample_ms;
            o["fitted_ms"] = k.fitted_ms;
            o["median_residual"] = k.median_residual;
            o["worst_residual"] = k.worst_residual;
            o["value"] = k.value;
        }
        kinds.push_back(o);
    }
    return kinds;
}

// The GEMM samples per shape, and the fitted curve.
void add_gemm_json(nlohmann::json& j, const CalibrationResult& r) {
    nlohmann::json shapes = nlohmann::json::array();
    for (const auto& g : r.gemm_shapes)
        shapes.push_back({{"m", g.m},
                          {"n", g.n},
                          {"k", g.k},
                          {"count", g.count},
                          {"measured_ms", g.measured_ms},
                          {"fitted_ms", g.fitted_ms}});
    j["gemm_shapes"] = shapes;
    if (r.file.gemm)
        j["gemm"] = {{"peak_fraction", r.file.gemm->peak_fraction},
                     {"half_dim", r.file.gemm->half_dim},
                     {"exponent", r.file.gemm->exponent}};
}

// An option that only shapes a fit the command was not asked for is a mistake (a forgotten
// --torch-trace or --nccl-tests, or an override of a file not given): refused, not ignored.
void check_options_apply(const CalibrateOptions& options) {
    // A misspelt measure is reported as such, with or without nccl-tests files.
    if (options.nccl_fit) parse_network_fit_objective(*options.nccl_fit);
    const auto refuse = [](const char* option, const std::string& what) {
        throw ConfigError(SourceLocation{option}, what);
    };
    if (options.traces.empty()) {
        if (!options.experiment.empty())
            refuse("--experiment", "describes the configuration of --torch-trace; give the traces");
        if (options.iteration_time_s != 0)
            refuse("--iteration-time",
                   "corrects the host's cost fitted on --torch-trace; give the traces");
        if (options.iterations != 0)
            refuse("--iterations",
                   "counts the training iterations of --torch-trace; give the traces");
    }
    if (options.nccl_tests.empty()) {
        if (options.nccl_fit)
            refuse("--nccl-fit",
                   "chooses how the --nccl-tests rows are fitted; give the nccl-tests files");
        if (!options.nccl_sizes.empty())
            refuse("--nccl-sizes",
                   "chooses which --nccl-tests rows are fitted; give the nccl-tests files");
    }
    if (options.experiment.empty() && !options.experiment_sets.empty())
        refuse("--experiment-set", "overrides a key of --experiment; give the experiment");
    if (options.topology.empty() && !options.sets.empty())
        refuse("--set", "overrides a key of --topology; give the topology");
}

}  // namespace

CalibrationResult calibrate(const CalibrateOptions& options) {
    if (options.traces.empty() && options.nccl_tests.empty())
        throw ConfigError(
            "calibrate: no measurement given; pass --torch-trace FILE and/or "
            "--nccl-tests FILE");
    check_options_apply(options);
    const NetworkFitObjective objective = options.nccl_fit
                                              ? parse_network_fit_objective(*options.nccl_fit)
                                              : NetworkFitObjective::Worst;
    std::optional<NetworkFitResult> network;
    if (!options.nccl_tests.empty())
        network = calibrate_network(
            {options.nccl_tests, options.topology, options.sets, options.nccl_sizes, objective});
    if (options.traces.empty()) {
        CalibrationResult r;
        r.file.gpu_model = options.gpu_model;
        r.file.sources = network->sources;
        r.file.network = network->constants;
        r.network = std::move(network);
        return r;
    }
    if (options.gpu_model.empty())
        throw ConfigError(SourceLocation{"--torch-trace"},
                          "name the GPU the traces ran on with --gpu-model");
    if (!(options.iteration_time_s >= 0) || options.iteration_time_s > 1e6)
        throw ConfigError(SourceLocation{"--iteration-time"},
                          "must be a time of one training iteration, e.g. 63.3ms");
    std::optional<LoadedTopology> topo;
    const topology::GpuModel* gpu = traces_gpu(options, topo);
    const std::optional<workload::ExperimentSpec> spec = traces_experiment(options);
    std::vector<TorchTrace> traces;
    for (const auto& t : options.traces)
        traces.push_back(read_torch_trace(
            t, options.max_memory / static_cast<std::int64_t>(options.traces.size())));
    CalibrateContext context;
    context.experiment = spec ? &*spec : nullptr;
    context.iteration_time_s = options.iteration_time_s;
    context.iterations = options.iterations;
    auto r = [&] {
        try {
            return calibrate_traces(traces, *gpu, context);
        } catch (const ClockOverflow&) {
            // The model's time of a kernel comes from its shapes alone.
            throw ConfigError(SourceLocation{"--torch-trace"},
                              "a kernel's shapes (\"Input Dims\" of its operator) give a time "
                              "longer than the simulator's clock can hold (2^63 ps, about 106 "
                              "days) or 2^63 bytes or more; expected the shapes of a real "
                              "training step");
        }
    }();
    for (std::size_t i = 0; i < traces.size(); ++i)
        r.file.sources[i] = std::filesystem::path(options.traces[i]).filename().string();
    r.compute = true;
    if (network) {
        for (const auto& s : network->sources)
            r.file.sources.push_back(s);
        r.file.network = network->constants;
        r.network = std::move(network);
    }
    return r;
}

nlohmann::json calibration_json(const CalibrationResult& r) {
    nlohmann::json j;
    j["network"] = r.network ? network_fit_json(*r.network) : nlohmann::json();
    if (!r.compute) {
        j["gpu_model"] = r.file.gpu_model;
        j["sources"] = r.file.sources;
        return j;
    }
    j["gpu_model"] = r.file.gpu_model;
    j["sources"] = r.file.sources;
    j["kernels"] = r.kernels;
    j["memsets"] = r.memsets;
    j["memcpys"] = r.memcpys;
    j["gpu_ms"] = r.gpu_ms;
    j["tensor_duty"] = r.tensor_duty;
    j["sustained_factor"] = r.sustained_factor;
    j["kinds"] = kinds_json(r.kinds);
    add_gemm_json(j, r);
    nlohmann::json fr = nlohmann::json::object();
    for (const auto& k : workload::kMemKindNames)
        if (const auto& v = r.file.hbm_fractions[static_cast<std::size_t>(k.value)])
            fr[std::string(k.name)] = *v;
    j["hbm_fractions"] = fr;
    j["launch_overhead_us"] = r.file.launch_overhead
                                  ? nlohmann::json(r.file.launch_overhead->count_ps() * 1e-6)
                                  : nlohmann::json();
    j["launch_gap_samples"] = r.gap_samples;
    j["host_launch_us"] = r.file.host_launch ? nlohmann::json(r.file.host_launch->count_ps() * 1e-6)
                                             : nlohmann::json();
    j["host_samples"] = r.host_samples;
    nlohmann::json un = nlohmann::json::array();
    for (const auto& u : r.unfitted)
        un.push_back({{"what", u.what}, {"why", u.why}});
    j["unfitted"] = un;
    nlohmann::json um = nlohmann::json::array();
    for (const auto& u : r.unmapped)
        um.push_back({{"name", u.name}, {"count", u.count}, {"ms", u.ms}});
    j["coverage"] = {
        {"mapped_ms_per_iteration", r.mapped_ms},
        {"unmapped_ms_per_iteration", r.unmapped_ms},
        {"unmapped", um},
        {"residual", r.file.residual ? nlohmann::json(*r.file.residual) : nlohmann::json(0.0)}};
    j["iterations"] = r.iterations;
    j["busy_ms_per_iteration"] = r.busy_ms;
    j["profiled_iteration_ms"] = r.profiled_iteration_ms;
    j["model_bytes"] = r.model_bytes;
    j["attention"] = {
        {"forward",
         r.file.attention_forward ? nlohmann::json(*r.file.attention_forward) : nlohmann::json()},
        {"backward", r.file.attention_backward ? nlohmann::json(*r.file.attention_backward)
                                               : nlohmann::json()}};
    j["grouped_gemm_scale"] =
        r.file.grouped_gemm ? nlohmann::json(*r.file.grouped_gemm) : nlohmann::json();
    j["warnings"] = r.warnings;
    return j;
}

std::string calibration_file_text(const CalibrationResult& r) {
    std::string text = calibration_text_unchecked(r);
    // What calibrate writes, its reader must take back (issue 40: files it rejected were
    // written): read it as an experiment would before anything is written.
    try {
        workload::parse_calibration(config::parse_document(text, "the calibration file"));
    } catch (const ConfigError& e) {
        throw ConfigError(SourceLocation{"--out"},
                          "the fitted constants make a calibration file clustersim would not "
                          "read back (" +
                              e.message() + "); nothing is written");
    }
    return text;
}

namespace {

std::string calibration_text_unchecked(const CalibrationResult& r) {
    std::vector<std::string> header{
        "clustersim calibration (docs/calibrate.md): written by `clustersim calibrate`."};
    if (r.compute) {
        header.push_back("Reference it from an experiment: compute: {calibration: THIS_FILE}.");
        header.push_back("Fit: " + std::to_string(r.kernels) +
                         " kernels; GEMM samples at tensor-core duty " +
                         fmt("%.3f", r.tensor_duty) + " (sustained factor " +
                         fmt("%.3f", r.sustained_factor) + ").");
        const double all = r.mapped_ms + r.unmapped_ms;
        header.push_back("Coverage: " + fmt("%.1f%%", all > 0 ? 100 * r.mapped_ms / all : 0) +
                         " of the GPU time maps to the model's ops; the rest is the residual.");
        for (const auto& u : r.unfitted)
            header.push_back("Unfitted: " + u.what + ": " + u.why);
        for (const auto& w : r.warnings)
            header.push_back("Warning: " + w);
    }
    if (r.network) {
        header.push_back("Network: network: {calibration: THIS_FILE}; fitted on " +
                         r.network->topology + " to the least " +
                         network_fit_objective_name(r.network->objective) + " residual.");
        for (const auto& f : r.network->ops)
            if (!f.link.empty())
                header.push_back("  " + std::string(network::collective_name(f.op)) + " on " +
                                 f.link + ": " + std::to_string(f.samples) +
                                 " samples, rms residual " + fmt("%.1f%%", 100 * f.rms_residual) +
                                 ", worst " + fmt("%+.1f%%", 100 * f.worst_residual) + ".");
        for (const auto& u : r.network->unfitted)
            header.push_back("Network unfitted: " + u.what + ": " + u.why);
    }
    return workload::calibration_yaml(r.file, header);
}

}  // namespace

}  // namespace cs::api
