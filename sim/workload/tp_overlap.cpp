#include "workload/tp_overlap.hpp"

#include "workload/context_parallel.hpp"

namespace cs::workload {
namespace {

bool gemm(const Step& s) {
    return s.kind == Step::Kind::Compute && s.tensor_core && !s.has(Step::AttentionCore);
}

void flag_overlaps(PassPlan& pass) {
    auto& steps = pass.steps;
    for (std::size_t k = 0; k < steps.size(); ++k) {
        Step& s = steps[k];
        if (s.kind != Step::Kind::Collective || s.group != GroupKind::Tp ||
            s.has(Step::PipelineComm))
            continue;
        if (s.collective == network::CollectiveKind::AllGather && k + 1 < steps.size() &&
            gemm(steps[k + 1]) && steps[k + 1].repeat == s.repeat)
            s.flags |= Step::OverlapNext;
        else if (s.collective == network::CollectiveKind::ReduceScatter && k > 0 &&
                 gemm(steps[k - 1]) && steps[k - 1].repeat == s.repeat)
            s.flags |= Step::OverlapPrevious;
    }
}

}  // namespace

void apply_tp_comm_overlap(const ExperimentSpec& spec, LayerPasses& layer) {
    if (!spec.layout.tp_comm_overlap) return;
    flag_overlaps(layer.forward);
    flag_overlaps(layer.backward_input);
    rejoin_backward(layer);
}

}  // namespace cs::workload
