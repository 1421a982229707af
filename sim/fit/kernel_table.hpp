// The one table that maps every GPU kernel of a PyTorch profiler trace to the compute model's
// kind of op (workload::KernelKind, workload/plan.hpp), for `clustersim calibrate` and `clustersim
// diff`.
//
// A kernel is known by its name, the innermost operator that launched it (matched by External
// id) and the operators enclosing that one on its thread (an autograd node, an argsort, the
// embedding's backward), and, where a tensor's role decides, by the model's sizes the trace
// shows (TraceDims: the MLP width from silu's input, the vocabulary from the log-softmax's, the
// experts from top-k's). The rules are tried in order and the first that matches wins; a kernel
// no rule matches is `unmapped` (an explicit residual, never folded into another kind).
// kernel_rules() lists them with their descriptions, which docs/calibrate.md reproduces.
#pragma once

#include <cstdint>
#include <set>
#include <string_view>
#include <vector>

#include "ingest/torch_trace.hpp"

namespace cs::api {

// Model sizes read off the trace's own operators (0 / empty when the trace has none).
struct TraceDims {
    std::set<std::int64_t> mlp_widths;  // last dimension of silu / gelu inputs
    std::int64_t vocab = 0;             // last dimension of the log-softmax's input
    std::int64_t experts = 0;           // last dimension of top-k's input (the router's scores)
    std::int64_t hidden = 0;            // the norms' weight length
    std::int64_t head_dim = 0;          // the attention's q (batch, heads, sequence, head_dim)
};
TraceDims trace_dims(const TorchTrace& trace);

// Where a kernel was launched: its operator and the operators enclosing it, innermost first.
struct KernelSite {
    const TraceCpuOp* op = nullptr;
    std::vector<const TraceCpuOp*> enclosing;
    bool inside(std::string_view name) const;  // some enclosing operator's name contains `name`
};

// Every CPU operator's enclosing operators on its thread, by index into trace.cpu_ops (the
// innermost first); computed once per trace.
class OpNesting {
  public:
    explicit OpNesting(const TorchTrace& trace);
    KernelSite site(const TraceGpuEvent& event) const;

  private:
    const TorchTrace& trace_;
    std::vector<int> parent_;  // per cpu op, its enclosing op (-1: none)
    std::vector<std::pair<std::int64_t, int>> by_external_;  // sorted (External id, op index)
};

struct KernelRule {
    KernelKind kind;
    std::string_view description;  // what the rule matches, for docs/calibrate.md
};
// The rules in the order they are tried.
const std::vector<KernelRule>& kernel_rules();

// The kind of one GPU event; `rule`, when given, receives the index of the rule that matched.
KernelKind classify_kernel(const TraceGpuEvent& event, const KernelSite& site,
                           const TraceDims& dims, std::size_t* rule = nullptr);

}  // namespace cs::api
