#include "api/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "api/topology.hpp"
#include "core/errors.hpp"
#include "topology/topology_yaml.hpp"
#include "workload/roofline.hpp"

namespace cs::api {
namespace {

// Fewer host-bound launches than this and the host's cost is left unfitted: a handful of waits
// (after a synchronisation, at the start) says little about the cadence.
constexpr std::int64_t kMinHostSamples = 20;
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

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

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

struct KindIndex {
    api::KernelKind kind;
    std::optional<workload::MemKind> mem;
};
constexpr KindIndex kMemKinds[] = {
    {KernelKind::Elementwise, workload::MemKind::Elementwise},
    {KernelKind::Activation, workload::MemKind::Activation},
    {KernelKind::Norm, workload::MemKind::Norm},
    {KernelKind::Reduce, workload::MemKind::Reduce},
    {KernelKind::Concat, workload::MemKind::Concat},
    {KernelKind::StridedCopy, workload::MemKind::StridedCopy},
    {KernelKind::MixedAccumulate, workload::MemKind::MixedAccumulate},
    {KernelKind::Softmax, workload::MemKind::Softmax},
    {KernelKind::Optimizer, workload::MemKind::Optimizer},
};

}  // namespace

CalibrationResult calibrate_traces(const std::vector<TorchTrace>& traces,
                                   const topology::GpuModel& gpu) {
    CalibrationResult r;
    r.file.gpu_model = gpu.name;
    constexpr std::size_t kKinds = static_cast<std::size_t>(KernelKind::Other) + 1;
    std::array<std::int64_t, kKinds> count{};
    std::array<double, kKinds> total_us{};
    std::vector<GemmSample> gemms;
    std::int64_t gemm_unshaped = 0;
    std::array<std::vector<MemSample>, kKinds> mem;
    std::array<std::int64_t, kKinds> unsized{};
    std::map<std::string, CalibrationResult::Skipped> skipped;
    std::vector<double> gaps, host;
    double tensor_us = 0, duty_total_us = 0;

    for (const auto& t : traces) {
        r.file.sources.push_back(std::filesystem::path(t.source).filename().string());
        r.cpu_ops += static_cast<std::int64_t>(t.cpu_ops.size());
        std::unordered_map<std::int64_t, const TraceCpuOp*> ops;
        for (const auto& op : t.cpu_ops)
            if (op.external_id >= 0) ops.emplace(op.external_id, &op);
        std::unordered_map<std::int64_t, const TraceRuntimeCall*> calls;
        for (const auto& c : t.runtime)
            if (c.correlation >= 0) calls.emplace(c.correlation, &c);

        // Per operator (External id) and kind: the kernels' summed time, so that an operator
        // that launches several kernels of one kind (LayerNorm backward) is one sample.
        std::map<std::pair<std::int64_t, KernelKind>, double> per_op;
        std::vector<std::pair<KernelKind, const TraceGpuEvent*>> classified;
        for (const auto& g : t.gpu) {
            const auto it = ops.find(g.external_id);
            const TraceCpuOp* op = it == ops.end() ? nullptr : it->second;
            const KernelKind kind = classify_kernel(g, op);
            const auto ki = static_cast<std::size_t>(kind);
            ++count[ki];
            total_us[ki] += g.dur_us;
            r.gpu_ms += g.dur_us / 1000;
            r.kernels += g.cat == TraceGpuEvent::Cat::Kernel;
            r.memsets += g.cat == TraceGpuEvent::Cat::Memset;
            r.memcpys += g.cat == TraceGpuEvent::Cat::Memcpy;
            if (kind != KernelKind::Optimizer) {
                duty_total_us += g.dur_us;
                if (kind == KernelKind::Gemm || kind == KernelKind::Attention)
                    tensor_us += g.dur_us;
            }
            if (kind == KernelKind::Other) {
                auto& s = skipped[g.name];
                s.name = g.name;
                ++s.count;
                s.ms += g.dur_us / 1000;
            }
            if (op)
                per_op[{g.external_id, kind}] += g.dur_us;
            else if (kind == KernelKind::Gemm)
                ++gemm_unshaped;
            else if (kind != KernelKind::Other && kind != KernelKind::Memset &&
                     kind != KernelKind::Attention)
                ++unsized[ki];
        }
        for (const auto& [key, us] : per_op) {
            const auto& op = *ops.at(key.first);
            const auto ki = static_cast<std::size_t>(key.second);
            if (key.second == KernelKind::Gemm) {
                if (auto shape = gemm_shape(op); shape && us > 0)
                    gemms.push_back({*shape, us});
                else
                    ++gemm_unshaped;
            } else if (key.second != KernelKind::Attention && key.second != KernelKind::Memset &&
                       key.second != KernelKind::Other) {
                const auto bytes = op_hbm_bytes(op, key.second);
                if (bytes > 0 && us > 0)
                    mem[ki].push_back({static_cast<double>(bytes), us});
                else
                    ++unsized[ki];
            }
        }

        // Stream timelines: gaps between back-to-back GPU events, and where the GPU waited for
        // the host, the host's interval between the two launches.
        // Keyed by (device, stream): a trace may hold several GPUs with the same stream numbers.
        std::map<std::pair<std::int64_t, std::int64_t>, std::vector<const TraceGpuEvent*>> streams;
        for (const auto& g : t.gpu)
            streams[{g.device, g.stream}].push_back(&g);
        for (auto& [stream, evs] : streams) {
            std::stable_sort(evs.begin(), evs.end(),
                             [](const auto* a, const auto* b) { return a->ts_us < b->ts_us; });
            for (std::size_t i = 1; i < evs.size(); ++i) {
                const auto& a = *evs[i - 1];
                const auto& b = *evs[i];
                const auto ca = calls.find(a.correlation);
                const auto cb = calls.find(b.correlation);
                if (cb == calls.end()) continue;
                const double gap = b.ts_us - a.end_us();
                if (gap < 0) continue;
                if (cb->second->ts_us < a.end_us()) {
                    gaps.push_back(gap);
                } else if (ca != calls.end() && ca->second->tid == cb->second->tid) {
                    host.push_back(cb->second->ts_us - ca->second->ts_us);
                }
            }
        }
    }

    // The sustained clock factor at the trace's duty cycle (not fitted: see below).
    r.tensor_duty = duty_total_us > 0 ? tensor_us / duty_total_us : 0;
    r.sustained_factor = gpu.sustained.factor(r.tensor_duty);

    // GEMMs.
    {
        KindFit k;
        k.kind = "gemm";
        k.kernels = count[static_cast<std::size_t>(KernelKind::Gemm)];
        k.measured_ms = total_us[static_cast<std::size_t>(KernelKind::Gemm)] / 1000;
        k.samples = static_cast<std::int64_t>(gemms.size());
        if (gemms.empty()) {
            k.note = "no GEMM with recorded shapes (profile with record_shapes=True)";
            r.unfitted.push_back({"compute.gemm", k.note + "; the GPU model's curve applies"});
        } else {
            const double peak = workload::peak_rate(gpu, workload::Precision::Bf16).flops_per_s;
            std::int64_t smallest = gemms.front().shape.m;
            for (const auto& s : gemms)
                smallest = std::min({smallest, s.shape.m, s.shape.n, s.shape.k});
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
                r.unfitted.push_back({"compute.gemm.half_dim, exponent",
                                      "no GEMM dimension below " +
                                          fmt("%.0f", kKneeReach * gpu.gemm.half_dim) +
                                          " in the trace; kept from " + gpu.name});
            }
            best.curve.source = "calibration";
            r.file.gemm = best.curve;
            std::vector<double> pred, meas;
            for (const auto& s : gemms) {
                pred.push_back(gemm_predicted_us(s, gpu, best.curve, r.sustained_factor));
                meas.push_back(s.us);
                k.sample_ms += s.us / 1000;
            }
            residuals(k, pred, meas);
            std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>,
                     CalibrationResult::GemmShapeFit>
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
            std::stable_sort(
                r.gemm_shapes.begin(), r.gemm_shapes.end(),
                [](const auto& a, const auto& b) { return a.measured_ms > b.measured_ms; });
            k.value = "cap " + fmt("%.4g", best.curve.peak_fraction) + ", half_dim " +
                      fmt("%.4g", best.curve.half_dim) + ", exponent " +
                      fmt("%.4g", best.curve.exponent);
            if (gemm_unshaped > 0)
                k.note += "; " + std::to_string(gemm_unshaped) +
                          " GEMM operators without usable shapes (batched, not 16-bit or not "
                          "recorded) left out";
        }
        r.kinds.push_back(k);
    }
    {
        KindFit k;
        k.kind = "attention";
        k.kernels = count[static_cast<std::size_t>(KernelKind::Attention)];
        k.measured_ms = total_us[static_cast<std::size_t>(KernelKind::Attention)] / 1000;
        k.note = "not fitted: the flash-attention curve stays the catalogue's";
        if (k.kernels > 0)
            r.unfitted.push_back({"attention",
                                  "this version fits GEMMs and memory-bound kinds; "
                                  "the catalogue's flash-attention curve applies"});
        r.kinds.push_back(k);
    }

    // Memory-bound kinds: total bytes over total time, so the kind's total is reproduced.
    const double hbm = gpu.hbm_bandwidth.bytes_per_s;
    for (const auto& [kind, mk] : kMemKinds) {
        const auto ki = static_cast<std::size_t>(kind);
        KindFit k;
        k.kind = std::string(kernel_kind_name(kind));
        k.kernels = count[ki];
        k.measured_ms = total_us[ki] / 1000;
        k.samples = static_cast<std::int64_t>(mem[ki].size());
        if (k.kernels == 0) continue;
        double bytes = 0, us = 0;
        for (const auto& s : mem[ki]) {
            bytes += s.bytes;
            us += s.us;
        }
        if (mem[ki].empty() || us <= 0) {
            k.note = "no operator of this kind recorded tensor sizes";
            if (kind == KernelKind::Optimizer)
                k.note = "the fused optimizer's tensor lists carry no sizes in the trace";
            r.unfitted.push_back({"compute.hbm_fractions." + k.kind, k.note});
            r.kinds.push_back(k);
            continue;
        }
        const double f = std::min(1.0, bytes / (hbm * us * 1e-6));
        r.file.hbm_fractions[static_cast<std::size_t>(*mk)] =
            std::stod(fmt("%.4g", f));  // as written, so the report shows what applies
        std::vector<double> pred, meas;
        for (const auto& s : mem[ki]) {
            pred.push_back(s.bytes / (hbm * f) * 1e6);
            meas.push_back(s.us);
            k.sample_ms += s.us / 1000;
        }
        residuals(k, pred, meas);
        k.value = "hbm fraction " + fmt("%.4g", f) + " (" + fmt("%.2f", f * hbm / 1e12) + " TB/s)";
        if (unsized[ki] > 0)
            k.note = std::to_string(unsized[ki]) + " operators without sizes left out";
        r.kinds.push_back(k);
    }
    for (KernelKind kind : {KernelKind::Memset, KernelKind::Other}) {
        const auto ki = static_cast<std::size_t>(kind);
        KindFit k;
        k.kind = std::string(kernel_kind_name(kind));
        k.kernels = count[ki];
        k.measured_ms = total_us[ki] / 1000;
        k.note = kind == KernelKind::Memset
                     ? "modelled as launches (the memset before each cuBLAS/cuDNN call)"
                     : "skipped: not modelled by kind (see the list of skipped kernels)";
        if (k.kernels > 0) r.kinds.push_back(k);
    }
    r.skipped_kernels = count[static_cast<std::size_t>(KernelKind::Other)];
    r.skipped_ms = total_us[static_cast<std::size_t>(KernelKind::Other)] / 1000;
    for (const auto& [name, s] : skipped)
        r.skipped.push_back(s);
    std::stable_sort(r.skipped.begin(), r.skipped.end(),
                     [](const auto& a, const auto& b) { return a.ms > b.ms; });
    if (r.skipped.size() > 8) r.skipped.resize(8);

    // Launch gap and host cost.
    r.gap_samples = static_cast<std::int64_t>(gaps.size());
    if (!gaps.empty())
        r.file.launch_overhead =
            Time::ns(std::llround(median(gaps) * 1e3));  // whole ns, as written
    else
        r.unfitted.push_back({"compute.launch_overhead",
                              "no two kernels of one stream queued back to back (no runtime "
                              "launch calls with correlation ids?)"});
    r.host_samples = static_cast<std::int64_t>(host.size());
    if (r.host_samples >= kMinHostSamples)
        r.file.host_launch = Time::ns(std::llround(median(host) * 1e3));
    else
        r.unfitted.push_back(
            {"compute.host.launch", "the host ran ahead of the GPU: only " +
                                        std::to_string(r.host_samples) +
                                        " kernels waited for their launch (at least " +
                                        std::to_string(kMinHostSamples) + " needed)"});
    r.unfitted.push_back(
        {"sustained clock factor",
         "one duty cycle in the data (tensor-core share " + fmt("%.2f", r.tensor_duty) +
             "): the clock factor cannot be told apart from the GEMM cap; the GPU model's "
             "sustained rates apply (factor " +
             fmt("%.3f", r.sustained_factor) +
             " at that duty, by which the GEMM samples were scaled to burst)"});
    return r;
}

CalibrationResult calibrate(const CalibrateOptions& options) {
    if (options.traces.empty() && options.nccl_tests.empty())
        throw ConfigError(
            "calibrate: no measurement given; pass --torch-trace FILE and/or "
            "--nccl-tests FILE");
    std::optional<NetworkFitResult> network;
    if (!options.nccl_tests.empty())
        network = calibrate_network(
            {options.nccl_tests, options.topology, options.sets, options.nccl_sizes});
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
    const topology::GpuModel* gpu = nullptr;
    std::optional<LoadedTopology> topo;
    if (!options.topology.empty()) {
        topo = load_topology(options.topology, {});
        for (const auto& m : topo->cluster.gpu_models())
            if (m.name == options.gpu_model) gpu = &m;
        if (!gpu) {
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
        }
    } else {
        gpu = topology::find_catalog_model(options.gpu_model);
        if (!gpu)
            throw ConfigError("--gpu-model " + options.gpu_model +
                              ": not in the GPU catalogue; expected " +
                              config::join_alternatives(topology::catalog_names()) +
                              ", or give --topology with a gpu_models entry of that name");
    }
    std::vector<TorchTrace> traces;
    for (const auto& t : options.traces)
        traces.push_back(read_torch_trace(t));
    auto r = calibrate_traces(traces, *gpu);
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

void print_compute(std::ostream& out, const CalibrationResult& r);

void print_calibration(std::ostream& out, const CalibrationResult& r) {
    if (r.compute) print_compute(out, r);
    if (r.network) {
        if (r.compute) out << "\n";
        print_network_fit(out, *r.network);
    }
}

void print_compute(std::ostream& out, const CalibrationResult& r) {
    out << "calibration for " << r.file.gpu_model << " from " << r.file.sources.size()
        << " trace(s): " << r.kernels << " kernels, " << r.memsets << " memsets, " << r.memcpys
        << " memcpys, " << fmt("%.1f", r.gpu_ms) << " ms of GPU time\n\n";
    char line[512];
    std::snprintf(line, sizeof line, "%-17s %7s %7s %10s %10s %10s %8s %8s  %s\n", "kind",
                  "kernels", "samples", "meas ms", "samp ms", "fit ms", "med res", "worst",
                  "fitted");
    out << line;
    for (const auto& k : r.kinds) {
        const bool fitted = k.fitted_ms >= 0;
        std::snprintf(line, sizeof line, "%-17s %7lld %7lld %10.3f %10s %10s %8s %8s  %s\n",
                      k.kind.c_str(), static_cast<long long>(k.kernels),
                      static_cast<long long>(k.samples), k.measured_ms,
                      fitted ? fmt("%.3f", k.sample_ms).c_str() : "-",
                      fitted ? fmt("%.3f", k.fitted_ms).c_str() : "-",
                      fitted ? fmt("%+.1f%%", 100 * k.median_residual).c_str() : "-",
                      fitted ? fmt("%+.1f%%", 100 * k.worst_residual).c_str() : "-",
                      k.value.empty() ? "-" : k.value.c_str());
        out << line;
        if (!k.note.empty()) out << "                  " << k.note << "\n";
    }
    if (!r.gemm_shapes.empty()) {
        out << "\nGEMM shapes (m x n x k), the largest first:\n";
        std::size_t shown = 0;
        for (const auto& g : r.gemm_shapes) {
            if (++shown > 12) {
                out << "  ... " << r.gemm_shapes.size() - 12 << " more in --json\n";
                break;
            }
            std::snprintf(line, sizeof line,
                          "  %6lld x %6lld x %6lld  %5lldx  %9.3f ms  fit %9.3f  %+.1f%%\n",
                          static_cast<long long>(g.m), static_cast<long long>(g.n),
                          static_cast<long long>(g.k), static_cast<long long>(g.count),
                          g.measured_ms, g.fitted_ms, 100 * (g.fitted_ms / g.measured_ms - 1));
            out << line;
        }
    }
    out << "\nlaunch gap (GPU side): ";
    if (r.file.launch_overhead)
        out << format_time(*r.file.launch_overhead) << ", median of " << r.gap_samples
            << " back-to-back gaps\n";
    else
        out << "unfitted\n";
    out << "host launch: ";
    if (r.file.host_launch)
        out << format_time(*r.file.host_launch) << ", median of " << r.host_samples
            << " host-bound launch intervals\n";
    else
        out << "unfitted (" << r.host_samples << " host-bound launches)\n";
    out << "tensor-core duty " << fmt("%.3f", r.tensor_duty) << ", sustained factor "
        << fmt("%.3f", r.sustained_factor) << "\n";
    if (r.skipped_kernels > 0) {
        out << "\nskipped " << r.skipped_kernels << " kernels (" << fmt("%.3f", r.skipped_ms)
            << " ms) not modelled by kind; the largest:\n";
        for (const auto& s : r.skipped)
            out << "  " << fmt("%9.3f", s.ms) << " ms "
                << fmt("%5.0f", static_cast<double>(s.count)) << "x  " << s.name.substr(0, 100)
                << "\n";
    }
    out << "\nunfitted:\n";
    for (const auto& u : r.unfitted)
        out << "  " << u.what << ": " << u.why << "\n";
    for (const auto& w : r.warnings)
        out << "warning: " << w << "\n";
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
    nlohmann::json kinds = nlohmann::json::array();
    for (const auto& k : r.kinds) {
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
    j["kinds"] = kinds;
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
    nlohmann::json sk = nlohmann::json::array();
    for (const auto& s : r.skipped)
        sk.push_back({{"name", s.name}, {"count", s.count}, {"ms", s.ms}});
    j["skipped"] = {{"kernels", r.skipped_kernels}, {"ms", r.skipped_ms}, {"largest", sk}};
    j["warnings"] = r.warnings;
    return j;
}

std::string calibration_file_text(const CalibrationResult& r) {
    std::vector<std::string> header{
        "clustersim calibration (docs/calibrate.md): written by `clustersim calibrate`."};
    if (r.compute) {
        header.push_back("Reference it from an experiment: compute: {calibration: THIS_FILE}.");
        header.push_back("Fit: " + std::to_string(r.kernels) +
                         " kernels; GEMM samples at tensor-core duty " +
                         fmt("%.3f", r.tensor_duty) + " (sustained factor " +
                         fmt("%.3f", r.sustained_factor) + ").");
        for (const auto& u : r.unfitted)
            header.push_back("Unfitted: " + u.what + ": " + u.why);
    }
    if (r.network) {
        header.push_back("Network: network: {calibration: THIS_FILE}; fitted on " +
                         r.network->topology + ".");
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

}  // namespace cs::api
