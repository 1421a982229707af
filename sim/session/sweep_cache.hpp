// What a sweep keeps across its runs (docs/architecture.md, "One seam for speed"), owned by the
// sweep and handed to each run explicitly (api::run's `cache`), as LLVM hands its analysis
// managers to the passes that use them: nothing below the session keeps anything for a later run
// on its own. None of it changes a result; `--no-fast-paths` runs a sweep without one.
//
//   documents, clusters  each file parsed once, each topology built once per distinct
//                        `topology.` settings (a combination applies its overrides to a copy)
//   replay               the replay's per-worker containers and, per rank placement, its GPUs,
//                        DP communicators and replica fold (replay::ReplayScratch)
//   per cluster          what the networks on it keep for each other (network::KeptState: scaled
//                        capacities, kept plans, communicators, send routes), and the link figures
//                        a table-only sweep digests instead of a link list: one link sketch
//                        (outside `flow`) or one link accounting reused over the runs, with a
//                        hash of each link's record start
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "config/document.hpp"
#include "network/accelerator.hpp"
#include "replay/replay.hpp"
#include "report/summary.hpp"
#include "workload/experiment.hpp"

namespace cs::api {

class SweepCache {
  public:
    config::DocumentCache documents;
    workload::ClusterCache clusters;
    replay::ReplayScratch replay;

    // What is kept per cluster, each part made on first use.
    struct Cluster {
        std::shared_ptr<const topology::Cluster> cluster;  // keeps it alive
        network::KeptState network;
        std::optional<report::LinkSketch> sketch;
        std::optional<report::LinkAccounting> accounting;
        // Per link its digest record's start, 0 until computed (with the accounting).
        std::vector<std::uint64_t> record_start;
        explicit Cluster(std::shared_ptr<const topology::Cluster> c)
            : cluster(std::move(c)), network(*cluster) {}
        report::LinkSketch& sketched();
        report::LinkAccounting& accounted();
    };
    // The entry of `cluster`, made if there is none; the kMaxClusters most recently used are
    // kept (at 16,384 GPUs an entry's link figures take about 60 bytes per directed link, 80 MB).
    static constexpr std::size_t kMaxClusters = 2;
    Cluster& of(const std::shared_ptr<const topology::Cluster>& cluster);

    // How the next run reports its links: in the summary's own list (Listed; the run still fills
    // the entry's accounting instead of one of its own), or only into the entry's sketch
    // (Sketched: outside `flow`) or accounting (Accounted), which the sweep digests (the summary
    // lists no links). A run whose cluster is not its experiment's (link faults from the start)
    // lists them. None: no link is accounted at all (`plan`, whose figures read no link; the
    // summary lists none).
    enum class Links { Listed, Sketched, Accounted, None };
    Links links = Links::Listed;

  private:
    std::vector<std::unique_ptr<Cluster>> entries_;  // the most recently used last
};

}  // namespace cs::api
