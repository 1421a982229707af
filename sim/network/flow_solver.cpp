#include "network/flow_solver.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "network/network.hpp"

namespace cs::network {

using topology::LinkId;

FlowSolver::FlowSolver(std::vector<double> capacity) {
    links_.resize(capacity.size());
    accounts_.resize(capacity.size());
    for (std::size_t l = 0; l < capacity.size(); ++l) {
        if (!(capacity[l] > 0))
            throw SimulationError("network", "link " + std::to_string(l) + " has no capacity");
        links_[l].capacity = capacity[l];
    }
}

void FlowSolver::mark_dirty(LinkId l) {
    if (links_[l].epoch == epoch_ + 1) return;
    links_[l].epoch = epoch_ + 1;  // "queued for the next recompute"
    dirty_links_.push_back(l);
}

FlowSolver::FlowId FlowSolver::add(const std::vector<LinkId>& path, double bytes,
                                   std::uint32_t owner, Time now) {
    if (path.empty() || !(bytes > 0))
        throw SimulationError("network", "a flow needs a non-empty route and a positive size", now);
    FlowId id;
    if (!free_.empty()) {
        id = free_.back();
        free_.pop_back();
    } else {
        id = static_cast<FlowId>(flows_.size());
        flows_.emplace_back();
    }
    Flow& f = flows_[id];
    f.path.assign(path.begin(), path.end());
    f.slot.resize(path.size());
    f.remaining = bytes;
    f.rate = 0;
    f.updated = now;
    f.finish = Time::max();
    f.owner = owner;
    f.frozen = false;
    f.active = true;
    for (std::size_t i = 0; i < path.size(); ++i) {
        Link& link = links_[path[i]];
        f.slot[i] = static_cast<std::uint32_t>(link.flows.size());
        link.flows.push_back(id);
        LinkAccount& acct = accounts_[path[i]];
        acct.bytes += bytes;
        acct.max_concurrent_flows =
            std::max(acct.max_concurrent_flows, static_cast<int>(link.flows.size()));
        mark_dirty(path[i]);
    }
    ++active_;
    return id;
}

void FlowSolver::remove(FlowId id) {
    Flow& f = flows_[id];
    if (!f.active) throw SimulationError("network", "removing a flow that is not active");
    for (std::size_t i = 0; i < f.path.size(); ++i) {
        Link& link = links_[f.path[i]];
        const std::uint32_t s = f.slot[i];
        const FlowId moved = link.flows.back();
        link.flows[s] = moved;
        link.flows.pop_back();
        if (moved != id) {
            Flow& m = flows_[moved];
            for (std::size_t j = 0; j < m.path.size(); ++j)
                if (m.path[j] == f.path[i]) {
                    m.slot[j] = s;
                    break;
                }
        }
        mark_dirty(f.path[i]);
    }
    heap_erase(id);
    f.active = false;
    f.rate = 0;
    free_.push_back(id);
    --active_;
}

void FlowSolver::recompute(Time now, const std::vector<NetworkObserver*>& observers) {
    if (dirty_links_.empty()) return;
    ++recomputes_;
    ++epoch_;  // dirty links carry this epoch already: they are the seeds of the search
    comp_links_.clear();
    comp_flows_.clear();
    // Breadth-first search over link -> flows -> links; epoch_ marks "visited".
    for (LinkId l : dirty_links_)
        comp_links_.push_back(l);
    dirty_links_.clear();
    for (std::size_t i = 0; i < comp_links_.size(); ++i) {
        for (FlowId fid : links_[comp_links_[i]].flows) {
            Flow& f = flows_[fid];
            if (f.epoch == epoch_) continue;
            f.epoch = epoch_;
            comp_flows_.push_back(fid);
            for (LinkId k : f.path) {
                if (links_[k].epoch == epoch_) continue;
                links_[k].epoch = epoch_;
                comp_links_.push_back(k);
            }
        }
    }
    // A canonical order keeps floating-point results independent of the order of the changes.
    std::sort(comp_links_.begin(), comp_links_.end());
    std::sort(comp_flows_.begin(), comp_flows_.end());
    rerated_ += comp_flows_.size();

    for (FlowId fid : comp_flows_) {
        Flow& f = flows_[fid];
        if (f.rate > 0 && now > f.updated)
            f.remaining = std::max(0.0, f.remaining - f.rate * (now - f.updated).seconds());
        f.updated = now;
        f.frozen = false;
    }

    // Progressive filling: repeatedly saturate the link with the smallest fair share. Freezing a
    // flow at the current minimum share r can only raise the share (c - r) / (n - 1) of the other
    // links it crosses, so heap keys are never too large: a popped entry whose link's share has
    // grown since is pushed back with the new value instead of pushing on every change.
    share_heap_.clear();
    auto share_after = [](const Share& x, const Share& y) {
        return x.share > y.share || (x.share == y.share && x.link > y.link);
    };
    auto current_share = [](const Link& link) {
        return std::max(0.0, link.remaining_capacity) / link.unfrozen;
    };
    for (LinkId l : comp_links_) {
        Link& link = links_[l];
        link.remaining_capacity = link.capacity;
        link.unfrozen = static_cast<std::uint32_t>(link.flows.size());
        if (link.unfrozen > 0) share_heap_.push_back({link.capacity / link.unfrozen, l});
    }
    std::make_heap(share_heap_.begin(), share_heap_.end(), share_after);
    while (!share_heap_.empty()) {
        std::pop_heap(share_heap_.begin(), share_heap_.end(), share_after);
        const Share top = share_heap_.back();
        share_heap_.pop_back();
        Link& bottleneck = links_[top.link];
        if (bottleneck.unfrozen == 0) continue;
        const double rate = current_share(bottleneck);
        if (rate > top.share) {
            share_heap_.push_back({rate, top.link});
            std::push_heap(share_heap_.begin(), share_heap_.end(), share_after);
            continue;
        }
        for (FlowId fid : bottleneck.flows) {
            Flow& f = flows_[fid];
            if (f.frozen) continue;
            f.frozen = true;
            f.rate = rate;
            for (LinkId k : f.path) {
                Link& link = links_[k];
                link.remaining_capacity -= rate;
                --link.unfrozen;
            }
        }
    }

    for (FlowId fid : comp_flows_) {
        Flow& f = flows_[fid];
        f.finish = f.remaining <= 0 ? now : now + transfer_time(f.remaining, Bandwidth{f.rate});
        heap_update(fid);
    }

    for (LinkId l : comp_links_) {
        Link& link = links_[l];
        double total = 0;
        for (FlowId fid : link.flows)
            total += flows_[fid].rate;
        const auto count = static_cast<std::uint32_t>(link.flows.size());
        if (total == link.acct_rate && count == link.acct_flows) continue;
        LinkAccount& acct = accounts_[l];
        const Time span = now - link.acct_since;
        if (link.acct_flows >= 1) acct.busy += span;
        if (link.acct_flows >= 2) acct.shared += span;
        link.acct_rate = total;
        link.acct_flows = count;
        link.acct_since = now;
        for (NetworkObserver* o : observers)
            o->on_link_rate(now, l, total, static_cast<int>(count));
    }
}

bool FlowSolver::heap_less(FlowId a, FlowId b) const {
    const Flow& x = flows_[a];
    const Flow& y = flows_[b];
    return x.finish < y.finish || (x.finish == y.finish && a < b);
}

void FlowSolver::heap_up(std::uint32_t i) {
    const FlowId f = heap_[i];
    while (i > 0) {
        const std::uint32_t parent = (i - 1) / 2;
        if (!heap_less(f, heap_[parent])) break;
        heap_[i] = heap_[parent];
        flows_[heap_[i]].heap_index = i;
        i = parent;
    }
    heap_[i] = f;
    flows_[f].heap_index = i;
}

void FlowSolver::heap_down(std::uint32_t i) {
    const FlowId f = heap_[i];
    const auto n = static_cast<std::uint32_t>(heap_.size());
    for (;;) {
        std::uint32_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && heap_less(heap_[child + 1], heap_[child])) ++child;
        if (!heap_less(heap_[child], f)) break;
        heap_[i] = heap_[child];
        flows_[heap_[i]].heap_index = i;
        i = child;
    }
    heap_[i] = f;
    flows_[f].heap_index = i;
}

void FlowSolver::heap_update(FlowId f) {
    std::uint32_t i = flows_[f].heap_index;
    if (i == kNoFlow) {
        i = static_cast<std::uint32_t>(heap_.size());
        heap_.push_back(f);
        flows_[f].heap_index = i;
    }
    heap_up(i);
    heap_down(flows_[f].heap_index);
}

void FlowSolver::heap_erase(FlowId f) {
    const std::uint32_t i = flows_[f].heap_index;
    if (i == kNoFlow) return;
    flows_[f].heap_index = kNoFlow;
    const FlowId last = heap_.back();
    heap_.pop_back();
    if (last == f) return;
    heap_[i] = last;
    flows_[last].heap_index = i;
    heap_up(i);
    heap_down(flows_[last].heap_index);
}

}  // namespace cs::network
