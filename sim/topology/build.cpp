// TopologySpec -> Cluster: explicit devices and links, generated nodes and fabrics, and the checks
// that need the whole picture (names, duplicates, port counts, GPU connectivity).
#include <algorithm>
#include <array>
#include <boost/graph/connected_components.hpp>
#include <boost/graph/filtered_graph.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <unordered_map>

#include "topology/graph.hpp"
#include "topology/topology_spec.hpp"
#include "topology/topology_yaml.hpp"

namespace cs::topology {

namespace {

std::string plural(long long n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string fmt_number(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

// A tier's up-link count and bandwidth, derived from what the document gives.
struct Uplinks {
    int up = 0;
    Bandwidth bandwidth;
};

Uplinks derive_uplinks(const TierSpec& t, const char* tier_name, int down, Bandwidth down_bw) {
    Uplinks u;
    const double down_capacity = down * down_bw.bytes_per_s;
    double o = t.oversubscription.value_or(1.0);
    if (t.up) {
        u.up = *t.up;
    } else {
        const double up = down / o;
        if (std::fabs(up - std::round(up)) > 1e-9 || std::round(up) < 1)
            throw ConfigError(t.where, std::string("fabric port counts do not add up: the ") +
                                           tier_name + "'s " + std::to_string(down) +
                                           " down ports / oversubscription " + fmt_number(o) +
                                           " = " + fmt_number(up) +
                                           " up ports, not a whole number; give `up` (and "
                                           "the up-link `bandwidth` is derived)");
        u.up = static_cast<int>(std::round(up));
    }
    if (t.bandwidth) {
        u.bandwidth = *t.bandwidth;
        const double up_capacity = u.up * u.bandwidth.bytes_per_s;
        if (t.oversubscription && std::fabs(down_capacity - o * up_capacity) > 1e-6 * down_capacity)
            throw ConfigError(
                t.where, std::string("fabric port counts do not add up: the ") + tier_name +
                             " has " + std::to_string(down) + " x " + format_bandwidth(down_bw) +
                             " down and " + std::to_string(u.up) + " x " +
                             format_bandwidth(u.bandwidth) + " up, oversubscription " +
                             fmt_number(down_capacity / up_capacity) + ", not " + fmt_number(o) +
                             "; drop one of up, bandwidth or "
                             "oversubscription");
    } else {
        u.bandwidth = Bandwidth{down_capacity / (u.up * o)};
    }
    if (t.radix && down + u.up > *t.radix)
        throw ConfigError(t.where, std::string("fabric port counts do not add up: the ") +
                                       tier_name + " uses " + std::to_string(down) + " down + " +
                                       std::to_string(u.up) +
                                       " up = " + std::to_string(down + u.up) +
                                       " ports, more than its radix " + std::to_string(*t.radix));
    return u;
}

class Builder {
  public:
    explicit Builder(const TopologySpec& spec) : spec_(spec) {}

    Cluster run() {
        add_models();
        add_explicit_devices();
        if (spec_.node) add_generated();
        add_explicit_links();
        b_.set_routing(spec_.routing);
        Cluster c = b_.build();
        check_connectivity(c);
        return c;
    }

  private:
    void add_models() {
        std::map<std::string, SourceLocation> seen;
        for (const auto& m : spec_.gpu_models) {
            auto [it, fresh] = seen.emplace(m.model.name, m.where);
            if (!fresh)
                throw ConfigError(m.where, "duplicate GPU model '" + m.model.name +
                                               "' (first defined at " + it->second.render() + ")");
            file_models_.emplace(m.model.name, m.model);
        }
    }

    int model_index(const std::string& name, const SourceLocation& where) {
        auto it = file_models_.find(name);
        if (it != file_models_.end()) return b_.add_gpu_model(it->second);
        if (const GpuModel* m = find_catalog_model(name)) return b_.add_gpu_model(*m);
        std::vector<std::string> names;
        for (const auto& m : spec_.gpu_models)
            names.push_back(m.model.name);
        for (const auto& n : catalog_names())
            names.push_back(n);
        throw ConfigError(where, "unknown GPU model '" + name +
                                     "'; known models: " + config::join_alternatives(names) +
                                     " (or define it under gpu_models)");
    }

    void add_explicit_devices() {
        for (const auto& d : spec_.devices) {
            Device dev;
            dev.id = d.id;
            dev.kind = d.kind;
            dev.node = d.node;
            dev.tier = d.kind == DeviceKind::Switch ? 1 : 0;
            // Nodes index arrays: a node number far beyond the devices listed would size them by
            // a number nobody meant (node: 99999999).
            if (d.node >= static_cast<std::int64_t>(spec_.devices.size()))
                throw ConfigError(d.where, "device '" + d.id + "' is on node " +
                                               std::to_string(d.node) + ", but " +
                                               std::to_string(spec_.devices.size()) +
                                               " devices are listed; number the nodes from 0, "
                                               "with node numbers below the number of devices");
            if (d.kind == DeviceKind::Gpu) dev.model = model_index(d.model, d.model_where);
            if (d.node >= first_generated_node_) first_generated_node_ = d.node + 1;
            add(std::move(dev), false, &d.where);
        }
    }

    void add_explicit_links() {
        for (const auto& l : spec_.links) {
            const DeviceIndex from = resolve(l.from, l.from_where);
            const DeviceIndex to = resolve(l.to, l.to_where);
            if (from == to) throw ConfigError(l.where, "a link joins '" + l.from + "' to itself");
            const std::int32_t a = node_of_[from], b = node_of_[to];
            if (merged_tiers() && (a < 0 || b < 0 || a != b))
                throw ConfigError(
                    l.where, "the link " + l.from + " - " + l.to +
                                 (a < 0 || b < 0 ? " reaches the fabric" : " joins two nodes") +
                                 " by hand, and routing: adaptive spreads flows over a "
                                 "generated fabric's tiers alone; use ecmp or d_mod_k for "
                                 "hand-written links between nodes or into the fabric");
            b_.add_link(from, to, l.kind, l.bandwidth, l.latency, l.count);
        }
    }

    DeviceIndex resolve(const std::string& id, const SourceLocation& where) {
        auto it = index_of_.find(id);
        if (it != index_of_.end()) return it->second;
        std::vector<std::string> names;
        for (const auto& d : spec_.devices)
            names.push_back(d.id);
        std::string listing;
        const std::size_t shown = std::min<std::size_t>(names.size(), 24);
        listing = config::join_alternatives(
            std::vector<std::string>(names.begin(), names.begin() + static_cast<long>(shown)));
        if (shown < names.size())
            listing += " (and " + std::to_string(names.size() - shown) + " more)";
        if (spec_.node)
            listing += (listing.empty() ? "" : "; ") +
                       std::string("generated ids like n0.gpu0, n0.nic0, leaf0");
        throw ConfigError(where, "unknown device '" + id + "'; devices: " + listing);
    }

    // Explicit devices carry their location; generated ones (where == nullptr) may not reuse an
    // explicit name, which is reported at the explicit device.
    DeviceIndex add(Device d, bool generated, const SourceLocation* where = nullptr) {
        auto [it, fresh] = index_of_.emplace(d.id, static_cast<DeviceIndex>(where_of_.size()));
        if (!fresh) {
            const SourceLocation* first = where_of_[it->second];
            if (generated)
                throw ConfigError(*first, "device id '" + d.id +
                                              "' is also the name of a generated device; "
                                              "generated names are n<node>.gpu<i>, "
                                              "n<node>.nic<i>, n<node>.nvswitch, leaf<i>, "
                                              "spine<i>, core<i>, spines, cores...");
            throw ConfigError(*where, "duplicate device id '" + d.id + "' (first defined at " +
                                          first->render() + ")");
        }
        where_of_.push_back(where);
        node_of_.push_back(d.node);
        return b_.add_device(std::move(d));
    }

    void add_generated() {
        const NodeSpec& n = *spec_.node;
        const int model = model_index(n.gpu_model, n.gpu_model_where);
        if (spec_.fabric && n.nics.count == 0)
            throw ConfigError(n.where,
                              "the nodes have no NICs to connect to the fabric; add "
                              "nics: {count: 8, kind: infiniband, bandwidth: 400Gbps}");
        nic_devices_.assign(static_cast<std::size_t>(spec_.nodes), {});
        shape_.first_node = first_generated_node_;
        shape_.nodes = spec_.nodes;
        shape_.gpus_per_node = n.gpus;
        shape_.nics_per_node = n.nics.count;
        shape_.nic_bandwidth = n.nics.bandwidth;
        shape_.intra_bandwidth = n.intra.bandwidth;
        if (n.gpus > 1 || n.intra.kind == IntraKind::Pcie) {
            shape_.intra = n.intra.kind;
            if (n.intra.kind == IntraKind::NvLinkMesh)
                shape_.intra_bandwidth = Bandwidth{n.intra.bandwidth.bytes_per_s * n.intra.count};
            if (n.intra.kind == IntraKind::Pcie)
                shape_.pcie_switches = std::min(n.intra.pcie_switches, n.gpus);
        }
        reserve_generated();
        for (int k = 0; k < spec_.nodes; ++k)
            add_node(k, model);
        if (spec_.fabric) add_fabric();
        b_.set_generated_shape(shape_);
    }

    // Sizes the device and link tables and the name index for the generated nodes and a fabric
    // of up to three tiers above their NICs (an upper bound for full bisection; a hint only), so
    // that a 131,072-GPU cluster is built without regrowing them.
    void reserve_generated() {
        const NodeSpec& n = *spec_.node;
        const auto nodes = static_cast<std::size_t>(spec_.nodes);
        const auto gpus = static_cast<std::size_t>(n.gpus);
        const auto nics = static_cast<std::size_t>(n.nics.count);
        std::size_t node_links = 0, served = 0;
        for (const auto& s : n.nics.serves)
            served += s.size();
        switch (n.intra.kind) {
            case IntraKind::NvSwitch:
                node_links = gpus;
                break;
            case IntraKind::NvLinkMesh:
                node_links = gpus * (gpus - 1) / 2;
                break;
            case IntraKind::Pcie:
                node_links = gpus + static_cast<std::size_t>(n.intra.pcie_switches);
                break;
        }
        const std::size_t node_devices =
            gpus + nics + 2 + static_cast<std::size_t>(n.intra.pcie_switches);
        const std::size_t fabric_links = spec_.fabric ? 3 * nics : 0;
        const std::size_t devices =
            spec_.devices.size() + nodes * (node_devices + (spec_.fabric ? nics : 0));
        const std::size_t links = spec_.links.size() + nodes * (node_links + served + fabric_links);
        b_.reserve(devices, 2 * links);
        index_of_.reserve(devices);
        where_of_.reserve(devices);
    }

    void add_node(int k, int model) {
        const NodeSpec& n = *spec_.node;
        const int node = first_generated_node_ + k;
        const std::string prefix = "n" + std::to_string(node) + ".";
        std::vector<DeviceIndex> gpus;
        for (int g = 0; g < n.gpus; ++g) {
            Device d;
            d.id = prefix + "gpu" + std::to_string(g);
            d.kind = DeviceKind::Gpu;
            d.node = node;
            d.model = model;
            gpus.push_back(add(std::move(d), true));
        }
        const IntraSpec& in = n.intra;
        std::vector<DeviceIndex> pcie_of_gpu;
        if (n.gpus > 1 || in.kind == IntraKind::Pcie) {
            switch (in.kind) {
                case IntraKind::NvSwitch: {
                    const DeviceIndex sw = add(
                        Device{prefix + "nvswitch", DeviceKind::NvSwitch, node, -1, -1, 0}, true);
                    for (DeviceIndex g : gpus)
                        b_.add_link(g, sw, LinkKind::NvSwitch, in.bandwidth, in.latency);
                    break;
                }
                case IntraKind::NvLinkMesh:
                    for (std::size_t i = 0; i < gpus.size(); ++i)
                        for (std::size_t j = i + 1; j < gpus.size(); ++j)
                            b_.add_link(gpus[i], gpus[j], LinkKind::NvLink, in.bandwidth,
                                        in.latency, in.count);
                    break;
                case IntraKind::Pcie: {
                    const int s = std::min(in.pcie_switches, n.gpus);
                    std::vector<DeviceIndex> switches;
                    for (int i = 0; i < s; ++i)
                        switches.push_back(add(Device{prefix + "pcie" + std::to_string(i),
                                                      DeviceKind::PcieSwitch, node, -1, -1, 0},
                                               true));
                    if (s > 1) {
                        const DeviceIndex root = add(
                            Device{prefix + "cpu", DeviceKind::PcieSwitch, node, -1, -1, 0}, true);
                        for (DeviceIndex sw : switches)
                            b_.add_link(sw, root, LinkKind::Pcie, in.bandwidth, in.latency);
                    }
                    for (int g = 0; g < n.gpus; ++g) {
                        const DeviceIndex sw = switches[static_cast<std::size_t>(
                            static_cast<long long>(g) * s / n.gpus)];
                        pcie_of_gpu.push_back(sw);
                        b_.add_link(gpus[static_cast<std::size_t>(g)], sw, LinkKind::Pcie,
                                    in.bandwidth, in.latency);
                    }
                    break;
                }
            }
        }
        const NicSpec& nics = n.nics;
        for (int i = 0; i < nics.count; ++i) {
            const DeviceIndex nic = add(
                Device{prefix + "nic" + std::to_string(i), DeviceKind::Nic, node, -1, -1, 0}, true);
            nic_devices_[static_cast<std::size_t>(k)].push_back(nic);
            const auto& served = nics.serves[static_cast<std::size_t>(i)];
            if (!pcie_of_gpu.empty()) {
                // On a PCIe node the NIC sits on the switch of the GPUs it serves.
                DeviceIndex last = kNone;
                for (int g : served) {
                    const DeviceIndex sw = pcie_of_gpu[static_cast<std::size_t>(g)];
                    if (sw == last) continue;
                    b_.add_link(nic, sw, LinkKind::Pcie, nics.pcie_bandwidth, nics.pcie_latency);
                    last = sw;
                }
            } else {
                for (int g : served)
                    b_.add_link(gpus[static_cast<std::size_t>(g)], nic, LinkKind::Pcie,
                                nics.pcie_bandwidth, nics.pcie_latency);
            }
        }
    }

    DeviceIndex add_switch(const std::string& id, int tier, int stands_for = 1) {
        Device d;
        d.id = id;
        d.kind = DeviceKind::Switch;
        d.node = -1;
        d.tier = tier;
        d.stands_for = stands_for;
        return add(std::move(d), true);
    }
    // routing: adaptive spreads every flow over all equal-cost paths in proportion (cluster.hpp,
    // Routing), so each tier above the leaves is built as one switch per pod, its links to a leaf
    // (pod) bundling the physical ones: same capacity, hops and latency.
    bool merged_tiers() const { return spec_.routing == Routing::Adaptive; }
    // The physical links (or switches) one merged link (or switch) stands for, a 32-bit count
    // like every count of the cluster: refused at the tier's `up` when more. (Sums of them, in
    // clustersim topology's report, are 64-bit.)
    static int physical_count(std::int64_t n, const TierSpec& tier) {
        if (n > std::numeric_limits<std::int32_t>::max())
            throw ConfigError(tier.up ? tier.up_where : tier.where,
                              "routing: adaptive builds this tier as bundles that would stand "
                              "for " +
                                  std::to_string(n) +
                                  " physical links or switches, more than 2147483647; use "
                                  "fewer up-links");
        return static_cast<int>(n);
    }

    // Connects the nodes' NICs with the fabric of spec_.fabric->kind (kFabricBuilders).
    void add_fabric();
    // One builder per fabric kind; kFabricNames (cluster.hpp) holds the names a topology file
    // uses. A new fabric: an enumerator and a name row in cluster.hpp, a builder method below and
    // a row in kFabricBuilders.
    struct FabricBuilder {
        FabricKind kind;
        void (Builder::*build)();
    };
    static const std::array<FabricBuilder, 3> kFabricBuilders;
    static constexpr bool every_fabric_has_a_builder();

    // single_switch: every NIC on one switch.
    void add_single_switch() {
        const FabricSpec& f = *spec_.fabric;
        const NicSpec& nics = spec_.node->nics;
        const int nodes = spec_.nodes;
        const long long total_nics = static_cast<long long>(nodes) * nics.count;
        if (f.ports && *f.ports < total_nics)
            throw ConfigError(f.ports_where, "fabric port counts do not add up: the switch has " +
                                                 plural(*f.ports, "port", "ports") + " but " +
                                                 std::to_string(nodes) + " nodes x " +
                                                 std::to_string(nics.count) + " NICs need " +
                                                 std::to_string(total_nics) +
                                                 "; use leaf_spine or fat_tree, or fewer nodes");
        const DeviceIndex sw = add_switch("switch", 1);
        for (const auto& node_nics : nic_devices_)
            for (DeviceIndex nic : node_nics)
                b_.add_link(nic, sw, nics.kind, nics.bandwidth, nics.latency);
    }

    // The leaves of a leaf_spine or fat_tree (per rail when rail-optimised), each NIC linked to
    // its leaf, and the leaf tier's part of shape_.
    struct LeafTier {
        std::vector<DeviceIndex> leaves;
        int rails = 1;
        int nodes_per_leaf = 1;
        Uplinks up;
    };
    LeafTier add_leaves() {
        const FabricSpec& f = *spec_.fabric;
        const NicSpec& nics = spec_.node->nics;
        const int nodes = spec_.nodes;
        if (!f.leaf.down)
            throw ConfigError(f.leaf.where,
                              "'fabric.leaf.down' missing; give the leaf switch's ports facing "
                              "the NICs, e.g. leaf: {down: 32}");
        const int down = *f.leaf.down;
        LeafTier t;
        t.rails = nics.rail_optimized ? nics.count : 1;
        t.nodes_per_leaf = down;
        if (!nics.rail_optimized) {
            if (down % nics.count != 0)
                throw ConfigError(f.leaf.down_where,
                                  "fabric port counts do not add up: a leaf's " +
                                      std::to_string(down) +
                                      " down ports do not hold whole nodes "
                                      "of " +
                                      plural(nics.count, "NIC", "NICs") + "; use a multiple of " +
                                      std::to_string(nics.count) + " or rail_optimized: true");
            t.nodes_per_leaf = down / nics.count;
        }
        const int groups = (nodes + t.nodes_per_leaf - 1) / t.nodes_per_leaf;
        const int leaf_count = groups * t.rails;
        t.up = derive_uplinks(f.leaf, "leaf", down, nics.bandwidth);
        for (int i = 0; i < leaf_count; ++i)
            t.leaves.push_back(add_switch("leaf" + std::to_string(i), 1));
        for (int k = 0; k < nodes; ++k)
            for (int i = 0; i < nics.count; ++i) {
                const int leaf = (k / t.nodes_per_leaf) * t.rails + (nics.rail_optimized ? i : 0);
                b_.add_link(nic_devices_[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)],
                            t.leaves[static_cast<std::size_t>(leaf)], nics.kind, nics.bandwidth,
                            nics.latency);
            }

        shape_.leaf_groups = groups;
        shape_.rails = t.rails;
        shape_.leaves = leaf_count;
        shape_.leaf_up = leaf_count > 1 ? t.up.up : 0;
        shape_.leaf_up_bandwidth = t.up.bandwidth;
        return t;
    }

    // leaf_spine: the leaves and, above them, its spines (the top tier).
    void add_leaf_spine() {
        const LeafTier t = add_leaves();
        const FabricSpec& f = *spec_.fabric;
        const int leaf_count = static_cast<int>(t.leaves.size());
        if (f.spine.up || f.spine.oversubscription || f.spine.bandwidth)
            throw ConfigError(f.spine.where,
                              "a leaf_spine's spines are its top tier: they take only down "
                              "and radix; for up-links above the spines use fat_tree");
        shape_.pods = 1;
        shape_.spines_per_pod = shape_.leaf_up;
        if (f.spine.present && f.spine.down && leaf_count > *f.spine.down)
            throw ConfigError(f.spine.down_where,
                              "fabric port counts do not add up: " + std::to_string(spec_.nodes) +
                                  " nodes need " + std::to_string(leaf_count) +
                                  " leaves but a spine has " + std::to_string(*f.spine.down) +
                                  " down ports, one per leaf; use fat_tree or fewer nodes");
        if (f.spine.present && f.spine.radix && leaf_count > *f.spine.radix)
            throw ConfigError(f.spine.where,
                              "fabric port counts do not add up: " + std::to_string(leaf_count) +
                                  " leaves exceed the spine radix " +
                                  std::to_string(*f.spine.radix));
        if (leaf_count == 1) return;  // one leaf needs no spines
        if (merged_tiers()) {
            const DeviceIndex spines = add_switch("spines", 2, t.up.up);
            for (DeviceIndex leaf : t.leaves)
                b_.add_link(leaf, spines, spec_.node->nics.kind, t.up.bandwidth, f.latency,
                            t.up.up);
            return;
        }
        for (int j = 0; j < t.up.up; ++j) {
            const DeviceIndex spine = add_switch("spine" + std::to_string(j), 2);
            for (DeviceIndex leaf : t.leaves)
                b_.add_link(leaf, spine, spec_.node->nics.kind, t.up.bandwidth, f.latency);
        }
    }

    // fat_tree: the leaves, pods of spines above them and, with more than one pod, the cores.
    void add_fat_tree() {
        const LeafTier t = add_leaves();
        const FabricSpec& f = *spec_.fabric;
        const LinkKind kind = spec_.node->nics.kind;
        const int leaf_count = static_cast<int>(t.leaves.size());
        if (!f.spine.down)
            throw ConfigError(f.spine.where,
                              "'fabric.spine.down' missing; give the leaves per "
                              "pod (a spine's ports facing the leaves)");
        const int leaves_per_pod = *f.spine.down;
        const int pods = (leaf_count + leaves_per_pod - 1) / leaves_per_pod;
        const Uplinks spine_up = derive_uplinks(f.spine, "spine", leaves_per_pod, t.up.bandwidth);
        check_core_ports(pods, leaves_per_pod, t);
        shape_.pods = pods;
        shape_.spines_per_pod = shape_.leaf_up;
        shape_.spine_up = pods > 1 ? spine_up.up : 0;
        shape_.spine_up_bandwidth = spine_up.bandwidth;
        // Counted in 64 bits: under routing: adaptive the memory estimate charges one merged
        // core switch, so up x up is not bounded by it (physical_count refuses what overflows).
        // The merged cores and each pod's bundle to them stand for this many.
        shape_.cores = pods > 1 ? physical_count(std::int64_t{t.up.up} * spine_up.up, f.spine) : 0;
        if (leaf_count == 1) return;  // one leaf needs no spines
        if (merged_tiers()) {
            add_merged_pods(t, pods, leaves_per_pod, spine_up);
            return;
        }
        // Planes: spine j of every pod connects to the spine_up.up cores of plane j. A fabric that
        // fits in one pod needs no cores.
        std::vector<DeviceIndex> cores;
        const int core_planes = pods > 1 ? t.up.up : 0;
        for (int j = 0; j < core_planes; ++j)
            for (int c = 0; c < spine_up.up; ++c)
                cores.push_back(add_switch("core" + std::to_string(j * spine_up.up + c), 3));
        for (int p = 0; p < pods; ++p) {
            for (int j = 0; j < t.up.up; ++j) {
                const DeviceIndex spine =
                    add_switch("pod" + std::to_string(p) + ".spine" + std::to_string(j), 2);
                for (int l = p * leaves_per_pod; l < std::min(leaf_count, (p + 1) * leaves_per_pod);
                     ++l)
                    b_.add_link(t.leaves[static_cast<std::size_t>(l)], spine, kind, t.up.bandwidth,
                                f.latency);
                for (int c = 0; c < spine_up.up && pods > 1; ++c)
                    b_.add_link(spine, cores[static_cast<std::size_t>(j * spine_up.up + c)], kind,
                                spine_up.bandwidth, f.latency);
            }
        }
    }

    // fat_tree under merged_tiers(): the cores as one switch, each pod's spines as one, a leaf's
    // up-links to its pod's spines as one bundle, and a pod's spines' up-links to the cores as one.
    void add_merged_pods(const LeafTier& t, int pods, int leaves_per_pod, const Uplinks& spine_up) {
        const FabricSpec& f = *spec_.fabric;
        const LinkKind kind = spec_.node->nics.kind;
        const int leaf_count = static_cast<int>(t.leaves.size());
        const int to_cores = shape_.cores;  // spines per pod x up-links per spine, 0 in one pod
        const DeviceIndex cores = pods > 1 ? add_switch("cores", 3, to_cores) : DeviceIndex{kNone};
        for (int p = 0; p < pods; ++p) {
            const DeviceIndex spines =
                add_switch("pod" + std::to_string(p) + ".spines", 2, t.up.up);
            for (int l = p * leaves_per_pod; l < std::min(leaf_count, (p + 1) * leaves_per_pod);
                 ++l)
                b_.add_link(t.leaves[static_cast<std::size_t>(l)], spines, kind, t.up.bandwidth,
                            f.latency, t.up.up);
            if (pods > 1) b_.add_link(spines, cores, kind, spine_up.bandwidth, f.latency, to_cores);
        }
    }

    // fat_tree: a core switch has a down port per pod, within its radix.
    void check_core_ports(int pods, int leaves_per_pod, const LeafTier& t) const {
        const FabricSpec& f = *spec_.fabric;
        if (f.core.present && f.core.down && pods > *f.core.down)
            throw ConfigError(f.core.down_where,
                              "fabric port counts do not add up: " + std::to_string(spec_.nodes) +
                                  " nodes fill " + std::to_string(pods) +
                                  " pods but a core switch has " + std::to_string(*f.core.down) +
                                  " down ports, one per pod; at most " +
                                  std::to_string(static_cast<long long>(*f.core.down) *
                                                 leaves_per_pod / t.rails * t.nodes_per_leaf) +
                                  " nodes fit");
        if (f.core.present && f.core.radix && pods > *f.core.radix)
            throw ConfigError(f.core.where,
                              "fabric port counts do not add up: " + std::to_string(pods) +
                                  " pods exceed the core radix " + std::to_string(*f.core.radix));
    }

    void check_connectivity(const Cluster& c) const;
    // check_connectivity's first check: the whole graph is one island (its GPUs, at least).
    void check_islands(const Cluster& c) const;

    const TopologySpec& spec_;
    ClusterBuilder b_;
    std::unordered_map<std::string, GpuModel> file_models_;
    std::unordered_map<std::string, DeviceIndex> index_of_;
    std::vector<const SourceLocation*> where_of_;        // per device; nullptr when generated
    std::vector<std::int32_t> node_of_;                  // per device: its node, -1 for the fabric
    std::vector<std::vector<DeviceIndex>> nic_devices_;  // per generated node
    GeneratedShape shape_;
    int first_generated_node_ = 0;
};

constexpr std::array<Builder::FabricBuilder, 3> Builder::kFabricBuilders{{
    {FabricKind::SingleSwitch, &Builder::add_single_switch},
    {FabricKind::LeafSpine, &Builder::add_leaf_spine},
    {FabricKind::FatTree, &Builder::add_fat_tree},
}};

constexpr bool Builder::every_fabric_has_a_builder() {
    for (const auto& named : kFabricNames) {
        bool found = false;
        for (const auto& b : kFabricBuilders)
            found = found || b.kind == named.value;
        if (!found) return false;
    }
    return true;
}

void Builder::add_fabric() {
    static_assert(every_fabric_has_a_builder(), "a fabric kind of kFabricNames has no builder");
    const FabricKind kind = spec_.fabric->kind;
    shape_.fabric = kind;
    for (const auto& b : kFabricBuilders)
        if (b.kind == kind) return (this->*b.build)();
    throw SimulationError("topology",
                          "no builder for fabric kind " + std::string(name_of(kFabricNames, kind)));
}

std::string island_text(const Cluster& c, const std::vector<int>& gpus) {
    std::string out = "{";
    const std::size_t shown = std::min<std::size_t>(gpus.size(), 4);
    for (std::size_t i = 0; i < shown; ++i)
        out += (i ? ", " : "") + c.devices()[c.gpu_device(gpus[i])].id;
    if (shown < gpus.size()) out += ", ... (" + std::to_string(gpus.size()) + " GPUs)";
    return out + "}";
}

void Builder::check_islands(const Cluster& c) const {
    const Graph& g = c.graph().g;
    std::vector<int> comp(boost::num_vertices(g));
    const int count = boost::connected_components(g, comp.data());
    if (count <= 1) return;
    std::map<int, std::vector<int>> islands;
    for (int gpu = 0; gpu < c.gpu_count(); ++gpu)
        islands[comp[c.gpu_device(gpu)]].push_back(gpu);
    if (islands.size() <= 1) return;
    std::string text;
    int shown = 0;
    for (const auto& [id, gpus] : islands) {
        if (shown == 4) {
            text += " and " + std::to_string(islands.size() - 4) + " more";
            break;
        }
        text += (shown ? (shown + 1 == static_cast<int>(islands.size()) ? " and " : ", ") : "") +
                island_text(c, gpus);
        ++shown;
    }
    throw ConfigError(spec_.where, "the GPUs are not all connected; " +
                                       std::to_string(islands.size()) + " islands: " + text +
                                       " (add links between them, or NICs and a fabric)");
}

void Builder::check_connectivity(const Cluster& c) const {
    const Graph& g = c.graph().g;
    const auto n = boost::num_vertices(g);
    if (c.gpu_count() == 0) throw ConfigError(spec_.where, "the topology has no GPUs");
    // 1. Islands of the whole graph.
    check_islands(c);
    // 2. Routes never pass through a GPU, so connectivity must hold without GPU vertices too:
    // two GPUs reach each other through a direct link or a shared component of the non-GPU graph.
    const auto& devs = c.devices();
    auto not_gpu = [&](std::size_t v) { return devs[v].kind != DeviceKind::Gpu; };
    boost::filtered_graph<Graph, boost::keep_all, std::function<bool(std::size_t)>> fabric(
        g, boost::keep_all(), not_gpu);
    std::vector<int> fcomp(n, -1);
    boost::connected_components(fabric, fcomp.data());
    const int gpus = c.gpu_count();
    std::vector<std::vector<int>> touches(static_cast<std::size_t>(gpus));
    std::vector<std::vector<int>> direct(static_cast<std::size_t>(gpus));
    std::unordered_map<int, int> gpus_touching;
    for (int gpu = 0; gpu < gpus; ++gpu) {
        auto& t = touches[static_cast<std::size_t>(gpu)];
        for (auto [e, end] = boost::out_edges(c.gpu_device(gpu), g); e != end; ++e) {
            const auto v = boost::target(*e, g);
            if (devs[v].kind == DeviceKind::Gpu)
                direct[static_cast<std::size_t>(gpu)].push_back(devs[v].gpu);
            else
                t.push_back(fcomp[v]);
        }
        std::sort(t.begin(), t.end());
        t.erase(std::unique(t.begin(), t.end()), t.end());
        for (int k : t)
            ++gpus_touching[k];
    }
    for (const auto& [k, cnt] : gpus_touching)
        if (cnt == gpus) return;  // one component touches every GPU
    if (gpus > 4096) return;      // left to route(), which reports the pair
    std::unordered_map<int, std::vector<int>> members;
    for (int gpu = 0; gpu < gpus; ++gpu)
        for (int k : touches[static_cast<std::size_t>(gpu)])
            members[k].push_back(gpu);
    std::vector<char> reach(static_cast<std::size_t>(gpus));
    for (int a = 0; a < gpus; ++a) {
        std::fill(reach.begin(), reach.end(), 0);
        reach[static_cast<std::size_t>(a)] = 1;
        for (int b : direct[static_cast<std::size_t>(a)])
            reach[static_cast<std::size_t>(b)] = 1;
        for (int k : touches[static_cast<std::size_t>(a)])
            for (int b : members[k])
                reach[static_cast<std::size_t>(b)] = 1;
        for (int b = 0; b < gpus; ++b)
            if (!reach[static_cast<std::size_t>(b)])
                throw ConfigError(spec_.where,
                                  "GPU " + devs[c.gpu_device(a)].id + " cannot reach GPU " +
                                      devs[c.gpu_device(b)].id +
                                      " without passing through another GPU; routes never "
                                      "transit a GPU (link them directly or through a switch "
                                      "or NIC)");
    }
}

}  // namespace

Cluster build_cluster(const TopologySpec& spec) {
    return Builder(spec).run();
}

}  // namespace cs::topology
