// The frozen cluster: devices and directed links in a Boost graph, GPU numbering and routing.
//
// Built once by ClusterBuilder (from a TopologySpec, see topology_spec.hpp) and immutable after:
// apart from route()'s own memo of hop tables, nothing in it changes, and it keeps nothing for
// other layers (what networks or sweeps keep across runs is theirs: network::KeptState,
// session's SweepCache).
// Every physical link becomes two directed links, one per direction, each with the full
// per-direction capacity (count x bandwidth). GPUs are numbered 0..gpu_count()-1 in topology order
// (explicit devices in the order listed; generated clusters node-major).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/name_table.hpp"
#include "core/units.hpp"

namespace cs::topology {

enum class DeviceKind : std::uint8_t { Gpu, NvSwitch, Nic, PcieSwitch, Switch };
enum class LinkKind : std::uint8_t { NvLink, NvSwitch, Pcie, InfiniBand, Ethernet };

// The names of device and link kinds in topology files, messages and reports.
inline constexpr std::array<Named<DeviceKind>, 5> kDeviceKindNames{{
    {"gpu", DeviceKind::Gpu},
    {"nvswitch", DeviceKind::NvSwitch},
    {"nic", DeviceKind::Nic},
    {"pcie_switch", DeviceKind::PcieSwitch},
    {"switch", DeviceKind::Switch},
}};
inline constexpr std::array<Named<LinkKind>, 5> kLinkKindNames{{
    {"nvlink", LinkKind::NvLink},
    {"nvswitch", LinkKind::NvSwitch},
    {"pcie", LinkKind::Pcie},
    {"infiniband", LinkKind::InfiniBand},
    {"ethernet", LinkKind::Ethernet},
}};

const char* device_kind_name(DeviceKind k);  // "gpu", "nvswitch", "nic", "pcie_switch", "switch"
const char* link_kind_name(LinkKind k);  // "nvlink", "nvswitch", "pcie", "infiniband", "ethernet"

// What a GPU sustains under continuous load, against the short-burst (boost clock) figures the
// roofline's efficiency curves are fitted on (docs/compute-model.md, "Sustained clocks"). Under a
// steady tensor-core load the board's power cap lowers the SM clock; memory-bound kernels draw
// less power, so the cap binds only above a duty cycle. Tensor-core kernels run at
//   factor(u) = 1 - (1 - tensor_throughput) x clamp((u - from_duty) / (1 - from_duty), 0, 1)
// of their burst rate, u being the tensor-core share of the GPU's busy time.
struct SustainedRates {
    double tensor_throughput = 1.0;  // at u = 1 (back-to-back GEMMs), relative to burst
    double from_duty = 1.0;          // the duty cycle at which the power cap starts to bind
    std::string source;              // where the figures come from
    double factor(double duty) const;
};

// A GPU's dense 16-bit GEMM efficiency curve (docs/compute-model.md, "GEMM efficiency"): the
// fraction of peak peak_fraction x f(m) x f(n) x f(k), f(x) = x^p / (x^p + half_dim^p) with
// p = exponent, for dimensions of at least 512 (below, f(512) x / 512). The defaults are the
// generic curve; the catalogue gives Hopper GPUs the curve fitted on the H200's measured kernels.
struct GemmCurve {
    double peak_fraction = 0.803;
    double half_dim = 650;
    double exponent = 2;
    std::string source =
        "generic: the H200 GEMM microbenchmarks under the H100 SXM's published MAMF cap";
    // An fp8 GEMM by scaling recipe (per tensor, per row, DeepSeek-V3's 1x128 / 128x128 blocks):
    // this curve's 16-bit time at the same shape divided by `speedup`, plus `per_output` seconds
    // per output element, a cost that does not shrink with k (the recipe's scales applied to the
    // accumulators). Fitted against the Hopper curve on torch._scaled_mm at 99 shapes on H200 SXM,
    // each time brought to 1980 MHz (h200-microbench.json; tools/validation/fit_fp8_gemm.py); no
    // other GPU has been measured, so every GPU with fp8 takes these.
    struct Fp8 {
        double speedup = 1;
        double per_output = 0;  // seconds per output element
    };
    Fp8 fp8_tensorwise{1.829, 0.182e-12}, fp8_rowwise{1.796, 0.488e-12},
        fp8_blockwise{1.641, 0.650e-12};
};

struct GpuModel {
    std::string name;
    FlopRate peak_fp32;
    FlopRate peak_bf16;
    FlopRate peak_fp16;
    FlopRate peak_fp8;
    Bytes hbm;
    Bandwidth hbm_bandwidth;
    // Last: tests build catalogue-free models by aggregate, with {} for these.
    SustainedRates sustained;
    GemmCurve gemm;
    // NVLink SHARP (the NVSwitch's multimem reductions, NCCL's NVLS algorithm): Hopper and later
    // on NVSwitch gen3; the A100s' NVSwitch gen2 has none.
    bool nvls = true;
    // Board power under training load, watts (the TDP: a training GPU sits at its power cap,
    // docs/compute-model.md); 0: not known (no energy figure unless the experiment gives one).
    double board_power_w = 0;
};

using DeviceIndex = std::uint32_t;
using LinkId = std::uint32_t;  // one direction of a physical link
inline constexpr std::uint32_t kNone = 0xffffffffu;

struct Device {
    std::string id;
    DeviceKind kind = DeviceKind::Gpu;
    std::int32_t node = -1;   // node (server) index, -1 for fabric switches
    std::int32_t gpu = -1;    // global GPU number for GPUs, else -1
    std::int32_t model = -1;  // index into Cluster::gpu_models() for GPUs
    std::int32_t tier = 0;    // fabric tier for switches (1 = leaf), 0 otherwise
    // Switches: how many physical switches of its tier it stands for (routing: adaptive builds
    // a pod's spines, or the cores, as one); 1 otherwise.
    std::int32_t stands_for = 1;
};

struct Link {
    DeviceIndex from = 0;
    DeviceIndex to = 0;
    LinkKind kind = LinkKind::NvLink;
    Bandwidth bandwidth;  // capacity of this direction: count x per-link bandwidth
    Time latency;
    std::int32_t count = 1;
    LinkId reverse = kNone;
    bool inter_node = false;  // true when the link leaves a node (NIC or fabric)
    // No stored name: Cluster::link_name() makes "<from id>-><to id>" ("gpu0->gpu1") on demand
    // (a 131,072-GPU fabric has millions of links, and a heap string each cost a second to load).
};

// The Boost graph of devices and directed links (topology/graph.hpp). Only the files that walk
// it include Boost.Graph: its headers cost about a second of compile time in each of the ~110
// files that include this one.
struct ClusterGraph;

// The shape a generator built (node template and fabric tiers), kept so that summaries can
// derive bisection bandwidth from the structure instead of a max-flow. Absent when the cluster
// has no generated nodes.
// How the GPUs of a generated node are joined (topology `node.intra.kind`).
enum class IntraKind : std::uint8_t { NvSwitch, NvLinkMesh, Pcie };
inline constexpr std::array<Named<IntraKind>, 3> kIntraNames{{
    {"nvswitch", IntraKind::NvSwitch},
    {"nvlink", IntraKind::NvLinkMesh},
    {"pcie", IntraKind::Pcie},
}};

// The generated fabric between nodes (topology `fabric.kind`); build.cpp has one builder per kind.
enum class FabricKind : std::uint8_t { SingleSwitch, LeafSpine, FatTree };
inline constexpr std::array<Named<FabricKind>, 3> kFabricNames{{
    {"single_switch", FabricKind::SingleSwitch},
    {"leaf_spine", FabricKind::LeafSpine},
    {"fat_tree", FabricKind::FatTree},
}};

// How a route chooses among equal-cost next hops (topology `routing`, docs/network.md "Routing").
//  - ecmp: by a hash of (source GPU, destination GPU, flow id, switch), as hashed ECMP does;
//    different flow ids (a collective's group) spread over the paths.
//  - d_mod_k: by the destination alone, as static destination-based fabric routing (InfiniBand's
//    d-mod-k / ftree engines) does: at the route's i-th choice among k > 1 next hops it takes
//    number (dst / (k_1 x ... x k_{i-1})) mod k, the hops in link order. Flows to one GPU share
//    their path; GPUs that differ only in their rail take images of each other's paths, which is
//    what lets the network fold a worker's tensor-parallel members on large fabrics.
//  - adaptive: every flow spread over all of its equal-cost fabric paths in proportion to their
//    capacity, the balance adaptive routing (and packet spraying) converges to. Under that
//    spreading a flow leaving a leaf (a pod) loads each of its up-links by the same share, and a
//    flow entering one each of its down-links, so a tier of parallel switches carries traffic as
//    one switch whose link to each leaf (pod) bundles the physical ones: build.cpp builds the
//    generated fabric's spine (and core) tiers that way under this routing, one switch per pod
//    and tier (Device::stands_for), and max-min sharing over the bundles is exact for the
//    spreading. Generated fabrics only (a hand-written fabric is refused when read); choices
//    left inside nodes are made as under d_mod_k.
enum class Routing : std::uint8_t { Ecmp, DModK, Adaptive };
inline constexpr std::array<Named<Routing>, 3> kRoutingNames{{
    {"ecmp", Routing::Ecmp},
    {"d_mod_k", Routing::DModK},
    {"adaptive", Routing::Adaptive},
}};

// One line on how `routing` picks paths, for people (`clustersim topology`).
constexpr std::string_view routing_rule(Routing routing) {
    switch (routing) {
        case Routing::Ecmp:
            return "a hash of each flow picks among equal-cost paths";
        case Routing::DModK:
            return "the destination GPU picks among equal-cost paths";
        case Routing::Adaptive:
            return "every flow spread over all equal-cost paths; each tier above the leaves is "
                   "one switch per pod, its links bundles";
    }
    return "";
}

struct GeneratedShape {
    std::optional<FabricKind> fabric;  // none when the nodes have no fabric
    std::optional<IntraKind> intra;    // none for single-GPU nodes without PCIe switches
    int first_node = 0;                // generated nodes are first_node .. first_node + nodes - 1
    int nodes = 0;
    int gpus_per_node = 0;
    int nics_per_node = 0;
    Bandwidth nic_bandwidth;    // per NIC and direction
    Bandwidth intra_bandwidth;  // per GPU (nvswitch, pcie) or per GPU pair (nvlink, bonded)
    int pcie_switches = 0;
    int leaf_groups = 0;  // groups of nodes under one leaf (per rail)
    int rails = 1;
    int leaves = 0;
    int leaf_up = 0;
    Bandwidth leaf_up_bandwidth;
    int pods = 0;
    int spines_per_pod = 0;
    int spine_up = 0;
    Bandwidth spine_up_bandwidth;
    int cores = 0;
};

class Cluster {
  public:
    const std::vector<Device>& devices() const { return devices_; }
    const std::vector<Link>& links() const { return links_; }
    const std::vector<GpuModel>& gpu_models() const { return models_; }
    const ClusterGraph& graph() const { return *graph_; }  // topology/graph.hpp
    const std::optional<GeneratedShape>& generated_shape() const { return shape_; }
    Routing routing() const { return routing_; }

    int gpu_count() const { return static_cast<int>(gpu_devices_.size()); }
    DeviceIndex gpu_device(int gpu) const { return gpu_devices_.at(static_cast<std::size_t>(gpu)); }
    int node_of_gpu(int gpu) const { return devices_[gpu_device(gpu)].node; }
    int node_count() const { return node_count_; }
    const GpuModel& gpu_model(int gpu) const {
        return models_[static_cast<std::size_t>(devices_[gpu_device(gpu)].model)];
    }
    // Devices by id; kNone if unknown.
    DeviceIndex find_device(const std::string& id) const;
    // A directed link's name in files, messages and reports: "<from id>-><to id>" ("gpu0->gpu1").
    std::string link_name(LinkId link) const;
    // Whether link_name(link) == name, without building the name.
    bool link_named(LinkId link, std::string_view name) const;

    // Appends to `out` the directed links of a path from GPU `src` to GPU `dst` (empty when equal).
    // Shortest path in hops that never passes through another GPU; traffic between two GPUs of
    // one node stays inside the node when the node connects them (NVLink, NVSwitch, PCIe), and
    // traffic between nodes never transits a third node. Among equal-cost paths the choice at
    // each hop follows routing(): under ecmp a deterministic hash of (src, dst, flow_id), so
    // different flow ids spread over all equal-cost paths; under d_mod_k the destination alone,
    // and so under adaptive (whose generated fabric leaves no choice between nodes).
    // Throws SimulationError if no path exists.
    //
    // Cost: when every link is inside a node, inside the fabric (devices with node -1) or joins
    // the two (all generated clusters), a route needs only BFS inside the two nodes and hop tables
    // over the fabric switches made per destination-side fabric switch on first use: memory grows
    // with (fabric switches reached from NICs) x (fabric switches), never with GPU pairs. Other
    // topologies fall back to one hop table per destination GPU. The hop tables (and the
    // search's scratch) are the routing's own memo, the one state a Cluster changes after it is
    // built: route() is a pure function of the cluster, and not thread-safe.
    void route(int src, int dst, std::uint64_t flow_id, std::vector<LinkId>& out) const;
    // A copy of this cluster with link faults (the experiment's `faults.links`, docs/what-if.md):
    // the directed links of `failed` carry nothing and routes avoid them (route() throws
    // NoPathError where no path remains), and each (link, bandwidth) of `bandwidths` has that
    // capacity instead of the topology's. Devices, link ids, names and GPU numbers are unchanged,
    // so flows, observers and summaries mix both copies freely. The Boost graph is the
    // topology's.
    Cluster with_faults(const std::vector<LinkId>& failed,
                        const std::vector<std::pair<LinkId, Bandwidth>>& bandwidths) const;
    bool link_failed(LinkId link) const { return !failed_.empty() && failed_[link] != 0; }

    // The number of links route(src, d, flow_id) appends, for each d of `dsts` (in order, into
    // `out`): route lengths are shortest-path lengths, the same for every flow id. Between two
    // nodes of a two-level cluster it takes one search of the fabric from `src` for all the
    // destinations (cheaper than route(), which searches the fabric once per destination-side
    // switch); otherwise it calls route(). Throws what route() throws where no path exists.
    void route_lengths(int src, const std::vector<int>& dsts, std::vector<int>& out) const;

    // Sum of link latencies along a route.
    Time route_latency(const std::vector<LinkId>& route) const;
    // Smallest capacity along a route.
    Bandwidth route_bandwidth(const std::vector<LinkId>& route) const;

  private:
    friend class ClusterBuilder;
    const std::vector<std::int32_t>& hops_to(DeviceIndex dst) const;
    const std::vector<std::uint16_t>& fabric_hops_to(DeviceIndex fabric_switch) const;
    bool route_in_node(int src, int dst, std::uint64_t flow_id, std::vector<LinkId>& out) const;
    void route_two_level(int src, int dst, std::uint64_t flow_id, std::vector<LinkId>& out) const;
    // route_two_level's sides, into scratch_: the destination node's hops to `d` and its entry
    // switches (dist_b, entries), then the source node's hops to the destination (dist_a).
    void two_level_entries(int nb, DeviceIndex d) const;
    void two_level_source(int na, DeviceIndex s) const;
    // route_lengths: hops from GPU `src` to every fabric device (fabric-local index), kFar where
    // none leads.
    std::vector<std::int32_t> fabric_reach(int src) const;
    void route_general(int src, int dst, std::uint64_t flow_id, std::vector<LinkId>& out) const;
    void index_structure();

    std::vector<Device> devices_;
    std::vector<Link> links_;
    std::vector<GpuModel> models_;
    std::vector<DeviceIndex> gpu_devices_;
    std::unordered_map<std::string, DeviceIndex> by_id_;
    std::vector<std::uint8_t> failed_;            // per link, empty when none failed
    std::vector<std::vector<LinkId>> out_links_;  // per device, sorted by link id
    std::vector<std::vector<LinkId>> in_links_;   // per device, sorted by link id
    // Two-level structure (see route()): devices per node, each device's index inside its node
    // (or inside the fabric for node -1), links entering and leaving each node.
    bool two_level_ = false;
    std::vector<std::vector<DeviceIndex>> node_devices_;
    std::vector<std::int32_t> local_index_;
    std::vector<DeviceIndex> fabric_devices_;
    std::vector<std::vector<LinkId>> node_entries_;  // fabric -> node links, per node
    std::vector<std::vector<LinkId>> node_exits_;    // node -> fabric links, per node
    // Fabric-to-fabric in-neighbours in CSR form over fabric-local indices, and per device its
    // node (-1 for the fabric) and whether it is a GPU, kept compact for the routing loops.
    std::vector<std::uint32_t> fabric_in_offsets_;
    std::vector<std::uint32_t> fabric_in_;
    // The far end's node, local index and GPU flag are copied into the arc so that scanning a
    // switch's arcs reads memory in order.
    struct Arc {
        LinkId link;
        DeviceIndex other;  // the far end: target for out-arcs, source for in-arcs
        std::int32_t other_node;
        std::int32_t other_local;
        bool other_is_gpu;
    };
    std::vector<std::uint32_t> out_offsets_, in_offsets_;  // CSR per device
    std::vector<Arc> out_arcs_, in_arcs_;
    std::vector<std::int32_t> node_of_device_;
    std::vector<std::uint8_t> is_gpu_;
    // Hop tables per fabric-local target index; empty until first used.
    // 16-bit hop counts (0xffff = unreachable) keep the tables of a 24k-GPU Clos in cache.
    mutable std::vector<std::vector<std::uint16_t>> fabric_hops_cache_;
    // Per-call scratch buffers of route(), kept to avoid allocating on every call.
    struct RouteScratch {
        std::vector<std::int32_t> dist_a, dist_b;
        std::vector<DeviceIndex> queue;
        std::vector<std::pair<DeviceIndex, std::int32_t>> entry_cost;
        std::vector<std::pair<const std::vector<std::uint16_t>*, std::int32_t>> entries;
        std::vector<std::uint32_t> candidates;  // arc indices
    };
    mutable RouteScratch scratch_;
    // Built once by ClusterBuilder::build() and shared by the copies with_faults() makes.
    std::shared_ptr<const ClusterGraph> graph_;
    int node_count_ = 0;
    Routing routing_ = Routing::Ecmp;
    std::optional<GeneratedShape> shape_;
    // Hop-count tables per destination device, filled on first use (routes are computed on
    // demand; no all-pairs table). Mutable cache only; results do not depend on fill order.
    mutable std::unordered_map<DeviceIndex, std::vector<std::int32_t>> hops_cache_;
};

// A pseudo-random key per directed link of `cluster`, below 2^61 - 1, for linear sketches of
// per-link sums (network::link_sketch_term): a function of what a summary prints of the link
// (its name, kind and bandwidth) and of its number, so equal keys on two clusters are the same
// link. 8 bytes per link, made on each call (report::LinkSketch keeps them).
std::vector<std::uint64_t> link_keys(const Cluster& cluster);

class ClusterBuilder {
  public:
    // Returns the model's index; a model with the same name is reused.
    int add_gpu_model(const GpuModel& model);
    DeviceIndex add_device(Device device);
    // Room for this many devices and directed links (both directions), to build large clusters
    // without regrowing the tables; a hint, never a limit.
    void reserve(std::size_t devices, std::size_t directed_links);
    // Adds both directions of a physical link; returns the forward direction's id.
    LinkId add_link(DeviceIndex from, DeviceIndex to, LinkKind kind, Bandwidth per_link,
                    Time latency, int count = 1);
    void set_generated_shape(const GeneratedShape& shape);
    void set_routing(Routing routing);
    // Freezes into a Cluster: numbers GPUs in insertion order, builds the Boost graph.
    Cluster build();

  private:
    Cluster c_;
};

}  // namespace cs::topology
