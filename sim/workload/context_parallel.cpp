#include "workload/context_parallel.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "core/errors.hpp"

namespace cs::workload {
namespace {

using network::CollectiveKind;
using I = std::int64_t;
constexpr I kBytes = 2;  // activations, keys and values stay 16-bit

Step collective(const char* label, CollectiveKind kind, GroupKind group, Bytes size,
                std::uint8_t flags = 0) {
    Step s;
    s.kind = Step::Kind::Collective;
    s.label = label;
    s.collective = kind;
    s.group = group;
    s.size = size;
    s.flags = flags;
    return s;
}

// The layer's sizes on one GPU, and its attention's model FLOPs (Narayanan eq. 3's whole score
// matrix: 4 b (s/cp) s q / t per GPU, whatever the cp_comm_type).
struct Shape {
    I b = 0, s = 0, cp = 0, t = 0, q = 0, kv = 0;
    double forward_model = 0;
};

// What one attention step of the roofline is: forward (or recomputed) or backward, and the
// factor the sustained clocks put on it (its duration over the same kernel at burst clocks).
struct Original {
    bool backward = false, recompute = false;
    double sustained = 1;
};

class Rewriter {
  public:
    Rewriter(const ExperimentSpec& spec, const topology::GpuModel& gpu) : spec_(spec), gpu_(gpu) {
        const auto& l = spec.layout;
        shape_.b = spec.training.micro_batch_size;
        shape_.s = spec.training.seq_length;
        shape_.cp = l.cp;
        shape_.t = l.tp;
        shape_.q = I{spec.model.attention_heads} * spec.model.head_dim;
        shape_.kv = I{spec.model.kv_heads} * spec.model.head_dim;
        block_ = layer_attention_block(spec.model, l, spec.training);
        shape_.forward_model = 4.0 * static_cast<double>(shape_.b) *
                               static_cast<double>(shape_.s / shape_.cp) *
                               static_cast<double>(shape_.s) * static_cast<double>(shape_.q) /
                               static_cast<double>(shape_.t);
    }

    void rewrite(PassPlan& pass) const {
        std::vector<Step> out;
        out.reserve(pass.steps.size() + 8);
        for (const Step& st : pass.steps) {
            // The roofline's all-gather of keys and values and reduce-scatter of their gradients
            // belong to allgather; the other types move them their own way.
            if (st.kind == Step::Kind::Collective && st.group == GroupKind::Cp) continue;
            if (st.kind == Step::Kind::Compute && st.has(Step::AttentionCore)) {
                emit(out, st, classify(st));
                continue;
            }
            out.push_back(st);
        }
        pass.steps.swap(out);
    }

  private:
    Original classify(const Step& st) const {
        Original o;
        o.backward = st.hardware_flops.value > 1.5 * shape_.forward_model;
        o.recompute = !o.backward && st.model_flops.value == 0;
        // The roofline's own step (workload/roofline.cpp attention_core_*): forward executes half
        // the model FLOPs (causal), backward 2.5 x the forward's executed, at the efficiency of
        // the whole sequence; the same kernel at burst clocks gives the sustained factor.
        // The roofline's own kernel on the layer's block (s/cp queries against s keys).
        const double model = o.backward ? 2 * shape_.forward_model : shape_.forward_model;
        const Step burst = flash_attention_step(gpu_, spec_.compute.roofline, st.label, block_,
                                                Flops{model}, o.backward, o.recompute);
        if (burst.duration > Time::zero())
            o.sustained = static_cast<double>(st.duration.count_ps()) /
                          static_cast<double>(burst.duration.count_ps());
        return o;
    }

    void emit(std::vector<Step>& out, const Step& st, const Original& o) const {
        const auto& l = spec_.layout;
        switch (l.cp_comm_type) {
            case CpCommType::AllGather:
                out.push_back(st);
                return;
            case CpCommType::A2a:
                all_to_all(out, o, GroupKind::Cp, l.cp, [&] { out.push_back(st); });
                return;
            case CpCommType::P2p:
                ring(out, o, GroupKind::Cp, l.cp, 1);
                return;
            case CpCommType::A2aP2p:
                all_to_all(out, o, GroupKind::CpInner, l.cp_a2a_size,
                           [&] { ring(out, o, GroupKind::CpOuter, l.cp / l.cp_a2a_size,
                                      l.cp_a2a_size); });
                return;
        }
    }

    // Ulysses: q, k, v from sequence-split to head-split over `group` (size n), `attention`, the
    // output back; backward: the output's gradient in, the q, k, v gradients out. Each GPU sends
    // its local (s/cp) tokens' tensors, (n-1)/n of them leaving it (all_to_all's size is the
    // per-rank send buffer).
    template <typename Attention>
    void all_to_all(std::vector<Step>& out, const Original& o, GroupKind group, int n,
                    Attention&& attention) const {
        const I tokens = shape_.b * (shape_.s / shape_.cp);
        const Bytes qkv{kBytes * tokens * (shape_.q + 2 * shape_.kv) / shape_.t};
        const Bytes q{kBytes * tokens * shape_.q / shape_.t};
        if (n < 2) {
            attention();
            return;
        }
        const bool r = o.recompute;
        if (!o.backward) {
            out.push_back(collective(r ? "recompute all-to-all cp qkv" : "all-to-all cp qkv",
                                     CollectiveKind::AllToAll, group, qkv));
            attention();
            out.push_back(collective(r ? "recompute all-to-all cp out" : "all-to-all cp out",
                                     CollectiveKind::AllToAll, group, q));
        } else {
            out.push_back(collective("all-to-all cp dout", CollectiveKind::AllToAll, group, q));
            attention();
            out.push_back(collective("all-to-all cp dqkv", CollectiveKind::AllToAll, group, qkv));
        }
    }

    // The p2p ring over `group` of `steps` ranks, each GPU holding 1/`heads_split` of the heads
    // (a2a+p2p) and s / steps tokens as two chunks of c = s / (2 steps): step 0 is the causal
    // diagonal block (2c queries, 2c keys, half of it computed: 2c^2 scores), every later step
    // a full block of 2c queries against c keys or c queries against 2c keys (2c^2 scores): each
    // step computes 1/steps of the rank's attention. The key/value block for step j + 1 travels
    // while step j computes.
    void ring(std::vector<Step>& out, const Original& o, GroupKind group, int steps,
              int heads_split) const {
        const I c = shape_.s / (2 * I{steps});
        const I kv = shape_.kv / heads_split;
        const double share = 1.0 / steps;
        const double model = (o.backward ? 2 : 1) * shape_.forward_model * share;
        // A block of q_tokens queries against kv_tokens keys on this GPU's 1/heads_split of the
        // heads: causal on the diagonal (half its scores computed), full elsewhere; each step
        // counts 1/steps of the layer's model FLOPs.
        const auto block = [&](const char* label, I q_tokens, I kv_tokens) {
            AttentionBlock shape = block_;
            shape.q_len = q_tokens;
            shape.kv_len = kv_tokens;
            shape.heads = std::max<I>(1, block_.heads / heads_split);
            shape.kv_heads = std::max<I>(1, block_.kv_heads / heads_split);
            shape.causal = q_tokens == kv_tokens;
            Step st = flash_attention_step(gpu_, spec_.compute.roofline, label, shape,
                                           Flops{model}, o.backward, o.recompute);
            st.duration = Time::ps(static_cast<std::int64_t>(
                static_cast<double>(st.duration.count_ps()) * o.sustained + 0.5));
            return st;
        };
        // Keys and values of the rank's 2c tokens (backward: and their gradients).
        const Bytes kv_block{kBytes * shape_.b * 2 * c * 2 * kv / shape_.t};
        const Bytes moving{kv_block.value * (o.backward ? 2 : 1)};
        const char* send = o.backward    ? "send kv and dkv cp"
                           : o.recompute ? "recompute send kv cp"
                                         : "send kv cp";
        const auto sendrecv = [&] {
            return collective(send, CollectiveKind::SendRecv, group, moving, Step::OverlapNext);
        };
        const char* diagonal = o.backward    ? "attention bwd cp diagonal"
                               : o.recompute ? "recompute attention cp diagonal"
                                             : "attention cp diagonal";
        const char* full = o.backward    ? "attention bwd cp block"
                           : o.recompute ? "recompute attention cp block"
                                         : "attention cp block";
        // Step 0 alongside the first block's transfer; steps 1 .. steps-2 alongside the next
        // ones; the last step alone.
        out.push_back(sendrecv());
        out.push_back(block(diagonal, 2 * c, 2 * c));
        if (steps > 2) {
            Step send_next = sendrecv();
            Step compute = block(full, 2 * c, c);
            send_next.repeat = compute.repeat = steps - 2;
            out.push_back(send_next);
            out.push_back(compute);
        }
        out.push_back(block(full, 2 * c, c));
        // The key and value gradients, accumulated around the ring, go back to their rank.
        if (o.backward)
            out.push_back(
                collective("send dkv cp", CollectiveKind::SendRecv, group, kv_block));
    }

    const ExperimentSpec& spec_;
    const topology::GpuModel& gpu_;
    Shape shape_;
    AttentionBlock block_;
};

}  // namespace

void apply_context_parallel(const ExperimentSpec& spec, const topology::GpuModel& gpu,
                            LayerPasses& layer) {
    const auto& l = spec.layout;
    if (l.cp < 2 || l.cp_comm_type == CpCommType::AllGather) return;
    const std::string type(name_of(kCpCommTypeNames, l.cp_comm_type));
    if (spec.training.attention != Attention::Flash)
        throw ConfigError(spec.layout_where,
                          "'parallelism': cp_comm_type " + type +
                              " runs Transformer Engine's fused attention, not the unfused "
                              "attention core; set training.attention: flash, or cp_comm_type: "
                              "allgather");
    const int heads = spec.model.attention_heads / l.tp;
    const int split = l.cp_comm_type == CpCommType::A2a     ? l.cp
                      : l.cp_comm_type == CpCommType::A2aP2p ? l.cp_a2a_size
                                                               : 1;
    if (heads % split != 0)
        throw ConfigError(spec.layout_where,
                          "'parallelism': cp_comm_type " + type + " splits the " +
                              std::to_string(heads) + " attention heads of each tensor-parallel " +
                              "rank over " + std::to_string(split) +
                              " context ranks, which do not divide them; use cp_comm_type p2p or "
                              "allgather, or a size that divides the heads");
    const Rewriter rewriter(spec, gpu);
    rewriter.rewrite(layer.forward);
    rewriter.rewrite(layer.backward_input);
    rejoin_backward(layer);
}

}  // namespace cs::workload
