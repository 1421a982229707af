// clustersim diff: lays a simulated timeline of one rank (clustersim's Chrome JSON trace,
// report/chrome_trace) against a measured PyTorch profiler trace of the same configuration, per
// op kind, per pass (forward, backward, optimizer) and per layer pass, and lists the largest
// departures.
//
// Kinds are the compute model's (workload::KernelKind, workload/plan.hpp): measured kernels are
// classified as `clustersim calibrate` classifies them; simulated steps by their "kernel" argument,
// which the trace writer takes from the step (workload::KernelKind, set where the roofline emits
// it; its name is not read). A trace without the argument (an older clustersim's) is refused.
// Passes: simulated steps belong to the pass slice that contains them (its "pass" argument says
// which pass it is; its name is not read), or are the optimizer step; measured kernels belong to
// the backward when their operator ran on the autograd engine's thread, to the optimizer when they
// are optimizer kernels or were launched in the optimizer's ranges ("Optimizer.step#...", or a
// range named "optimizer"), else to the forward. A measured kernel is booked as the simulation
// books its work: a memset as its operator's other kernels (the workspace of a cuBLAS or cuDNN
// call, whose launch that call's simulated step carries), a kernel of the optimizer's ranges as
// the optimizer (one simulated op). Measured times are GPU kernel time, each kernel with the
// launch gap before it (fit/stream_gaps.hpp: the GPU's own gap when the kernel was queued before
// the previous one ended; a kernel the GPU waited for, or the first of its stream, has none
// while the simulation charges one for every launch), divided by the number of iterations the
// profile holds.
//
// Layer passes. A simulated step is the embedding's, the head's (final norm, logits, loss) or the
// layers', as its "part" argument says (workload::ModelPart): a layer's share of the layers' steps
// is their total over the pass's layer count, whether the trace holds a step once per layer or
// folded into one slice with a `repeat` argument. A profile carries no layer marks, so the measured
// passes are cut at their norm operators: a forward instance (a run of forward kernels between
// other passes' kernels) holds k norms per layer plus the final ones (GPT: 2 x 12 + 1 = 25; k and
// the final count are the simulated model's layer and head norm steps, and a profile holding
// another count gets no layer rows); layer i's forward runs from its first norm to the next
// layer's, the kernels before the first norm are the embedding's, those from the final norm on the
// head's. A backward instance is cut the same way in reverse: the head's backward up to and
// including the final norm's backward, then each layer's up to and including its last norm backward
// (so the residual add just after it falls to the layer below), then the embedding's. Gradient
// accumulation (mixed_accumulate) is its own row on both sides, since the profile does not say
// which layer a main-grad add is for. Instances whose norm count differs from the common one (e.g.
// main-thread kernels between the passes that no optimizer range holds) are left out of the layer
// rows and counted in a warning.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "ingest/torch_trace.hpp"

namespace cs::api {

struct DiffOptions {
    std::string simulated;  // clustersim run --trace FILE (.json)
    std::string measured;   // PyTorch profiler trace (.json, .json.gz)
    int rank = 0;           // the simulated GPU ("GPU r compute" track)
    int iterations = 1;     // iterations in the measured profile
    // The memory the measured trace's events may take (--max-memory; read_torch_trace).
    std::int64_t max_memory = kDefaultTraceMemory;
};

struct DiffLine {
    std::string name;  // kind or pass
    double simulated_ms = 0, measured_ms = 0;
    std::int64_t simulated_ops = 0, measured_kernels = 0;
    double difference_ms() const { return simulated_ms - measured_ms; }
    double relative() const { return measured_ms > 0 ? simulated_ms / measured_ms - 1 : 0; }
};

// One layer's forward or backward (or the parts outside the layers), mean per microbatch pass.
struct LayerPassLine {
    std::string name;  // "layer 3 forward", "embedding forward", "head backward", ...
    int layer = -1;    // the model's layer number; -1 outside the layers
    std::string pass;  // forward, backward
    double simulated_ms = 0, measured_ms = 0;                // mean per pass instance
    std::int64_t simulated_passes = 0, measured_passes = 0;  // instances averaged
    std::int64_t measured_kernels = 0;                       // over all measured instances
    double difference_ms() const { return simulated_ms - measured_ms; }
    double relative() const { return measured_ms > 0 ? simulated_ms / measured_ms - 1 : 0; }
};

struct DiffResult {
    std::string simulated, measured;
    int rank = 0, iterations = 1;
    int microbatches = 0, layers = 0;  // from the simulated forward passes
    double simulated_iteration_ms = 0;
    // Compute steps; kernels and their launch gaps, per iteration.
    double simulated_busy_ms = 0, measured_busy_ms = 0;
    std::vector<DiffLine> kinds;    // in KernelKind order, kinds present on either side
    std::vector<DiffLine> passes;   // forward, backward, optimizer, other
    std::vector<DiffLine> largest;  // kinds by |difference|, the largest first (at most 5)
    // Per layer pass (empty, with a warning, when the measured passes cannot be cut into layers):
    // embedding forward, layer 0..L-1 forward, head forward, head backward, layer L-1..0
    // backward, embedding backward, gradient accumulation.
    std::vector<LayerPassLine> layer_passes;
    std::vector<LayerPassLine> largest_layer_passes;  // by |difference| (at most 5)
    // When the two sides look like different configurations (kinds of kernels on one side only,
    // another norm count per forward pass, compute time off by more than 2x), what differs; also
    // the first of `warnings`. Empty otherwise.
    std::string mismatch;
    std::vector<std::string> warnings;
};

// Throws ConfigError for unreadable traces, a simulated trace without the rank's compute track,
// or iterations < 1.
DiffResult diff_traces(const DiffOptions& options);

nlohmann::json diff_json(const DiffResult& r);

}  // namespace cs::api
