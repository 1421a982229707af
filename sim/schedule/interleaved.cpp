// Megatron-LM's interleaved 1F1B (forward_backward_pipelining_with_interleaving), with its
// default microbatch_group_size_per_vp_stage = p.
#include <algorithm>
#include <utility>

#include "schedule/builtin.hpp"

namespace cs::schedule::detail {
namespace {

std::string multiples_of(int p) {
    std::string list;
    for (int k = 1; k <= 3; ++k)
        list += std::to_string(k * p) + ", ";
    return list + "...";
}

class Interleaved final : public Schedule {
  public:
    std::string name() const override { return "interleaved"; }
    bool in_megatron_lm() const override { return true; }
    int chunks_for(int requested_vpp) const override { return requested_vpp; }
    std::string check(const PipelineShape& shape) const override {
        std::string problem = check_positive(name(), shape);
        if (!problem.empty()) return problem;
        // Megatron-Core's initialize_model_parallel refuses virtual stages on one pipeline stage
        // ("pipeline-model-parallel size should be greater than 1 with interleaved schedule").
        if (shape.devices < 2) {
            return "interleaved needs at least 2 pipeline stages (pp >= 2), as Megatron-LM "
                   "refuses virtual stages on one: pp=1 given; use schedule 1f1b, or pp=2 or more";
        }
        if (shape.chunks < 2) {
            return "interleaved needs at least 2 model chunks per device (vpp >= 2): vpp=" +
                   std::to_string(shape.chunks) + " given; use vpp=2 or more, or schedule 1f1b";
        }
        if (shape.microbatches % shape.devices != 0) {
            return "interleaved needs microbatches to be a multiple of pipeline stages (p=" +
                   std::to_string(shape.devices) + "): m=" + std::to_string(shape.microbatches) +
                   " is not; use " + multiples_of(shape.devices);
        }
        return {};
    }

    // Megatron walks "virtual microbatches" k = 0..m*v-1. Forward k runs chunk (k / p) % v on
    // microbatch (k / (p*v)) * p + k % p: groups of p microbatches go through chunk 0, then the
    // same group through chunk 1, and so on. Backward k runs the same microbatch on chunk
    // v-1 - (k / p) % v. Device s does warm-up forwards 0..W-1 with
    // W = min((p-s-1)*2 + (v-1)*p, m*v), then pairs (forward k+W, backward k), then the
    // remaining backwards.
    std::vector<PipelineOp> order(const PipelineShape& shape, int device) const override {
        require_valid(*this, shape, device);
        const int p = shape.devices;
        const int v = shape.chunks;
        const int total = shape.microbatches * v;
        const int warmup = std::min((p - device - 1) * 2 + (v - 1) * p, total);
        auto microbatch_of = [&](int k) { return (k / (p * v)) * p + k % p; };
        auto chunk_of = [&](int k) { return (k / p) % v; };
        auto forward = [&](int k) {
            return PipelineOp{Pass::Forward, microbatch_of(k), chunk_of(k)};
        };
        auto backward = [&](int k) {
            return PipelineOp{Pass::Backward, microbatch_of(k), v - 1 - chunk_of(k)};
        };
        std::vector<PipelineOp> ops;
        ops.reserve(2 * static_cast<std::size_t>(total));
        for (int k = 0; k < warmup; ++k)
            ops.push_back(forward(k));
        for (int k = 0; k < total - warmup; ++k) {
            ops.push_back(forward(k + warmup));
            ops.push_back(backward(k));
        }
        for (int k = total - warmup; k < total; ++k)
            ops.push_back(backward(k));
        return ops;
    }

    // Megatron-LM's steps: each warm-up forward (send_forward_recv_forward), each steady
    // (forward, backward) pair (one send_forward_backward_recv_forward_backward after both: the
    // forward's output waits for the backward), each cool-down backward
    // (send_backward_recv_backward).
    std::vector<int> exchange_rounds(const PipelineShape& shape, int device) const override {
        require_valid(*this, shape, device);
        const int p = shape.devices;
        const int total = shape.microbatches * shape.chunks;
        const int warmup = std::min((p - device - 1) * 2 + (shape.chunks - 1) * p, total);
        std::vector<int> rounds;
        rounds.reserve(2 * static_cast<std::size_t>(total));
        int round = 0;
        for (int k = 0; k < warmup; ++k)
            rounds.push_back(round++);
        for (int k = 0; k < total - warmup; ++k, ++round)
            rounds.insert(rounds.end(), 2, round);
        for (int k = total - warmup; k < total; ++k)
            rounds.push_back(round++);
        return rounds;
    }
};

}  // namespace

std::unique_ptr<Schedule> make_interleaved() {
    return std::make_unique<Interleaved>();
}

}  // namespace cs::schedule::detail
