// An experiment: topology + model + parallel layout + training settings + schedule + compute and
// network models, parsed strictly from YAML (schema in docs/yaml-reference.md).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/document.hpp"
#include "core/name_table.hpp"
#include "network/network.hpp"
#include "topology/cluster.hpp"
#include "topology/topology_spec.hpp"
#include "workload/model.hpp"

namespace cs::workload {

// The order in which GPU numbers are given to the parallel dimensions, innermost first.
enum class RankOrder : std::uint8_t { TpCpDpPp, TpDpCpPp, TpPpDp, TpCpPpDp };
// Names in `parallelism.order`, the default (Megatron-LM's) first.
inline constexpr std::array<Named<RankOrder>, 4> kRankOrderNames{{
    {"tp-cp-dp-pp", RankOrder::TpCpDpPp},
    {"tp-dp-cp-pp", RankOrder::TpDpCpPp},
    {"tp-pp-dp", RankOrder::TpPpDp},
    {"tp-cp-pp-dp", RankOrder::TpCpPpDp},
}};

// `parallelism.sharding`: how much of the model state data parallelism shards (ZeRO stages,
// Rajbhandari et al. 2020): nothing (plain DDP), the optimizer states (ZeRO-1, Megatron-LM's
// distributed optimizer), also the gradients (ZeRO-2) or also the parameters (ZeRO-3: PyTorch
// FSDP, Megatron-FSDP). Megatron-FSDP's --data-parallel-sharding-strategy names are accepted too.
enum class Sharding : std::uint8_t { None = 0, Optimizer = 1, Gradients = 2, Parameters = 3 };
inline constexpr std::array<Named<Sharding>, 8> kShardingNames{{
    {"none", Sharding::None},
    {"zero1", Sharding::Optimizer},
    {"zero2", Sharding::Gradients},
    {"zero3", Sharding::Parameters},
    {"no_shard", Sharding::None},
    {"optim", Sharding::Optimizer},
    {"optim_grads", Sharding::Gradients},
    {"optim_grads_params", Sharding::Parameters},
}};

// Why `sharding` cannot be combined with cp and ep in this model (empty: it can): gradient and
// parameter shards (ZeRO-2/3) are cut over the dp replicas of one context and expert rank only.
// The loader refuses such a layout with this message; `plan` skips it without loading it.
std::string sharding_refusal(Sharding sharding, int cp, int ep);

// Why the model cannot be split over tp, cp and ep (attention and KV heads over tp, experts over
// ep, the sequence over 2 x cp), as {the parallelism key at fault, the message}; empty when it
// can. The loader refuses such a layout at that key with this message; `plan` skips every
// variant of such a shape without loading it.
std::pair<std::string, std::string> model_split_refusal(const ModelSpec& m, std::int64_t seq_length,
                                                        int tp, int cp, int ep);

// `parallelism.cp_comm_type`: how context parallelism exchanges keys and values, as Megatron-LM's
// --cp-comm-type runs it through Transformer Engine (docs/compute-model.md, "Context
// parallelism"): a ring of point-to-point exchanges overlapped with attention on the blocks
// (p2p), all-to-alls that move heads instead of the sequence (a2a), an all-gather of the keys
// and values before attention (allgather), or all-to-all inside groups and p2p rings across
// them (a2a+p2p, with `cp_a2a_size`).
enum class CpCommType : std::uint8_t { P2p, A2a, AllGather, A2aP2p };
inline constexpr std::array<Named<CpCommType>, 4> kCpCommTypeNames{{
    {"p2p", CpCommType::P2p},
    {"a2a", CpCommType::A2a},
    {"allgather", CpCommType::AllGather},
    {"a2a+p2p", CpCommType::A2aP2p},
}};

struct ParallelLayout {
    int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1;
    bool sequence_parallel = false;
    // ZeRO-1 or more (sharding >= Optimizer): kept equal to sharding != None by the parser.
    bool distributed_optimizer = false;
    Sharding sharding = Sharding::None;
    // HSDP: the data-parallel replicas of a stage form dp / shard_size groups of shard_size
    // consecutive replicas; model state is sharded inside a group and replicated across groups
    // (gradients reduce-scattered inside, then all-reduced across). 0: no HSDP (one group of dp).
    int shard_size = 0;
    // ZeRO-3: whether a unit's parameters are freed after its forward and gathered again before
    // its backward (PyTorch FSDP2's reshard_after_forward, Megatron-FSDP's behaviour) or kept
    // gathered until the backward (no second all-gather, more memory).
    bool reshard_after_forward = true;
    // ZeRO-3: whether the next unit's all-gather is issued when the current unit starts
    // computing (FSDP2's and Megatron-FSDP's prefetch of one unit) or only when it is needed.
    bool shard_prefetch = true;
    int shard_group_size() const { return shard_size > 0 ? shard_size : dp; }
    bool hsdp() const { return shard_size > 0 && shard_size < dp; }
    // Megatron-LM's --overlap-grad-reduce: the gradients of the last microbatch's backward pass are
    // reduced bucket by bucket as they become ready, overlapped with the rest of that pass.
    bool overlap_grad_reduce = false;
    // Megatron-LM's --DDP-impl local before 2022: train_step all-reduces every model chunk's
    // gradients after forward_backward_func returns, so no chunk's all-reduce overlaps a backward
    // pass. Off: a chunk's all-reduce starts once its own backward passes are done everywhere.
    bool grad_reduce_after_backward = false;
    std::int64_t ddp_bucket_size = 0;  // parameters per bucket; 0: max(40M, 1M x dp) as Megatron
    // Megatron-LM's --overlap-p2p-communication: pipeline sends and receives issued
    // asynchronously as passes end (the replay's asynchronous sends) instead of one batched,
    // synchronised exchange per schedule step (docs/schedules.md, "What interleaving costs").
    bool overlap_p2p_comm = false;
    // Megatron-LM's --tp-comm-overlap (Transformer Engine's userbuffers): with sequence
    // parallelism, the TP all-gathers and reduce-scatters run chunk by chunk overlapped with
    // the GEMMs next to them (docs/compute-model.md, "Overlap").
    bool tp_comm_overlap = false;
    // Megatron-LM's --overlap-param-gather: the distributed optimizer's parameter all-gather
    // runs under the next iteration's forward passes instead of before them.
    bool overlap_param_gather = false;
    CpCommType cp_comm_type = CpCommType::P2p;
    // a2a+p2p: the all-to-all group size inside each ring step (Megatron-LM's
    // --hierarchical-context-parallel-sizes first entry); must divide cp. 0: not given.
    int cp_a2a_size = 0;
    std::int64_t bucket_parameters() const {
        return ddp_bucket_size > 0 ? ddp_bucket_size
                                   : std::max<std::int64_t>(40'000'000, 1'000'000LL * dp);
    }
    // Rank order from innermost to outermost (Megatron-LM default: tp, cp, dp, pp; experts use
    // ep inside dp).
    RankOrder order = RankOrder::TpCpDpPp;
    int world_size() const { return tp * pp * dp * cp; }
};

// How the layers split over the pipeline when not evenly (docs/yaml/experiment.md, "Uneven
// pipelines"): Megatron-LM's --decoder-first-pipeline-num-layers and
// --decoder-last-pipeline-num-layers (parallelism.first_stage_layers, last_stage_layers),
// --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split
// (account_for_embedding, account_for_loss), or an explicit list of layers per stage or per
// virtual stage (stage_layers). Nothing given: an even split. workload/pipeline_split.hpp turns
// it into layers per virtual stage once the schedule's chunks are known.
struct PipelineSplitSpec {
    std::optional<int> first_stage_layers, last_stage_layers;
    bool account_for_embedding = false, account_for_loss = false;
    std::vector<int> stage_layers;  // empty: not given
    // Where each was given, for errors found when the split is made.
    SourceLocation first_where, last_where, embedding_where, loss_where, list_where;
    bool even() const {
        return !first_stage_layers && !last_stage_layers && !account_for_embedding &&
               !account_for_loss && stage_layers.empty();
    }
};

// `training.optimizer`: Megatron-LM's Adam(W) step, or none at all.
enum class Optimizer : std::uint8_t { Adam, None };
inline constexpr std::array<Named<Optimizer>, 2> kOptimizerNames{{
    {"adam", Optimizer::Adam},
    {"none", Optimizer::None},
}};

// How full recomputation picks its layers (Megatron-LM's --recompute-method with
// --recompute-num-layers N, training.recompute_method and recompute_layers): `uniform` checkpoints
// groups of N consecutive layers of each model chunk, storing only each group's input and
// recomputing every layer; `block` checkpoints the first N layers of each chunk (storing their
// inputs, recomputing them) and runs the rest as without recomputation.
enum class RecomputeMethod : std::uint8_t { Uniform, Block };
inline constexpr std::array<Named<RecomputeMethod>, 2> kRecomputeMethodNames{{
    {"uniform", RecomputeMethod::Uniform},
    {"block", RecomputeMethod::Block},
}};

struct TrainingSpec {
    int micro_batch_size = 1;
    int global_batch_size = 1;
    int seq_length = 2048;
    Recompute recompute = Recompute::None;
    // With recompute == Full only (uniform groups of 1: every layer, storing its input).
    RecomputeMethod recompute_method = RecomputeMethod::Uniform;
    int recompute_layers = 1;
    Precision precision = Precision::Bf16;
    // How fp8 GEMMs scale their operands (`training.fp8_recipe`, Megatron-LM's --fp8-recipe):
    // each recipe has its own measured rate (RooflineCalibration::fp8_speedup).
    Fp8Recipe fp8_recipe = Fp8Recipe::Tensorwise;
    Attention attention = Attention::Flash;
    // Whether the iteration ends with the optimizer step (`training.optimizer`): `none` times
    // forward and backward only, as pipeline benchmarks that call no optimizer do.
    Optimizer optimizer = Optimizer::Adam;
    int microbatches(const ParallelLayout& l) const {
        return static_cast<int>(global_batch_size / (std::int64_t{micro_batch_size} * l.dp));
    }
};

// The training framework whose kernels and host behaviour a pass follows (compute.framework):
// Megatron-LM's fused kernels and p2p synchronisation, or eager PyTorch
// (torch.distributed.pipelining), as docs/compute-model.md lists them kernel by kernel.
enum class Framework : std::uint8_t { None, Megatron, Pytorch };
inline constexpr std::array<Named<Framework>, 2> kFrameworkNames{{
    {"megatron", Framework::Megatron},
    {"pytorch", Framework::Pytorch},
}};

// compute: {model: profile, ...}: measured times; nothing is added beyond them (but for a
// recomputation other than the one measured: measured_recompute).
struct ProfileCompute {
    std::optional<Time> layer_forward, layer_backward, layer_backward_input, layer_backward_weight;
    std::optional<Time> stage_forward, stage_backward;
    Time embedding_forward, embedding_backward;  // first stage, once per microbatch
    Time output_forward, output_backward;        // last stage, once per microbatch
    Time optimizer_step;                         // every GPU, once per iteration
    Time op_overhead;                            // added to every compute op
    // What the parts without a profiled time cost (embedding, output layer, optimizer step):
    // nothing, or the roofline model's estimate (`unprofiled: roofline`).
    bool estimate_unprofiled = false;
    bool embedding_given = false, output_given = false, optimizer_given = false;
    // The recomputation the backward times were measured with (`profiled_recompute`; full: every
    // layer). None: the experiment's own (training.recompute), charged as given; otherwise a run
    // whose recomputation differs has each layer's backward adjusted by the difference
    // (docs/compute-model.md, "Profiled recomputation"). `recompute_where` locates the key.
    std::optional<Recompute> measured_recompute;
    SourceLocation recompute_where;
};

// Where the gradients of a microbatch accumulate (compute.main_grads): Megatron-style fp32 main
// gradients (the public H200 training trace; Megatron-LM fuses the accumulation into the weight
// gradient GEMM, eager PyTorch runs an fp32 += bf16 kernel per parameter), or the parameters'
// own .grad as plain autograd accumulates it (the H200 layer microbenchmarks).
enum class MainGrads : std::uint8_t { Fp32, Param };
inline constexpr std::array<Named<MainGrads>, 2> kMainGradsNames{{
    {"fp32", MainGrads::Fp32},
    {"param", MainGrads::Param},
}};

// The kinds of memory-bound kernel, each with its own achieved fraction of the HBM bandwidth.
enum class MemKind : std::uint8_t {
    Fused,            // Megatron-LM's fused kernels; a device-to-device copy
    Elementwise,      // vectorised 16-bit add, cast, fill
    Activation,       // GELU / SwiGLU forward and backward (eager PyTorch)
    Norm,             // LayerNorm / RMSNorm forward, input gradient, gamma/beta gradient
    Reduce,           // bias gradient: a sum over the tokens
    Concat,           // torch.cat of the q, k, v gradients
    StridedCopy,      // a non-vectorised copy that makes a strided tensor contiguous
    MixedAccumulate,  // fp32 main gradient += 16-bit gradient (non-vectorised, mixed types)
    Softmax,          // fp32 log-softmax forward and backward of the loss
    Optimizer,        // fused multi-tensor AdamW
    Scores,           // unfused attention's score-matrix kernels forward (bmms, softmax, dropout)
    ScoresBackward,   // the same kernels' backward
    RmsNorm,          // eager RMSNorm forward, input gradient and weight gradient
    Rotary,     // eager rotate-half rotary embedding on the strided q and k (mul, neg, cat, add)
    Swiglu,     // eager SwiGLU's strided kernels: silu, the product with the up half, backward
    Permute,    // MoE token permutation: a gather of token rows (index_select)
    Unpermute,  // MoE unpermutation: a scatter-add of expert rows back to tokens (index_add_)
    Routing,    // MoE router: fp32 softmax and top-k of the logits, the index arithmetic
    Sort,       // MoE tokens sorted by expert (argsort of the assignments)
};

// Names of the kinds in a calibration file (compute.hbm_fractions) and fit reports.
inline constexpr std::array<Named<MemKind>, 19> kMemKindNames{{
    {"fused", MemKind::Fused},
    {"elementwise", MemKind::Elementwise},
    {"activation", MemKind::Activation},
    {"norm", MemKind::Norm},
    {"reduce", MemKind::Reduce},
    {"concat", MemKind::Concat},
    {"strided_copy", MemKind::StridedCopy},
    {"mixed_accumulate", MemKind::MixedAccumulate},
    {"softmax", MemKind::Softmax},
    {"optimizer", MemKind::Optimizer},
    {"scores", MemKind::Scores},
    {"scores_backward", MemKind::ScoresBackward},
    {"rms_norm", MemKind::RmsNorm},
    {"rotary", MemKind::Rotary},
    {"swiglu", MemKind::Swiglu},
    {"permute", MemKind::Permute},
    {"unpermute", MemKind::Unpermute},
    {"routing", MemKind::Routing},
    {"sort", MemKind::Sort},
}};
inline constexpr std::size_t kMemKindCount = kMemKindNames.size();

// compute: {model: roofline, ...}: times from FLOPs and bytes on the GPU's peaks.
struct RooflineCompute {
    double efficiency_scale = 1.0;  // multiplies the calibrated GEMM efficiency curve
    // GPU time between two kernels issued back to back (near the public H200 traces' mean gaps,
    // 1.49-1.64 us).
    Time launch_overhead = Time::ns(1500);
    Time op_overhead;  // extra fixed cost per compute op (default 0)
    // The kernels a pass runs (never None here: a profile run estimates unprofiled parts with
    // Megatron-LM's kernels unless compute.framework says otherwise).
    Framework framework = Framework::Megatron;
    MainGrads main_grads = MainGrads::Fp32;
    // MoE experts through one grouped GEMM per expert linear (Megatron-LM's --moe-grouped-gemm,
    // torch._grouped_mm) or one GEMM per local expert (SequentialMLP, a loop in eager PyTorch).
    bool moe_grouped_gemm = true;
    // Tensor-core kernels at the GPU's sustained rate for the pass's duty cycle (GpuModel::
    // sustained); false: burst rates, as short microbenchmarks run.
    bool sustained = true;
    // From a calibration file (compute.calibration, workload/calibration.hpp), applied on top of
    // the catalogue: the GEMM curve in place of the GPU model's, and per-kind HBM fractions in
    // place of RooflineCalibration::hbm_fraction_of (0: the catalogue's), indexed by MemKind.
    std::optional<topology::GemmCurve> gemm_curve;
    std::array<double, kMemKindCount> hbm_fractions{};
    // Multipliers on the catalogue's flash-attention efficiency (forward, backward) and on the
    // grouped GEMM's rate, and the unmapped share: GPU time of kernels the model has no op for,
    // as a fraction of each layer pass's compute (added as a step of its own).
    double attention_forward_scale = 1, attention_backward_scale = 1;
    double grouped_gemm_scale = 1;
    double residual = 0;
    const topology::GemmCurve& gemm(const topology::GpuModel& gpu) const {
        return gemm_curve ? *gemm_curve : gpu.gemm;
    }
};

// The CPU thread that issues one rank's kernels (compute.host; docs/compute-model.md, "The host").
// It issues a pass's kernels one after another, `launch` apart, after `pass` of framework work; a
// kernel cannot start on the GPU before it is issued. Point-to-point operations cost `p2p` each.
// The host runs ahead of the GPU except where the framework synchronises: with `sync_after_p2p`
// (Megatron-LM's torch.cuda.synchronize() after batched p2p) it waits for a pass's received
// tensor before issuing that pass and for the GPU to finish the pass whose result it sends;
// without (eager torch.distributed, whose wait() only orders the streams) it issues ahead of the
// data and the GPU waits for the transfer.
struct HostModel {
    bool enabled = false;  // off: the GPU never waits for the host (profile mode without framework)
    Time launch;           // per kernel issued
    Time pass;             // framework work per pipeline pass before its first kernel
    Time backward;         // more of it before a backward pass (the autograd engine's start)
    Time p2p;              // per point-to-point send or receive
    // More framework work per pass for the schedules torch.distributed.pipelining runs on its
    // pipeline runtime (Schedule::on_torch_pipeline_runtime); zero for Megatron-LM, whose
    // schedules are its own.
    Time runtime_pass;
    bool sync_after_p2p = false;
};

struct ComputeSpec {
    enum class Kind : std::uint8_t { Profile, Roofline } kind = Kind::Roofline;
    ProfileCompute profile;
    RooflineCompute roofline;
    // None only in `model: profile` without `framework:` (measured times, nothing added).
    Framework framework = Framework::Megatron;
    HostModel host;
    // Compute-communication interference: a kernel sharing the GPU with NCCL kernels runs
    // 1 + interference times as long while they overlap (measured on 2 x H200: a GEMM ~10%
    // slower during concurrent 1 GiB all-reduces).
    double interference = 0.10;
    // compute.calibration: the file applied (as given, and resolved against the experiment's
    // folder) and the GPU model it was fitted for (checked against the cluster's); empty
    // without one.
    std::string calibration_file, calibration_gpu_model;
    std::filesystem::path calibration_path;
};

// `variability:` (docs/what-if.md): GPUs that run slower than the plan says, fixed or drawn per
// pass, and slow hosts. Draws come from the experiment's `seed` (one stream per pipeline worker
// and step, replay/duration_model.hpp), so a run is reproducible.
enum class SlowdownKind : std::uint8_t { Fixed, Normal, Lognormal };
inline constexpr std::array<Named<SlowdownKind>, 3> kSlowdownKindNames{{
    {"fixed", SlowdownKind::Fixed},
    {"normal", SlowdownKind::Normal},
    {"lognormal", SlowdownKind::Lognormal},
}};
// The factor a GPU's passes take against the plan (1.2: 20% slower). Normal: mean `factor`,
// standard deviation `spread`, factors at or below kMinSlowdown drawn again; lognormal: median
// `factor`, `spread` the sigma of its logarithm.
struct Slowdown {
    std::vector<int> gpus;  // sorted, unique
    SlowdownKind kind = SlowdownKind::Fixed;
    double factor = 1;
    double spread = 0;
};
// Drawn factors are kept in [kMinSlowdown, kMaxSlowdown]; written factors, means and medians
// must be in that range too (and a GPU's product of fixed factors), spreads in (0, kMaxSlowdown].
inline constexpr double kMinSlowdown = 0.05;
inline constexpr double kMaxSlowdown = 1000;
struct HostSlowdown {
    std::vector<int> gpus;  // sorted, unique
    double factor = 1;      // on every host cost (launch, pass, backward, p2p, runtime_pass)
};
struct VariabilitySpec {
    std::vector<Slowdown> gpus;  // a GPU under several entries takes the product of their factors
    std::vector<HostSlowdown> hosts;
    bool any() const { return !gpus.empty() || !hosts.empty(); }
};

// `goodput:` (docs/what-if.md): failures, checkpoints and restarts over a whole training run.
struct GoodputSpec {
    bool present = false;
    double failures_per_gpu_hour = 0;  // > 0: each GPU fails at this rate (exponential)
    Time restart;                      // from a failure to training again
    // The checkpoint: its bytes (0: every parameter's weights and optimizer states, 14 bytes per
    // parameter in 16-bit mixed precision, 12 in fp32) written at write_bandwidth, or a
    // write_time given directly.
    Bytes checkpoint_bytes;
    Bandwidth write_bandwidth;
    std::optional<Time> write_time;
    std::optional<Time> interval;       // none: Daly's optimum
    double tokens = 0;                  // > 0: a token budget to train
    double pue = 1;                     // facility power / GPU power
    std::optional<double> gpu_power_w;  // none: the GPU model's board power (docs/what-if.md)
    int monte_carlo_runs = 0;           // 0: no Monte Carlo check
    std::uint64_t monte_carlo_seed = 1;
    int monte_carlo_segments = 1000;  // checkpoint intervals per Monte Carlo run
    SourceLocation where;             // of the `goodput` mapping, for what the run finds
};

// `faults:` (docs/what-if.md): links degraded to a fraction of their bandwidth or failed, and
// GPUs or nodes that fail, each from a time (0: the whole run).
struct LinkFault {
    std::string name;                     // as written: one direction's name, "leaf0->spine1"
    std::vector<topology::LinkId> links;  // every directed link of the cables it names, sorted
    double fraction = 0;                  // of the topology's bandwidth left; 0: failed
    Time at;                              // from this time on
    SourceLocation where;                 // of the entry, for messages found while running
};
struct GpuFault {
    std::vector<int> gpus;  // sorted, unique
    std::string what;       // "GPU 5", "GPUs 3,9", "node 2"
    Time at;                // the GPUs stop at this time; the job fails with them
    SourceLocation where;
};
struct FaultsSpec {
    std::vector<LinkFault> links;  // in the experiment's order
    std::vector<GpuFault> gpus;
    bool any() const { return !links.empty() || !gpus.empty(); }
};

struct ExperimentSpec {
    std::string source;           // display path of the experiment file
    std::string topology_source;  // display path of the topology file (or the experiment's)
    // Other files the experiment read, for the outputs' guard: `model: {from: FILE}` and
    // `network: {calibration: FILE}` (empty when not given).
    std::filesystem::path model_file, network_calibration_file;
    std::shared_ptr<const topology::Cluster> cluster;
    ModelSpec model;
    ParallelLayout layout;
    TrainingSpec training;
    std::string schedule = "1f1b";
    SourceLocation schedule_where;  // for errors about the schedule found later
    SourceLocation layout_where;    // location of `parallelism`, for layout errors
    PipelineSplitSpec pipeline_split;
    ComputeSpec compute;
    network::NetworkConfig network;
    // `seed` (default 0): keys every random stream of the run (Simulation::random). Nothing in
    // the default models draws from them; per-GPU behaviour models (replay/duration_model.hpp) do.
    std::uint64_t seed = 0;
    VariabilitySpec variability;
    FaultsSpec faults;
    GoodputSpec goodput;
    std::vector<std::string> warnings;  // non-fatal notes to show the user
};

// Clusters already built, so that loading the same experiment again (a sweep loads it once per
// combination) reuses its topology instead of building it again: keyed by the topology's source
// (its resolved file path, or the text of an inline topology), its `topology.` overrides and the
// memory limit. A cluster is immutable once built (routes are a pure function of it), so a reused
// one gives the same results. Holds the kMaxEntries most recently built.
class ClusterCache {
  public:
    static constexpr std::size_t kMaxEntries = 4;
    // The cluster under `key`, built by `build` if it is not held. A build that throws caches
    // nothing (the next load fails the same way).
    // `source`: the display path of the topology file it is built from, kept with it.
    std::shared_ptr<const topology::Cluster> get(const std::string& key,
                                                 const std::function<topology::Cluster()>& build,
                                                 const std::string& source = {});
    // The cluster under `key` if held, with its file's display path in `source`; else null. A
    // sweep's later combinations take their topology here without parsing its file again.
    std::shared_ptr<const topology::Cluster> find(const std::string& key,
                                                  std::string& source) const;
    std::size_t builds() const { return builds_; }

  private:
    struct Entry {
        std::string key;
        std::shared_ptr<const topology::Cluster> cluster;
        std::string source;
    };
    std::vector<Entry> entries_;
    std::size_t builds_ = 0;
};

// Loads an experiment file, applying `overrides` ("key=value" as given to --set; keys under
// `topology.` go to the referenced topology file). Overrides that change tp, pp, cp or the
// topology without giving dp let dp follow the GPU count (the file's dp is dropped), as
// Megatron-LM derives it; run, compare, sweep and Python all load through here. Throws
// ConfigError, also for a topology whose estimated memory exceeds `max_memory`
// (topology::check_size).
// With `clusters`, the topology comes from (and goes to) that cache. With `documents`, the
// experiment, topology and model files are parsed once into that cache (a sweep keeps one beside
// its ClusterCache): each load applies its overrides to its own copy (config::copy_document) and
// reads the model file's parsed tree, which nothing writes, in place. Results and messages are
// those of a load without it.
ExperimentSpec load_experiment(const std::filesystem::path& path,
                               const std::vector<std::string>& overrides,
                               std::int64_t max_memory = topology::kDefaultMaxMemory,
                               ClusterCache* clusters = nullptr,
                               config::DocumentCache* documents = nullptr);

// An experiment given as YAML text instead of a file (the Python bindings pass a dict as JSON,
// which is YAML): `display_path` names it in messages, and relative paths inside it (the
// topology) resolve against `folder`.
struct ExperimentText {
    std::string text;
    std::string display_path = "<experiment>";
    std::filesystem::path folder = ".";
};
ExperimentSpec load_experiment(const ExperimentText& source,
                               const std::vector<std::string>& overrides,
                               std::int64_t max_memory = topology::kDefaultMaxMemory,
                               ClusterCache* clusters = nullptr,
                               config::DocumentCache* documents = nullptr);

// A `jobs:` file's job (session/jobs.hpp) from a document already parsed: as load_experiment,
// except that the layout may take fewer GPUs than the topology has (tp x pp x dp x cp up to its
// GPUs, with dp given).
ExperimentSpec load_job_experiment(const config::Document& doc,
                                   std::int64_t max_memory = topology::kDefaultMaxMemory);

// The GPUs a mapping names by `gpus:` (a number, "all", numbers and ranges such as "0-3,8", or a
// list) or `nodes:` (the same forms, by node): sorted, unique, checked against the cluster, each
// named once (a GPU or node named twice is an error at the key). The parser of explicit job
// placements (variability.gpus and faults.gpus read the same forms, repeats allowed).
std::vector<int> gpu_set(const config::Reader& r, const topology::Cluster& cluster);

// GPU (or node) numbers as ranges, for messages and summaries: {0, 1, 2, 3, 8} -> "0-3,8".
std::string gpu_list_text(const std::vector<int>& gpus);

}  // namespace cs::workload
