// clustersim diff: lays a simulated timeline of one rank (clustersim's Chrome JSON trace,
// report/chrome_trace) against a measured PyTorch profiler trace of the same configuration, per
// op kind and per pass (forward, backward, optimizer), and lists the largest departures.
//
// Kinds are the compute model's (api/torch_trace.hpp KernelKind): measured kernels are classified
// as `clustersim calibrate` classifies them; simulated steps by their label (the roofline's kernel
// names, docs/calibrate.md lists the mapping). Passes: simulated steps belong to the pass slice
// (F*, B*, W*) that contains them, or are the optimizer step; measured kernels belong to the
// backward when their operator ran on the autograd engine's thread, to the optimizer when they
// are optimizer kernels, else to the forward. Measured times are GPU kernel time divided by the
// number of iterations the profile holds.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace cs::api {

struct DiffOptions {
    std::string simulated;  // clustersim run --trace FILE (.json)
    std::string measured;   // PyTorch profiler trace (.json, .json.gz)
    int rank = 0;           // the simulated GPU ("GPU r compute" track)
    int iterations = 1;     // iterations in the measured profile
};

struct DiffLine {
    std::string name;  // kind or pass
    double simulated_ms = 0, measured_ms = 0;
    std::int64_t simulated_ops = 0, measured_kernels = 0;
    double difference_ms() const { return simulated_ms - measured_ms; }
    double relative() const { return measured_ms > 0 ? simulated_ms / measured_ms - 1 : 0; }
};

struct DiffResult {
    std::string simulated, measured;
    int rank = 0, iterations = 1;
    int microbatches = 0, layers = 0;  // from the simulated forward passes
    double simulated_iteration_ms = 0;
    double simulated_busy_ms = 0, measured_busy_ms = 0;  // compute steps; kernels per iteration
    std::vector<DiffLine> kinds;    // in KernelKind order, kinds present on either side
    std::vector<DiffLine> passes;   // forward, backward, optimizer, other
    std::vector<DiffLine> largest;  // kinds by |difference|, the largest first (at most 5)
    std::vector<std::string> warnings;
};

// The kind clustersim's roofline label stands for ("qkv dgrad" -> gemm, "norm bwd" -> norm, ...).
std::string simulated_kind(const std::string& label);

// Throws ConfigError for unreadable traces, a simulated trace without the rank's compute track,
// or iterations < 1.
DiffResult diff_traces(const DiffOptions& options);

void print_diff(std::ostream& out, const DiffResult& r);
nlohmann::json diff_json(const DiffResult& r);

}  // namespace cs::api
