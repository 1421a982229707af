// clustersim calibrate --nccl-tests: fits the network model's per-operation, per-link-kind
// constants (NetworkConfig::op_efficiency and op_latency) on nccl-tests output so that the
// simulated collective matches the measured one. docs/calibrate.md describes the fit.
//
// Per operation, the samples are the rows of every file of that operation (out-of-place time;
// rows with wrong elements and rows outside the size filter are left out), each simulated on GPUs
// 0..n-1 of the topology (n from the file's device lines) with the algorithm clustersim picks.
// The link kind fitted is the one whose efficiency changes the simulated time of the largest
// sample most (the bottleneck); the others the collective crosses are reported unfitted. The fit
// minimises, over the efficiency e in (0, 1] (a grid of 0.01, refined by golden section) and for
// each e over the fixed cost L >= 0, one of two measures of the relative residuals r_i =
// (T_i(e) + L) / m_i - 1 (T_i(e) the simulated time without L, m_i the measured one):
//  - Worst (the default): the largest |r_i|, the measure a bar "within x% at every size" asks
//    about and the one docs/network.md's built-in constants were fitted with. For each e the best
//    L is where the largest residual above equals the largest below in size (both move linearly
//    in L, the first up and the second down): bracketed by bisection, then solved exactly from
//    the two rows that meet there. A single outlying row pulls this fit more than the other.
//  - Rms: the sum of the r_i squared, L in closed form: L = sum((1 - T_i(e)/m_i)/m_i) /
//    sum(1/m_i^2).
// Everything else (step overhead, link efficiencies, the other operations) stays at the measured
// defaults (NetworkConfig::calibrated), as `network: {calibration: FILE}` applies it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/units.hpp"
#include "ingest/nccl_tests.hpp"
#include "topology/cluster.hpp"
#include "workload/calibration.hpp"

namespace cs::api {

// What the fit minimises (see above): `calibrate --nccl-fit worst | rms`.
enum class NetworkFitObjective { Worst, Rms };
// "worst" or "rms" (--nccl-fit); ConfigError at --nccl-fit for anything else.
NetworkFitObjective parse_network_fit_objective(const std::string& name);
const char* network_fit_objective_name(NetworkFitObjective objective);

struct NetworkFitOptions {
    std::vector<std::string> files;  // "FILE" or "OP=FILE"
    std::string topology;
    std::vector<std::string> sets;  // overrides of the topology
    std::string sizes;              // "FIRST:LAST": fit only rows in this range ("" = all)
    NetworkFitObjective objective = NetworkFitObjective::Worst;
};

struct NetworkOpFit {
    network::CollectiveKind op = network::CollectiveKind::AllReduce;
    std::vector<std::string> files;
    std::vector<int> rank_counts;
    std::string algorithm;                   // at the largest sample
    std::string link;                        // the fitted link kind; "" when unfitted
    double efficiency = 0;                   // fitted
    Time latency;                            // fitted
    double protocol_latency = 1;             // fitted (NetworkConfig::op_protocol_latency)
    std::int64_t samples = 0, left_out = 0;  // rows fitted; rows with wrong elements or off range
    double median_residual = 0, worst_residual = 0, rms_residual = 0;
    double measured_us = 0, fitted_us = 0;  // sums over the samples
    struct Point {
        std::string file;
        int line = 0, ranks = 0;
        std::int64_t size = 0;
        double measured_us = 0, fitted_us = 0;
        network::Protocol protocol = network::Protocol::Simple;  // the fitted model runs it
    };
    std::vector<Point> points;
    std::string note;  // why unfitted, or what the fit assumed
};

struct NetworkFitResult {
    std::string topology;  // display path
    NetworkFitObjective objective = NetworkFitObjective::Worst;
    std::vector<NetworkOpFit> ops;  // in operation order
    std::vector<workload::NetworkConstant> constants;
    struct Unfitted {
        std::string what, why;
    };
    std::vector<Unfitted> unfitted;
    std::vector<std::string> warnings;
    std::vector<std::string> sources;  // file names
};

// The fit on files already read. Throws ConfigError (located at the file) for a file with more
// ranks than the topology has GPUs.
NetworkFitResult fit_network(const std::vector<NcclTestsFile>& files,
                             const topology::Cluster& cluster, const std::string& topology_name,
                             std::optional<std::pair<std::int64_t, std::int64_t>> size_range,
                             NetworkFitObjective objective = NetworkFitObjective::Worst);
// Reads the files and the topology, then fits.
NetworkFitResult calibrate_network(const NetworkFitOptions& options);

nlohmann::json network_fit_json(const NetworkFitResult& r);

}  // namespace cs::api
