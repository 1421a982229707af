#include "session/plan_guide.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "workload/flops.hpp"

namespace cs::api {

namespace {

// The guide's dense table: parameters (billions), the GPU counts it is for, and its starting
// point. Ranges are inclusive and read as the powers of two within them (PP=4-8: 4 or 8).
struct Row {
    double min_b, max_b;  // parameters, billions: [min, max)
    int min_gpus, max_gpus;
    int tp_lo, tp_hi, pp_lo, pp_hi, cp;
    const char* text;
};
constexpr std::array<Row, 5> kDense{{
    {0, 1, 1, 8, 1, 1, 1, 1, 1, "< 1B on 1-8 GPUs: DP only"},
    {1, 10, 8, 16, 2, 4, 1, 1, 1, "1-10B on 8-16 GPUs: TP=2-4 + DP"},
    {10, 70, 16, 64, 4, 8, 2, 4, 1, "10-70B on 16-64 GPUs: TP=4-8 + PP=2-4 + DP"},
    {70, 175, 64, 256, 8, 8, 4, 8, 1, "70-175B on 64-256 GPUs: TP=8 + PP=4-8 + DP"},
    {175, 1e18, 256, 1024, 8, 8, 8, 16, 2, "175-500B on 256-1024 GPUs: TP=8 + PP=8-16 + CP=2 + DP"},
}};

std::vector<int> powers(int lo, int hi) {
    std::vector<int> out;
    for (int v = 1; v <= hi; v *= 2)
        if (v >= lo) out.push_back(v);
    return out;
}

std::string billions(std::int64_t n) {
    std::ostringstream o;
    o.precision(3);
    o << static_cast<double>(n) / 1e9 << "B";
    return o.str();
}

// The row of the dense table for a model of `b` billion parameters (the last row above it).
const Row& dense_row(double b) {
    for (const auto& r : kDense)
        if (b >= r.min_b && b < r.max_b) return r;
    return kDense.back();
}

// TP's range: the row's, narrowed by the topology (within one NVLink domain, a node; TP=4 over a
// limited, Ethernet, network) and for mixture-of-experts models; each narrowing said in
// `reasoning`.
std::pair<int, int> tp_range(const workload::ExperimentSpec& spec, const Row& row, bool moe,
                             std::vector<std::string>& reasoning) {
    const auto& cluster = *spec.cluster;
    const int per_node = cluster.gpu_count() / std::max(1, cluster.node_count());
    bool ethernet = false;
    for (const auto& l : cluster.links())
        ethernet |= l.kind == topology::LinkKind::Ethernet;
    int tp_lo = row.tp_lo, tp_hi = row.tp_hi;
    if (ethernet && tp_hi > 4) {
        tp_lo = std::min(tp_lo, 4);
        tp_hi = 4;
        reasoning.push_back(
            "topology: Ethernet between nodes, a limited network in the guide's words -> TP=4");
    }
    if (tp_hi > per_node) {
        tp_hi = std::max(1, per_node);
        tp_lo = std::min(tp_lo, tp_hi);
        reasoning.push_back(
            "topology: " + std::to_string(per_node) +
            " GPUs per node; TP kept within one NVLink domain -> TP <= " + std::to_string(tp_hi));
    }
    if (moe && tp_hi > 2) {
        tp_hi = 2;
        tp_lo = std::min(tp_lo, 2);
        reasoning.push_back(
            "mixture of experts: TP can often stay at 1 or 2 (the guide) -> TP <= 2");
    }
    return {tp_lo, tp_hi};
}

// CP by the sequence: 2 for 8K-32K tokens, else the row's; said in `reasoning`.
int sequence_cp(const workload::ExperimentSpec& spec, const Row& row,
                std::vector<std::string>& reasoning) {
    int cp = row.cp;
    const auto seq = spec.training.seq_length;
    if (seq >= 8192 && seq <= 32768 && cp < 2) {
        cp = 2;
        reasoning.push_back("sequence: " + std::to_string(seq) +
                            " tokens, in the guide's 8K-32K -> CP=2");
    } else {
        reasoning.push_back("sequence: " + std::to_string(seq) +
                            " tokens -> CP=" + std::to_string(cp) +
                            (seq > 32768 ? " (the guide's sequence rule stops "
                                           "at 32K; its row's CP is kept)"
                                         : " (the row's)"));
    }
    return cp;
}

// Every tp x pp of the ranges (powers of two) with `cp`: the layouts that divide the GPUs, each
// with the experiment's own other axes, and those that do not.
void guide_layouts(const workload::ExperimentSpec& spec, std::pair<int, int> tps, const Row& row,
                   int cp, GuideAdvice& advice) {
    const int gpus = spec.layout.world_size();
    const auto& m = spec.model;
    PlanLayout own;
    own.vpp = spec.layout.vpp;
    own.micro_batch_size = static_cast<int>(spec.training.micro_batch_size);
    own.recompute = spec.training.recompute;
    own.sharding = spec.layout.sharding;
    own.schedule = spec.schedule;
    for (const int tp : powers(tps.first, tps.second))
        for (const int pp : powers(row.pp_lo, row.pp_hi)) {
            const int model = tp * pp * cp;
            if (gpus % model != 0) {
                advice.not_dividing.push_back(
                    "tp " + std::to_string(tp) + " x pp " + std::to_string(pp) + " x cp " +
                    std::to_string(cp) + " = " + std::to_string(model) + " does not divide the " +
                    std::to_string(gpus) + " GPUs");
                continue;
            }
            PlanLayout l = own;
            l.tp = tp;
            l.pp = pp;
            l.cp = cp;
            l.dp = gpus / model;
            if (m.experts > 0) {
                // EP: the largest divisor of the experts that divides dp x cp.
                l.ep = 1;
                for (int e = 1; e <= l.dp * l.cp; ++e)
                    if ((l.dp * l.cp) % e == 0 && m.experts % e == 0) l.ep = e;
            }
            advice.layouts.push_back(l);
        }
}

}  // namespace

GuideAdvice guide_advice(const workload::ExperimentSpec& spec) {
    GuideAdvice advice;
    const auto& m = spec.model;
    const bool moe = m.experts > 0;
    const std::int64_t total = workload::parameter_count(m);
    const std::int64_t sized = moe ? workload::active_parameter_count(m) : total;
    const Row& row = dense_row(static_cast<double>(sized) / 1e9);
    const int gpus = spec.layout.world_size();
    advice.reasoning.push_back(
        "model: " + billions(total) + " parameters" +
        (moe ? " (" + billions(sized) + " active; the guide sizes TP by the active ones)" : "") +
        " -> the row " + row.text);
    if (gpus < row.min_gpus || gpus > row.max_gpus)
        advice.reasoning.push_back("  this cluster has " + std::to_string(gpus) +
                                   " GPUs, outside the row's " + std::to_string(row.min_gpus) +
                                   "-" + std::to_string(row.max_gpus) +
                                   "; the row is applied as it is");
    const auto tps = tp_range(spec, row, moe, advice.reasoning);
    const int cp = sequence_cp(spec, row, advice.reasoning);
    guide_layouts(spec, tps, row, cp, advice);
    return advice;
}

}  // namespace cs::api
