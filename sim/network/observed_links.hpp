// What a network tells its observers, and the sums it keeps for them: the fan-out of
// notifications to the observers (RealLinksOnly: the cluster's links only, member folding's
// images, link chains' twins), member folding's link maps, a kept plan's cost per link and the
// send routes of replica folding (Accelerator::send_routes).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/modp.hpp"
#include "network/accelerator.hpp"
#include "network/flow_solver.hpp"
#include "network/network.hpp"
#include "topology/cluster.hpp"

namespace cs::network::detail {

using topology::Cluster;
using topology::LinkId;
using RouteCost = Accelerator::RouteCost;
using SendRoutes = Accelerator::SendRoutes;

// What observers are told a flow carries: its share of the transfer rounded to whole bytes (at
// least one), so that their per-link sums are exact whatever order they are added in
// (NetworkObserver::FlowStart::bytes). Transfer times are computed from the share itself.
inline double whole_bytes(double share) {
    return std::max(1.0, std::round(share));
}

// What a transfer costs on a plan outside `flow` (NetworkImpl::kept_cost).
struct PlanCost {
    Time time;
    std::vector<SummingObserver::LinkTotal> links;  // real links, increasing
    // Its links' term of the link sketch (link_sketch_term), made the first time an observer
    // that sketches is told it (RealLinksOnly::tell_cost).
    mutable bool sketched = false;
    mutable std::uint64_t sketch = 0;
};

// Member folding's link maps: member 0's solver links numbered in the order met, and each
// member's image of each. Dense arrays: a folded 16,384-GPU run looks one up per link of every
// flow, and the fold's check builds them from a million route hops.
struct LinkMaps {
    static constexpr LinkId kNone = ~LinkId{0};
    std::vector<std::int32_t> number;        // per solver link: its number, -1 if not member 0's
    std::vector<std::vector<LinkId>> image;  // image[m][k]: member m's link for number k
    // Per solver link, 1 where every member crosses it (its own image): member 0's flows count
    // size() times there (FoldCheck::shared_by_all). Empty when no link is shared.
    std::vector<std::uint8_t> shared;
    std::size_t size() const { return image.size(); }
    bool empty() const { return image.empty(); }
    void share(LinkId l) {
        if (l >= shared.size()) shared.resize(std::size_t{l} + 1, 0);
        shared[l] = 1;
    }
    bool is_shared(LinkId l) const { return l < shared.size() && shared[l] != 0; }
    // Records that member m's link for member 0's `of` is `to`; member 0 first (m = 0, to =
    // of). False when member m already had another image of `of`.
    bool set(LinkId of, LinkId to, std::size_t m) {
        if (of >= number.size()) number.resize(std::size_t{of} + 1, -1);
        if (number[of] < 0) {
            if (m != 0) return false;  // member 0's plans come first
            number[of] = static_cast<std::int32_t>(image[0].size());
            image[0].push_back(of);
        }
        const auto k = static_cast<std::size_t>(number[of]);
        auto& img = image[m];
        if (img.size() <= k) img.resize(image[0].size(), kNone);
        if (img[k] == kNone) img[k] = to;
        return img[k] == to;
    }
    // Member m's image of member 0's link l, kNone if l is not member 0's or has none.
    LinkId find(LinkId l, std::size_t m) const {
        if (l >= number.size() || number[l] < 0) return kNone;
        const auto k = static_cast<std::size_t>(number[l]);
        return k < image[m].size() ? image[m][k] : kNone;
    }
};

// send_routes' result: per pair its cost and its flows (real links only, as observers see
// them; the rate each is timed at), flat.
class Routes final : public SendRoutes {
  public:
    struct Flow {
        std::uint32_t first = 0, links = 0;  // in `path`
        double bytes_per_size = 0;
        double rate = 0;
    };
    std::size_t size() const override { return costs.size(); }
    RouteCost cost(std::size_t i) const override { return costs[i]; }
    std::vector<RouteCost> costs;
    std::vector<std::uint32_t> flows_of;  // pair i: flows [flows_of[i], flows_of[i + 1])
    std::vector<Flow> flows;
    std::vector<LinkId> path;
    // For link sketches, made the first time an observer that sketches is told these sends
    // (account_sends): the flows with links grouped by what their whole bytes and holding
    // time are a function of (bytes per size, rate), each group with its paths' link keys
    // summed. A follower's sends are mostly one group: one term for all of them.
    struct Group {
        double bytes_per_size = 0;
        double rate = 0;
        PathKeys keys;
    };
    mutable std::vector<Group> groups;
    mutable bool grouped = false;
    std::size_t bytes() const {
        return sizeof(Routes) + costs.size() * sizeof(RouteCost) +
               flows_of.size() * sizeof(std::uint32_t) + flows.size() * sizeof(Flow) +
               path.size() * sizeof(LinkId);
    }
};

// Passes notifications about the cluster's links on to the observers, leaving out the
// virtual links (NVLS caps, private rate caps) numbered after them.
struct RealLinksOnly final : NetworkObserver {
    std::size_t links = 0;
    std::vector<NetworkObserver*> targets;
    // Per target, itself as a SummingObserver when the network tells it sums (fast paths),
    // else null; the summing ones split by sketch_keys(): told sums as a link sketch's term /
    // as flows or link totals.
    std::vector<SummingObserver*> summing;
    std::vector<SummingObserver*> sketches, tables;
    const std::vector<std::uint64_t>* keys = nullptr;  // the sketching observers' link keys
    // A kept transfer's cost, `count` times: its link totals, or its sketch term.
    void tell_cost(Time at, const Cluster&, const PlanCost& cost, std::int64_t count) {
        for (SummingObserver* o : tables)
            o->on_link_totals(at, cost.links, count);
        if (sketches.empty()) return;
        if (!cost.sketched) {
            cost.sketch = link_totals_sketch(*keys, cost.links);
            cost.sketched = true;
        }
        const std::uint64_t term =
            modp::mul(cost.sketch, modp::of(static_cast<std::uint64_t>(count)));
        for (SummingObserver* o : sketches)
            o->on_link_sketch(term);
    }
    std::vector<LinkId> real_path;  // scratch, reused
    // Member folding (Network::fold): maps[m] carries member 0's links onto member m's; empty
    // without folding. Each notification about member 0's flows is repeated for every member
    // to the `repeated` targets; the `copiers` (copies_link_images, fast paths only) are told
    // member 0's alone and, at tell_images(), which links mirror which.
    LinkMaps maps;
    // merge_link_chains: each link's chain as a circular list (null without): a solver
    // link's rate is also every other link's of its chain.
    const std::vector<LinkId>* twins = nullptr;
    std::vector<NetworkObserver*> repeated;
    std::vector<SummingObserver*> copiers;
    // Adds a target: `summer`, itself as a SummingObserver when the network tells it sums (fast
    // paths), else null; `tallied`, whether its shared flows are counted in link tallies
    // (SummingObserver::takes_link_tallies; a copier) instead of told it one by one.
    void add(NetworkObserver* target, SummingObserver* summer, bool tallied);
    // The flow solver's link tallies since the last call, per real link (each link of a chain,
    // `chain_of`, its solver link's: empty without chains), to the tallied targets; the
    // solver's start again.
    void tell_tallies(FlowSolver& solver, const std::vector<LinkId>& chain_of);
    // Link tallies (SummingObserver::takes_link_tallies): the copiers the network counts shared
    // flows for; the targets and the copiers told shared flows' starts and ends are the others.
    std::vector<SummingObserver*> tallied_targets;
    std::vector<NetworkObserver*> flow_targets;
    std::vector<SummingObserver*> flow_copiers;
    std::vector<LinkId> copy_path;  // scratch, reused
    std::span<const LinkId> real(std::span<const LinkId> path) {
        // Mostly every link is real: the path as it is, no copy.
        if (std::all_of(path.begin(), path.end(), [this](LinkId l) { return l < links; }))
            return path;
        real_path.clear();
        for (LinkId l : path)
            if (l < links) real_path.push_back(l);
        return real_path;
    }
    LinkId image(LinkId l, std::size_t m) const {
        const LinkId i = maps.find(l, m);
        if (i == LinkMaps::kNone)
            throw SimulationError(
                "network", "a flow outside the folded transfers (link " + std::to_string(l) + ")");
        return i;
    }
    // Throws unless every real link of `path` has an image in member 1 (a flow of the folded
    // transfers).
    void check_folded(std::span<const LinkId> path) const {
        for (LinkId l : path)
            if (l < links) (void)image(l, 1);
    }
    // Member m's copy of member 0's path (a link every member shares is its own image).
    std::span<const LinkId> copy(std::span<const LinkId> path, std::size_t m) {
        copy_path.clear();
        for (LinkId l : path)
            copy_path.push_back(image(l, m));
        return copy_path;
    }
    // For the copiers, which hear of member 0's flows alone and copy its links' records onto
    // the images at the end: member 0's path with each link every member shares given once per
    // member, as the solver counts it (Network's solver_path), since those links have no image
    // to copy onto. `path` itself when none is shared.
    std::vector<LinkId> shared_path;  // scratch, reused
    std::span<const LinkId> shared(std::span<const LinkId> path) {
        if (maps.shared.empty() ||
            std::none_of(path.begin(), path.end(), [this](LinkId l) { return maps.is_shared(l); }))
            return path;
        shared_path.clear();
        for (LinkId l : path)
            shared_path.insert(shared_path.end(), maps.is_shared(l) ? maps.size() : 1, l);
        return shared_path;
    }
    void on_flow_start(const FlowStart& flow) override {
        const auto& told_targets = flow.shared ? flow_targets : targets;
        const auto& told_copiers = flow.shared ? flow_copiers : copiers;
        // Unfolded (every run outside `flow`) and on real links only: as it is.
        if (maps.empty() && std::all_of(flow.path.begin(), flow.path.end(),
                                        [this](LinkId l) { return l < links; })) {
            if (flow.path.empty()) return;
            for (NetworkObserver* o : told_targets)
                o->on_flow_start(flow);
            return;
        }
        FlowStart f = flow;
        f.path = real(flow.path);
        if (f.path.empty()) return;
        if (!told_copiers.empty()) {
            FlowStart told = f;
            told.path = shared(f.path);
            for (NetworkObserver* o : told_copiers)
                o->on_flow_start(told);
        }
        for (NetworkObserver* o : repeated)
            o->on_flow_start(f);
        if (maps.size() < 2) return;
        if (repeated.empty()) {
            // A flow outside the folded transfers is still an error (image() throws).
            for (LinkId l : f.path)
                (void)image(l, 1);
            return;
        }
        for (std::size_t m = 1; m < maps.size(); ++m) {
            FlowStart c = f;
            c.path = copy(f.path, m);
            for (NetworkObserver* o : repeated)
                o->on_flow_start(c);
        }
    }
    void on_flow_end(Time at, std::span<const LinkId> path) override {
        const auto p = real(path);
        if (p.empty()) return;
        if (!flow_copiers.empty()) {
            const auto told = shared(p);
            for (NetworkObserver* o : flow_copiers)
                o->on_flow_end(at, told);
        }
        for (NetworkObserver* o : repeated)
            o->on_flow_end(at, p);
        if (repeated.empty()) return;
        for (std::size_t m = 1; m < maps.size(); ++m) {
            const auto c = copy(p, m);
            for (NetworkObserver* o : repeated)
                o->on_flow_end(at, c);
        }
    }
    void on_link_rate(Time at, LinkId link, double bytes_per_s, int flows) override;
    std::vector<LinkRate> real_rates;  // scratch, reused
    // on_link_rates() runs at every re-solve: the real links' rates are written through a
    // pointer into room made up front (the chains' links included: longest_chain per rate).
    std::unique_ptr<LinkRate[]> rate_room;
    std::size_t rate_room_size = 0;
    std::size_t longest_chain = 1;
    void on_link_rates(Time at, std::span<const LinkRate> rates) override;
    // Under member folding, tells the copiers which real links mirror member 0's (each
    // member's images, in increasing image order).
    void tell_images();
    bool wants_ordered_link_rates() const override;
    bool wants_link_rates() const override {
        return std::any_of(targets.begin(), targets.end(),
                           [](const NetworkObserver* o) { return o->wants_link_rates(); });
    }
    // Whether a target needs each flow's own start time: one that is not told sums.
    bool wants_flow_times() const {
        return std::any_of(summing.begin(), summing.end(),
                           [](const SummingObserver* o) { return o == nullptr; });
    }
    // Real links only, never under member folding, and only when every target sums
    // (takes_link_totals).
    void on_link_totals(Time at, std::span<const SummingObserver::LinkTotal> totals,
                        std::int64_t count) {
        for (SummingObserver* o : summing)
            o->on_link_totals(at, totals, count);
    }
    // Sends accounted without flows (Accelerator::account_sends): `count` times every flow of
    // `r` for `bytes` each, told the summing targets as flows or as a link sketch's term; their
    // holding times only when `timed` (analytical).
    void tell_sends(Time at, const Routes& r, double bytes, std::int64_t count, bool timed);
};

}  // namespace cs::network::detail
