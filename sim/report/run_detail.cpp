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

std::vector<LinkSeries> busiest_links(const LinkTimeline& timeline,
                                      const topology::Cluster& cluster, Time iteration,
                                      std::size_t max_links, std::size_t* carried) {
    const auto& links = cluster.links();
    std::vector<std::size_t> order;
    for (std::size_t l = 0; l < links.size(); ++l)
        if (timeline.total_bytes(static_cast<topology::LinkId>(l)) > 0) order.push_back(l);
    if (carried) *carried = order.size();
    // Busiest first; ties in link order, so that the choice is deterministic.
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return timeline.total_bytes(static_cast<topology::LinkId>(a)) >
               timeline.total_bytes(static_cast<topology::LinkId>(b));
    });
    if (order.size() > max_links) order.resize(max_links);
    const double width_s = timeline.bin_width().seconds();
    const auto bins =
        static_cast<std::size_t>((iteration.count_ps() + timeline.bin_width().count_ps() - 1) /
                                 timeline.bin_width().count_ps());
    std::vector<LinkSeries> out;
    for (const std::size_t l : order) {
        const auto id = static_cast<topology::LinkId>(l);
        LinkSeries s;
        s.name = cluster.link_name(static_cast<topology::LinkId>(l));
        s.kind = topology::link_kind_name(links[l].kind);
        s.bytes = timeline.total_bytes(id);
        const double capacity = links[l].bandwidth.bytes_per_s * width_s;
        const auto& b = timeline.bytes(id);
        for (std::size_t i = 0; i < std::max(bins, b.size()); ++i)
            s.utilization.push_back(i < b.size() && capacity > 0 ? b[i] / capacity : 0.0);
        out.push_back(std::move(s));
    }
    return out;
}

}  // namespace cs::report
