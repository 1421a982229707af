// GPipe and Megatron-LM's non-interleaved 1F1B (PipeDream-Flush): one model chunk per device.
#include <algorithm>

#include "schedule/builtin.hpp"

namespace cs::schedule::detail {
namespace {

PipelineOp forward(int microbatch) {
    return PipelineOp{Pass::Forward, microbatch, 0};
}
PipelineOp backward(int microbatch) {
    return PipelineOp{Pass::Backward, microbatch, 0};
}

// Every pass its own round: Megatron-LM's non-interleaved schedule exchanges after every pass
// (send_forward_recv_backward after a forward, send_backward_recv_forward after a backward).
std::vector<int> one_round_per_pass(const PipelineShape& shape) {
    std::vector<int> rounds(2 * static_cast<std::size_t>(shape.microbatches));
    for (std::size_t i = 0; i < rounds.size(); ++i)
        rounds[i] = static_cast<int>(i);
    return rounds;
}

class GPipe final : public Schedule {
  public:
    std::string name() const override { return "gpipe"; }
    bool on_torch_pipeline_runtime() const override { return false; }
    int chunks_for(int /*requested_vpp*/) const override { return 1; }
    std::string check(const PipelineShape& shape) const override {
        return check_fixed_chunks(name(), shape, 1);
    }
    // Every forward, then every backward, both in microbatch order.
    std::vector<PipelineOp> order(const PipelineShape& shape, int device) const override {
        require_valid(*this, shape, device);
        std::vector<PipelineOp> ops;
        ops.reserve(2 * static_cast<std::size_t>(shape.microbatches));
        for (int i = 0; i < shape.microbatches; ++i)
            ops.push_back(forward(i));
        for (int i = 0; i < shape.microbatches; ++i)
            ops.push_back(backward(i));
        return ops;
    }
    // Megatron-LM has no GPipe; its p2p pattern (one exchange after every pass) applies.
    std::vector<int> exchange_rounds(const PipelineShape& shape, int device) const override {
        require_valid(*this, shape, device);
        return one_round_per_pass(shape);
    }
};

class OneFOneB final : public Schedule {
  public:
    std::string name() const override { return "1f1b"; }
    bool on_torch_pipeline_runtime() const override { return false; }
    bool in_megatron_lm() const override { return true; }
    int chunks_for(int /*requested_vpp*/) const override { return 1; }
    std::string check(const PipelineShape& shape) const override {
        return check_fixed_chunks(name(), shape, 1);
    }
    // Megatron's forward_backward_pipelining_without_interleaving: min(p-s-1, m) warm-up
    // forwards, then (forward i+warmup, backward i) pairs, then the remaining backwards.
    std::vector<PipelineOp> order(const PipelineShape& shape, int device) const override {
        require_valid(*this, shape, device);
        const int m = shape.microbatches;
        const int warmup = std::min(shape.devices - device - 1, m);
        std::vector<PipelineOp> ops;
        ops.reserve(2 * static_cast<std::size_t>(m));
        for (int i = 0; i < warmup; ++i)
            ops.push_back(forward(i));
        for (int i = 0; i < m - warmup; ++i) {
            ops.push_back(forward(i + warmup));
            ops.push_back(backward(i));
        }
        for (int i = m - warmup; i < m; ++i)
            ops.push_back(backward(i));
        return ops;
    }
    std::vector<int> exchange_rounds(const PipelineShape& shape, int device) const override {
        require_valid(*this, shape, device);
        return one_round_per_pass(shape);
    }
};

}  // namespace

std::unique_ptr<Schedule> make_gpipe() {
    return std::make_unique<GPipe>();
}
std::unique_ptr<Schedule> make_one_f_one_b() {
    return std::make_unique<OneFOneB>();
}

}  // namespace cs::schedule::detail
