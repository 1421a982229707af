#include "fit/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "core/errors.hpp"
#include "fit/format.hpp"
#include "fit/kernel_table.hpp"
#include "fit/stream_gaps.hpp"
#include "workload/memory.hpp"
#include "workload/plan.hpp"
#include "workload/roofline.hpp"

namespace cs::api {
namespace {

// Fewer host-bound launches than this and the host's cost is left unfitted: a handful of waits
// (after a synchronisation, at the start) says little about the cadence.
constexpr std::int64_t kMinHostSamples = 20;
// A launch gap or a host interval above 1 s is no launch cost (a trace with a pause in it).
constexpr double kMaxFittedHostUs = 1e6;
// The knee of the GEMM curve is fitted only when some sample has a dimension below this multiple
// of the GPU model's half_dim; above it every factor f(x) is near 1 and only the cap is seen.
constexpr double kKneeReach = 2.0;

struct GemmSample {
    workload::GemmShape shape;
    double us = 0;
};
struct MemSample {
    double bytes = 0, us = 0;
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const auto n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) {
    if (v.empty()) return 0;
    double sum = 0;
    for (double x : v)
        sum += x;
    return sum / static_cast<double>(v.size());
}

using detail::fmt;

// The (m, n, k) of a 16-bit GEMM operator from its recorded shapes; nullopt when it has none or
// is batched (bmm: the model has no batched GEMM curve) or not 16-bit.
std::optional<workload::GemmShape> gemm_shape(const TraceCpuOp& op) {
    const auto& a = op.args;
    const auto two_d = [&](std::size_t i) {
        return i < a.size() && a[i].shapes.size() == 1 && a[i].shapes[0].size() == 2 && !a[i].list;
    };
    const auto half = [&](std::size_t i) { return i < a.size() && element_bytes(a[i].type) == 2; };
    std::size_t x = 0;
    if (op.name == "aten::mm" || op.name == "aten::matmul")
        x = 0;
    else if (op.name == "aten::addmm")
        x = 1;
    else if (op.name == "aten::linear") {
        if (a.size() < 2 || a[0].shapes.size() != 1 || !two_d(1) || !half(0)) return std::nullopt;
        const auto& in = a[0].shapes[0];
        if (in.empty()) return std::nullopt;
        std::int64_t m = 1;
        for (std::size_t i = 0; i + 1 < in.size(); ++i)
            m *= in[i];
        return workload::GemmShape{m, a[1].shapes[0][0], in.back()};
    } else
        return std::nullopt;
    if (!two_d(x) || !two_d(x + 1) || !half(x) || !half(x + 1)) return std::nullopt;
    const auto& l = a[x].shapes[0];
    const auto& r = a[x + 1].shapes[0];
    if (l[1] != r[0]) return std::nullopt;
    return workload::GemmShape{l[0], r[1], l[1]};
}

struct GemmFit {
    topology::GemmCurve curve;
    double sse = 0;
};

// ln t = ln(flops / peak) - ln cap - ln F(x0, p): for given (x0, p) the best ln cap is the mean
// of ln(flops / (peak F)) - ln t, in closed form.
GemmFit fit_cap(const std::vector<GemmSample>& samples, double peak, double factor,
                topology::GemmCurve curve) {
    curve.peak_fraction = 1;
    const auto& cal = workload::default_calibration();
    std::vector<double> d;
    d.reserve(samples.size());
    for (const auto& s : samples) {
        const double f = workload::gemm_efficiency(s.shape, curve, cal);
        // The trace's kernels ran at the sustained rate of its duty cycle: their burst time is
        // the measured one times the factor.
        d.push_back(std::log(s.shape.flops().value / (peak * f)) - std::log(s.us * 1e-6 * factor));
    }
    double mean = 0;
    for (double v : d)
        mean += v;
    mean /= static_cast<double>(d.size());
    GemmFit fit;
    fit.curve = curve;
    fit.curve.peak_fraction = std::min(1.0, std::exp(mean));
    for (double v : d)
        fit.sse +=
            (v - std::log(fit.curve.peak_fraction)) * (v - std::log(fit.curve.peak_fraction));
    return fit;
}

double gemm_predicted_us(const GemmSample& s, const topology::GpuModel& gpu,
                         const topology::GemmCurve& curve, double factor) {
    workload::RooflineCompute rc;
    rc.gemm_curve = curve;
    rc.launch_overhead = Time::zero();
    const Time t = workload::gemm_time(s.shape, workload::Precision::Bf16, gpu, rc);
    return static_cast<double>(t.count_ps()) * 1e-6 / factor;
}

void residuals(KindFit& k, const std::vector<double>& predicted,
               const std::vector<double>& measured) {
    std::vector<double> r;
    double worst = 0;
    k.fitted_ms = 0;
    for (std::size_t i = 0; i < predicted.size(); ++i) {
        k.fitted_ms += predicted[i] / 1000;
        const double e = predicted[i] / measured[i] - 1;
        r.push_back(e);
        if (std::abs(e) > std::abs(worst)) worst = e;
    }
    k.median_residual = median(r);
    k.worst_residual = worst;
}

// The memory-bound kinds a calibration file carries a fraction for (the latency-bound router
// and sort kernels keep the catalogue's constants).
struct KindIndex {
    api::KernelKind kind;
    workload::MemKind mem;
};
constexpr KindIndex kMemKinds[] = {
    {KernelKind::Elementwise, workload::MemKind::Elementwise},
    {KernelKind::Activation, workload::MemKind::Activation},
    {KernelKind::Norm, workload::MemKind::Norm},
    {KernelKind::RmsNorm, workload::MemKind::RmsNorm},
    {KernelKind::Reduce, workload::MemKind::Reduce},
    {KernelKind::Concat, workload::MemKind::Concat},
    {KernelKind::StridedCopy, workload::MemKind::StridedCopy},
    {KernelKind::MixedAccumulate, workload::MemKind::MixedAccumulate},
    {KernelKind::Softmax, workload::MemKind::Softmax},
    {KernelKind::Optimizer, workload::MemKind::Optimizer},
    {KernelKind::Rotary, workload::MemKind::Rotary},
    {KernelKind::Swiglu, workload::MemKind::Swiglu},
    {KernelKind::Permute, workload::MemKind::Permute},
    {KernelKind::Unpermute, workload::MemKind::Unpermute},
};

std::size_t ki(KernelKind k) {
    return static_cast<std::size_t>(k);
}

// The 4-D tensors of an attention operator's arguments: forward (q, k, v, ...), backward
// (dO, q, k, v, O, ...).
std::vector<const std::vector<std::int64_t>*> four_d(const TraceCpuOp& op) {
    std::vector<const std::vector<std::int64_t>*> out;
    for (const auto& a : op.args)
        if (!a.list && a.shapes.size() == 1 && a.shapes[0].size() == 4) out.push_back(&a.shapes[0]);
    return out;
}

// The attention block an SDPA operator ran, from its recorded shapes (b, heads, s, d).
std::optional<workload::AttentionBlock> attention_block_of(const TraceCpuOp& op, bool backward) {
    const auto t = four_d(op);
    const std::size_t q = backward ? 1 : 0;
    if (t.size() < q + 2) return std::nullopt;
    const auto& qs = *t[q];
    const auto& ks = *t[q + 1];
    workload::AttentionBlock b;
    b.b = qs[0];
    b.heads = qs[1];
    b.q_len = qs[2];
    b.head_dim = qs[3];
    b.kv_heads = ks[1];
    b.kv_len = ks[2];
    b.causal = true;
    return b;
}

// A grouped GEMM operator's problem: experts, tokens per expert, n, k, and whether the tokens
// are the reduction (the weight gradient), from _grouped_mm's recorded shapes: a (T, K) against
// stacked weights (E, K, N), or a (N, T) against (T, K) with E offsets.
struct GroupedSample {
    std::int64_t experts = 0, tokens = 0, n = 0, k = 0;
    bool reduce = false;
    double us = 0;
};
std::optional<GroupedSample> grouped_of(const TraceCpuOp& op) {
    if (op.args.size() < 3) return std::nullopt;
    const auto shape = [&](std::size_t i) -> const std::vector<std::int64_t>* {
        const auto& a = op.args[i];
        return a.shapes.size() == 1 ? &a.shapes[0] : nullptr;
    };
    const auto* a = shape(0);
    const auto* b = shape(1);
    const auto* offs = shape(2);
    if (!a || !b || !offs || a->size() != 2 || offs->size() != 1 || (*offs)[0] <= 0)
        return std::nullopt;
    GroupedSample g;
    g.experts = (*offs)[0];
    if (b->size() == 3) {
        g.tokens = (*a)[0] / g.experts;
        g.k = (*a)[1];
        g.n = (*b)[2];
    } else if (b->size() == 2) {
        g.reduce = true;
        g.n = (*a)[0];
        g.tokens = (*a)[1] / g.experts;
        g.k = (*b)[1];
    } else {
        return std::nullopt;
    }
    if (g.tokens <= 0 || g.n <= 0 || g.k <= 0) return std::nullopt;
    return g;
}

bool is_attention_backward(const std::string& name) {
    return name.find("backward") != std::string::npos;
}

// Training iterations a trace holds: the optimizer's step ranges (torch.optim marks each step
// "Optimizer.step#..."), else its fused-optimizer calls, else 1.
int count_iterations(const TorchTrace& t, std::vector<double>* step_starts) {
    std::vector<double> starts;
    for (const auto& a : t.annotations)
        if (a.name.rfind("Optimizer.step#", 0) == 0) starts.push_back(a.ts_us);
    std::sort(starts.begin(), starts.end());
    if (step_starts) *step_starts = starts;
    if (!starts.empty()) return static_cast<int>(starts.size());
    int fused = 0;
    for (const auto& op : t.cpu_ops)
        fused += op.name.find("_fused_adam") != std::string::npos ||
                 op.name.find("_fused_sgd") != std::string::npos;
    return std::max(fused, 1);
}

// The experiment's model bytes and kernels per iteration by MemKind, on its one GPU (pp = 1):
// every microbatch's forward and backward steps and the optimizer step.
struct ModelKinds {
    std::array<double, workload::kMemKindCount> bytes{}, kernels{};
};
ModelKinds model_bytes(const workload::ExperimentSpec& spec) {
    ModelKinds out;
    auto& bytes = out.bytes;
    const auto plan = workload::plan_iteration(spec, 1, false, [](int) { return 0; });
    const double m = plan.microbatches;
    for (const auto& vs : plan.virtual_stages)
        for (const auto* pass : {&vs.forward, &vs.backward})
            for (const auto& st : pass->steps)
                if (st.kind == workload::Step::Kind::Compute && !st.tensor_core) {
                    bytes[static_cast<std::size_t>(st.mem_kind)] +=
                        m * static_cast<double>(st.hbm_bytes.value) * st.repeat;
                    out.kernels[static_cast<std::size_t>(st.mem_kind)] +=
                        m * static_cast<double>(st.launches) * st.repeat;
                }
    const auto& mdl = spec.model;
    const auto held = workload::parameters_per_gpu(mdl, spec.layout, 0, mdl.layers, true, true);
    const auto owned =
        workload::optimizer_parameters_per_gpu(mdl, spec.layout, 0, mdl.layers, true, true);
    if (spec.training.optimizer == workload::Optimizer::Adam)
        for (const auto& k : workload::optimizer_step_kernels(held, owned, spec.training.precision,
                                                              spec.compute.roofline)) {
            bytes[static_cast<std::size_t>(k.kind)] += static_cast<double>(k.bytes.value);
            out.kernels[static_cast<std::size_t>(k.kind)] += 1;
        }
    return out;
}

// Does the trace's model look like the experiment's? Warnings for what differs.
void check_model(const workload::ExperimentSpec& spec, const TraceDims& dims,
                 const std::array<std::int64_t, kKernelKinds>& count, std::int64_t norm_ops,
                 int iterations, std::vector<std::string>& warnings) {
    const auto& m = spec.model;
    const std::string where = "the trace's model does not match " + spec.source + ": ";
    if (dims.hidden > 0 && dims.hidden != m.hidden_size)
        warnings.push_back(where + "its norms are " + std::to_string(dims.hidden) +
                           " wide, the experiment's hidden_size is " +
                           std::to_string(m.hidden_size));
    const bool trace_moe = count[ki(KernelKind::GroupedGemm)] > 0 || dims.experts > 0;
    const bool trace_swiglu = count[ki(KernelKind::Swiglu)] > 0;
    const bool trace_rotary = count[ki(KernelKind::Rotary)] > 0;
    const std::string family = trace_moe ? "moe" : (trace_swiglu ? "llama" : "gpt");
    const std::string model_family =
        m.experts > 0 ? "moe" : (m.activation == workload::Activation::SwiGlu ? "llama" : "gpt");
    if (family != model_family)
        warnings.push_back(where + "its kernels are a " + family + " model's (" +
                           (trace_moe ? "router and grouped GEMMs" : "no router") + ", " +
                           (trace_swiglu ? "SwiGLU" : "GELU") + "), the experiment is " +
                           model_family);
    if (trace_rotary != m.rotary && m.activation == workload::Activation::SwiGlu)
        warnings.push_back(where + (trace_rotary ? "it runs" : "it has no") +
                           " rotary embedding kernels, the experiment's model.rotary is " +
                           (m.rotary ? "true" : "false"));
    if (trace_moe && dims.experts > 0 && dims.experts != m.experts)
        warnings.push_back(where + "its router scores " + std::to_string(dims.experts) +
                           " experts, the experiment has " + std::to_string(m.experts));
    const int microbatches = spec.training.microbatches(spec.layout);
    if (norm_ops > 0 && microbatches > 0 && spec.layout.pp == 1) {
        // Two norms per layer and the final one, per microbatch forward.
        const double per = static_cast<double>(norm_ops) / iterations / microbatches;
        const long layers = std::lround((per - 1) / 2);
        if (layers != m.layers)
            warnings.push_back(where + "its forward passes run " + fmt("%.0f", per) +
                               " norms per microbatch (" + std::to_string(layers) +
                               " layers and the final norm), the experiment has " +
                               std::to_string(m.layers) + " layers");
    }
    if (dims.vocab > 0 && m.vocab_size > 0 &&
        dims.vocab != (m.vocab_size + spec.layout.tp - 1) / spec.layout.tp)
        warnings.push_back(where + "its loss is over " + std::to_string(dims.vocab) +
                           " logits, the experiment's vocabulary per GPU is " +
                           std::to_string((m.vocab_size + spec.layout.tp - 1) / spec.layout.tp));
}

struct AttentionSample {
    workload::AttentionBlock block;
    bool backward = false;
    double us = 0;
};

// What the traces hold, gathered for the fits: per kind the kernels and their time, the shaped
// samples of each fitted kind, what could not be sized, the unmapped kernels, the launch gaps
// and host intervals.
struct TraceSamples {
    std::array<std::int64_t, kKernelKinds> count{};
    std::array<double, kKernelKinds> total_us{};
    std::vector<GemmSample> gemms;
    std::vector<GroupedSample> grouped;
    std::vector<AttentionSample> attention;
    std::int64_t gemm_unshaped = 0, gemm_skinny = 0, grouped_unshaped = 0, attention_unshaped = 0;
    std::array<std::vector<MemSample>, kKernelKinds> mem;
    std::array<std::int64_t, kKernelKinds> unsized{};
    std::map<std::string, CalibrationResult::Unmapped> unmapped;
    std::vector<double> gaps, host;
    double tensor_us = 0, duty_total_us = 0;
    std::int64_t norm_ops = 0;
    int iterations = 0;
    TraceDims first_dims;
};

// Per operator (External id) and kind: its kernels' summed time, so that an operator that
// launches several kernels of one kind (a norm's backward) is one sample.
using OperatorTimes = std::map<std::pair<std::int64_t, KernelKind>, double>;

// Counts trace `t`'s kernels by kind into `s` and `r`, and sums them per operator; returns the
// GPU's first and last instant (us).
std::pair<double, double> add_kernels(CalibrationResult& r, TraceSamples& s, const TorchTrace& t,
                                      const TraceDims& dims, OperatorTimes& per_op) {
    const OpNesting nesting(t);
    double first_us = HUGE_VAL, last_us = 0;
    for (const auto& g : t.gpu) {
        const KernelSite site = nesting.site(g);
        const KernelKind kind = classify_kernel(g, site, dims);
        const TraceCpuOp* op = site.op;
        ++s.count[ki(kind)];
        s.total_us[ki(kind)] += g.dur_us;
        first_us = std::min(first_us, g.ts_us);
        last_us = std::max(last_us, g.end_us());
        r.gpu_ms += g.dur_us / 1000;
        r.kernels += g.cat == TraceGpuEvent::Cat::Kernel;
        r.memsets += g.cat == TraceGpuEvent::Cat::Memset;
        r.memcpys += g.cat == TraceGpuEvent::Cat::Memcpy;
        if (kind != KernelKind::Optimizer) {
            s.duty_total_us += g.dur_us;
            if (kind == KernelKind::Gemm || kind == KernelKind::GroupedGemm ||
                kind == KernelKind::Attention)
                s.tensor_us += g.dur_us;
        }
        if (kind == KernelKind::Unmapped) {
            const std::string name =
                g.name.substr(0, 90) + (op ? " (" + op->name + ")" : std::string());
            auto& u = s.unmapped[name];
            u.name = name;
            ++u.count;
            u.ms += g.dur_us / 1000;
        }
        if (op)
            per_op[{g.external_id, kind}] += g.dur_us;
        else if (kind == KernelKind::Gemm)
            ++s.gemm_unshaped;
        else if (kind != KernelKind::Unmapped && kind != KernelKind::Memset)
            ++s.unsized[ki(kind)];
    }
    return {first_us, last_us};
}

// The operators' samples of the fitted kinds: GEMM, grouped GEMM and attention shapes, and the
// memory-bound kinds' bytes, from the operators' recorded shapes.
void add_operator_samples(TraceSamples& s, const TorchTrace& t, const OperatorTimes& per_op) {
    std::unordered_map<std::int64_t, const TraceCpuOp*> ops;
    for (const auto& op : t.cpu_ops)
        if (op.external_id >= 0) ops.emplace(op.external_id, &op);
    for (const auto& [key, us] : per_op) {
        const auto& op = *ops.at(key.first);
        const KernelKind kind = key.second;
        if (us <= 0) continue;
        if (kind == KernelKind::Gemm) {
            // A GEMM with a dimension below the curve's smallest fitted one (an MoE router's
            // experts) pads its tiles: the curve is not fitted there.
            const auto shape = gemm_shape(op);
            const double floor = workload::default_calibration().gemm_smallest_fitted_dim;
            if (shape && std::min({shape->m, shape->n, shape->k}) >= floor)
                s.gemms.push_back({*shape, us});
            else if (shape)
                ++s.gemm_skinny;
            else
                ++s.gemm_unshaped;
        } else if (kind == KernelKind::GroupedGemm) {
            if (auto g = grouped_of(op)) {
                g->us = us;
                s.grouped.push_back(*g);
            } else {
                ++s.grouped_unshaped;
            }
        } else if (kind == KernelKind::Attention) {
            const bool backward = is_attention_backward(op.name);
            if (auto b = attention_block_of(op, backward))
                s.attention.push_back({*b, backward, us});
            else
                ++s.attention_unshaped;
        } else if (kind != KernelKind::Memset && kind != KernelKind::Unmapped) {
            const auto bytes = op_hbm_bytes(op, kind);
            if (bytes > 0)
                s.mem[ki(kind)].push_back({static_cast<double>(bytes), us});
            else
                ++s.unsized[ki(kind)];
        }
    }
}

// Stream timelines (fit/stream_gaps.hpp): the launch gaps, and where the GPU waited for the
// host, the host's interval between the two launches.
void add_stream_gaps(TraceSamples& s, const TorchTrace& t) {
    const StreamGaps g = stream_gaps(t);
    for (double gap : g.launch_gap_us)
        if (gap >= 0) s.gaps.push_back(gap);
    s.host.insert(s.host.end(), g.host_us.begin(), g.host_us.end());
}

// Reads every trace into the samples; fills the result's counts, sources and the profiled
// iteration.
TraceSamples collect_samples(CalibrationResult& r, const std::vector<TorchTrace>& traces,
                             const CalibrateContext& context) {
    TraceSamples s;
    for (std::size_t ti = 0; ti < traces.size(); ++ti) {
        const auto& t = traces[ti];
        r.file.sources.push_back(std::filesystem::path(t.source).filename().string());
        r.cpu_ops += static_cast<std::int64_t>(t.cpu_ops.size());
        std::vector<double> step_starts;
        const int trace_iterations =
            context.iterations > 0 ? context.iterations : count_iterations(t, &step_starts);
        s.iterations = std::max(s.iterations, trace_iterations);
        // The iteration with the profiler: the optimizer steps' spacing when the trace holds
        // three or more (two are too few to tell it from the warm-up), else the GPU's span.
        if (ti == 0 && step_starts.size() >= 3)
            r.profiled_iteration_ms = (step_starts.back() - step_starts.front()) /
                                      static_cast<double>(step_starts.size() - 1) / 1000;
        const TraceDims dims = trace_dims(t);
        if (ti == 0) s.first_dims = dims;
        for (const auto& op : t.cpu_ops)
            s.norm_ops +=
                op.name == "aten::_fused_rms_norm" || op.name == "aten::native_layer_norm";
        OperatorTimes per_op;
        const auto [first_us, last_us] = add_kernels(r, s, t, dims, per_op);
        if (ti == 0 && r.profiled_iteration_ms <= 0 && last_us > first_us)
            r.profiled_iteration_ms = (last_us - first_us) / trace_iterations / 1000;
        add_operator_samples(s, t, per_op);
        add_stream_gaps(s, t);
    }
    return s;
}

// The GEMM curve: the cap in closed form on the GPU model's knee, and the knee too (a grid)
// when the samples reach it; per shape, the measured and fitted times.
void fit_gemm(CalibrationResult& r, const TraceSamples& s, const topology::GpuModel& gpu) {
    KindFit k;
    k.kind = "gemm";
    k.kernels = s.count[ki(KernelKind::Gemm)];
    k.measured_ms = s.total_us[ki(KernelKind::Gemm)] / 1000;
    k.samples = static_cast<std::int64_t>(s.gemms.size());
    if (s.gemms.empty()) {
        k.note = "no GEMM with recorded shapes (profile with record_shapes=True)";
        r.unfitted.push_back({"compute.gemm", k.note + "; the GPU model's curve applies"});
        r.kinds.push_back(k);
        return;
    }
    const auto& gemms = s.gemms;
    const double peak = workload::peak_rate(gpu, workload::Precision::Bf16).flops_per_s;
    std::int64_t smallest = gemms.front().shape.m;
    for (const auto& g : gemms)
        smallest = std::min({smallest, g.shape.m, g.shape.n, g.shape.k});
    GemmFit best = fit_cap(gemms, peak, r.sustained_factor, gpu.gemm);
    if (static_cast<double>(smallest) < kKneeReach * gpu.gemm.half_dim) {
        // Grid over the knee, the cap in closed form at each point; ties keep the first.
        for (int xi = 0; xi <= 72; ++xi)
            for (int pi = 0; pi <= 30; ++pi) {
                topology::GemmCurve c = gpu.gemm;
                c.half_dim = 200 + 25.0 * xi;
                c.exponent = 1 + 0.1 * pi;
                const GemmFit f = fit_cap(gemms, peak, r.sustained_factor, c);
                if (f.sse < best.sse - 1e-12) best = f;
            }
        k.note = "cap, half_dim and exponent fitted";
    } else {
        k.note = "cap fitted; the samples' smallest dimension " + std::to_string(smallest) +
                 " is above " + fmt("%.0f", kKneeReach * gpu.gemm.half_dim) +
                 " (2 x half_dim): the knee is kept from " + gpu.name;
        r.unfitted.push_back(
            {"compute.gemm.half_dim, exponent", "no GEMM dimension below " +
                                                    fmt("%.0f", kKneeReach * gpu.gemm.half_dim) +
                                                    " in the trace; kept from " + gpu.name});
    }
    best.curve.source = "calibration";
    r.file.gemm = best.curve;
    std::vector<double> pred, meas;
    for (const auto& g : gemms) {
        pred.push_back(gemm_predicted_us(g, gpu, best.curve, r.sustained_factor));
        meas.push_back(g.us);
        k.sample_ms += g.us / 1000;
    }
    residuals(k, pred, meas);
    std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, CalibrationResult::GemmShapeFit>
        by_shape;
    for (std::size_t i = 0; i < gemms.size(); ++i) {
        const auto& g = gemms[i].shape;
        auto& e = by_shape[{g.m, g.n, g.k}];
        e.m = g.m;
        e.n = g.n;
        e.k = g.k;
        ++e.count;
        e.measured_ms += meas[i] / 1000;
        e.fitted_ms += pred[i] / 1000;
    }
    for (const auto& [shape, e] : by_shape)
        r.gemm_shapes.push_back(e);
    std::stable_sort(r.gemm_shapes.begin(), r.gemm_shapes.end(),
                     [](const auto& a, const auto& b) { return a.measured_ms > b.measured_ms; });
    k.value = "cap " + fmt("%.4g", best.curve.peak_fraction) + ", half_dim " +
              fmt("%.4g", best.curve.half_dim) + ", exponent " + fmt("%.4g", best.curve.exponent);
    if (s.gemm_unshaped > 0)
        k.note += "; " + std::to_string(s.gemm_unshaped) +
                  " GEMM operators without usable shapes (batched, not 16-bit or not "
                  "recorded) left out";
    if (s.gemm_skinny > 0)
        k.note += "; " + std::to_string(s.gemm_skinny) +
                  " GEMMs with a dimension below 512 (routers) left out: the curve "
                  "pads their tiles instead";
    r.kinds.push_back(k);
}

// A rate as a multiplier on the catalogue's: the model's total time over the measured total
// (as written, 4 digits), with the samples' residuals; nullopt without samples.
std::optional<double> scale_fit(KindFit& k, const std::vector<double>& model_us,
                                const std::vector<double>& meas_us) {
    double model = 0, measured = 0;
    for (std::size_t i = 0; i < model_us.size(); ++i) {
        model += model_us[i];
        measured += meas_us[i];
    }
    k.samples = static_cast<std::int64_t>(model_us.size());
    if (model_us.empty() || measured <= 0) return std::nullopt;
    const double scale = std::stod(fmt("%.4g", model / measured));
    std::vector<double> pred;
    for (double m : model_us)
        pred.push_back(m / scale);
    residuals(k, pred, meas_us);
    k.sample_ms = measured / 1000;
    return scale;
}

// The model's time for a sample at the catalogue's rates (no launch overhead).
workload::RooflineCompute catalogue_rates() {
    workload::RooflineCompute catalogue;
    catalogue.launch_overhead = Time::zero();
    return catalogue;
}

// The grouped GEMM's rate on the catalogue's grouped curve. Model times are at the trace's
// clocks: its tensor-core kernels ran at the sustained factor of its duty cycle.
void fit_grouped(CalibrationResult& r, const TraceSamples& s, const topology::GpuModel& gpu) {
    const workload::RooflineCompute catalogue = catalogue_rates();
    KindFit k;
    k.kind = "grouped_gemm";
    k.kernels = s.count[ki(KernelKind::GroupedGemm)];
    k.measured_ms = s.total_us[ki(KernelKind::GroupedGemm)] / 1000;
    std::vector<double> model_us, meas_us;
    for (const auto& g : s.grouped) {
        const Time t = workload::grouped_gemm_time(g.experts, g.tokens, g.n, g.k, g.reduce,
                                                   workload::Precision::Bf16, gpu, catalogue);
        model_us.push_back(t.seconds() * 1e6 / r.sustained_factor);
        meas_us.push_back(g.us);
    }
    if (const auto scale = scale_fit(k, model_us, meas_us)) {
        r.file.grouped_gemm = *scale;
        k.value = "rate x " + fmt("%.4g", *scale) + " of the catalogue's grouped curve";
    } else if (k.kernels > 0) {
        k.note = "no _grouped_mm operator with recorded shapes";
    }
    if (s.grouped_unshaped > 0)
        k.note += std::to_string(s.grouped_unshaped) + " operators without usable shapes";
    if (k.kernels > 0) r.kinds.push_back(k);
}

// Flash attention's forward and backward efficiencies on the catalogue's curve.
void fit_attention(CalibrationResult& r, const TraceSamples& s, const topology::GpuModel& gpu) {
    const workload::RooflineCompute catalogue = catalogue_rates();
    for (const bool backward : {false, true}) {
        KindFit k;
        k.kind = backward ? "attention bwd" : "attention";
        std::vector<double> model_us, meas_us;
        for (const auto& a : s.attention) {
            if (a.backward != backward) continue;
            const Time t = workload::attention_time(a.block, backward, gpu, catalogue);
            model_us.push_back(t.seconds() * 1e6 / r.sustained_factor);
            meas_us.push_back(a.us);
        }
        k.kernels = static_cast<std::int64_t>(model_us.size());
        for (double us : meas_us)
            k.measured_ms += us / 1000;
        if (const auto scale = scale_fit(k, model_us, meas_us)) {
            (backward ? r.file.attention_backward : r.file.attention_forward) = *scale;
            k.value = "efficiency x " + fmt("%.4g", *scale) + " of the catalogue's curve";
            k.note =
                "operators' calls (all their kernels) against the attention block of their "
                "shapes";
        } else if (s.count[ki(KernelKind::Attention)] > 0) {
            k.note = "no attention operator with recorded 4-D shapes";
            r.unfitted.push_back(
                {std::string("compute.attention.") + (backward ? "backward" : "forward"),
                 k.note + "; the catalogue's curve applies"});
        }
        if (k.kernels > 0 || !backward) r.kinds.push_back(k);
    }
    if (s.attention_unshaped > 0)
        r.warnings.push_back(std::to_string(s.attention_unshaped) +
                             " attention operators without recorded shapes were left out of the "
                             "attention fit");
}

// The model's bytes and kernels per memory-bound kind with the experiment (a one-stage one;
// r.model_bytes says so), else none, with a warning either way it is not.
ModelKinds model_kinds(CalibrationResult& r, const workload::ExperimentSpec* spec) {
    ModelKinds of_model;
    if (!spec) {
        r.warnings.push_back(
            "no --experiment: the memory-bound kinds' bytes come from the operators' recorded "
            "shapes, which count some kernels differently from the model (give the experiment "
            "the trace ran for the model's own bytes and the model checks)");
    } else if (spec->layout.pp != 1) {
        r.warnings.push_back(spec->source +
                             " has pipeline stages: the trace is one GPU's, so the kinds' "
                             "bytes come from the recorded shapes, not from the model");
    } else {
        of_model = model_bytes(*spec);
        r.model_bytes = true;
    }
    return of_model;
}

// One memory-bound kind's bytes and time to fit (both per iteration with the model's bytes,
// else over the sized samples), or a note and no fit.
struct MemoryKindData {
    double bytes = 0, us = 0;
    bool fit = true;
};

// With the model's bytes: the kind's, and its time per iteration less its fixed time per kernel.
// A kind the model has no op of goes to the residual (`residual_us`, `unmapped`).
MemoryKindData model_kind_data(CalibrationResult& r, KindFit& k, TraceSamples& s,
                               const ModelKinds& of_model, KernelKind kind, workload::MemKind mk,
                               double latency_us, double& residual_us) {
    const auto i = ki(kind);
    MemoryKindData d;
    d.bytes = of_model.bytes[static_cast<std::size_t>(mk)];
    d.us = s.total_us[i] * (1.0 / r.iterations) -
           latency_us * of_model.kernels[static_cast<std::size_t>(mk)];
    k.samples = r.iterations;
    if (d.bytes > 0 && d.us <= 0) {
        k.note =
            "the kind's kernels take no longer than their fixed time per kernel: "
            "the catalogue's fraction applies";
        r.unfitted.push_back({"compute.hbm_fractions." + k.kind, k.note});
        d.fit = false;
    } else if (d.bytes <= 0) {
        k.note = "the experiment's model has no op of this kind: its time goes to the residual";
        residual_us += s.total_us[i];
        CalibrationResult::Unmapped u{"kind " + k.kind + " (no op in the model)", s.count[i],
                                      s.total_us[i] / 1000};
        s.unmapped[u.name] = u;
        d.fit = false;
    }
    return d;
}

// Without the model: the sized operators' bytes and their time less the fixed time per kernel.
MemoryKindData sample_kind_data(CalibrationResult& r, KindFit& k, const TraceSamples& s,
                                KernelKind kind, double latency_us) {
    const auto& samples = s.mem[ki(kind)];
    MemoryKindData d;
    k.samples = static_cast<std::int64_t>(samples.size());
    for (const auto& m : samples) {
        d.bytes += m.bytes;
        d.us += m.us - latency_us;
    }
    if (samples.empty() || d.us <= 0) {
        k.note = kind == KernelKind::Optimizer
                     ? "the fused optimizer's tensor lists carry no sizes in the trace "
                       "(give --experiment)"
                     : "no operator of this kind recorded tensor sizes";
        r.unfitted.push_back({"compute.hbm_fractions." + k.kind, k.note});
        d.fit = false;
    }
    return d;
}

// Memory-bound kinds: total bytes over total time, so the kind's total is reproduced. With the
// experiment, the model's bytes for the kind per iteration; else the operators' bytes. Returns
// the residual's time: the unmapped kernels' and the kinds' the model has no op of.
double fit_memory_kinds(CalibrationResult& r, TraceSamples& s, const topology::GpuModel& gpu,
                        const workload::ExperimentSpec* spec) {
    const double hbm = gpu.hbm_bandwidth.bytes_per_s;
    const ModelKinds of_model = model_kinds(r, spec);
    double residual_us = s.total_us[ki(KernelKind::Unmapped)];
    for (const auto& [kind, mk] : kMemKinds) {
        const auto i = ki(kind);
        KindFit k;
        k.kind = std::string(kernel_kind_name(kind));
        k.kernels = s.count[i];
        k.measured_ms = s.total_us[i] / 1000;
        if (k.kernels == 0) continue;
        // A kind with a fixed time per kernel (RooflineCalibration::kind_latency) moves its
        // bytes in what is left.
        const double latency_us = workload::default_calibration().kind_latency(mk).seconds() * 1e6;
        const MemoryKindData d =
            r.model_bytes ? model_kind_data(r, k, s, of_model, kind, mk, latency_us, residual_us)
                          : sample_kind_data(r, k, s, kind, latency_us);
        if (!d.fit) {
            r.kinds.push_back(k);
            continue;
        }
        const double f = std::min(1.0, d.bytes / (hbm * d.us * 1e-6));
        r.file.hbm_fractions[static_cast<std::size_t>(mk)] =
            std::stod(fmt("%.4g", f));  // as written, so the report shows what applies
        std::vector<double> pred, meas;
        if (r.model_bytes) {
            const double fixed = latency_us * of_model.kernels[static_cast<std::size_t>(mk)];
            pred.push_back(d.bytes / (hbm * f) * 1e6 + fixed);
            meas.push_back(d.us + fixed);
            k.sample_ms = (d.us + fixed) / 1000;
            k.note = "the model's " + fmt("%.3g", d.bytes / 1e9) +
                     " GB per iteration over the kind's kernel time per iteration";
        } else {
            for (const auto& m : s.mem[i]) {
                pred.push_back(m.bytes / (hbm * f) * 1e6 + latency_us);
                meas.push_back(m.us);
                k.sample_ms += m.us / 1000;
            }
            if (s.unsized[i] > 0)
                k.note = std::to_string(s.unsized[i]) + " operators without sizes left out";
        }
        residuals(k, pred, meas);
        k.value = "hbm fraction " + fmt("%.4g", f) + " (" + fmt("%.2f", f * hbm / 1e12) + " TB/s)";
        r.kinds.push_back(k);
    }
    return residual_us;
}

// The GPU time of every kernel of the traces (us).
double all_kernels_us(const TraceSamples& s) {
    double all_us = 0;
    for (double us : s.total_us)
        all_us += us;
    return all_us;
}

// The kinds left at the catalogue's constants (listed with their time), the unmapped kernels
// (the largest 12), and the residual: unmapped time over mapped time per iteration.
void fit_residual(CalibrationResult& r, const TraceSamples& s, double residual_us) {
    for (KernelKind kind :
         {KernelKind::Routing, KernelKind::Sort, KernelKind::Memset, KernelKind::Unmapped}) {
        const auto i = ki(kind);
        KindFit k;
        k.kind = std::string(kernel_kind_name(kind));
        k.kernels = s.count[i];
        k.measured_ms = s.total_us[i] / 1000;
        k.note = kind == KernelKind::Memset
                     ? "modelled as launches (the memsets before cuBLAS and cuDNN calls)"
                 : kind == KernelKind::Unmapped
                     ? "no op of the model: the residual (listed below)"
                     : "latency-bound: the catalogue's fixed times apply";
        if (k.kernels > 0) r.kinds.push_back(k);
    }
    for (const auto& [name, u] : s.unmapped)
        r.unmapped.push_back(u);
    std::stable_sort(r.unmapped.begin(), r.unmapped.end(),
                     [](const auto& a, const auto& b) { return a.ms > b.ms; });
    if (r.unmapped.size() > 12) r.unmapped.resize(12);
    const double per_iteration = 1.0 / r.iterations;
    const double all_us = all_kernels_us(s);
    r.unmapped_ms = residual_us / 1000 * per_iteration;
    r.mapped_ms = (all_us - residual_us) / 1000 * per_iteration;
    if (r.mapped_ms > 0 && residual_us > 0) {
        const double residual = std::stod(fmt("%.4g", r.unmapped_ms / r.mapped_ms));
        // The file holds a residual below 1 (docs/calibrate.md): more unmapped time than mapped
        // is not a model clustersim maps, and no constant would make it one.
        if (residual < 1)
            r.file.residual = residual;
        else
            r.unfitted.push_back(
                {"compute.residual", "the kernels no op of the model runs take " +
                                         fmt("%.3g", r.unmapped_ms) + " ms, more than the " +
                                         fmt("%.3g", r.mapped_ms) +
                                         " ms that map: the trace is not of a model clustersim "
                                         "maps (a residual must be below 1)"});
    }
}

// The GPU-side launch gap and the GPU's own time per iteration: its kernels and a launch gap
// before each. The model charges the gap once per kernel, so the constant is the gaps' mean: it
// gives back their total. A gap in which another stream's event ended is not counted
// (fit/stream_gaps.hpp): the kernel may have waited for it (an NCCL kernel, an event), and such
// waits would swell a mean. Not their median: the gaps are bimodal (about 1.0-1.2 us between
// elementwise kernels, 1.5-2 us next to GEMMs and memsets), and the median falls in whichever
// mode the model's kernel mix makes the larger (docs/calibrate.md, "Launch gap").
void fit_launch_gap(CalibrationResult& r, const TraceSamples& s, std::size_t traces) {
    r.gap_samples = static_cast<std::int64_t>(s.gaps.size());
    const double gap_us = s.gaps.empty() ? 0 : mean(s.gaps);
    if (!s.gaps.empty() && gap_us > kMaxFittedHostUs)
        r.unfitted.push_back(
            {"compute.launch_overhead", "the launch gaps' mean, " + fmt("%.3g", gap_us) +
                                            " us, is above the 1 s a launch may take"});
    else if (!s.gaps.empty())
        r.file.launch_overhead = Time::ns(std::llround(gap_us * 1e3));  // whole ns, as written
    else
        r.unfitted.push_back({"compute.launch_overhead",
                              "no two kernels of one stream queued back to back (no runtime "
                              "launch calls with correlation ids?)"});
    const double per_iteration = 1.0 / r.iterations;
    r.busy_ms =
        (all_kernels_us(s) + static_cast<double>(r.kernels + r.memsets + r.memcpys) * gap_us) /
        1000 * per_iteration / std::max<std::size_t>(traces, 1);
}

// The host's cost per launch: the median interval between launches the GPU waited for, scaled
// to the run without the profiler when its iteration time is given; or why it is left unfitted.
void fit_host(CalibrationResult& r, const TraceSamples& s, const CalibrateContext& context) {
    r.host_samples = static_cast<std::int64_t>(s.host.size());
    const double measured_ms = context.iteration_time_s * 1e3;
    if (r.host_samples >= kMinHostSamples && median(s.host) > kMaxFittedHostUs) {
        r.unfitted.push_back(
            {"compute.host.launch", "the median interval between launches, " +
                                        fmt("%.3g", median(s.host)) +
                                        " us, is above the 1 s a launch may take"});
    } else if (r.host_samples < kMinHostSamples) {
        r.unfitted.push_back(
            {"compute.host.launch", "the host ran ahead of the GPU: only " +
                                        std::to_string(r.host_samples) +
                                        " kernels waited for their launch (at least " +
                                        std::to_string(kMinHostSamples) + " needed)"});
    } else if (measured_ms <= 0) {
        r.file.host_launch = Time::ns(std::llround(median(s.host) * 1e3));
        r.warnings.push_back(
            "the host's cost per launch (" + fmt("%.1f", median(s.host)) +
            " us) includes the profiler's own overhead per operator; give --iteration-time, the "
            "iteration measured without the profiler, to correct it");
    } else if (measured_ms <= r.busy_ms * 1.05 || r.profiled_iteration_ms <= r.busy_ms) {
        r.unfitted.push_back(
            {"compute.host.launch",
             "without the profiler the run is GPU-bound (iteration " + fmt("%.2f", measured_ms) +
                 " ms against " + fmt("%.2f", r.busy_ms) +
                 " ms of kernels and launch gaps): the host's cost is hidden there, and the "
                 "trace's host intervals (" +
                 fmt("%.1f", median(s.host)) +
                 " us) are the profiler's; the framework's own cost applies"});
    } else {
        // The host-bound part of an iteration grows with the profiler's overhead: scale the
        // profiled launch interval by the exposed time without the profiler over with it.
        const double exposed = (measured_ms - r.busy_ms) / (r.profiled_iteration_ms - r.busy_ms);
        r.file.host_launch = Time::ns(std::llround(median(s.host) * std::min(1.0, exposed) * 1e3));
    }
}

}  // namespace

CalibrationResult calibrate_traces(const std::vector<TorchTrace>& traces,
                                   const topology::GpuModel& gpu, const CalibrateContext& context) {
    CalibrationResult r;
    r.file.gpu_model = gpu.name;
    TraceSamples s = collect_samples(r, traces, context);
    r.iterations = std::max(s.iterations, 1);

    // The sustained clock factor at the trace's duty cycle (not fitted: see below).
    r.tensor_duty = s.duty_total_us > 0 ? s.tensor_us / s.duty_total_us : 0;
    r.sustained_factor = gpu.sustained.factor(r.tensor_duty);

    const workload::ExperimentSpec* spec = context.experiment;
    if (spec) check_model(*spec, s.first_dims, s.count, s.norm_ops, r.iterations, r.warnings);
    fit_gemm(r, s, gpu);
    fit_grouped(r, s, gpu);
    fit_attention(r, s, gpu);
    const double residual_us = fit_memory_kinds(r, s, gpu, spec);
    fit_residual(r, s, residual_us);
    fit_launch_gap(r, s, traces.size());
    fit_host(r, s, context);
    r.unfitted.push_back(
        {"sustained clock factor",
         "one duty cycle in the data (tensor-core share " + fmt("%.2f", r.tensor_duty) +
             "): the clock factor cannot be told apart from the GEMM cap; the GPU model's "
             "sustained rates apply (factor " +
             fmt("%.3f", r.sustained_factor) +
             " at that duty, by which the GEMM samples were scaled to burst)"});
    return r;
}

}  // namespace cs::api
