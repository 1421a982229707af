#include "network/plan_calibration.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace cs::network::detail {

double PlanCalibration::nominal_capacity(LinkId l) const {
    const auto& links = cluster_.links();
    if (l >= links.size())
        return links[l - links.size()].bandwidth.bytes_per_s * config_.nvls_efficiency;
    return links[l].bandwidth.bytes_per_s *
           config_.link_efficiency[static_cast<int>(links[l].kind)];
}

double PlanCalibration::nominal_rate(const FlowTemplate& f) const {
    double route = nominal_capacity(f.path.front());
    for (LinkId l : f.path)
        route = std::min(route, nominal_capacity(l));
    return f.rate_cap > 0 ? std::min(f.rate_cap, route) : route;
}

void PlanCalibration::apply_operation(Plan& plan, CollectiveKind kind) const {
    const auto& links = cluster_.links();
    const auto& efficiency = config_.op_efficiency[static_cast<int>(kind)];
    const auto& latency = config_.op_latency[static_cast<int>(kind)];
    for (Phase& phase : plan.phases)
        for (FlowTemplate& f : phase.flows) {
            // Plans are cached: the cap is set against the nominal capacities, whatever the
            // links' capacities are when the plan is first built.
            double route = nominal_capacity(f.path.front());
            for (LinkId l : f.path)
                route = std::min(route, nominal_capacity(l));
            double cap = route;
            for (LinkId l : f.path) {
                if (l >= links.size()) continue;
                const int k = static_cast<int>(links[l].kind);
                cap = std::min(cap, links[l].bandwidth.bytes_per_s * efficiency[k]);
                plan.fixed_latency = std::max(plan.fixed_latency, latency[k]);
            }
            f.rate_cap = cap < route ? cap : 0;
        }
}

void PlanCalibration::apply_protocol(Plan& plan, CollectiveKind kind, Protocol protocol,
                                     const std::vector<int>& ranks) const {
    // A protocol asked for by name runs with NCCL's constants where the configuration has
    // none (calibration: nominal).
    static const auto nccl = nccl_protocols();
    const auto index = static_cast<std::size_t>(protocol);
    const ProtocolConstants& c =
        config_.protocols[index].enabled ? config_.protocols[index] : nccl[index];
    const auto& links = cluster_.links();
    RouteClass route = RouteClass::NvLink;
    for (const Phase& phase : plan.phases)
        for (const FlowTemplate& f : phase.flows)
            for (LinkId l : f.path) {
                if (l >= links.size()) continue;
                const auto k = links[l].kind;
                if (k == topology::LinkKind::InfiniBand || k == topology::LinkKind::Ethernet)
                    route = RouteClass::Network;
                else if (k == topology::LinkKind::Pcie && route == RouteClass::NvLink)
                    route = RouteClass::Pcie;
            }
    bool across_nodes = false;
    for (int r : ranks)
        across_nodes |= cluster_.node_of_gpu(r) != cluster_.node_of_gpu(ranks.front());
    const bool tree =
        plan.algorithm == Algorithm::Tree || plan.algorithm == Algorithm::Hierarchical;
    // The largest latency factor over the plan's link kinds (op_protocol_latency).
    double scale = 0;
    const auto& factors = config_.op_protocol_latency[static_cast<int>(kind)];
    for (const Phase& phase : plan.phases)
        for (const FlowTemplate& f : phase.flows)
            for (LinkId l : f.path)
                if (l < links.size())
                    scale = std::max(scale, factors[static_cast<int>(links[l].kind)]);
    const auto scaled = [scale](Time t) {
        return Time::ps(std::llround(static_cast<double>(t.count_ps()) * scale));
    };
    plan.protocol = protocol;
    plan.protocol_step = scaled(c.step[static_cast<std::size_t>(route)]);
    // The operation's fixed cost (op_latency, already in fixed_latency) is paid under every
    // protocol; the protocol's base on top of it.
    plan.fixed_latency += scaled(tree ? c.base_tree : c.base_ring);
    const double fraction =
        kind == CollectiveKind::AllReduce || across_nodes ? c.bandwidth : c.bandwidth_one_node;
    double limit = std::numeric_limits<double>::infinity();
    if (c.channel_rate > 0) limit = c.channel_rate * config_.channels;
    const double total = across_nodes ? c.max_rate_across_nodes : c.max_rate;
    if (total > 0) limit = std::min(limit, total);
    for (Phase& phase : plan.phases)
        for (FlowTemplate& f : phase.flows)
            f.rate_cap = std::min(nominal_rate(f) * fraction, limit);
}

PlanWords PlanCalibration::calibration_words(CollectiveKind kind, Protocol protocol) const {
    PlanWords w{};
    std::size_t i = 3;
    for (int l = 0; l < kLinkKinds; ++l) {
        w[i++] = std::bit_cast<std::uint64_t>(config_.link_efficiency[l]);
        w[i++] = std::bit_cast<std::uint64_t>(config_.op_efficiency[static_cast<int>(kind)][l]);
        w[i++] =
            static_cast<std::uint64_t>(config_.op_latency[static_cast<int>(kind)][l].count_ps());
    }
    w[i++] = std::bit_cast<std::uint64_t>(config_.nvls_efficiency);
    if (protocol != Protocol::Simple)
        for (int l = 0; l < kLinkKinds; ++l)
            w[i++] = std::bit_cast<std::uint64_t>(
                config_.op_protocol_latency[static_cast<int>(kind)][l]);
    if (protocol == Protocol::Simple) return w;
    const ProtocolConstants& c = config_.protocols[static_cast<std::size_t>(protocol)];
    w[i++] = static_cast<std::uint64_t>(c.base_ring.count_ps());
    w[i++] = static_cast<std::uint64_t>(c.base_tree.count_ps());
    for (Time t : c.step)
        w[i++] = static_cast<std::uint64_t>(t.count_ps());
    for (double d :
         {c.bandwidth, c.bandwidth_one_node, c.channel_rate, c.max_rate, c.max_rate_across_nodes})
        w[i++] = std::bit_cast<std::uint64_t>(d);
    w[i] = static_cast<std::uint64_t>(config_.channels);
    return w;
}

}  // namespace cs::network::detail
