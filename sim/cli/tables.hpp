// The command line's renderings of the api's results: the text tables each subcommand prints and
// the validation report's Markdown. The libraries below return data (and its JSON); only the
// front ends write text. A library of its own (clustersim::cli_tables) so that tests check the
// tables without running the executable.
#pragma once

#include <cstddef>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "fit/calibrate.hpp"
#include "fit/calibrate_network.hpp"
#include "fit/diff.hpp"
#include "fit/validate.hpp"
#include "ingest/topology.hpp"
#include "report/summary.hpp"
#include "session/collective.hpp"
#include "session/compare.hpp"
#include "session/jobs.hpp"
#include "session/plan.hpp"
#include "session/sweep.hpp"

namespace cs::cli {

// `clustersim topology`: the GPU count on a line of its own, devices and links by kind, per-GPU
// bandwidth inside and between nodes, bisection bandwidth, diameter.
void print_topology(std::ostream& out, const std::string& display_path,
                    const topology::TopologySummary& s);

// `clustersim compare`: one row per schedule, then peak activation memory per stage.
void print_compare_table(std::ostream& out, const std::vector<report::Summary>& results);

// `clustersim run JOBS.yaml`: the jobs alone and shared, then the contested links (the first
// `max_links`).
void print_jobs(std::ostream& out, const api::JobsSpec& spec, const api::JobsResult& r,
                std::size_t max_links = 8);

// `clustersim sweep`: counts, the `top` best listed rows, the reasons of the invalid rows (each
// reason once, with how often).
void print_sweep(std::ostream& out, const std::vector<api::SweepAxis>& axes,
                 const api::SweepTally& tally, std::size_t top);

// `clustersim plan`: the search's counts, the top k with where their time goes, the best
// layout's Megatron-LM flags, why each runner-up lost, the invalid layouts' commonest reasons.
void print_plan(std::ostream& out, const api::PlanResult& r);

// `clustersim collective`: the nccl-tests-like table, with a header naming the operation, ranks
// and network.
void print_collective(std::ostream& out, const api::CollectiveRequest& request,
                      const api::CollectiveReport& report);
// `clustersim collective --nccl-tests-format`: what nccl-tests prints (its current layout:
// version and "Collective test starting" lines, the nThread header, one device line per rank,
// the out-of-place and in-place column groups with size, count, type, redop, root, time, algbw,
// busbw, #wrong, and the footer with "# Out of bounds values" and "# Avg bus bandwidth"), so that
// scripts that parse nccl-tests read it unchanged. Both column groups hold the simulated time
// (the model has no in-place difference); #wrong is 0 (N/A in place for all_to_all and sendrecv,
// as nccl-tests prints). `sweep` is the header's "step:" text, e.g. "2(factor)" or
// "1048576(bytes)".
void print_collective_nccl_tests(std::ostream& out, const api::CollectiveRequest& request,
                                 const api::CollectiveReport& report, const std::string& sweep);

// `clustersim calibrate`: the compute fit per kernel kind, GEMM shapes, launch gaps, what was
// skipped or left unfitted; then the network fit when there is one.
void print_calibration(std::ostream& out, const api::CalibrationResult& r);
// The network fit per operation and link kind, and each fitted point.
void print_network_fit(std::ostream& out, const api::NetworkFitResult& r);

// `clustersim diff`: simulated against measured per kernel kind and per pass, the largest
// departures, and per layer pass.
void print_diff(std::ostream& out, const api::DiffResult& r);

// `clustersim validate`: the two lines per case it prints as it goes, and the per-family table
// (cases, pass, fail, gaps, mean and worst error).
void print_validation_case(std::ostream& out, const api::ValidationCase& c,
                           const api::ValidationFamily& f);
void print_validation_summary(std::ostream& out, const api::ValidationReport& report);
// `validate --write-doc`: regenerates a Markdown report (e.g. docs/validation.md), keeping the
// text above its generated-section marker; written atomically.
void write_validation_doc(const std::filesystem::path& file, const api::ValidationReport& report);

}  // namespace cs::cli
