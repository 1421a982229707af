// The plans of one network: its communicators, the point-to-point and collective plans it made
// or found kept with the cluster (SharedPlans), the algorithm and protocol each collective runs,
// and the routing plans are made on (the cluster's own until the routes change).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/simulation.hpp"
#include "network/collectives.hpp"
#include "network/kept_plans.hpp"
#include "network/network.hpp"
#include "network/plan_calibration.hpp"
#include "network/plan_size_map.hpp"
#include "topology/cluster.hpp"

namespace cs::network::detail {

class PlanBook {
  public:
    // `sim` for the time errors carry; `config` and `calibration` are the network's (all outlive
    // the book).
    PlanBook(const Simulation& sim, const Cluster& cluster, const NetworkConfig& config,
             const PlanCalibration& calibration)
        : sim_(sim), cluster_(cluster), config_(config), calibration_(calibration) {}
    // Keeps plans with the cluster's (KeptState::plans): before the first plan is asked for.
    void share(std::shared_ptr<SharedPlans> shared) { shared_plans_ = std::move(shared); }
    // The plans kept with the cluster, null if none.
    SharedPlans* shared() const { return shared_plans_.get(); }

    // Network::register_group and Network::reuse_groups.
    GroupId register_group(std::vector<int> ranks);
    void reuse_groups();

    // `kept`, if given, is set to whether the plan is one kept with the cluster (SharedPlans).
    const Plan& p2p_plan(int src, int dst, bool* kept = nullptr) {
        check_gpu(src);
        check_gpu(dst);
        const std::uint64_t key =
            static_cast<std::uint64_t>(src) << 32 | static_cast<std::uint32_t>(dst);
        // A memo in front of the plan maps, one cache line per source GPU holding its last few
        // destinations: a pipeline message looks its plan up on every send, and a GPU sends to
        // few GPUs (its neighbouring stages), where a memo hashed on the pair thrashed at 16,384
        // GPUs (twice as many pairs as slots).
        if (plan_memo_.empty()) plan_memo_.resize(static_cast<std::size_t>(cluster_.gpu_count()));
        PlanMemo& memo = plan_memo_[static_cast<std::size_t>(src)];
        for (std::size_t w = 0; w < PlanMemo::kWays; ++w)
            if (memo.plan[w] && memo.dst[w] == dst) {
                if (kept) *kept = memo.kept[w];
                return *memo.plan[w];
            }
        bool is_kept = false;
        const Plan& plan = find_p2p_plan(src, dst, key, &is_kept);
        // The newest first, the oldest dropped.
        for (std::size_t w = PlanMemo::kWays - 1; w > 0; --w) {
            memo.plan[w] = memo.plan[w - 1];
            memo.dst[w] = memo.dst[w - 1];
            memo.kept[w] = memo.kept[w - 1];
        }
        memo.plan[0] = &plan;
        memo.dst[0] = dst;
        memo.kept[0] = is_kept;
        if (kept) *kept = is_kept;
        return plan;
    }
    // `kept`, if given, is set to whether the plan is one kept with the cluster (SharedPlans).
    const Plan& collective_plan(CollectiveKind kind, GroupId group, Bytes size, Algorithm algo,
                                bool* kept = nullptr);
    // Whether collective plans are kept with the cluster's: some are kept, on the cluster's own
    // routes and with the bundled algorithms.
    bool shares_plans() const {
        return shared_plans_ && routing_ == &cluster_ &&
               config_.algorithms == &AlgorithmRegistry::builtin();
    }
    // The routes plans are made on, and whether they are the cluster's own.
    const Cluster& routing() const { return *routing_; }
    bool own_routes() const { return routing_ == &cluster_; }
    // Makes `routing` the routes of the plans made from now on (Network::schedule_routing):
    // plans made so far stay alive for the operations using them but are no longer found.
    void change_routing(const Cluster& routing);
    // Whether `path` crosses a link the current routes have failed (never on the cluster's own).
    bool crosses_failed(const std::vector<topology::LinkId>& path) const;
    // The template `f` on a route of the current routes between the GPUs its path joins, kept
    // while the book lives (flows and observers point to it); a ConfigError for a flow that does
    // not join two GPUs.
    const FlowTemplate& detour(const FlowTemplate& f);
    void check_gpu(int gpu) const {
        if (gpu < 0 || gpu >= cluster_.gpu_count()) [[unlikely]]
            no_such_gpu(gpu);
    }

  private:
    [[noreturn, gnu::cold, gnu::noinline]] void no_such_gpu(int gpu) const;
    void check_communicator(const std::vector<int>& ranks) const;
    // Checks `ranks` (ConfigError) and returns their number among the communicators kept with
    // the cluster's plans (SharedPlans::communicators), kNoCommunicator if none are kept. A
    // communicator kept there was checked on this cluster when it was first registered.
    std::uint64_t communicator_number(std::vector<int>& ranks);
    // The key of `group`'s kept plans and algorithms: its communicator's number, or (not kept)
    // its ranks.
    SharedPlans::CollectiveKey group_key(GroupId group) const;
    // Plans are never erased while the network lives (change_routing retires them, and clears
    // the memo), so the memo's pointers stay valid.
    struct alignas(64) PlanMemo {
        static constexpr std::size_t kWays = 4;
        const Plan* plan[kWays] = {};
        std::int32_t dst[kWays] = {};
        bool kept[kWays] = {};
    };
    std::vector<PlanMemo> plan_memo_;  // per source GPU; empty until a p2p plan is asked for
    // detour(): the templates made (flows and observers point to them) and their route keys.
    std::vector<std::unique_ptr<FlowTemplate>> detours_;
    std::uint64_t detours_made_ = 0;
    const Plan& find_p2p_plan(int src, int dst, std::uint64_t key, bool* kept);
    const Plan& own_p2p_plan(std::uint64_t key, int src, int dst);
    // One message's plan: its route (flow id `key`) and the route's latency; none from a GPU to
    // itself.
    Plan make_p2p_plan(int src, int dst, std::uint64_t key) const;
    // The protocol a collective of `size` runs with algorithm `algo` (docs/network.md,
    // "Protocols"): the one NetworkConfig::protocol names, else as NCCL's tuning picks: NVLS
    // runs Simple; all_to_all and sendrecv (point-to-point operations) LL up to kP2pLlThreshold
    // bytes per peer, else Simple; the others the enabled protocol of the smallest estimated
    // time (estimate(): the closed form on nominal capacities), Simple on a tie.
    Protocol choose_protocol(CollectiveKind kind, GroupId group, Bytes size, Algorithm algo);
    // The time of `plan` for `size` by the closed form that picks protocols: the fixed latency,
    // then per phase its steps' delay and its longest flow at the flow's rate on the nominal
    // capacities (no contention), as NCCL's tuning model costs an algorithm and protocol.
    Time estimate(const Plan& plan, Bytes size) const;
    // The plan of `kind` on `group` with a resolved algorithm and protocol.
    const Plan& protocol_plan(CollectiveKind kind, GroupId group, Algorithm resolved,
                              Protocol protocol, bool* kept = nullptr);
    // resolve_algorithm, kept with the cluster's plans where they are shared (a function of the
    // cluster, the ranks, the operation, the size and the algorithm asked).
    Algorithm resolve(CollectiveKind kind, GroupId group, Bytes size, Algorithm algo);

    const Simulation& sim_;
    const Cluster& cluster_;
    const NetworkConfig& config_;
    const PlanCalibration& calibration_;
    std::vector<std::vector<int>> groups_;
    // Per group, its number among the cluster's kept communicators (kNoCommunicator: not kept).
    std::vector<std::uint64_t> communicators_;
    bool reuse_groups_ = false;
    std::map<std::vector<int>, GroupId> group_ids_;  // with reuse_groups_: every group's ranks
    std::unordered_map<std::uint64_t, Plan> plans_;
    std::unordered_map<std::uint64_t, Plan> p2p_plans_;
    std::shared_ptr<SharedPlans> shared_plans_;
    // This network's collective plans found in shared_plans_, by its own key (collective_plan).
    std::unordered_map<std::uint64_t, const Plan*> shared_plan_of_;
    // collective_plan's answers: (group + 1, kind, algorithm asked) packed in one word, size
    // -> the plan (its algorithm resolved, its protocol chosen) and whether it is kept.
    struct Chosen {
        const Plan* plan = nullptr;
        bool kept = false;
    };
    PlanSizeMap<Chosen, std::uint64_t> chosen_;
    // The routes plans are made on, and the plans made on earlier ones (operations in flight
    // still point into them).
    const Cluster* routing_ = &cluster_;
    std::vector<std::unordered_map<std::uint64_t, Plan>> retired_plans_;
};

}  // namespace cs::network::detail
