// Section parsers of an experiment that live in files of their own; load_experiment
// (experiment.cpp) is their one caller.
#pragma once

#include "config/document.hpp"
#include "topology/cluster.hpp"
#include "workload/experiment.hpp"

namespace cs::workload::detail {

// experiment_parse_faults.cpp: `variability`, `faults` and `goodput`, each read whole (finished).
VariabilitySpec parse_variability(const config::Reader& r, const topology::Cluster& cluster);
FaultsSpec parse_faults(const config::Reader& r, const topology::Cluster& cluster);
GoodputSpec parse_goodput(const config::Reader& r);

}  // namespace cs::workload::detail
