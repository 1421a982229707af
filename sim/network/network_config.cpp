// The network's configuration: names of its enumerations, the calibrated configuration and
// NCCL's protocol constants, and the bus-bandwidth factors of the collectives.
#include <array>

#include "network/network.hpp"

namespace cs::network {

const char* collective_name(CollectiveKind k) {
    return name_of(kCollectiveNames, k).data();
}

const char* protocol_name(Protocol p) {
    return name_of(kProtocolNames, p).data();
}

const char* fidelity_name(Fidelity f) {
    return name_of(kFidelityNames, f).data();
}

NetworkConfig NetworkConfig::calibrated(Fidelity fidelity) {
    NetworkConfig c;
    c.fidelity = fidelity;
    c.step_overhead = kCalibratedStepOverhead;
    const int nvlink = static_cast<int>(topology::LinkKind::NvLink);
    c.link_efficiency[nvlink] = kCalibratedNvLinkSend;
    const auto set = [&](CollectiveKind k, double efficiency, Time base) {
        c.op_efficiency[static_cast<int>(k)][nvlink] = efficiency;
        c.op_latency[static_cast<int>(k)][nvlink] = base;
    };
    set(CollectiveKind::AllReduce, kCalibratedNvLinkAllReduce, Time::zero());
    set(CollectiveKind::AllGather, kCalibratedNvLinkAllGather, kCalibratedNvLinkAllGatherBase);
    set(CollectiveKind::ReduceScatter, kCalibratedNvLinkReduceScatter,
        kCalibratedNvLinkReduceScatterBase);
    set(CollectiveKind::SendRecv, kCalibratedNvLinkSendRecv, kCalibratedNvLinkSendRecvBase);
    c.link_efficiency[static_cast<int>(topology::LinkKind::NvSwitch)] =
        kCalibratedNvSwitchEfficiency;
    c.nvls_efficiency = kCalibratedNvlsEfficiency;
    c.protocols = nccl_protocols();
    return c;
}

std::array<ProtocolConstants, kProtocols> nccl_protocols() {
    // NCCL 2.19-2.28 src/graph/tuning.cc: baseLat and the ring's hwLat (NVLink, PCI, NET) in
    // us; LL's busBw x 1/4 (all_reduce, or across nodes) or 1/3, at most llMaxBws (Hopper: 87.7
    // GB/s on one node, 19.0 across four or more); LL128's busBw x 0.92 (120/128), at most
    // perChMaxRingLL128Bws (Hopper 36.7 GB/s) per channel.
    std::array<ProtocolConstants, kProtocols> p{};
    auto& ll = p[static_cast<std::size_t>(Protocol::Ll)];
    ll.enabled = true;
    ll.base_ring = Time::ns(6600);
    ll.base_tree = Time::ns(6800);
    ll.step = {Time::ns(600), Time::ns(1000), Time::ns(2700)};
    ll.bandwidth = 1.0 / 4;
    ll.bandwidth_one_node = 1.0 / 3;
    ll.max_rate = 87.7e9;
    ll.max_rate_across_nodes = 19.0e9;
    auto& ll128 = p[static_cast<std::size_t>(Protocol::Ll128)];
    ll128.enabled = true;
    ll128.base_ring = ll128.base_tree = Time::ns(14000);
    ll128.step = {Time::ns(1900), Time::ns(2500), Time::ns(4000)};
    ll128.bandwidth = ll128.bandwidth_one_node = 0.92;
    ll128.channel_rate = 36.7e9;
    return p;
}

double busbw_factor(CollectiveKind kind, int ranks) {
    const double n = ranks;
    if (ranks < 2) return 1.0;
    switch (kind) {
        case CollectiveKind::AllReduce:
            return 2 * (n - 1) / n;
        case CollectiveKind::AllGather:
        case CollectiveKind::ReduceScatter:
        case CollectiveKind::AllToAll:
            return (n - 1) / n;
        case CollectiveKind::Broadcast:
        case CollectiveKind::SendRecv:
            return 1.0;
    }
    return 1.0;
}

}  // namespace cs::network
