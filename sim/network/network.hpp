// The network model: point-to-point transfers and collectives between GPUs, replayed on the
// engine over a frozen Cluster.
//
// Clients (the replay layer) start transfers with a 64-bit token and are called back through
// TransferClient when the last byte has arrived. Three fidelities:
//   ideal       every transfer completes at the time it starts;
//   analytical  alpha-beta per route (sum of hop latencies + bytes / bottleneck bandwidth), no
//               sharing between transfers;
//   flow        every transfer is a flow on its route; flows sharing a directed link share its
//               capacity max-min fairly, recomputed whenever a flow starts or ends or a link's
//               capacity changes.
// Link capacities may change during a run (set_link_capacity, schedule_link_capacity): a degraded
// link. Routes do not follow capacities: they come from the topology alone, so new transfers keep
// using a link whose capacity dropped, even to 0. A failed link is a change of routes
// (schedule_routing): traffic moves to the remaining equal-cost paths.
// Collectives are decomposed into point-to-point steps the way NCCL runs them (ring, tree,
// hierarchical, pairwise all-to-all, NVLS), each step a set of flows.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/hash.hpp"
#include "core/modp.hpp"
#include "core/name_table.hpp"
#include "core/units.hpp"
#include "engine/simulation.hpp"
#include "network/collectives.hpp"
#include "topology/cluster.hpp"

namespace cs::network {

enum class Fidelity : std::uint8_t { Ideal, Analytical, Flow };
// The names of the fidelities in experiment files (`network.model`) and on command lines, the
// default first.
inline constexpr std::array<Named<Fidelity>, 3> kFidelityNames{{
    {"flow", Fidelity::Flow},
    {"analytical", Fidelity::Analytical},
    {"ideal", Fidelity::Ideal},
}};
const char* fidelity_name(Fidelity f);  // "ideal", "analytical", "flow"

inline constexpr int kLinkKinds = 5;

// Calibration (docs/network.md, "Calibration"); every constant comes from a microbenchmark, none
// from the collective checks of issue 4 (8-GPU ring and NVLS busbw).
//
// Direct NVLink (`nvlink` links): ../shared/validation/h200-calibration.json, nccl_two_gpus, two
// H200 over 18 NVLink 4 links = 450 GB/s per direction, 1 us per hop as in
// topologies/h200-2gpu-nvlink.yaml. tools/fit_nccl_2gpu.py fits, per operation, the time
//   t = base + steps x (step_overhead + 1 us) + wire bytes / (efficiency x 450 GB/s)
// to the measured sizes after removing kHostLaunchOverhead (minimax of the relative error; sizes
// below 16 MiB are dominated by the launch). all_reduce (2 steps, no base) sets the step overhead
// every step pays; the others keep it and fit a fixed cost per collective.
//   operation            sizes          efficiency  base     max error
//   all_reduce           16 MiB-1 GiB   0.669       -        6.3%   (step overhead 8.6 us)
//   all_gather           16 MiB-1 GiB   0.590       18 us    6.8%
//   reduce_scatter       16 MiB-1 GiB   0.563       16.5 us  8.2%
//   sendrecv (exchange)  16 MiB-1 GiB   0.701       77 us    9.7%
//   send (one way)       64 MiB-1 GiB   0.843       0        2.5%
// A single send is the fastest: its efficiency is the link's own, and point-to-point messages
// (pipeline activations and gradients) run at it with no fixed cost. The collectives' lower rates
// are per-flow caps (NCCL's kernels for them drive the bond more slowly). The exchange's 77 us is
// most likely the launch of its second operation from Python (its floor at small sizes is 80-100
// us above the others'), which overlaps the transfer by an amount the data does not show; it is
// kept for the sendrecv collective only. all_to_all and broadcast have no measurement and get the
// link's rate.
inline constexpr double kCalibratedNvLinkSend = 0.843;
inline constexpr double kCalibratedNvLinkAllReduce = 0.669;
inline constexpr double kCalibratedNvLinkAllGather = 0.590;
inline constexpr double kCalibratedNvLinkReduceScatter = 0.563;
inline constexpr double kCalibratedNvLinkSendRecv = 0.701;
inline constexpr Time kCalibratedNvLinkAllGatherBase = Time::ns(18000);
inline constexpr Time kCalibratedNvLinkReduceScatterBase = Time::ns(16500);
inline constexpr Time kCalibratedNvLinkSendRecvBase = Time::ns(77000);
inline constexpr Time kCalibratedStepOverhead = Time::ns(8600);
// NVSwitch ports (`nvswitch` links): nvbandwidth's device-to-device copy between two GPUs of an
// 8 x H200 NVSwitch node, 396.40 GB/s of the port's 450 GB/s per direction (published.md 7.4,
// MLENG). Applied to every NVSwitch generation (no A100 measurement of its own).
inline constexpr double kCalibratedNvSwitchEfficiency = 396.40 / 450.0;
// NVLS (NVLink SHARP) traffic is issued by SMs as multimem loads and stores; no microbenchmark of
// it is in the data, so its rate on each GPU-NVSwitch link is taken as the NCCL all-reduce
// kernel's rate on the direct NVLink (the fit above) times the link's nominal bandwidth.
inline constexpr double kCalibratedNvlsEfficiency = kCalibratedNvLinkAllReduce;
// The launch of a collective from Python included in those measurements (their own note: about
// 50 us). Host time: the network never adds it; `clustersim collective --host-overhead 50us`
// adds it to each row to compare with the measurements as taken.
inline constexpr Time kHostLaunchOverhead = Time::us(50);

// NCCL's LL and LL128 protocols as its tuning model (src/graph/tuning.cc) costs them
// (docs/network.md, "Protocols"). Simple is the calibrated model of NetworkConfig itself.
struct ProtocolConstants {
    bool enabled = false;  // Auto may pick it
    // Paid once per collective: NCCL's baseLat for rings (ring, pairwise, direct, broadcast) and
    // for trees (tree, hierarchical).
    Time base_ring, base_tree;
    // Per pipeline step, by the plan's route class (RouteClass: NVLink or NVSwitch, PCIe,
    // network): NCCL's hwLat for rings. It replaces Simple's per-step cost (step_overhead plus
    // the route's link latencies): NCCL measures it hop to hop, the links' own latency included
    // (PlanCalibration::phase_delay, network/plan_calibration.hpp).
    std::array<Time, 3> step{};
    // Fraction of Simple's per-flow rate reached: `bandwidth` for all_reduce and across nodes,
    // `bandwidth_one_node` for the other operations inside one node (NCCL's LL: 1/4 and 1/3).
    double bandwidth = 1, bandwidth_one_node = 1;
    // Rate limits in bytes/s: per channel (times NetworkConfig::channels), and in all on one
    // node and across nodes; 0 = none.
    double channel_rate = 0, max_rate = 0, max_rate_across_nodes = 0;
    bool operator==(const ProtocolConstants&) const = default;
};
// The class of a plan's route for the protocols' per-step latency.
enum class RouteClass : std::uint8_t { NvLink, Pcie, Network };
// NCCL's point-to-point operations (all_to_all, sendrecv) run LL up to this many bytes per peer
// and Simple above (NCCL_P2P_LL_THRESHOLD).
inline constexpr std::int64_t kP2pLlThreshold = 16384;

struct NetworkConfig {
    Fidelity fidelity = Fidelity::Flow;
    // Fixed software cost per collective step / p2p message (NCCL protocol overhead), added once
    // per step on top of link latencies.
    Time step_overhead = Time::zero();
    // Fraction of a link's capacity that transfers achieve, per topology::LinkKind (nvlink,
    // nvswitch, pcie, infiniband, ethernet). 1 = the nominal capacity.
    double link_efficiency[kLinkKinds] = {1, 1, 1, 1, 1};
    // Per collective (CollectiveKind; point-to-point sends have none and run at the link's
    // efficiency) and link kind: the fraction of a link's nominal bandwidth one flow of that
    // operation reaches at most on links of that kind (a per-flow rate cap below the link's
    // capacity; 1 = no cap), and a fixed cost once per collective whose route crosses a link of
    // that kind (the largest over its links).
    double op_efficiency[kCollectiveKinds][kLinkKinds] = {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1},
                                                          {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1},
                                                          {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}};
    Time op_latency[kCollectiveKinds][kLinkKinds] = {};
    // Per collective and link kind: a factor on LL's and LL128's base and per-step latencies
    // (ProtocolConstants) for a collective whose route crosses such a link (the largest over its
    // links); 1 = NCCL's constants. `clustersim calibrate --nccl-tests` fits it with the
    // efficiency and the fixed cost, on every size given.
    double op_protocol_latency[kCollectiveKinds][kLinkKinds] = {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1},
                                                                {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1},
                                                                {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}};
    // Cap on NVLS (multimem) traffic on each GPU-NVSwitch link and direction, as a fraction of
    // the link's nominal bandwidth. 1 = the links' own efficiency alone limits it.
    double nvls_efficiency = 1.0;
    // NCCL's protocols (docs/network.md, "Protocols"), indexed by Protocol (Auto and Simple are
    // not used: Simple is the model above). Off in the nominal configuration: every collective
    // runs Simple. calibrated() enables LL and LL128 with NCCL's constants.
    std::array<ProtocolConstants, kProtocols> protocols{};
    // Per collective (CollectiveKind): the protocol to run, or Auto (the fastest of the enabled
    // ones by the closed form of docs/network.md, as NCCL's tuning picks; `network.protocols`).
    std::array<Protocol, kCollectiveKinds> protocol{};
    // NCCL channels a collective runs on (`network.channels`): LL128's per-channel rate limit
    // applies this many times.
    int channels = 16;
    // The collective algorithms `collective()` accepts; never null. A registry other than the
    // bundled one must outlive the networks built with it.
    const AlgorithmRegistry* algorithms = &AlgorithmRegistry::builtin();

    // The defaults above are the nominal hardware (no overhead, full capacity), which the
    // closed-form tests use. calibrated() returns the fitted values for NVLink, NVSwitch and NVLS
    // (the only ones with calibration data); other link kinds stay at nominal capacity.
    static NetworkConfig calibrated(Fidelity fidelity = Fidelity::Flow);

    bool operator==(const NetworkConfig&) const = default;
};

// NCCL's LL and LL128 constants (NetworkConfig::protocols of calibrated()), from its tuning model.
std::array<ProtocolConstants, kProtocols> nccl_protocols();

// Called when a transfer or collective finishes, with the token it was started with.
class TransferClient {
  public:
    virtual ~TransferClient() = default;
    virtual void on_transfer_done(Simulation& sim, std::uint64_t token) = 0;
};

// Measurement hooks; the network never computes metrics itself (link accounting, utilisation
// counters and the like are observers in the report layer). Links are the cluster's directed
// links only (never the solver's private ones); notifications come in simulated-time order.
// An observer that only sums per link may say so by being a SummingObserver (below), which an
// accelerated network tells sums instead of flows.
class NetworkObserver {
  public:
    virtual ~NetworkObserver() = default;

    struct FlowStart {
        Time at;
        std::span<const topology::LinkId> path;  // the links it crosses, in route order
        // > 0, a whole number: a flow's share of its transfer rounded to the nearest byte (at
        // least one), times the count of equal flows told at once. So per-link sums of them are
        // exact (below 2^53) and do not depend on the order they are added in.
        double bytes = 0;
        // `flow` fidelity: the flow shares its links with the others; on_link_rate reports each
        // change of a link's total rate and flow count, and on_flow_end the flow's last byte.
        // `analytical` and `ideal`: nothing is shared and no end is reported; the flow holds
        // each link of its path for `holds` (its stand-alone transfer time under analytical,
        // zero under ideal).
        bool shared = false;
        Time holds;
    };
    virtual void on_flow_start(const FlowStart& flow) { (void)flow; }
    // A shared flow's last byte arrived (it left every link of `path`).
    virtual void on_flow_end(Time at, std::span<const topology::LinkId> path) {
        (void)at, (void)path;
    }
    // `flow` fidelity: the total rate on a directed link changed to `bytes_per_s` with `flows`
    // active flows.
    virtual void on_link_rate(Time at, topology::LinkId link, double bytes_per_s, int flows) {
        (void)at, (void)link, (void)bytes_per_s, (void)flows;
    }
    // Every link rate change of one instant at once (one call per max-min re-solve instead of
    // one per link); in increasing link order when wants_ordered_link_rates(). The default hands
    // each to on_link_rate.
    struct LinkRate {
        topology::LinkId link;
        double bytes_per_s;
        int flows;
    };
    virtual void on_link_rates(Time at, std::span<const LinkRate> rates) {
        for (const LinkRate& r : rates)
            on_link_rate(at, r.link, r.bytes_per_s, r.flows);
    }
    // Whether the rates of one instant must come in increasing link order (a trace's output
    // order depends on it; a per-link sum does not, and spares the network a sort).
    virtual bool wants_ordered_link_rates() const { return true; }
    // Whether it reads link rates at all: when no observer of a network does, the flow solver
    // gathers none (a re-solve's list of changed links and its fan-out were about 4% of a
    // 16,384-GPU hashed-ECMP run for an accounting that only needs the flows' starts and ends).
    virtual bool wants_link_rates() const { return true; }
};

// An observer that only sums bytes and busy times per link (report::LinkAccounting, and
// report::LinkSketch, a table-only sweep's digest): it needs no flow's own start time. A network
// made with fast paths (make_network with a KeptState) may then tell it several equal unshared
// transfers at once (Accelerator::account_send with a count: one FlowStart with their bytes and
// times summed, at a time of the network's choosing), or their per-link totals (on_link_totals),
// or, when it sketches, only its sketch's term (on_link_sketch). A network without fast paths
// tells it every flow as it tells any observer; the sums are the same (whole bytes and
// picoseconds add exactly in any order).
class SummingObserver : public NetworkObserver {
  public:
    // `count` equal transfers' unshared flows summed per link (outside `flow`): each link once,
    // in increasing link order, with one transfer's bytes and holding times summed, to be
    // multiplied by `count`. The same sums as one on_flow_start per flow. The default tells them
    // as one-link flows.
    struct LinkTotal {
        topology::LinkId link;
        double bytes;  // whole, > 0
        Time holds;
    };
    virtual void on_link_totals(Time at, std::span<const LinkTotal> totals, std::int64_t count) {
        for (const LinkTotal& t : totals)
            on_flow_start({at, std::span<const topology::LinkId>(&t.link, 1),
                           t.bytes * static_cast<double>(count), false, t.holds * count});
    }
    // Non-null when the observer needs of the unshared flows only the link sketch of their
    // per-link sums (link_sketch_term below, with these link keys: topology::link_keys of the
    // network's cluster). The network then tells it what it has summed already as one term
    // (on_link_sketch): a kept transfer's cost, a kept route's sends, instead of their flows or
    // link totals. Every other notification still comes as it is.
    virtual const std::vector<std::uint64_t>* sketch_keys() const { return nullptr; }
    virtual void on_link_sketch(std::uint64_t term) { (void)term; }

    // Member folding (Accelerator::fold): an observer whose record of a link is a function of
    // the notifications naming that link alone (report::LinkAccounting) may say so. A network
    // with fast paths then tells it of the simulated member's flows and rates only, and at the
    // end of an iteration (Accelerator::flush_link_totals) which links mirror which: each
    // `image` was to be told, from the start of the run, exactly what its `of` was told, and no
    // other notification names it. The observer copies its records; other observers are told
    // every member's notifications through the maps.
    virtual bool copies_link_images() const { return false; }
    struct LinkImage {
        topology::LinkId of, image;
    };
    virtual void on_link_images(std::span<const LinkImage> images) { (void)images; }

    // Link tallies (`flow` fidelity): an observer that copies link images and keeps of the
    // shared flows only, per link, their bytes, the time with at least one and with two or more
    // of them, and the most at once (report::LinkAccounting) may say so. A network with fast
    // paths whose link totals are held (Accelerator::hold_link_totals, before the observer is
    // added, itself before the first flow; an observer added later is told flow by flow) then
    // counts those on the flow solver's own link records and tells them at
    // flush_link_totals(), before the images, instead of telling the observer each shared
    // flow's start and end: the same sums (whole bytes and picoseconds), without a second walk
    // over every flow's links at its start and at its end (about a fifth of a 16,384-GPU
    // hashed-ECMP run). Each tally covers the flows since the previous one; every other
    // notification still comes as it is.
    virtual bool takes_link_tallies() const { return false; }
    struct LinkTally {
        topology::LinkId link;
        double bytes;  // whole bytes of the flows that started on it
        Time busy;     // with at least one flow, up to its last start or end
        Time shared;   // with two or more
        int peak;      // the most at once
        int flows;     // still on it
    };
    virtual void on_link_tallies(std::span<const LinkTally> tallies) { (void)tallies; }
};

// The link sketch of per-link sums outside `flow`: over the links l, key(l) x bytes(l) +
// hkey(l) x holds(l) (picoseconds), modulo the prime 2^61 - 1 (core/modp.hpp), with key(l) the
// cluster's pseudo-random link key (topology::link_keys) and hkey(l) one made from it. A linear
// function of whole numbers, so a flow adds the same whatever order it comes in, and a
// transfer's or a route's terms can be summed once and reused. Two runs on one cluster whose
// per-link bytes or holding times differ anywhere (below p) get equal sketches only when the
// difference vector is orthogonal to the keys modulo p: about 1 chance in 2^61 for keys that
// do not depend on the runs.
inline std::uint64_t link_holds_key(std::uint64_t key) {
    return modp::of(mix64(key ^ 0x3c6ef372fe94f82b));
}
struct PathKeys {
    std::uint64_t bytes = 0, holds = 0;  // the links' key and hkey, each summed modulo p
};
// One link's key and hkey (`keys`: topology::link_keys of the cluster).
inline PathKeys link_keys_of(const std::vector<std::uint64_t>& keys, topology::LinkId l) {
    return {keys[l], link_holds_key(keys[l])};
}
inline PathKeys path_keys(const std::vector<std::uint64_t>& keys,
                          std::span<const topology::LinkId> path) {
    PathKeys k;
    for (topology::LinkId l : path) {
        const PathKeys one = link_keys_of(keys, l);
        k.bytes = modp::add(k.bytes, one.bytes);
        k.holds = modp::add(k.holds, one.holds);
    }
    return k;
}
// What a flow of whole `bytes` holding each link of a path for `holds` adds to the sketch.
inline std::uint64_t link_sketch_term(PathKeys k, double bytes, Time holds) {
    return modp::add(modp::mul(k.bytes, modp::of(static_cast<std::uint64_t>(bytes))),
                     modp::mul(k.holds, modp::of(static_cast<std::uint64_t>(holds.count_ps()))));
}
// What one transfer's link totals (SummingObserver::on_link_totals) add to the sketch.
inline std::uint64_t link_totals_sketch(const std::vector<std::uint64_t>& keys,
                                        std::span<const SummingObserver::LinkTotal> totals) {
    std::uint64_t sum = 0;
    for (const SummingObserver::LinkTotal& t : totals)
        sum = modp::add(sum, link_sketch_term(link_keys_of(keys, t.link), t.bytes, t.holds));
    return sum;
}

using GroupId = std::uint32_t;

// One kind of transfer the caller will start on each of `copies` members in lockstep (member
// folding, Network::fold): the same call with member m's GPUs (p2p) or group (collective).
struct FoldClass {
    bool collective = false;
    std::vector<int> src, dst;  // p2p: per member
    CollectiveKind kind = CollectiveKind::AllReduce;
    std::vector<GroupId> groups;  // collective: per member
    Bytes size;
};

class Accelerator;
class KeptState;

// The model: transfers, collectives, link capacities and routes. What only makes it faster is
// behind accelerator() (accelerator.hpp).
class Network {
  public:
    virtual ~Network() = default;
    virtual void set_client(TransferClient* client) = 0;
    virtual void add_observer(NetworkObserver* observer) = 0;

    // Registers a communicator (global GPU numbers, in ring order). Groups are reused across calls.
    virtual GroupId register_group(std::vector<int> ranks) = 0;
    // From now on, registering a rank list already registered (same GPUs, same order) returns
    // its group instead of a new one, so it keeps its collective plans and their ECMP routes
    // (the plan's route salt is the group id). Shared fabrics set it: a job's later iterations,
    // and its run alone, register their communicators again and must route them as before. Off
    // by default: a single run's group ids, and so its routes, stay as they were.
    virtual void reuse_groups() = 0;

    // One message of `size` bytes from GPU src to GPU dst.
    virtual void send(int src, int dst, Bytes size, std::uint64_t token) = 0;
    // A collective on a group, started when all its members are ready (the caller synchronises).
    // `algo` is Auto or an algorithm of NetworkConfig::algorithms that applies (ConfigError
    // otherwise, see resolve_algorithm).
    // `size` follows nccl-tests' size column: the per-rank buffer for all_reduce, the total output
    // for all_gather, the total input for reduce_scatter, the per-rank send buffer for all_to_all.
    virtual void collective(CollectiveKind kind, GroupId group, Bytes size, Algorithm algo,
                            std::uint64_t token) = 0;

    // Changes the capacity of directed cluster link `link` to `bandwidth` (the nominal rate as the
    // topology gives it, >= 0; the configured link efficiency and NVLS cap still apply) from now
    // on. Throws SimulationError for an unknown link or a negative or infinite bandwidth.
    //   flow        flows crossing the link are re-rated max-min fairly at now(), their bytes so
    //               far counted at the old rates; at 0 they stall until a later change restores
    //               the link (a run that ends with a stalled transfer leaves it unfinished).
    //   analytical  transfers starting from now on use the new capacity; those in flight keep
    //               their times; a transfer over a link at 0 is an error (SimulationError).
    //   ideal       no effect.
    // Operation rate caps (NetworkConfig::op_efficiency) stay relative to the nominal bandwidth.
    virtual void set_link_capacity(topology::LinkId link, Bandwidth bandwidth) = 0;
    // The same at time `at` (>= now) through an engine event, ordered with the other events at
    // that time by insertion.
    virtual void schedule_link_capacity(Time at, topology::LinkId link, Bandwidth bandwidth) = 0;
    // From time `at` (>= now) on, routes come from `routing`: the network's cluster with failed
    // links (topology::Cluster::with_faults), which must outlive the network. Transfers,
    // collectives and collective phases that start from then on take its routes; under `flow`,
    // flows in flight over a link `routing` marks failed move at `at`, with the bytes they have
    // left, to a route of `routing` between the same two GPUs (their operation's rate cap kept).
    // Where no route remains, the run throws topology's NoPathError. Link capacities are not
    // changed (a failed link simply carries nothing).
    virtual void schedule_routing(Time at, const topology::Cluster& routing) = 0;

    // The network's fast paths (accelerator.hpp): an accelerator when the network was made with
    // them (make_network with a KeptState), null otherwise (`--no-fast-paths`). Results are the
    // same either way.
    virtual Accelerator* accelerator() { return nullptr; }

    // What the flow solver did so far (`flow` fidelity; zeros otherwise), for benchmarks: max-min
    // re-solves, flows re-rated (summed over re-solves and their rounds), flows whose bottleneck
    // was checked, the most flows active at once, and the solver's links (the cluster's directed
    // links, or a compact network's, plus private rate-cap links).
    struct SolverStats {
        std::uint64_t recomputes = 0, rerated = 0, checked = 0;
        std::uint64_t peak_flows = 0, links = 0;
    };
    virtual SolverStats solver_stats() const { return {}; }
};

// nccl-tests' bus-bandwidth factor: busbw = algbw x factor (2(n-1)/n for all_reduce, (n-1)/n for
// all_gather, reduce_scatter and all_to_all, 1 for broadcast and sendrecv).
double busbw_factor(CollectiveKind kind, int ranks);

// Builds the model for `config.fidelity`. The Simulation and Cluster must outlive it. With
// `kept` (what the networks on `cluster` keep for each other: accelerator.hpp; it must be made
// for `cluster` and outlive the network) the network takes its fast paths and offers an
// accelerator; without, it computes everything itself and offers none.
std::unique_ptr<Network> make_network(Simulation& sim, const topology::Cluster& cluster,
                                      const NetworkConfig& config, KeptState* kept = nullptr);

// The time of one collective run alone: `kind` on the GPUs `ranks` (ring order) with `size`
// bytes (nccl-tests' size column), on an otherwise idle network built by make_network for
// `config`, from its start to its last byte. This is the one definition of "a collective's time"
// in clustersim: the replay costs the blocking TP/CP/EP collectives of passes with it
// (replay::CollectiveCosts), and `clustersim collective` and `clustersim validate` must call it
// rather than build a network of their own. Throws ConfigError for ranks outside the cluster or
// listed twice, SimulationError if the collective never completes.
// `kept`: as make_network's (the run's, so that its collectives share the scaled capacities).
Time isolated_collective_time(const topology::Cluster& cluster, const NetworkConfig& config,
                              CollectiveKind kind, const std::vector<int>& ranks, Bytes size,
                              Algorithm algorithm = Algorithm::Auto, KeptState* kept = nullptr);

// The algorithm and protocol the network runs that collective with (Auto resolved as
// collective() resolves it: choose_algorithm, then the protocol NCCL's tuning would pick for the
// size; docs/network.md, "Protocols").
std::pair<Algorithm, Protocol> collective_choice(const topology::Cluster& cluster,
                                                 const NetworkConfig& config, CollectiveKind kind,
                                                 const std::vector<int>& ranks, Bytes size,
                                                 Algorithm algorithm = Algorithm::Auto);

}  // namespace cs::network
