// tensor-parallel communication overlap (parallelism.tp_comm_overlap, workload/tp_overlap.cpp):
// which of a layer's sequence-parallel all-gathers and reduce-scatters are flagged to run under
// the GEMM next to them, derived by hand from Megatron-LM's layer below.
#include <doctest/doctest.h>

#include "scratch.hpp"

#include <string>
#include <vector>

#include "workload/experiment.hpp"
#include "workload/plan.hpp"

using namespace cs;
using namespace cs::workload;

namespace {

// 4 dense layers, tp 2 with sequence parallelism, one pipeline stage, dp 2.
const char* const kGpt =
    "topology: four-gpus.yaml\n"
    "model: {layers: 4, hidden_size: 1024, attention_heads: 16, vocab_size: 0}\n"
    "parallelism: {tp: 2, pp: 1, sequence_parallel: true}\n"
    "training: {micro_batch_size: 2, global_batch_size: 16, seq_length: 1024}\n"
    "compute: {model: roofline}\n";

IterationPlan planned(const std::vector<std::string>& overrides) {
    return cs::test::plan_on_four_gpus("tp_overlap", kGpt, overrides);
}

// The TP collectives of a pass with their flag, as "AG>" (all-gather overlapping the next step),
// "<RS" (reduce-scatter overlapping the previous one) or the bare kind, each followed by the
// label of the GEMM it overlaps; one entry per step (a repeated step once).
std::vector<std::string> tp_collectives(const PassPlan& pass) {
    std::vector<std::string> out;
    const auto& steps = pass.steps;
    for (std::size_t k = 0; k < steps.size(); ++k) {
        const Step& s = steps[k];
        if (s.kind != Step::Kind::Collective || s.group != GroupKind::Tp) continue;
        const bool ag = s.collective == network::CollectiveKind::AllGather;
        std::string e = ag                                                       ? "AG"
                        : s.collective == network::CollectiveKind::ReduceScatter ? "RS"
                                                                                 : "other";
        if (s.has(Step::OverlapNext)) e = e + ">" + steps[k + 1].label;
        if (s.has(Step::OverlapPrevious)) e = std::string(steps[k - 1].label) + "<" + e;
        out.push_back(e);
    }
    return out;
}

}  // namespace

TEST_CASE("tp_comm_overlap: every sequence-parallel all-gather and reduce-scatter meets its GEMM") {
    // Megatron-LM's layer with sequence parallelism, forward: norm, all-gather of the sequence,
    // qkv GEMM, attention, proj GEMM, reduce-scatter, residual; norm, all-gather, fc1 GEMM,
    // activation, fc2 GEMM, reduce-scatter. Each all-gather feeds the GEMM after it and each
    // reduce-scatter takes the output of the GEMM before it, so with the option:
    //   AG>qkv, proj<RS, AG>fc1, fc2<RS.
    // The input-gradient pass runs the layer backwards and swaps the collectives (the gradient
    // of an all-gather is a reduce-scatter and the other way round): fc2's input gradient starts
    // from the all-gathered output gradient, fc1's is reduce-scattered after it, and so on:
    //   AG>fc2 dgrad, fc1 dgrad<RS, AG>proj dgrad, qkv dgrad<RS.
    // Without the option the same collectives are there, none flagged.
    const auto plain = planned({});
    const auto over = planned({"parallelism.tp_comm_overlap=true"});
    using V = std::vector<std::string>;
    CHECK(tp_collectives(plain.virtual_stages[0].forward) == V{"AG", "RS", "AG", "RS"});
    CHECK(tp_collectives(plain.virtual_stages[0].backward) == V{"AG", "RS", "AG", "RS"});
    CHECK(tp_collectives(over.virtual_stages[0].forward) ==
          V{"AG>qkv", "proj<RS", "AG>fc1", "fc2<RS"});
    CHECK(tp_collectives(over.virtual_stages[0].backward) ==
          V{"AG>fc2 dgrad", "fc1 dgrad<RS", "AG>proj dgrad", "qkv dgrad<RS"});
}
