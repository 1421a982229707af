#include "fit/kernel_table.hpp"

#include <algorithm>
#include <iterator>
#include <map>

namespace cs::api {
namespace {

bool contains(std::string_view s, std::string_view part) {
    return s.find(part) != std::string_view::npos;
}
bool starts(std::string_view s, std::string_view prefix) {
    return s.substr(0, prefix.size()) == prefix;
}

// What a rule sees of one kernel.
struct Kernel {
    const TraceGpuEvent& event;
    const KernelSite& site;
    const TraceDims& dims;
    std::string_view name() const { return event.name; }
    std::string_view op() const { return site.op ? std::string_view(site.op->name) : ""; }
    bool op_is(std::initializer_list<std::string_view> names) const {
        return std::find(names.begin(), names.end(), op()) != names.end();
    }
    // A generic, non-vectorised elementwise kernel (PyTorch's elementwise_kernel<...> over
    // strided or broadcast operands), not the vectorised or unrolled ones.
    bool strided() const {
        return contains(name(), "elementwise_kernel<") && !contains(name(), "vectorized") &&
               !contains(name(), "unrolled");
    }
    const TraceArg* arg(std::size_t i) const {
        return site.op && i < site.op->args.size() ? &site.op->args[i] : nullptr;
    }
    // Dimensions of the first tensor argument (the first of a list).
    const std::vector<std::int64_t>* shape0() const {
        const TraceArg* a = arg(0);
        return a && !a->shapes.empty() ? &a->shapes[0] : nullptr;
    }
    std::int64_t last_dim() const {
        const auto* s = shape0();
        return s && !s->empty() ? s->back() : 0;
    }
    std::size_t rank() const {
        const auto* s = shape0();
        return s ? s->size() : 0;
    }
    bool integer_tensor() const {
        for (const auto& a : site.op ? site.op->args : std::vector<TraceArg>{})
            if (!a.shapes.empty() && !a.list &&
                (a.type == "long int" || a.type == "long" || a.type == "int" ||
                 a.type == "unsigned int"))
                return true;
        return false;
    }
    bool elementwise_op() const {
        return op_is({"aten::mul", "aten::mul_", "aten::add", "aten::add_", "aten::sub",
                      "aten::sub_", "aten::neg", "aten::div", "aten::div_", "aten::cat",
                      "aten::copy_", "aten::to", "aten::_to_copy", "aten::fill_", "aten::zero_",
                      "aten::clone", "aten::contiguous", "aten::nll_loss_backward"});
    }
    // A cast between element sizes (a 16-bit tensor copied into fp32, or back).
    bool cast() const {
        if (!op_is({"aten::copy_", "aten::to", "aten::_to_copy"})) return false;
        const TraceArg* a = arg(0);
        const TraceArg* b = arg(1);
        return a && b && element_bytes(a->type) != element_bytes(b->type);
    }
};

using Match = bool (*)(const Kernel&);

struct Rule {
    KernelKind kind;
    std::string_view description;
    Match match;
};

// The table, as data. Order matters: the first matching rule wins.
constexpr Rule kRules[] = {
    {KernelKind::Memset, "a memset (cuBLAS's and cuDNN's workspaces, zeroed buffers)",
     [](const Kernel& k) { return k.event.cat == TraceGpuEvent::Cat::Memset; }},
    {KernelKind::Sort,
     "any kernel or copy inside aten::sort / aten::argsort (the MoE assignments sorted by "
     "expert: radix sorts, scans, their copies)",
     [](const Kernel& k) {
         return k.op_is({"aten::sort", "aten::argsort"}) || k.site.inside("aten::argsort") ||
                k.site.inside("aten::sort");
     }},
    {KernelKind::Unpermute,
     "aten::embedding_dense_backward (the embedding's gradient: a scatter-add of rows, with "
     "its sort) and aten::index_add_ (the scatter-add of expert rows back to tokens, and "
     "the permutation's backward)",
     [](const Kernel& k) {
         return k.op_is({"aten::embedding_dense_backward", "aten::index_add_"}) ||
                k.site.inside("aten::embedding_dense_backward");
     }},
    {KernelKind::Elementwise,
     "inside aten::embedding (the forward's gather of rows from the table)",
     [](const Kernel& k) { return k.site.inside("aten::embedding"); }},
    {KernelKind::GroupedGemm,
     "aten::_grouped_mm, or a CUTLASS grouped kernel (GroupProblemShape) and its "
     "prepare_grouped_gemm_data",
     [](const Kernel& k) {
         return k.op_is({"aten::_grouped_mm"}) || contains(k.name(), "GroupProblemShape") ||
                contains(k.name(), "prepare_grouped_gemm");
     }},
    {KernelKind::Attention,
     "an operator whose name contains \"attention\" (SDPA and its cuDNN, flash and "
     "efficient kernels with their backward helpers), or a kernel named sdpa, flash or fmha",
     [](const Kernel& k) {
         return contains(k.op(), "attention") || contains(k.name(), "sdpa") ||
                contains(k.name(), "flash") || contains(k.name(), "fmha");
     }},
    {KernelKind::Gemm,
     "aten::mm, addmm, bmm, baddbmm, linear, matmul, _scaled_mm, or a kernel named nvjet, "
     "gemm, cutlass, xmma or splitKreduce",
     [](const Kernel& k) {
         return k.op_is({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear",
                         "aten::matmul", "aten::_scaled_mm"}) ||
                contains(k.name(), "nvjet") || contains(k.name(), "gemm") ||
                contains(k.name(), "cutlass") || contains(k.name(), "xmma") ||
                contains(k.name(), "splitKreduce");
     }},
    {KernelKind::Optimizer, "aten::_fused_adam_, _fused_adamw_, _fused_sgd_ (the fused step)",
     [](const Kernel& k) {
         return contains(k.op(), "_fused_adam") || contains(k.op(), "_fused_sgd");
     }},
    {KernelKind::Norm, "aten::native_layer_norm, its backward, aten::layer_norm (LayerNorm)",
     [](const Kernel& k) {
         return k.op_is(
             {"aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::layer_norm"});
     }},
    {KernelKind::RmsNorm, "aten::_fused_rms_norm, its backward, aten::rms_norm (RMSNorm)",
     [](const Kernel& k) {
         return k.op_is(
             {"aten::_fused_rms_norm", "aten::_fused_rms_norm_backward", "aten::rms_norm"});
     }},
    {KernelKind::Activation, "aten::gelu, gelu_backward (the GPT MLP's activation)",
     [](const Kernel& k) {
         return k.op_is({"aten::gelu", "aten::gelu_backward"});
     }},
    {KernelKind::Swiglu, "aten::silu, silu_backward (SwiGLU's gate)",
     [](const Kernel& k) {
         return k.op_is({"aten::silu", "aten::silu_backward"});
     }},
    {KernelKind::Swiglu,
     "a non-vectorised aten::mul whose tensors have the last dimension of a silu input in the "
     "trace (SwiGLU's product with the strided up half, forward and backward)",
     [](const Kernel& k) {
         return k.op_is({"aten::mul"}) && k.strided() && k.dims.mlp_widths.count(k.last_dim()) > 0;
     }},
    {KernelKind::Softmax,
     "the loss: aten::_log_softmax, its backward, nll_loss_forward, and the cast of the "
     "logits to fp32 (a 16-to-32-bit cast whose last dimension is the log-softmax input's, "
     "the vocabulary)",
     [](const Kernel& k) {
         if (k.op_is({"aten::_log_softmax", "aten::_log_softmax_backward_data",
                      "aten::nll_loss_forward", "aten::nll_loss2d_forward"}))
             return true;
         if (!k.cast() || k.dims.vocab == 0 || k.last_dim() != k.dims.vocab) return false;
         const TraceArg* dst = k.arg(0);
         const TraceArg* src = k.arg(1);
         return dst && src && element_bytes(dst->type) == 4 && element_bytes(src->type) == 2;
     }},
    {KernelKind::Permute, "aten::index_select (a gather of token rows: the permutation)",
     [](const Kernel& k) {
         return k.op_is({"aten::index_select"}) || k.site.inside("aten::index_select");
     }},
    {KernelKind::Routing,
     "the MoE router: aten::topk, cumsum, scatter_add(_), gather (and their backward), "
     "arange, remainder; a softmax or cast over the experts (last dimension = top-k's "
     "input's); an elementwise op on integer tensors (the assignment's index arithmetic)",
     [](const Kernel& k) {
         if (k.op_is({"aten::topk", "aten::cumsum", "aten::scatter_add_", "aten::scatter_add",
                      "aten::gather", "aten::arange", "aten::remainder",
                      "aten::gather_backward"}) ||
             k.site.inside("GatherBackward") || k.site.inside("aten::gather_backward"))
             return true;
         if (k.dims.experts > 0 && k.last_dim() == k.dims.experts &&
             (k.op_is({"aten::_softmax", "aten::_softmax_backward_data"}) || k.cast() ||
              k.site.inside("SoftmaxBackward")))
             return true;
         return k.elementwise_op() && k.integer_tensor();
     }},
    {KernelKind::Rotary,
     "the rotate-half rotary embedding and its backward, on 4-D head-major tensors (batch, "
     "heads, sequence, ...): aten::neg and cat of halves (last dimension head_dim/2, the "
     "attention's q's), aten::mul by a 2-D (sequence, head_dim) table, and aten::add, add_ "
     "of two such tensors",
     [](const Kernel& k) {
         if (k.rank() != 4 || k.dims.head_dim == 0 || !(k.shape0()->at(1) < k.shape0()->at(2)))
             return false;
         if (k.op_is({"aten::neg", "aten::cat"})) return k.last_dim() * 2 == k.dims.head_dim;
         if (k.op_is({"aten::mul"})) {
             const TraceArg* b = k.arg(1);
             return b && b->shapes.size() == 1 && b->shapes[0].size() == 2 &&
                    b->shapes[0].back() == k.dims.head_dim;
         }
         return k.op_is({"aten::add", "aten::add_"}) && k.last_dim() == k.dims.head_dim;
     }},
    {KernelKind::Concat,
     "aten::cat of 4-D or higher inputs (the q, k and v gradients joined from their "
     "head-major layout)",
     [](const Kernel& k) { return k.op_is({"aten::cat"}) && k.rank() >= 4; }},
    {KernelKind::MixedAccumulate, "aten::add_ of a 16-bit tensor into an fp32 one (main grads)",
     [](const Kernel& k) {
         const TraceArg* a = k.arg(0);
         const TraceArg* b = k.arg(1);
         return k.op_is({"aten::add_"}) && a && b && element_bytes(a->type) == 4 &&
                element_bytes(b->type) == 2;
     }},
    {KernelKind::Reduce, "aten::sum, aten::mean, or a reduce_kernel (bias gradients)",
     [](const Kernel& k) {
         return k.op_is({"aten::sum", "aten::mean"}) || contains(k.name(), "reduce_kernel");
     }},
    {KernelKind::StridedCopy,
     "a non-vectorised same-type aten::copy_, mul or add (a strided tensor made contiguous, "
     "the MoE routing weights broadcast over the hidden size)",
     [](const Kernel& k) {
         if (!k.strided()) return false;
         if (k.op_is({"aten::copy_"})) {
             const TraceArg* a = k.arg(0);
             const TraceArg* b = k.arg(1);
             return a && b && a->type == b->type;
         }
         return k.op_is({"aten::mul", "aten::add"});
     }},
    {KernelKind::Elementwise,
     "every other elementwise operator: add, mul, sub, div, neg, fill_, zero_, copy_, "
     "to, _to_copy, cat, clone, nll_loss_backward's scatter, and the optimizer's _foreach_ "
     "kernels",
     [](const Kernel& k) {
         return k.elementwise_op() || starts(k.op(), "aten::_foreach_") ||
                k.event.cat == TraceGpuEvent::Cat::Memcpy;
     }},
};

}  // namespace

bool KernelSite::inside(std::string_view name) const {
    for (const auto* o : enclosing)
        if (contains(o->name, name)) return true;
    return false;
}

OpNesting::OpNesting(const TorchTrace& trace) : trace_(trace) {
    const auto& ops = trace.cpu_ops;
    parent_.assign(ops.size(), -1);
    // Per thread, the operators by start (longest first on ties): a stack of the ones still open.
    std::map<std::int64_t, std::vector<int>> by_thread;
    for (std::size_t i = 0; i < ops.size(); ++i)
        by_thread[ops[i].tid].push_back(static_cast<int>(i));
    for (auto& [tid, idx] : by_thread) {
        std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
            const auto& x = ops[static_cast<std::size_t>(a)];
            const auto& y = ops[static_cast<std::size_t>(b)];
            return x.ts_us != y.ts_us ? x.ts_us < y.ts_us : x.dur_us > y.dur_us;
        });
        std::vector<int> open;
        for (int i : idx) {
            const auto& o = ops[static_cast<std::size_t>(i)];
            while (!open.empty()) {
                const auto& top = ops[static_cast<std::size_t>(open.back())];
                if (o.ts_us < top.ts_us + top.dur_us) break;
                open.pop_back();
            }
            parent_[static_cast<std::size_t>(i)] = open.empty() ? -1 : open.back();
            open.push_back(i);
        }
    }
    for (std::size_t i = 0; i < ops.size(); ++i)
        if (ops[i].external_id >= 0) by_external_.emplace_back(ops[i].external_id, i);
    std::stable_sort(by_external_.begin(), by_external_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
}

KernelSite OpNesting::site(const TraceGpuEvent& event) const {
    KernelSite s;
    const auto it = std::lower_bound(
        by_external_.begin(), by_external_.end(), event.external_id,
        [](const std::pair<std::int64_t, int>& e, std::int64_t id) { return e.first < id; });
    if (it == by_external_.end() || it->first != event.external_id) return s;
    s.op = &trace_.cpu_ops[static_cast<std::size_t>(it->second)];
    for (int p = parent_[static_cast<std::size_t>(it->second)]; p >= 0;
         p = parent_[static_cast<std::size_t>(p)])
        s.enclosing.push_back(&trace_.cpu_ops[static_cast<std::size_t>(p)]);
    return s;
}

TraceDims trace_dims(const TorchTrace& trace) {
    TraceDims d;
    for (const auto& op : trace.cpu_ops) {
        if (op.args.empty() || op.args[0].shapes.empty() || op.args[0].shapes[0].empty()) continue;
        const std::int64_t last = op.args[0].shapes[0].back();
        if (op.name == "aten::silu" || op.name == "aten::gelu") d.mlp_widths.insert(last);
        if (op.name == "aten::_log_softmax") d.vocab = std::max(d.vocab, last);
        if (op.name == "aten::topk") d.experts = std::max(d.experts, last);
        if (op.name.find("scaled_dot_product") != std::string::npos &&
            op.args[0].shapes[0].size() == 4)
            d.head_dim = std::max(d.head_dim, last);
        if ((op.name == "aten::_fused_rms_norm" || op.name == "aten::native_layer_norm") &&
            op.args.size() > 2 && !op.args[2].shapes.empty() && op.args[2].shapes[0].size() == 1)
            d.hidden = std::max(d.hidden, op.args[2].shapes[0][0]);
    }
    return d;
}

const std::vector<KernelRule>& kernel_rules() {
    static const std::vector<KernelRule> out = [] {
        std::vector<KernelRule> v;
        for (const auto& r : kRules)
            v.push_back({r.kind, r.description});
        return v;
    }();
    return out;
}

KernelKind classify_kernel(const TraceGpuEvent& event, const KernelSite& site,
                           const TraceDims& dims, std::size_t* rule) {
    const Kernel k{event, site, dims};
    for (std::size_t i = 0; i < std::size(kRules); ++i)
        if (kRules[i].match(k)) {
            if (rule) *rule = i;
            return kRules[i].kind;
        }
    if (rule) *rule = std::size(kRules);
    return KernelKind::Unmapped;
}

}  // namespace cs::api
