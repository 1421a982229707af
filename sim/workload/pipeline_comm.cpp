#include "workload/pipeline_comm.hpp"

namespace cs::workload {

bool batched_p2p(const ExperimentSpec& spec) {
    return spec.compute.framework == Framework::Megatron && !spec.layout.overlap_p2p_comm;
}

bool dp_reduce_after_backward(const ExperimentSpec& spec) {
    const auto& l = spec.layout;
    return l.grad_reduce_after_backward ||
           (spec.compute.framework == Framework::Megatron && !l.overlap_grad_reduce &&
            l.sharding < Sharding::Gradients);
}

void apply_pipeline_comm(const ExperimentSpec& spec, IterationPlan& plan,
                         const std::function<int(int)>& device_of, int copies) {
    const auto& l = spec.layout;
    const auto& t = spec.training;
    if (spec.compute.framework != Framework::Megatron) return;
    // The activation entering or leaving a layer for one microbatch, 16-bit, on one of the cp
    // sequence slices; each tp GPU sends 1/tp of it.
    const Bytes whole{static_cast<std::int64_t>(t.micro_batch_size) * t.seq_length / l.cp *
                      spec.model.hidden_size * 2};
    const Bytes slice{whole.value / l.tp};
    const bool gather = l.tp > 1 && !l.sequence_parallel && copies == 1 && l.pp > 1;
    const int vstages = static_cast<int>(plan.virtual_stages.size());
    const auto gather_step = [&] {
        Step s;
        s.kind = Step::Kind::Collective;
        s.label = "all-gather tp (pipeline scatter/gather)";
        s.collective = network::CollectiveKind::AllGather;
        s.group = GroupKind::Tp;
        s.flags = Step::PipelineComm;
        s.size = whole;
        return s;
    };
    const auto prepend = [&](PassPlan& pass) {
        if (pass.steps.empty()) return;
        std::vector<Step> steps;
        steps.reserve(pass.steps.size() + 1);
        steps.push_back(gather_step());
        steps.insert(steps.end(), pass.steps.begin(), pass.steps.end());
        pass.steps.swap(steps);
    };
    for (int vs = 0; vs < vstages; ++vs) {
        ChunkPlan& c = plan.virtual_stages[static_cast<std::size_t>(vs)];
        c.activation_bytes = slice;
        if (!gather) continue;
        // A forward receives the previous virtual stage's activation, a backward (or its input
        // half) the next one's gradient; from another device, they come as slices.
        if (vs > 0 && device_of(vs - 1) != device_of(vs)) prepend(c.forward);
        if (vs + 1 < vstages && device_of(vs + 1) != device_of(vs)) {
            prepend(c.backward);
            prepend(c.backward_input);
        }
    }
}

}  // namespace cs::workload
