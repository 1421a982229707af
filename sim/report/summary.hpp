// Metrics of one simulated iteration, collected by observing the replay (the models never compute
// metrics), and their renderings: the summary JSON of DESIGN.md's contract and a text table.
#pragma once
#include <array>
#include <bit>

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "network/network.hpp"
#include "replay/replay.hpp"
#include "workload/plan.hpp"

namespace cs::report {

struct StageSummary {
    int stage = 0;
    double busy_s = 0;  // compute time per GPU of the stage
    // From the stage's first pass start to its last pass end, the longest over its GPUs: the
    // "execution time" of a stage in the Zero Bubble paper's bubble rate.
    double pass_span_s = 0;
    double bubble_fraction = 0;
    double exposed_comm_fraction = 0;
    // exposed_comm_fraction by what the communication is for (workload::kCommKindNames: tp, cp,
    // ep, dp, pipeline); the parts add up to it (each GPU's parts to the picosecond).
    std::array<double, workload::kCommKinds> exposed_by_kind{};
    double idle_fraction = 0;
    double host_fraction = 0;
    int peak_inflight_microbatches = 0;      // chunk activations held at once, at the peak
    std::int64_t peak_activation_bytes = 0;  // plan.devices[stage].memory.activations
};

struct LinkSummary {
    std::string name;
    std::string kind;
    double bytes = 0;
    double busy_s = 0;
    double utilization = 0;  // bytes / (capacity x iteration time)
    double shared_s = 0;
    int max_concurrent_flows = 0;
};

// With `variability:` (docs/what-if.md): what the slow GPUs and hosts cost against the same
// experiment without them, and whose time the iteration waited on (report/critical_path.hpp).
struct VariabilitySummary {
    bool present = false;
    double clean_iteration_time_s = 0;  // the same experiment without `variability`
    double cost_s = 0;                  // iteration_time_s - clean_iteration_time_s
    // The pipeline worker charged the most of the critical path, its stage, replica and GPUs,
    // and its share of the critical path's pass time.
    int critical_worker = -1, critical_stage = -1, critical_dp = -1;
    std::vector<int> critical_gpus;
    double critical_share = 0;
    // Of critical_gpus, the one with the largest fixed slowdown (the first on a tie) and that
    // factor (1: none of its GPUs has a fixed slowdown; drawn ones are per pass).
    int slowest_gpu = -1;
    double slowest_factor = 1;
};

// With `faults:` (docs/what-if.md): the link faults applied, what they cost against the same
// experiment without faults, and a job that a failed GPU or node ended.
struct LinkFaultSummary {
    std::string link;     // the entry's name, "leaf0->spine1" (both directions are affected)
    double fraction = 0;  // of the topology's bandwidth left; 0: failed
    double at_s = 0;      // from this time on
};
struct FaultsSummary {
    bool present = false;
    double clean_iteration_time_s = 0;  // the same experiment without `faults`
    double cost_s = 0;  // iteration_time_s - clean_iteration_time_s; 0 when the job failed
    std::vector<LinkFaultSummary> links;
    // A GPU or node failed during the iteration: the job failed at failed_at_s, its iteration
    // incomplete (no optimizer step, so none of its work is kept).
    bool job_failed = false;
    double failed_at_s = 0;
    std::string failed_what;          // "GPU 5", "node 3", joined by "; " when several
    std::vector<int> failed_gpus;     // the ranks lost (GPU numbers are ranks)
    std::vector<int> failed_workers;  // the pipeline workers they belong to
    std::vector<int> failed_stages, failed_replicas;  // per failed worker
    std::int64_t passes_done = 0;   // passes (per worker) completed before failed_at_s
    std::int64_t passes_total = 0;  // passes (per worker) of a whole iteration
    double lost_gpu_s = 0;          // failed_at_s x world size: GPU time spent on nothing
};

// With `goodput:` (docs/what-if.md, report/goodput.hpp): the whole run, not one iteration.
struct GoodputSummary {
    bool present = false;
    double mtbf_s = 0;            // of the whole job
    double checkpoint_bytes = 0;  // 0 when write_time was given
    double checkpoint_write_s = 0;
    double restart_s = 0;
    double interval_s = 0;  // training time between checkpoints: given, or Daly's optimum
    std::int64_t interval_iterations = 0;  // interval_s in whole iterations (at least 1)
    double young_interval_s = 0, daly_interval_s = 0;
    double fraction = 0;  // of wall-clock time spent training, at interval_s
    int monte_carlo_runs = 0;
    double monte_carlo_fraction = 0, monte_carlo_ci95 = 0;
    // With a token budget:
    double tokens = 0;
    double train_time_s = 0;  // wall clock, failures and checkpoints included
    double gpu_hours = 0;
    double gpu_power_w = 0;  // per GPU, board power
    double energy_kwh = 0;   // GPUs x power x train time x PUE
    double energy_per_token_j = 0;
    double iteration_energy_j = 0;  // GPUs x power x iteration time x PUE
};

struct Summary {
    std::string schedule;
    double iteration_time_s = 0;
    double bubble_fraction = 0;
    double exposed_comm_fraction = 0;
    // exposed_comm_fraction split by kind (tp, cp, ep, dp, pipeline), mean over GPUs; the parts
    // add up to it (StageSummary::exposed_by_kind).
    std::array<double, workload::kCommKinds> exposed_by_kind{};
    double idle_fraction = 0;
    // GPU time waiting for the host to issue kernels (IdleCause::Host idle before passes and
    // PassRecord::host_stall inside them) over iteration time, mean over GPUs.
    double host_fraction = 0;
    // Passes (counted per worker, i.e. per tp x cp group of GPUs) whose kernels the host issued
    // slower than the GPU ran them (PassRecord::host_stall > 0).
    std::int64_t host_bound_passes = 0;
    double mfu = 0;
    double hfu = 0;
    double tokens_per_s = 0;
    double tflops_per_gpu = 0;
    int world_size = 0;
    int microbatches = 0;
    int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1;
    double p2p_bytes = 0;  // pipeline activations and gradients, all GPUs
    std::vector<StageSummary> stages;
    std::vector<LinkSummary> links;
    workload::MemoryBreakdown memory;  // worst GPU
    VariabilitySummary variability;
    FaultsSummary faults;
    GoodputSummary goodput;
    std::uint64_t events = 0;
    // Member folding (replay::Replay::set_fold): the members each network transfer stood for
    // (1: not folded) and, when folding was allowed but refused, why.
    int fold_copies = 1;
    std::string fold_refused;
    // Replica folding (analytical and ideal networks): the data-parallel replicas simulated, one
    // per class (dp when not folded), and why not when it was allowed but refused.
    int fold_replicas = 1;
    std::string fold_replicas_refused;
    double wall_time_s = 0;  // host time of the simulation (the only non-deterministic field)
};

// Accumulates per-worker busy, collective and idle time from replay notifications.
class MetricsObserver final : public replay::ReplayObserver, public replay::FollowerCopier {
  public:
    explicit MetricsObserver(std::size_t workers);
    void on_pass(const replay::PassRecord& pass) override;
    void on_idle(int worker, Time start, Time end, replay::IdleCause cause) override;
    void on_optimizer(int worker, Time start, Time end) override;
    void on_transfer(const replay::TransferRecord& transfer) override;
    // Every record is per worker (sums of whole picoseconds, min and max) or a whole-number total
    // kept per worker too, so a follower's records are its representative's (replica folding).
    void copy_worker(int from, int to) override;

    struct PerWorker {
        Time compute, collective, idle_pipeline, idle_collective;
        // collective + idle_collective by kind (replay::exposed_by_kind for passes; the idle
        // time waiting for the worker's DP collectives), summing to them exactly.
        workload::CommTimes exposed{};
        Time idle_host, host_stall;                    // before passes / inside host-bound passes
        Time first_pass = Time::max(), last_pass_end;  // first_pass is max() until a pass ran
    };
    const std::vector<PerWorker>& per_worker() const { return workers_; }
    // Whole bytes summed exactly (as a double sum of them is while it stays below 2^53).
    double p2p_bytes_per_gpu() const { return static_cast<double>(p2p_bytes_); }
    std::int64_t host_bound_passes() const { return host_bound_passes_; }

  private:
    std::vector<PerWorker> workers_;
    // Per worker, what it added to the totals below (copy_worker adds a follower's).
    struct Totals {
        std::int64_t p2p_bytes = 0;  // pipeline messages it received
        std::int64_t host_bound_passes = 0;
    };
    std::vector<Totals> totals_;
    std::int64_t p2p_bytes_ = 0;
    std::int64_t host_bound_passes_ = 0;
};

// Per directed link of the cluster: bytes, busy and shared time and the most flows at once,
// accumulated from the network's notifications (attach with Replay::add_network_observer).
//   bytes                 every flow's bytes, counted when it starts;
//   busy_s, shared_s      `flow` fidelity: time with at least one / two or more flows (from the
//                         flows' start and end notifications: the network re-solves at the
//                         instant of each, so the counts are the rate notifications' but for
//                         spans of zero length); `analytical`: the sum of its transfers'
//                         stand-alone times, nothing shared; `ideal`: zero;
//   max_concurrent_flows  `flow` fidelity: the most flows on the link at once, counting a flow
//                         from its start to its end notification; 0 where nothing is shared.
class LinkAccounting final : public network::SummingObserver {
  public:
    explicit LinkAccounting(std::size_t links);
    // Back to nothing seen, for another run on the same cluster: only the links seen are cleared
    // (a sweep reuses one accounting instead of allocating and zeroing millions of links per run).
    void reset();
    // Calls f(link) for every link a notification named since the reset, in increasing order
    // (links without bytes among them under `flow`: link_summaries skips those).
    template <typename F>
    void for_each_seen(F&& f) const {
        for (std::size_t w = 0; w < seen_.size(); ++w)
            for (std::uint64_t bits = seen_[w]; bits != 0; bits &= bits - 1)
                f(static_cast<topology::LinkId>(w * 64 +
                                                static_cast<std::size_t>(std::countr_zero(bits))));
    }
    void on_flow_start(const FlowStart& flow) override;
    void on_flow_end(Time at, std::span<const topology::LinkId> path) override;
    void on_link_rate(Time at, topology::LinkId link, double bytes_per_s, int flows) override;
    void on_link_rates(Time at, std::span<const LinkRate> rates) override;
    void on_link_totals(Time at, std::span<const LinkTotal> totals, std::int64_t count) override;
    bool wants_ordered_link_rates() const override { return false; }  // sums per link
    // Busy and shared times come from the flows' starts and ends (on_flow_start says they are
    // shared): the rates add nothing.
    bool wants_link_rates() const override { return false; }
    // Each link's records come from its own notifications alone: under member folding it takes
    // the folded members' links as copies of member 0's.
    bool copies_link_images() const override { return true; }
    void on_link_images(std::span<const LinkImage> images) override;
    // Under `flow` a network with fast paths may count its shared flows per link itself and
    // tell the sums at the end of the iteration: the same records as from each flow's start
    // and end.
    bool takes_link_tallies() const override { return true; }
    void on_link_tallies(std::span<const LinkTally> tallies) override;

    struct Link {
        double bytes = 0;
        Time busy, shared;
        int max_concurrent_flows = 0;
    };
    // Per link, by index (assembled from the tables below on access).
    class Links {
      public:
        std::size_t size() const { return a_->starts_.size(); }
        Link operator[](std::size_t l) const {
            const auto& s = a_->starts_[l];
            if (!a_->shared_) return {s.bytes, Time::ps(s.word), Time::zero(), 0};
            return {s.bytes, s.busy, s.shared, static_cast<int>(s.word >> 32)};
        }

      private:
        friend class LinkAccounting;
        explicit Links(const LinkAccounting* a) : a_(a) {}
        const LinkAccounting* a_;
    };
    Links links() const { return Links(this); }

  private:
    // One record per link, touched by each notification that names the link: a 131,072-GPU run
    // keeps millions of links here and the notifications come in random link order, so a flow's
    // start or end costs one cache miss per link (rate notifications, which come at the same
    // instants, are not needed: busy and shared times follow the flow count). A network's flows
    // are all shared (`flow`) or all unshared (outside it): unshared flows use bytes and `word`.
    struct Starts {  // on_flow_start, on_flow_end, on_link_totals
        double bytes = 0;
        // Unshared flows: their holding times summed, in picoseconds. Shared flows: those
        // started and not ended (low 32 bits) and the most at once (high 32 bits).
        std::int64_t word = 0;
        // Shared flows: time with at least one / two flows, up to `since` (the last change).
        Time busy, shared, since;
    };
    std::vector<Starts> starts_;
    // Since the reset: a shared flow or a rate notification / an unshared flow or link totals.
    bool shared_ = false, unshared_ = false;
    // Records which (a branch on the notification paths; the first of each kind goes to
    // note_sharing, which refuses a mix).
    void sharing(bool shared) {
        if (!(shared ? shared_ : unshared_)) note_sharing(shared);
    }
    void note_sharing(bool shared);
    // A shared flow's link: the time since the last change added to busy and shared as the
    // flow count says, then the count changed by `delta`.
    static void count(Starts& st, Time at, std::int64_t delta);
    std::vector<std::uint64_t> seen_;  // a bit per link a notification named
    void see(topology::LinkId l) { seen_[l >> 6] |= std::uint64_t{1} << (l & 63); }
    bool seen(topology::LinkId l) const { return (seen_[l >> 6] >> (l & 63) & 1) != 0; }
};

// The link sketch (network::link_sketch_term) of a run's unshared flows: what a LinkAccounting
// would sum per link, reduced to one number that is a linear function of those sums. Equal
// sketches on one cluster are equal per-link bytes and holding times but for a chance of about
// 2^-61, so a table-only sweep tells repeated runs apart by it without a table per link or a walk
// over the links (session/sweep.cpp). Told kept transfers and routes as precomputed terms by a
// network with fast paths (sketch_keys). Refuses shared flows (`flow` fidelity: busy and shared
// times come from rates, which are not sums of flows) with a SimulationError.
class LinkSketch final : public network::SummingObserver {
  public:
    explicit LinkSketch(const topology::Cluster& cluster);
    void reset() { value_ = 0; }
    std::uint64_t value() const { return value_; }
    const topology::Cluster& cluster() const { return *cluster_; }
    // The sketch of the sums `accounting` holds for a run on `cluster` without shared flows:
    // value() of a LinkSketch that saw the same run.
    static std::uint64_t of(const LinkAccounting& accounting, const topology::Cluster& cluster);

    void on_flow_start(const FlowStart& flow) override;
    void on_flow_end(Time at, std::span<const topology::LinkId> path) override;
    void on_link_rate(Time at, topology::LinkId link, double bytes_per_s, int flows) override;
    void on_link_rates(Time at, std::span<const LinkRate> rates) override;
    void on_link_totals(Time at, std::span<const LinkTotal> totals, std::int64_t count) override;
    bool wants_ordered_link_rates() const override { return false; }
    bool wants_link_rates() const override { return false; }  // an analytical digest
    const std::vector<std::uint64_t>* sketch_keys() const override { return &keys_; }
    void on_link_sketch(std::uint64_t term) override { value_ = modp::add(value_, term); }

  private:
    const topology::Cluster* cluster_;
    std::vector<std::uint64_t> keys_;  // topology::link_keys(*cluster_)
    std::uint64_t value_ = 0;
};

// A link's utilisation in the summary: its bytes over what its bandwidth carries in an iteration
// of `iteration_s` (0 for an empty iteration). The one formula of link_summaries and of the
// sweep's link digest, which must agree bit for bit.
inline double link_utilization(double bytes, double bytes_per_s, double iteration_s) {
    return iteration_s > 0 ? bytes / (bytes_per_s * iteration_s) : 0;
}

// What the summary's `links` say of one link besides its name and kind.
struct LinkFigures {
    double bytes = 0;
    double busy_s = 0;
    double utilization = 0;  // link_utilization
    double shared_s = 0;
    int max_concurrent_flows = 0;
};

// Calls f(link, figures) for every link of `cluster` that `accounting` saw carry bytes, in link
// order, with its figures over an iteration of `iteration_s`: the one rule of which links the
// summary lists and what it says of them, shared by link_summaries and the sweep's link digest
// (session/sweep.cpp), which must agree bit for bit.
template <typename F>
void for_each_listed_link(const topology::Cluster& cluster, const LinkAccounting& accounting,
                          double iteration_s, F&& f) {
    const auto& links = cluster.links();
    const auto seen = accounting.links();
    // Only the links a notification named can have bytes.
    accounting.for_each_seen([&](topology::LinkId l) {
        if (l >= links.size()) return;
        const auto st = seen[l];
        if (st.bytes <= 0) return;
        f(l, LinkFigures{st.bytes, st.busy.seconds(),
                         link_utilization(st.bytes, links[l].bandwidth.bytes_per_s, iteration_s),
                         st.shared.seconds(), st.max_concurrent_flows});
    });
}

// Every link of `cluster` that `accounting` saw carry bytes, busiest first by link_utilization
// over an iteration of `iteration_s` (stable: link order breaks ties). The one ranking of the
// summary's `links`, the console's "busiest links" and the HTML report's link view.
std::vector<topology::LinkId> links_by_utilization(const topology::Cluster& cluster,
                                                   const LinkAccounting& accounting,
                                                   double iteration_s);

// The summary's `links`: every link of `cluster` that `accounting` saw carry bytes, with its
// utilisation over an iteration of `iteration_s`, in links_by_utilization's order.
std::vector<LinkSummary> link_summaries(const topology::Cluster& cluster,
                                        const LinkAccounting& accounting, double iteration_s);

struct SummaryInputs {
    const workload::ExperimentSpec* spec = nullptr;
    const workload::IterationPlan* plan = nullptr;
    const replay::Replay* replay = nullptr;
    const MetricsObserver* metrics = nullptr;
    replay::ReplayResult result;
    std::string schedule;
    std::vector<int> peak_inflight;         // per stage, in chunk activations
    const LinkAccounting* links = nullptr;  // none: no `links` in the summary
};

Summary summarize(const SummaryInputs& in);
// Fills s.goodput from spec.goodput and the iteration s describes (docs/what-if.md).
void add_goodput(Summary& s, const workload::ExperimentSpec& spec);

// The summary's names of the exposed-communication parts: "exposed_tp_fraction", ...,
// "exposed_pipeline_fraction" (JSON keys of the summary and of each stage, CSV, compare and
// sweep columns), in workload::CommKind order.
const std::array<std::string, workload::kCommKinds>& exposed_kind_keys();

// One scalar field of the summary, a line of summary_fields.def (which describes the columns).
struct SummaryField {
    std::string_view path;    // JSON key, dotted for a nested one: "parallelism.tp"
    std::string_view column;  // name in flat tables (CSV, a sweep's figures, Python rows); "": none
    std::string_view unit;    // s, fraction, count, tokens/s, TFLOP/s, bytes, text
    std::string_view label;   // the HTML report's card; "": none
    std::string_view description;
    nlohmann::ordered_json (*value)(const Summary&);  // as the JSON holds it
};
// Every field, in the order of the JSON.
const std::vector<SummaryField>& summary_fields();
// The JSON's keys that summary_fields.def leaves to hand-written sections (stages, links, ...).
const std::vector<std::string_view>& summary_sections();
// The table as data, one {path, column, unit, label, description} per field: the HTML page's
// and the Python package's copy.
nlohmann::ordered_json summary_fields_json();
// Sets `path` (dotted) of `j` to `value`, making the objects on the way; the value at `path`, or
// nullptr when there is none.
void put_at_path(nlohmann::ordered_json& j, std::string_view path, nlohmann::ordered_json value);
const nlohmann::ordered_json* at_path(const nlohmann::ordered_json& j, std::string_view path);
// The fields of `s` that have a column, at their paths (a summary's JSON cut to them, in its
// order): what a sweep keeps of a run whose summary it does not keep.
nlohmann::ordered_json column_figures(const Summary& s);
// The field at `path` (dotted, as the JSON's); std::out_of_range naming a path the table lacks.
const SummaryField& summary_field(std::string_view path);
// A field's value as the console prints it, by the field's unit (report.js's byUnit prints the
// HTML page's alike): s as a time (format_time, rounded up to the picosecond), fraction as a
// percentage with `decimals` digits, bytes as format_bytes, tokens/s whole, TFLOP/s with one
// decimal, count and text as they are.
std::string format_by_unit(std::string_view unit, const nlohmann::ordered_json& value,
                           int decimals = 2);
// The field at `path` of `s` as the console prints it (format_by_unit).
std::string field_text(const Summary& s, std::string_view path, int decimals = 2);

nlohmann::ordered_json to_json(const Summary& s);
// What a trace records of the summary (its closing metadata): to_json without `links` (the trace
// has its own counters) and without what says how the run was computed rather than what it gave
// (`wall_time_s`, `events`, `fold`), so that a trace depends on the results alone: the same with
// and without fast paths (--no-fast-paths).
nlohmann::ordered_json trace_summary(const Summary& s);
// The readable table printed by `clustersim run`. Links: the `max_links` busiest.
void print_summary(std::ostream& out, const Summary& s, std::size_t max_links = 8);

}  // namespace cs::report
