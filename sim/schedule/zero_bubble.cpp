// The zero-bubble family of Qi et al. (ICLR 2024): the backward split into B (input gradient,
// on the critical path) and W (weight gradient, free to move).
#include <algorithm>
#include <deque>

#include "core/errors.hpp"
#include "schedule/builtin.hpp"

namespace cs::schedule::detail {
namespace {

// One chunk per device, the backward split into B and W (ZB-H1, ZB-H2).
class SingleChunkSplit : public Schedule {
  public:
    int chunks_for(int /*requested_vpp*/) const override { return 1; }
    std::string check(const PipelineShape& shape) const override {
        return check_fixed_chunks(name(), shape, 1);
    }
    bool splits_backward() const override { return true; }
};

// ZB-H1, the handcrafted schedule: 1F1B's warm-up and steady state with the full backward
// replaced by B, and stage s holding back its W passes by s microbatches. The held-back W
// passes fill the cool-down, where 1F1B idles waiting for gradients. Stage s then has at most
// (p - s) + s = p microbatches whose activations are not yet released (by W).
class ZeroBubbleH1 final : public SingleChunkSplit {
  public:
    std::string name() const override { return "zb-h1"; }
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

// ZB-H2, the handcrafted schedule that trades memory for the bubble (Qi et al. section 2.2): up
// to 2p-1 activations per stage, extra forwards in the warm-up fill the gap before the first B,
// and W passes are left for the tail. The order is that of list scheduling with unit pass times
// and free communication: every stage, whenever it is free, runs its next B if the gradient has
// arrived, else its next F if the input has arrived and it holds fewer than 2p-1 activations
// (released by W), else its oldest pending W. With T_F = T_B = T_W this leaves no idle time
// between a stage's first and last pass; run with other times, the longest stage span is
// m(T_F+T_B+T_W) + (p-1)(T_F+T_B-2T_W) for m >= 2p-1, the paper's bubble.
class ZeroBubbleH2 final : public SingleChunkSplit {
  public:
    std::string name() const override { return "zb-h2"; }
    std::vector<PipelineOp> order(const PipelineShape& shape, int device) const override {
        require_valid(*this, shape, device);
        return std::move(run(shape)[static_cast<std::size_t>(device)]);
    }
    // One construction gives every stage's order: O(p (3m + 2p)) steps for all of them.
    std::vector<std::vector<PipelineOp>> orders(const PipelineShape& shape) const override {
        require_valid(*this, shape, 0);
        return run(shape);
    }

  private:
    std::vector<std::vector<PipelineOp>> run(const PipelineShape& shape) const {
        const int p = shape.devices;
        const int m = shape.microbatches;
        const int limit = 2 * p - 1;
        const auto at = [m](int stage, int microbatch) {
            return static_cast<std::size_t>(stage) * static_cast<std::size_t>(m) +
                   static_cast<std::size_t>(microbatch);
        };
        // End step of each stage's F and B of each microbatch; -1 until it has run.
        std::vector<long> forward_end(at(p, 0), -1);
        std::vector<long> input_end(at(p, 0), -1);
        std::vector<int> forwards(p, 0), inputs(p, 0), weights(p, 0);
        std::vector<long> free_at(p, 0);
        std::vector<std::vector<PipelineOp>> ops(static_cast<std::size_t>(p));
        for (auto& o : ops)
            o.reserve(3 * static_cast<std::size_t>(m));
        long remaining = 3L * p * m;
        // The unit-time run ends within about 3m + 2p steps (each stage's 3m passes after a
        // ramp of at most 2p); this far looser bound only guards against a stall.
        const long last_step = 3L * p * m + 2L * p;
        for (long t = 0; remaining > 0; ++t) {
            if (t > last_step)
                throw SimulationError("schedule", "zb-h2: the unit-time construction stalled");
            const auto arrived = [t](long end) { return end >= 0 && end <= t; };
            for (int s = 0; s < p; ++s) {
                if (free_at[s] > t) continue;
                PipelineOp op{Pass::BackwardWeight, 0, 0};
                const int next_input = inputs[s];
                const bool gradient =
                    next_input < m && arrived(s == p - 1 ? forward_end[at(s, next_input)]
                                                         : input_end[at(s + 1, next_input)]);
                const bool input = forwards[s] < m && forwards[s] - weights[s] < limit &&
                                   (s == 0 || arrived(forward_end[at(s - 1, forwards[s])]));
                if (gradient) {
                    op = PipelineOp{Pass::BackwardInput, inputs[s]++, 0};
                    input_end[at(s, op.microbatch)] = t + 1;
                } else if (input) {
                    op = PipelineOp{Pass::Forward, forwards[s]++, 0};
                    forward_end[at(s, op.microbatch)] = t + 1;
                } else if (weights[s] < inputs[s]) {
                    op = PipelineOp{Pass::BackwardWeight, weights[s]++, 0};
                } else {
                    continue;
                }
                free_at[s] = t + 1;
                --remaining;
                ops[static_cast<std::size_t>(s)].push_back(op);
            }
        }
        return ops;
    }
};

// Two chunks per device in a V: device s holds virtual stage s (chunk 0) and 2p-1-s (chunk 1),
// so the first and the last virtual stage share device 0. The backward is always split; a
// schedule that runs a full backward emits its B and W back to back.
class VShaped : public Schedule {
  public:
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
};

// ZB-V (Qi et al., arXiv 2401.10241 section 6) in its handcrafted order (as PyTorch's
// ScheduleZBVZeroBubble builds it), generated for max(m, 2p-1) microbatches and then filtered
// down to the m that exist.
class ZeroBubbleV final : public VShaped {
  public:
    std::string name() const override { return "zb-v"; }
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

// DualPipeV's order of device r of p with m microbatches (deepseek-ai/DualPipe dualpipev.py, in
// its eight steps). Chunk 0 ("phase 0") carries microbatches down the devices, chunk 1 back up.
// Its overlapped forward-and-backward pairs run here as the forward followed by a full backward (B
// then W). Backwards marked "deferred" leave their W in a FIFO that the explicit W steps drain.
// The bidirectional DualPipe runs the same steps on each half of its devices.
std::vector<PipelineOp> dualpipe_steps(int p, int m, int r) {
    int forwards[2] = {0, 0};
    int backwards[2] = {0, 0};
    std::deque<PipelineOp> deferred_weights;
    std::vector<PipelineOp> ops;
    ops.reserve(6 * static_cast<std::size_t>(m));
    auto f = [&](int c) { ops.push_back(PipelineOp{Pass::Forward, forwards[c]++, c}); };
    auto b = [&](int c, bool defer_weight) {
        const int microbatch = backwards[c]++;
        ops.push_back(PipelineOp{Pass::BackwardInput, microbatch, c});
        const PipelineOp weight{Pass::BackwardWeight, microbatch, c};
        if (defer_weight) {
            deferred_weights.push_back(weight);
        } else {
            ops.push_back(weight);
        }
    };
    auto w = [&] {
        ops.push_back(deferred_weights.front());
        deferred_weights.pop_front();
    };
    for (int k = 0; k < 2 * (p - r - 1); ++k)
        f(0);                          // 1: F0
    for (int k = 0; k < r + 1; ++k) {  // 2: F0 F1
        f(0);
        f(1);
    }
    for (int k = 0; k < p - r - 1; ++k) {  // 3: B1 W F1
        b(1, true);
        w();
        f(1);
    }
    // An overlapped F&B: the forward, then the full backward (B and W back to back) that the
    // replay runs alongside it.
    auto f_and_b = [&](int forward_chunk, int backward_chunk) {
        f(forward_chunk);
        ops.back().overlap = 2;
        b(backward_chunk, false);
    };
    for (int k = 0; k < m - 2 * p + r + 1; ++k) {  // 4: F0&B1, F1&B0
        if (k == 0 && r == p - 1) {
            // The fold of the V: the reference runs these two apart, not overlapped, to
            // shorten the bubble.
            f(0);
            b(1, false);
        } else {
            f_and_b(0, 1);
        }
        f_and_b(1, 0);
    }
    for (int k = 0; k < p - r - 1; ++k) {  // 5: B1, F1&B0
        b(1, false);
        f_and_b(1, 0);
    }
    // 6: B1 B0, deferring W from the middle of the step on (before B1 on odd devices,
    // after it on even ones), so that r + 1 weight passes are left for the end.
    const int step6 = r + 1;
    bool defer = false;
    for (int k = 0; k < step6; ++k) {
        if (k == step6 / 2 && r % 2 == 1) defer = true;
        b(1, defer);
        if (k == step6 / 2 && r % 2 == 0) defer = true;
        b(0, defer);
    }
    for (int k = 0; k < p - r - 1; ++k) {  // 7: W B0
        w();
        b(0, true);
    }
    while (!deferred_weights.empty())
        w();  // 8: the r + 1 remaining W
    return ops;
}

// DualPipeV (Sea AI Lab's cut-in-half DualPipe, deepseek-ai/DualPipe dualpipev.py), in its eight
// steps. Chunk 0 ("phase 0") carries microbatches down the devices, chunk 1 back up. Its
// overlapped forward-and-backward pairs run here as the forward followed by a full backward (B
// then W). Backwards marked "deferred" leave their W in a FIFO that the explicit W steps drain.
class DualPipeV final : public VShaped {
  public:
    std::string name() const override { return "dualpipev"; }
    std::string check(const PipelineShape& shape) const override {
        std::string problem = VShaped::check(shape);
        if (!problem.empty()) return problem;
        if (shape.microbatches < 2 * shape.devices) {
            return "dualpipev needs at least 2p microbatches (p=" + std::to_string(shape.devices) +
                   "): m=" + std::to_string(shape.microbatches) +
                   " is too few; use m >= " + std::to_string(2 * shape.devices);
        }
        return {};
    }
    std::vector<PipelineOp> order(const PipelineShape& shape, int device) const override {
        require_valid(*this, shape, device);
        return dualpipe_steps(shape.devices, shape.microbatches, device);
    }
};

// The bidirectional DualPipe (DeepSeek-V3 report section 3.2.1; deepseek-ai/DualPipe
// dualpipe.py). The model is cut into p stages and held twice: device d runs stage d of copy 0
// (chunk 0: microbatches 0..m/2-1, which enter at device 0) and stage p-1-d of copy 1 (chunk 1:
// microbatches m/2..m-1, which enter at device p-1). dualpipe.py runs on device d the eight steps
// of DualPipeV for the half-pipeline of p/2 devices and m/2 microbatches per direction, at the
// position h = min(d, p-1-d) from the outer end, with its phases swapped on the second half
// (phase ^= is_in_second_half): a device of the second half does for copy 1 what its mirror does
// for copy 0. The "middle" devices p/2-1 and p/2 are where the two halves meet, as the last
// device of DualPipeV is the turn of its V.
class DualPipe final : public Schedule {
  public:
    std::string name() const override { return "dualpipe"; }
    int chunks_for(int /*requested_vpp*/) const override { return 2; }
    bool splits_backward() const override { return true; }
    int model_copies() const override { return 2; }
    std::string check(const PipelineShape& shape) const override {
        std::string problem = check_fixed_chunks(name(), shape, 2);
        if (!problem.empty()) return problem;
        const int p = shape.devices;
        const int m = shape.microbatches;
        if (p % 2 != 0)
            return "dualpipe needs an even number of pipeline stages (p=" + std::to_string(p) +
                   " is odd): half of the microbatches enter at each end; use p = " +
                   std::to_string(p + 1) + ", or dualpipev for any p";
        if (m % 2 != 0 || m < 2 * p)
            return "dualpipe needs an even number of microbatches, at least 2p (p=" +
                   std::to_string(p) + "): m=" + std::to_string(m) +
                   " is not; use m = " + std::to_string(2 * p) + ", " + std::to_string(2 * p + 2) +
                   ", " + std::to_string(2 * p + 4) + ", ...";
        return {};
    }
    std::vector<PipelineOp> order(const PipelineShape& shape, int device) const override {
        require_valid(*this, shape, device);
        const int p = shape.devices;
        const int half = shape.microbatches / 2;
        const bool second_half = device >= p / 2;
        std::vector<PipelineOp> ops = dualpipe_steps(p / 2, half, std::min(device, p - 1 - device));
        for (PipelineOp& op : ops) {
            op.chunk = second_half ? 1 - op.chunk : op.chunk;
            if (op.chunk == 1) op.microbatch += half;
        }
        return ops;
    }
    int virtual_stage(const PipelineShape& shape, int device, int chunk,
                      int /*microbatch*/) const override {
        return chunk == 0 ? device : shape.devices - 1 - device;
    }
    Placement place(const PipelineShape& shape, int virtual_stage, int microbatch) const override {
        if (microbatch < shape.microbatches / 2) return Placement{virtual_stage, 0};
        return Placement{shape.devices - 1 - virtual_stage, 1};
    }
};

}  // namespace

std::unique_ptr<Schedule> make_dualpipe() {
    return std::make_unique<DualPipe>();
}
std::unique_ptr<Schedule> make_dualpipev() {
    return std::make_unique<DualPipeV>();
}
std::unique_ptr<Schedule> make_zb_h1() {
    return std::make_unique<ZeroBubbleH1>();
}
std::unique_ptr<Schedule> make_zb_h2() {
    return std::make_unique<ZeroBubbleH2>();
}
std::unique_ptr<Schedule> make_zb_v() {
    return std::make_unique<ZeroBubbleV>();
}

}  // namespace cs::schedule::detail
