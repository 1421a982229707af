// A shared fabric: several training jobs on one topology, simulated together so that their
// traffic contends (`jobs:` files, docs/what-if.md "Several jobs on one fabric").
//
//   load_jobs: the topology, each job's experiment (a path or inline, on the jobs file's
//              topology) and its placement (contiguous, rail, scattered or explicit GPUs);
//   run_jobs:  every job alone on its placement, then all of them in one replay on one network
//              (one replay::Replay per job on a shared Simulation and Network); per-job
//              summaries with the slowdown, and the links that carried traffic of several jobs.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/name_table.hpp"
#include "report/summary.hpp"
#include "workload/experiment.hpp"

namespace cs::api {

enum class Placement : std::uint8_t { Contiguous, Rail, Scattered, Explicit };
// Names of the placements: the first three are those a job asks for by name (`placement:`); a
// job that names its GPUs or nodes is "explicit" in results.
inline constexpr std::array<Named<Placement>, 4> kPlacementNames{{
    {"contiguous", Placement::Contiguous},
    {"rail", Placement::Rail},
    {"scattered", Placement::Scattered},
    {"explicit", Placement::Explicit},
}};
const char* placement_name(Placement p);  // its row of kPlacementNames

// The `count` GPUs a job takes under `kind` from the GPUs not yet `taken` (taken[g] != 0), in
// rank order (rank r runs on the r-th), or an empty vector when fewer than `count` are free:
//   contiguous  the free GPUs in number order, first `count`;
//   rail        by local index inside the node first, then by node: local GPU 0 of every node
//               in node order, then local GPU 1 of every node, ... (one GPU per node on the same
//               rail before the next rail), free GPUs only;
//   scattered   evenly over all F free GPUs in number order: rank r takes the
//               floor(r x F / count)-th free GPU.
std::vector<int> place_gpus(const topology::Cluster& cluster, Placement kind, int count,
                            const std::vector<std::uint8_t>& taken);

struct JobSpec {
    std::string name;
    SourceLocation where;  // the job's entry in the jobs file
    Placement placement = Placement::Contiguous;
    std::vector<int> gpus;  // rank r on gpus[r]
    workload::ExperimentSpec experiment;
};

struct JobsSpec {
    std::string source;           // display path of the jobs file
    std::string topology_source;  // display path of its topology
    std::shared_ptr<const topology::Cluster> cluster;
    std::vector<JobSpec> jobs;
    // `iterations:` each job runs back to back in the shared run, until every job has completed
    // this many; a job's shared figures are those of its iteration `iterations` (1: all jobs
    // start together and each runs one iteration).
    int iterations = 1;
};

inline constexpr int kMaxJobIterations = 100;

// Whether the YAML file has a top-level `jobs:` key (then `clustersim run` takes it as a jobs
// file). False for files that cannot be read (the experiment loader then says why), and for a
// path that is no regular file: a FIFO or process substitution can be read only once (peeking at
// it here left the loader an empty stream, or waited twice for a writer that sends nothing), so
// `run` reads it whole first (api::read_streamed_input) and asks is_jobs_text of its text.
bool is_jobs_file(const std::filesystem::path& path);
// The same for a text already read (api::read_streamed_input): false for text that is no YAML.
bool is_jobs_text(const workload::ExperimentText& text);

// Throws ConfigError (file:line:column) for unknown keys, an empty or missing job list,
// duplicate names, a job's experiment naming another topology, placements that do not fit or
// overlap, and the experiment keys a shared-fabric run does not take (variability, faults,
// goodput).
JobsSpec load_jobs(const std::filesystem::path& path,
                   std::int64_t max_memory = topology::kDefaultMaxMemory);
JobsSpec load_jobs(const workload::ExperimentText& text,
                   std::int64_t max_memory = topology::kDefaultMaxMemory);

struct JobResult {
    std::string name;
    Placement placement = Placement::Contiguous;
    std::vector<int> gpus;
    report::Summary shared;  // in the run with all jobs
    report::Summary alone;   // the same job alone on the same GPUs
    double slowdown = 1;     // shared.iteration_time_s / alone.iteration_time_s
    // Every iteration the job completed in the shared run, in order (the first `iterations` and
    // any it finished while others were still catching up).
    std::vector<double> shared_iteration_times_s;
};

// A link that carried traffic of more than one job in the shared run.
struct ContestedLink {
    std::string name;
    std::vector<double> bytes;  // per job, in job order
    double busy_s = 0;          // time with at least one flow (`flow` fidelity)
    double shared_s = 0;        // time with two or more flows
    double busy_share = 0;      // busy_s over the shared run's length (the slowest job's end)
};

struct JobsResult {
    std::vector<JobResult> jobs;
    std::vector<ContestedLink> links;  // by total bytes, most first; ties by name
    double makespan_s = 0;  // the shared run: the last job's end of its iteration `iterations`
    int iterations = 1;
    std::string fold_refused;  // why member folding is off (always, for a shared run)
    std::vector<std::string> warnings;
};

struct JobsOptions {
    // A timeline of the shared run (.json or .pftrace): one process per job ("job NAME") holding
    // its nodes and GPUs as a single run's trace does; no link counters.
    std::optional<std::filesystem::path> trace;
    OutputSet* outputs = nullptr;  // stages the trace with the command's other outputs
    // The memory the run may take (--max-memory): the sum of the jobs' estimate_run_bytes (the
    // shared run holds them all) above it is refused before anything is built.
    std::int64_t max_memory = topology::kDefaultMaxMemory;
    // RunOptions::fast_paths for the jobs' runs (--no-fast-paths: none).
    bool fast_paths = true;
    // Progress (the Python package's callback and its Ctrl-C check): on_progress(done, total)
    // after every pass any job simulates, `done` counting the job iterations finished of the
    // `total` the result needs (each job's first `iterations` in the shared run, then each job's
    // one alone). What it throws stops run_jobs and propagates; nothing is written.
    std::function<void(std::size_t done, std::size_t total)> on_progress;
};

JobsResult run_jobs(const JobsSpec& spec, const JobsOptions& options = {});

nlohmann::ordered_json to_json(const JobsResult& r);

}  // namespace cs::api
