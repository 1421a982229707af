#include "report/run_detail.hpp"

#include <algorithm>
#include <numeric>

#include "core/errors.hpp"

namespace cs::report {

LinkTimeline::LinkTimeline(std::size_t links, std::size_t max_bins)
    : max_bins_(std::max<std::size_t>(2, max_bins & ~std::size_t{1})),
      width_(Time::us(1)),
      bins_(links),
      totals_(links, 0.0),
      rate_(links) {}

void LinkTimeline::grow_to(Time t) {
    // Bins cover [0, max_bins x width); double the width until t fits, summing bins pairwise.
    while (t.count_ps() > static_cast<std::int64_t>(max_bins_) * width_.count_ps()) {
        for (auto& b : bins_) {
            for (std::size_t i = 0; 2 * i < b.size(); ++i)
                b[i] = b[2 * i] + (2 * i + 1 < b.size() ? b[2 * i + 1] : 0.0);
            b.resize((b.size() + 1) / 2);
        }
        width_ = width_ * 2;
    }
}

void LinkTimeline::add(topology::LinkId link, Time from, Time to, double bytes) {
    if (bytes <= 0) return;
    totals_[link] += bytes;
    grow_to(to);
    auto& b = bins_[link];
    const std::int64_t w = width_.count_ps();
    if (to <= from) {  // an instant: all in its bin
        const auto i = static_cast<std::size_t>(
            std::min<std::int64_t>(from.count_ps() / w, static_cast<std::int64_t>(max_bins_) - 1));
        if (b.size() <= i) b.resize(i + 1, 0.0);
        b[i] += bytes;
        return;
    }
    const double per_ps = bytes / static_cast<double>((to - from).count_ps());
    for (std::int64_t t = from.count_ps(); t < to.count_ps();) {
        const std::int64_t bin = t / w;
        const std::int64_t end = std::min(to.count_ps(), (bin + 1) * w);
        const auto i = static_cast<std::size_t>(bin);
        if (b.size() <= i) b.resize(i + 1, 0.0);
        b[i] += per_ps * static_cast<double>(end - t);
        t = end;
    }
}

void LinkTimeline::on_flow_start(const FlowStart& flow) {
    if (flow.shared) return;  // counted from the rate notifications
    for (const topology::LinkId l : flow.path)
        add(l, flow.at, flow.at + flow.holds, flow.holds.count_ps() > 0 ? flow.bytes : 0.0);
}

void LinkTimeline::on_link_rate(Time at, topology::LinkId link, double bytes_per_s, int) {
    Rate& r = rate_[link];
    if (r.bytes_per_s > 0 && at > r.since)
        add(link, r.since, at, r.bytes_per_s * (at - r.since).seconds());
    r = Rate{bytes_per_s, at};
}

void LinkTimeline::on_link_rates(Time at, std::span<const LinkRate> rates) {
    for (const LinkRate& r : rates)
        on_link_rate(at, r.link, r.bytes_per_s, r.flows);
}

void LinkTimeline::finish(Time end) {
    for (std::size_t l = 0; l < rate_.size(); ++l)
        on_link_rate(end, static_cast<topology::LinkId>(l), 0.0, 0);
    grow_to(end);
}

MemoryTimeline::MemoryTimeline(const replay::Replay& replay, const workload::IterationPlan& plan)
    : plan_(&plan), changes_(static_cast<std::size_t>(plan.stages)) {
    const auto& workers = replay.workers();
    stage_of_worker_.assign(workers.size(), -1);
    for (std::size_t w = 0; w < workers.size(); ++w)
        if (workers[w].dp == 0) stage_of_worker_[w] = workers[w].stage;
}

void MemoryTimeline::on_pass(const replay::PassRecord& pass) {
    if (pass.worker < 0 || static_cast<std::size_t>(pass.worker) >= stage_of_worker_.size())
        throw SimulationError("memory timeline",
                              "pass of unknown worker " + std::to_string(pass.worker));
    const int stage = stage_of_worker_[static_cast<std::size_t>(pass.worker)];
    if (stage < 0) return;
    const auto bytes =
        plan_->virtual_stages[static_cast<std::size_t>(pass.virtual_stage)].activation_memory.value;
    auto& changes = changes_[static_cast<std::size_t>(stage)];
    // As schedule::peak_inflight_microbatches counts: held from the forward pass to the pass that
    // releases it (the weight-gradient pass when the backward is split, else the backward).
    if (pass.pass == schedule::Pass::Forward) {
        changes.push_back({pass.start, bytes});
    } else if (pass.pass == schedule::Pass::Backward ||
               pass.pass == schedule::Pass::BackwardWeight) {
        changes.push_back({pass.end, -bytes});
    }
}

std::vector<std::vector<MemoryTimeline::Step>> MemoryTimeline::steps() const {
    std::vector<std::vector<Step>> out;
    for (auto changes : changes_) {
        // Frees before allocations at the same time: a pass that starts when another ends reuses
        // its memory, as the schedule's count assumes.
        std::stable_sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
            return a.at < b.at || (a.at == b.at && a.delta < b.delta);
        });
        std::vector<Step> steps{{Time::zero(), 0}};
        std::int64_t held = 0;
        for (const Change& c : changes) {
            held += c.delta;
            if (steps.back().at == c.at)
                steps.back().activation_bytes = held;
            else
                steps.push_back({c.at, held});
        }
        out.push_back(std::move(steps));
    }
    return out;
}

namespace {
// The links that carried bytes, busiest first, and their mean utilisation (index for index): the
// summary's ranking and bytes where there is an accounting; else the timeline's bytes, ranked
// by the same rule.
struct RankedLinks {
    std::vector<topology::LinkId> order;
    std::vector<double> mean;
};
RankedLinks rank_links(const LinkTimeline& timeline, const topology::Cluster& cluster,
                       double iteration_s, const LinkAccounting* accounting) {
    const auto& links = cluster.links();
    RankedLinks r;
    if (accounting) {
        r.order = links_by_utilization(cluster, *accounting, iteration_s);
        const auto& seen = accounting->links();
        for (const topology::LinkId l : r.order)
            r.mean.push_back(
                link_utilization(seen[l].bytes, links[l].bandwidth.bytes_per_s, iteration_s));
        return r;
    }
    std::vector<topology::LinkId> order;
    std::vector<double> mean;
    for (std::size_t l = 0; l < links.size(); ++l)
        if (timeline.total_bytes(static_cast<topology::LinkId>(l)) > 0)
            order.push_back(static_cast<topology::LinkId>(l));
    for (const topology::LinkId l : order)
        mean.push_back(
            link_utilization(timeline.total_bytes(l), links[l].bandwidth.bytes_per_s, iteration_s));
    std::vector<std::size_t> index(order.size());
    std::iota(index.begin(), index.end(), std::size_t{0});
    std::stable_sort(index.begin(), index.end(),
                     [&](std::size_t a, std::size_t b) { return mean[a] > mean[b]; });
    for (const std::size_t i : index) {
        r.order.push_back(order[i]);
        r.mean.push_back(mean[i]);
    }
    return r;
}

// A link's busiest bin: its bytes over what the link carries in a bin.
double peak_of(const LinkTimeline& timeline, const topology::Cluster& cluster, topology::LinkId l) {
    const double capacity =
        cluster.links()[l].bandwidth.bytes_per_s * timeline.bin_width().seconds();
    double peak = 0;
    if (capacity > 0)
        for (const double b : timeline.bytes(l))
            peak = std::max(peak, b / capacity);
    return peak;
}

// Per link kind, in the order of its busiest link: its links, bytes and utilisations.
std::vector<LinkKindStats> kind_stats(const LinkTimeline& timeline,
                                      const topology::Cluster& cluster, const RankedLinks& ranked,
                                      const LinkAccounting* accounting) {
    const auto& links = cluster.links();
    std::vector<LinkKindStats> kinds;
    for (std::size_t i = 0; i < ranked.order.size(); ++i) {
        const topology::LinkId l = ranked.order[i];
        const std::string kind = topology::link_kind_name(links[l].kind);
        auto it = std::find_if(kinds.begin(), kinds.end(),
                               [&](const LinkKindStats& k) { return k.kind == kind; });
        if (it == kinds.end()) {
            LinkKindStats k;
            k.kind = kind;
            k.busiest = cluster.link_name(l);
            k.busiest_utilization = ranked.mean[i];
            kinds.push_back(std::move(k));
            it = kinds.end() - 1;
        }
        ++it->links;
        it->bytes += accounting ? accounting->links()[l].bytes : timeline.total_bytes(l);
        it->mean_utilization += ranked.mean[i];  // divided by the count below
        it->peak_utilization = std::max(it->peak_utilization, peak_of(timeline, cluster, l));
    }
    for (auto& k : kinds)
        k.mean_utilization /= static_cast<double>(k.links);
    return kinds;
}
}  // namespace

std::vector<LinkSeries> busiest_links(const LinkTimeline& timeline,
                                      const topology::Cluster& cluster, Time iteration,
                                      std::size_t max_links, std::size_t* carried,
                                      const LinkAccounting* accounting,
                                      std::vector<LinkKindStats>* kinds) {
    const auto& links = cluster.links();
    const RankedLinks ranked = rank_links(timeline, cluster, iteration.seconds(), accounting);
    if (carried) *carried = ranked.order.size();
    const double width_s = timeline.bin_width().seconds();
    const auto bins =
        static_cast<std::size_t>((iteration.count_ps() + timeline.bin_width().count_ps() - 1) /
                                 timeline.bin_width().count_ps());
    if (kinds) *kinds = kind_stats(timeline, cluster, ranked, accounting);
    std::vector<LinkSeries> out;
    for (std::size_t i = 0; i < ranked.order.size() && i < max_links; ++i) {
        const topology::LinkId id = ranked.order[i];
        LinkSeries s;
        s.name = cluster.link_name(id);
        s.kind = topology::link_kind_name(links[id].kind);
        s.bytes = timeline.total_bytes(id);
        s.mean_utilization = ranked.mean[i];
        const double capacity = links[id].bandwidth.bytes_per_s * width_s;
        const auto& b = timeline.bytes(id);
        for (std::size_t j = 0; j < std::max(bins, b.size()); ++j)
            s.utilization.push_back(j < b.size() && capacity > 0 ? b[j] / capacity : 0.0);
        s.peak_utilization = peak_of(timeline, cluster, id);
        out.push_back(std::move(s));
    }
    return out;
}

TrackRecorder::TrackRecorder(const replay::Replay& replay) {
    const auto& workers = replay.workers();
    row_of_worker_.assign(workers.size(), -1);
    int rows = 0;
    for (std::size_t w = 0; w < workers.size(); ++w) {
        stage_of_worker_.push_back(workers[w].stage);
        if (workers[w].dp == 0) {
            row_of_worker_[w] = workers[w].stage;
            rows = std::max(rows, workers[w].stage + 1);
        }
    }
    last_.assign(static_cast<std::size_t>(rows) * 3 * workload::kCommKinds, 0);
}

int TrackRecorder::row(int worker) const {
    if (worker < 0 || static_cast<std::size_t>(worker) >= row_of_worker_.size())
        throw SimulationError("timeline tracks", "unknown worker " + std::to_string(worker));
    return row_of_worker_[static_cast<std::size_t>(worker)];
}

void TrackRecorder::add(const TrackBlock& block) {
    if (block.end <= block.start) return;
    const std::size_t key =
        (static_cast<std::size_t>(block.row) * 3 + static_cast<std::size_t>(block.track)) *
            workload::kCommKinds +
        static_cast<std::size_t>(block.kind);
    std::size_t& last = last_[key];
    if (last > 0) {
        TrackBlock& prev = blocks_[last - 1];
        if (block.start <= prev.end && block.end >= prev.start) {
            prev.start = std::min(prev.start, block.start);
            prev.end = std::max(prev.end, block.end);
            return;
        }
    }
    blocks_.push_back(block);
    last = blocks_.size();
}

void TrackRecorder::on_pass(const replay::PassRecord& pass) {
    const int r = row(pass.worker);
    if (r < 0 || !pass.plan) return;
    const auto& steps = pass.plan->steps;
    if (pass.step_times.size() != steps.size())
        throw SimulationError("timeline tracks",
                              "a pass of " + std::to_string(steps.size()) + " steps came with " +
                                  std::to_string(pass.step_times.size()) + " step times");
    Time t = pass.start;
    for (std::size_t i = 0; i < steps.size(); ++i) {
        const Time from = std::min(t, pass.end);
        t += pass.step_times[i] * steps[i].repeat;
        if (steps[i].kind != workload::Step::Kind::Collective) continue;
        add({r, TrackBlock::Track::Comm, steps[i].comm_kind(), from, std::min(t, pass.end)});
    }
}

void TrackRecorder::on_transfer(const replay::TransferRecord& transfer) {
    using K = replay::TransferRecord::Kind;
    if (transfer.kind == K::Activation || transfer.kind == K::Gradient) {
        const int r = row(transfer.src_worker);
        if (r >= 0)
            add({r, TrackBlock::Track::Comm, workload::CommKind::Pipeline, transfer.start,
                 transfer.end});
        return;
    }
    // A data-parallel collective is one for the stage's replicas, named by whichever worker
    // launched it: replica 0's stage row shows it when replica 0 takes part.
    row(transfer.src_worker);  // checks the worker
    const auto w = static_cast<std::size_t>(transfer.src_worker);
    if (transfer.replica_count > 0 && transfer.replica_first > 0) return;
    add({stage_of_worker_[w], TrackBlock::Track::DpSync, workload::CommKind::Dp, transfer.start,
         transfer.end});
}

void TrackRecorder::on_optimizer(int worker, Time start, Time end) {
    const int r = row(worker);
    if (r < 0) return;
    add({r, TrackBlock::Track::Optimizer, workload::CommKind::Tp, start, end});
}

}  // namespace cs::report
