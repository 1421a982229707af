// Planning one iteration: layers over pipeline chunks, microbatches, per-stage parameters, model
// FLOPs, tokens, p2p activation sizes (plan_iteration) and memory per device (fill_memory), on a
// small GPT whose numbers are derived by hand below.
#include <doctest/doctest.h>

#include "../error_of.hpp"
#include "scratch.hpp"

#include <functional>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "workload/experiment.hpp"
#include "workload/pipeline_split.hpp"
#include "workload/plan.hpp"
#include "workload/roofline.hpp"

using namespace cs;
using namespace cs::workload;
using cs::test::error_of;

namespace {

using cs::test::kFourGpus;
using cs::test::Scratch;

// A small GPT on 4 GPUs: 4 layers, h = 1024, 16 heads (head_dim 64), s = 1024, micro-batch 2,
// global batch 16, pp 2 and so dp = 4 / 2 = 2. Profile compute: 1 ms forward, 2 ms backward per
// layer.
const char* const kSmallGpt =
    "topology: four-gpus.yaml\n"
    "model: {layers: 4, hidden_size: 1024, attention_heads: 16, vocab_size: 0}\n"  // line 2
    "parallelism: {pp: 2}\n"                                                       // line 3
    "training: {micro_batch_size: 2, global_batch_size: 16, seq_length: 1024}\n"
    "compute: {model: profile, layer_forward: 1ms, layer_backward: 2ms}\n";

// The roofline variant of kSmallGpt (no profiled times).
const std::vector<std::string> kRoofline = {"compute={model: roofline}"};

struct Loaded {
    Scratch scratch;
    std::filesystem::path experiment;
    explicit Loaded(const std::string& name) : scratch(name) {
        scratch.write("four-gpus.yaml", kFourGpus);
        experiment = scratch.write("e.yaml", kSmallGpt);
    }
    ExperimentSpec spec(std::vector<std::string> overrides = {},
                        const std::vector<std::string>& more = {}) const {
        overrides.insert(overrides.end(), more.begin(), more.end());
        return load_experiment(experiment, overrides);
    }
};

// Placements of virtual stage vs on p devices: one chunk per device (gpipe, 1f1b, zb-h1/h2),
// interleaved round robin, and the V of zb-v and dualpipev.
auto one_chunk() {
    return [](int vs) { return vs; };
}
auto round_robin(int p) {
    return [p](int vs) { return vs % p; };
}
auto v_shape(int p) {
    return [p](int vs) { return vs < p ? vs : 2 * p - 1 - vs; };
}

// Parameters of one GPT layer with biases and two LayerNorms (Narayanan eq. 2's per-layer term):
// QKV 3h^2 + 3h, projection h^2 + h, fc1 4h^2 + 4h, fc2 4h^2 + h, LayerNorms 2 x 2h:
// 12h^2 + 13h. For h = 1024: 12,582,912 + 13,312.
constexpr std::int64_t kLayer = 12'596'224;
// The word embedding V x h for V = 50304, h = 1024.
constexpr std::int64_t kWord = 51'511'296;
// The final LayerNorm before the output layer: 2h.
constexpr std::int64_t kFinalNorm = 2048;

}  // namespace

TEST_CASE("layers split evenly over pp x chunks, in order") {
    const Loaded l("plan_split");
    const auto spec = l.spec();

    // 4 layers over 2 stages x 1 chunk: 2 layers each, layers 0-1 and 2-3.
    const auto plan = plan_iteration(spec, 1, false, one_chunk());
    CHECK(plan.stages == 2);
    CHECK(plan.chunks == 1);
    REQUIRE(plan.virtual_stages.size() == 2);
    REQUIRE(plan.devices.size() == 2);
    CHECK(plan.virtual_stages[0].first_layer == 0);
    CHECK(plan.virtual_stages[0].layers == 2);
    CHECK(plan.virtual_stages[1].first_layer == 2);
    CHECK(plan.virtual_stages[1].layers == 2);
    // The profiled times repeat once per layer of the chunk: 2 x 1 ms forward, 2 x 2 ms backward.
    CHECK(plan.virtual_stages[1].forward.compute_time() == Time::ms(2));
    CHECK(plan.virtual_stages[1].backward.compute_time() == Time::ms(4));

    // 2 stages x 2 chunks = 4 virtual stages of one layer, virtual stage vs holding layer vs.
    const auto two = plan_iteration(spec, 2, false, round_robin(2));
    CHECK(two.chunks == 2);
    REQUIRE(two.virtual_stages.size() == 4);
    CHECK(two.devices.size() == 2);
    for (int vs = 0; vs < 4; ++vs) {
        CAPTURE(vs);
        CHECK(two.virtual_stages[static_cast<std::size_t>(vs)].first_layer == vs);
        CHECK(two.virtual_stages[static_cast<std::size_t>(vs)].layers == 1);
        CHECK(two.virtual_stages[static_cast<std::size_t>(vs)].forward.compute_time() ==
              Time::ms(1));
    }
}

const std::string kUnevenHint =
    "; for an uneven split give parallelism.first_stage_layers / last_stage_layers, "
    "account_for_embedding / account_for_loss, or stage_layers";

TEST_CASE("an uneven split of layers is an error located at parallelism") {
    const Loaded l("plan_uneven");
    // kSmallGpt's parallelism is line 3; a flow mapping's location is its opening brace, column
    // 14 ("parallelism: " is 13 characters).
    const std::string at = l.experiment.string() + ":3:14: 'parallelism': ";
    const auto spec = l.spec();
    // 4 layers over 2 stages x 4 chunks = 8 virtual stages.
    CHECK(error_of([&] { plan_iteration(spec, 4, false, round_robin(2)); }) ==
          at +
              "layers (4) must be divisible by pp x chunks = 2 x 4 = 8 so that every pipeline "
              "chunk gets the same number of layers" +
              kUnevenHint);
    // 6 layers over pp 4 (and dp 1) loads, but cannot be planned: 6 is not a multiple of 4.
    const auto six = l.spec({"model.layers=6", "parallelism.pp=4"});
    CHECK(six.layout.dp == 1);
    CHECK(error_of([&] { plan_iteration(six, 1, false, one_chunk()); }) ==
          at +
              "layers (6) must be divisible by pp x chunks = 4 x 1 = 4 so that every pipeline "
              "chunk gets the same number of layers" +
              kUnevenHint);
}

TEST_CASE("microbatches = global batch / (micro-batch x dp); tokens = global batch x s") {
    const Loaded l("plan_batches");
    // 16 / (2 x 2) = 4; tokens 16 x 1024 = 16,384.
    const auto plan = plan_iteration(l.spec(), 1, false, one_chunk());
    CHECK(plan.microbatches == 4);
    CHECK(plan.tokens_per_iteration == 16'384);
    // 48 / (2 x 2) = 12; with micro-batch 4: 16 / (4 x 2) = 2.
    CHECK(plan_iteration(l.spec({"training.global_batch_size=48"}), 1, false, one_chunk())
              .microbatches == 12);
    CHECK(plan_iteration(l.spec({"training.micro_batch_size=4"}), 1, false, one_chunk())
              .microbatches == 2);
    // pp 4 leaves dp 1: 16 / (2 x 1) = 8 microbatches; tokens do not depend on the layout.
    const auto pp4 = plan_iteration(l.spec({"parallelism.pp=4"}), 1, false, one_chunk());
    CHECK(pp4.microbatches == 8);
    CHECK(pp4.tokens_per_iteration == 16'384);
}

TEST_CASE("training.optimizer: none leaves out the optimizer step, adam keeps it") {
    const Loaded l("plan_optimizer");
    // The roofline optimizer step moves every held parameter's states through HBM, so it is
    // positive for Adam on 2 layers per stage; `none` (a benchmark timing forward and backward
    // only) makes it exactly zero on every device, and nothing else in the plan changes.
    const auto adam = plan_iteration(l.spec(kRoofline), 1, false, one_chunk());
    const auto none =
        plan_iteration(l.spec(kRoofline, {"training.optimizer=none"}), 1, false, one_chunk());
    for (std::size_t d = 0; d < 2; ++d) {
        CHECK(adam.devices[d].optimizer_step > Time::zero());
        CHECK(none.devices[d].optimizer_step == Time::zero());
        CHECK(none.devices[d].dp_parameters == adam.devices[d].dp_parameters);
    }
    // A profiled optimizer step is left out too.
    const auto profiled = plan_iteration(
        l.spec({"compute.optimizer_step=3ms", "training.optimizer=none"}), 1, false, one_chunk());
    CHECK(profiled.devices[0].optimizer_step == Time::zero());
    // Anything else is refused, naming the choices.
    const auto e = error_of([&] { (void)l.spec({"training.optimizer=sgd"}); });
    CHECK(e.find("adam") != std::string::npos);
    CHECK(e.find("none") != std::string::npos);
}

TEST_CASE(
    "per-stage parameters: layers, the embedding on the first stage, the output on the last") {
    const Loaded l("plan_parameters");
    auto params = [](const IterationPlan& plan, int device) {
        // One chunk per device: the dp bucket holds all of the device's parameters.
        return plan.devices[static_cast<std::size_t>(device)].dp_parameters;
    };

    SUBCASE("vocab 0: two layers per stage, the final LayerNorm on the last") {
        const auto plan = plan_iteration(l.spec(), 1, false, one_chunk());
        CHECK(params(plan, 0) == 2 * kLayer);               // 25,192,448
        CHECK(params(plan, 1) == 2 * kLayer + kFinalNorm);  // 25,194,496
    }
    SUBCASE("vocab 50304: the word embedding first, its tied copy and the final norm last") {
        // GPT ties the output layer to the word embedding; the last stage keeps a copy that
        // Megatron-LM synchronises, so both ends hold V x h.
        const auto plan = plan_iteration(l.spec({"model.vocab_size=50304"}), 1, false, one_chunk());
        CHECK(params(plan, 0) == 2 * kLayer + kWord);               // 76,703,744
        CHECK(params(plan, 1) == 2 * kLayer + kWord + kFinalNorm);  // 76,705,792
        // Gradients are reduced in fp32 (4 bytes) for bf16 training; the weights are 2 bytes.
        CHECK(plan.devices[0].dp_gradient_bytes == Bytes{4 * (2 * kLayer + kWord)});
        CHECK(plan.devices[0].dp_parameter_bytes == Bytes{2 * (2 * kLayer + kWord)});
        CHECK_FALSE(plan.devices[0].dp_sharded);
    }
    SUBCASE("tp 2: weights and biases split, LayerNorms replicated") {
        // tp 2 x pp 2 = 4 GPUs, dp 1. Per layer (12h^2 + 9h) / 2 + 4h = 6,296,064 + 4,096; the
        // word embedding V x h / 2 = 25,755,648 per GPU; the final norm (2h) is replicated.
        const auto plan = plan_iteration(l.spec({"model.vocab_size=50304", "parallelism.tp=2"}), 1,
                                         false, one_chunk());
        const std::int64_t layer_tp2 = 6'300'160;
        CHECK(params(plan, 0) == 2 * layer_tp2 + 25'755'648);               // 38,355,968
        CHECK(params(plan, 1) == 2 * layer_tp2 + 25'755'648 + kFinalNorm);  // 38,358,016
    }
}

// plan_iteration adds up parameters_per_gpu chunk by chunk; on a V-placed device 0 the output chunk
// (has_embedding false) brings a tied copy of the word embedding that the embedding chunk on the
// same device already holds, which it once counted twice in the dp gradient all-reduce.
TEST_CASE("V placement: the dp buckets of device 0 hold the tied embedding once") {
    const Loaded l("plan_parameters_v");
    // 4 layers over 2 devices x 2 chunks: device 0 runs virtual stages 0 (layer 0 and the
    // embedding) and 3 (layer 3, the final norm and the output layer, tied to the embedding on
    // the same device); device 1 runs layers 1 and 2. One dp bucket per chunk: the device's
    // parameters / 2.
    const auto plan = plan_iteration(l.spec({"model.vocab_size=50304"}), 2, false, v_shape(2));
    CHECK(plan.devices[1].dp_parameters == 2 * kLayer / 2);                         // 12,596,224
    CHECK(plan.devices[0].dp_parameters == (2 * kLayer + kWord + kFinalNorm) / 2);  // 38,352,896
}

TEST_CASE("model FLOPs per iteration: Narayanan et al. 72 B s l h^2 (1 + s/6h + V/12lh)") {
    const Loaded l("plan_flops");
    // B = 16, s = 1024, l = 4, h = 1024, V = 50304. Per layer forward: the GEMMs
    // 2 x B s x 12h^2 plus the attention core 4 B s^2 h; backward twice the forward; the logits
    // 2 B s h V, also three times. Sum: 72 B s l h^2 + 12 B s^2 l h + 6 B s h V, the closed form.
    const double B = 16, s = 1024, L = 4, h = 1024, V = 50304;
    const double closed = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
    const auto spec = l.spec({"model.vocab_size=50304"});
    const auto plan = plan_iteration(spec, 1, false, one_chunk());
    CHECK(plan.model_flops_per_iteration.value == doctest::Approx(closed).epsilon(1e-12));
    // No recomputation: the hardware executes the model FLOPs.
    CHECK(plan.hardware_flops_per_iteration.value == doctest::Approx(closed).epsilon(1e-12));

    // Full recomputation runs every layer's forward again (not the logits): Narayanan eq. 3,
    // 96 B s l h^2 (1 + s/6h + V/16lh).
    const double full = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    const auto recomputed = plan_iteration(
        l.spec({"model.vocab_size=50304", "training.recompute=full"}), 1, false, one_chunk());
    CHECK(recomputed.model_flops_per_iteration.value == doctest::Approx(closed).epsilon(1e-12));
    CHECK(recomputed.hardware_flops_per_iteration.value == doctest::Approx(full).epsilon(1e-12));

    // Selective recomputation runs the attention core's forward again: + 4 B s^2 h per layer.
    const auto selective = plan_iteration(
        l.spec({"model.vocab_size=50304", "training.recompute=selective"}), 1, false, one_chunk());
    CHECK(selective.hardware_flops_per_iteration.value ==
          doctest::Approx(closed + 4 * B * s * s * h * L).epsilon(1e-12));

    // The FLOPs of a whole model do not depend on how it is laid out: tp 2 (dp 1) gives the same.
    const auto tp2 = plan_iteration(l.spec({"model.vocab_size=50304", "parallelism.tp=2"}), 1,
                                    false, one_chunk());
    CHECK(tp2.model_flops_per_iteration.value == doctest::Approx(closed).epsilon(1e-12));
}

TEST_CASE("the FLOPs of the planned steps add up to the iteration's model FLOPs") {
    const Loaded l("plan_step_flops");
    // Every GPU of a stage runs its chunks' steps for each of its m microbatches; the dp replicas
    // and the tp ranks each hold 1/(dp x tp) of the work, so summing a device's per-microbatch
    // step FLOPs over virtual stages, times m x dp x tp, counts the whole iteration. Profile times
    // carry the layers' FLOPs (vocab 0: there are no logits to account for).
    auto total = [](const IterationPlan& plan, const ExperimentSpec& spec) {
        double per_microbatch = 0;
        for (const auto& c : plan.virtual_stages)
            per_microbatch += c.forward.model_flops().value + c.backward.model_flops().value;
        return per_microbatch * plan.microbatches * spec.layout.dp * spec.layout.tp;
    };
    const double B = 16, s = 1024, L = 4, h = 1024;
    const double closed = 72 * B * s * L * h * h * (1 + s / (6 * h));

    const auto profile = l.spec();
    CHECK(total(plan_iteration(profile, 1, false, one_chunk()), profile) ==
          doctest::Approx(closed).epsilon(1e-12));
    const auto tp2 = l.spec({"parallelism.tp=2"});
    CHECK(total(plan_iteration(tp2, 2, false, round_robin(2)), tp2) ==
          doctest::Approx(closed).epsilon(1e-12));
    // The roofline model's kernels count the same FLOPs (its recomputation kernels are not model
    // FLOPs), with the vocabulary too: + 6 B s h V for the logits GEMM forward and backward.
    const double V = 50304;
    const auto roofline = l.spec(kRoofline, {"model.vocab_size=50304", "parallelism.tp=2",
                                             "parallelism.sequence_parallel=true"});
    CHECK(total(plan_iteration(roofline, 1, false, one_chunk()), roofline) ==
          doctest::Approx(closed + 6 * B * s * h * V).epsilon(1e-9));
}

TEST_CASE("p2p activation bytes: micro-batch x s x h x 2 bytes (bf16), split over tp") {
    const Loaded l("plan_p2p");
    // b s h x 2 bytes = 2 x 1024 x 1024 x 2 = 4,194,304 bytes from every virtual stage.
    for (const auto& overrides : {std::vector<std::string>{}, kRoofline}) {
        CAPTURE(overrides.size());
        const auto plan = plan_iteration(l.spec(overrides), 2, false, round_robin(2));
        for (const auto& c : plan.virtual_stages)
            CHECK(c.activation_bytes == Bytes{4'194'304});
    }
    // With sequence parallelism over tp 2 each rank sends its half of the sequence: 2,097,152.
    const std::vector<std::string> sp = {"parallelism.tp=2", "parallelism.sequence_parallel=true"};
    CHECK(plan_iteration(l.spec(sp), 1, false, one_chunk()).virtual_stages[0].activation_bytes ==
          Bytes{2'097'152});
    CHECK(plan_iteration(l.spec(kRoofline, sp), 1, false, one_chunk())
              .virtual_stages[0]
              .activation_bytes == Bytes{2'097'152});
    // Micro-batch 1 halves it: 1 x 1024 x 1024 x 2 = 2,097,152.
    CHECK(plan_iteration(l.spec({"training.micro_batch_size=1"}), 1, false, one_chunk())
              .virtual_stages[0]
              .activation_bytes == Bytes{2'097'152});
}

// Known defect (see the goldens branch report): without sequence parallelism the profile plan
// sends b s h x 2 / tp per rank (Megatron-LM's scatter/gather, as plan.cpp states) but the
// roofline plan overwrites it with the whole b s h x 2 (roofline.cpp's activation_send uses
// norm_tokens, which is only split with sp). Which one is right is the owners' call; the test
// only asks that the compute model not change the network traffic. Remove should_fail once the
// two agree.
TEST_CASE("p2p activation bytes do not depend on the compute model (tp 2, no sp)") {
    const Loaded l("plan_p2p_tp");
    const std::vector<std::string> tp2 = {"parallelism.tp=2"};
    const auto profile = plan_iteration(l.spec(tp2), 1, false, one_chunk());
    const auto roofline = plan_iteration(l.spec(kRoofline, tp2), 1, false, one_chunk());
    // Megatron-LM's scatter/gather (workload/pipeline_comm.cpp): each tp GPU sends its 1/tp
    // slice under either model, 4,194,304 / tp 2 = 2,097,152 (the roofline sent 4,194,304
    // before).
    CHECK(profile.virtual_stages[0].activation_bytes.value ==
          roofline.virtual_stages[0].activation_bytes.value);
}

TEST_CASE("fill_memory: model states of the device's layers plus the schedule's peak activations") {
    const Loaded l("plan_memory");
    const auto spec = l.spec();
    auto plan = plan_iteration(spec, 1, false, one_chunk());
    // 1F1B on 2 stages: device 0 holds 2 microbatches at its peak, device 1 one.
    fill_memory(spec, plan, {2, 1}, one_chunk());

    // Activations per layer and microbatch (Korthikanti Table 2 with flash attention, tp 1):
    // 34 s b h + the softmax log-sum-exp 4 a s b = 34 x 2,097,152 + 4 x 16 x 2048 = 71,434,240
    // bytes; 2 layers per chunk: 142,868,480.
    const std::int64_t chunk = 2 * 71'434'240;
    // bf16 mixed precision: 2-byte weights, 4-byte gradients, 12 bytes of fp32 master weights
    // and Adam moments per parameter (no distributed optimizer).
    const auto& d0 = plan.devices[0].memory;
    const std::int64_t p0 = 2 * kLayer;
    CHECK(d0.parameters == Bytes{2 * p0});
    CHECK(d0.gradients == Bytes{4 * p0});
    CHECK(d0.optimizer_states == Bytes{12 * p0});
    CHECK(d0.activations == Bytes{2 * chunk});
    CHECK(d0.total == Bytes{18 * p0 + 2 * chunk});
    const auto& d1 = plan.devices[1].memory;
    const std::int64_t p1 = 2 * kLayer + kFinalNorm;
    CHECK(d1.parameters == Bytes{2 * p1});
    CHECK(d1.activations == Bytes{chunk});
    CHECK(d1.total == Bytes{18 * p1 + chunk});

    // The distributed optimizer shards the 12 bytes over dp 2: 6 bytes per parameter.
    const auto sharded = l.spec({"parallelism.distributed_optimizer=true"});
    auto splan = plan_iteration(sharded, 1, false, one_chunk());
    fill_memory(sharded, splan, {2, 1}, one_chunk());
    CHECK(splan.devices[0].memory.optimizer_states == Bytes{6 * p0});
    CHECK(splan.devices[0].dp_sharded);
}

TEST_CASE("fill_memory: a V placement puts the embedding and output layer on device 0") {
    const Loaded l("plan_memory_v");
    const auto spec = l.spec({"model.vocab_size=50304"});
    auto plan = plan_iteration(spec, 2, false, v_shape(2));
    // Peaks of 4 chunk activations on both devices (2p, as ZB-V).
    fill_memory(spec, plan, {4, 4}, v_shape(2));
    // Device 0: layers 0 and 3, the word embedding (the output layer is tied to it on the same
    // device, no copy) and the final norm; device 1: layers 1 and 2. One layer per chunk:
    // 71,434,240 activation bytes per microbatch, as in the test above.
    CHECK(plan.devices[0].memory.parameters == Bytes{2 * (2 * kLayer + kWord + kFinalNorm)});
    CHECK(plan.devices[1].memory.parameters == Bytes{2 * (2 * kLayer)});
    // Device 0 also holds the loss: at its backward the 16-bit gradient of the logits of one
    // microbatch (Megatron-LM's cross entropy turns the saved fp32 softmax into the gradient in
    // place, then casts it): 2 bytes x b 2 x s 1024 x vocabulary 50304 = 206,045,184.
    CHECK(plan.devices[0].memory.activations == Bytes{4 * 71'434'240 + 206'045'184});
    CHECK(plan.devices[1].memory.activations == Bytes{4 * 71'434'240});
}

// fill_memory sums the parameters of the chunks the schedule places on each device, so with
// leading dense layers in an MoE model each device holds the kinds of layers it runs (DeepSeek-V3
// runs DualPipe with 3 dense layers).
TEST_CASE("fill_memory follows the placement of MoE layers (interleaved, dense_layers 2)") {
    Scratch s("plan_memory_moe");
    s.write("four-gpus.yaml", kFourGpus);
    // A tiny GPT-style MoE: h = 64, 4 heads, 2 experts of width 128 (top 1), the first 2 of 4
    // layers dense (MLP 4h = 256). Parameters per layer (biases, LayerNorms, GELU):
    //   attention 4h^2 + 4h = 16,640; LayerNorms 4h = 256;
    //   dense MLP 8h^2 + 5h = 33,088                  -> dense layer 49,984 (= 12h^2 + 13h)
    //   router h x 2 = 128; 2 experts x (2 x 64 x 128 + 128 + 64) = 33,152 -> MoE layer 50,176.
    const auto e = s.write("e.yaml",
                           "topology: four-gpus.yaml\n"
                           "model: {layers: 4, hidden_size: 64, attention_heads: 4, experts: 2,\n"
                           "        top_k: 1, moe_ffn_hidden_size: 128, dense_layers: 2}\n"
                           "parallelism: {pp: 2}\n"
                           "training: {global_batch_size: 8, seq_length: 128}\n"
                           "compute: {model: profile, layer_forward: 1ms, layer_backward: 2ms}\n");
    const auto spec = load_experiment(e, {});
    auto plan = plan_iteration(spec, 2, false, round_robin(2));
    fill_memory(spec, plan, {3, 2}, round_robin(2));
    // Interleaved: device 0 holds layers 0 (dense) and 2 (MoE); device 1 layers 1 (dense) and
    // 3 (MoE) and the final norm (2h = 128).
    CHECK(plan.devices[0].memory.parameters == Bytes{2 * (49'984 + 50'176)});
    CHECK(plan.devices[1].memory.parameters == Bytes{2 * (49'984 + 50'176 + 128)});
}

TEST_CASE("profile runs with a framework issue that framework's kernels for each profiled layer") {
    Loaded l("plan_profile_launches");
    // A plain profile run: one launch per profiled step (no host model applies to it).
    const auto plain = l.spec();
    const auto p0 = plan_iteration(plain, 1, false, one_chunk());
    REQUIRE(p0.virtual_stages[0].forward.steps.size() == 1);
    CHECK(p0.virtual_stages[0].forward.steps[0].launches == 1);
    CHECK(p0.virtual_stages[0].forward.launches() == 2);  // 1 launch x 2 layers (repeat)
    // With framework: pytorch the "layer" step issues eager PyTorch's kernels of one GPT layer
    // (a GPT: biases and LayerNorms): forward 4 GEMMs and the attention with a memset each (10),
    // 2 norms, 2 residual adds, GELU: 15. Backward: 8 GEMMs with memsets (16), 4 bias-gradient
    // sums, attention backward (4), q/k/v concat and copy (2), GELU (1), 2 norms of 2 kernels
    // (4), 2 residual adds (2), one gradient accumulation per parameter tensor (4 weights, 4
    // biases, 2 LayerNorms x 2: 12): 45.
    const auto eager = l.spec({"compute.framework=pytorch"});
    const auto p1 = plan_iteration(eager, 1, false, one_chunk());
    CHECK(p1.virtual_stages[0].forward.steps[0].launches == 15);
    CHECK(p1.virtual_stages[0].backward.steps[0].launches == 45);
    CHECK(p1.virtual_stages[0].forward.launches() == 2 * 15);
    // Megatron's fused kernels: forward 10 (4 GEMMs, attention, 2 norms, 2 bias-dropout-adds,
    // bias-GELU), backward 14 (8 GEMMs, attention, 2 norms, 2 adds, GELU).
    const auto megatron = l.spec({"compute.framework=megatron"});
    const auto p2 = plan_iteration(megatron, 1, false, one_chunk());
    CHECK(p2.virtual_stages[0].forward.steps[0].launches == 10);
    CHECK(p2.virtual_stages[0].backward.steps[0].launches == 14);
    // The profiled times themselves do not change.
    CHECK(p1.virtual_stages[0].forward.compute_time() ==
          p0.virtual_stages[0].forward.compute_time());
}

TEST_CASE("uneven splits follow Megatron-LM's rules") {
    const Loaded l("plan_uneven_rules");
    auto spec = l.spec();
    spec.schedule = "interleaved";
    const auto split = [&](int pp, int layers, int chunks, const std::function<int(int)>& at) {
        spec.layout.pp = pp;
        spec.model.layers = layers;
        return split_layers(spec, chunks, at);
    };
    const auto all = [](int n, int v) { return std::vector<int>(static_cast<std::size_t>(n), v); };

    // Llama 3 405B: 126 layers + embedding + loss = 128 counted layers, 8 per stage on 16 stages;
    // the first and last stage build 7 transformer layers.
    spec.pipeline_split.account_for_embedding = true;
    spec.pipeline_split.account_for_loss = true;
    auto expect = all(16, 8);
    expect.front() = 7;
    expect.back() = 7;
    CHECK(split(16, 126, 1, one_chunk()) == expect);
    // With --num-layers-per-virtual-pipeline-stage 4 (2 chunks): 32 virtual stages of 4 counted
    // layers; virtual stage 0 (stage 0, chunk 0) and 31 (stage 15, chunk 1) hold 3.
    expect = all(32, 4);
    expect.front() = 3;
    expect.back() = 3;
    CHECK(split(16, 126, 2, round_robin(16)) == expect);
    // Only the loss counted: 127 = 8 x 16 - 1, the last virtual stage one fewer.
    spec.pipeline_split.account_for_embedding = false;
    expect = all(16, 8);
    expect.back() = 7;
    CHECK(split(16, 127, 1, one_chunk()) == expect);

    // First and last stage counts; the middle stages share the rest: 7 + 14 x 8 + 7 = 126.
    spec.pipeline_split = {};
    spec.pipeline_split.first_stage_layers = 6;
    spec.pipeline_split.last_stage_layers = 8;
    // 4 stages, 2 chunks: stage 0 has 6 (3 per chunk), stages 1-2 share 30 - 14 = 16 (8, 4 per
    // chunk), stage 3 has 8 (4 per chunk). Interleaved virtual stage vs = chunk x 4 + stage.
    CHECK(split(4, 30, 2, round_robin(4)) == std::vector<int>{3, 4, 4, 4, 3, 4, 4, 4});
    // On a V (zb-v) stage 0 holds virtual stages 0 and 7.
    CHECK(split(4, 30, 2, v_shape(4)) == std::vector<int>{3, 4, 4, 4, 4, 4, 4, 3});
    // Only the first given: the other three stages share 30 - 6 = 24.
    spec.pipeline_split.last_stage_layers.reset();
    CHECK(split(4, 30, 1, one_chunk()) == std::vector<int>{6, 8, 8, 8});

    // An explicit list per stage, or per virtual stage in model order.
    spec.pipeline_split = {};
    spec.pipeline_split.stage_layers = {1, 3, 2, 2};
    CHECK(split(4, 8, 1, one_chunk()) == std::vector<int>{1, 3, 2, 2});
    spec.pipeline_split.stage_layers = {2, 4, 2, 2};  // per stage, halved over 2 chunks
    CHECK(split(4, 10, 2, round_robin(4)) == std::vector<int>{1, 2, 1, 1, 1, 2, 1, 1});
    spec.pipeline_split.stage_layers = {0, 2, 2, 2, 2, 2, 2, 1};  // per virtual stage
    CHECK(split(4, 13, 2, round_robin(4)) == std::vector<int>{0, 2, 2, 2, 2, 2, 2, 1});
    // The same list under a schedule without virtual stages (vpp 2 ignored): stage s holds
    // entries s and s + 4.
    spec.layout.vpp = 2;
    CHECK(split(4, 13, 1, one_chunk()) == std::vector<int>{2, 4, 4, 3});
}

TEST_CASE("uneven splits: errors name the key and what does not fit") {
    const Loaded l("plan_uneven_errors");
    auto spec = l.spec();
    spec.schedule = "interleaved";
    const SourceLocation at{"here.yaml", 3, 14};
    const auto error = [&](int pp, int layers, int chunks) {
        spec.layout.pp = pp;
        spec.model.layers = layers;
        return error_of([&] { split_layers(spec, chunks, round_robin(pp)); });
    };
    auto& ps = spec.pipeline_split;
    ps.first_where = ps.last_where = ps.embedding_where = ps.loss_where = ps.list_where = at;
    const std::string first = "here.yaml:3:14: 'parallelism.first_stage_layers': ";

    ps.first_stage_layers = 7;
    ps.last_stage_layers = 7;
    CHECK(error(16, 126, 2) == first +
                                   "the first stage (7 layers) must be divisible by the 2 model "
                                   "chunks per pipeline stage of schedule 'interleaved', as "
                                   "Megatron-LM splits every stage evenly over its chunks");
    CHECK(error(5, 21, 1) ==
          first + "the 21 - 14 = 7 remaining layers do not divide over the 3 middle stages");
    CHECK(error(4, 14, 1) ==
          first +
              "first_stage_layers + last_stage_layers = 7 + 7 = 14 leaves no layer for the 2 "
              "middle stages (Megatron-LM refuses empty middle stages)");
    CHECK(error(4, 12, 1) == first +
                                 "first_stage_layers + last_stage_layers = 7 + 7 = 14 is more "
                                 "than the model's 12 layers");
    CHECK(error(2, 15, 1) == first +
                                 "with pp = 2 there is no middle stage, so the layers given "
                                 "must add up to the model's 15; first_stage_layers + "
                                 "last_stage_layers = 7 + 7 = 14");
    CHECK(error(1, 14, 1) == first +
                                 "an uneven first or last stage needs pipeline parallelism "
                                 "(pp >= 2); pp is 1");
    // The middle stages' count must divide by the chunks too: 4 + 2 x 3 + 4 = 14, 3 per middle
    // stage over 2 chunks.
    ps.first_stage_layers = 4;
    ps.last_stage_layers = 4;
    CHECK(error(4, 14, 2) == first +
                                 "each middle stage (3 layers) must be divisible by the 2 model "
                                 "chunks per pipeline stage of schedule 'interleaved', as "
                                 "Megatron-LM splits every stage evenly over its chunks");

    ps = {};
    ps.embedding_where = ps.loss_where = ps.list_where = at;
    ps.account_for_embedding = true;
    ps.account_for_loss = true;
    const std::string emb = "here.yaml:3:14: 'parallelism.account_for_embedding': ";
    CHECK(error(16, 125, 1) ==
          emb + "layers + embedding + loss = 125 + 1 + 1 = 127 must be divisible by pp = 16");
    CHECK(error(16, 126, 3) == emb +
                                   "layers + embedding + loss = 126 + 1 + 1 = 128 over pp = 16 "
                                   "is 8 per stage, which must be divisible by the 3 model "
                                   "chunks per pipeline stage of schedule 'interleaved'");

    ps = {};
    ps.list_where = at;
    const std::string list = "here.yaml:3:14: 'parallelism.stage_layers': ";
    ps.stage_layers = {1, 3, 2, 2};
    CHECK(error(4, 9, 1) == list + "the entries sum to 8 layers, but the model has 9");
    CHECK(error(4, 8, 2) == list +
                                "stage 0 has 1 layers, which do not divide evenly over the 2 "
                                "model chunks per pipeline stage of schedule 'interleaved'; "
                                "give one entry per virtual stage (8 entries, in model order) "
                                "to choose each chunk's layers");
    ps.stage_layers = {4, 4};
    CHECK(error(4, 8, 2) == list +
                                "has 2 entries; expected 4 (one per pipeline stage) or pp x "
                                "chunks = 4 x 2 = 8 (one per virtual stage, in model order, "
                                "for the 2 model chunks per pipeline stage of schedule "
                                "'interleaved')");
}

TEST_CASE("uneven split: compute per chunk, parameters and activations per stage follow it") {
    const Loaded l("plan_uneven_memory");
    // kSmallGpt with first_stage_layers 1: stage 0 holds layer 0, stage 1 layers 1-3.
    const auto spec = l.spec({"parallelism.first_stage_layers=1"});
    auto plan = plan_iteration(spec, 1, false, one_chunk());
    REQUIRE(plan.virtual_stages.size() == 2);
    CHECK(plan.virtual_stages[0].first_layer == 0);
    CHECK(plan.virtual_stages[0].layers == 1);
    CHECK(plan.virtual_stages[1].first_layer == 1);
    CHECK(plan.virtual_stages[1].layers == 3);
    // 1 ms forward and 2 ms backward per layer.
    CHECK(plan.virtual_stages[0].forward.compute_time() == Time::ms(1));
    CHECK(plan.virtual_stages[1].forward.compute_time() == Time::ms(3));
    CHECK(plan.virtual_stages[1].backward.compute_time() == Time::ms(6));
    // 1F1B peaks: 2 microbatches on stage 0, 1 on stage 1 (as the even test above); a layer's
    // activations per microbatch are 71,434,240 bytes.
    fill_memory(spec, plan, {2, 1}, one_chunk());
    const auto& d0 = plan.devices[0].memory;
    const auto& d1 = plan.devices[1].memory;
    CHECK(d0.parameters == Bytes{2 * kLayer});
    CHECK(d0.optimizer_states == Bytes{12 * kLayer});
    CHECK(d0.activations == Bytes{2 * 71'434'240});
    CHECK(d1.parameters == Bytes{2 * (3 * kLayer + kFinalNorm)});
    CHECK(d1.gradients == Bytes{4 * (3 * kLayer + kFinalNorm)});
    CHECK(d1.activations == Bytes{3 * 71'434'240});
    // The DP gradients: all of a stage's parameters, one chunk each.
    CHECK(plan.devices[0].dp_parameters == kLayer);
    CHECK(plan.devices[1].dp_parameters == 3 * kLayer + kFinalNorm);
    // Activations weighed per chunk (schedule::peak_inflight_bytes) replace count x largest.
    fill_memory(spec, plan, {2, 1}, one_chunk(), {Bytes{5}, Bytes{7}});
    CHECK(plan.devices[0].memory.activations == Bytes{5});
    CHECK(plan.devices[1].memory.total == Bytes{18 * (3 * kLayer + kFinalNorm) + 7});
}

TEST_CASE("uneven split: a chunk holding only the embedding has no layer steps") {
    const Loaded l("plan_uneven_empty");
    // 2 layers + embedding + loss = 4 counted layers over pp 2 x 2 chunks: 1 each, so virtual
    // stage 0 (the embedding) and 3 (the loss) hold no transformer layer.
    const auto spec =
        l.spec({"model.layers=2", "parallelism.account_for_embedding=true",
                "parallelism.account_for_loss=true", "compute.embedding_forward=0.5ms"});
    const auto plan = plan_iteration(spec, 2, false, round_robin(2));
    REQUIRE(plan.virtual_stages.size() == 4);
    CHECK(plan.virtual_stages[0].layers == 0);
    CHECK(plan.virtual_stages[3].layers == 0);
    CHECK(plan.virtual_stages[0].forward.compute_time() == Time::us(500));
    CHECK(plan.virtual_stages[3].forward.compute_time() == Time::zero());
    CHECK(plan.virtual_stages[3].forward.steps.empty());
    CHECK(plan.virtual_stages[1].forward.compute_time() == Time::ms(1));
    CHECK(plan.virtual_stages[2].first_layer == 1);
}

TEST_CASE("uneven split keys: stage profiles and mixed keys are refused") {
    const Loaded l("plan_uneven_keys");
    CHECK(error_of([&] {
              l.spec({"parallelism.first_stage_layers=1", "parallelism.account_for_loss=true"});
          }).find("'parallelism.account_for_loss': cannot be combined with first_stage_layers") !=
          std::string::npos);
    CHECK(error_of([&] {
              l.spec({"parallelism.stage_layers=[1, 3]", "parallelism.last_stage_layers=3"});
          }).find("'parallelism.stage_layers': give either stage_layers or") != std::string::npos);
    CHECK(error_of([&] {
              l.spec({"parallelism.stage_layers=[1, x]"});
          }).find("entry 1 (\"x\") is not a layer count") != std::string::npos);
    CHECK(error_of([&] {
              l.spec({"parallelism.stage_layers=[1, -3]"});
          }).find("entry 1 (\"-3\") is not a layer count") != std::string::npos);
    const auto stage =
        l.spec({"parallelism.first_stage_layers=1",
                "compute={model: profile, stage_forward: 2ms, stage_backward: 4ms}"});
    CHECK(error_of([&] {
              plan_iteration(stage, 1, false, one_chunk());
          }).find("an uneven pipeline split needs per-layer profile times") != std::string::npos);
}

TEST_CASE("a profile's measured recomputation: other recomputations charged by difference") {
    const Loaded l("plan_profiled_recompute");
    // kSmallGpt: 2 layers a chunk on pp 2, each profiled at 1 ms forward and 2 ms backward.
    const auto bwd = [&](std::vector<std::string> sets, int chunk = 0) {
        const auto plan = plan_iteration(l.spec(std::move(sets)), 1, false, one_chunk());
        return plan.virtual_stages[static_cast<std::size_t>(chunk)].backward.compute_time();
    };
    // Without profiled_recompute the backward is charged as given, whatever is recomputed.
    CHECK(bwd({"training.recompute=full"}) == Time::ms(4));
    // Measured without recomputation: full recomputation runs each layer's 1 ms forward again,
    // 2 x (2 + 1) = 6 ms a chunk; block 1 of the chunk's 2 layers once, 4 + 1 = 5 ms.
    const std::string none = "compute.profiled_recompute=none";
    CHECK(bwd({none}) == Time::ms(4));
    CHECK(bwd({none, "training.recompute=full"}) == Time::ms(6));
    CHECK(bwd({none, "training.recompute=full", "training.recompute_method=block",
               "training.recompute_layers=1"}) == Time::ms(5));
    // Measured with full recomputation: the 2 ms backward holds a 1 ms forward, so without
    // recomputation a layer's backward is 1 ms (2 ms a chunk) and with full it is as given.
    const std::string full = "compute.profiled_recompute=full";
    CHECK(bwd({full}) == Time::ms(2));
    CHECK(bwd({full, "training.recompute=full"}) == Time::ms(4));
    // Selective: the profile has no time for the attention core, so the roofline model's
    // estimate, its layer backward with selective recomputation less the one without, is added
    // per layer (the same model, shape and GPU, at the default sustained clocks).
    const std::vector<std::string> roofline = {"compute={model: roofline}"};
    const auto roof = [&](const char* recompute) {
        const auto spec = l.spec({std::string("training.recompute=") + recompute}, roofline);
        return roofline_layer(spec.model, spec.layout, spec.training, spec.cluster->gpu_model(0),
                              spec.compute.roofline, false)
            .backward_input.compute_time();
    };
    const Time selective = roof("selective") - roof("none");
    CHECK(selective > Time::zero());
    CHECK(bwd({none, "training.recompute=selective"}) == Time::ms(4) + selective * 2);
    // A backward shorter than the recomputation taken out of it is refused at the key: measured
    // with full recomputation, a 0.5 ms backward cannot hold a 1 ms forward.
    CHECK(error_of([&] {
              bwd({full, "compute.layer_backward=0.5ms"});
          }) ==
          "--set compute.profiled_recompute=full: 'compute.profiled_recompute': layer_backward "
          "(500 us) is shorter than the recomputation this run would take out of it (1 ms); give "
          "the recomputation the backward was measured with: none, selective or full");
    // Stage profiles: the stage's forward stands for its layers (2 ms a stage of 2 layers, so
    // 1 ms a layer): measured without, full recomputation adds it, 4 + 2 = 6 ms.
    CHECK(bwd({"compute={model: profile, stage_forward: 2ms, stage_backward: 4ms, "
               "profiled_recompute: none}",
               "training.recompute=full"}) == Time::ms(6));
}

TEST_CASE("partial recomputation: block recomputes the first N layers of each chunk") {
    const Loaded l("plan_recompute_block");
    // kSmallGpt: 2 layers per chunk on pp 2. A layer keeps 71,434,240 activation bytes per
    // microbatch without recomputation (the test above) and its input, 2 s b h = 2 x 1024 x 2 x
    // 1024 = 4,194,304 bytes, when recomputed in full.
    const std::int64_t stored = 71'434'240, input = 4'194'304;
    const auto full = l.spec({"training.recompute=full"});
    const auto block1 = l.spec({"training.recompute=full", "training.recompute_method=block",
                                "training.recompute_layers=1"});
    const auto block5 = l.spec({"training.recompute=full", "training.recompute_method=block",
                                "training.recompute_layers=5"});
    const auto none = l.spec();
    const auto p_full = plan_iteration(full, 1, false, one_chunk());
    const auto p_block1 = plan_iteration(block1, 1, false, one_chunk());
    const auto p_block5 = plan_iteration(block5, 1, false, one_chunk());
    const auto p_none = plan_iteration(none, 1, false, one_chunk());
    // Memory per chunk: full 2 inputs; block 1: one input + one layer kept whole; block 5 (more
    // than the chunk's 2 layers) = full.
    CHECK(p_full.virtual_stages[0].activation_memory == Bytes{2 * input});
    CHECK(p_block1.virtual_stages[0].activation_memory == Bytes{input + stored});
    CHECK(p_block5.virtual_stages[0].activation_memory == Bytes{2 * input});
    CHECK(p_none.virtual_stages[0].activation_memory == Bytes{2 * stored});
    // The uniform method keeps one input per group of recompute_layers layers: groups of 2 (or
    // of any larger count, up to the largest the loader takes, 2^31 - 1, whose group count once
    // overflowed an int: fuzz session S14) make the chunk's 2 layers one group, one input.
    for (const char* n : {"2", "2147483647"}) {
        CAPTURE(n);
        const auto uniform = l.spec({"training.recompute=full", "training.recompute_method=uniform",
                                     std::string("training.recompute_layers=") + n});
        CHECK(plan_iteration(uniform, 1, false, one_chunk()).virtual_stages[0].activation_memory ==
              Bytes{input});
    }
    // Hardware FLOPs: one layer forward F per layer and microbatch recomputed. Per iteration the
    // model has 4 layers; full recomputes 4 forwards, block 1 one per chunk, 2 in all:
    // HFU FLOPs - model FLOPs = 4 F (full), 2 F (block 1), 0 (none).
    const double model = p_none.model_flops_per_iteration.value;
    const double extra_full = p_full.hardware_flops_per_iteration.value - model;
    CHECK(extra_full > 0);
    CHECK(p_block1.hardware_flops_per_iteration.value - model ==
          doctest::Approx(extra_full / 2).epsilon(1e-12));
    CHECK(p_none.hardware_flops_per_iteration.value == model);

    // Roofline compute at burst clocks (sustained clocks scale each layer's pass by its own
    // tensor-core duty cycle): a block-1 chunk runs one recomputing layer and one plain layer,
    // so its backward takes the full chunk's backward / 2 + the plain chunk's backward / 2, and
    // its forward equals both (recomputation happens in the backward).
    const std::vector<std::string> burst = {"compute={model: roofline, clocks: burst}"};
    const auto r_full =
        plan_iteration(l.spec({"training.recompute=full"}, burst), 1, false, one_chunk());
    const auto r_none = plan_iteration(l.spec({}, burst), 1, false, one_chunk());
    const auto r_block =
        plan_iteration(l.spec({"training.recompute=full", "training.recompute_method=block",
                               "training.recompute_layers=1"},
                              burst),
                       1, false, one_chunk());
    const auto bwd = [](const IterationPlan& p) {
        return p.virtual_stages[0].backward.compute_time().count_ps();
    };
    CHECK(bwd(r_full) > bwd(r_none));
    CHECK(bwd(r_block) == (bwd(r_full) + bwd(r_none)) / 2);
    CHECK(r_block.virtual_stages[0].forward.compute_time() ==
          r_none.virtual_stages[0].forward.compute_time());
    CHECK(r_block.virtual_stages[0].activation_memory ==
          Bytes{(r_full.virtual_stages[0].activation_memory.value +
                 r_none.virtual_stages[0].activation_memory.value) /
                2});
}

TEST_CASE("partial recomputation: uniform keeps one input per group of N layers") {
    const Loaded l("plan_recompute_uniform");
    // 4 layers, pp 1: one chunk of 4 layers. Groups of 3: ceil(4 / 3) = 2 inputs of 4,194,304
    // bytes are kept; every layer is recomputed (the compute equals full recomputation's).
    const auto spec = l.spec({"parallelism.pp=1", "training.recompute=full",
                              "training.recompute_method=uniform", "training.recompute_layers=3"});
    const auto full = l.spec({"parallelism.pp=1", "training.recompute=full"});
    const auto p = plan_iteration(spec, 1, false, one_chunk());
    const auto f = plan_iteration(full, 1, false, one_chunk());
    CHECK(p.virtual_stages[0].activation_memory == Bytes{2 * 4'194'304});
    CHECK(f.virtual_stages[0].activation_memory == Bytes{4 * 4'194'304});
    CHECK(p.virtual_stages[0].backward.compute_time() ==
          f.virtual_stages[0].backward.compute_time());
    CHECK(p.hardware_flops_per_iteration == f.hardware_flops_per_iteration);
    // recompute_method and recompute_layers need recompute: full.
    CHECK(error_of([&] {
              l.spec({"training.recompute=selective", "training.recompute_layers=2"});
          }).find("'training.recompute_layers': applies to full recomputation only") !=
          std::string::npos);
}
