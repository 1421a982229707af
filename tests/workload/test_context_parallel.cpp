// Context parallelism as Megatron-LM runs it (workload/context_parallel.cpp,
// parallelism.cp_comm_type): the steps a 2- and a 4-way p2p ring put in each layer's passes, their
// bytes and their share of the attention, and the all-to-alls of a2a, on a small GPT whose
// numbers are derived by hand below.
#include <doctest/doctest.h>

#include "scratch.hpp"

#include <string>
#include <vector>

#include "workload/experiment.hpp"
#include "workload/plan.hpp"

using namespace cs;
using namespace cs::workload;

namespace {

// 4 layers, h = 1024, 16 heads of 64 (q = kv = 1024 wide), s = 1024, micro-batch b = 2, no tp,
// one pipeline stage; the roofline gives every step.
const char* const kGpt =
    "topology: four-gpus.yaml\n"
    "model: {layers: 4, hidden_size: 1024, attention_heads: 16, vocab_size: 0}\n"
    "parallelism: {pp: 1, cp: 2}\n"
    "training: {micro_batch_size: 2, global_batch_size: 16, seq_length: 1024}\n"
    "compute: {model: roofline}\n";

struct Planned {
    IterationPlan plan;
    explicit Planned(const std::vector<std::string>& overrides)
        : plan(cs::test::plan_on_four_gpus("context_parallel", kGpt, overrides)) {}
    const PassPlan& forward() const { return plan.virtual_stages[0].forward; }
    const PassPlan& backward() const { return plan.virtual_stages[0].backward; }
};

// Over a pass: the steps whose label is `label`, counted with their repeat, and their size.
struct Seen {
    int count = 0;
    std::int64_t bytes = -1;  // the size of each (all equal), -1: none
    double model_flops = 0;   // sum of model FLOPs x repeat
};
Seen seen(const PassPlan& pass, const std::string& label) {
    Seen s;
    for (const auto& st : pass.steps) {
        if (st.label != label) continue;
        s.count += st.repeat;
        if (st.kind == Step::Kind::Collective) {
            if (s.bytes >= 0) CHECK(s.bytes == st.size.value);
            s.bytes = st.size.value;
            CHECK(st.collective == (label.rfind("all-to-all", 0) == 0
                                        ? network::CollectiveKind::AllToAll
                                        : network::CollectiveKind::SendRecv));
        }
        s.model_flops += st.model_flops.value * st.repeat;
    }
    return s;
}

// Whether the collective right before each compute step labelled `label` overlaps it.
void check_overlapped(const PassPlan& pass, const std::string& send, const std::string& block) {
    for (std::size_t k = 0; k < pass.steps.size(); ++k) {
        const auto& st = pass.steps[k];
        if (st.label != send) continue;
        CHECK(st.has(Step::OverlapNext));
        REQUIRE(k + 1 < pass.steps.size());
        CHECK(std::string(pass.steps[k + 1].label).find(block) != std::string::npos);
        CHECK(pass.steps[k + 1].repeat == st.repeat);
    }
}

}  // namespace

TEST_CASE("cp p2p, 2-way ring: one K/V exchange under the diagonal block, then the other block") {
    // cp = 2: each GPU holds s / cp = 512 tokens as two chunks of c = s / (2 cp) = 256 (chunks i
    // and 2cp-1-i). Its keys and values: 2 tensors x b x 2c tokens x kv x 2 bytes =
    // 2 x 2 x 512 x 1024 x 2 = 4,194,304 B, sent once per layer (cp - 1 = 1 ring step) under
    // the diagonal block; the backward sends keys, values and their gradients (8,388,608 B) and
    // returns the accumulated gradients to their owner (4,194,304 B).
    // The attention's model FLOPs per GPU and layer, 4 b (s/cp) s q = 4 x 2 x 512 x 1024 x 1024 =
    // 4,294,967,296, are split evenly over the cp = 2 steps; over 4 layers 17,179,869,184.
    const Planned p({"parallelism={pp: 1, cp: 2}"});
    const auto send = seen(p.forward(), "send kv cp");
    CHECK(send.count == 4 * 1);
    CHECK(send.bytes == 4'194'304);
    const auto diagonal = seen(p.forward(), "attention cp diagonal");
    const auto block = seen(p.forward(), "attention cp block");
    CHECK(diagonal.count == 4);
    CHECK(block.count == 4);
    CHECK(diagonal.model_flops == doctest::Approx(4 * 2'147'483'648.0));
    CHECK(block.model_flops == doctest::Approx(4 * 2'147'483'648.0));
    check_overlapped(p.forward(), "send kv cp", "attention cp diagonal");
    const auto both = seen(p.backward(), "send kv and dkv cp");
    CHECK(both.count == 4);
    CHECK(both.bytes == 8'388'608);
    const auto back = seen(p.backward(), "send dkv cp");
    CHECK(back.count == 4);
    CHECK(back.bytes == 4'194'304);
    // The roofline's all-gather of keys and values is gone (p2p moves them round the ring).
    for (const auto& st : p.forward().steps)
        CHECK_FALSE((st.kind == Step::Kind::Collective && st.group == GroupKind::Cp &&
                     st.collective == network::CollectiveKind::AllGather));
}

TEST_CASE("cp p2p, 4-way ring: three exchanges, each under the block before it") {
    // cp = 4 (dp = 1): 256 tokens per GPU, chunks of c = 128. Keys and values: 2 x 2 x 256 x 1024
    // x 2 = 2,097,152 B per exchange, cp - 1 = 3 per layer: one under the diagonal block and two
    // (repeat cp - 2) under the first two full blocks; the last full block runs alone. Model
    // FLOPs 4 x 2 x 256 x 1024 x 1024 = 2,147,483,648 per layer, 1/4 in each of the 4 steps:
    // 536,870,912 per block, so over 4 layers the diagonal holds 2,147,483,648 and the three
    // full blocks 6,442,450,944.
    const Planned p({"parallelism={pp: 1, cp: 4}"});
    const auto send = seen(p.forward(), "send kv cp");
    CHECK(send.count == 4 * 3);
    CHECK(send.bytes == 2'097'152);
    const auto diagonal = seen(p.forward(), "attention cp diagonal");
    const auto block = seen(p.forward(), "attention cp block");
    CHECK(diagonal.count == 4);
    CHECK(block.count == 4 * 3);
    CHECK(diagonal.model_flops == doctest::Approx(2'147'483'648.0));
    CHECK(block.model_flops == doctest::Approx(6'442'450'944.0));
    check_overlapped(p.forward(), "send kv cp", "attention cp");
    // Every exchange is overlapped but the blocks outnumber them by one per layer.
    int overlapped = 0;
    for (const auto& st : p.forward().steps)
        if (st.has(Step::OverlapNext)) overlapped += st.repeat;
    CHECK(overlapped == 4 * 3);
    const auto both = seen(p.backward(), "send kv and dkv cp");
    CHECK(both.count == 4 * 3);
    CHECK(both.bytes == 4'194'304);
    CHECK(seen(p.backward(), "send dkv cp").bytes == 2'097'152);
}

TEST_CASE("cp a2a: q, k, v and the output change from sequence- to head-split") {
    // cp = 2: b x s/cp = 1024 tokens per GPU. Forward: q, k, v (1024 + 2 x 1024 wide) x 2 bytes
    // = 6,291,456 B before the attention, the output (1024 wide) 2,097,152 B after; the backward
    // mirrors them. No ring step.
    const Planned p({"parallelism={pp: 1, cp: 2, cp_comm_type: a2a}"});
    CHECK(seen(p.forward(), "all-to-all cp qkv").bytes == 6'291'456);
    CHECK(seen(p.forward(), "all-to-all cp out").bytes == 2'097'152);
    CHECK(seen(p.backward(), "all-to-all cp dout").bytes == 2'097'152);
    CHECK(seen(p.backward(), "all-to-all cp dqkv").bytes == 6'291'456);
    CHECK(seen(p.forward(), "send kv cp").count == 0);
}

TEST_CASE("cp allgather keeps the roofline's all-gather of keys and values") {
    const Planned p({"parallelism={pp: 1, cp: 2, cp_comm_type: allgather}"});
    int gathers = 0;
    for (const auto& st : p.forward().steps)
        if (st.kind == Step::Kind::Collective && st.group == GroupKind::Cp &&
            st.collective == network::CollectiveKind::AllGather)
            gathers += st.repeat;
    CHECK(gathers == 4);
    CHECK(seen(p.forward(), "send kv cp").count == 0);
}
