// clustersim calibrate: fits the compute model's constants on a user's PyTorch profiler traces
// and writes them as a calibration file (workload/calibration.hpp) that experiments reference
// with `compute: {calibration: FILE}`. docs/calibrate.md describes what is read and fitted.
//
// Every kernel of a trace goes to one of the model's op kinds through the table of
// fit/kernel_table.hpp; each constant is fitted on the kernels of its own kind only, and
// kernels no rule maps (and, with --experiment, measured kinds the model has no op for) are an
// explicit residual, reported with their time, never folded into another kind's fraction.
// Fitted (docs/compute-model.md sections 2 and 6):
// - the GEMM curve (cap, half_dim, exponent) by least squares on log time over the GEMM kernels
//   whose operator recorded its shapes (mm, addmm, linear, matmul; 16-bit); the knee (half_dim,
//   exponent) only when the samples reach it, else the cap alone on the GPU model's knee;
// - the grouped GEMM's and the flash attention's rates as multipliers on the catalogue's
//   curves, from the operators' recorded shapes;
// - each memory-bound kind's HBM fraction: with --experiment (the configuration the trace ran),
//   the model's own bytes for the kind per iteration over the kind's measured time per
//   iteration; without, the operators' bytes from their recorded shapes (a warning says so);
// - the GPU-side launch gap: the mean gap between back-to-back kernels of one stream where the
//   second was queued before the first ended;
// - the host's per-kernel cost: the median interval between the launch calls of kernels the GPU
//   waited for, corrected for the profiler's own overhead when the iteration time measured
//   without the profiler is given (else a warning says the cost includes it).
// Left unfitted, with the reason in the report: the sustained clock factor (one duty cycle in a
// trace cannot tell it from the GEMM cap), the latency-bound router and sort kernels.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "fit/calibrate_network.hpp"
#include "ingest/torch_trace.hpp"
#include "topology/cluster.hpp"
#include "workload/calibration.hpp"

namespace cs::api {

struct CalibrateOptions {
    std::vector<std::string> traces;  // PyTorch profiler Chrome traces (.json, .json.gz)
    std::string gpu_model;            // a catalogue name, or a gpu_models entry of `topology`
    std::string topology;  // topology file whose gpu_models are searched; the nccl-tests' cluster
    std::vector<std::string> sets;        // overrides of the topology (nodes=4)
    std::vector<std::string> nccl_tests;  // nccl-tests output files, "FILE" or "OP=FILE"
    std::string nccl_sizes;               // "FIRST:LAST": the rows fitted ("" = all)
    // What the network fit minimises: worst | rms (absent: not given, worst).
    std::optional<std::string> nccl_fit;
    // The experiment the traces ran (model, layout, microbatches): the model's bytes per kind,
    // and the checks that the trace's model is this one. Empty: bytes from recorded shapes.
    std::string experiment;
    std::vector<std::string> experiment_sets;  // --set overrides of the experiment
    // The iteration time measured without the profiler, seconds (0: not given).
    double iteration_time_s = 0;
    // Training iterations the traces hold (0: counted from their optimizer steps).
    int iterations = 0;
    // The memory the traces' events may take together (--max-memory; read_torch_trace).
    std::int64_t max_memory = kDefaultTraceMemory;
};

// What calibrate_traces knows beyond the traces (calibrate() fills it from the options).
struct CalibrateContext {
    const workload::ExperimentSpec* experiment = nullptr;
    double iteration_time_s = 0;
    int iterations = 0;
};

// One kind's line of the fit report. Residuals are predicted / measured - 1 per sample (one
// operator's kernels of the kind).
struct KindFit {
    std::string kind;
    std::int64_t kernels = 0;  // GPU kernels of the kind
    std::int64_t samples = 0;  // operators with the sizes a fit needs
    double measured_ms = 0;    // all kernels of the kind
    double sample_ms = 0;      // the samples' measured time
    double fitted_ms = -1;     // the samples as the fitted model predicts them; < 0: unfitted
    double median_residual = 0, worst_residual = 0;
    std::string value;  // the fitted constant(s), as written to the file
    std::string note;   // why unfitted, or what the fit assumed
};

struct CalibrationResult {
    workload::CalibrationFile file;
    std::vector<KindFit> kinds;
    struct Unfitted {
        std::string what, why;
    };
    std::vector<Unfitted> unfitted;
    std::vector<std::string> warnings;
    int iterations = 1;                // per trace (the largest), as used
    double profiled_iteration_ms = 0;  // with the profiler, per iteration (first trace)
    double busy_ms = 0;                // GPU kernels and launch gaps, per iteration
    double mapped_ms = 0;              // GPU time the table maps to an op of the model
    double unmapped_ms = 0;            // GPU time it maps to none (or the model has no op for)
    // The residual per kernel name (or kind) the model has no op for, the largest first.
    struct Unmapped {
        std::string name;
        std::int64_t count = 0;
        double ms = 0;
    };
    std::vector<Unmapped> unmapped;
    bool model_bytes = false;  // memory-bound fractions from the experiment's own bytes
    std::int64_t kernels = 0, memsets = 0, memcpys = 0, cpu_ops = 0;
    double gpu_ms = 0;              // all GPU event time
    double tensor_duty = 0;         // GEMM + attention share of the non-optimizer GPU time
    double sustained_factor = 1;    // the GPU model's sustained factor at that duty
    std::int64_t gap_samples = 0;   // launch gaps measured
    std::int64_t host_samples = 0;  // host-bound launch intervals measured
    // The GEMM samples by shape, the largest total first: where the fitted curve departs.
    struct GemmShapeFit {
        std::int64_t m = 0, n = 0, k = 0, count = 0;
        double measured_ms = 0, fitted_ms = 0;
    };
    std::vector<GemmShapeFit> gemm_shapes;
    bool compute = false;                     // traces were given and fitted
    std::optional<NetworkFitResult> network;  // nccl-tests were given
};

// Reads the traces and the nccl-tests files and fits (either or both). Throws ConfigError for bad
// traces or files, an unknown GPU model, nccl-tests without a topology, or nothing to fit.
CalibrationResult calibrate(const CalibrateOptions& options);
// The fit from traces already read (tests).
CalibrationResult calibrate_traces(const std::vector<TorchTrace>& traces,
                                   const topology::GpuModel& gpu,
                                   const CalibrateContext& context = {});

nlohmann::json calibration_json(const CalibrationResult& r);
// The calibration file's text, with the fit summary as its header comments.
std::string calibration_file_text(const CalibrationResult& r);

}  // namespace cs::api
