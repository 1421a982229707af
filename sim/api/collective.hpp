// One collective per size on an otherwise idle cluster, in nccl-tests' terms (size, count, time,
// algbw, busbw): what `clustersim collective` prints, so that it can be held against real
// nccl-tests output.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/units.hpp"
#include "network/collectives.hpp"
#include "network/network.hpp"
#include "topology/topology_spec.hpp"

namespace cs::api {

// A size as nccl-tests' -b / -e take it ("8", "64K", "1.5M", "8G": K, M and G are 2^10, 2^20 and
// 2^30 bytes, upper or lower case, no suffix means bytes, a fraction is truncated to whole bytes)
// or with clustersim's byte units ("1KiB", "80GB" = 80e9). nullopt if neither.
std::optional<Bytes> parse_nccl_size(const std::string& text);

// "SIZE" or "FIRST:LAST" (sizes as parse_nccl_size reads them), multiplied by `factor` from the
// first to the last. Throws ConfigError naming `--sizes` / `--step-factor`.
std::vector<Bytes> parse_size_range(const std::string& text, double factor);

// nccl-tests' sweep: from `first` to `last` inclusive, each size `factor` times the previous when
// factor > 1, else `increment` bytes more (its -b, -e, -f, -i). `option` names the flags in
// messages. Throws ConfigError for an empty or endless sweep (more than 10,000 sizes).
std::vector<Bytes> nccl_size_sweep(Bytes first, Bytes last, double factor, std::int64_t increment,
                                   const std::string& option);

// nccl-tests' element types (-d): name and bytes per element.
struct NcclDataType {
    const char* name;
    int bytes;
};
// "float", "half", "bfloat16", "double", "int8", "uint8", "int32", "uint32", "int64", "uint64"
// (and nccl-tests' aliases "float32", "float16", "float64"); nullopt if unknown.
std::optional<NcclDataType> find_nccl_data_type(const std::string& name);
inline constexpr const char* kNcclDataTypes =
    "int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16";

// What nccl-tests makes of a requested size for an operation on n ranks (its per-operation
// buffer sizes): the operations whose buffers are split over the ranks (all_gather,
// reduce_scatter, all_to_all) round the per-rank element count down, so the size column is
// (count / n) x n elements. `size_column` is what nccl-tests prints in its size column and the
// size clustersim simulates (the all-gathered output, the reduce-scattered input, the all-to-all
// send buffer, the all_reduce / broadcast / sendrecv buffer); `count_column` its count column
// (elements per rank for the split operations, all elements otherwise); algbw = size_column / time.
struct NcclCounts {
    std::int64_t size_column = 0;
    std::int64_t count_column = 0;
};
NcclCounts nccl_counts(network::CollectiveKind kind, std::int64_t requested_bytes, int ranks,
                       int type_bytes);
// nccl-tests' redop column: "sum" for the reductions and sendrecv, "none" otherwise.
const char* nccl_redop(network::CollectiveKind kind);
// nccl-tests' binary for the operation: "all_reduce_perf", "alltoall_perf", ...
const char* nccl_binary(network::CollectiveKind kind);

struct CollectiveRequest {
    std::filesystem::path topology;
    std::vector<std::string> sets;  // overrides of the topology document
    network::CollectiveKind kind = network::CollectiveKind::AllReduce;
    std::vector<int> ranks;    // empty: every GPU
    std::string ranks_text;    // as the user wrote them, for messages
    std::vector<Bytes> sizes;  // as requested; each row simulates nccl_counts' size column
    NcclDataType data_type{"float", 4};
    network::Algorithm algorithm = network::Algorithm::Auto;
    // The NCCL protocol to run (`--protocol`), or Auto: as NCCL's tuning picks by size.
    network::Protocol protocol = network::Protocol::Auto;
    network::Fidelity fidelity = network::Fidelity::Flow;
    bool nominal = false;  // nominal link capacities, no step overheads, instead of calibrated
    // A calibration file's network constants on top of the measured defaults (clustersim
    // calibrate --nccl-tests); empty: none. Excludes `nominal`.
    std::filesystem::path calibration;
    Time host_overhead;  // added to every row (a launch from Python), not part of the network
    std::int64_t max_memory = topology::kDefaultMaxMemory;  // for building the topology
};

struct CollectiveRow {
    Bytes size;              // nccl-tests' size column (what was simulated)
    std::int64_t count = 0;  // nccl-tests' count column
    Time time;
    double algbw_GBps = 0, busbw_GBps = 0;
    network::Algorithm algorithm = network::Algorithm::Auto;  // the one used
    network::Protocol protocol = network::Protocol::Simple;    // the one used
};

struct CollectiveReport {
    std::string topology;  // display path
    int ranks = 0;
    std::vector<CollectiveRow> rows;     // one per size with at least one element per rank
    std::vector<Bytes> skipped;          // requested sizes that round to no element per rank
    std::vector<std::string> gpu_names;  // the ranks' GPU models, for nccl-tests' device lines
};

// Everything that can be wrong (ranks, algorithm for the operation) is checked before the first
// row is simulated. Throws ConfigError for bad input.
CollectiveReport run_collective(const CollectiveRequest& request);

// The nccl-tests-like table, with a header naming the operation, ranks and network.
void print_collective(std::ostream& out, const CollectiveRequest& request,
                      const CollectiveReport& report);
// What nccl-tests prints (its current layout: version and "Collective test starting" lines, the
// nThread header, one device line per rank, the out-of-place and in-place column groups with
// size, count, type, redop, root, time, algbw, busbw, #wrong, and the footer with "# Out of bounds
// values" and "# Avg bus bandwidth"), so that scripts that parse nccl-tests read it unchanged.
// Both column groups hold the simulated time (the model has no in-place difference); #wrong is 0
// (N/A in place for all_to_all and sendrecv, as nccl-tests prints). `sweep` is the header's
// "step:" text, e.g. "2(factor)" or "1048576(bytes)".
void print_collective_nccl_tests(std::ostream& out, const CollectiveRequest& request,
                                 const CollectiveReport& report, const std::string& sweep);
// A JSON list of rows (`bytes`, `time_s`, `algbw_GBps`, `busbw_GBps`, `algorithm`, `protocol`).
nlohmann::json collective_json(const CollectiveReport& report);

}  // namespace cs::api
