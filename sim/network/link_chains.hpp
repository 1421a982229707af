// Link chains (Accelerator::merge_link_chains): links that every route crossing one of them
// crosses together, found on the cluster's graph, each chain carried as one solver link.
#pragma once

#include <cstddef>
#include <vector>

#include "topology/cluster.hpp"

namespace cs::network::detail {

// Per cluster link, the solver link it is carried on (itself, or its chain's link of least
// capacity, ties to the lowest id) and its chain as a circular list in increasing order (itself
// when alone); both empty when the cluster has no chain. `longest`: the most links of a chain.
struct LinkChains {
    std::vector<topology::LinkId> chain_of, twin;
    std::size_t longest = 1;
};

// The chains of `cluster`: pairs of links through a device other than a GPU with exactly two
// in- and two out-links, joined where the out-link does not turn back to the in-link's end.
// `capacity`: per link, its current capacity.
LinkChains find_link_chains(const topology::Cluster& cluster, const double* capacity);

}  // namespace cs::network::detail
