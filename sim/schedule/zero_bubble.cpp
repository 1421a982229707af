// The zero-bubble family of Qi et al. (ICLR 2024): the backward split into B (input gradient,
// on the critical path) and W (weight gradient, free to move).
#include <algorithm>

#include "schedule/builtin.hpp"

namespace cs::schedule::detail {
namespace {

// ZB-H1, the handcrafted schedule: 1F1B's warm-up and steady state with the full backward
// replaced by B, and stage s holding back its W passes by s microbatches. The held-back W
// passes fill the cool-down, where 1F1B idles waiting for gradients. Stage s then has at most
// (p - s) + s = p microbatches whose activations are not yet released (by W).
class ZeroBubbleH1 final : public Schedule {
  public:
    std::string name() const override { return "zb-h1"; }
    int chunks_for(int /*requested_vpp*/) const override { return 1; }
    std::string check(const PipelineShape& shape) const override {
        return check_fixed_chunks(name(), shape, 1);
    }
    bool splits_backward() const override { return true; }
    std::vector<PipelineOp> order(const PipelineShape& shape, int device) const override {
        require_valid(*this, shape, device);
        const int m = shape.microbatches;
        const int warmup = std::min(shape.devices - device - 1, m);
        const int held_back = device;
        std::vector<PipelineOp> ops;
        ops.reserve(3 * static_cast<std::size_t>(m));
        int forwards = 0;
        int inputs = 0;
        int weights = 0;
        auto input_grad = [&] {
            ops.push_back(PipelineOp{Pass::BackwardInput, inputs++, 0});
            if (inputs - weights > held_back) {
                ops.push_back(PipelineOp{Pass::BackwardWeight, weights++, 0});
            }
        };
        for (int i = 0; i < warmup; ++i)
            ops.push_back(PipelineOp{Pass::Forward, forwards++, 0});
        for (int i = 0; i < m - warmup; ++i) {
            ops.push_back(PipelineOp{Pass::Forward, forwards++, 0});
            input_grad();
        }
        while (inputs < m)
            input_grad();
        while (weights < m)
            ops.push_back(PipelineOp{Pass::BackwardWeight, weights++, 0});
        return ops;
    }
};

// ZB-V (Qi et al., arXiv 2401.10241 section 6): two chunks per device in a V, device s holding
// virtual stages s and 2p-1-s, so the first and last virtual stages share device 0. The order is
// the handcrafted one (as in PyTorch's ScheduleZBVZeroBubble), generated for
// max(m, 2p-1) microbatches and then filtered down to the m that exist.
class ZeroBubbleV final : public Schedule {
  public:
    std::string name() const override { return "zb-v"; }
    int chunks_for(int /*requested_vpp*/) const override { return 2; }
    std::string check(const PipelineShape& shape) const override {
        return check_fixed_chunks(name(), shape, 2);
    }
    bool splits_backward() const override { return true; }
    int virtual_stage(const PipelineShape& shape, int device, int chunk,
                      int /*microbatch*/) const override {
        return chunk == 0 ? device : 2 * shape.devices - 1 - device;
    }
    Placement place(const PipelineShape& shape, int virtual_stage,
                    int /*microbatch*/) const override {
        if (virtual_stage < shape.devices) return Placement{virtual_stage, 0};
        return Placement{2 * shape.devices - 1 - virtual_stage, 1};
    }
    std::vector<PipelineOp> order(const PipelineShape& shape, int device) const override {
        require_valid(*this, shape, device);
        const int p = shape.devices;
        const int m = shape.microbatches;
        const int planned = std::max(m, 2 * p - 1);
        int forwards[2] = {0, 0};
        int inputs[2] = {0, 0};
        int weights[2] = {0, 0};
        std::vector<PipelineOp> ops;
        ops.reserve(6 * static_cast<std::size_t>(m));
        auto emit = [&](Pass pass, int& counter, int chunk) {
            const int microbatch = counter++;
            if (microbatch < m) ops.push_back(PipelineOp{pass, microbatch, chunk});
        };
        auto f = [&](int c) { emit(Pass::Forward, forwards[c], c); };
        auto b = [&](int c) { emit(Pass::BackwardInput, inputs[c], c); };
        auto w = [&](int c) { emit(Pass::BackwardWeight, weights[c], c); };
        // Warm-up: chunk-0 forwards fill the way down, then chunk 1 joins; at the turn of the V
        // (device 0's chunk 1 is the last virtual stage) backwards start early.
        for (int k = 0; k < 2 * (p - device) - 1; ++k)
            f(0);
        for (int k = 0; k < device; ++k) {
            f(1);
            f(0);
        }
        for (int k = 0; k < p - device; ++k) {
            f(1);
            b(1);
            w(1);
        }
        // Steady state: F0 B0 W0 F1 B1 W1 until both chunks have run every forward.
        while (forwards[1] < forwards[0] || forwards[0] < planned) {
            if (forwards[0] < planned) f(0);
            b(0);
            w(0);
            f(1);
            b(1);
            w(1);
        }
        // Cool-down: input gradients first, weight gradients in the gaps and at the end.
        for (int k = 0; k < device; ++k) {
            b(0);
            b(1);
        }
        for (int k = 0; k < p - device; ++k) {
            b(0);
            w(0);
        }
        while (weights[1] < inputs[1])
            w(1);
        while (weights[0] < inputs[0])
            w(0);
        return ops;
    }
};

}  // namespace

std::unique_ptr<Schedule> make_zb_h1() {
    return std::make_unique<ZeroBubbleH1>();
}
std::unique_ptr<Schedule> make_zb_v() {
    return std::make_unique<ZeroBubbleV>();
}

}  // namespace cs::schedule::detail
