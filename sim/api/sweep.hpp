// Every combination of some varied experiment keys, simulated and ranked by throughput.
// Combinations that are not valid layouts (heads % tp, layers that do not split, a schedule that
// needs more microbatches, ...), or whose simulation fails, are kept with the reason; they never
// stop the sweep.
//
// Under `mpirun -n N` (SweepRanks) the combinations are shared among the N processes; rank 0
// gathers the rows and alone gets them back, exactly as one process would.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "api/inputs.hpp"
#include "api/shard.hpp"

namespace cs::api {

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
    double tokens_per_s = 0;
    double iteration_time_s = 0;
    double mfu = 0;
    double bubble_fraction = 0;
    double exposed_comm_fraction = 0;
    int dp = 1;
    std::int64_t memory_bytes = 0;  // worst GPU
    bool fits = true;               // worst GPU's memory within its HBM
    // report::to_json without wall_time_s, compact. Kept as text because a summary lists every
    // link and a JSON tree of it is several times larger; kept only with
    // SweepOptions::keep_summaries (a summary is up to about 0.65 MB).
    std::string summary;
    // FNV-1a of that text: equal digests are the same run (the ranking lists it once).
    std::uint64_t summary_digest = 0;
    double wall_time_s = 0;
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
    // Keep each valid row's summary text (for `sweep --json`); without it a row costs a few
    // hundred bytes, so memory does not grow with the size of the topology.
    bool keep_summaries = true;
};

// The most combinations a sweep may have. Each is one run, so even this many would take days.
inline constexpr std::uint64_t kMaxSweepCombinations = 1'000'000;

// Every combination's row in enumeration order, on rank 0 of `ranks`; nullopt on other ranks.
// More than kMaxSweepCombinations combinations (the product of the axes' value counts, computed
// without wrapping) is a ConfigError naming the --vary options.
// A varied layout keeps the world size: dp follows unless the sweep fixes it. Throws
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

// The JSON `sweep --json` writes: every ranked row (repeats included), then the invalid ones.
nlohmann::ordered_json sweep_json(const std::vector<SweepAxis>& axes,
                                  const std::vector<SweepRow>& rows, const SweepRanking& ranking);

// The report `clustersim sweep` prints: counts, the `top` best listed rows, the reasons of the
// invalid rows (each reason once, with how often).
void print_sweep(std::ostream& out, const std::vector<SweepAxis>& axes,
                 const std::vector<SweepRow>& rows, const SweepRanking& ranking, std::size_t top);

}  // namespace cs::api
