#include "topology/cluster.hpp"
#include "topology/graph.hpp"

#include <algorithm>
#include <bit>
#include <deque>
#include <functional>
#include <limits>
#include <queue>

#include "core/errors.hpp"
#include "core/hash.hpp"
#include "core/modp.hpp"

namespace cs::topology {

const char* device_kind_name(DeviceKind k) {
    return name_of(kDeviceKindNames, k).data();
}

const char* link_kind_name(LinkKind k) {
    return name_of(kLinkKindNames, k).data();
}

double SustainedRates::factor(double duty) const {
    if (tensor_throughput >= 1.0) return 1.0;
    if (from_duty >= 1.0) return duty >= 1.0 ? tensor_throughput : 1.0;
    const double over = std::clamp((duty - from_duty) / (1.0 - from_duty), 0.0, 1.0);
    return 1.0 - (1.0 - tensor_throughput) * over;
}

DeviceIndex Cluster::find_device(const std::string& id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? kNone : it->second;
}

std::string Cluster::link_name(LinkId link) const {
    const Link& l = links_.at(link);
    const std::string& from = devices_[l.from].id;
    const std::string& to = devices_[l.to].id;
    std::string name;
    name.reserve(from.size() + 2 + to.size());
    name += from;
    name += "->";
    name += to;
    return name;
}

std::vector<std::uint64_t> link_keys(const Cluster& cluster) {
    const auto& devices = cluster.devices();
    const auto& links = cluster.links();
    // The name "<from>-><to>" through its two device ids' FNV-1a, each id hashed once.
    std::vector<std::uint64_t> id(devices.size());
    for (std::size_t d = 0; d < devices.size(); ++d)
        id[d] = fnv1a(devices[d].id);
    std::vector<std::uint64_t> keys(links.size());
    for (std::size_t l = 0; l < links.size(); ++l) {
        const Link& link = links[l];
        std::uint64_t h = mix64(id[link.from] ^ 0x6a09e667f3bcc909);
        h = mix64(h ^ std::rotl(id[link.to], 23));
        h = mix64(h ^ (static_cast<std::uint64_t>(l) << 8 | static_cast<std::uint64_t>(link.kind)));
        h = mix64(h ^ std::bit_cast<std::uint64_t>(link.bandwidth.bytes_per_s));
        keys[l] = modp::of(h);
    }
    return keys;
}

bool Cluster::link_named(LinkId link, std::string_view name) const {
    const Link& l = links_.at(link);
    const std::string& from = devices_[l.from].id;
    const std::string& to = devices_[l.to].id;
    return name.size() == from.size() + 2 + to.size() && name.starts_with(from) &&
           name.substr(from.size(), 2) == "->" && name.ends_with(to);
}

const std::vector<std::int32_t>& Cluster::hops_to(DeviceIndex dst) const {
    auto it = hops_cache_.find(dst);
    if (it != hops_cache_.end()) return it->second;
    // Reverse BFS over incoming links; GPUs other than the destination are not expanded, so no
    // path transits a GPU.
    std::vector<std::int32_t> hops(devices_.size(), -1);
    std::deque<DeviceIndex> queue{dst};
    hops[dst] = 0;
    while (!queue.empty()) {
        const DeviceIndex v = queue.front();
        queue.pop_front();
        if (v != dst && devices_[v].kind == DeviceKind::Gpu) continue;
        for (LinkId l : in_links_[v]) {  // without failed links (with_faults)
            const DeviceIndex u = links_[l].from;
            if (hops[u] >= 0) continue;
            hops[u] = hops[v] + 1;
            queue.push_back(u);
        }
    }
    return hops_cache_.emplace(dst, std::move(hops)).first->second;
}

namespace {
std::uint64_t hash3(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
    std::uint64_t x = a * 0x9e3779b97f4a7c15ULL ^
                      (b + 0x632be59bd9b4e019ULL) * 0xbf58476d1ce4e5b9ULL ^
                      (c + 0x94d049bb133111ebULL);
    x ^= x >> 31;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    return x;
}
}  // namespace

namespace {
constexpr std::int32_t kFar = std::numeric_limits<std::int32_t>::max() / 4;

// The choices of one route among equal-cost next hops (Routing, cluster.hpp).
class Chooser {
  public:
    Chooser(Routing routing, int src, int dst, std::uint64_t flow_id)
        : routing_(routing),
          pair_(static_cast<std::uint64_t>(static_cast<std::uint32_t>(src)) << 32 |
                static_cast<std::uint32_t>(dst)),
          flow_id_(flow_id),
          rest_(static_cast<std::uint32_t>(dst)) {}
    // The index, below k, of the next hop taken at switch `at` among k candidates (adaptive:
    // as d_mod_k; its fabric has no choices, cluster.hpp).
    std::size_t operator()(std::size_t k, DeviceIndex at) {
        if (routing_ == Routing::Ecmp) return hash3(pair_, flow_id_, at) % k;
        if (k <= 1) return 0;
        // d-mod-k: the destination's digits in the mixed radix of the choices met so far.
        const std::size_t i = rest_ % k;
        rest_ /= k;
        return i;
    }

  private:
    Routing routing_;
    std::uint64_t pair_;
    std::uint64_t flow_id_;
    std::uint64_t rest_;
};

LinkId pick(const std::vector<LinkId>& candidates, Chooser& choose, DeviceIndex at) {
    return candidates[choose(candidates.size(), at)];
}
}  // namespace

void Cluster::route(int src, int dst, std::uint64_t flow_id, std::vector<LinkId>& out) const {
    if (src == dst) return;
    const int a = node_of_gpu(src), b = node_of_gpu(dst);
    if (a >= 0 && a == b) {
        if (route_in_node(src, dst, flow_id, out)) return;
    } else if (two_level_ && a >= 0 && b >= 0) {
        route_two_level(src, dst, flow_id, out);
        return;
    }
    route_general(src, dst, flow_id, out);
}

void Cluster::route_general(int src, int dst, std::uint64_t flow_id,
                            std::vector<LinkId>& out) const {
    const DeviceIndex s = gpu_device(src), d = gpu_device(dst);
    const auto& hops = hops_to(d);
    if (hops[s] < 0)
        throw NoPathError(
            src, dst, "no path from GPU " + std::to_string(src) + " to GPU " + std::to_string(dst));
    DeviceIndex cur = s;
    std::vector<LinkId> candidates;
    Chooser choose(routing_, src, dst, flow_id);
    while (cur != d) {
        candidates.clear();
        for (LinkId l : out_links_[cur]) {
            const DeviceIndex next = links_[l].to;
            if (hops[next] == hops[cur] - 1) candidates.push_back(l);
        }
        const LinkId chosen = pick(candidates, choose, cur);
        out.push_back(chosen);
        cur = links_[chosen].to;
    }
}

namespace {
// Reverse BFS inside one node towards `target`: dist[local index] in hops, kFar if unreachable.
// GPUs other than the target are reached but never expanded (no path transits a GPU).
template <typename Arc>
void node_bfs(const std::vector<std::uint32_t>& in_offsets, const std::vector<Arc>& in_arcs,
              const std::vector<std::int32_t>& node_of, const std::vector<std::uint8_t>& is_gpu,
              const std::vector<std::int32_t>& local, int node, DeviceIndex target,
              std::vector<std::int32_t>& dist, std::vector<DeviceIndex>& queue) {
    queue.clear();
    dist[static_cast<std::size_t>(local[target])] = 0;
    queue.push_back(target);
    for (std::size_t head = 0; head < queue.size(); ++head) {
        const DeviceIndex v = queue[head];
        if (v != target && is_gpu[v]) continue;
        const std::int32_t dv = dist[static_cast<std::size_t>(local[v])];
        for (std::uint32_t i = in_offsets[v]; i < in_offsets[v + 1]; ++i) {
            const DeviceIndex u = in_arcs[i].other;
            if (node_of[u] != node) continue;
            auto& du = dist[static_cast<std::size_t>(local[u])];
            if (du != kFar) continue;
            du = dv + 1;
            queue.push_back(u);
        }
    }
}
}  // namespace

bool Cluster::route_in_node(int src, int dst, std::uint64_t flow_id,
                            std::vector<LinkId>& out) const {
    const DeviceIndex s = gpu_device(src), d = gpu_device(dst);
    const int node = devices_[s].node;
    std::vector<std::int32_t> dist(node_devices_[static_cast<std::size_t>(node)].size(), kFar);
    std::vector<DeviceIndex> queue;
    node_bfs(in_offsets_, in_arcs_, node_of_device_, is_gpu_, local_index_, node, d, dist, queue);
    auto dist_of = [&](DeviceIndex v) { return dist[static_cast<std::size_t>(local_index_[v])]; };
    if (dist_of(s) == kFar) return false;
    std::vector<LinkId> candidates;
    Chooser choose(routing_, src, dst, flow_id);
    for (DeviceIndex cur = s; cur != d;) {
        candidates.clear();
        for (std::uint32_t i = out_offsets_[cur]; i < out_offsets_[cur + 1]; ++i) {
            const DeviceIndex next = out_arcs_[i].other;
            if (node_of_device_[next] == node && dist_of(next) == dist_of(cur) - 1 &&
                (next == d || !is_gpu_[next]))
                candidates.push_back(out_arcs_[i].link);
        }
        const LinkId chosen = pick(candidates, choose, cur);
        out.push_back(chosen);
        cur = links_[chosen].to;
    }
    return true;
}

const std::vector<std::uint16_t>& Cluster::fabric_hops_to(DeviceIndex target) const {
    constexpr std::uint16_t kUnreached = 0xffff;
    const auto t = static_cast<std::uint32_t>(local_index_[target]);
    auto& hops = fabric_hops_cache_[t];
    if (!hops.empty()) return hops;
    hops.assign(fabric_devices_.size(), kUnreached);
    std::vector<std::uint32_t> queue(fabric_devices_.size());
    std::uint32_t* const q = queue.data();
    std::uint16_t* const h = hops.data();
    if (q == nullptr || h == nullptr) throw SimulationError("topology", "no fabric to route over");
    const std::uint32_t* const offsets = fabric_in_offsets_.data();
    const std::uint32_t* const in = fabric_in_.data();
    std::size_t tail = 0;
    q[tail++] = t;
    h[t] = 0;
    for (std::size_t head = 0; head < tail; ++head) {
        const std::uint32_t v = q[head];
        if (h[v] >= kUnreached - 1)
            throw SimulationError("topology", "fabric deeper than 65534 hops");
        const auto next = static_cast<std::uint16_t>(h[v] + 1);
        for (std::uint32_t i = offsets[v], end = offsets[v + 1]; i < end; ++i) {
            const std::uint32_t u = in[i];
            if (h[u] == kUnreached) {
                h[u] = next;
                q[tail++] = u;
            }
        }
    }
    return hops;
}

namespace {
using EntryTables = std::vector<std::pair<const std::vector<std::uint16_t>*, std::int32_t>>;
// Hops from the fabric device of fabric-local index `local` to the destination through the
// cheapest of its node's entry switches (`entries`: each switch's hop table and remaining cost),
// kFar if none is reached.
inline std::int32_t entry_dist(const EntryTables& entries, std::int32_t local) {
    std::int32_t best = kFar;
    const auto idx = static_cast<std::size_t>(local);
    for (const auto& [hops, cost] : entries) {
        const std::uint16_t h = (*hops)[idx];
        if (h != 0xffff) best = std::min(best, static_cast<std::int32_t>(h) + cost);
    }
    return best;
}
}  // namespace

void Cluster::two_level_entries(int nb, DeviceIndex d) const {
    RouteScratch& sc = scratch_;
    // Destination side: hops inside node B to the destination GPU.
    sc.dist_b.assign(node_devices_[static_cast<std::size_t>(nb)].size(), kFar);
    node_bfs(in_offsets_, in_arcs_, node_of_device_, is_gpu_, local_index_, nb, d, sc.dist_b,
             sc.queue);
    // Fabric switches where traffic may enter node B, with the remaining hops from there.
    sc.entry_cost.clear();
    for (LinkId l : node_entries_[static_cast<std::size_t>(nb)]) {
        const DeviceIndex f = links_[l].to;
        if (f != d && is_gpu_[f]) continue;
        const std::int32_t cost = sc.dist_b[static_cast<std::size_t>(local_index_[f])];
        if (cost == kFar) continue;
        sc.entry_cost.emplace_back(links_[l].from, cost + 1);
    }
    std::sort(sc.entry_cost.begin(), sc.entry_cost.end());
    sc.entries.clear();
    for (std::size_t i = 0; i < sc.entry_cost.size(); ++i)
        if (i == 0 || sc.entry_cost[i].first != sc.entry_cost[i - 1].first)
            sc.entries.emplace_back(&fabric_hops_to(sc.entry_cost[i].first),
                                    sc.entry_cost[i].second);
}

void Cluster::two_level_source(int na, DeviceIndex s) const {
    // Source side: hops from each device of node A to the destination, leaving through its exits.
    // Nodes are small, so relax to a fixed point.
    RouteScratch& sc = scratch_;
    const auto& devs_a = node_devices_[static_cast<std::size_t>(na)];
    auto& dist_a = sc.dist_a;
    dist_a.assign(devs_a.size(), kFar);
    for (LinkId l : node_exits_[static_cast<std::size_t>(na)]) {
        const DeviceIndex u = links_[l].from;
        auto& du = dist_a[static_cast<std::size_t>(local_index_[u])];
        du = std::min(du, entry_dist(sc.entries, local_index_[links_[l].to]) + 1);
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (DeviceIndex v : devs_a) {
            if (v != s && is_gpu_[v]) continue;
            auto& dv = dist_a[static_cast<std::size_t>(local_index_[v])];
            for (std::uint32_t i = out_offsets_[v]; i < out_offsets_[v + 1]; ++i) {
                const DeviceIndex w = out_arcs_[i].other;
                if (node_of_device_[w] != na || is_gpu_[w]) continue;
                const std::int32_t via = dist_a[static_cast<std::size_t>(local_index_[w])] + 1;
                if (via < dv) {
                    dv = via;
                    changed = true;
                }
            }
        }
    }
}

void Cluster::route_two_level(int src, int dst, std::uint64_t flow_id,
                              std::vector<LinkId>& out) const {
    const DeviceIndex s = gpu_device(src), d = gpu_device(dst);
    const int na = node_of_device_[s], nb = node_of_device_[d];
    RouteScratch& sc = scratch_;
    two_level_entries(nb, d);
    two_level_source(na, s);
    const auto& entries = sc.entries;
    const auto& dist_a = sc.dist_a;
    const auto& dist_b = sc.dist_b;
    auto dist_of = [&](DeviceIndex v) -> std::int32_t {
        const int n = node_of_device_[v];
        if (n < 0) return entry_dist(entries, local_index_[v]);
        if (is_gpu_[v] && v != s && v != d) return kFar;
        if (n == na) return dist_a[static_cast<std::size_t>(local_index_[v])];
        if (n == nb) return dist_b[static_cast<std::size_t>(local_index_[v])];
        return kFar;
    };
    auto arc_dist = [&](const Arc& a) -> std::int32_t {
        const int n = a.other_node;
        if (n < 0) return entry_dist(entries, a.other_local);
        if (a.other_is_gpu && a.other != s && a.other != d) return kFar;
        if (n == na) return dist_a[static_cast<std::size_t>(a.other_local)];
        if (n == nb) return dist_b[static_cast<std::size_t>(a.other_local)];
        return kFar;
    };
    const std::uint16_t* single_table = entries.size() == 1 ? entries[0].first->data() : nullptr;
    const std::int32_t single_cost = entries.size() == 1 ? entries[0].second : 0;
    std::int32_t remaining = dist_of(s);
    if (remaining >= kFar)
        throw NoPathError(
            src, dst, "no path from GPU " + std::to_string(src) + " to GPU " + std::to_string(dst));
    Chooser choose(routing_, src, dst, flow_id);
    auto& candidates = sc.candidates;
    for (DeviceIndex cur = s; cur != d; --remaining) {
        candidates.clear();
        const std::int32_t want = remaining - 1;
        for (std::uint32_t i = out_offsets_[cur]; i < out_offsets_[cur + 1]; ++i) {
            const Arc& a = out_arcs_[i];
            // Fast path for the usual single entry switch: one table lookup per arc (an
            // unreached 0xffff never equals a real hop count).
            const bool hit =
                (a.other_node < 0 && single_table)
                    ? static_cast<std::int32_t>(single_table[a.other_local]) + single_cost == want
                    : arc_dist(a) == want;
            if (hit) candidates.push_back(i);
        }
        const Arc& chosen = out_arcs_[candidates[choose(candidates.size(), cur)]];
        out.push_back(chosen.link);
        cur = chosen.other;
    }
}

std::vector<std::int32_t> Cluster::fabric_reach(int src) const {
    // reach[f]: hops from `src` to fabric switch f (fabric-local index) through its node's
    // non-GPU devices, an exit link and fabric-to-fabric links only: the forward image of the
    // per-destination tables route_two_level() reads (fabric_hops_to), so that
    //   length(src, d) = min over entry links f -> e of node(d) of reach[f] + 1 + hops(e, d in
    //   node)
    // equals route_two_level()'s dist_a[src] by exchanging the two minima.
    const int na = node_of_gpu(src);
    const DeviceIndex s = gpu_device(src);
    const auto& devs_a = node_devices_[static_cast<std::size_t>(na)];
    std::vector<std::int32_t> dist_a(devs_a.size(), kFar);
    dist_a[static_cast<std::size_t>(local_index_[s])] = 0;
    std::vector<DeviceIndex> queue(1, s);
    for (std::size_t head = 0; head < queue.size(); ++head) {
        const DeviceIndex v = queue[head];
        const std::int32_t dv = dist_a[static_cast<std::size_t>(local_index_[v])];
        for (std::uint32_t i = out_offsets_[v]; i < out_offsets_[v + 1]; ++i) {
            const Arc& a = out_arcs_[i];
            if (a.other_node != na || a.other_is_gpu) continue;  // never through a GPU
            auto& dw = dist_a[static_cast<std::size_t>(a.other_local)];
            if (dw != kFar) continue;
            dw = dv + 1;
            queue.push_back(a.other);
        }
    }
    std::vector<std::int32_t> reach(fabric_devices_.size(), kFar);
    using Item = std::pair<std::int32_t, std::uint32_t>;  // (hops, fabric-local index)
    std::priority_queue<Item, std::vector<Item>, std::greater<>> open;
    for (LinkId l : node_exits_[static_cast<std::size_t>(na)]) {
        const DeviceIndex u = links_[l].from;
        if (u != s && is_gpu_[u]) continue;  // another GPU's own exit
        const std::int32_t du = dist_a[static_cast<std::size_t>(local_index_[u])];
        if (du == kFar) continue;
        const auto x = static_cast<std::uint32_t>(local_index_[links_[l].to]);
        if (du + 1 < reach[x]) {
            reach[x] = du + 1;
            open.emplace(du + 1, x);
        }
    }
    while (!open.empty()) {
        const auto [d, x] = open.top();
        open.pop();
        if (d != reach[x]) continue;
        const DeviceIndex v = fabric_devices_[x];
        for (std::uint32_t i = out_offsets_[v]; i < out_offsets_[v + 1]; ++i) {
            const Arc& a = out_arcs_[i];
            if (a.other_node >= 0) continue;
            const auto y = static_cast<std::uint32_t>(a.other_local);
            if (d + 1 < reach[y]) {
                reach[y] = d + 1;
                open.emplace(d + 1, y);
            }
        }
    }
    return reach;
}

void Cluster::route_lengths(int src, const std::vector<int>& dsts, std::vector<int>& out) const {
    out.clear();
    out.reserve(dsts.size());
    const int na = node_of_gpu(src);
    std::vector<LinkId> route_buf;
    auto by_route = [&](int dst) {
        route_buf.clear();
        route(src, dst, 0, route_buf);
        return static_cast<int>(route_buf.size());
    };
    std::vector<std::int32_t> reach;  // fabric_reach(src), made when first needed
    std::vector<std::int32_t> dist_b;
    std::vector<DeviceIndex> queue;
    for (int dst : dsts) {
        const int nb = node_of_gpu(dst);
        if (dst == src || !two_level_ || na < 0 || nb < 0 || na == nb) {
            out.push_back(by_route(dst));
            continue;
        }
        if (reach.empty()) reach = fabric_reach(src);
        const DeviceIndex d = gpu_device(dst);
        dist_b.assign(node_devices_[static_cast<std::size_t>(nb)].size(), kFar);
        node_bfs(in_offsets_, in_arcs_, node_of_device_, is_gpu_, local_index_, nb, d, dist_b,
                 queue);
        std::int32_t best = kFar;
        for (LinkId l : node_entries_[static_cast<std::size_t>(nb)]) {
            const DeviceIndex e = links_[l].to;
            if (e != d && is_gpu_[e]) continue;
            const std::int32_t inside = dist_b[static_cast<std::size_t>(local_index_[e])];
            const std::int32_t before =
                reach[static_cast<std::size_t>(local_index_[links_[l].from])];
            if (inside == kFar || before == kFar) continue;
            best = std::min(best, before + 1 + inside);
        }
        // No path: route() reports it as it would.
        out.push_back(best == kFar ? by_route(dst) : static_cast<int>(best));
    }
}

Time Cluster::route_latency(const std::vector<LinkId>& route) const {
    Time t = Time::zero();
    for (LinkId l : route)
        t += links_[l].latency;
    return t;
}

Bandwidth Cluster::route_bandwidth(const std::vector<LinkId>& route) const {
    if (route.empty()) return Bandwidth{0};
    double bw = links_[route.front()].bandwidth.bytes_per_s;
    for (LinkId l : route)
        bw = std::min(bw, links_[l].bandwidth.bytes_per_s);
    return Bandwidth{bw};
}

int ClusterBuilder::add_gpu_model(const GpuModel& model) {
    for (std::size_t i = 0; i < c_.models_.size(); ++i)
        if (c_.models_[i].name == model.name) return static_cast<int>(i);
    c_.models_.push_back(model);
    return static_cast<int>(c_.models_.size() - 1);
}

DeviceIndex ClusterBuilder::add_device(Device device) {
    const auto idx = static_cast<DeviceIndex>(c_.devices_.size());
    c_.by_id_.emplace(device.id, idx);
    if (device.kind == DeviceKind::Gpu) {
        device.gpu = static_cast<std::int32_t>(c_.gpu_devices_.size());
        c_.gpu_devices_.push_back(idx);
    }
    if (device.node >= c_.node_count_) c_.node_count_ = device.node + 1;
    c_.devices_.push_back(std::move(device));
    return idx;
}

LinkId ClusterBuilder::add_link(DeviceIndex from, DeviceIndex to, LinkKind kind, Bandwidth per_link,
                                Time latency, int count) {
    const auto id = static_cast<LinkId>(c_.links_.size());
    const bool inter = c_.devices_[from].node != c_.devices_[to].node ||
                       c_.devices_[from].node < 0 || c_.devices_[to].node < 0;
    const Bandwidth total{per_link.bytes_per_s * count};
    c_.links_.push_back(Link{from, to, kind, total, latency, count, id + 1, inter});
    c_.links_.push_back(Link{to, from, kind, total, latency, count, id, inter});
    return id;
}

void ClusterBuilder::reserve(std::size_t devices, std::size_t directed_links) {
    c_.devices_.reserve(devices);
    c_.by_id_.reserve(devices);
    c_.links_.reserve(directed_links);
}

void ClusterBuilder::set_generated_shape(const GeneratedShape& shape) {
    c_.shape_ = shape;
}

void ClusterBuilder::set_routing(Routing routing) {
    c_.routing_ = routing;
}

Cluster ClusterBuilder::build() {
    Cluster c = std::move(c_);
    c_ = Cluster{};
    auto graph = std::make_shared<ClusterGraph>(ClusterGraph{Graph(c.devices_.size())});
    Graph& g = graph->g;
    c.out_links_.assign(c.devices_.size(), {});
    c.in_links_.assign(c.devices_.size(), {});
    // Each device's link lists sized once (one allocation each, not one per doubling).
    std::vector<std::uint32_t> out_degree(c.devices_.size(), 0), in_degree(c.devices_.size(), 0);
    for (const Link& l : c.links_) {
        ++out_degree[l.from];
        ++in_degree[l.to];
    }
    for (std::size_t v = 0; v < c.devices_.size(); ++v) {
        g[v].device = static_cast<DeviceIndex>(v);
        c.out_links_[v].reserve(out_degree[v]);
        c.in_links_[v].reserve(in_degree[v]);
    }
    for (std::size_t l = 0; l < c.links_.size(); ++l) {
        boost::add_edge(c.links_[l].from, c.links_[l].to, EdgeProps{static_cast<LinkId>(l)}, g);
        c.out_links_[c.links_[l].from].push_back(static_cast<LinkId>(l));
        c.in_links_[c.links_[l].to].push_back(static_cast<LinkId>(l));
    }
    c.graph_ = std::move(graph);
    c.index_structure();
    return c;
}

}  // namespace cs::topology

namespace cs::topology {

void Cluster::index_structure() {
    node_devices_.assign(static_cast<std::size_t>(node_count_), {});
    local_index_.assign(devices_.size(), -1);
    fabric_devices_.clear();
    for (std::size_t v = 0; v < devices_.size(); ++v) {
        const int n = devices_[v].node;
        auto& group = n < 0 ? fabric_devices_ : node_devices_[static_cast<std::size_t>(n)];
        local_index_[v] = static_cast<std::int32_t>(group.size());
        group.push_back(static_cast<DeviceIndex>(v));
    }
    node_of_device_.resize(devices_.size());
    is_gpu_.resize(devices_.size());
    for (std::size_t v = 0; v < devices_.size(); ++v) {
        node_of_device_[v] = devices_[v].node;
        is_gpu_[v] = devices_[v].kind == DeviceKind::Gpu ? 1 : 0;
    }
    auto make_csr = [&](const std::vector<std::vector<LinkId>>& lists, bool outgoing,
                        std::vector<std::uint32_t>& offsets, std::vector<Arc>& arcs) {
        offsets.assign(devices_.size() + 1, 0);
        arcs.clear();
        arcs.reserve(links_.size());
        for (std::size_t v = 0; v < devices_.size(); ++v) {
            for (LinkId l : lists[v]) {
                const DeviceIndex other = outgoing ? links_[l].to : links_[l].from;
                arcs.push_back({l, other, devices_[other].node, local_index_[other],
                                devices_[other].kind == DeviceKind::Gpu});
            }
            offsets[v + 1] = static_cast<std::uint32_t>(arcs.size());
        }
    };
    make_csr(out_links_, true, out_offsets_, out_arcs_);
    make_csr(in_links_, false, in_offsets_, in_arcs_);
    fabric_in_offsets_.assign(fabric_devices_.size() + 1, 0);
    fabric_in_.clear();
    for (std::size_t f = 0; f < fabric_devices_.size(); ++f) {
        for (LinkId l : in_links_[fabric_devices_[f]]) {
            const DeviceIndex u = links_[l].from;
            if (devices_[u].node < 0)
                fabric_in_.push_back(static_cast<std::uint32_t>(local_index_[u]));
        }
        fabric_in_offsets_[f + 1] = static_cast<std::uint32_t>(fabric_in_.size());
    }
    fabric_hops_cache_.assign(fabric_devices_.size(), {});
    node_entries_.assign(static_cast<std::size_t>(node_count_), {});
    node_exits_.assign(static_cast<std::size_t>(node_count_), {});
    two_level_ = true;
    for (std::size_t l = 0; l < links_.size(); ++l) {
        const int from = devices_[links_[l].from].node, to = devices_[links_[l].to].node;
        if (from == to || link_failed(static_cast<LinkId>(l))) continue;
        if (from >= 0 && to >= 0) two_level_ = false;  // a direct cable between two nodes
        if (from < 0) node_entries_[static_cast<std::size_t>(to)].push_back(static_cast<LinkId>(l));
        if (to < 0) node_exits_[static_cast<std::size_t>(from)].push_back(static_cast<LinkId>(l));
    }
}

Cluster Cluster::with_faults(const std::vector<LinkId>& failed,
                             const std::vector<std::pair<LinkId, Bandwidth>>& bandwidths) const {
    Cluster c = *this;
    for (const auto& [link, bandwidth] : bandwidths)
        c.links_.at(link).bandwidth = bandwidth;
    if (failed.empty()) return c;
    c.failed_.assign(links_.size(), 0);
    for (LinkId l : failed)
        c.failed_.at(l) = 1;
    const auto keep = [&](std::vector<std::vector<LinkId>>& lists) {
        for (auto& list : lists)
            std::erase_if(list, [&](LinkId l) { return c.failed_[l] != 0; });
    };
    keep(c.out_links_);
    keep(c.in_links_);
    c.hops_cache_.clear();
    c.index_structure();
    return c;
}

}  // namespace cs::topology
