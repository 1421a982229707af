// What a collective plan takes of the network's configuration (NetworkConfig's operation and
// protocol calibration), on the nominal capacities of the cluster's links: the rate caps and fixed
// costs made into a plan when it is built, and the configuration's words in a kept plan's key.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "network/collectives.hpp"
#include "network/network.hpp"
#include "topology/cluster.hpp"

namespace cs::network::detail {

// A kept collective plan's key besides its ranks (PlanCalibration::calibration_words).
// (Besides the configuration of Simple, the protocol's constants: protocol_words.)
using PlanWords = std::array<std::uint64_t, 4 + 4 * kLinkKinds + 11>;

// The calibration of one network: its cluster and configuration, both outliving it.
class PlanCalibration {
  public:
    PlanCalibration(const topology::Cluster& cluster, const NetworkConfig& config)
        : cluster_(cluster), config_(config) {}
    using LinkId = topology::LinkId;

    // The capacity a solver link was built with, before any set_link_capacity().
    double nominal_capacity(LinkId l) const;
    // A flow's rate alone on the nominal capacities: its route's bottleneck, or its cap below it.
    double nominal_rate(const FlowTemplate& f) const;
    // The operation's calibration on the plan's links (NetworkConfig::op_efficiency and
    // op_latency): a rate cap on each flow that one of its links' kinds limits below the route's
    // bottleneck, and the plan's fixed cost, the largest over the kinds it crosses. Virtual links
    // (numbered after the cluster's) have no kind and are skipped.
    void apply_operation(Plan& plan, CollectiveKind kind) const;
    // LL and LL128 on a plan built for Simple (apply_operation done): their per-step latency on
    // the plan's route class, their base in place of Simple's fixed cost, and each flow's rate
    // cap at the protocol's fraction of what it reaches under Simple, within the protocol's
    // channel and total limits (ProtocolConstants).
    void apply_protocol(Plan& plan, CollectiveKind kind, Protocol protocol,
                        const std::vector<int>& ranks) const;
    // What apply_operation and apply_protocol read of the configuration for operation `kind`
    // and `protocol`, bit for bit, after three words left for the group, the operation and the
    // algorithm.
    PlanWords calibration_words(CollectiveKind kind, Protocol protocol) const;
    // A phase's steps' delay. Simple: per step the configured step overhead (which p2p plans
    // kept with the cluster do not carry) and the phase's route latency. LL and LL128: per step
    // the protocol's latency on the route's class, which NCCL measures hop to hop (the link's
    // own latency is in it).
    Time phase_delay(const Plan& plan, const Phase& p) const {
        const Time step = plan.protocol == Protocol::Simple ? config_.step_overhead + p.latency
                                                            : plan.protocol_step;
        return step * static_cast<std::int64_t>(p.steps);
    }

  private:
    const topology::Cluster& cluster_;
    const NetworkConfig& config_;
};

}  // namespace cs::network::detail
