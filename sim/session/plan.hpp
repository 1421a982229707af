// `clustersim plan`: every valid layout of an experiment's model on its GPUs, searched, pruned,
// simulated and ranked (docs/plan.md).
//
// The experiment gives the model, the topology, the sequence length and the global batch; the
// layout it gives is only the starting point of `--set`. plan enumerates tp x pp x cp x dp (every
// factorisation of the experiment's GPU count), ep (MoE models), vpp (schedules with virtual
// stages), the micro-batch size, recompute and sharding, under every registered schedule (or
// those named), and for each:
//   1. loads it as a sweep's combination loads (the same override list through the same
//      caches): what the experiment loader or the schedule refuses is invalid, with its reason;
//   2. prepares it (replay::prepare: plan, op orders, memory per GPU, no replay): a layout whose
//      worst GPU needs more than HBM x (1 - headroom) is pruned, before its orders are made when
//      its floor (one microbatch in flight) is already above;
//   3. bounds its iteration time from below: a floor first (replay::iteration_floor: the
//      busiest device's passes back to back), and the full bound (replay::iteration_lower_bound:
//      the passes' critical path at compute plus blocking collectives, the host, and the
//      optimizer step) only when step 4 reaches the survivor's floor;
//   4. in the order of that bound, simulates it with the analytical network unless its bound,
//      shortened by the margin, already loses to the k-th best analytical result (or, with
//      PlanOptions::confirm's limit, its bound loses to the limit's best analytical results);
//   5. re-simulates under the experiment's own network model in the order of the analytical
//      result until the next cannot beat the k-th best so confirmed, then resumes 4 for the
//      layouts whose bound still beats that, and so on; the ranking is that model's. Exact under
//      the premise that no layout runs faster under that model than under the analytical one
//      (checked: PlanResult::faster_than_analytical), unless PlanOptions::confirm's limit
//      stops it first (then 4 and 5 stop there, and PlanResult::contenders and left_by_limit
//      say what could still enter the top k).
// With PlanOptions::guide, the parallelism guide's layouts (plan_guide.hpp) are simulated too.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/name_table.hpp"
#include "ingest/inputs.hpp"
#include "session/shard.hpp"
#include "workload/experiment.hpp"
#include "workload/plan.hpp"

namespace cs::api {

// What plan ranks by. Every objective grows with the iteration time for a given layout (the GPU
// count, the tokens and the model FLOPs of an iteration are the experiment's), so the lower
// bound on time bounds each of them.
enum class PlanObjective : std::uint8_t { Time, Mfu, Cost, Energy };
inline constexpr std::array<Named<PlanObjective>, 4> kPlanObjectiveNames{{
    {"time", PlanObjective::Time},
    {"mfu", PlanObjective::Mfu},
    {"cost", PlanObjective::Cost},
    {"energy", PlanObjective::Energy},
}};

// One point of the search space, as the override list a sweep's combination is.
struct PlanLayout {
    int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1, micro_batch_size = 1;
    workload::Recompute recompute = workload::Recompute::None;
    workload::Sharding sharding = workload::Sharding::None;
    std::string schedule;
    // HSDP (PlanOptions::hsdp): the replicas of one shard group, dividing dp; 0: all of dp.
    int shard_size = 0;
    // Partial recomputation (PlanOptions::partial_recompute): with recompute full, Megatron-LM's
    // block method on the first N layers of each chunk; 0: its uniform method, every layer.
    int recompute_layers = 0;
    // --cp-comm: context parallelism's exchange (parallelism.cp_comm_type) when not the
    // experiment's own, and with a2a+p2p its all-to-all group size (cp_a2a_size); none: the
    // experiment's.
    std::optional<workload::CpCommType> cp_comm;
    int cp_a2a_size = 0;
    // --gpus: the topology's node count (topology.nodes); 0: the experiment's.
    int nodes = 0;
    // --uneven-stages: a first/last stage split plan derived (Megatron-LM's
    // --decoder-first/last-pipeline-num-layers); 0: the experiment's split.
    int first_stage_layers = 0, last_stage_layers = 0;
    // --global-batch: the global batch in sequences (training.global_batch_size); 0: the
    // experiment's.
    std::int64_t global_batch = 0;
    int gpus() const { return tp * pp * cp * dp; }
    // parallelism.tp=.., ..., training.recompute=.., schedule=..: what plan loads it with.
    std::vector<std::string> overrides() const;
    // "tp 8 pp 4 dp 8 cp 1 ep 1 vpp 2 mbs 1 recompute selective sharding zero1 interleaved", with
    // "recompute full block 3", "sharding zero3 shard 8" and "batch 1024" where set.
    std::string text() const;
};

// The headline figures of one simulation of a layout.
struct PlanFigures {
    double iteration_time_s = 0;
    double tokens_per_s = 0;
    double mfu = 0;
    double objective = 0;           // in the objective's unit (PlanResult::objective_unit)
    std::int64_t memory_bytes = 0;  // worst GPU
    double bubble_fraction = 0, exposed_comm_fraction = 0, host_fraction = 0, idle_fraction = 0;
    // exposed_comm_fraction by kind (workload::kCommKindNames: tp, cp, ep, dp, pipeline).
    std::array<double, workload::kCommKinds> exposed_by_kind{};
};

// A layout of the top k.
struct PlanChoice {
    PlanLayout layout;
    std::size_t index = 0;  // enumeration order
    PlanFigures analytical;
    PlanFigures figures;  // under the experiment's own network model: what is ranked
    double lower_bound_s = 0;
    std::string megatron_args;       // the flags that run it (workload::megatron_args_for)
    std::vector<std::string> notes;  // what the flags cannot say (a schedule without a flag)
    std::string why_lost;            // runners-up: the largest difference against the winner
};

// A layout the parallelism guide recommends (PlanOptions::guide), simulated like the top k.
struct PlanGuideEntry {
    PlanLayout layout;
    std::optional<PlanFigures> figures;  // under the experiment's network; none when invalid
    std::string reason;                  // invalid: why
    std::size_t rank = 0;                // 1 + the top-k layouts it does not beat
    std::string versus;                  // against the best: by how much, and the part that grew
};

// Every layout plan looked at, for --json (PlanOptions::keep_entries).
struct PlanEntry {
    enum class Status : std::uint8_t {
        Invalid,
        PrunedMemory,
        PrunedBound,
        LeftByLimit,  // not simulated: the confirmation limit was reached first
        Simulated,
        Confirmed
    };
    PlanLayout layout;
    std::size_t index = 0;  // enumeration order
    Status status = Status::Invalid;
    std::string reason;  // invalid or pruned: why
    std::int64_t memory_bytes = 0;
    double lower_bound_s = 0;
    std::optional<PlanFigures> analytical, confirmed;
    // Confirmed by a run under the experiment's network that was stopped here (in seconds of
    // the iteration) because it could no longer enter the top k: it takes at least this long.
    std::optional<double> confirmed_above_s;
};
inline constexpr std::array<Named<PlanEntry::Status>, 6> kPlanStatusNames{{
    {"invalid", PlanEntry::Status::Invalid},
    {"pruned_memory", PlanEntry::Status::PrunedMemory},
    {"pruned_bound", PlanEntry::Status::PrunedBound},
    {"left_by_limit", PlanEntry::Status::LeftByLimit},
    {"simulated", PlanEntry::Status::Simulated},
    {"confirmed", PlanEntry::Status::Confirmed},
}};
const char* plan_status_name(PlanEntry::Status s);  // its row of kPlanStatusNames

// Every layout plan looked at (PlanOptions::keep_entries), in enumeration order, held compactly:
// about 150 bytes a layout (DeepSeek-V3's 1.32 million layouts take about 200 MB), and each
// PlanEntry made whole when read. An entry's reason is written then from what its record keeps
// (an invalid layout's message, shared by the layouts that gave it; a pruned layout's memory or
// bound), and the figures of the few layouts simulated come from two maps by index.
class PlanEntries {
  public:
    // What the search keeps of a layout.
    struct Record {
        PlanLayout layout;
        std::size_t index = 0;
        std::int64_t memory_bytes = 0;
        double lower_bound_s = 0;
        std::shared_ptr<const std::string> invalid;  // Invalid: why
        PlanEntry::Status status = PlanEntry::Status::Invalid;
        // PrunedMemory: only the floor (one microbatch in flight) was counted.
        bool floor_only = false;
    };
    // What the reasons are written with: the memory limit and HBM per GPU, the top k and the
    // network of the ranking.
    struct Context {
        std::int64_t limit_bytes = 0, hbm_bytes = 0;
        std::size_t top = 0;
        std::string network;
    };

    PlanEntries() = default;
    // `records` in enumeration order; the figures of those simulated (analytical) and confirmed
    // (under the experiment's network), and where a confirming run was stopped, by index. A
    // record the bound pruned whose index has analytical figures reads as simulated, and with
    // confirmed figures or a stop as confirmed.
    PlanEntries(std::vector<Record> records, std::map<std::size_t, PlanFigures> analytical,
                std::map<std::size_t, PlanFigures> confirmed, std::map<std::size_t, double> stopped,
                Context context);

    std::size_t size() const { return records_.size(); }
    bool empty() const { return records_.empty(); }
    PlanEntry operator[](std::size_t i) const;
    PlanEntry front() const { return (*this)[0]; }
    // The entries with analytical figures (simulated or confirmed), in enumeration order.
    std::vector<PlanEntry> simulated() const;

    // Reads entries by value: `for (const auto& e : entries)` makes each in turn.
    class Iterator {
      public:
        using value_type = PlanEntry;
        using difference_type = std::ptrdiff_t;
        Iterator(const PlanEntries* of, std::size_t at) : of_(of), at_(at) {}
        PlanEntry operator*() const { return (*of_)[at_]; }
        Iterator& operator++() {
            ++at_;
            return *this;
        }
        bool operator==(const Iterator& o) const { return at_ == o.at_; }

      private:
        const PlanEntries* of_;
        std::size_t at_;
    };
    Iterator begin() const { return {this, 0}; }
    Iterator end() const { return {this, records_.size()}; }

  private:
    std::vector<Record> records_;
    std::map<std::size_t, PlanFigures> analytical_, confirmed_;
    std::map<std::size_t, double> stopped_;
    Context context_;
};

struct PlanOptions {
    std::filesystem::path experiment;
    std::optional<workload::ExperimentText> text;  // the experiment itself instead of a path
    std::vector<std::string> sets;                 // --set: applied to every layout first
    // --fix key=value: an axis held at one value (parallelism.tp, training.micro_batch_size,
    // schedule, ...) or bounded to a set (parallelism.tp=4,8, training.recompute=none,full) or,
    // for a whole-number axis, a range (parallelism.pp=4..16, parallelism.tp=..8); or any other
    // parallelism./training. key applied to every layout.
    std::vector<std::string> fixes;
    std::vector<std::string> schedules;  // empty: every registered schedule
    double headroom = 0;                 // fraction of HBM kept free
    std::size_t top = 5;
    PlanObjective objective = PlanObjective::Time;
    double gpu_hour_price = 0;  // cost: currency per GPU-hour
    // Before the first confirmation, step 4 simulates the layouts whose bound divided by
    // 1 + margin beats the k-th best analytical result; the stop rule of step 5 then extends
    // it as far as needed, so the margin changes how much is simulated first, not the result
    // (under the premise above).
    double margin = 0.1;
    // Step 5 re-simulates at most this many layouts under the experiment's network (0: as many
    // as the stop rule needs, which makes the top k exact under the premise). A run under `flow`
    // at thousands of GPUs costs seconds where an analytical one costs a fraction of one, and
    // the stop rule may need dozens (layouts within 10-20% of each other analytically), so by
    // default plan confirms the 3 x top best by their analytical result and says how many
    // layouts could still enter the top k (PlanResult::contenders); none when it is exact.
    std::optional<std::size_t> confirm;  // none: 3 x top
    int max_micro_batch_size = 8;  // micro-batch sizes enumerated: divisors of gbs/dp up to it
    bool keep_entries = false;     // --json: every layout's entry
    std::int64_t max_memory = topology::kDefaultMaxMemory;
    bool fast_paths = true;
    // --guide: also simulate the layouts the parallelism guide recommends (plan_guide.hpp) and
    // place them among the top k.
    bool guide = false;
    // --hsdp: every sharded layout also with each shard group size s, 2 <= s < dp dividing dp
    // (parallelism.shard_size). --partial-recompute: every fully recomputed layout also with the
    // block method on N = 1 .. (layers per chunk) - 1 layers (training.recompute_method=block,
    // recompute_layers=N). Both multiply the layouts searched, so they are asked for.
    bool hsdp = false;
    bool partial_recompute = false;
    // --cp-comm: every layout with cp > 1 also with each other way context parallelism exchanges
    // (parallelism.cp_comm_type p2p, a2a, allgather, and a2a+p2p with each all-to-all group size
    // s, 2 <= s < cp dividing cp), unless --fix holds it. Multiplies the cp > 1 layouts.
    bool cp_comm = false;
    // --uneven-stages: where a layout's pp does not split the layers evenly (and is not the
    // experiment's own pp, whose split the experiment gives), also a first/last split: the middle
    // stages even, stage 0 and the last the rest (plan.cpp first_last_split).
    bool uneven_stages = false;
    // --gpus: search these GPU counts (each a whole number of the topology's nodes: the
    // experiment's topology with topology.nodes set) instead of the experiment's own; every
    // objective but time compares them fairly (time favours more GPUs).
    std::vector<int> gpus;
    // --global-batch: search these global batch sizes (sequences per step) instead of the
    // experiment's (parse_global_batches reads the option's text). With more than one, the time
    // objective ranks seconds per 1M tokens (an iteration of a larger batch is longer but may
    // train faster); the other objectives are per token or per FLOP already.
    std::vector<std::int64_t> global_batches;
    // Worker threads for the search and the simulations; 0: one per core (one under mpirun,
    // where the ranks share the cores). Changes no result: every layout is evaluated alone with
    // caches that change none, and the simulations committed are those of one thread
    // (worker_pool.hpp, run_ahead).
    static constexpr int kMostThreads = 256;
    int threads = 0;
    // Progress: (phase, done, total), called on the calling thread; phase is "search" (load,
    // memory, bound), "simulate" (analytical) or "confirm" (the experiment's network).
    std::function<void(const char*, std::size_t, std::size_t)> on_progress;
};

struct PlanResult {
    std::string source;                        // display path of the experiment
    int gpus = 0;                              // the experiment's GPU count
    std::vector<int> gpu_counts;               // --gpus: the counts searched instead
    std::vector<std::int64_t> global_batches;  // --global-batch: the batches searched instead
    std::int64_t hbm_bytes = 0;                // per GPU
    std::int64_t limit_bytes = 0;  // per GPU: HBM less the headroom (what a layout must fit in)
    std::string network;           // the experiment's network model: what the ranking is under
    PlanObjective objective = PlanObjective::Time;
    // "s", "s per 1M tokens" (time over several batches), "MFU", "per 1M tokens", "J per token"
    std::string objective_unit;
    double margin = 0;
    std::size_t layouts = 0, invalid = 0, pruned_memory = 0, pruned_bound = 0, simulated = 0,
                confirmed = 0;
    // Survivors whose full bound was worked out (the others lost on their floor), for plan -v.
    std::size_t bounded = 0;
    // Confirmed layouts that scored better under the experiment's network than under the
    // analytical one: the stop rule's premise failed for them (a warning when not 0).
    std::size_t faster_than_analytical = 0;
    // The confirmation limit applied (PlanOptions::confirm; 0: none), and when it stopped the
    // stop rule, what could still enter the top k: layouts simulated with the analytical
    // network whose result beats the k-th best confirmed score, not confirmed (so the ranking
    // may miss them; every other layout's bound loses), and the best such analytical score.
    // Both 0 when the top k is exact (under the premise).
    std::size_t confirm_limit = 0;
    std::size_t contenders = 0;
    double best_contender = 0;  // in the objective's unit
    // Survivors the limit left unsimulated whose lower bound beats the k-th best confirmed
    // score (once the limit is reached step 4 stops: they could enter the top k too). Not in
    // pruned_bound; 0 when the top k is exact.
    std::size_t left_by_limit = 0;
    // Wall time of the search (load, prepare, memory, floor) and of the simulations (full
    // bounds, both networks), and the threads' time in each step summed over them (this
    // process's; `bound` the floors and the full bounds with their loads), for `plan -v`; not
    // in the JSON (outputs depend on the inputs alone).
    struct {
        double search = 0, simulate = 0;
        double load = 0, prepare = 0, bound = 0, analytical = 0, confirm = 0;
    } seconds;
    // The invalid layouts' reasons (the loader's or the schedule's message) and how many gave it.
    std::map<std::string, std::size_t> invalid_reasons;
    std::vector<PlanChoice> top;  // best first
    // --guide: how the guide's rules applied, its layouts and those that do not divide the GPUs.
    std::vector<std::string> guide_reasoning;
    std::vector<PlanGuideEntry> guide;
    std::vector<std::string> guide_not_dividing;
    PlanEntries entries;  // with keep_entries
};

// --global-batch's text: a comma-separated list of sizes N, ranges MIN..MAX (the multiples of
// MIN up to MAX) and MIN..MAX:STEP (MIN, MIN + STEP, ... up to MAX), in sequences; sorted, each
// once. At most 256 sizes. Throws ConfigError naming the option and the bad item.
std::vector<std::int64_t> parse_global_batches(const std::string& text);

// --confirm's text: a number of layouts, 1 or more, or "all" (0: no limit).
std::size_t parse_confirm(const std::string& text);

// The error when no layout searched is valid and fits: the counts, and the most common reason a
// layout was invalid (plan_explain.cpp).
ConfigError nothing_fits(const PlanResult& result);

// Why `loser` ranks below `winner` (a runner-up's PlanChoice::why_lost, a guide layout's versus):
// how much slower it is, per iteration or per 1M tokens (`per_token`: their batches differ), and
// the part of that time that grew the most, with its two times. A loser that is not slower says
// so: the same score (listed after the winner by enumeration order), or a lower score on
// `objective` (MFU, cost or energy), with the two values.
std::string why_lost(const PlanFigures& loser, const PlanFigures& winner, bool per_token,
                     PlanObjective objective);

// A guide layout against the best (PlanGuideEntry::versus): why_lost's, or for one that scores
// better than the best, which only a layout outside the space searched can (left out by --fix,
// --schedules or --max-micro-batch), its score against the best's and that it was not searched.
std::string guide_versus(const PlanFigures& guide, const PlanFigures& best, bool per_token,
                         PlanObjective objective);

// The Megatron-LM flags that run `spec` (workload::megatron_args_for), with its schedule's traits
// looked up in the registry; an unknown schedule throws ConfigError.
std::string megatron_args_for(const workload::ExperimentSpec& spec,
                              std::vector<std::string>* notes = nullptr);

// The --fix values that are plain --set overrides of the experiment: every one but an axis
// bounded to a set or range (`parallelism.tp=4,8`, `parallelism.pp=4..16`), which no single
// experiment holds (the HTML report's command line).
std::vector<std::string> plan_fixes_as_sets(const std::vector<std::string>& fixes);

// Throws ConfigError for bad options (an unknown --fix key, a bad objective or price), for an
// experiment that does not load, and when no layout is valid and fits.
// Under mpirun (`ranks`), the search (load, prepare, bound) is shared among the ranks and rank 0
// simulates; other ranks return nullopt.
std::optional<PlanResult> plan(const PlanOptions& options, const SweepRanks& ranks);

// The JSON of `plan --json` (and of `clustersim.plan`), written to `out` one entry at a time, so
// that the document is never held whole (DeepSeek-V3's held as a tree took 3.47 GiB). The text
// is what nlohmann::ordered_json::dump(indent) prints for the same document (-1: compact), with
// invalid UTF-8 replaced.
void write_plan_json(std::ostream& out, const PlanResult& r, int indent = 2);

// What `plan --html` draws (report::HtmlReport::plan): the headline, the top k, and every
// simulated layout (PlanOptions::keep_entries) as a point of memory per GPU against iteration
// time (under the experiment's network where confirmed, else the analytical one), with the
// Pareto front of those points (no other point needs no more memory and is faster).
nlohmann::ordered_json plan_html_data(const PlanResult& r);

}  // namespace cs::api
