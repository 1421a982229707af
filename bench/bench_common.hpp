// Helpers shared by the benchmark binaries.
#pragma once

#include <sys/resource.h>

#include <string>

#include "ingest/inputs.hpp"

namespace cs::bench {

// A bundled file (e.g. "topologies/roce-h100-clos.yaml"), found the way `clustersim run` finds
// workloads/default.yaml.
inline std::string bundled(const std::string& relative) {
    return (api::data_root() / relative).string();
}

// Peak resident set size of this process so far, in MiB (ru_maxrss is in KiB on Linux).
inline double peak_rss_mib() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

}  // namespace cs::bench
