// The calibration file: compute constants fitted on a user's own measurements (clustersim
// calibrate, api/calibrate.hpp), which an experiment references with `compute: {calibration:
// FILE}`. Versioned YAML (docs/calibrate.md gives the schema):
//
//   clustersim_calibration: 1
//   gpu_model: H200-SXM
//   sources: [gpt-h3072-profile.json.gz]
//   compute:
//     gemm: {peak_fraction: 0.83, half_dim: 600, exponent: 2.5}
//     hbm_fractions: {elementwise: 0.85, norm: 0.45, ...}
//     launch_overhead: 1500ns
//     host: {launch: 25000ns}
//
// Every key under `compute` is optional: what a fit left out keeps the catalogue's value. Keys an
// experiment writes itself in `compute:` win over the file's.
#pragma once

#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "config/document.hpp"
#include "topology/cluster.hpp"
#include "workload/experiment.hpp"

namespace cs::workload {

// The schema version this build reads and writes.
inline constexpr int kCalibrationVersion = 1;

struct CalibrationFile {
    std::string gpu_model;             // the catalogue or topology name the fit assumed
    std::vector<std::string> sources;  // the measurement files, as named on the command line
    std::optional<topology::GemmCurve> gemm;
    std::array<std::optional<double>, kMemKindCount> hbm_fractions;  // indexed by MemKind
    std::optional<Time> launch_overhead;  // GPU-side gap between back-to-back kernels
    std::optional<Time> host_launch;      // host time per kernel issued (compute.host.launch)
};

// Reads a calibration document strictly. Throws ConfigError located at file:line:column for an
// unknown key, a bad value or a missing or unsupported `clustersim_calibration` version.
CalibrationFile parse_calibration(const config::Document& doc);
CalibrationFile load_calibration(const std::filesystem::path& path);

// The file's text: the same calibration always gives the same bytes. `header` lines are written
// as comments at the top (the fit summary).
std::string calibration_yaml(const CalibrationFile& cal, const std::vector<std::string>& header);

// Applies the file to the roofline constants and the host (before the experiment's own keys).
void apply_calibration(const CalibrationFile& cal, RooflineCompute& roofline, HostModel& host);

}  // namespace cs::workload
