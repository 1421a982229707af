// Every combination of some varied experiment keys, simulated and ranked by throughput.
// Combinations that are not valid layouts (heads % tp, layers that do not split, a schedule that
// needs more microbatches, ...), or whose simulation fails, are kept with the reason; they never
// stop the sweep.
//
// Under `mpirun -n N` (SweepRanks) the combinations are shared among the N processes; rank 0
// gathers the rows and alone gets them back, exactly as one process would.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ingest/inputs.hpp"
#include "session/shard.hpp"
#include "workload/plan.hpp"

namespace cs::api {

class SweepCache;  // session/sweep_cache.hpp

struct SweepAxis {
    std::string key;                  // a --set path: parallelism.tp, schedule, topology.nodes
    std::vector<std::string> values;  // in the order given
};

// "parallelism.tp=1,2,4,8" -> {parallelism.tp, [1, 2, 4, 8]}, one per --vary. Throws ConfigError
// for malformed, empty, repeated values or keys, and for no axis at all.
std::vector<SweepAxis> parse_sweep_axes(const std::vector<std::string>& vary);

// What a valid combination gave, as the ranking, the table and the JSON use it. Plain data,
// because the ranks of an MPI sweep send it to rank 0 (as CBOR, which keeps every double bit for
// bit).
struct SweepResult {
    // The summary's fields that have a column (report::column_figures: summary_fields.def), as
    // compact JSON text: ordered as the summary and bit for bit (doubles are printed to
    // round-trip). The table reads them; the JSON gives them when the summary is not kept.
    std::string figures;
    double tokens_per_s = 0;  // figures' tokens_per_s, kept apart as the ranking's key
    bool fits = true;         // worst GPU's memory within its HBM
    // report::to_json without wall_time_s, compact. Kept as text because a summary lists every
    // link and a JSON tree of it is several times larger; kept only with
    // SweepOptions::keep_summaries (a summary is up to about 0.65 MB).
    std::string summary;
    // FNV-1a of that text: equal digests are the same run (the ranking lists it once).
    std::uint64_t summary_digest = 0;
    double wall_time_s = 0;

    // The figure at a summary field's path ("parallelism.dp"); throws std::out_of_range for a
    // field without a column.
    nlohmann::ordered_json figure(std::string_view path) const;
    double iteration_time_s() const { return figure("iteration_time_s").get<double>(); }
    std::int64_t memory_bytes() const {  // worst GPU
        return figure("memory_per_gpu_bytes.total").get<std::int64_t>();
    }
};

struct SweepRow {
    std::size_t index = 0;              // enumeration order: the last axis varies fastest
    std::vector<std::string> values;    // one per axis
    std::optional<SweepResult> result;  // empty when not valid
    std::string error;                  // why not valid
    std::string source;                 // display path of the experiment, when it loaded
};

struct SweepOptions {
    std::filesystem::path experiment;
    std::vector<std::string> sets;  // applied to every combination, before the varied keys
    std::vector<SweepAxis> axes;
    std::optional<workload::ExperimentText> text;  // the experiment itself instead of a path
    // Called after each combination this process simulated: (done, this process's total).
    std::function<void(std::size_t, std::size_t)> on_row;
    // Called with each combination's experiment once loaded, before it runs; what it throws
    // stops the sweep (a ConfigError is reported as the sweep's, not as the row's). The command
    // line refuses here an output that would replace a file a combination was read from.
    std::function<void(const workload::ExperimentSpec&)> on_loaded;
    // Keep each valid row's summary text (for `sweep --json`); without it a row costs a few
    // hundred bytes, so memory does not grow with the size of the topology.
    bool keep_summaries = true;
    // With keep_summaries, a sweep whose combinations times the first summary's size would
    // exceed this is refused (ConfigError naming --json) before it runs the rest (--max-memory).
    std::int64_t max_memory = topology::kDefaultMaxMemory;
    // The sweep's cache (SweepCache) and every run's fast paths (RunOptions::fast_paths); false
    // (--no-fast-paths): every combination parsed, built and run from nothing, its summary's own
    // link list digested. The table and JSON are the same.
    bool fast_paths = true;
    // With fast_paths: the cache to use, kept by the caller across sweeps (Python runs a sweep one
    // combination at a time, so that Ctrl-C lands between two, and keeps one cache for all);
    // none: the sweep makes its own. A cache changes no result.
    std::shared_ptr<SweepCache> cache;
};

// The most combinations a sweep may have. Each is one run, so even this many would take days.
inline constexpr std::uint64_t kMaxSweepCombinations = 1'000'000;

// Every combination's row in enumeration order, on rank 0 of `ranks`; nullopt on other ranks.
// More than kMaxSweepCombinations combinations (the product of the axes' value counts, computed
// without wrapping) is a ConfigError naming the --vary options.
// A varied layout keeps the world size: dp follows unless the sweep fixes it (the experiment
// loader's rule for overrides that resize the layout: workload/experiment.hpp). Throws
// std::runtime_error when a combination fails unexpectedly (the first such in enumeration order).
std::optional<std::vector<SweepRow>> sweep(const SweepOptions& options, const SweepRanks& ranks);

// The valid rows ranked: layouts that fit in HBM first, each group by throughput, ties in
// enumeration order. A row whose simulation is identical to a better-ranked one's (vpp under a
// schedule without virtual stages, say) is the same run: `listed` keeps it once, `ranked` keeps
// every one. Throws ConfigError naming `experiment` when no row is valid.
struct SweepRanking {
    std::vector<const SweepRow*> ranked;
    std::vector<const SweepRow*> listed;
    std::size_t repeats = 0;
    std::string source;  // display path of the experiment
};
SweepRanking rank_sweep(const std::vector<SweepRow>& rows, const std::string& experiment);

// The ranking of a sweep built as its rows arrive, for when only the table is wanted (`sweep`
// without --json or --html): the `top` best rows of distinct results, the counts, and the
// reasons of the invalid rows. Memory is the kept rows, one 32-byte entry per distinct result
// (to tell a repeat from a new result) and one entry per distinct reason; not a row per
// combination. Ranked as rank_sweep ranks: fitting layouts first, then throughput, ties in
// enumeration order, each result listed at its best row.
class SweepTally {
  public:
    explicit SweepTally(std::size_t top = 20) : top_(top) {}

    void add(const SweepRow& row);  // a row's summary text is not kept
    // Adds another process's tally of other combinations. Each process's own top rows include
    // every row of the merged top (a row ranks no worse in its own share than in all of them).
    void merge(const SweepTally& other);
    std::vector<std::uint8_t> encode() const;  // CBOR, doubles bit for bit
    static SweepTally decode(const std::vector<std::uint8_t>& bytes);

    std::size_t combinations() const { return combinations_; }
    std::size_t valid() const { return valid_; }
    std::size_t listed() const { return best_.size(); }  // distinct results
    std::size_t repeats() const { return valid_ - best_.size(); }
    std::vector<const SweepRow*> top_rows() const;  // best first, at most `top`
    struct Reason {
        std::string text;
        std::size_t count = 0;
        std::size_t first_index = 0;  // the first combination (enumeration order) that gave it
        std::vector<std::string> first_values;
    };
    std::vector<Reason> reasons() const;  // in order of first_index
    const std::string& source() const { return source_; }

  private:
    struct Key {
        bool fits = true;
        double tokens_per_s = 0;
        std::size_t index = 0;
    };
    struct Better {
        bool operator()(const Key& x, const Key& y) const;
    };
    void offer(const Key& key, std::uint64_t digest, const SweepRow& row);

    std::size_t top_;
    std::size_t combinations_ = 0;
    std::size_t valid_ = 0;
    std::string source_;
    std::unordered_map<std::uint64_t, Key> best_;  // summary digest -> its best row
    std::map<Key, SweepRow, Better> kept_;         // the best rows, at most top_
    std::map<std::string, Reason> reasons_;
};

// The sweep reduced to its tally on rank 0 of `ranks` (nullopt on other ranks): each process
// tallies its own combinations as it simulates them and rank 0 merges the tallies, so no process
// holds a row per combination. Throws as sweep() does, and ConfigError naming `experiment` when
// no combination is valid.
std::optional<SweepTally> sweep_tally(const SweepOptions& options, const SweepRanks& ranks,
                                      std::size_t top);

// The tally of rows a full sweep returned, to print them.
SweepTally tally_rows(const std::vector<SweepRow>& rows, std::size_t top);

// The JSON `sweep --json` writes: every ranked row (repeats included), then the invalid ones.
// A row whose summary was not kept (SweepOptions::keep_summaries) gives its figures (the summary's
// fields with a column, SweepResult::figures) as its summary.
nlohmann::ordered_json sweep_json(const std::vector<SweepAxis>& axes,
                                  const std::vector<SweepRow>& rows, const SweepRanking& ranking);

}  // namespace cs::api
