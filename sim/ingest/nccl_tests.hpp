// Reading nccl-tests' text output (all_reduce_perf, all_gather_perf, reduce_scatter_perf,
// alltoall_perf, sendrecv_perf, broadcast_perf): the layouts of nccl-tests 2.x, with or without the
// redop and root columns, the version and "Collective test starting" lines, MPI output prefixes
// ("[1,0]<stdout>:") and interleaved NCCL log lines. docs/calibrate.md lists what is read.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <vector>

#include "network/collectives.hpp"

namespace cs::api {

struct NcclTestsRow {
    int line = 0;  // 1-based line in the file
    std::int64_t size = 0, count = 0;
    std::string type, redop;
    int root = -1;
    // [0] out-of-place, [1] in-place. time in microseconds, bandwidths in GB/s as printed.
    double time_us[2] = {0, 0}, algbw[2] = {0, 0}, busbw[2] = {0, 0};
    std::string wrong[2];         // "0", "N/A", or a count of wrong elements
    bool wrong_elements() const;  // either group reported wrong elements
};

struct NcclTestsFile {
    std::string path;    // as the user named it
    std::string binary;  // "all_reduce_perf", ... ("" when the file does not say)
    network::CollectiveKind kind = network::CollectiveKind::AllReduce;
    int ranks = 0;                     // distinct ranks of the device lines
    std::vector<std::string> devices;  // per rank, the device name
    std::vector<NcclTestsRow> rows;
    std::optional<double> avg_busbw;  // the footer's, GB/s
    std::vector<std::string> warnings;
};

// The operation for an nccl-tests binary name or a clustersim operation name ("all_reduce_perf",
// "alltoall", "all_to_all", ...); nullopt if neither.
std::optional<network::CollectiveKind> nccl_tests_kind(const std::string& name);

// Parses one output. The operation comes from the "Collective test starting" line, else from
// `given` (the OP of --nccl-tests OP=FILE), else from a binary name in `path`; the rank count
// from the "# Using devices" lines, else from `given_ranks` (the RANKS of OP:RANKS=FILE, for a
// table pasted without its device lines). Throws ConfigError located at path:line:column for a row
// that does not read (wrong number of columns, a value that is not a number), no column header, no
// rows, no device lines and no `given_ranks` (or a different count), or an operation that cannot
// be told or contradicts `given`.
NcclTestsFile parse_nccl_tests(std::istream& in, const std::string& path,
                               std::optional<network::CollectiveKind> given = std::nullopt,
                               std::optional<int> given_ranks = std::nullopt);

// Reads "FILE", "OP=FILE" or "OP:RANKS=FILE" (OP as nccl_tests_kind reads it) from disk and
// parses it.
NcclTestsFile read_nccl_tests(const std::string& spec);

}  // namespace cs::api
