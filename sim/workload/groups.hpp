// Which GPUs form each communicator of a parallel layout: the one place that maps (tensor,
// context, data-parallel, pipeline) coordinates to GPU numbers and collects the TP, CP, EP and DP
// groups. The replay issues its collectives on these groups, the trace names their peers from
// them, and `clustersim validate` costs a layer's collectives on the first worker's groups.
//
// Ranks follow Megatron-LM's rank generator (megatron/core/parallel_state.py): the layout's
// `order` lists the dimensions innermost first, default tp-cp-dp-pp, so that
//   rank = t + tp x (c + cp x (d + dp x s)).
// A *worker* is the tp x cp GPUs of one pipeline stage of one data-parallel replica; its members
// are numbered m = c x tp + t (tp innermost). Expert-parallel groups follow Megatron-core's
// expert decomposition with the expert tensor-parallel size equal to tp: within one stage and one
// tp index, the dp x cp GPUs in rank order are cut into consecutive blocks of ep (the layout
// requires ep to divide dp x cp).
#pragma once

#include <vector>

#include "workload/experiment.hpp"
#include "workload/plan.hpp"

namespace cs::workload {

// One communicator: its GPUs in ring order (increasing coordinate along the group's dimension)
// and the position in it of the GPU it was asked for.
struct CollectiveGroup {
    std::vector<int> gpus;
    int index = 0;
};

class RankLayout {
  public:
    // Throws ConfigError for sizes below 1 or an ep that does not divide dp x cp.
    explicit RankLayout(const ParallelLayout& layout);

    // The GPU of tensor rank t, context rank c, data-parallel replica d, pipeline stage s: the
    // rank itself, or placement[rank] once place() gave one.
    int gpu(int t, int c, int d, int s) const;
    // A shared-fabric job (`jobs:`, session/jobs.hpp): rank r runs on GPU gpus[r]; gpus must hold
    // world_size() distinct GPU numbers (ConfigError otherwise).
    void place(std::vector<int> gpus);
    const std::vector<int>& placement() const { return placement_; }

    const ParallelLayout& layout() const { return layout_; }
    int workers() const { return pp_ * dp_; }
    int members() const { return tp_ * cp_; }
    // Workers are numbered stage-major: worker (stage, dp) is stage x dp_size + dp.
    int worker(int stage, int dp) const { return stage * dp_ + dp; }
    int stage_of(int worker) const { return worker / dp_; }
    int replica_of(int worker) const { return worker % dp_; }
    // Member `member` (c x tp + t) of `worker`.
    int member_gpu(int worker, int member) const;
    // The worker's GPUs in member order.
    std::vector<int> worker_gpus(int worker) const;

    // The group of `kind` that member `member` of `worker` belongs to.
    //   tp: the tp GPUs of the worker with the member's context rank;
    //   cp: the cp GPUs of the worker with the member's tensor rank;
    //   dp: the member's GPU in every data-parallel replica of the stage;
    //   ep: the ep GPUs of the member's expert block (see the header comment);
    //   cp-a2a, cp-ring (cp_comm_type a2a+p2p): the member's block of cp_a2a_size consecutive
    //   context ranks, and the context ranks at its place in every block.
    CollectiveGroup group(GroupKind kind, int worker, int member) const;
    // The data-parallel group with context parallelism (Megatron-LM's
    // data_parallel_group_with_cp): the member's tensor rank on every context rank of every
    // replica of the stage, in rank order. The context ranks hold the same parameters and compute
    // their gradients on different tokens, so the gradient reduction (and the distributed
    // optimizer's shards) spans dp x cp GPUs. The dp group itself when cp = 1.
    CollectiveGroup dp_cp_group(int worker, int member) const;

  private:
    int tp_, cp_, dp_, pp_, ep_;
    // Innermost first; "dp" before "cp" when data parallelism is inside context parallelism.
    bool dp_inside_cp_ = false;
    ParallelLayout layout_;
    std::vector<int> placement_;  // empty: rank r is GPU r
};

}  // namespace cs::workload
