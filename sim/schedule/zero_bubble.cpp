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

}  // namespace

std::unique_ptr<Schedule> make_zb_h1() {
    return std::make_unique<ZeroBubbleH1>();
}

}  // namespace cs::schedule::detail
