// The calibration file: compute constants fitted on a user's own measurements (clustersim
// calibrate, fit/calibrate.hpp), which an experiment references with `compute: {calibration:
// FILE}`. Versioned YAML (docs/calibrate.md gives the schema):
//
//   clustersim_calibration: 1
//   gpu_model: H200-SXM
//   sources: [gpt-h3072-profile.json.gz]
//   compute:
//     gemm: {peak_fraction: 0.83, half_dim: 600, exponent: 2.5}
//     hbm_fractions: {elementwise: 0.85, norm: 0.45, ...}
//     attention: {forward: 1.02, backward: 0.97}   # multipliers on the catalogue's curve
//     grouped_gemm: {scale: 0.95}                  # multiplier on the grouped GEMM's rate
//     residual: 0.012                              # unmapped kernel time / mapped
//     launch_overhead: 1500ns
//     host: {launch: 25000ns}
//   network:                      # version 2: fitted on nccl-tests output
//     all_reduce: {nvlink: {efficiency: 0.669, latency: 0ns, protocol_latency: 1}}
//
// Every key under `compute` is optional: what a fit left out keeps the catalogue's value. Keys an
// experiment writes itself in `compute:` win over the file's. `network` entries (per operation and
// link kind, NetworkConfig::op_efficiency and op_latency) replace the measured defaults when an
// experiment says `network: {calibration: FILE}`.
#pragma once

#include <algorithm>
#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "config/document.hpp"
#include "network/collectives.hpp"
#include "network/network.hpp"
#include "topology/cluster.hpp"
#include "workload/experiment.hpp"

namespace cs::workload {

// The schema version this build writes; it reads this one and version 1 (no `network`).
inline constexpr int kCalibrationVersion = 2;

// One operation on one link kind: the per-flow efficiency cap and the fixed cost per collective.
struct NetworkConstant {
    network::CollectiveKind op = network::CollectiveKind::AllReduce;
    topology::LinkKind link = topology::LinkKind::NvLink;
    double efficiency = 1;  // (0, 1]
    Time latency;
    // NetworkConfig::op_protocol_latency: the factor on LL's and LL128's latencies (optional
    // key `protocol_latency`, 1 when absent).
    double protocol_latency = 1;
};

struct CalibrationFile {
    std::string gpu_model;             // the catalogue or topology name the fit assumed
    std::vector<std::string> sources;  // the measurement files, as named on the command line
    std::optional<topology::GemmCurve> gemm;
    std::array<std::optional<double>, kMemKindCount> hbm_fractions;  // indexed by MemKind
    std::optional<double> attention_forward, attention_backward;     // efficiency multipliers
    std::optional<double> grouped_gemm;                              // rate multiplier
    std::optional<double> residual;        // unmapped kernel time over the mapped compute time
    std::optional<Time> launch_overhead;   // GPU-side gap between back-to-back kernels
    std::optional<Time> host_launch;       // host time per kernel issued (compute.host.launch)
    std::vector<NetworkConstant> network;  // in operation, then link kind order
    bool has_compute() const {
        return gemm || launch_overhead || host_launch || attention_forward || attention_backward ||
               grouped_gemm || residual ||
               std::any_of(hbm_fractions.begin(), hbm_fractions.end(),
                           [](const auto& f) { return f.has_value(); });
    }
};

// Reads a calibration document strictly. Throws ConfigError located at file:line:column for an
// unknown key, a bad value or a missing or unsupported `clustersim_calibration` version.
CalibrationFile parse_calibration(const config::Document& doc);
CalibrationFile load_calibration(const std::filesystem::path& path);

// The file's text: the same calibration always gives the same bytes. `header` lines are written
// as comments at the top (the fit summary).
std::string calibration_yaml(const CalibrationFile& cal, const std::vector<std::string>& header);

// Sets the file's network constants on `config` (on top of whatever it holds).
void apply_network_calibration(const CalibrationFile& cal, network::NetworkConfig& config);

// Applies the file to the roofline constants and the host (before the experiment's own keys).
void apply_calibration(const CalibrationFile& cal, RooflineCompute& roofline, HostModel& host);

}  // namespace cs::workload
