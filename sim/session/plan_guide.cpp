#include "session/plan_guide.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <sstream>

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

}  // namespace

GuideAdvice guide_advice(const workload::ExperimentSpec& spec) {
    GuideAdvice advice;
    const auto& m = spec.model;
    const bool moe = m.experts > 0;
    const std::int64_t total = workload::parameter_count(m);
    const std::int64_t sized = moe ? workload::active_parameter_count(m) : total;
    const double b = static_cast<double>(sized) / 1e9;
    const Row* row = &kDense.back();
    for (const auto& r : kDense)
        if (b >= r.min_b && b < r.max_b) {
            row = &r;
            break;
        }
    const int gpus = spec.layout.world_size();
    advice.reasoning.push_back(
        "model: " + billions(total) + " parameters" +
        (moe ? " (" + billions(sized) + " active; the guide sizes TP by the active ones)" : "") +
        " -> the row " + row->text);
    if (gpus < row->min_gpus || gpus > row->max_gpus)
        advice.reasoning.push_back("  this cluster has " + std::to_string(gpus) +
                                   " GPUs, outside the row's " + std::to_string(row->min_gpus) +
                                   "-" + std::to_string(row->max_gpus) +
                                   "; the row is applied as it is");

    // Topology: TP within one NVLink domain (a node), and TP=4 over a limited (Ethernet) network.
    const auto& cluster = *spec.cluster;
    const int per_node = cluster.gpu_count() / std::max(1, cluster.node_count());
    bool ethernet = false;
    for (const auto& l : cluster.links())
        ethernet |= l.kind == topology::LinkKind::Ethernet;
    int tp_lo = row->tp_lo, tp_hi = row->tp_hi;
    if (ethernet && tp_hi > 4) {
        tp_lo = std::min(tp_lo, 4);
        tp_hi = 4;
        advice.reasoning.push_back(
            "topology: Ethernet between nodes, a limited network in the guide's words -> TP=4");
    }
    if (tp_hi > per_node) {
        tp_hi = std::max(1, per_node);
        tp_lo = std::min(tp_lo, tp_hi);
        advice.reasoning.push_back(
            "topology: " + std::to_string(per_node) +
            " GPUs per node; TP kept within one NVLink domain -> TP <= " + std::to_string(tp_hi));
    }
    if (moe && tp_hi > 2) {
        tp_hi = 2;
        tp_lo = std::min(tp_lo, 2);
        advice.reasoning.push_back(
            "mixture of experts: TP can often stay at 1 or 2 (the guide) -> TP <= 2");
    }
    // Sequence: 8K-32K tokens: CP=2.
    int cp = row->cp;
    const auto seq = spec.training.seq_length;
    if (seq >= 8192 && seq <= 32768 && cp < 2) {
        cp = 2;
        advice.reasoning.push_back("sequence: " + std::to_string(seq) +
                                   " tokens, in the guide's 8K-32K -> CP=2");
    } else {
        advice.reasoning.push_back("sequence: " + std::to_string(seq) +
                                   " tokens -> CP=" + std::to_string(cp) +
                                   (seq > 32768 ? " (the guide's sequence rule stops "
                                                  "at 32K; its row's CP is kept)"
                                                : " (the row's)"));
    }

    PlanLayout own;
    own.vpp = spec.layout.vpp;
    own.micro_batch_size = static_cast<int>(spec.training.micro_batch_size);
    own.recompute = spec.training.recompute;
    own.sharding = spec.layout.sharding;
    own.schedule = spec.schedule;
    for (const int tp : powers(tp_lo, tp_hi))
        for (const int pp : powers(row->pp_lo, row->pp_hi)) {
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
            if (moe) {
                // EP: the largest divisor of the experts that divides dp x cp.
                l.ep = 1;
                for (int e = 1; e <= l.dp * l.cp; ++e)
                    if ((l.dp * l.cp) % e == 0 && m.experts % e == 0) l.ep = e;
            }
            advice.layouts.push_back(l);
        }
    return advice;
}

}  // namespace cs::api
