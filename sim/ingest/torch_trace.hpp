// PyTorch profiler Chrome traces (torch.profiler's export_chrome_trace, `.json` or `.json.gz`),
// read as a stream (ingest/json_pull.hpp's pull parser over the chunks of a stream buffer that
// inflates gzip on the fly; nlohmann::json's SAX parser reads a text that is not JSON again, for
// its message), and the classification of their GPU kernels into the compute model's kinds
// (docs/calibrate.md).
//
// What is kept: GPU kernels, memsets and memcpys (name, start, duration, stream, External id,
// correlation); CPU operators (name, start, duration, thread, External id, Input Dims and Input
// type when the profiler recorded shapes); CUDA runtime and driver calls (name, start, duration,
// thread, correlation); CPU-side user annotations (name, start, duration). Everything else is
// skipped. Times are microseconds as in the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "workload/plan.hpp"

namespace cs::api {

// One argument of a CPU operator as the profiler records shapes: a tensor (one shape), a tensor
// list (several; possibly none recorded) or a scalar / non-tensor (no shape).
struct TraceArg {
    std::vector<std::vector<std::int64_t>> shapes;
    bool list = false;
    std::string type;  // "c10::BFloat16", "float", "TensorList", "Scalar", ...
    std::int64_t numel(std::size_t shape = 0) const;
};

struct TraceGpuEvent {
    enum class Cat : std::uint8_t { Kernel, Memset, Memcpy } cat = Cat::Kernel;
    std::string name;
    double ts_us = 0, dur_us = 0;
    std::int64_t device = 0, stream = -1, external_id = -1, correlation = -1;
    std::int64_t index = 0;  // position in traceEvents, for messages
    double end_us() const { return ts_us + dur_us; }
};

struct TraceCpuOp {
    std::string name;
    double ts_us = 0, dur_us = 0;
    std::int64_t tid = -1, external_id = -1;
    std::vector<TraceArg> args;  // empty without record_shapes
    bool has_shapes = false;
};

struct TraceRuntimeCall {
    std::string name;  // cudaLaunchKernel, cuLaunchKernelEx, cudaMemsetAsync, ...
    double ts_us = 0, dur_us = 0;
    std::int64_t tid = -1, correlation = -1;
};

// A range the program marked (record_function, the optimizer's "Optimizer.step#..." range).
struct TraceAnnotation {
    std::string name;
    double ts_us = 0, dur_us = 0;
};

struct TorchTrace {
    std::string source;              // the path as given
    std::vector<TraceGpuEvent> gpu;  // kernels, memsets, memcpys in file order
    std::vector<TraceCpuOp> cpu_ops;
    std::vector<TraceRuntimeCall> runtime;
    std::vector<TraceAnnotation> annotations;  // CPU-side user annotations
    std::int64_t events = 0;                   // traceEvents entries read
    std::int64_t bytes = 0;                    // JSON bytes read (after inflating)
    bool gzip = false;
};

// Bounds on what a trace may hold (docs/robustness.md), checked while it streams so that a
// gzip bomb, a FIFO or a trace of absurd size is refused before it fills memory:
// the JSON text after inflating, and its ratio to the gzip's size past the first 64 MiB; one
// string or number in it, or a stretch without either (lexers hold a token whole); the
// nesting of arrays and objects; the entries of traceEvents; a tensor dimension in Input Dims and
// the elements of one shape (products of dimensions are then within int64 with room to spare);
// a kernel's duration (the simulator's clock holds 2^63 ps, about 9.2e12 us).
inline constexpr std::int64_t kMaxTraceJsonBytes = std::int64_t{4} << 30;
inline constexpr std::int64_t kMaxTraceToken = std::int64_t{16} << 20;
inline constexpr std::int64_t kGzipRatioAfter = std::int64_t{64} << 20;
inline constexpr std::int64_t kMaxGzipRatio = 200;
inline constexpr std::size_t kMaxTraceDepth = 100;
inline constexpr std::int64_t kMaxTraceEvents = 50'000'000;
inline constexpr std::int64_t kMaxTraceDim = std::int64_t{1} << 40;
inline constexpr std::int64_t kMaxTraceShapeElements = std::int64_t{1} << 50;
inline constexpr double kMaxTraceDurationUs = 9.2e12;
// The default memory the kept events may take (--max-memory's default, 16 GiB).
inline constexpr std::int64_t kDefaultTraceMemory = std::int64_t{16} << 30;

// Reads a trace. Throws ConfigError naming the file and the byte offset (of the JSON text, after
// inflating) or the event index for a truncated or corrupt file, something that is not a Chrome
// trace, an event that lacks what its category needs, or a trace with no GPU kernels; and for a
// path that is no regular file (a FIFO, a device), a trace beyond the bounds above, or one whose
// kept events, twice over (what calibrate and diff build from them), would pass `max_memory`.
TorchTrace read_torch_trace(const std::filesystem::path& path,
                            std::int64_t max_memory = kDefaultTraceMemory);
// The same from text already in memory (tests); `display` names it in messages.
TorchTrace parse_torch_trace(std::string_view json, const std::string& display,
                             std::int64_t max_memory = kDefaultTraceMemory);

// The compute model's kinds of GPU work: workload::KernelKind, which simulated steps carry too.
// Every kernel of a trace gets one through the table of fit/kernel_table.hpp (docs/calibrate.md
// prints it).
using workload::KernelKind;
using workload::kKernelKinds;
std::string_view kernel_kind_name(KernelKind kind);

// Bytes a memory-bound operator moves through HBM, from its recorded shapes and types (0 when
// they do not say: no shapes, tensor lists without sizes). Reads every tensor input and writes
// the first one's size (in place, or a same-shaped output), except: fill_/zero_ write only; copy_
// reads the source and writes the destination; cat reads and writes every input; a LayerNorm
// backward reads the gradient and the input twice (input gradient, then gamma/beta) and writes
// the input gradient; a sum reads its input.
std::int64_t op_hbm_bytes(const TraceCpuOp& op, KernelKind kind);

// Bytes per element of a recorded type ("c10::BFloat16" 2, "float" 4, ...); 0 when not a
// tensor element type.
int element_bytes(std::string_view type);

}  // namespace cs::api
