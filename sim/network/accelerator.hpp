// One seam for speed in the network layer (docs/architecture.md, "One seam for speed"): what lets
// a network give the model's results (network.hpp) with less work, kept apart from the model.
//
//   KeptState    what the networks on one cluster keep for each other: the links' scaled
//                capacities and the kept point-to-point and collective plans, communicators and
//                send routes. Owned by the caller: a replay for the networks of its run (its own
//                and those its blocking collectives are costed on), a sweep for all its runs on
//                one cluster (session/sweep_cache.hpp). Handed to make_network and
//                isolated_collective_time; a network given one takes its fast paths.
//   Accelerator  the operations only such a network offers (Network::accelerator()): member and
//                replica folding, a message's member parts sent at once, per-link totals held
//                to the end of the run.
//   SummingObserver (network.hpp)  an observer that only sums per link, which such a network
//                may tell sums instead of flows.
//
// None changes a result: `--no-fast-paths` (no KeptState, no accelerator, no fold, no sketch)
// gives the same summaries, traces and sweep tables byte for byte, which CI checks
// (tests/CMakeLists.txt, golden_no_fast_paths and sweep_no_fast_paths).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/units.hpp"
#include "network/network.hpp"
#include "topology/cluster.hpp"

namespace cs::network {

// The network's kept plans (defined in network.cpp; read by it and plan_book.cpp).
struct KeptPlans;

class KeptState {
  public:
    // For the networks on `cluster`, which must outlive this.
    explicit KeptState(const topology::Cluster& cluster);
    ~KeptState();
    KeptState(const KeptState&) = delete;
    KeptState& operator=(const KeptState&) = delete;

    const topology::Cluster& cluster() const { return cluster_; }

    // The per-link capacities a network starts from: each directed link's bandwidth times
    // `per_kind[its kind]`, then each link's bandwidth again times `nvls` (2 x links() entries),
    // and which link kinds occur (bit k for LinkKind k). The last kKeptCapacities sets asked for
    // are kept (a network per run and per costed collective built its own: 21 MB at 16,384
    // GPUs). `check`, when given, sees a new set's `kinds` before it is kept and may throw: a
    // set refused is not kept (it would push out a good one).
    struct ScaledCapacities {
        std::array<double, 5> per_kind{};
        double nvls = 0;
        std::vector<double> capacity;
        unsigned kinds = 0;
    };
    static constexpr std::size_t kKeptCapacities = 2;
    std::shared_ptr<const ScaledCapacities> scaled_capacities(
        const std::array<double, 5>& per_kind, double nvls,
        const std::function<void(unsigned kinds)>& check = {});
    // The same, made and kept by no one (a network without a KeptState).
    static std::shared_ptr<const ScaledCapacities> make_scaled_capacities(
        const topology::Cluster& cluster, const std::array<double, 5>& per_kind, double nvls,
        const std::function<void(unsigned kinds)>& check = {});

    // The capacities a network of `config` on `cluster` starts from (kept by `kept`, the
    // cluster's own KeptState, when not null; the network checks that it is): each link's bandwidth
    // times its kind's efficiency, then one virtual link per real one after them
    // (nvls_virtual_link: the NVLS rate cap of a GPU-NVSwitch link, unused but positive for the
    // others). Throws ConfigError for an operation, NVLS or (occurring) link kind's efficiency
    // outside (0, 1], before a set is kept (a kept set would be found, unchecked, by the next
    // network).
    static std::shared_ptr<const ScaledCapacities> network_capacities(
        KeptState* kept, const topology::Cluster& cluster, const NetworkConfig& config);

    // The kept plans, made by the first network that asks (network.cpp).
    std::shared_ptr<KeptPlans>& plans() { return plans_; }

  private:
    const topology::Cluster& cluster_;
    std::vector<std::shared_ptr<const ScaledCapacities>> capacities_;  // newest last
    std::shared_ptr<KeptPlans> plans_;
};

class Accelerator {
  public:
    virtual ~Accelerator() = default;

    // A message of `size` bytes from srcs[i] to dsts[i] for every i (as many of each), all
    // started now; returns how many completions the client will be told of with `token`. Outside
    // `flow` nothing is shared, so each message's time is its own and the network tells the
    // client once, when the last has arrived: the times, link notifications (pair by pair, as
    // send() makes them) and that last completion are those of one send() per pair, with one
    // event instead of one per pair. Under `flow`, when there are two pairs or more, the routes
    // are the cluster's own, and every pair's message is a single flow that starts after one
    // delay (the network's ready point-to-point records), the flows start from one event as one
    // send() per pair would start them (in pair order, at one instant), and the client is told
    // once, when the last ends (at the start for a message of no bytes); otherwise it is one
    // send() per pair, each told.
    virtual int send_together(std::span<const int> srcs, std::span<const int> dsts, Bytes size,
                              std::uint64_t token) = 0;
    // Member folding (docs/network.md, "Folding"). The caller promises to start every transfer
    // of `classes` on all `copies` members at once, with the same size and token, and asks the
    // network to carry member 0's only. Accepted (true) only if that is exact: the `flow`
    // fidelity, no link capacity changed so far, and for every class the members' plans are the
    // same phase for phase and flow for flow (steps, latencies, bytes, rate caps, capacities)
    // over links that one map per member carries from member 0's routes onto member m's, the
    // members' link sets pairwise disjoint. The members then never share a link, each member's
    // max-min problem is the image of member 0's, and member 0's flows finish when all copies
    // would. Observers still see every copy's flows and link rates (mapped). Once accepted the
    // caller starts member 0's transfers only; a capacity change is then an error, and a flow
    // outside the checked classes too (SimulationError). On refusal `why` says what failed.
    virtual bool fold(int copies, const std::vector<FoldClass>& classes, std::string& why) = 0;
    // The copies of the accepted fold, 1 without.
    virtual int fold_copies() const = 0;

    // Link chains (`flow` only, before any flow starts, no capacity changed or scheduled and the
    // cluster's own routes): a device other than a GPU joined to exactly two others, one link
    // each way (a NIC between its GPU and its leaf port), makes the link into it and the link on
    // out of it carry the same flows, always: routes never turn back nor start or end there. Of
    // each such chain of links the solver then keeps only the one of least capacity (ties: the
    // lowest id), which was always the one the progressive filling saturated first; the others
    // could never bind. Rates, finish times and the order of ties are those of the full paths;
    // observers are told of every link of a chain (its rate notifications repeated for each).
    // Afterwards a capacity change or a change of routes is an error (SimulationError). Returns
    // whether chains were found and merged.
    virtual bool merge_link_chains() = 0;

    // Replica folding (docs/network.md, "Folding"), `analytical` and `ideal` only, where a
    // transfer's time depends on its own route alone. p2p_cost: what a message from src to dst
    // costs on its route, as start() times it: `delay` (latencies and step overheads) plus its
    // bytes over `rate` (the route's bottleneck in bytes/s; 0 under `ideal`, where it is free).
    // Two messages with equal costs take equal times whatever their size. account_send: the
    // observers are told of the flows of send(src, dst, size) as if it had started now (its own
    // route, bytes and stand-alone time), but nothing is scheduled and no client is called: a
    // folded replica's message whose time its representative's stands for. SimulationError under
    // `flow` (flows there share links, so no message stands for another's time).
    struct RouteCost {
        Time delay;
        double rate = 0;
        bool operator==(const RouteCost&) const = default;
    };
    virtual RouteCost p2p_cost(int src, int dst) = 0;
    // With `count` > 1 it stands for `count` such sends: allowed only when accounts_in_bulk().
    virtual void account_send(int src, int dst, Bytes size, std::int64_t count = 1) = 0;
    // Whether no observer needs each flow's start time (SummingObserver), so
    // that equal sends may be accounted at once, at the end of a run.
    virtual bool accounts_in_bulk() const = 0;
    // Many GPU pairs at once (a folded replica class's followers, every replica's pipeline
    // pairs): send_routes resolves the routes of `pairs` (src, dst) once; cost(i) is
    // p2p_cost(pairs[i]), and account_sends(routes, size, count) tells the observers exactly
    // what account_send(src, dst, size, count) would for each pair in turn, in pair order. A
    // network on a cluster that keeps its routes keeps these too (a function of the cluster, the
    // pairs and the link efficiencies), so a sweep's later runs of a shape take them as they are.
    class SendRoutes {
      public:
        virtual ~SendRoutes() = default;
        virtual std::size_t size() const = 0;
        virtual RouteCost cost(std::size_t i) const = 0;
    };
    virtual std::shared_ptr<const SendRoutes> send_routes(
        const std::vector<std::pair<int, int>>& pairs) = 0;
    virtual void account_sends(const SendRoutes& routes, Bytes size, std::int64_t count = 1) = 0;

    // Lets the network hold the per-link totals it tells observers that take them
    // (SummingObserver::on_link_totals) and tell each distinct one once, multiplied by the
    // transfers it stands for, at flush_link_totals(); the sums are the same (whole bytes and
    // picoseconds). Whoever calls it must flush before the observers are read (replay::Replay
    // does, at the end of the iteration, for a network of its own). Without it the totals are
    // told as each transfer starts. Under `flow` it also lets observers added after it that take
    // link tallies (SummingObserver::takes_link_tallies) be told their shared flows as
    // per-link tallies at the flush instead of flow by flow.
    virtual void hold_link_totals() = 0;
    // Tells the held totals and the link tallies since the last flush, and under member folding
    // tells the observers that copy link images (SummingObserver::copies_link_images) which
    // links mirror member 0's. Called at the end of every iteration whether totals are held or
    // not.
    virtual void flush_link_totals() = 0;
};

}  // namespace cs::network
