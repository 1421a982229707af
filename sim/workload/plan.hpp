// The plan of one training iteration: what every pipeline stage does per microbatch and per
// iteration, independent of the schedule's order. Ranks that do the same work (the TP ranks of a
// stage, the DP replicas) share one plan entry instead of each holding a copy.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/name_table.hpp"
#include "core/units.hpp"
#include "network/network.hpp"
#include "workload/experiment.hpp"

namespace cs::workload {

// The communicators a step's collective runs on. CpInner and CpOuter split the cp group for
// cp_comm_type a2a+p2p: groups of cp_a2a_size consecutive context ranks (the all-to-all) and the
// ranks at the same place in each of them (the ring).
enum class GroupKind : std::uint8_t { Tp, Cp, Ep, Dp, CpInner, CpOuter };
inline constexpr std::array<Named<GroupKind>, 6> kGroupKindNames{{
    {"tp", GroupKind::Tp},
    {"cp", GroupKind::Cp},
    {"ep", GroupKind::Ep},
    {"dp", GroupKind::Dp},
    {"cp-a2a", GroupKind::CpInner},
    {"cp-ring", GroupKind::CpOuter},
}};
const char* group_kind_name(GroupKind g);  // its row of kGroupKindNames

// What a communication is for, as the summary splits exposed communication: tensor, context and
// expert parallelism (the collectives inside passes), data parallelism (gradient reduction,
// parameter gathers, sharded data parallelism's collectives) and the pipeline (what moves
// activations and gradients between stages and the GPU waits for). Names in kCommKindNames.
enum class CommKind : std::uint8_t { Tp, Cp, Ep, Dp, Pipeline };
inline constexpr int kCommKinds = 5;
inline constexpr std::array<Named<CommKind>, kCommKinds> kCommKindNames{{
    {"tp", CommKind::Tp},
    {"cp", CommKind::Cp},
    {"ep", CommKind::Ep},
    {"dp", CommKind::Dp},
    {"pipeline", CommKind::Pipeline},
}};
// Time per CommKind, indexed by the enumerator.
using CommTimes = std::array<Time, kCommKinds>;

// The compute model's kinds of GPU work (docs/compute-model.md sections 2 and 3): GEMM, grouped
// GEMM, attention, one kind per memory-bound MemKind that eager kernels have, memset, and
// unmapped. One list for both sides of `clustersim diff`: a measured profile's kernels get theirs
// through ingest's kernel table (fit/kernel_table.hpp), a simulated compute step is given its
// kind where it is emitted (Step::kernel). A step's kind is a family the profile settles in two
// places: Norm stands for LayerNorm and RMSNorm alike (no step is RmsNorm), and GroupedGemm for
// the experts' GEMMs however they run (grouped, or one GEMM per local expert; Step::GroupedGemm
// says which). No step is Memset either. Unmapped: no kind of the catalogue (a measured kernel
// without an operator of the model; a profiled layer time, a calibration's residual, a
// collective).
enum class KernelKind : std::uint8_t {
    Gemm,
    GroupedGemm,
    Attention,
    Elementwise,
    Activation,
    Norm,
    RmsNorm,
    Reduce,
    Concat,
    StridedCopy,
    MixedAccumulate,
    Softmax,
    Optimizer,
    Rotary,
    Swiglu,
    Permute,
    Unpermute,
    Routing,
    Sort,
    Memset,
    Unmapped,
};
inline constexpr std::size_t kKernelKinds = static_cast<std::size_t>(KernelKind::Unmapped) + 1;
inline constexpr std::array<Named<KernelKind>, kKernelKinds> kKernelKindNames{{
    {"gemm", KernelKind::Gemm},
    {"grouped_gemm", KernelKind::GroupedGemm},
    {"attention", KernelKind::Attention},
    {"elementwise", KernelKind::Elementwise},
    {"activation", KernelKind::Activation},
    {"norm", KernelKind::Norm},
    {"rms_norm", KernelKind::RmsNorm},
    {"reduce", KernelKind::Reduce},
    {"concat", KernelKind::Concat},
    {"strided_copy", KernelKind::StridedCopy},
    {"mixed_accumulate", KernelKind::MixedAccumulate},
    {"softmax", KernelKind::Softmax},
    {"optimizer", KernelKind::Optimizer},
    {"rotary", KernelKind::Rotary},
    {"swiglu", KernelKind::Swiglu},
    {"permute", KernelKind::Permute},
    {"unpermute", KernelKind::Unpermute},
    {"routing", KernelKind::Routing},
    {"sort", KernelKind::Sort},
    {"memset", KernelKind::Memset},
    {"unmapped", KernelKind::Unmapped},
}};

// The piece of the model a step belongs to: the embedding (first stage), the transformer
// layers, the head (final norm, logits, loss: last stage), or the whole model (the optimizer
// step, which runs outside every pass).
enum class ModelPart : std::uint8_t { Embedding, Layers, Head, Model };
inline constexpr std::array<Named<ModelPart>, 4> kModelPartNames{{
    {"embedding", ModelPart::Embedding},
    {"layers", ModelPart::Layers},
    {"head", ModelPart::Head},
    {"model", ModelPart::Model},
}};

// One step of a pass on the compute stream: a kernel, or a collective that the compute stream
// waits for (TP/CP/EP collectives sit on the critical path of the layer).
struct Step {
    // What a step is part of, set where the step is emitted (never derived from its label, which
    // is free text for traces and reports).
    enum Flag : std::uint8_t {
        // The attention core: flash attention's kernel, or unfused attention's score and context
        // bmms, softmax and dropout; forward, backward or recomputed. Not the q/k/v and output
        // projections around it.
        AttentionCore = 1u << 0,
        // Communication that carries a pipeline message although it runs on another group's
        // communicator (Megatron-LM's scatter/gather: the received 1/tp slice all-gathered over
        // the tensor-parallel group): counted as pipeline communication (CommKind::Pipeline).
        PipelineComm = 1u << 1,
        // A collective that runs alongside the next step (a compute step of the same repeat),
        // as context parallelism's ring sends the next key/value block while attention runs on
        // this one, or Transformer Engine's userbuffers all-gather under the GEMM that consumes
        // it: the pair takes the longer of the two, the compute slowed by compute.interference
        // while they overlap (replay::overlapped_time); what the collective adds beyond the
        // compute is its exposed time.
        OverlapNext = 1u << 2,
        // The same alongside the previous step (a reduce-scatter under the GEMM producing it).
        OverlapPrevious = 1u << 3,
        // A grouped GEMM (all local experts' GEMMs in one kernel), not a dense one.
        GroupedGemm = 1u << 4,
    };
    enum class Kind : std::uint8_t { Compute, Collective } kind = Kind::Compute;
    bool tensor_core = false;  // compute on the tensor cores (GEMM, attention): power-capped
    std::uint8_t flags = 0;    // a set of Flag
    // The kind of a memory-bound compute step (tensor_core false): whose HBM fraction sets its
    // time, and what calibrate and diff compare it with.
    MemKind mem_kind = MemKind::Fused;
    // A compute step's kernel kind and piece of the model (what `clustersim diff` reads from the
    // trace). Held in the padding before `label`: Step stays 80 bytes on the replay's hot path.
    KernelKind kernel = KernelKind::Unmapped;
    ModelPart part = ModelPart::Layers;
    const char* label = "";  // static string: "layer", "qkv", "attention", "all-reduce tp", ...
    Time duration;           // compute only
    Flops model_flops;       // compute only: counted for MFU
    Flops hardware_flops;    // compute only: including recomputation (HFU)
    Bytes hbm_bytes;         // compute only
    network::CollectiveKind collective = network::CollectiveKind::AllReduce;
    GroupKind group = GroupKind::Tp;
    Bytes size;      // collective only, nccl-tests size semantics
    int repeat = 1;  // the step is executed `repeat` times back to back (e.g. per layer)
    // Kernels the host issues for one execution of the step (a collective: its one NCCL kernel;
    // an `op` of the roofline may stand for several kernels of one kind). The host model
    // (HostModel) issues them `launch` apart, spread evenly over the step's duration.
    std::int32_t launches = 1;
    // The host's time per kernel of the step in units of HostModel::launch: eager PyTorch's
    // module calls (nn.Linear, the norms) cost it more than plain tensor functions, and the
    // autograd engine's backward nodes more again (docs/compute-model.md section 6).
    double host_weight = 1;

    bool has(Flag f) const { return (flags & f) != 0; }
    // A collective step's kind: Pipeline when flagged PipelineComm, else its group's.
    CommKind comm_kind() const;
};

struct PassPlan {
    std::vector<Step> steps;
    Time compute_time() const;      // sum of compute durations x repeat
    std::int64_t launches() const;  // kernels issued: sum of launches x repeat over the steps
    Flops model_flops() const;
    Flops hardware_flops() const;
};

// Work of one model chunk (a contiguous range of layers) for one microbatch.
struct ChunkPlan {
    int first_layer = 0;
    int layers = 0;
    PassPlan forward;
    PassPlan backward;        // full backward (input + weight gradients)
    PassPlan backward_input;  // for schedules that split the backward
    PassPlan backward_weight;
    Bytes activation_bytes;   // p2p activation sent to the next virtual stage (per GPU)
    Bytes activation_memory;  // activation memory held per in-flight microbatch (per GPU)
    // ZeRO-2/3 (parallelism.sharding): parameters per GPU of each FSDP unit of the chunk, in layer
    // order (unit_parameters_per_gpu); empty without gradient or parameter sharding.
    std::vector<std::int64_t> unit_parameters;
};

// Memory per GPU at its peak (docs/compute-model.md section 5). `activations` are those held at
// the schedule's peak with the transients of that moment (the loss's buffers on the last stage,
// a recomputed layer); `temporary_gradients` the 16-bit .grad tensors eager PyTorch keeps beside
// fp32 main gradients from the backward through the optimizer step. The two peak at different
// moments: total = parameters + gradients + optimizer_states + max(activations,
// temporary_gradients).
struct MemoryBreakdown {
    Bytes parameters, gradients, optimizer_states, activations, total;
    Bytes temporary_gradients;
};

// Per pipeline device: what does not depend on the microbatch.
struct StagePlan {
    // Per GPU and per model chunk: the parameters synchronised across dp, their gradients' bytes
    // (gradient_bytes_per_parameter) and their 16-bit weights' bytes (the distributed
    // optimizer's parameter all-gather).
    std::int64_t dp_parameters = 0;
    Bytes dp_gradient_bytes;
    Bytes dp_parameter_bytes;
    bool dp_sharded = false;  // distributed optimizer: reduce-scatter + all-gather
    Time optimizer_step;
    MemoryBreakdown memory;  // filled by the memory model (activations per schedule)
};

struct IterationPlan {
    int stages = 1;
    int chunks = 1;
    int microbatches = 1;
    std::vector<ChunkPlan> virtual_stages;  // [virtual stage], p x chunks of them
    std::vector<StagePlan> devices;         // [pipeline stage]
    Flops model_flops_per_iteration;        // whole cluster
    Flops hardware_flops_per_iteration;
    std::int64_t tokens_per_iteration = 0;
};

// Builds the plan for `chunks` model chunks per device; `device_of(vs)` is the schedule's placement
// of virtual stage vs; `split_backward` fills backward_input and backward_weight. Throws
// ConfigError for layouts that cannot run (located at the experiment's parallelism key).
// `copies` = 2 (the bidirectional DualPipe): the model is held twice, device s holding the
// virtual stage device_of places on it and also the one placed on device pp-1-s (the other
// copy's stage); its parameters, gradients and optimizer states count both, and plan.chunks is
// chunks x copies.
IterationPlan plan_iteration(const ExperimentSpec& spec, int chunks, bool split_backward,
                             const std::function<int(int)>& device_of, int copies = 1);

// ZeRO-2/3: fills every chunk's unit_parameters (called by plan_iteration).
void plan_shard_units(const ExperimentSpec& spec, IterationPlan& plan);

// Fills every device's MemoryBreakdown: parameters, gradients and optimizer states of the layers
// of its chunks plus its activations at the schedule's peak: `peak_activations[device]` when
// given (the schedule's peak with each held chunk weighing its own activation_memory,
// schedule::peak_inflight_bytes), else `peak_inflight_chunks[device]` times its largest chunk's.
void fill_memory(const ExperimentSpec& spec, IterationPlan& plan,
                 const std::vector<int>& peak_inflight_chunks,
                 const std::function<int(int)>& device_of,
                 const std::vector<Bytes>& peak_activations = {}, int copies = 1);

}  // namespace cs::workload
