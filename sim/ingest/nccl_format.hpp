// nccl-tests' conventions, shared by whatever reads its output (nccl_tests.hpp), sweeps sizes as it
// does (`clustersim collective`, `calibrate --nccl-tests`) or writes its tables: its size
// arguments, element types, size and count columns, reduction column and binary names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/units.hpp"
#include "network/collectives.hpp"

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

}  // namespace cs::api
