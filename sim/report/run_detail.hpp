// What the HTML report shows of one run beyond its summary, recorded by observers while it runs:
// the pipeline timeline of data-parallel replica 0, link utilisation over time (binned), memory
// per stage and the memory of one GPU per stage over time.
#pragma once

#include <cstdint>
#include <vector>

#include "network/network.hpp"
#include "replay/replay.hpp"
#include "report/summary.hpp"
#include "report/svg_timeline.hpp"
#include "topology/cluster.hpp"
#include "workload/plan.hpp"

namespace cs::report {

// Bytes carried per directed link per time bin. Every bin has the same width, which starts at
// 1 us and doubles (adjacent bins summed pairwise) whenever the run outgrows `max_bins` bins, so
// an iteration of any length ends with between max_bins / 2 and max_bins bins. `flow` fidelity:
// each link's rate, as notified, integrated over time; `analytical`: a flow's bytes spread over
// the time it holds each link; `ideal`: nothing (transfers take no time).
class LinkTimeline final : public network::NetworkObserver {
  public:
    LinkTimeline(std::size_t links, std::size_t max_bins = 256);
    void on_flow_start(const FlowStart& flow) override;
    void on_link_rate(Time at, topology::LinkId link, double bytes_per_s, int flows) override;
    void on_link_rates(Time at, std::span<const LinkRate> rates) override;
    bool wants_ordered_link_rates() const override { return false; }

    // Closes every link's current rate at `end` (the iteration's end).
    void finish(Time end);
    Time bin_width() const { return width_; }
    // Bytes per bin of `link` (fewer bins than bin_count() when it fell idle early; empty when
    // it carried nothing).
    const std::vector<double>& bytes(topology::LinkId link) const { return bins_[link]; }
    double total_bytes(topology::LinkId link) const { return totals_[link]; }

  private:
    void add(topology::LinkId link, Time from, Time to, double bytes);
    void grow_to(Time t);
    std::size_t max_bins_;
    Time width_;
    std::vector<std::vector<double>> bins_;
    std::vector<double> totals_;
    struct Rate {
        double bytes_per_s = 0;
        Time since;
    };
    std::vector<Rate> rate_;
};

// Per pipeline stage, one GPU's memory over the iteration: the parameters, gradients and
// optimizer states the memory model gives (constant), plus the activations of the microbatches
// in flight: a chunk's activation memory is held from the start of its forward pass to the end
// of its backward pass (the input-gradient pass when the schedule splits the backward). Steps are
// recorded for data-parallel replica 0.
class MemoryTimeline final : public replay::ReplayObserver {
  public:
    MemoryTimeline(const replay::Replay& replay, const workload::IterationPlan& plan);
    void on_pass(const replay::PassRecord& pass) override;

    struct Step {
        Time at;
        std::int64_t activation_bytes = 0;  // held from `at` on
    };
    // Per stage, the activation steps in time order (at equal times, frees first).
    std::vector<std::vector<Step>> steps() const;

  private:
    struct Change {
        Time at;
        std::int64_t delta = 0;
    };
    std::vector<int> stage_of_worker_;  // -1 for other replicas
    const workload::IterationPlan* plan_;
    std::vector<std::vector<Change>> changes_;
};

// What replica 0's pipeline stages do besides their passes, one track each (the timeline draws
// them under the stage's passes): the collectives inside passes (TP, CP, EP, and the pipeline's
// own, placed as the Perfetto trace places a pass's steps: back to back from its start, each
// `repeat` times) and the pipeline transfers a stage sends (CommKind::Pipeline); the data-parallel
// collectives (gradient sync, parameter gathers); the optimizer step.
struct TrackBlock {
    enum class Track : std::uint8_t { Comm, DpSync, Optimizer };
    int row = 0;  // pipeline stage
    Track track = Track::Comm;
    workload::CommKind kind = workload::CommKind::Tp;  // Dp on DpSync, Tp (unused) on Optimizer
    Time start, end;
};

// Records replica 0's TrackBlocks. Blocks of one row, track and kind that touch or overlap are
// merged into one (a pass's consecutive collectives of one kind), so their number grows with the
// passes, not with the layers.
class TrackRecorder final : public replay::ReplayObserver {
  public:
    explicit TrackRecorder(const replay::Replay& replay);
    void on_pass(const replay::PassRecord& pass) override;
    void on_transfer(const replay::TransferRecord& transfer) override;
    void on_optimizer(int worker, Time start, Time end) override;
    // In the order they were notified (deterministic: the replay is).
    const std::vector<TrackBlock>& blocks() const { return blocks_; }

  private:
    int row(int worker) const;
    void add(const TrackBlock& block);
    std::vector<int> row_of_worker_;  // -1 for workers of other replicas
    std::vector<int> stage_of_worker_;
    std::vector<TrackBlock> blocks_;
    // Per (row, track, kind): the index of its last block in blocks_ + 1 (0: none yet).
    std::vector<std::size_t> last_;
};

// One link's utilisation per bin, for the heat map.
struct LinkSeries {
    std::string name;
    std::string kind;
    double bytes = 0;
    // Over the iteration, as the summary's `utilization` (bytes / (capacity x iteration time)).
    double mean_utilization = 0;
    double peak_utilization = 0;      // the largest of `utilization`
    std::vector<double> utilization;  // bytes in the bin / (capacity x bin width), 0..1
};

// The links of one kind (nvlink, pcie, infiniband, ...) that carried traffic.
struct LinkKindStats {
    std::string kind;
    std::size_t links = 0;
    double bytes = 0;
    double mean_utilization = 0;  // mean over the links of their mean_utilization
    std::string busiest;          // the first of them in the ranking (busiest_links)
    double busiest_utilization = 0;
    double peak_utilization = 0;  // the largest bin utilisation of any of them
};

struct RunDetail {
    TimelinePanel timeline;
    std::vector<TrackBlock> tracks;
    Time bin_width;
    // The busiest links by utilisation over the iteration, busiest first: the summary's `links`
    // order (links_by_utilization), which the console lists.
    std::vector<LinkSeries> links;
    std::size_t links_total = 0;                          // links that carried anything
    std::vector<LinkKindStats> link_kinds;                // in order of their busiest link's rank
    std::int64_t hbm_bytes = 0;                           // of the stage's GPU model
    std::vector<workload::MemoryBreakdown> stage_memory;  // per stage, one GPU
    std::vector<std::vector<MemoryTimeline::Step>> memory_steps;  // per stage
};

// The busiest `max_links` links of `timeline` as series, ranked and with mean utilisations as the
// summary's `links` (links_by_utilization over `accounting`'s bytes) when `accounting` is given,
// else by the timeline's own bytes under the same rule; `kinds`, when given, receives the
// statistics of every link that carried traffic, per kind.
std::vector<LinkSeries> busiest_links(const LinkTimeline& timeline,
                                      const topology::Cluster& cluster, Time iteration,
                                      std::size_t max_links, std::size_t* carried = nullptr,
                                      const LinkAccounting* accounting = nullptr,
                                      std::vector<LinkKindStats>* kinds = nullptr);

}  // namespace cs::report
