// Max-min fair sharing of directed links between flows (progressive filling), incremental.
//
// Flows are added and removed, and link capacities changed, at the current time; recompute(now)
// then brings the max-min fair allocation up to date. Two strategies give the same allocation (to
// floating-point rounding):
//
//  - Incremental (default): re-solve only a set A of flows, holding every other flow at its
//    current rate, then verify the result with the bottleneck characterisation of max-min
//    fairness (Bertsekas & Gallager, Data Networks, 6.5.2): a feasible allocation is the max-min
//    fair one iff every flow crosses a saturated link on which no flow has a higher rate. Only
//    flows on links whose totals changed can lose their bottleneck, so only they are checked;
//    a flow that fails (or a held flow that out-rates a re-solved flow on its bottleneck) joins A
//    and A is re-solved. A starts with the new flows and the links of removed flows, and grows
//    only as far as the change actually propagates.
//  - Component: re-solve the whole connected set of flows reachable from the changed links (two
//    flows are connected when they share a link). Kept as the reference the incremental strategy
//    is tested against.
//
// Remaining bytes are advanced lazily: a flow's progress is brought up to date only when its rate
// changes. Finish times are kept in an indexed heap so the owner can ask for the next flow to
// finish without scanning. recompute() allocates nothing once its scratch arrays have grown to
// the largest set seen.
//
// The solver knows nothing of the engine; Network drives it from events. All quantities are
// per direction of a link: capacity in bytes per second, bytes as double (flows carry fractional
// remainders between rate changes). Results depend only on the sequence of calls (no hashing,
// no pointer order, no timing).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/units.hpp"
#include "network/network.hpp"
#include "topology/cluster.hpp"

namespace cs::network {

class FlowSolver {
  public:
    using FlowId = std::uint32_t;

    enum class Strategy { Incremental, Component };

    // `capacity[l]` is the usable capacity of directed link l in bytes per second (> 0).
    explicit FlowSolver(std::vector<double> capacity, Strategy strategy = Strategy::Incremental);

    // Appends a directed link of `capacity` bytes per second (> 0) after the existing ones and
    // returns its id. Network uses such links as private rate caps: a flow whose own rate is
    // limited (an NCCL kernel's rate on a link kind) crosses a link of its own with that capacity.
    topology::LinkId add_link(double capacity);
    // Changes the capacity of a link (bytes per second, >= 0; throws SimulationError otherwise).
    // A link that no flow crosses just takes the new value. For a link in use the change takes
    // effect at the next recompute(now), which the caller makes at the instant of the change:
    // every flow on the link joins the re-solved set (the change spreads from there like any
    // other), and a flow whose rate changes has its remaining bytes advanced at its old rate up to
    // `now` first. At capacity 0 its flows get rate 0 and no finish time (Time::max()) until a
    // later change gives the link capacity again.
    void set_capacity(topology::LinkId link, double capacity);
    // Links known to the solver: those given to the constructor plus those added.
    std::size_t link_count() const { return links_.size(); }

    // Adds a flow of `bytes` (> 0) over `path` (non-empty, at most 65,535 links). A link given k
    // times counts the flow k times on it, as k flows at its rate: member folding's links that
    // every member crosses (Network::fold) carry the members' flows that way. `owner` is
    // returned by owner().
    // `tallied`: the bytes the link tallies count for it (keep_tallies; the owner's rounding of
    // `bytes`, which observers are told), ignored without tallies.
    FlowId add(std::span<const topology::LinkId> path, double bytes, std::uint32_t owner, Time now,
               double tallied = 0);
    FlowId add(const std::vector<topology::LinkId>& path, double bytes, std::uint32_t owner,
               Time now, double tallied = 0) {
        return add(std::span<const topology::LinkId>(path), bytes, owner, now, tallied);
    }
    // Asks for the link records of `path` ahead of an add() over it (a hint: nothing changes).
    void prefetch(std::span<const topology::LinkId> path) const {
        for (const topology::LinkId l : path)
            prefetch_link(l);
    }
    // Asks for flow f's link records ahead of its remove() (a hint: nothing changes).
    void prefetch_flow(FlowId f) const {
        const Hop* hops = path_of(f);
        for (std::uint32_t i = 0; i < state_[f].hops; ++i)
            prefetch_link(hops[i].link);
    }
    // Removes a flow (finished or not) at `now` (read by the link tallies only).
    void remove(FlowId flow, Time now);
    // Re-solves max-min fair rates after the adds and removes since the last call, updating the
    // finish times of flows whose rate changed. Reports links whose total rate or flow count
    // changed to `observers`, in increasing link order.
    void recompute(Time now, const std::vector<NetworkObserver*>& observers);
    bool dirty() const { return !dirty_links_.empty() || !new_flows_.empty(); }

    // The flow with the earliest finish time (ties: lowest id), or kNoFlow if none.
    static constexpr FlowId kNoFlow = 0xffffffffu;
    FlowId next_finishing() const { return heap_.empty() ? kNoFlow : heap_.front().flow; }
    Time finish_time(FlowId f) const { return flows_[f].finish; }
    std::uint32_t owner(FlowId f) const { return flows_[f].owner; }
    // Bytes per second, as of the last recompute().
    double rate(FlowId f) const { return state_[f].rate; }
    std::size_t active_flows() const { return active_; }
    // The most flows active at once so far.
    std::size_t peak_flows() const { return peak_; }

    // The flows crossing link `l`, in no particular order, a flow once per time its path gives
    // the link (invalidated by add() and remove()).
    std::span<const FlowId> flows_on(topology::LinkId l) const { return flows_of(links_[l]); }
    // The links flow f crosses, as given to add().
    std::vector<topology::LinkId> path(FlowId f) const {
        std::vector<topology::LinkId> links(state_[f].hops);
        for (std::size_t i = 0; i < links.size(); ++i)
            links[i] = path_of(f)[i].link;
        return links;
    }
    // The bytes flow f has left at `now` (not before the last recompute()), at its current rate.
    double remaining(FlowId f, Time now) const;

    // A link's total rate as last reported to observers.
    double link_rate(topology::LinkId l) const { return links_[l].acct_rate; }

    // Link tallies: per link, what its flows add up to since the last take_tallies(), counted
    // by add() and remove() on the link's own record (which they touch anyway) so that an
    // owner summing flows per link (report::LinkAccounting, through Network) need not walk
    // every flow's path again at its start and end. Off until keep_tallies(), which takes
    // effect only before the first flow.
    struct Tally {
        double bytes = 0;         // `tallied` bytes of the flows added
        Time busy;                // time with at least one flow (up to the last add or remove)
        Time shared;              // ... with two or more
        std::uint32_t peak = 0;   // the most flows at once (a flow once per time it crosses)
        std::uint32_t flows = 0;  // flows on it now
        bool counted = false;     // a flow was added or removed since the last take_tallies()
    };
    // Whether tallies are kept from now: false once a flow was added (they would miss it).
    bool keep_tallies();
    bool keeps_tallies() const { return tallies_; }
    // Link l's tally since the last take_tallies().
    Tally tally(topology::LinkId l) const;
    // Starts every link's tally again from nothing (the flows on it kept, and counted as the
    // most at once so far).
    void take_tallies();

    // Work counters for benchmarks: recompute() calls, flows re-rated (summed over every
    // progressive filling, so a flow re-solved twice in one recompute counts twice), and flows
    // whose bottleneck was checked.
    std::uint64_t recomputes() const { return recomputes_; }
    std::uint64_t rerated_flows() const { return rerated_; }
    std::uint64_t checked_flows() const { return checked_; }

  private:
    // Per-flow data is split by use so that the loops over flow-link incidences touch as few
    // cache lines as possible.
    struct Flow {  // touched when the flow starts, ends or changes rate
        double remaining = 0;
        double previous_rate = 0;  // rate before the recompute in progress
        Time updated;
        Time finish = Time::max();
        std::uint32_t owner = 0;
        bool active = false;
        bool pending = false;  // added since the last recompute
    };
    struct FlowState {            // read in the solve loops
        double rate = 0;          // bytes per second, as of the last fill()
        std::uint32_t mark = 0;   // == epoch_: in the re-solved set A of this recompute
        std::uint32_t check = 0;  // == check_round_: bottleneck checked in this round
        std::uint16_t hops = 0;
        // The hop where the flow last had its bottleneck, checked first: a flow's bottleneck is
        // mostly where it was, and has_bottleneck() only asks whether there is one.
        std::uint16_t bottleneck_hop = 0;
        std::uint8_t frozen = 1;  // outside fill() every flow is frozen
    };
    // Everything a recompute reads or writes of a link, its flows included while they are few,
    // and its tally, in one 128-byte record: a re-solve visits links scattered over the whole
    // cluster (hundreds of thousands of them at 16,384 GPUs), and each record is one or two
    // cache misses where five arrays of per-link fields and a list on the heap were five or six
    // (and a tally kept by the observers another per link at each flow's start and end).
    static constexpr std::uint32_t kInlineFlows = 5;
    static constexpr std::uint32_t kNoSpill = 0xffffffffu;
    struct alignas(64) Link {
        double capacity = 0;
        double total = 0;      // sum of the rates of its flows, as of the last solve
        double max_rate = 0;   // largest rate of its flows, as of the last solve
        double remaining = 0;  // progressive-filling scratch
        double acct_rate = 0;  // values last reported to observers
        // The tally (Tally; since: the time of its last count)
        double tally_bytes = 0;
        std::int64_t busy_ps = 0, shared_ps = 0, since_ps = 0;
        std::uint32_t peak = 0;
        std::uint32_t acct_flows = 0;
        std::uint32_t unfrozen = 0;
        std::uint32_t members = 0;  // flows of A on the link
        std::uint32_t mark = 0;     // == epoch_: in the link set L of this recompute
        std::uint32_t noted = 0;    // == check_round_ + 1: in changed_links_
        std::uint32_t count = 0;    // flows crossing the link
        // Past kInlineFlows flows, the list lives in spilled_[spill] until the link is empty.
        std::uint32_t spill = kNoSpill;
        bool queued = false;            // in dirty_links_
        bool capacity_changed = false;  // its flows join the re-solved set at the next recompute
        bool counted = false;           // Tally::counted
        FlowId inline_flows[kInlineFlows] = {};
    };
    static_assert(sizeof(Link) == 128);
    // Both cache lines of a link's record (a flow's start and end touch both).
    void prefetch_link(topology::LinkId l) const {
        const char* record = reinterpret_cast<const char*>(&links_[l]);
        __builtin_prefetch(record);
        __builtin_prefetch(record + 64);
    }
    struct Share {
        double share;
        topology::LinkId link;
    };

    // A hop of a flow: its link, and the flow's index in that link's list of flows (side by side,
    // so that the flow moved into a removed flow's slot is updated where its path is read).
    struct Hop {
        topology::LinkId link;
        std::uint32_t slot;
    };
    const Hop* path_of(FlowId f) const { return &hops_[std::size_t{f} * stride_]; }
    Hop* path_of(FlowId f) { return &hops_[std::size_t{f} * stride_]; }
    void restride(std::size_t stride);
    std::span<const FlowId> flows_of(const Link& link) const {
        return {link.spill == kNoSpill ? link.inline_flows : spilled_[link.spill].data(),
                link.count};
    }
    std::uint32_t push_flow(Link& link, FlowId f);
    // The tally's busy and shared time up to `now` (before a change of the link's flows).
    static void count_span(Link& link, Time now);
    FlowId pop_flow(Link& link, std::uint32_t slot);
    void mark_dirty(topology::LinkId l);
    void take_flow(FlowId f);
    void take_link(topology::LinkId l);
    void take_component();
    bool fill();
    void queue_shares();
    // fill(): freezes flow g of A at `rate`; freezes the flows of A alone on every link they
    // cross at their route's least capacity and returns how many.
    void freeze(FlowId g, double rate);
    std::size_t freeze_isolated();
    bool settle_isolated(FlowId g);
    // Whether flow g is the only flow, once, on every link it crosses; `least` its route's least
    // capacity then (the rate max-min gives it whatever the others do).
    bool alone(FlowId g, double& least) const;
    void refresh_links(bool all);
    bool grow(bool all);
    bool has_bottleneck(FlowId f);
    void finish(Time now, const std::vector<NetworkObserver*>& observers);

    // The finish-time heap holds each flow's key beside its id, and positions live in a dense
    // array of their own, so that sifting through hundreds of thousands of flows reads the heap's
    // own memory instead of one Flow record per comparison.
    struct HeapEntry {
        Time finish;
        FlowId flow;
    };
    // Whether a finishes before b (ties: lower flow id), as 1 or 0 and without branches: which of
    // two children is earlier is a coin toss to the branch predictor.
    static std::uint32_t heap_less_bit(const HeapEntry& a, const HeapEntry& b) {
        return static_cast<std::uint32_t>(a.finish < b.finish) |
               (static_cast<std::uint32_t>(a.finish == b.finish) &
                static_cast<std::uint32_t>(a.flow < b.flow));
    }
    static bool heap_less(const HeapEntry& a, const HeapEntry& b) { return heap_less_bit(a, b); }
    void heap_up(std::uint32_t i);
    void heap_down(std::uint32_t i);
    void heap_update(FlowId f);
    void heap_erase(FlowId f);

    Strategy strategy_;
    std::vector<Flow> flows_;
    std::vector<FlowState> state_;
    // Flow f's path is hops_[f * stride_ ...][0 .. hops).
    std::vector<Hop> hops_;
    std::size_t stride_ = 4;
    std::vector<FlowId> free_;
    std::vector<Link> links_;
    std::vector<std::vector<FlowId>> spilled_;  // lists of links with many flows
    std::vector<std::uint32_t> free_spills_;    // spilled_ entries no link uses
    std::vector<HeapEntry> heap_;
    std::vector<std::uint32_t> heap_pos_;  // per flow: its index in heap_, kNoFlow if none
    std::vector<topology::LinkId> dirty_links_;
    std::vector<FlowId> new_flows_;
    std::vector<FlowId> settled_;  // recompute(): new flows alone on their links, rated outside A
    std::vector<topology::LinkId> emptied_;  // ... dirty links without flows, kept out of L
    std::uint32_t epoch_ = 0;
    std::uint32_t check_round_ = 0;
    std::size_t active_ = 0;
    std::size_t peak_ = 0;
    bool tallies_ = false;
    bool added_ = false;  // a flow was ever added (keep_tallies comes before)
    std::uint64_t recomputes_ = 0;
    std::uint64_t rerated_ = 0;
    std::uint64_t checked_ = 0;
    // scratch reused across recomputes
    std::vector<topology::LinkId> set_links_;  // L: links of A's flows and of removed flows
    std::vector<NetworkObserver::LinkRate> changed_rates_;  // finish(): scratch, reused
    std::vector<FlowId> set_flows_;                         // A
    std::vector<topology::LinkId> changed_links_;  // links where a rate changed in the last fill
    std::vector<FlowId> failed_;                   // flows that failed the check this round
    std::vector<FlowId> recheck_;                  // ... and in the round before
    std::vector<Share> share_queue_;               // fill(): the queue of link shares, a heap
};

}  // namespace cs::network
