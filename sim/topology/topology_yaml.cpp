#include "topology/topology_yaml.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "topology/topology_spec.hpp"

namespace cs::topology {

namespace {

// GPUs and NICs per node (docs/yaml/topology.md): far above any machine, low enough that the
// per-node loops and lists stay small.
constexpr int kMaxPerNode = 65536;

GpuModel make_model(const char* name, double fp32_tflops, double bf16_tflops, double fp16_tflops,
                    double fp8_tflops, double hbm_gb, double hbm_tb_per_s) {
    GpuModel m;
    m.name = name;
    m.peak_fp32 = FlopRate{fp32_tflops * 1e12};
    m.peak_bf16 = FlopRate{bf16_tflops * 1e12};
    m.peak_fp16 = FlopRate{fp16_tflops * 1e12};
    m.peak_fp8 = FlopRate{fp8_tflops * 1e12};
    m.hbm = Bytes{static_cast<std::int64_t>(std::llround(hbm_gb * 1e9))};
    m.hbm_bandwidth = Bandwidth{hbm_tb_per_s * 1e12};
    return m;
}

// Short names accepted for catalogue entries.
struct Alias {
    const char* alias;
    const char* name;
};
constexpr Alias kAliases[] = {
    {"A100", "A100-SXM4-80GB"}, {"A100-SXM", "A100-SXM4-80GB"}, {"A100-PCIE", "A100-PCIE-80GB"},
    {"H100", "H100-SXM"},       {"H200", "H200-SXM"},           {"H800", "H800-SXM"},
};

DeviceKind parse_device_kind(const config::Reader& r, const std::string& key) {
    return r.choice(key, kDeviceKindNames);
}

LinkKind parse_link_kind(const config::Reader& r, const std::string& key,
                         std::optional<LinkKind> fallback = std::nullopt) {
    return r.choice(key, kLinkKindNames, fallback);
}

int as_int(const config::Reader& r, const std::string& key, std::int64_t v) {
    if (v > 100'000'000) r.fail(key, "is too large (at most 100000000)");
    return static_cast<int>(v);
}

GpuModelSpec parse_gpu_model(const config::Reader& r, const std::string& name) {
    GpuModelSpec s;
    s.where = r.location();
    s.model.name = name;
    const config::Reader peak = r.map("peak");
    s.model.peak_bf16 = peak.flop_rate("bf16");
    s.model.peak_fp16 = peak.has("fp16") ? peak.flop_rate("fp16") : s.model.peak_bf16;
    if (peak.has("fp8")) s.model.peak_fp8 = peak.flop_rate("fp8");
    if (peak.has("fp32")) s.model.peak_fp32 = peak.flop_rate("fp32");
    peak.finish();
    s.model.hbm = r.bytes("hbm");
    if (s.model.hbm.value <= 0) r.fail("hbm", "must be greater than zero");
    s.model.hbm_bandwidth = r.bandwidth("hbm_bandwidth");
    // Without sustained figures a model inherits those of the catalogue entry of its name, else
    // it runs at its burst rates (SustainedRates' defaults).
    if (const GpuModel* known = find_catalog_model(name)) {
        s.model.sustained = known->sustained;
        s.model.gemm = known->gemm;
        s.model.nvls = known->nvls;
        s.model.board_power_w = known->board_power_w;
    }
    s.model.nvls = r.boolean_or("nvls", s.model.nvls);
    if (r.has("board_power")) {
        s.model.board_power_w = r.number("board_power");
        if (!(s.model.board_power_w > 0 && s.model.board_power_w <= 1e5))
            r.fail("board_power", "must be in (0, 100000] watts (the GPU's TDP, e.g. 700)");
    }
    if (auto g = r.map_opt("gemm")) {
        auto& c = s.model.gemm;
        c.peak_fraction = g->number("peak_fraction");
        if (!(c.peak_fraction > 0 && c.peak_fraction <= 1))
            g->fail("peak_fraction",
                    "must be in (0, 1]: the best dense 16-bit GEMM's fraction of "
                    "the bf16 peak (H200: 0.825)");
        c.half_dim = g->number_or("half_dim", c.half_dim);
        if (!(c.half_dim > 0 && c.half_dim < 1e6))
            g->fail("half_dim",
                    "must be in (0, 1000000): the GEMM dimension at which the "
                    "per-dimension factor is one half");
        c.exponent = g->number_or("exponent", c.exponent);
        if (!(c.exponent >= 0.5 && c.exponent <= 8)) g->fail("exponent", "must be in [0.5, 8]");
        c.source = g->string_or("source", "topology file");
        g->finish();
    }
    if (auto sus = r.map_opt("sustained")) {
        auto& v = s.model.sustained;
        v.tensor_throughput = sus->number("tensor_throughput");
        if (!(v.tensor_throughput > 0 && v.tensor_throughput <= 1))
            sus->fail("tensor_throughput",
                      "must be in (0, 1]: the tensor-core rate under continuous load relative to "
                      "the burst rate (H200: 0.88)");
        v.from_duty = sus->number_or("from_duty", 0.0);
        if (!(v.from_duty >= 0 && v.from_duty < 1))
            sus->fail("from_duty",
                      "must be in [0, 1): the tensor-core duty cycle at which the "
                      "power cap starts to bind (H200: 0.65)");
        v.source = sus->string_or("source", "topology file");
        sus->finish();
    }
    r.finish();
    return s;
}

DeviceSpec parse_device(const config::Reader& r) {
    DeviceSpec d;
    d.where = r.location();
    d.id = r.string("id");
    if (d.id.empty()) r.fail("id", "must not be empty");
    d.kind = parse_device_kind(r, "type");
    if (d.kind == DeviceKind::Gpu) {
        d.model = r.string("model");
        d.model_where = r.location("model");
    } else if (r.has("model")) {
        r.fail("model", "only devices of type gpu have a model");
    }
    const std::int64_t fallback = d.kind == DeviceKind::Switch ? -1 : 0;
    const std::int64_t node = r.integer_or("node", fallback);
    if (node < -1) r.fail("node", "must be a node index (0, 1, ...) or -1 for the fabric");
    if (node < 0 && d.kind != DeviceKind::Switch)
        r.fail("node", "only switches may sit outside a node (node -1)");
    d.node = as_int(r, "node", node);
    r.finish();
    return d;
}

LinkSpec parse_link(const config::Reader& r) {
    LinkSpec l;
    l.where = r.location();
    l.from = r.string("from");
    l.from_where = r.location("from");
    l.to = r.string("to");
    l.to_where = r.location("to");
    l.kind = parse_link_kind(r, "kind");
    l.bandwidth = r.bandwidth("bandwidth");
    l.latency = r.time_opt("latency").value_or(Time::us(1));
    l.count = as_int(r, "count", r.count_or("count", 1));
    r.finish();
    return l;
}

IntraSpec parse_intra(const config::Reader& r) {
    IntraSpec s;
    s.where = r.location();
    s.kind = r.choice("kind", kIntraNames);
    s.bandwidth = r.bandwidth("bandwidth");
    const Time default_latency = s.kind == IntraKind::NvSwitch ? Time::ns(500) : Time::us(1);
    s.latency = r.time_opt("latency").value_or(default_latency);
    if (s.kind == IntraKind::NvLinkMesh) s.count = as_int(r, "count", r.count_or("count", 1));
    if (s.kind == IntraKind::Pcie)
        s.pcie_switches = as_int(r, "switches", r.count_or("switches", 1));
    r.finish();
    return s;
}

NicSpec parse_nics(const config::Reader& r, int gpus) {
    NicSpec s;
    s.where = r.location();
    s.count = as_int(r, "count", r.count("count", 0));
    if (s.count > kMaxPerNode)
        r.fail("count", "must be at most " + std::to_string(kMaxPerNode) +
                            " NICs per node, found " + std::to_string(s.count));
    s.kind = parse_link_kind(r, "kind", LinkKind::InfiniBand);
    if (s.kind != LinkKind::InfiniBand && s.kind != LinkKind::Ethernet)
        r.fail("kind", "a NIC is infiniband or ethernet");
    if (s.count > 0 || r.has("bandwidth")) s.bandwidth = r.bandwidth("bandwidth");
    s.latency = r.time_opt("latency").value_or(Time::us(1));
    s.pcie_bandwidth = r.bandwidth_opt("pcie_bandwidth").value_or(Bandwidth{64e9});
    s.pcie_latency = r.time_opt("pcie_latency").value_or(Time::us(1));
    s.rail_optimized = r.boolean_or("rail_optimized", false);
    if (r.has("serves")) {
        const YAML::Node list = r.value("serves");
        auto bad = [&](const std::string& why) {
            r.fail("serves", why + "; expected one list of local GPU indices (0.." +
                                 std::to_string(gpus - 1) + ") per NIC, e.g. [[0, 1], [2, 3]]");
        };
        if (!list.IsSequence()) bad("not a list");
        if (static_cast<int>(list.size()) != s.count)
            bad("has " + std::to_string(list.size()) + " entries for " + std::to_string(s.count) +
                " NICs");
        for (std::size_t i = 0; i < list.size(); ++i) {
            const YAML::Node item = list[i];
            if (!item.IsSequence()) bad("entry " + std::to_string(i) + " is not a list");
            if (item.size() == 0)
                bad("entry " + std::to_string(i) + " is empty (every NIC serves a GPU)");
            std::vector<int> gpus_of_nic;
            for (std::size_t j = 0; j < item.size(); ++j) {
                const YAML::Node g = item[j];
                int v = -1;
                try {
                    v = g.as<int>();
                } catch (const YAML::Exception&) {
                    bad("entry " + std::to_string(i) + " holds \"" +
                        (g.IsScalar() ? g.Scalar() : std::string("a list")) + "\"");
                }
                if (v < 0 || v >= gpus) bad("GPU " + std::to_string(v) + " is not in the node");
                gpus_of_nic.push_back(v);
            }
            s.serves.push_back(std::move(gpus_of_nic));
        }
    } else if (s.count > 0) {
        // NIC k serves a contiguous block of GPUs (GPU g goes to NIC g x count / gpus); with
        // more NICs than GPUs, NIC k serves GPU k mod gpus.
        s.serves.assign(static_cast<std::size_t>(s.count), {});
        if (s.count <= gpus) {
            for (int g = 0; g < gpus; ++g)
                s.serves[static_cast<std::size_t>(static_cast<long long>(g) * s.count / gpus)]
                    .push_back(g);
        } else {
            for (int k = 0; k < s.count; ++k)
                s.serves[static_cast<std::size_t>(k)].push_back(k % gpus);
        }
    }
    r.finish();
    return s;
}

NodeSpec parse_node(const config::Reader& r) {
    NodeSpec n;
    n.where = r.location();
    n.gpus = as_int(r, "gpus", r.count("gpus"));
    if (n.gpus > kMaxPerNode)
        r.fail("gpus", "must be at most " + std::to_string(kMaxPerNode) + " GPUs per node, found " +
                           std::to_string(n.gpus));
    n.gpu_model = r.string("gpu_model");
    n.gpu_model_where = r.location("gpu_model");
    if (auto intra = r.map_opt("intra")) {
        n.intra = parse_intra(*intra);
    } else if (n.gpus > 1) {
        r.fail("intra",
               "missing; a node with several GPUs needs an intra-node fabric, e.g. "
               "{kind: nvswitch, bandwidth: 450GB/s}");
    }
    if (auto nics = r.map_opt("nics")) n.nics = parse_nics(*nics, n.gpus);
    r.finish();
    return n;
}

TierSpec parse_tier(const config::Reader& r) {
    TierSpec t;
    t.present = true;
    t.where = r.location();
    if (r.has("down")) {
        t.down = as_int(r, "down", r.count("down"));
        t.down_where = r.location("down");
    }
    if (r.has("up")) {
        t.up = as_int(r, "up", r.count("up"));
        t.up_where = r.location("up");
    }
    if (r.has("oversubscription")) {
        const double o = r.number("oversubscription");
        // Real fabrics are oversubscribed a few times at most; far beyond, the derived up-links'
        // capacity would round to nothing.
        if (!(o >= 1.0 && o <= 1000.0))
            r.fail("oversubscription",
                   "must be from 1 to 1000 (down capacity : up capacity, 1 = full bisection)");
        t.oversubscription = o;
    }
    t.bandwidth = r.bandwidth_opt("bandwidth");
    if (r.has("radix")) t.radix = as_int(r, "radix", r.count("radix"));
    r.finish();
    return t;
}

FabricSpec parse_fabric(const config::Reader& r) {
    FabricSpec f;
    f.where = r.location();
    f.kind = r.choice("kind", kFabricNames);
    f.latency = r.time_opt("latency").value_or(Time::us(1));
    if (f.kind == FabricKind::SingleSwitch) {
        if (r.has("ports")) {
            f.ports = as_int(r, "ports", r.count("ports"));
            f.ports_where = r.location("ports");
        }
    } else {
        f.leaf = parse_tier(r.map("leaf"));
        if (auto spine = r.map_opt("spine")) f.spine = parse_tier(*spine);
        if (f.kind == FabricKind::FatTree) {
            if (!f.spine.present)
                r.fail("spine", "missing; a fat_tree needs spine: {down: <leaves per pod>}");
            if (auto core = r.map_opt("core")) f.core = parse_tier(*core);
        }
    }
    r.finish();
    return f;
}

}  // namespace

const std::vector<GpuModel>& gpu_catalog() {
    // Dense peaks (no sparsity). Sources: shared/validation/published.md section 7.1 (NVIDIA
    // datasheets via MLENG, NARAYANAN21); A100-PCIE-80GB from NVIDIA's A100 datasheet (same
    // tensor cores as SXM, 1,935 GB/s HBM2e). H800's peaks are not published: taken as H100's.
    //
    // Sustained rates (docs/compute-model.md, "Sustained clocks"): H200 SXM measured, h200-kernels
    // .json sustained_throughput (tests/validation/data): 8192^3 bf16 GEMMs back to back settle at
    // 667 TFLOP/s against 756 burst (0.88) while the 700 W cap holds the SM clock at ~1.5 GHz of
    // 1.98; the profiled h = 3072 training iteration, 64% of its GPU time in tensor-core kernels,
    // ran its GEMMs at their burst rate, so the cap binds from a duty cycle of 0.65. H100 and
    // H800 SXM share the die and the 700 W limit and take the H200's figures. The A100s have no
    // sustained measurement here: burst rates.
    static const std::vector<GpuModel> catalog = [] {
        const SustainedRates hopper{0.88, 0.65, "H200 SXM, 700 W cap (h200-kernels.json)"};
        // GEMMs as they run inside the H200 layer runs and the profiled iteration (docs/
        // compute-model.md); the A100s keep the generic curve (no A100 kernel measurement here).
        const GemmCurve hopper_gemm{0.825, 600, 2.5,
                                    "H200 SXM kernels in training (h200-kernels.json)"};
        const auto with = [](GpuModel m, double watts, const SustainedRates& sustained,
                             const GemmCurve& gemm, bool nvls = true) {
            m.board_power_w = watts;
            m.sustained = sustained;
            m.gemm = gemm;
            m.nvls = nvls;
            return m;
        };
        const SustainedRates burst{1.0, 1.0, "no sustained measurement: burst rates"};
        return std::vector<GpuModel>{
            // NVLink SHARP needs NVSwitch gen3 (Hopper): none on A100 (NCCL enables NVLS on
            // sm90 and later only).
            // Board power: the TDPs of published.md 7.1 (A100 SXM4 400 W, H100 and H200 SXM
            // 700 W); A100 PCIe 80GB 300 W and H800 SXM 700 W from NVIDIA's datasheets.
            with(make_model("A100-SXM4-80GB", 19.5, 312, 312, 0, 80, 2.039), 400, burst,
                 GemmCurve{}, false),
            with(make_model("A100-PCIE-80GB", 19.5, 312, 312, 0, 80, 1.935), 300, burst,
                 GemmCurve{}, false),
            with(make_model("H100-SXM", 67, 989, 989, 1979, 80, 3.35), 700, hopper, hopper_gemm),
            with(make_model("H200-SXM", 67, 989, 989, 1979, 141, 4.8), 700, hopper, hopper_gemm),
            with(make_model("H800-SXM", 67, 989, 989, 1979, 80, 3.35), 700, hopper, hopper_gemm),
        };
    }();
    return catalog;
}

const GpuModel* find_catalog_model(const std::string& name) {
    std::string resolved = name;
    for (const auto& a : kAliases)
        if (name == a.alias) resolved = a.name;
    for (const auto& m : gpu_catalog())
        if (m.name == resolved) return &m;
    return nullptr;
}

std::vector<std::string> catalog_names() {
    std::vector<std::string> out;
    for (const auto& m : gpu_catalog())
        out.push_back(m.name);
    for (const auto& a : kAliases)
        out.emplace_back(a.alias);
    return out;
}

namespace {
// routing: adaptive builds a generated fabric's tiers as bundles (cluster.hpp, Routing): a
// hand-written fabric has no tiers to build that way, and choosing one path there would not be
// adaptive routing. Switches outside the nodes are refused here; hand-written links between
// nodes or into the fabric where the builder resolves their ends (build.cpp).
void check_adaptive(const config::Reader& root, const TopologySpec& spec) {
    for (const DeviceSpec& d : spec.devices)
        if (d.node < 0)
            root.fail("routing",
                      "'adaptive' spreads flows over a generated fabric's tiers (fabric: "
                      "leaf_spine, fat_tree or single_switch), and switch '" +
                          d.id +
                          "' is written by hand outside the nodes; use ecmp or d_mod_k for a "
                          "hand-written fabric");
}
}  // namespace

TopologySpec parse_topology(const config::Document& doc) {
    const config::Reader root = config::root_reader(doc);
    TopologySpec spec;
    spec.where = root.location();
    spec.name = root.string_or("name", "");
    root.has("description");
    if (auto models = root.map_opt("gpu_models")) {
        for (const auto& name : models->keys())
            spec.gpu_models.push_back(parse_gpu_model(models->map(name), name));
        models->finish();
    }
    for (const auto& d : root.list_of_maps("devices"))
        spec.devices.push_back(parse_device(d));
    for (const auto& l : root.list_of_maps("links"))
        spec.links.push_back(parse_link(l));
    if (auto node = root.map_opt("node")) {
        spec.node = parse_node(*node);
        spec.nodes = as_int(root, "nodes", root.count("nodes"));
        spec.nodes_where = root.location("nodes");
    } else if (root.has("nodes")) {
        root.fail("nodes", "needs a node template: node: {gpus: 8, gpu_model: H100-SXM, ...}");
    }
    if (auto fabric = root.map_opt("fabric")) {
        if (!spec.node)
            fabric->fail_here("a fabric connects generated nodes; add node: {...} and nodes: N");
        spec.fabric = parse_fabric(*fabric);
    }
    spec.routing = root.choice("routing", kRoutingNames, std::optional<Routing>{Routing::Ecmp});
    if (spec.routing == Routing::Adaptive) check_adaptive(root, spec);
    if (spec.devices.empty() && !spec.node) {
        // An experiment (or jobs file) where a topology was expected: say so, not what it lacks.
        const auto keys = root.keys();
        for (const char* k : {"topology", "jobs"})
            if (std::find(keys.begin(), keys.end(), k) != keys.end())
                root.fail_here(std::string("has a '") + k +
                               "' key: this is an experiment or jobs file, not a topology; give "
                               "the topology file it names");
        root.fail_here("describes no GPUs; give devices and links, or node, nodes and fabric");
    }
    root.finish();
    return spec;
}

Cluster load_cluster(const config::Document& doc, std::int64_t max_memory) {
    const TopologySpec spec = parse_topology(doc);
    check_size(spec, max_memory);
    return build_cluster(spec);
}

TopologySize estimate_size(const TopologySpec& spec) {
    // Measured (Release, docs/limits.md): about 260 bytes per directed link and 400 per device
    // with their routing tables, 80 per node slot; rounded up.
    constexpr double kBase = 16 << 20, kPerDevice = 512, kPerDirectedLink = 320, kPerNode = 128;
    TopologySize t;
    double links = static_cast<double>(spec.links.size());
    double node_slots = 0;
    t.devices = static_cast<double>(spec.devices.size());
    for (const auto& d : spec.devices)
        node_slots = std::max(node_slots, static_cast<double>(d.node) + 1);
    if (spec.node) {
        const NodeSpec& n = *spec.node;
        const double nodes = spec.nodes, gpus = n.gpus, nics = n.nics.count;
        double per_node_devices = gpus + nics, per_node_links = 0;
        switch (n.intra.kind) {
            case IntraKind::NvSwitch:
                per_node_devices += 1;
                per_node_links += gpus;
                break;
            case IntraKind::NvLinkMesh:
                per_node_links += gpus * (gpus - 1) / 2;
                break;
            case IntraKind::Pcie:
                per_node_devices += n.intra.pcie_switches + 1;
                per_node_links += gpus + n.intra.pcie_switches;
                break;
        }
        for (const auto& served : n.nics.serves)
            per_node_links += static_cast<double>(served.size());
        t.devices += nodes * per_node_devices;
        links += nodes * per_node_links;
        node_slots += nodes;
        if (spec.fabric) {
            // Each NIC takes one leaf port; every tier above adds at most as many links again,
            // and a switch has at least one port down.
            const double ports = nodes * nics;
            t.devices += 3 * ports;
            links += 4 * ports;
            // The tiers' own up-link counts (at most `up`, else `down`: an oversubscription is at
            // least 1) multiply: every leaf of a pod meets each of its u1 spines, every spine
            // its plane's u2 cores. Counted here so that `up: 100000000` or a core count that
            // would overflow an int is refused before anything is built.
            const FabricSpec& f = *spec.fabric;
            if (f.kind != FabricKind::SingleSwitch) {
                const auto ups = [](const TierSpec& tier) {
                    return static_cast<double>(tier.up ? *tier.up : tier.down.value_or(1));
                };
                // A leaf's `down` ports face NICs; partly filled leaves add one per rail.
                const double leaves =
                    std::ceil(ports / std::max(1, f.leaf.down.value_or(1))) + nics;
                const double u1 = ups(f.leaf);
                const double pods = f.kind == FabricKind::FatTree
                                        ? std::ceil(leaves / std::max(1, f.spine.down.value_or(1)))
                                        : 1;
                const double u2 = f.kind == FabricKind::FatTree ? ups(f.spine) : 0;
                // routing: adaptive builds each pod's spines and the cores as one switch, a
                // leaf's or a pod's up-links as one link (build.cpp merged_tiers).
                const bool merged = spec.routing == Routing::Adaptive;
                const double tier_devices = merged ? pods + 1 : pods * u1 + u1 * u2;
                const double tier_links = merged ? leaves + pods : leaves * u1 + pods * u1 * u2;
                t.devices += tier_devices;
                links += tier_links;
                t.fabric_tier_bytes = tier_devices * kPerDevice + 2 * tier_links * kPerDirectedLink;
                t.fabric_tier_where = u2 > u1 ? f.spine.up_where : f.leaf.up_where;
            }
        }
    }
    t.directed_links = 2 * links;
    t.bytes = kBase + t.devices * kPerDevice + t.directed_links * kPerDirectedLink +
              node_slots * kPerNode;
    return t;
}

void check_size(const TopologySpec& spec, std::int64_t max_memory) {
    const TopologySize t = estimate_size(spec);
    if (t.bytes <= static_cast<double>(max_memory)) return;
    const auto count = [](double v) {
        char text[64];
        std::snprintf(text, sizeof text, "%.3g", v);
        return std::string(text);
    };
    const bool tiers = 2 * t.fabric_tier_bytes > t.bytes && !t.fabric_tier_where.file.empty();
    const SourceLocation where = tiers       ? t.fabric_tier_where
                                 : spec.node ? spec.nodes_where
                                             : spec.where;
    throw ConfigError(
        where, "this topology would need about " + count(t.bytes / 1e9) +
                   " GB of memory to build (" + count(t.devices) + " devices, " +
                   count(t.directed_links) + " directed links), more than the limit of " +
                   format_bytes(Bytes{max_memory}) +
                   "; use fewer nodes, GPUs, NICs or fabric up-links, or raise the limit with "
                   "--max-memory");
}

}  // namespace cs::topology
