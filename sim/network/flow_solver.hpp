// Max-min fair sharing of directed links between flows (progressive filling), incremental.
//
// Flows are added and removed at the current time; recompute(now) then redistributes bandwidth
// only over the connected set of flows and links reachable from the links those changes touched
// (two flows are connected when they share a link). Remaining bytes are advanced lazily: a flow's
// progress is brought up to date only when its rate is about to change. Finish times are kept in
// an indexed heap so the owner can ask for the next flow to finish without scanning.
//
// The solver knows nothing of the engine; Network drives it from events. All quantities are
// per direction of a link: capacity in bytes per second, bytes as double (flows carry fractional
// remainders between rate changes).
#pragma once

#include <cstdint>
#include <vector>

#include "core/units.hpp"
#include "topology/cluster.hpp"

namespace cs::network {

class NetworkObserver;

class FlowSolver {
  public:
    using FlowId = std::uint32_t;

    struct LinkAccount {
        double bytes = 0;  // bytes of every flow that crossed the link (counted at start)
        Time busy;         // time with at least one flow
        Time shared;       // time with two or more flows
        int max_concurrent_flows = 0;
    };

    // `capacity[l]` is the usable capacity of directed link l in bytes per second (> 0).
    explicit FlowSolver(std::vector<double> capacity);

    // Adds a flow of `bytes` (> 0) over `path` (non-empty). `owner` is returned by owner().
    FlowId add(const std::vector<topology::LinkId>& path, double bytes, std::uint32_t owner,
               Time now);
    // Removes a flow (finished or not).
    void remove(FlowId flow);
    // Re-solves max-min fair rates for everything connected to links changed since the last call,
    // updating finish times. Reports links whose total rate or flow count changed to `observers`.
    void recompute(Time now, const std::vector<NetworkObserver*>& observers);
    bool dirty() const { return !dirty_links_.empty(); }

    // The flow with the earliest finish time (ties: lowest id), or kNoFlow if none.
    static constexpr FlowId kNoFlow = 0xffffffffu;
    FlowId next_finishing() const { return heap_.empty() ? kNoFlow : heap_.front(); }
    Time finish_time(FlowId f) const { return flows_[f].finish; }
    std::uint32_t owner(FlowId f) const { return flows_[f].owner; }
    double rate(FlowId f) const { return flows_[f].rate; }
    std::size_t active_flows() const { return active_; }

    // Statistics, complete up to the last recompute().
    const std::vector<LinkAccount>& accounts() const { return accounts_; }
    double link_rate(topology::LinkId l) const { return links_[l].acct_rate; }

    // Work counters for benchmarks: number of recompute() calls and flows re-rated in total.
    std::uint64_t recomputes() const { return recomputes_; }
    std::uint64_t rerated_flows() const { return rerated_; }

  private:
    struct Flow {
        std::vector<topology::LinkId> path;
        std::vector<std::uint32_t> slot;  // index of this flow in links_[path[i]].flows
        double remaining = 0;
        double rate = 0;
        double previous_rate = 0;  // rate before the recompute in progress
        Time updated;
        Time finish = Time::max();
        std::uint32_t owner = 0;
        std::uint32_t heap_index = kNoFlow;
        std::uint32_t epoch = 0;
        bool frozen = false;
        bool active = false;
    };
    struct Link {
        double capacity = 0;
        std::vector<FlowId> flows;
        // progressive-filling scratch
        double remaining_capacity = 0;
        std::uint32_t unfrozen = 0;
        std::uint32_t epoch = 0;
        // accounting: values in force since acct_since
        double acct_rate = 0;
        std::uint32_t acct_flows = 0;
        Time acct_since;
    };

    void mark_dirty(topology::LinkId l);
    bool heap_less(FlowId a, FlowId b) const;
    void heap_up(std::uint32_t i);
    void heap_down(std::uint32_t i);
    void heap_update(FlowId f);
    void heap_erase(FlowId f);

    std::vector<Flow> flows_;
    std::vector<FlowId> free_;
    std::vector<Link> links_;
    std::vector<LinkAccount> accounts_;
    std::vector<FlowId> heap_;
    std::vector<topology::LinkId> dirty_links_;
    std::uint32_t epoch_ = 0;
    std::size_t active_ = 0;
    std::uint64_t recomputes_ = 0;
    std::uint64_t rerated_ = 0;
    // scratch reused across recomputes
    std::vector<topology::LinkId> comp_links_;
    std::vector<FlowId> comp_flows_;
    struct Share {
        double share;
        topology::LinkId link;
    };
    std::vector<Share> share_heap_;
};

}  // namespace cs::network
