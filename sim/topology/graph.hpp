// The Boost graph behind a Cluster (Cluster::graph()): one vertex per device, one edge per
// directed link, each carrying its index into Cluster::devices() or Cluster::links(). Included
// only where the graph is walked, so that Boost.Graph's headers stay out of the rest of the build.
#pragma once

#include <boost/graph/adjacency_list.hpp>

#include "topology/cluster.hpp"

namespace cs::topology {

struct VertexProps {
    DeviceIndex device = 0;
};
struct EdgeProps {
    LinkId link = 0;
};
// Edges in a vector (EdgeList vecS) rather than Boost's default std::list: the graph is never
// edited after build(), and a list costs one allocation per directed link (millions at 131,072
// GPUs). Out- and in-edge order is the same either way.
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, VertexProps,
                                    EdgeProps, boost::no_property, boost::vecS>;

struct ClusterGraph {
    Graph g;
};

}  // namespace cs::topology
