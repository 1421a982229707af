// The plans a KeptState keeps for the networks on its cluster (KeptPlans): point-to-point and
// collective plans, communicators, resolved algorithms, send routes and transfer costs, each
// keyed by everything it is a function of.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/hash.hpp"
#include "network/accelerator.hpp"
#include "network/collectives.hpp"
#include "network/observed_links.hpp"
#include "network/plan_calibration.hpp"

namespace cs::network::detail {

// A communicator's number where none is kept (SharedPlans::communicators).
constexpr std::uint64_t kNoCommunicator = ~std::uint64_t{0};

// Point-to-point plans kept in the KeptState (KeptState::plans), for every network on its
// cluster; never erased (operations in flight point into them), at most
// kMaxPlans (about 200 bytes each), then each network plans the rest itself.
// Collective plans likewise (shares_plans()), keyed by everything a plan is a function of,
// up to kMaxBytes of plans (bytes_of: an estimate of their heap), then each network plans
// the rest itself. A sweep's later runs on a shape already run take every DP communicator's
// plan as it is instead of routing every ring hop again.
struct SharedPlans {
    static constexpr std::size_t kMaxPlans = std::size_t{1} << 18;
    std::unordered_map<std::uint64_t, Plan> plans;
    struct CollectiveKey {
        std::vector<int> ranks;  // empty where `communicator` stands for them
        std::uint64_t communicator = kNoCommunicator;
        PlanWords words{};  // group (flow id), operation, algorithm, calibration_words
        bool operator==(const CollectiveKey&) const = default;
    };
    struct KeyHash {
        std::size_t operator()(const CollectiveKey& k) const {
            std::uint64_t h = mix64(kFnv1aBasis ^ k.communicator);
            for (std::uint64_t w : k.words)
                h = mix64(h ^ w);
            // Two ranks a word, each word through a multiply and a rotation (a bijection of
            // the running value), one mix64 at the end: send routes' keys hold thousands of
            // ranks and are looked up by every run of a sweep.
            const std::size_t n = k.ranks.size();
            const auto word = [&k](std::size_t i) {
                return static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.ranks[i]));
            };
            std::size_t i = 0;
            for (; i + 1 < n; i += 2)
                h = std::rotl((h ^ (word(i) | word(i + 1) << 32)) * 0x9e3779b97f4a7c15, 29);
            if (i < n) h = std::rotl((h ^ word(i)) * 0x9e3779b97f4a7c15, 29);
            return static_cast<std::size_t>(mix64(h ^ n));
        }
    };
    static constexpr std::size_t kMaxBytes = std::size_t{256} << 20;
    static std::size_t bytes_of(const Plan& plan, std::size_t ranks) {
        std::size_t b = sizeof(CollectiveKey) + sizeof(Plan) + 64 + ranks * sizeof(int);
        for (const Phase& p : plan.phases) {
            b += sizeof(Phase);
            for (const FlowTemplate& f : p.flows)
                b += sizeof(FlowTemplate) + f.path.size() * sizeof(LinkId);
        }
        return b;
    }
    std::unordered_map<CollectiveKey, Plan, KeyHash> collectives;
    // Every communicator registered on the cluster, numbered (words zero): the kept plans
    // and algorithms of a communicator are keyed by its number, so that a later run finds
    // them without copying and hashing its ranks again (register_group looks them up once).
    std::unordered_map<CollectiveKey, std::uint64_t, KeyHash> communicators;
    // resolve(): words (size, operation, algorithm asked) -> the algorithm resolved.
    std::unordered_map<CollectiveKey, Algorithm, KeyHash> resolved;
    // send_routes: ranks (src, dst, src, dst, ...), words (fidelity, step overhead,
    // capacities' efficiencies) -> the routes.
    std::unordered_map<CollectiveKey, std::shared_ptr<const SendRoutes>, KeyHash> sends;
    // kept_cost: (kept plan, size, fidelity, step overhead, link and NVLS efficiencies) ->
    // the transfer's time and per-link sums.
    struct CostKey {
        const Plan* plan = nullptr;
        std::int64_t size = 0;
        std::uint64_t fidelity = 0;
        std::int64_t step_overhead_ps = 0;
        std::array<std::uint64_t, kLinkKinds + 1> efficiency{};
        bool operator==(const CostKey&) const = default;
    };
    struct CostKeyHash {
        std::size_t operator()(const CostKey& k) const {
            std::uint64_t h = mix64(reinterpret_cast<std::uintptr_t>(k.plan));
            h = mix64(h ^ static_cast<std::uint64_t>(k.size));
            h = mix64(h ^ k.fidelity ^ static_cast<std::uint64_t>(k.step_overhead_ps) << 2);
            for (std::uint64_t w : k.efficiency)
                h = mix64(h ^ w);
            return static_cast<std::size_t>(h);
        }
    };
    std::unordered_map<CostKey, PlanCost, CostKeyHash> costs;
    // kept_cost's scratch: per real link, zero between calls.
    struct LinkSum {
        double bytes = 0;
        Time holds;
    };
    std::vector<LinkSum> link_sums;
    std::size_t collective_bytes = 0;
};

}  // namespace cs::network::detail
