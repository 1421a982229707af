#include "network/flow_solver.hpp"

#include <algorithm>
#include <limits>

#include "core/errors.hpp"
#include "core/huge_pages.hpp"
#include "network/network.hpp"

namespace cs::network {

using topology::LinkId;

namespace {
// Relative slack of the bottleneck check: a link counts as saturated, and a flow as the fastest
// on it, within this fraction. Sums of many rates carry rounding errors far below it; a looser
// check would accept allocations further from the exact one, a tighter one would re-solve flows
// for rounding noise (costly, never wrong).
constexpr double kSlack = 1e-10;
}  // namespace

FlowSolver::FlowSolver(std::vector<double> capacity, Strategy strategy) : strategy_(strategy) {
    // A cluster's worth of records on 2 MiB pages (4 MiB and more, room for 4,096 added links
    // included), with that room for links added later (rate caps, a compact network's links)
    // before the array moves and loses the advice: a route's records lie far apart
    // (core/huge_pages.hpp). Small solvers, such as the one per isolated collective, keep the
    // allocator's pages.
    reserve_on_huge_pages(links_, capacity.size() + 4096);
    links_.resize(capacity.size());
    for (std::size_t l = 0; l < capacity.size(); ++l) {
        if (!(capacity[l] > 0))
            throw SimulationError("network", "link " + std::to_string(l) + " has no capacity");
        links_[l].capacity = capacity[l];
    }
}

LinkId FlowSolver::add_link(double capacity) {
    if (!(capacity > 0))
        throw SimulationError("network", "an added link needs a positive capacity");
    const auto id = static_cast<LinkId>(links_.size());
    links_.emplace_back();
    set_capacity(id, capacity);
    return id;
}

void FlowSolver::set_capacity(LinkId link, double capacity) {
    if (link >= links_.size())
        throw SimulationError("network", "no link " + std::to_string(link) + " to change");
    if (!(capacity >= 0) || capacity == std::numeric_limits<double>::infinity())
        throw SimulationError(
            "network", "link " + std::to_string(link) + " needs a finite capacity of at least 0");
    Link& k = links_[link];
    if (k.capacity == capacity) return;
    k.capacity = capacity;
    // Held rates on this link may no longer fit (or may leave room), which the bottleneck check
    // assumes they do: its flows are re-solved, not held.
    if (k.count == 0) return;
    k.capacity_changed = true;
    mark_dirty(link);
}

std::uint32_t FlowSolver::push_flow(Link& link, FlowId f) {
    const std::uint32_t slot = link.count++;
    if (link.spill == kNoSpill) {
        if (slot < kInlineFlows) {
            link.inline_flows[slot] = f;
            return slot;
        }
        if (free_spills_.empty()) {
            link.spill = static_cast<std::uint32_t>(spilled_.size());
            spilled_.emplace_back();
        } else {
            link.spill = free_spills_.back();
            free_spills_.pop_back();
        }
        spilled_[link.spill].assign(link.inline_flows, link.inline_flows + kInlineFlows);
    }
    spilled_[link.spill].push_back(f);
    return slot;
}

// Removes the flow in `slot` by moving the last one into it (the order a vector's swap-remove
// leaves), and returns the flow moved.
FlowSolver::FlowId FlowSolver::pop_flow(Link& link, std::uint32_t slot) {
    const std::uint32_t last = --link.count;
    if (link.spill == kNoSpill) {
        const FlowId moved = link.inline_flows[last];
        link.inline_flows[slot] = moved;
        return moved;
    }
    auto& list = spilled_[link.spill];
    const FlowId moved = list.back();
    list[slot] = moved;
    list.pop_back();
    if (last == 0) {
        free_spills_.push_back(link.spill);
        link.spill = kNoSpill;
    }
    return moved;
}

void FlowSolver::restride(std::size_t stride) {
    std::vector<Hop> hops(flows_.size() * stride);
    for (std::size_t f = 0; f < flows_.size(); ++f)
        std::copy_n(&hops_[f * stride_], state_[f].hops, &hops[f * stride]);
    hops_.swap(hops);
    stride_ = stride;
}

void FlowSolver::mark_dirty(LinkId l) {
    if (links_[l].queued) return;
    links_[l].queued = true;
    dirty_links_.push_back(l);
}

bool FlowSolver::keep_tallies() {
    if (added_) return false;
    tallies_ = true;
    return true;
}

void FlowSolver::count_span(Link& link, Time now) {
    const std::int64_t at = now.count_ps();
    const std::int64_t span = at - link.since_ps;
    if (link.count >= 1) link.busy_ps += span;
    if (link.count >= 2) link.shared_ps += span;
    link.since_ps = at;
}

FlowSolver::Tally FlowSolver::tally(LinkId l) const {
    const Link& link = links_[l];
    return {
        link.tally_bytes, Time::ps(link.busy_ps), Time::ps(link.shared_ps), link.peak, link.count,
        link.counted};
}

void FlowSolver::take_tallies() {
    for (Link& link : links_) {
        link.tally_bytes = 0;
        link.busy_ps = link.shared_ps = 0;
        link.peak = link.count;
        link.counted = false;
    }
}

FlowSolver::FlowId FlowSolver::add(std::span<const LinkId> path, double bytes, std::uint32_t owner,
                                   Time now, double tallied) {
    if (path.empty() || !(bytes > 0))
        throw SimulationError("network", "a flow needs a non-empty route and a positive size", now);
    if (path.size() > 0xffff)
        throw SimulationError("network", "a flow's route has more than 65,535 links", now);
    if (path.size() > stride_) restride(std::max(path.size(), 2 * stride_));
    FlowId id;
    if (!free_.empty()) {
        id = free_.back();
        free_.pop_back();
    } else {
        id = static_cast<FlowId>(flows_.size());
        flows_.emplace_back();
        state_.emplace_back();
        heap_pos_.push_back(kNoFlow);
        hops_.resize(flows_.size() * stride_);
    }
    Flow& f = flows_[id];
    f = Flow{};
    f.remaining = bytes;
    f.updated = now;
    f.owner = owner;
    f.active = true;
    f.pending = true;
    state_[id] = FlowState{};
    state_[id].hops = static_cast<std::uint16_t>(path.size());
    state_[id].rate = 0;
    new_flows_.push_back(id);
    Hop* hops = path_of(id);
    // The links of a route lie far apart: ask for all of them before the first is needed.
    for (const LinkId l : path)
        prefetch_link(l);
    if (tallies_) {
        for (std::size_t i = 0; i < path.size(); ++i) {
            Link& link = links_[path[i]];
            count_span(link, now);
            hops[i] = {path[i], push_flow(link, id)};
            link.tally_bytes += tallied;
            link.peak = std::max(link.peak, link.count);
            link.counted = true;
        }
    } else {
        for (std::size_t i = 0; i < path.size(); ++i)
            hops[i] = {path[i], push_flow(links_[path[i]], id)};
    }
    added_ = true;
    peak_ = std::max(peak_, ++active_);
    return id;
}

double FlowSolver::remaining(FlowId id, Time now) const {
    const Flow& f = flows_[id];
    if (!f.active) throw SimulationError("network", "the remaining bytes of an inactive flow");
    if (now <= f.updated || f.pending) return f.remaining;
    return std::max(0.0, f.remaining - state_[id].rate * (now - f.updated).seconds());
}

void FlowSolver::remove(FlowId id, Time now) {
    Flow& f = flows_[id];
    if (!f.active) throw SimulationError("network", "removing a flow that is not active");
    const Hop* path = path_of(id);
    // The links lie far apart: ask for all of them before the first is needed.
    for (std::uint32_t i = 0; i < state_[id].hops; ++i)
        prefetch_link(path[i].link);
    for (std::uint32_t i = 0; i < state_[id].hops; ++i) {
        const LinkId l = path[i].link;
        const std::uint32_t s = path[i].slot;
        if (tallies_) {
            count_span(links_[l], now);
            links_[l].counted = true;
        }
        const FlowId moved = pop_flow(links_[l], s);
        // The hop that sat in the link's last slot now sits in s: found by its slot, since a
        // flow may cross a link more than once (add), this one included (among its hops not
        // yet removed: those removed keep slots that no longer mean anything).
        const std::uint32_t last = links_[l].count;
        if (s != last) {
            Hop* moved_path = path_of(moved);
            for (std::uint32_t j = moved == id ? i + 1 : 0; j < state_[moved].hops; ++j)
                if (moved_path[j].link == l && moved_path[j].slot == last) {
                    moved_path[j].slot = s;
                    break;
                }
        }
        mark_dirty(l);
    }
    heap_erase(id);
    f.active = false;
    f.pending = false;
    state_[id].rate = 0;
    free_.push_back(id);
    --active_;
}

void FlowSolver::take_link(LinkId l) {
    if (links_[l].mark == epoch_) return;
    links_[l].mark = epoch_;
    links_[l].members = 0;
    set_links_.push_back(l);
}

void FlowSolver::take_flow(FlowId g) {
    FlowState& st = state_[g];
    if (st.mark == epoch_) return;
    st.mark = epoch_;
    Flow& f = flows_[g];
    f.previous_rate = f.pending ? -1.0 : state_[g].rate;  // a new flow always gets a finish time
    f.pending = false;
    set_flows_.push_back(g);
    const Hop* path = path_of(g);
    for (std::uint32_t i = 0; i < st.hops; ++i) {
        take_link(path[i].link);
        ++links_[path[i].link].members;
    }
}

// Closes A and L under "shares a link": every flow on a link of L joins A.
void FlowSolver::take_component() {
    for (std::size_t i = 0; i < set_links_.size(); ++i)
        for (FlowId g : flows_of(links_[set_links_[i]]))
            take_flow(g);
}

void FlowSolver::freeze(FlowId g, double rate) {
    FlowState& st = state_[g];
    st.frozen = 1;
    const bool changed = st.rate != rate;
    st.rate = rate;
    const Hop* path = path_of(g);
    for (std::uint32_t i = 0; i < st.hops; ++i) {
        Link& link = links_[path[i].link];
        link.remaining -= rate;
        --link.unfrozen;
        if (changed && link.noted != check_round_ + 1) {
            link.noted = check_round_ + 1;
            changed_links_.push_back(path[i].link);
        }
    }
}

// A flow of A that is the only flow, once, on every link it crosses gets its route's least
// capacity whatever the others do: filling would freeze it at that share (capacity / 1, exact)
// when its narrowest link is popped, and nothing else moves its links. Frozen before the queue is
// built, its links never enter it (under hashed ECMP at 16,384 GPUs, 44% of the flows filled).
std::size_t FlowSolver::freeze_isolated() {
    std::size_t frozen = 0;
    double least = 0;
    for (FlowId g : set_flows_)
        if (alone(g, least)) {
            freeze(g, least);
            ++frozen;
        }
    return frozen;
}

bool FlowSolver::alone(FlowId g, double& least) const {
    const Hop* path = path_of(g);
    least = std::numeric_limits<double>::infinity();
    for (std::uint32_t i = 0; i < state_[g].hops; ++i) {
        const Link& link = links_[path[i].link];
        if (link.count != 1) return false;
        least = std::min(least, link.capacity);
    }
    return true;
}

// fill()'s queue of shares: every link with two or more unfrozen flows, and of each unfrozen
// flow's links with no other unfrozen flow only the one of least (share, link). Such a link's
// share stays as it is until its one flow freezes, so the least of them is popped before the
// others of that flow, which would find no unfrozen flow left when popped: leaving them out pops
// the same links in the same order (at 16,384 GPUs under hashed ECMP most of the queue was such
// links).
void FlowSolver::queue_shares() {
    share_queue_.clear();
    for (LinkId l : set_links_) {
        const Link& link = links_[l];
        if (link.unfrozen > 1)
            share_queue_.push_back({std::max(0.0, link.remaining) / link.unfrozen, l});
    }
    for (FlowId g : set_flows_) {
        if (state_[g].frozen) continue;
        const Hop* path = path_of(g);
        Share least{std::numeric_limits<double>::infinity(), 0};
        bool any = false;
        for (std::uint32_t i = 0; i < state_[g].hops; ++i) {
            const LinkId l = path[i].link;
            const Link& link = links_[l];
            if (link.unfrozen != 1) continue;
            const double share = std::max(0.0, link.remaining);
            if (!any || share < least.share || (share == least.share && l < least.link))
                least = {share, l};
            any = true;
        }
        if (any) share_queue_.push_back(least);
    }
}

// Progressive filling of the flows of A over the links of L, the other flows held at their rates.
// Returns whether any held flow crosses a link of L (if none, A is a union of connected sets and
// the result needs no check).
bool FlowSolver::fill() {
    if (set_flows_.empty()) {
        // Only flows removed: nothing to fill; a link with flows left holds them.
        return std::any_of(set_links_.begin(), set_links_.end(),
                           [this](LinkId l) { return links_[l].count > 0; });
    }
    rerated_ += set_flows_.size();
    for (FlowId g : set_flows_)
        state_[g].frozen = 0;
    bool holds = false;
    for (LinkId l : set_links_) {
        Link& link = links_[l];
        link.remaining = link.capacity;
        link.unfrozen = link.members;
        if (link.members < link.count) {
            holds = true;
            // Without a flow of A the link's remaining capacity is never read.
            if (link.members > 0)
                for (FlowId g : flows_of(link))
                    if (state_[g].mark != epoch_) link.remaining -= state_[g].rate;
        }
    }
    std::size_t unfrozen = set_flows_.size() - freeze_isolated();
    queue_shares();

    // Repeatedly saturate the link with the smallest fair share (ties: lowest link id). Freezing
    // a flow at the current minimum share r can only raise the share (c - r) / (n - 1) of the
    // other links it crosses, so keys are never too large: a popped entry whose link's share has
    // grown since is queued again with the new value instead of re-queueing on every change.
    // Every link is in the queue at most once and (share, link) orders entries totally, so the
    // pops come in one order whatever the queue's layout. The initial shares are heaped in linear
    // time and popped only until every flow of A is frozen: most links of L (those of flows
    // frozen elsewhere, and the wide in-node links) are never popped, where a sort of all of L
    // paid n log n for them.
    auto share_after = [](const Share& x, const Share& y) {
        return x.share > y.share || (x.share == y.share && x.link > y.link);
    };
    auto& queue = share_queue_;
    std::make_heap(queue.begin(), queue.end(), share_after);
    while (unfrozen > 0 && !queue.empty()) {
        std::pop_heap(queue.begin(), queue.end(), share_after);
        const Share top = queue.back();
        queue.pop_back();
        Link& bottleneck = links_[top.link];
        if (bottleneck.unfrozen == 0) continue;
        const double rate = std::max(0.0, bottleneck.remaining) / bottleneck.unfrozen;
        if (rate > top.share) {
            queue.push_back({rate, top.link});
            std::push_heap(queue.begin(), queue.end(), share_after);
            continue;
        }
        for (FlowId g : flows_of(bottleneck))
            if (!state_[g].frozen) {
                freeze(g, rate);
                --unfrozen;
            }
    }
    return holds;
}

void FlowSolver::refresh_links(bool all) {
    for (LinkId l : all ? set_links_ : changed_links_) {
        Link& link = links_[l];
        double total = 0;
        double max_rate = 0;
        for (FlowId g : flows_of(link)) {
            total += state_[g].rate;
            max_rate = std::max(max_rate, state_[g].rate);
        }
        link.total = total;
        link.max_rate = max_rate;
    }
}

bool FlowSolver::has_bottleneck(FlowId g) {
    const double rate = state_[g].rate;
    const Hop* path = path_of(g);
    FlowState& st = state_[g];
    auto bottleneck = [&](std::uint32_t i) {
        const Link& load = links_[path[i].link];
        return load.total >= load.capacity * (1 - kSlack) && rate >= load.max_rate * (1 - kSlack);
    };
    if (bottleneck(st.bottleneck_hop)) return true;
    for (std::uint32_t i = 0; i < st.hops; ++i)
        if (i != st.bottleneck_hop && bottleneck(i)) {
            st.bottleneck_hop = static_cast<std::uint16_t>(i);
            return true;
        }
    return false;
}

// Checks flows for a bottleneck: in the first round every flow on a link of L (the links whose
// totals may differ from the last recompute, when every flow had one), later only flows on links
// where a rate changed in the last fill and flows that failed in the round before (a flow whose
// rate and links are unchanged keeps its answer). A held flow without a bottleneck joins A. A
// re-solved flow without one is out-rated on its bottleneck by held flows (within A it is the
// fastest there); those join A. Returns whether A grew.
bool FlowSolver::grow(bool all) {
    ++check_round_;
    const std::size_t flows_before = set_flows_.size();
    failed_.clear();
    auto check = [&](FlowId g) {
        FlowState& st = state_[g];
        if (st.check == check_round_) return;
        st.check = check_round_;
        ++checked_;
        if (has_bottleneck(g)) return;
        failed_.push_back(g);
        if (st.mark != epoch_) {
            take_flow(g);
            return;
        }
        const Hop* path = path_of(g);
        for (std::uint32_t j = 0; j < st.hops; ++j) {
            const Link& load = links_[path[j].link];
            if (load.total < load.capacity * (1 - kSlack)) continue;
            for (FlowId h : flows_of(load))
                if (state_[h].mark != epoch_ && state_[h].rate > state_[g].rate) take_flow(h);
        }
    };
    if (all) {
        const std::size_t n = set_links_.size();  // L grows in take_flow(); new links unchanged
        for (std::size_t i = 0; i < n; ++i)
            for (FlowId g : flows_of(links_[set_links_[i]]))
                check(g);
    } else {
        for (LinkId l : changed_links_)
            for (FlowId g : flows_of(links_[l]))
                check(g);
        for (FlowId g : recheck_)
            check(g);
    }
    changed_links_.clear();
    recheck_.swap(failed_);
    if (!recheck_.empty() && set_flows_.size() == flows_before) {
        // Rounding left a check unresolved that no single flow explains: solve the whole
        // connected set, which needs no check.
        take_component();
    }
    return set_flows_.size() > flows_before;
}

void FlowSolver::recompute(Time now, const std::vector<NetworkObserver*>& observers) {
    if (!dirty()) return;
    ++recomputes_;
    ++epoch_;
    set_links_.clear();
    set_flows_.clear();
    settled_.clear();
    emptied_.clear();
    const bool incremental = strategy_ == Strategy::Incremental;
    for (LinkId l : dirty_links_) {
        Link& link = links_[l];
        link.queued = false;
        if (incremental && link.count == 0 && !link.capacity_changed) {
            // Its flows all removed: nothing crosses it, so the solve has nothing to do there.
            emptied_.push_back(l);
            continue;
        }
        take_link(l);
        if (link.capacity_changed) {
            link.capacity_changed = false;
            for (FlowId g : flows_of(link))
                take_flow(g);
        }
    }
    dirty_links_.clear();
    for (FlowId g : new_flows_) {
        if (!flows_[g].pending) continue;
        if (incremental && settle_isolated(g)) continue;
        take_flow(g);
    }
    new_flows_.clear();
    if (strategy_ == Strategy::Component) take_component();

    changed_links_.clear();
    recheck_.clear();
    for (bool first = true;; first = false) {
        const bool holds = fill();
        refresh_links(first);
        if (!holds || !grow(first)) break;
    }
    // The links emptied and the settled flows get what the solve would have given them (an
    // emptied link's totals as refresh_links sets them), and finish() their finish times and
    // rates as A's and L's.
    for (LinkId l : emptied_) {
        links_[l].total = 0;
        links_[l].max_rate = 0;
        take_link(l);
    }
    for (FlowId g : settled_) {
        // Still pending: had the check taken it into A (it cannot fail a flow alone on its
        // links, but if it did), take_flow would have treated it as the new flow it is.
        if (state_[g].mark == epoch_) continue;
        flows_[g].pending = false;
        ++rerated_;
        set_flows_.push_back(g);
        const Hop* path = path_of(g);
        for (std::uint32_t i = 0; i < state_[g].hops; ++i)
            take_link(path[i].link);
    }
    finish(now, observers);
}

// A new flow that is the only flow, once, on every link it crosses at the re-solve: whatever the
// others do, progressive filling would freeze it at its route's least capacity (capacity / 1,
// exact; freeze_isolated) and leave every other flow's rate as it is (no other flow crosses its
// links). It is rated here, outside A and L, with the totals refresh_links would give its links
// (its rate, the sum and the largest of one rate), so the solve's loops never see it; a link of
// it that a removal made dirty holds it at that rate like any held flow. It stays pending (new)
// until recompute() hands it to finish() as a flow of A.
bool FlowSolver::settle_isolated(FlowId g) {
    double least = 0;
    if (!alone(g, least)) return false;
    FlowState& st = state_[g];
    const Hop* path = path_of(g);
    flows_[g].previous_rate = -1.0;  // as take_flow: a new flow always gets a finish time
    st.rate = least;
    for (std::uint32_t i = 0; i < st.hops; ++i) {
        Link& link = links_[path[i].link];
        link.total = least;
        link.max_rate = least;
    }
    settled_.push_back(g);
    return true;
}

void FlowSolver::finish(Time now, const std::vector<NetworkObserver*>& observers) {
    for (FlowId g : set_flows_) {
        Flow& f = flows_[g];
        const double rate = state_[g].rate;
        if (rate == f.previous_rate) continue;
        if (f.previous_rate > 0 && now > f.updated)
            f.remaining =
                std::max(0.0, f.remaining - f.previous_rate * (now - f.updated).seconds());
        f.updated = now;
        f.finish = f.remaining <= 0 ? now
                   : rate > 0       ? now + transfer_time(f.remaining, Bandwidth{rate})
                                    : Time::max();  // on a link without capacity: stalled
        heap_update(g);
    }

    changed_rates_.clear();
    for (LinkId l : set_links_) {
        Link& st = links_[l];
        const double total = st.total;
        const std::uint32_t count = st.count;
        if (total == st.acct_rate && count == st.acct_flows) continue;
        st.acct_rate = total;
        st.acct_flows = count;
        if (!observers.empty()) changed_rates_.push_back({l, total, static_cast<int>(count)});
    }
    if (changed_rates_.empty()) return;
    const bool ordered = std::any_of(observers.begin(), observers.end(), [](NetworkObserver* o) {
        return o->wants_ordered_link_rates();
    });
    if (ordered)
        std::sort(changed_rates_.begin(), changed_rates_.end(),
                  [](const auto& a, const auto& b) { return a.link < b.link; });
    for (NetworkObserver* o : observers)
        o->on_link_rates(now, changed_rates_);
}

void FlowSolver::heap_up(std::uint32_t i) {
    const HeapEntry e = heap_[i];
    while (i > 0) {
        const std::uint32_t parent = (i - 1) / 2;
        if (!heap_less(e, heap_[parent])) break;
        heap_[i] = heap_[parent];
        heap_pos_[heap_[i].flow] = i;
        i = parent;
    }
    heap_[i] = e;
    heap_pos_[e.flow] = i;
}

void FlowSolver::heap_down(std::uint32_t i) {
    const HeapEntry e = heap_[i];
    const auto n = static_cast<std::uint32_t>(heap_.size());
    for (;;) {
        std::uint32_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n) child += heap_less_bit(heap_[child + 1], heap_[child]);
        if (!heap_less(heap_[child], e)) break;
        heap_[i] = heap_[child];
        heap_pos_[heap_[i].flow] = i;
        i = child;
    }
    heap_[i] = e;
    heap_pos_[e.flow] = i;
}

void FlowSolver::heap_update(FlowId f) {
    std::uint32_t i = heap_pos_[f];
    if (i == kNoFlow) {
        i = static_cast<std::uint32_t>(heap_.size());
        heap_.push_back({flows_[f].finish, f});
        heap_pos_[f] = i;
    } else {
        heap_[i].finish = flows_[f].finish;
    }
    heap_up(i);
    heap_down(heap_pos_[f]);
}

void FlowSolver::heap_erase(FlowId f) {
    std::uint32_t i = heap_pos_[f];
    if (i == kNoFlow) return;
    heap_pos_[f] = kNoFlow;
    const HeapEntry last = heap_.back();
    heap_.pop_back();
    const auto n = static_cast<std::uint32_t>(heap_.size());
    if (i == n) return;
    // The hole goes down to a leaf by the earlier child, one comparison a level, and the last
    // entry, which mostly belongs near the leaves, climbs from there (f is mostly the root: the
    // flow that finished).
    for (;;) {
        std::uint32_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n) child += heap_less_bit(heap_[child + 1], heap_[child]);
        heap_[i] = heap_[child];
        heap_pos_[heap_[i].flow] = i;
        i = child;
    }
    heap_[i] = last;
    heap_pos_[last.flow] = i;
    heap_up(i);
}

}  // namespace cs::network
