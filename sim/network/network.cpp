#include "network/network.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

#include "core/errors.hpp"
#include "core/hash.hpp"
#include "network/accelerator.hpp"
#include "network/collectives.hpp"
#include "network/flow_solver.hpp"

namespace cs::network {

using topology::Cluster;
using topology::LinkId;

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

namespace {

enum EventKind : std::uint32_t {
    kDone,
    kPhaseStart,
    kRecompute,
    kCompletion,
    kSetCapacity,
    kRouting
};

// What observers are told a flow carries: its share of the transfer rounded to whole bytes (at
// least one), so that their per-link sums are exact whatever order they are added in
// (NetworkObserver::FlowStart::bytes). Transfer times are computed from the share itself.
double whole_bytes(double share) {
    return std::max(1.0, std::round(share));
}

// A kept collective plan's key besides its ranks (NetworkImpl::calibration_words).
// (Besides the configuration of Simple, the protocol's constants: protocol_words.)
using PlanWords = std::array<std::uint64_t, 4 + 4 * kLinkKinds + 11>;
constexpr std::uint64_t kNoCommunicator = ~std::uint64_t{0};

// What a transfer costs on a plan outside `flow` (NetworkImpl::kept_cost).
struct PlanCost {
    Time time;
    std::vector<SummingObserver::LinkTotal> links;  // real links, increasing
    // Its links' term of the link sketch (link_sketch_term), made the first time an observer
    // that sketches is told it (RealLinksOnly::tell_cost).
    mutable bool sketched = false;
    mutable std::uint64_t sketch = 0;
};

class NetworkImpl final : public Network, public Accelerator, public EventHandler {
  public:
    // `compact`: for isolated_collective_time only (one collective, no observers, no capacity
    // changes): the solver knows only the links of the collective's plan, numbered in increasing
    // cluster order (so every tie the solver breaks by link number falls the same way and the
    // times are those of a full network), instead of per-link state for every link of a cluster
    // of millions (profiled at 16,384 GPUs: 4% of a run plus page faults, one such network per
    // distinct TP/CP/EP collective).
    // `kept`: what the networks on the cluster keep for each other (accelerator.hpp); null: none,
    // and no fast path.
    NetworkImpl(Simulation& sim, const Cluster& cluster, const NetworkConfig& config,
                KeptState* kept, bool compact = false)
        : sim_(sim), cluster_(cluster), config_(config), kept_(kept), compact_(compact) {
        if (kept_ && &kept_->cluster() != &cluster_)
            throw SimulationError("network", "kept state of another cluster");
        if (!config_.algorithms) throw ConfigError("network: no collective algorithm registry");
        handler_ = sim_.add_handler(*this);
        const auto& links = cluster_.links();
        real_links_.links = links.size();
        std::array<double, kLinkKinds> per_kind{};
        std::copy(std::begin(config_.link_efficiency), std::end(config_.link_efficiency),
                  per_kind.begin());
        for (const auto& row : config_.op_efficiency)
            for (double eff : row)
                if (!(eff > 0 && eff <= 1))
                    throw ConfigError("network: operation efficiency must be in (0, 1], got " +
                                      std::to_string(eff));
        if (!(config_.nvls_efficiency > 0 && config_.nvls_efficiency <= 1))
            throw ConfigError("network: NVLS efficiency must be in (0, 1], got " +
                              std::to_string(config_.nvls_efficiency));
        // Per real link its bandwidth times its kind's efficiency, then one virtual link per
        // real one after them (nvls_virtual_link): the NVLS rate cap of a GPU-NVSwitch link;
        // unused (but positive) for the others. The kept state keeps them for the next network
        // (KeptState::scaled_capacities); copied only if a capacity changes (own_capacity_).
        // The efficiencies of the link kinds the cluster has are checked before a set is kept
        // (a kept set would be found, unchecked, by the next network).
        const auto check = [&per_kind](unsigned kinds) {
            for (int k = 0; k < kLinkKinds; ++k) {
                const double eff = per_kind[static_cast<std::size_t>(k)];
                if ((kinds >> k & 1u) != 0 && !(eff > 0 && eff <= 1))
                    throw ConfigError("network: link efficiency must be in (0, 1], got " +
                                      std::to_string(eff));
            }
        };
        base_capacity_ = kept_ ? kept_->scaled_capacities(per_kind, config_.nvls_efficiency, check)
                               : KeptState::make_scaled_capacities(cluster_, per_kind,
                                                                   config_.nvls_efficiency, check);
        capacity_ = base_capacity_->capacity.data();
        if (!compact_ && kept_) shared_plans_ = kept_plans(*kept_);
        if (config_.fidelity == Fidelity::Flow)
            solver_ = std::make_unique<FlowSolver>(compact_ ? std::vector<double>{}
                                                            : base_capacity_->capacity);
    }

    void set_client(TransferClient* client) override { client_ = client; }
    // An observer that only sums per link (SummingObserver) is told sums only by a network with
    // fast paths; to a network without, every observer is a plain one.
    void add_observer(NetworkObserver* observer) override {
        if (compact_) throw SimulationError("network", "a compact network takes no observers");
        SummingObserver* summing = kept_ ? dynamic_cast<SummingObserver*>(observer) : nullptr;
        real_links_.targets.push_back(observer);
        if (summing && summing->copies_link_images())
            real_links_.copiers.push_back(summing);
        else
            real_links_.repeated.push_back(observer);
        real_links_.summing.push_back(summing);
        if (summing)
            (summing->sketch_keys() ? real_links_.sketches : real_links_.tables).push_back(summing);
        if (summing && summing->sketch_keys()) real_links_.keys = summing->sketch_keys();
        observers_.assign(1, &real_links_);
    }
    Accelerator* accelerator() override { return kept_ && !compact_ ? this : nullptr; }
    SolverStats solver_stats() const override {
        if (!solver_) return {};
        return {solver_->recomputes(), solver_->rerated_flows(), solver_->checked_flows(),
                solver_->peak_flows(), solver_->link_count()};
    }

    GroupId register_group(std::vector<int> ranks) override {
        const std::uint64_t number = communicator_number(ranks);
        if (reuse_groups_) {
            auto [it, added] = group_ids_.try_emplace(ranks, static_cast<GroupId>(groups_.size()));
            if (!added) return it->second;
        }
        groups_.push_back(std::move(ranks));
        communicators_.push_back(number);
        return static_cast<GroupId>(groups_.size() - 1);
    }
    void check_communicator(const std::vector<int>& ranks) const {
        if (ranks.empty()) throw ConfigError("a communicator needs at least one rank");
        for (int r : ranks)
            check_gpu(r);
        std::vector<int> sorted = ranks;
        std::sort(sorted.begin(), sorted.end());
        if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
            throw ConfigError("a communicator lists a GPU twice");
    }
    // Checks `ranks` (ConfigError) and returns their number among the communicators kept with
    // the cluster's plans (SharedPlans::communicators), kNoCommunicator if none are kept. A
    // communicator kept there was checked on this cluster when it was first registered.
    std::uint64_t communicator_number(std::vector<int>& ranks) {
        if (!shared_plans_) {
            check_communicator(ranks);
            return kNoCommunicator;
        }
        auto& known = shared_plans_->communicators;
        SharedPlans::CollectiveKey k;
        k.ranks = std::move(ranks);  // looked up as they are, then given back
        const auto it = known.find(k);
        ranks = std::move(k.ranks);
        if (it != known.end()) return it->second;
        check_communicator(ranks);
        if (shared_plans_->collective_bytes >= SharedPlans::kMaxBytes) return kNoCommunicator;
        shared_plans_->collective_bytes += sizeof(k) + 64 + ranks.size() * sizeof(int);
        const auto number = static_cast<std::uint64_t>(known.size());
        k.ranks = ranks;
        known.emplace(std::move(k), number);
        return number;
    }
    // The key of `group`'s kept plans and algorithms: its communicator's number, or (not kept)
    // its ranks.
    auto group_key(GroupId group) const {  // a SharedPlans::CollectiveKey
        SharedPlans::CollectiveKey k;
        k.communicator = communicators_[group];
        if (k.communicator == kNoCommunicator) k.ranks = groups_[group];
        return k;
    }
    void reuse_groups() override {
        if (reuse_groups_) return;
        reuse_groups_ = true;
        for (std::size_t g = 0; g < groups_.size(); ++g)
            group_ids_.try_emplace(groups_[g], static_cast<GroupId>(g));
    }

    void send(int src, int dst, Bytes size, std::uint64_t token) override {
        bool kept = false;
        const Plan& plan = p2p_plan(src, dst, &kept);
        start(plan, size, token, kept);
    }

    // `kept`, if given, is set to whether the plan is one kept with the cluster (SharedPlans).
    const Plan& p2p_plan(int src, int dst, bool* kept = nullptr) {
        check_gpu(src);
        check_gpu(dst);
        const std::uint64_t key =
            static_cast<std::uint64_t>(src) << 32 | static_cast<std::uint32_t>(dst);
        // A memo in front of the plan maps, one cache line per source GPU holding its last few
        // destinations: a pipeline message looks its plan up on every send, and a GPU sends to
        // few GPUs (its neighbouring stages), where a memo hashed on the pair thrashed at 16,384
        // GPUs (twice as many pairs as slots).
        if (plan_memo_.empty()) plan_memo_.resize(static_cast<std::size_t>(cluster_.gpu_count()));
        PlanMemo& memo = plan_memo_[static_cast<std::size_t>(src)];
        for (std::size_t w = 0; w < PlanMemo::kWays; ++w)
            if (memo.plan[w] && memo.dst[w] == dst) {
                if (kept) *kept = memo.kept[w];
                return *memo.plan[w];
            }
        bool is_kept = false;
        const Plan& plan = find_p2p_plan(src, dst, key, &is_kept);
        // The newest first, the oldest dropped.
        for (std::size_t w = PlanMemo::kWays - 1; w > 0; --w) {
            memo.plan[w] = memo.plan[w - 1];
            memo.dst[w] = memo.dst[w - 1];
            memo.kept[w] = memo.kept[w - 1];
        }
        memo.plan[0] = &plan;
        memo.dst[0] = dst;
        memo.kept[0] = is_kept;
        if (kept) *kept = is_kept;
        return plan;
    }
    // Plans are never erased while the network lives (change_routing retires them, and clears
    // the memo), so the memo's pointers stay valid.
    struct alignas(64) PlanMemo {
        static constexpr std::size_t kWays = 4;
        const Plan* plan[kWays] = {};
        std::int32_t dst[kWays] = {};
        bool kept[kWays] = {};
    };
    std::vector<PlanMemo> plan_memo_;  // per source GPU; empty until a p2p plan is asked for
    const Plan& find_p2p_plan(int src, int dst, std::uint64_t key, bool* kept) {
        // On the cluster's own routes, a cluster that keeps its routes keeps the plans too: a
        // p2p plan is its route and latency, a function of the cluster alone (no rate caps or
        // fixed costs), so later networks on it take them as they are.
        const bool shared = shared_plans_ && routing_ == &cluster_;
        auto& plans = shared ? shared_plans_->plans : p2p_plans_;
        auto it = plans.find(key);
        if (it == plans.end() && shared && plans.size() >= SharedPlans::kMaxPlans)
            return own_p2p_plan(key, src, dst);  // full: this network's own
        if (it == plans.end()) it = plans.emplace(key, make_p2p_plan(src, dst, key)).first;
        if (kept) *kept = shared;
        return it->second;
    }
    const Plan& own_p2p_plan(std::uint64_t key, int src, int dst) {
        auto it = p2p_plans_.find(key);
        if (it == p2p_plans_.end())
            it = p2p_plans_.emplace(key, make_p2p_plan(src, dst, key)).first;
        return it->second;
    }
    // One message's plan: its route (flow id `key`) and the route's latency; none from a GPU to
    // itself.
    Plan make_p2p_plan(int src, int dst, std::uint64_t key) const {
        Plan plan;
        plan.algorithm = Algorithm::Direct;
        if (src != dst) {
            Phase p;
            FlowTemplate t;
            routing_->route(src, dst, key, t.path);
            t.bytes_per_size = 1.0;
            p.latency = cluster_.route_latency(t.path);
            p.flows.push_back(std::move(t));
            plan.phases.push_back(std::move(p));
        }
        return plan;
    }

    void collective(CollectiveKind kind, GroupId group, Bytes size, Algorithm algo,
                    std::uint64_t token) override {
        bool kept = false;
        const Plan& plan = collective_plan(kind, group, size, algo, &kept);
        if (compact_ && solver_) number_compact(plan);
        start(plan, size, token, kept);
    }

    std::pair<Algorithm, Protocol> choice(CollectiveKind kind, GroupId group, Bytes size,
                                          Algorithm algo) {
        const Plan& plan = collective_plan(kind, group, size, algo);
        return {plan.algorithm, plan.protocol};
    }

    // `kept`, if given, is set to whether the plan is one kept with the cluster (SharedPlans).
    const Plan& collective_plan(CollectiveKind kind, GroupId group, Bytes size, Algorithm algo,
                                bool* kept = nullptr) {
        if (group >= groups_.size())
            throw SimulationError("network", "collective on an unregistered group", sim_.now());
        // Resolved once per (group, operation, algorithm asked, size): every DP sync of every
        // stage asks again, and resolving looks at every rank's node (a pure function of them
        // and the routing; one that throws is not kept and throws again). The protocol likewise.
        const auto asked = std::tuple{group, static_cast<int>(kind), algo.id, size.value};
        auto found = resolved_.find(asked);
        if (found == resolved_.end()) {
            const Algorithm resolved = resolve(kind, group, size, algo);
            found = resolved_.emplace(asked, std::pair{resolved, Protocol::Simple}).first;
            found->second.second = choose_protocol(kind, group, size, resolved);
        }
        const auto [resolved, protocol] = found->second;
        return protocol_plan(kind, group, resolved, protocol, kept);
    }

    // The protocol a collective of `size` runs with algorithm `algo` (docs/network.md,
    // "Protocols"): the one NetworkConfig::protocol names, else as NCCL's tuning picks: NVLS
    // runs Simple; all_to_all and sendrecv (point-to-point operations) LL up to kP2pLlThreshold
    // bytes per peer, else Simple; the others the enabled protocol of the smallest estimated
    // time (estimate(): the closed form on nominal capacities), Simple on a tie.
    Protocol choose_protocol(CollectiveKind kind, GroupId group, Bytes size, Algorithm algo) {
        const Protocol asked = config_.protocol[static_cast<std::size_t>(kind)];
        if (asked != Protocol::Auto) return asked;
        const auto enabled = [&](Protocol p) {
            return config_.protocols[static_cast<std::size_t>(p)].enabled;
        };
        if (algo == Algorithm::Nvls) return Protocol::Simple;
        if (kind == CollectiveKind::AllToAll || kind == CollectiveKind::SendRecv) {
            const auto n = static_cast<std::int64_t>(groups_[group].size());
            const std::int64_t per_peer =
                kind == CollectiveKind::AllToAll ? size.value / n : size.value;
            return enabled(Protocol::Ll) && per_peer <= kP2pLlThreshold ? Protocol::Ll
                                                                        : Protocol::Simple;
        }
        Protocol best = Protocol::Simple;
        Time best_time = estimate(protocol_plan(kind, group, algo, Protocol::Simple), size);
        for (const Protocol p : {Protocol::Ll128, Protocol::Ll}) {
            if (!enabled(p)) continue;
            const Time t = estimate(protocol_plan(kind, group, algo, p), size);
            if (t < best_time) {
                best = p;
                best_time = t;
            }
        }
        return best;
    }

    // The time of `plan` for `size` by the closed form that picks protocols: the fixed latency,
    // then per phase its steps' delay and its longest flow at the flow's rate on the nominal
    // capacities (no contention), as NCCL's tuning model costs an algorithm and protocol.
    Time estimate(const Plan& plan, Bytes size) const {
        Time total = plan.phases.empty() ? Time::zero() : plan.fixed_latency;
        for (const Phase& p : plan.phases) {
            Time longest = Time::zero();
            for (const FlowTemplate& f : p.flows) {
                const double fb = f.bytes_per_size * static_cast<double>(size.value);
                if (fb <= 0) continue;
                longest = std::max(longest, transfer_time(fb, Bandwidth{nominal_rate(f)}));
            }
            total += phase_delay(plan, p) + longest;
        }
        return total;
    }

    // The plan of `kind` on `group` with a resolved algorithm and protocol.
    const Plan& protocol_plan(CollectiveKind kind, GroupId group, Algorithm resolved,
                              Protocol protocol, bool* kept = nullptr) {
        const auto& ranks = groups_[group];
        const AlgorithmRegistry& algorithms = *config_.algorithms;
        const auto made = [&] {
            Plan plan = build_plan(*routing_, kind, resolved, ranks, group, algorithms);
            apply_operation(plan, kind);
            if (protocol != Protocol::Simple) apply_protocol(plan, kind, protocol, ranks);
            return plan;
        };
        const std::uint64_t key = static_cast<std::uint64_t>(group) << 26 |
                                  static_cast<std::uint64_t>(kind) << 18 |
                                  static_cast<std::uint64_t>(resolved.id) << 2 |
                                  (static_cast<std::uint64_t>(protocol) - 1);
        auto it = plans_.find(key);
        if (it != plans_.end()) return it->second;
        // On the cluster's own routes with the bundled algorithms, a cluster that keeps its
        // routes keeps the collective plans too (SharedPlans::collectives): a plan is a function
        // of the cluster, the ranks, the flow id (the group's number), the operation, the
        // algorithm and the operation's calibration, all in the key.
        if (shares_plans()) {
            auto shared = shared_plan_of_.find(key);
            if (shared != shared_plan_of_.end()) {
                if (kept) *kept = true;
                return *shared->second;
            }
            SharedPlans::CollectiveKey k = group_key(group);
            k.words = calibration_words(kind, protocol);
            k.words[0] = group;
            k.words[1] = static_cast<std::uint64_t>(kind);
            k.words[2] = resolved.id | static_cast<std::uint64_t>(protocol) << 16;
            auto& kept_plans = shared_plans_->collectives;
            auto found_kept = kept_plans.find(k);
            if (found_kept == kept_plans.end() &&
                shared_plans_->collective_bytes < SharedPlans::kMaxBytes) {
                Plan plan = made();
                shared_plans_->collective_bytes += SharedPlans::bytes_of(plan, k.ranks.size());
                found_kept = kept_plans.emplace(std::move(k), std::move(plan)).first;
            }
            if (found_kept != kept_plans.end()) {
                shared_plan_of_.emplace(key, &found_kept->second);
                if (kept) *kept = true;
                return found_kept->second;
            }
        }
        return plans_.emplace(key, made()).first->second;
    }
    // resolve_algorithm, kept with the cluster's plans where they are shared (a function of the
    // cluster, the ranks, the operation, the size and the algorithm asked).
    Algorithm resolve(CollectiveKind kind, GroupId group, Bytes size, Algorithm algo) {
        const auto& ranks = groups_[group];
        if (!shares_plans())
            return resolve_algorithm(*routing_, kind, ranks, size, algo, *config_.algorithms);
        SharedPlans::CollectiveKey k = group_key(group);
        k.words[0] = static_cast<std::uint64_t>(size.value);
        k.words[1] = static_cast<std::uint64_t>(kind);
        k.words[2] = algo.id;
        auto& kept = shared_plans_->resolved;
        if (auto it = kept.find(k); it != kept.end()) return it->second;
        const Algorithm resolved =
            resolve_algorithm(*routing_, kind, ranks, size, algo, *config_.algorithms);
        if (shared_plans_->collective_bytes < SharedPlans::kMaxBytes) {
            shared_plans_->collective_bytes += sizeof(k) + 64 + ranks.size() * sizeof(int);
            kept.emplace(std::move(k), resolved);
        }
        return resolved;
    }
    bool shares_plans() const {
        return shared_plans_ && routing_ == &cluster_ &&
               config_.algorithms == &AlgorithmRegistry::builtin();
    }
    // What apply_operation and apply_protocol read of the configuration for operation `kind`
    // and `protocol`, bit for bit, after three words left for the group, the operation and the
    // algorithm.
    PlanWords calibration_words(CollectiveKind kind, Protocol protocol) const {
        PlanWords w{};
        std::size_t i = 3;
        for (int l = 0; l < kLinkKinds; ++l) {
            w[i++] = std::bit_cast<std::uint64_t>(config_.link_efficiency[l]);
            w[i++] = std::bit_cast<std::uint64_t>(config_.op_efficiency[static_cast<int>(kind)][l]);
            w[i++] = static_cast<std::uint64_t>(
                config_.op_latency[static_cast<int>(kind)][l].count_ps());
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
        for (double d : {c.bandwidth, c.bandwidth_one_node, c.channel_rate, c.max_rate,
                         c.max_rate_across_nodes})
            w[i++] = std::bit_cast<std::uint64_t>(d);
        w[i] = static_cast<std::uint64_t>(config_.channels);
        return w;
    }

    bool fold(int copies, const std::vector<FoldClass>& classes, std::string& why) override {
        if (copies < 2) {
            why = "nothing to fold";
            return false;
        }
        if (config_.fidelity != Fidelity::Flow) {
            why = "the network is not flow-level";
            return false;
        }
        if (capacity_changed_) {
            why = "a link capacity was changed";
            return false;
        }
        if (folded_ > 1) {
            why = "already folded";
            return false;
        }
        // maps: member 0's solver links -> member m's; owner: which member a link belongs to
        // (dense per solver link: the classes' plans may add rate-cap links as they are made).
        LinkMaps maps;
        maps.image.resize(static_cast<std::size_t>(copies));
        std::vector<std::int32_t> owner;
        const auto claim = [&](LinkId l, int m) {
            if (l >= owner.size())
                owner.resize(std::max<std::size_t>(
                                 {std::size_t{l} + 1, 2 * owner.size(), real_links_.links}),
                             -1);
            std::int32_t& o = owner[l];
            if (o < 0) o = m;
            return o == m;
        };
        const auto match = [&](const Plan& a, const Plan& b, int m) -> std::string {
            if (a.fixed_latency != b.fixed_latency || a.phases.size() != b.phases.size() ||
                a.protocol != b.protocol || a.protocol_step != b.protocol_step)
                return "plans of different shape";
            for (std::size_t p = 0; p < a.phases.size(); ++p) {
                const Phase& pa = a.phases[p];
                const Phase& pb = b.phases[p];
                if (pa.steps != pb.steps || pa.latency != pb.latency ||
                    pa.flows.size() != pb.flows.size())
                    return "phases of different shape";
                for (std::size_t f = 0; f < pa.flows.size(); ++f) {
                    const FlowTemplate& fa = pa.flows[f];
                    const FlowTemplate& fb = pb.flows[f];
                    if (fa.bytes_per_size != fb.bytes_per_size || fa.rate_cap != fb.rate_cap ||
                        fa.path.size() != fb.path.size())
                        return "flows of different size, rate cap or route length";
                    for (std::size_t h = 0; h < fa.path.size(); ++h) {
                        const LinkId la = fa.path[h], lb = fb.path[h];
                        if (capacity_[la] != capacity_[lb]) return "links of different capacity";
                        if (!claim(la, 0) || !claim(lb, m))
                            return "members share link " +
                                   std::to_string(la < real_links_.links ? la : lb);
                        if (!maps.set(la, lb, static_cast<std::size_t>(m)))
                            return "routes that no link map carries onto each other (ECMP)";
                    }
                }
            }
            return {};
        };
        for (const FoldClass& c : classes) {
            const std::size_t n = c.collective ? c.groups.size() : c.src.size();
            if (n != static_cast<std::size_t>(copies) || (!c.collective && c.dst.size() != n)) {
                why = "a class without one transfer per member";
                return false;
            }
            for (int m = 0; m < copies; ++m) {
                const auto i = static_cast<std::size_t>(m);
                const Plan& a = c.collective
                                    ? collective_plan(c.kind, c.groups[0], c.size, Algorithm::Auto)
                                    : p2p_plan(c.src[0], c.dst[0]);
                const Plan& b = c.collective
                                    ? collective_plan(c.kind, c.groups[i], c.size, Algorithm::Auto)
                                    : p2p_plan(c.src[i], c.dst[i]);
                if (m > 0 && a.algorithm != b.algorithm) {
                    why = "members run different algorithms";
                    return false;
                }
                if (m == 0) {
                    (void)match(a, a, 0);
                    continue;
                }
                if (auto problem = match(a, b, m); !problem.empty()) {
                    why = problem;
                    return false;
                }
            }
        }
        // Member 0's own links must be claimed by member 0 alone (checked by claim above, in
        // both orders). Observers get every member's real links.
        real_links_.maps = std::move(maps);
        folded_ = copies;
        return true;
    }

    int fold_copies() const override { return folded_; }

    bool merge_link_chains() override {
        if (config_.fidelity != Fidelity::Flow || compact_ || capacity_changed_ ||
            routing_ != &cluster_ || !routings_.empty() || !solver_ ||
            solver_->active_flows() > 0 || !chain_of_.empty())
            return false;
        const auto& links = cluster_.links();
        const auto& devices = cluster_.devices();
        const std::size_t n = links.size();
        // Per device: its in- and out-links while there are at most two of each.
        constexpr LinkId kNoLink = ~LinkId{0};
        struct Ends {
            LinkId in[2] = {kNoLink, kNoLink}, out[2] = {kNoLink, kNoLink};
            int ins = 0, outs = 0;
        };
        std::vector<Ends> ends(devices.size());
        for (LinkId l = 0; l < n; ++l) {
            Ends& from = ends[links[l].from];
            if (from.outs < 2) from.out[from.outs] = l;
            ++from.outs;
            Ends& to = ends[links[l].to];
            if (to.ins < 2) to.in[to.ins] = l;
            ++to.ins;
        }
        // Union-find over the links; a chain pair (in from u, out to w != u) joins two.
        std::vector<LinkId> parent(n);
        for (LinkId l = 0; l < n; ++l)
            parent[l] = l;
        const auto root = [&](LinkId l) {
            while (parent[l] != l)
                l = parent[l] = parent[parent[l]];
            return l;
        };
        bool any = false;
        for (std::size_t v = 0; v < devices.size(); ++v) {
            const Ends& e = ends[v];
            if (devices[v].gpu >= 0 || e.ins != 2 || e.outs != 2) continue;
            const auto far = [&](LinkId out) { return links[out].to; };
            const auto near = [&](LinkId in) { return links[in].from; };
            if (far(e.out[0]) == far(e.out[1]) || near(e.in[0]) == near(e.in[1])) continue;
            for (LinkId in : e.in)
                for (LinkId out : e.out)
                    if (far(out) != near(in)) {
                        const LinkId a = root(in), b = root(out);
                        if (a != b) parent[std::max(a, b)] = std::min(a, b);
                        any = true;
                    }
        }
        if (!any) return false;
        // Each group's solver link: its least capacity, ties to the lowest id; the others point
        // to it. twin_: the group as a circular list (itself when alone).
        chain_of_.assign(n, kNoLink);
        twin_.assign(n, kNoLink);
        std::vector<LinkId> last(n, kNoLink);
        for (LinkId l = 0; l < n; ++l) {
            const LinkId r = root(l);
            const LinkId best = chain_of_[r];
            if (best == kNoLink || capacity_[l] < capacity_[best]) chain_of_[r] = l;
            // Link into the circular list of r's group, in increasing order.
            if (last[r] == kNoLink) {
                twin_[l] = l;
            } else {
                twin_[l] = twin_[last[r]];
                twin_[last[r]] = l;
            }
            last[r] = l;
        }
        for (LinkId l = 0; l < n; ++l)
            chain_of_[l] = chain_of_[root(l)];
        std::vector<std::size_t> size(n, 0);
        for (LinkId l = 0; l < n; ++l)
            real_links_.longest_chain = std::max(real_links_.longest_chain, ++size[root(l)]);
        real_links_.twins = &twin_;
        return true;
    }
    // merge_link_chains: per cluster link, the solver link it is carried on (itself, or its
    // chain's link of least capacity), and its chain as a circular list; empty without.
    std::vector<LinkId> chain_of_, twin_;
    // The solver path of a planned path: each link on its chain's solver link, a chain once (a
    // route crosses a chain's links one after another, so repeats are adjacent).
    const std::vector<LinkId>& solver_path(const std::vector<LinkId>& path) {
        merged_path_.clear();
        for (LinkId l : path) {
            const LinkId s = l < chain_of_.size() ? chain_of_[l] : l;
            if (merged_path_.empty() || merged_path_.back() != s) merged_path_.push_back(s);
        }
        return merged_path_;
    }
    std::vector<LinkId> merged_path_;  // scratch of solver_path

    RouteCost p2p_cost(int src, int dst) override {
        const Plan& plan = p2p_plan(src, dst);
        RouteCost cost;
        if (config_.fidelity == Fidelity::Ideal || plan.phases.empty()) return cost;
        const Phase& p = plan.phases.front();
        cost.delay = plan.fixed_latency + phase_delay(plan, p);
        cost.rate = flow_rate(p.flows.front());
        return cost;
    }

    bool accounts_in_bulk() const override { return !real_links_.wants_flow_times(); }

    // Sends accounted without a flow (account_send, account_sends): only outside `flow`, and
    // `count` > 1 at once only for observers that do not need each flow's times.
    void check_accounted_sends(std::int64_t count) const {
        if (config_.fidelity == Fidelity::Flow)
            throw SimulationError("network", "a send accounted without its flow under `flow`",
                                  sim_.now());
        if (count < 1 || (count > 1 && !accounts_in_bulk()))
            throw SimulationError(
                "network", "sends accounted in bulk for an observer of flow times", sim_.now());
    }

    void account_send(int src, int dst, Bytes size, std::int64_t count) override {
        check_accounted_sends(count);
        if (!observed()) return;
        const Plan& plan = p2p_plan(src, dst);
        const double bytes = static_cast<double>(size.value);
        for (const Phase& p : plan.phases)
            for (const FlowTemplate& f : p.flows) {
                const double fb = f.bytes_per_size * bytes;
                if (fb <= 0) continue;
                const Time t = config_.fidelity == Fidelity::Analytical
                                   ? transfer_time(fb, Bandwidth{flow_rate(f)})
                                   : Time::zero();
                // count equal flows: their bytes and stand-alone times summed (whole numbers of
                // bytes and picoseconds, so the sums are those of count separate notifications).
                real_links_.on_flow_start({sim_.now(), f.path,
                                           whole_bytes(fb) * static_cast<double>(count), false,
                                           t * count});
            }
    }

    // send_routes' result: per pair its cost and its flows (real links only, as observers see
    // them; the rate each is timed at), flat.
    class Routes final : public SendRoutes {
      public:
        struct Flow {
            std::uint32_t first = 0, links = 0;  // in `path`
            double bytes_per_size = 0;
            double rate = 0;
        };
        std::size_t size() const override { return costs.size(); }
        RouteCost cost(std::size_t i) const override { return costs[i]; }
        std::vector<RouteCost> costs;
        std::vector<std::uint32_t> flows_of;  // pair i: flows [flows_of[i], flows_of[i + 1])
        std::vector<Flow> flows;
        std::vector<LinkId> path;
        // For link sketches, made the first time an observer that sketches is told these sends
        // (account_sends): the flows with links grouped by what their whole bytes and holding
        // time are a function of (bytes per size, rate), each group with its paths' link keys
        // summed. A follower's sends are mostly one group: one term for all of them.
        struct Group {
            double bytes_per_size = 0;
            double rate = 0;
            PathKeys keys;
        };
        mutable std::vector<Group> groups;
        mutable bool grouped = false;
        std::size_t bytes() const {
            return sizeof(Routes) + costs.size() * sizeof(RouteCost) +
                   flows_of.size() * sizeof(std::uint32_t) + flows.size() * sizeof(Flow) +
                   path.size() * sizeof(LinkId);
        }
    };

    std::shared_ptr<const SendRoutes> send_routes(
        const std::vector<std::pair<int, int>>& pairs) override {
        // Kept only on the cluster's own routes and capacities (the rates are the base ones).
        const bool keep = shares_plans() && own_capacity_.empty();
        SharedPlans::CollectiveKey k;
        if (keep) {
            k.ranks.reserve(2 * pairs.size());
            for (const auto& [a, b] : pairs) {
                k.ranks.push_back(a);
                k.ranks.push_back(b);
            }
            k.words = calibration_words(CollectiveKind::SendRecv, Protocol::Simple);
            k.words[0] = ~std::uint64_t{0};  // not a group: send routes
            k.words[1] = static_cast<std::uint64_t>(config_.fidelity);
            k.words[2] = static_cast<std::uint64_t>(config_.step_overhead.count_ps());
            if (auto it = shared_plans_->sends.find(k); it != shared_plans_->sends.end())
                return it->second;
        }
        auto r = std::make_shared<Routes>();
        r->costs.reserve(pairs.size());
        r->flows_of.reserve(pairs.size() + 1);
        for (const auto& [src, dst] : pairs) {
            r->costs.push_back(p2p_cost(src, dst));
            r->flows_of.push_back(static_cast<std::uint32_t>(r->flows.size()));
            const Plan& plan = p2p_plan(src, dst);
            for (const Phase& p : plan.phases)
                for (const FlowTemplate& f : p.flows) {
                    Routes::Flow flow;
                    flow.first = static_cast<std::uint32_t>(r->path.size());
                    for (LinkId l : f.path)
                        if (l < real_links_.links) r->path.push_back(l);
                    flow.links = static_cast<std::uint32_t>(r->path.size()) - flow.first;
                    flow.bytes_per_size = f.bytes_per_size;
                    flow.rate = flow_rate(f);
                    r->flows.push_back(flow);
                }
        }
        r->flows_of.push_back(static_cast<std::uint32_t>(r->flows.size()));
        if (keep && shared_plans_->collective_bytes < SharedPlans::kMaxBytes) {
            shared_plans_->collective_bytes += r->bytes() + k.ranks.size() * sizeof(int);
            shared_plans_->sends.emplace(std::move(k), r);
        }
        return r;
    }

    void hold_link_totals() override { hold_totals_ = true; }
    void flush_link_totals() override {
        for (const auto& [cost, count] : held_)
            real_links_.tell_cost(sim_.now(), cluster_, *cost, count);
        held_.clear();
        held_of_.clear();
        real_links_.tell_images();
    }

    void account_sends(const SendRoutes& routes, Bytes size, std::int64_t count) override {
        check_accounted_sends(count);
        if (!observed()) return;
        const auto& r = dynamic_cast<const Routes&>(routes);
        // As account_send, pair after pair: real_links_.on_flow_start drops the virtual links
        // (done in send_routes) and, unfolded by members (always, outside `flow`), passes the
        // flow on to its targets as it is.
        if (!real_links_.maps.empty())
            throw SimulationError("network", "sends accounted in a run folded by members",
                                  sim_.now());
        const double bytes = static_cast<double>(size.value);
        const bool timed = config_.fidelity == Fidelity::Analytical;
        // A flow's holding time, as start() times it (the last one reused for equal arguments).
        double last_fb = -1, last_rate = -1;
        Time last_t = Time::zero();
        const auto holds = [&](double fb, double rate) {
            if (!timed) return Time::zero();
            if (fb != last_fb || rate != last_rate) {
                last_fb = fb;
                last_rate = rate;
                last_t = transfer_time(fb, Bandwidth{rate});
            }
            return last_t;
        };
        if (!real_links_.tables.empty())
            for (const Routes::Flow& f : r.flows) {
                const double fb = f.bytes_per_size * bytes;
                if (fb <= 0 || f.links == 0) continue;
                const Time t = holds(fb, f.rate);
                const NetworkObserver::FlowStart flow{
                    sim_.now(), std::span<const LinkId>(r.path.data() + f.first, f.links),
                    whole_bytes(fb) * static_cast<double>(count), false, t * count};
                for (SummingObserver* o : real_links_.tables)
                    o->on_flow_start(flow);
            }
        if (real_links_.sketches.empty()) return;
        // The sketch is linear: a group's flows add their summed keys times the group's whole
        // bytes and holding time, as each flow would add its own.
        if (!r.grouped) {
            for (const Routes::Flow& f : r.flows) {
                if (f.links == 0) continue;
                const PathKeys k = path_keys(
                    *real_links_.keys, std::span<const LinkId>(r.path.data() + f.first, f.links));
                auto g = std::find_if(r.groups.begin(), r.groups.end(), [&](const auto& x) {
                    return x.bytes_per_size == f.bytes_per_size && x.rate == f.rate;
                });
                if (g == r.groups.end())
                    g = r.groups.insert(r.groups.end(), {f.bytes_per_size, f.rate, {}});
                g->keys = {modp::add(g->keys.bytes, k.bytes), modp::add(g->keys.holds, k.holds)};
            }
            r.grouped = true;
        }
        std::uint64_t term = 0;
        for (const Routes::Group& g : r.groups) {
            const double fb = g.bytes_per_size * bytes;
            if (fb <= 0) continue;
            term = modp::add(term,
                             link_sketch_term(g.keys, whole_bytes(fb) * static_cast<double>(count),
                                              holds(fb, g.rate) * count));
        }
        for (SummingObserver* o : real_links_.sketches)
            o->on_link_sketch(term);
    }

    void set_link_capacity(LinkId link, Bandwidth bandwidth) override {
        check_capacity(link, bandwidth);
        refuse_if_folded();
        capacity_changed_ = true;
        const auto& links = cluster_.links();
        const double eff = config_.link_efficiency[static_cast<int>(links[link].kind)];
        if (own_capacity_.empty()) {
            own_capacity_ = base_capacity_->capacity;
            capacity_ = own_capacity_.data();
        }
        own_capacity_[link] = bandwidth.bytes_per_s * eff;
        own_capacity_[links.size() + link] = bandwidth.bytes_per_s * config_.nvls_efficiency;
        if (!solver_) return;
        solver_->set_capacity(link, capacity_[link]);
        solver_->set_capacity(static_cast<LinkId>(links.size() + link),
                              capacity_[links.size() + link]);
        ensure_recompute();
    }

    void schedule_link_capacity(Time at, LinkId link, Bandwidth bandwidth) override {
        check_capacity(link, bandwidth);
        refuse_if_folded();
        capacity_changed_ = true;
        sim_.schedule_at(at, handler_, kSetCapacity, link,
                         std::bit_cast<std::uint64_t>(bandwidth.bytes_per_s));
    }

    void schedule_routing(Time at, const Cluster& routing) override {
        if (routing.links().size() != cluster_.links().size())
            throw SimulationError("network", "a routing cluster with other links", sim_.now());
        routings_.push_back(&routing);
        sim_.schedule_at(at, handler_, kRouting, routings_.size() - 1);
    }

    void on_event(Simulation& sim, const Event& e) override {
        switch (e.kind) {
            case kDone:
                release(static_cast<std::uint32_t>(e.a));
                break;
            case kPhaseStart:
                start_phase(static_cast<std::uint32_t>(e.a));
                break;
            case kRecompute:
                recompute_scheduled_ = false;
                solver_->recompute(sim.now(), observers_);
                free_caps_.insert(free_caps_.end(), retired_caps_.begin(), retired_caps_.end());
                retired_caps_.clear();
                schedule_next_completion();
                break;
            case kCompletion:
                if (e.b == completion_version_) complete_flows();
                break;
            case kSetCapacity:
                set_link_capacity(static_cast<LinkId>(e.a), Bandwidth{std::bit_cast<double>(e.b)});
                break;
            case kRouting:
                change_routing(*routings_[e.a]);
                break;
            default:
                throw SimulationError("network", "unknown event kind", sim.now());
        }
        flush_callbacks(sim);
    }

  private:
    friend struct network::KeptPlans;
    struct SharedPlans;
    // The plans `kept` keeps (made on first use); defined after KeptPlans, below.
    static std::shared_ptr<SharedPlans> kept_plans(KeptState& kept);
    // Member folding's link maps: member 0's solver links numbered in the order met, and each
    // member's image of each. Dense arrays: a folded 16,384-GPU run looks one up per link of every
    // flow, and the fold's check builds them from a million route hops.
    struct LinkMaps {
        static constexpr LinkId kNone = ~LinkId{0};
        std::vector<std::int32_t> number;  // per solver link: its number, -1 if not member 0's
        std::vector<std::vector<LinkId>> image;  // image[m][k]: member m's link for number k
        std::size_t size() const { return image.size(); }
        bool empty() const { return image.empty(); }
        // Records that member m's link for member 0's `of` is `to`; member 0 first (m = 0, to =
        // of). False when member m already had another image of `of`.
        bool set(LinkId of, LinkId to, std::size_t m) {
            if (of >= number.size()) number.resize(std::size_t{of} + 1, -1);
            if (number[of] < 0) {
                if (m != 0) return false;  // member 0's plans come first
                number[of] = static_cast<std::int32_t>(image[0].size());
                image[0].push_back(of);
            }
            const auto k = static_cast<std::size_t>(number[of]);
            auto& img = image[m];
            if (img.size() <= k) img.resize(image[0].size(), kNone);
            if (img[k] == kNone) img[k] = to;
            return img[k] == to;
        }
        // Member m's image of member 0's link l, kNone if l is not member 0's or has none.
        LinkId find(LinkId l, std::size_t m) const {
            if (l >= number.size() || number[l] < 0) return kNone;
            const auto k = static_cast<std::size_t>(number[l]);
            return k < image[m].size() ? image[m][k] : kNone;
        }
    };

    // Passes notifications about the cluster's links on to the observers, leaving out the
    // virtual links (NVLS caps, private rate caps) numbered after them.
    struct RealLinksOnly final : NetworkObserver {
        std::size_t links = 0;
        std::vector<NetworkObserver*> targets;
        // Per target, itself as a SummingObserver when the network tells it sums (fast paths),
        // else null; the summing ones split by sketch_keys(): told sums as a link sketch's term /
        // as flows or link totals.
        std::vector<SummingObserver*> summing;
        std::vector<SummingObserver*> sketches, tables;
        const std::vector<std::uint64_t>* keys = nullptr;  // the sketching observers' link keys
        // A kept transfer's cost, `count` times: its link totals, or its sketch term.
        void tell_cost(Time at, const Cluster&, const PlanCost& cost, std::int64_t count) {
            for (SummingObserver* o : tables)
                o->on_link_totals(at, cost.links, count);
            if (sketches.empty()) return;
            if (!cost.sketched) {
                cost.sketch = link_totals_sketch(*keys, cost.links);
                cost.sketched = true;
            }
            const std::uint64_t term =
                modp::mul(cost.sketch, modp::of(static_cast<std::uint64_t>(count)));
            for (SummingObserver* o : sketches)
                o->on_link_sketch(term);
        }
        std::vector<LinkId> real_path;  // scratch, reused
        // Member folding (Network::fold): maps[m] carries member 0's links onto member m's; empty
        // without folding. Each notification about member 0's flows is repeated for every member
        // to the `repeated` targets; the `copiers` (copies_link_images, fast paths only) are told
        // member 0's alone and, at tell_images(), which links mirror which.
        LinkMaps maps;
        // merge_link_chains: each link's chain as a circular list (null without): a solver
        // link's rate is also every other link's of its chain.
        const std::vector<LinkId>* twins = nullptr;
        std::vector<NetworkObserver*> repeated;
        std::vector<SummingObserver*> copiers;
        std::vector<LinkId> copy_path;  // scratch, reused
        std::span<const LinkId> real(std::span<const LinkId> path) {
            // Mostly every link is real: the path as it is, no copy.
            if (std::all_of(path.begin(), path.end(), [this](LinkId l) { return l < links; }))
                return path;
            real_path.clear();
            for (LinkId l : path)
                if (l < links) real_path.push_back(l);
            return real_path;
        }
        LinkId image(LinkId l, std::size_t m) const {
            const LinkId i = maps.find(l, m);
            if (i == LinkMaps::kNone)
                throw SimulationError("network", "a flow outside the folded transfers (link " +
                                                     std::to_string(l) + ")");
            return i;
        }
        std::span<const LinkId> copy(std::span<const LinkId> path, std::size_t m) {
            copy_path.clear();
            for (LinkId l : path)
                copy_path.push_back(image(l, m));
            return copy_path;
        }
        void on_flow_start(const FlowStart& flow) override {
            // Unfolded (every run outside `flow`) and on real links only: as it is.
            if (maps.empty() && std::all_of(flow.path.begin(), flow.path.end(),
                                            [this](LinkId l) { return l < links; })) {
                if (flow.path.empty()) return;
                for (NetworkObserver* o : targets)
                    o->on_flow_start(flow);
                return;
            }
            FlowStart f = flow;
            f.path = real(flow.path);
            if (f.path.empty()) return;
            for (NetworkObserver* o : targets)
                o->on_flow_start(f);
            if (maps.size() < 2) return;
            if (repeated.empty()) {
                // A flow outside the folded transfers is still an error (image() throws).
                for (LinkId l : f.path)
                    (void)image(l, 1);
                return;
            }
            for (std::size_t m = 1; m < maps.size(); ++m) {
                FlowStart c = f;
                c.path = copy(f.path, m);
                for (NetworkObserver* o : repeated)
                    o->on_flow_start(c);
            }
        }
        void on_flow_end(Time at, std::span<const LinkId> path) override {
            const auto p = real(path);
            if (p.empty()) return;
            for (NetworkObserver* o : targets)
                o->on_flow_end(at, p);
            if (repeated.empty()) return;
            for (std::size_t m = 1; m < maps.size(); ++m) {
                const auto c = copy(p, m);
                for (NetworkObserver* o : repeated)
                    o->on_flow_end(at, c);
            }
        }
        void on_link_rate(Time at, LinkId link, double bytes_per_s, int flows) override {
            if (link >= links) return;
            if (twins) {
                const LinkRate r{link, bytes_per_s, flows};
                on_link_rates(at, std::span<const LinkRate>(&r, 1));
                return;
            }
            for (NetworkObserver* o : targets)
                o->on_link_rate(at, link, bytes_per_s, flows);
            for (std::size_t m = 1; m < maps.size(); ++m)
                for (NetworkObserver* o : repeated)
                    o->on_link_rate(at, image(link, m), bytes_per_s, flows);
        }
        std::vector<LinkRate> real_rates;  // scratch, reused
        // on_link_rates() runs at every re-solve: the real links' rates are written through a
        // pointer into room made up front (the chains' links included: longest_chain per rate).
        std::unique_ptr<LinkRate[]> rate_room;
        std::size_t rate_room_size = 0;
        std::size_t longest_chain = 1;
        void on_link_rates(Time at, std::span<const LinkRate> rates) override {
            const std::size_t room = rates.size() * (twins ? longest_chain : 1);
            if (rate_room_size < room) {
                rate_room = std::make_unique_for_overwrite<LinkRate[]>(room);
                rate_room_size = room;
            }
            LinkRate* const first = rate_room.get();
            LinkRate* out = first;
            for (const LinkRate& r : rates)
                if (r.link < links) *out++ = r;
            if (out == first) return;
            if (twins) {
                // The other links of each rate's chain carry the same flows at the same rate.
                const LinkId* twin = twins->data();
                LinkRate* const reals = out;
                for (const LinkRate* r = first; r != reals; ++r)
                    for (LinkId t = twin[r->link]; t != r->link; t = twin[t])
                        *out++ = {t, r->bytes_per_s, r->flows};
                if (out != reals && wants_ordered_link_rates())
                    std::sort(first, out,
                              [](const LinkRate& a, const LinkRate& b) { return a.link < b.link; });
            }
            const std::span<const LinkRate> told(first, out);
            for (SummingObserver* o : copiers)
                o->on_link_rates(at, told);
            if (repeated.empty()) return;
            real_rates.assign(first, out);
            if (maps.size() > 1) {
                const std::size_t n = real_rates.size();
                for (std::size_t m = 1; m < maps.size(); ++m)
                    for (std::size_t i = 0; i < n; ++i) {
                        LinkRate r = real_rates[i];
                        r.link = image(r.link, m);
                        real_rates.push_back(r);
                    }
                if (std::any_of(repeated.begin(), repeated.end(), [](const NetworkObserver* o) {
                        return o->wants_ordered_link_rates();
                    }))
                    std::sort(real_rates.begin(), real_rates.end(),
                              [](const LinkRate& a, const LinkRate& b) { return a.link < b.link; });
            }
            for (NetworkObserver* o : repeated)
                o->on_link_rates(at, real_rates);
        }
        // Under member folding, tells the copiers which real links mirror member 0's (each
        // member's images, in increasing image order).
        void tell_images() {
            if (maps.size() < 2 || copiers.empty()) return;
            std::vector<SummingObserver::LinkImage> images;
            const auto& own = maps.image[0];
            for (std::size_t m = 1; m < maps.size(); ++m)
                for (std::size_t k = 0; k < own.size(); ++k)
                    if (own[k] < links && k < maps.image[m].size() &&
                        maps.image[m][k] != LinkMaps::kNone)
                        images.push_back({own[k], maps.image[m][k]});
            std::sort(images.begin(), images.end(),
                      [](const SummingObserver::LinkImage& a, const SummingObserver::LinkImage& b) {
                          return a.image < b.image;
                      });
            for (SummingObserver* o : copiers)
                o->on_link_images(images);
        }
        bool wants_ordered_link_rates() const override {
            return std::any_of(targets.begin(), targets.end(), [](const NetworkObserver* o) {
                return o->wants_ordered_link_rates();
            });
        }
        // Whether a target needs each flow's own start time: one that is not told sums.
        bool wants_flow_times() const {
            return std::any_of(summing.begin(), summing.end(),
                               [](const SummingObserver* o) { return o == nullptr; });
        }
        // Real links only, never under member folding, and only when every target sums
        // (takes_link_totals).
        void on_link_totals(Time at, std::span<const SummingObserver::LinkTotal> totals,
                            std::int64_t count) {
            for (SummingObserver* o : summing)
                o->on_link_totals(at, totals, count);
        }
    };
    bool observed() const { return !real_links_.targets.empty(); }

    struct Op {
        const Plan* plan = nullptr;
        double size = 0;
        std::uint64_t token = 0;
        std::uint32_t phase = 0;
        std::uint32_t outstanding = 0;
    };

    void check_gpu(int gpu) const {
        if (gpu < 0 || gpu >= cluster_.gpu_count()) [[unlikely]]
            no_such_gpu(gpu);
    }
    [[noreturn, gnu::cold, gnu::noinline]] void no_such_gpu(int gpu) const {
        throw ConfigError("GPU " + std::to_string(gpu) + " does not exist (the cluster has " +
                          std::to_string(cluster_.gpu_count()) + " GPUs)");
    }

    // compact_: solver links for the plan's links, in increasing cluster order, before any rate
    // cap link is added (as in a full network, where caps come after every cluster link).
    void number_compact(const Plan& plan) {
        std::vector<LinkId> used;
        for (const Phase& p : plan.phases)
            for (const FlowTemplate& f : p.flows)
                used.insert(used.end(), f.path.begin(), f.path.end());
        std::sort(used.begin(), used.end());
        used.erase(std::unique(used.begin(), used.end()), used.end());
        for (LinkId l : used) {
            if (compact_id_.count(l)) continue;
            if (solver_->link_count() != compact_id_.size())
                throw SimulationError("network", "a compact network runs one collective");
            compact_id_.emplace(l, solver_->add_link(capacity_[l]));
        }
    }

    void refuse_if_folded() const {
        if (!chain_of_.empty())
            throw SimulationError("network", "a link capacity changed after link chains merged",
                                  sim_.now());
        if (folded_ > 1)
            throw SimulationError("network",
                                  "a link capacity changed in a run folded by members; run it "
                                  "with --no-fold",
                                  sim_.now());
    }

    void check_capacity(LinkId link, Bandwidth bandwidth) const {
        if (link >= cluster_.links().size())
            throw SimulationError("network",
                                  "no link " + std::to_string(link) + " (the cluster has " +
                                      std::to_string(cluster_.links().size()) + " directed links)",
                                  sim_.now());
        if (!(bandwidth.bytes_per_s >= 0) ||
            bandwidth.bytes_per_s == std::numeric_limits<double>::infinity())
            throw SimulationError(
                "network",
                "link " + std::to_string(link) + " needs a finite capacity of at least 0",
                sim_.now());
    }

    // A phase's steps' delay. Simple: per step the configured step overhead (which p2p plans
    // kept with the cluster do not carry) and the phase's route latency. LL and LL128: per step
    // the protocol's latency on the route's class, which NCCL measures hop to hop (the link's
    // own latency is in it).
    Time phase_delay(const Plan& plan, const Phase& p) const {
        const Time step = plan.protocol == Protocol::Simple ? config_.step_overhead + p.latency
                                                            : plan.protocol_step;
        return step * static_cast<std::int64_t>(p.steps);
    }

    double bottleneck(const std::vector<LinkId>& path) const {
        double bw = capacity_[path.front()];
        for (LinkId l : path)
            bw = std::min(bw, capacity_[l]);
        return bw;
    }
    // The capacity a solver link was built with, before any set_link_capacity().
    double nominal_capacity(LinkId l) const {
        const auto& links = cluster_.links();
        if (l >= links.size())
            return links[l - links.size()].bandwidth.bytes_per_s * config_.nvls_efficiency;
        return links[l].bandwidth.bytes_per_s *
               config_.link_efficiency[static_cast<int>(links[l].kind)];
    }

    // The operation's calibration on the plan's links (NetworkConfig::op_efficiency and
    // op_latency): a rate cap on each flow that one of its links' kinds limits below the route's
    // bottleneck, and the plan's fixed cost, the largest over the kinds it crosses. Virtual links
    // (numbered after the cluster's) have no kind and are skipped.
    void apply_operation(Plan& plan, CollectiveKind kind) const {
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

    // LL and LL128 on a plan built for Simple (apply_operation done): their per-step latency on
    // the plan's route class, their base in place of Simple's fixed cost, and each flow's rate
    // cap at the protocol's fraction of what it reaches under Simple, within the protocol's
    // channel and total limits (ProtocolConstants).
    void apply_protocol(Plan& plan, CollectiveKind kind, Protocol protocol,
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

    // A flow's rate alone on the nominal capacities: its route's bottleneck, or its cap below it.
    double nominal_rate(const FlowTemplate& f) const {
        double route = nominal_capacity(f.path.front());
        for (LinkId l : f.path)
            route = std::min(route, nominal_capacity(l));
        return f.rate_cap > 0 ? std::min(f.rate_cap, route) : route;
    }

    double flow_rate(const FlowTemplate& f) const {
        return f.rate_cap > 0 ? std::min(f.rate_cap, bottleneck(f.path)) : bottleneck(f.path);
    }

    // A transfer of `bytes` on `plan` outside `flow`: its time (analytical: the fixed latency,
    // then per phase its delay and its longest flow; ideal: zero), calling each(flow, its
    // bytes, its stand-alone time) for every flow that carries bytes. The one definition of
    // start()'s time, run flow by flow or once for a kept cost (kept_cost).
    template <typename Each>
    Time unshared_time(const Plan& plan, double bytes, Each&& each) const {
        const bool analytical = config_.fidelity == Fidelity::Analytical;
        Time total = analytical && !plan.phases.empty() ? plan.fixed_latency : Time::zero();
        // A collective's flows mostly carry equal bytes at equal rates: the last time is reused
        // for the same arguments (transfer_time is a function of them).
        double last_fb = -1, last_rate = -1;
        Time last_t = Time::zero();
        for (const Phase& p : plan.phases) {
            Time longest = Time::zero();
            for (const FlowTemplate& f : p.flows) {
                const double fb = f.bytes_per_size * bytes;
                if (fb <= 0) continue;
                Time t = Time::zero();  // ideal: free, even at 0
                if (analytical) {
                    const double rate = flow_rate(f);
                    if (fb != last_fb || rate != last_rate) {
                        last_fb = fb;
                        last_rate = rate;
                        last_t = transfer_time(fb, Bandwidth{rate});
                    }
                    t = last_t;
                    longest = std::max(longest, t);
                }
                each(f, fb, t);
            }
            if (analytical) total += phase_delay(plan, p) + longest;
        }
        return total;
    }

    // Whether the observers may be told a transfer's per-link sums (NetworkObserver::
    // on_link_totals): none wants flow times, and no member folding repeats each flow.
    bool takes_link_totals() const { return accounts_in_bulk() && real_links_.maps.empty(); }

    // What a transfer of `size` on a kept plan costs outside `flow` (start's loop below, done
    // once): its time and its flows' whole bytes and holding times summed per real link, in
    // increasing link order. Kept with the cluster's plans, keyed by the plan (kept plans are
    // never erased), the size and what the times are a function of besides (fidelity, step
    // overhead, the efficiencies behind the capacities); null once the kept plans are full.
    const PlanCost* kept_cost(const Plan& plan, Bytes size) {
        // This network's own index first: its configuration is fixed, so (plan, size) is the key.
        // A null entry remembers that the kept costs were full when the key was first asked for
        // (they only grow), so that the shared table is not searched again for it.
        const auto mine = std::pair{&plan, size.value};
        if (auto it = cost_of_.find(mine); it != cost_of_.end()) return it->second;
        const PlanCost* cost = shared_cost(plan, size);
        cost_of_.emplace(mine, cost);
        return cost;
    }
    const PlanCost* shared_cost(const Plan& plan, Bytes size) {
        SharedPlans& shared = *shared_plans_;
        SharedPlans::CostKey k{&plan,
                               size.value,
                               static_cast<std::uint64_t>(config_.fidelity),
                               config_.step_overhead.count_ps(),
                               {}};
        for (int l = 0; l < kLinkKinds; ++l)
            k.efficiency[static_cast<std::size_t>(l)] =
                std::bit_cast<std::uint64_t>(config_.link_efficiency[l]);
        k.efficiency[kLinkKinds] = std::bit_cast<std::uint64_t>(config_.nvls_efficiency);
        if (auto it = shared.costs.find(k); it != shared.costs.end()) return &it->second;
        if (shared.collective_bytes >= SharedPlans::kMaxBytes) return nullptr;
        PlanCost cost;
        auto& sums = shared.link_sums;
        if (sums.size() < real_links_.links) sums.resize(real_links_.links);
        std::vector<LinkId> touched;
        cost.time = unshared_time(plan, static_cast<double>(size.value),
                                  [&](const FlowTemplate& f, double fb, Time t) {
                                      const double whole = whole_bytes(fb);
                                      for (LinkId l : f.path) {
                                          if (l >= real_links_.links) continue;
                                          auto& sum = sums[l];
                                          if (sum.bytes == 0) touched.push_back(l);
                                          sum.bytes += whole;
                                          sum.holds += t;
                                      }
                                  });
        std::sort(touched.begin(), touched.end());
        cost.links.reserve(touched.size());
        for (LinkId l : touched) {
            cost.links.push_back({l, sums[l].bytes, sums[l].holds});
            sums[l] = {};
        }
        shared.collective_bytes += sizeof(SharedPlans::CostKey) + sizeof(PlanCost) + 64 +
                                   cost.links.size() * sizeof(SummingObserver::LinkTotal);
        return &shared.costs.emplace(k, std::move(cost)).first->second;
    }

    std::uint32_t allocate(const Plan& plan, Bytes size, std::uint64_t token) {
        std::uint32_t id;
        if (!free_ops_.empty()) {
            id = free_ops_.back();
            free_ops_.pop_back();
        } else {
            id = static_cast<std::uint32_t>(ops_.size());
            ops_.emplace_back();
        }
        ops_[id] = Op{&plan, static_cast<double>(size.value), token, 0, 0};
        return id;
    }

    // `kept`: the plan is kept with the cluster (SharedPlans), so what a size costs on it may be
    // kept too (kept_cost).
    void start(const Plan& plan, Bytes size, std::uint64_t token, bool kept = false) {
        if (size.value < 0)
            throw SimulationError("network", "a transfer of negative size", sim_.now());
        const std::uint32_t op = allocate(plan, size, token);
        if (config_.fidelity == Fidelity::Flow && !plan.phases.empty()) {
            sim_.schedule_in(plan.fixed_latency + phase_delay(plan, plan.phases.front()), handler_,
                             kPhaseStart, op);
            return;
        }
        // Even a zero-cost transfer completes through an event, never inside send().
        sim_.schedule_in(unshared_start(plan, size, kept), handler_, kDone, op);
    }

    int send_each(std::span<const int> srcs, std::span<const int> dsts, Bytes size,
                  std::uint64_t token) {
        for (std::size_t i = 0; i < srcs.size(); ++i)
            send(srcs[i], dsts[i], size, token);
        return static_cast<int>(srcs.size());
    }
    int send_together(std::span<const int> srcs, std::span<const int> dsts, Bytes size,
                      std::uint64_t token) override {
        if (config_.fidelity == Fidelity::Flow || srcs.empty())
            return send_each(srcs, dsts, size, token);
        if (size.value < 0)
            throw SimulationError("network", "a transfer of negative size", sim_.now());
        Time last = Time::zero();
        const Plan* plan = nullptr;
        for (std::size_t i = 0; i < srcs.size(); ++i) {
            bool kept = false;
            plan = &p2p_plan(srcs[i], dsts[i], &kept);
            last = std::max(last, unshared_start(*plan, size, kept));
        }
        sim_.schedule_in(last, handler_, kDone, allocate(*plan, size, token));
        return 1;
    }

    // Outside `flow`: tells the observers of a transfer of `size` on `plan` started now and
    // returns its time. A transfer's time and its flows' per-link sums are functions of the
    // plan, the size and the capacities: a sweep's later runs on a shape take them as they are
    // (kept_cost) instead of walking every flow of every DP ring again.
    Time unshared_start(const Plan& plan, Bytes size, bool kept) {
        if (own_capacity_.empty() && (!observed() || takes_link_totals())) {
            if (const PlanCost* cost = kept ? kept_cost(plan, size) : nullptr) {
                if (observed() && !cost->links.empty()) {
                    if (hold_totals_) {
                        const auto [at, fresh] = held_of_.try_emplace(cost, held_.size());
                        if (fresh) held_.push_back({cost, 0});
                        ++held_[at->second].second;
                    } else {
                        real_links_.tell_cost(sim_.now(), cluster_, *cost, 1);
                    }
                }
                return cost->time;
            }
            if (!observed()) {
                // A plan not kept with the cluster, or kept costs full: this network keeps the
                // times it works out itself (plans are never freed while it lives: routes
                // changed retire them, so their addresses are not reused).
                const auto [at, fresh] = own_time_of_.try_emplace({&plan, size.value});
                if (fresh)
                    at->second = unshared_time(plan, static_cast<double>(size.value),
                                               [](const FlowTemplate&, double, Time) {});
                return at->second;
            }
        }
        return unshared_time(
            plan, static_cast<double>(size.value),
            [this](const FlowTemplate& f, double fb, Time t) {
                if (observed())
                    real_links_.on_flow_start({sim_.now(), f.path, whole_bytes(fb), false, t});
            });
    }

    void start_phase(std::uint32_t id) {
        Op& op = ops_[id];
        const Phase& p = op.plan->phases[op.phase];
        for (const FlowTemplate& planned : p.flows) {
            const double bytes = planned.bytes_per_size * op.size;
            if (bytes <= 0) continue;
            // A plan made before links failed: the flow takes a route around them.
            const FlowTemplate& f = crosses_failed(planned.path) ? detour(planned) : planned;
            if (f.rate_cap > 0) {
                // The flow's own rate limit: a link of its own with that capacity.
                LinkId cap;
                if (free_caps_.empty()) {
                    cap = solver_->add_link(f.rate_cap);
                } else {
                    cap = free_caps_.back();
                    free_caps_.pop_back();
                    solver_->set_capacity(cap, f.rate_cap);
                }
                if (chain_of_.empty()) {
                    capped_path_.assign(f.path.begin(), f.path.end());
                } else {
                    const auto& merged = solver_path(f.path);
                    capped_path_.assign(merged.begin(), merged.end());
                }
                if (compact_)
                    for (LinkId& l : capped_path_)
                        l = compact_id_.at(l);
                capped_path_.push_back(cap);
                const auto flow = solver_->add(capped_path_, bytes, id, sim_.now());
                if (flow >= cap_of_flow_.size()) cap_of_flow_.resize(flow + 1, kNoCap);
                cap_of_flow_[flow] = cap;
                note_start(flow, f, bytes);
            } else {
                if (compact_) {
                    capped_path_.clear();
                    for (LinkId l : f.path)
                        capped_path_.push_back(compact_id_.at(l));
                }
                const auto flow = solver_->add(compact_            ? capped_path_
                                               : chain_of_.empty() ? f.path
                                                                   : solver_path(f.path),
                                               bytes, id, sim_.now());
                if (flow < cap_of_flow_.size()) cap_of_flow_[flow] = kNoCap;
                note_start(flow, f, bytes);
            }
            ++op.outstanding;
        }
        if (op.outstanding == 0) advance(id);
        ensure_recompute();
    }

    // Every solver flow's template is kept: its GPUs should a failed link move it, and the path
    // observers were told of, for its end.
    void note_start(FlowSolver::FlowId flow, const FlowTemplate& f, double bytes) {
        if (flow >= flow_template_.size()) flow_template_.resize(flow + 1, nullptr);
        flow_template_[flow] = &f;
        if (!observed()) return;
        real_links_.on_flow_start({sim_.now(), f.path, whole_bytes(bytes), true, Time::zero()});
    }

    void advance(std::uint32_t id) {
        Op& op = ops_[id];
        if (++op.phase < op.plan->phases.size()) {
            sim_.schedule_in(phase_delay(*op.plan, op.plan->phases[op.phase]), handler_,
                             kPhaseStart, id);
            return;
        }
        release(id);
    }

    void release(std::uint32_t id) {
        done_tokens_.push_back(ops_[id].token);
        free_ops_.push_back(id);
    }

    void complete_flows() {
        scheduled_completion_ = Time::max();
        const Time now = sim_.now();
        for (;;) {
            const auto f = solver_->next_finishing();
            if (f == FlowSolver::kNoFlow || solver_->finish_time(f) > now) break;
            const std::uint32_t id = solver_->owner(f);
            solver_->remove(f);
            if (observed()) real_links_.on_flow_end(now, observed_path(f));
            if (f < cap_of_flow_.size() && cap_of_flow_[f] != kNoCap) {
                // Reusable once the solver has re-solved without the flow.
                retired_caps_.push_back(cap_of_flow_[f]);
                cap_of_flow_[f] = kNoCap;
            }
            if (--ops_[id].outstanding == 0) advance(id);
        }
        ensure_recompute();
        if (!solver_->dirty()) schedule_next_completion();
    }

    bool crosses_failed(const std::vector<LinkId>& path) const {
        if (routing_ == &cluster_) return false;
        const std::size_t real = cluster_.links().size();
        return std::any_of(path.begin(), path.end(),
                           [&](LinkId l) { return l < real && routing_->link_failed(l); });
    }

    // The template `f` on a route of the current routing between the GPUs its path joins. Kept
    // until the network ends (flows and observers point to it).
    const FlowTemplate& detour(const FlowTemplate& f) {
        const auto& links = cluster_.links();
        const auto& devices = cluster_.devices();
        const int src = devices[links[f.path.front()].from].gpu;
        const int dst = devices[links[f.path.back()].to].gpu;
        if (src < 0 || dst < 0)
            throw ConfigError("a flow from " + devices[links[f.path.front()].from].id + " to " +
                              devices[links[f.path.back()].to].id +
                              " crosses a failed link and does not join two GPUs (an NVLS "
                              "collective), so it cannot be re-routed; fail the link from the "
                              "start (at: 0) or use another collective algorithm");
        auto t = std::make_unique<FlowTemplate>(f);
        t->path.clear();
        routing_->route(src, dst, ++detours_made_, t->path);
        detours_.push_back(std::move(t));
        return *detours_.back();
    }

    // The links of flow f as observers were told when it started.
    const std::vector<LinkId>& observed_path(FlowSolver::FlowId f) const {
        return flow_template_[f]->path;
    }

    // Makes `routing` the network's routes (schedule_routing): plans cached so far stay alive for
    // the operations using them but are no longer found; flows in flight over failed links move.
    void change_routing(const Cluster& routing) {
        if (!chain_of_.empty())
            throw SimulationError("network", "routes changed after link chains merged", sim_.now());
        retired_plans_.push_back(std::move(plans_));
        retired_plans_.push_back(std::move(p2p_plans_));
        plans_.clear();
        p2p_plans_.clear();
        plan_memo_.clear();
        shared_plan_of_.clear();  // not used again: the routes are no longer the cluster's
        resolved_.clear();        // resolved on the old routes
        routing_ = &routing;
        if (!solver_) return;
        const Time now = sim_.now();
        std::vector<FlowSolver::FlowId> moving;
        for (LinkId l = 0; l < cluster_.links().size(); ++l)
            if (routing_->link_failed(l))
                for (FlowSolver::FlowId f : solver_->flows_on(l))
                    moving.push_back(f);
        std::sort(moving.begin(), moving.end());
        moving.erase(std::unique(moving.begin(), moving.end()), moving.end());
        for (FlowSolver::FlowId f : moving) {
            const double left = solver_->remaining(f, now);
            if (left <= 0) continue;  // its last byte arrives now
            // The flow's template gives its GPUs; its path in the solver may end in its rate cap.
            const FlowTemplate* planned = flow_template_[f];
            const FlowTemplate& moved = detour(*planned);
            const std::uint32_t owner = solver_->owner(f);
            const LinkId cap = f < cap_of_flow_.size() ? cap_of_flow_[f] : kNoCap;
            solver_->remove(f);
            if (observed()) real_links_.on_flow_end(now, observed_path(f));
            capped_path_.assign(moved.path.begin(), moved.path.end());
            if (cap != kNoCap) capped_path_.push_back(cap);
            const auto g = solver_->add(capped_path_, left, owner, now);
            if (g != f && f < cap_of_flow_.size()) cap_of_flow_[f] = kNoCap;
            if (g >= cap_of_flow_.size()) cap_of_flow_.resize(g + 1, kNoCap);
            cap_of_flow_[g] = cap;
            note_start(g, moved, left);
        }
        ensure_recompute();
    }

    void ensure_recompute() {
        if (recompute_scheduled_ || !solver_->dirty()) return;
        recompute_scheduled_ = true;
        sim_.schedule_in(Time::zero(), handler_, kRecompute);
    }

    void schedule_next_completion() {
        const auto f = solver_->next_finishing();
        if (f == FlowSolver::kNoFlow) return;
        const Time t = solver_->finish_time(f);
        if (t == Time::max()) return;  // only stalled flows (links without capacity) are left
        if (t == scheduled_completion_) return;
        scheduled_completion_ = t;
        sim_.schedule_at(t, handler_, kCompletion, 0, ++completion_version_);
    }

    void flush_callbacks(Simulation& sim) {
        if (done_tokens_.empty()) return;
        // Same-time completions are reported in token order, whatever order they finished in.
        std::sort(done_tokens_.begin(), done_tokens_.end());
        callback_batch_.swap(done_tokens_);
        done_tokens_.clear();
        if (client_)
            for (std::uint64_t token : callback_batch_)
                client_->on_transfer_done(sim, token);
        callback_batch_.clear();
    }

    Simulation& sim_;
    const Cluster& cluster_;
    NetworkConfig config_;
    HandlerId handler_ = 0;
    TransferClient* client_ = nullptr;
    std::vector<NetworkObserver*> observers_;
    // Current capacity per solver link (real then NVLS virtual): the cluster's kept ones
    // (base_capacity_) until set_link_capacity changes one, then a copy of this network's own.
    std::shared_ptr<const KeptState::ScaledCapacities> base_capacity_;
    std::vector<double> own_capacity_;
    const double* capacity_ = nullptr;
    std::vector<std::vector<int>> groups_;
    // Per group, its number among the cluster's kept communicators (kNoCommunicator: not kept).
    std::vector<std::uint64_t> communicators_;
    bool reuse_groups_ = false;
    std::map<std::vector<int>, GroupId> group_ids_;  // with reuse_groups_: every group's ranks
    std::unordered_map<std::uint64_t, Plan> plans_;
    std::unordered_map<std::uint64_t, Plan> p2p_plans_;
    // Point-to-point plans kept in the KeptState (KeptState::plans), for every network on its
    // cluster; never erased (operations in flight point into them), at most
    // kMaxPlans (about 200 bytes each), then each network plans the rest itself.
    // Collective plans likewise (shares_plans()), keyed by everything a plan is a function of,
    // up to kMaxBytes of plans (bytes_of: an estimate of their heap), then each network plans
    // the rest itself. A sweep's later runs on a shape already run take every DP communicator's
    // plan as it is instead of routing every ring hop again.
    struct SharedPlans {
        static constexpr std::size_t kMaxPlans = std::size_t{1} << 18;
        std::unordered_map<std::uint64_t, Plan> plans;
        struct CollectiveKey {
            std::vector<int> ranks;  // empty where `communicator` stands for them
            std::uint64_t communicator = kNoCommunicator;
            PlanWords words{};  // group (flow id), operation, algorithm, calibration_words
            bool operator==(const CollectiveKey&) const = default;
        };
        struct KeyHash {
            std::size_t operator()(const CollectiveKey& k) const {
                std::uint64_t h = mix64(kFnv1aBasis ^ k.communicator);
                for (std::uint64_t w : k.words)
                    h = mix64(h ^ w);
                // Two ranks a word, each word through a multiply and a rotation (a bijection of
                // the running value), one mix64 at the end: send routes' keys hold thousands of
                // ranks and are looked up by every run of a sweep.
                const std::size_t n = k.ranks.size();
                const auto word = [&k](std::size_t i) {
                    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.ranks[i]));
                };
                std::size_t i = 0;
                for (; i + 1 < n; i += 2)
                    h = std::rotl((h ^ (word(i) | word(i + 1) << 32)) * 0x9e3779b97f4a7c15, 29);
                if (i < n) h = std::rotl((h ^ word(i)) * 0x9e3779b97f4a7c15, 29);
                return static_cast<std::size_t>(mix64(h ^ n));
            }
        };
        static constexpr std::size_t kMaxBytes = std::size_t{256} << 20;
        static std::size_t bytes_of(const Plan& plan, std::size_t ranks) {
            std::size_t b = sizeof(CollectiveKey) + sizeof(Plan) + 64 + ranks * sizeof(int);
            for (const Phase& p : plan.phases) {
                b += sizeof(Phase);
                for (const FlowTemplate& f : p.flows)
                    b += sizeof(FlowTemplate) + f.path.size() * sizeof(LinkId);
            }
            return b;
        }
        std::unordered_map<CollectiveKey, Plan, KeyHash> collectives;
        // Every communicator registered on the cluster, numbered (words zero): the kept plans
        // and algorithms of a communicator are keyed by its number, so that a later run finds
        // them without copying and hashing its ranks again (register_group looks them up once).
        std::unordered_map<CollectiveKey, std::uint64_t, KeyHash> communicators;
        // resolve(): words (size, operation, algorithm asked) -> the algorithm resolved.
        std::unordered_map<CollectiveKey, Algorithm, KeyHash> resolved;
        // send_routes: ranks (src, dst, src, dst, ...), words (fidelity, step overhead,
        // capacities' efficiencies) -> the routes.
        std::unordered_map<CollectiveKey, std::shared_ptr<const SendRoutes>, KeyHash> sends;
        // kept_cost: (kept plan, size, fidelity, step overhead, link and NVLS efficiencies) ->
        // the transfer's time and per-link sums.
        struct CostKey {
            const Plan* plan = nullptr;
            std::int64_t size = 0;
            std::uint64_t fidelity = 0;
            std::int64_t step_overhead_ps = 0;
            std::array<std::uint64_t, kLinkKinds + 1> efficiency{};
            bool operator==(const CostKey&) const = default;
        };
        struct CostKeyHash {
            std::size_t operator()(const CostKey& k) const {
                std::uint64_t h = mix64(reinterpret_cast<std::uintptr_t>(k.plan));
                h = mix64(h ^ static_cast<std::uint64_t>(k.size));
                h = mix64(h ^ k.fidelity ^ static_cast<std::uint64_t>(k.step_overhead_ps) << 2);
                for (std::uint64_t w : k.efficiency)
                    h = mix64(h ^ w);
                return static_cast<std::size_t>(h);
            }
        };
        std::unordered_map<CostKey, PlanCost, CostKeyHash> costs;
        // kept_cost's scratch: per real link, zero between calls.
        struct LinkSum {
            double bytes = 0;
            Time holds;
        };
        std::vector<LinkSum> link_sums;
        std::size_t collective_bytes = 0;
    };
    std::shared_ptr<SharedPlans> shared_plans_;
    KeptState* kept_ = nullptr;  // null: no fast path
    // kept_cost's index of this network's lookups, by (plan, size).
    struct PlanSizeHash {
        std::size_t operator()(const std::pair<const Plan*, std::int64_t>& k) const {
            return static_cast<std::size_t>(
                mix64(reinterpret_cast<std::uintptr_t>(k.first) ^
                      static_cast<std::uint64_t>(k.second) * 0x9e3779b97f4a7c15));
        }
    };
    std::unordered_map<std::pair<const Plan*, std::int64_t>, const PlanCost*, PlanSizeHash>
        cost_of_;
    // unshared_start's times of transfers whose cost the kept costs had no room for, by (plan,
    // size), when nothing observes the network.
    std::unordered_map<std::pair<const Plan*, std::int64_t>, Time, PlanSizeHash> own_time_of_;
    // hold_link_totals: the kept costs told at flush_link_totals, in first-use order, with the
    // transfers each stands for.
    bool hold_totals_ = false;
    std::vector<std::pair<const PlanCost*, std::int64_t>> held_;
    std::unordered_map<const PlanCost*, std::size_t> held_of_;
    // This network's collective plans found in shared_plans_, by its own key (collective_plan).
    std::unordered_map<std::uint64_t, const Plan*> shared_plan_of_;
    // collective_plan: (group, kind, algorithm asked, size) -> the algorithm it resolves to and
    // the protocol it runs.
    std::map<std::tuple<GroupId, int, std::uint16_t, std::int64_t>, std::pair<Algorithm, Protocol>>
        resolved_;
    std::vector<Op> ops_;
    std::vector<std::uint32_t> free_ops_;
    std::unique_ptr<FlowSolver> solver_;
    // Per-flow rate caps (FlowTemplate::rate_cap) as private solver links, pooled.
    static constexpr LinkId kNoCap = ~LinkId{0};
    std::vector<LinkId> cap_of_flow_;  // by solver flow id
    std::vector<LinkId> free_caps_;
    std::vector<LinkId> retired_caps_;
    std::vector<LinkId> capped_path_;
    // Routes (schedule_routing): the current one (the cluster's own until a change), those
    // scheduled, the plans made under earlier ones (operations in flight still point into them),
    // the templates of flows moved around failed links, and each solver flow's template (by
    // solver flow id).
    const Cluster* routing_ = &cluster_;
    std::vector<const Cluster*> routings_;
    std::vector<std::unordered_map<std::uint64_t, Plan>> retired_plans_;
    std::vector<std::unique_ptr<FlowTemplate>> detours_;
    std::uint64_t detours_made_ = 0;
    std::vector<const FlowTemplate*> flow_template_;
    RealLinksOnly real_links_;
    std::vector<std::uint64_t> done_tokens_;
    std::vector<std::uint64_t> callback_batch_;
    bool recompute_scheduled_ = false;
    bool compact_ = false;
    std::unordered_map<LinkId, LinkId> compact_id_;  // compact_: cluster link -> solver link
    bool capacity_changed_ = false;  // set_link_capacity or schedule_link_capacity was called
    int folded_ = 1;                 // fold(): members each transfer stands for
    Time scheduled_completion_ = Time::max();
    std::uint64_t completion_version_ = 0;
};

}  // namespace

// The plans a KeptState keeps for the networks on its cluster.
struct KeptPlans final : NetworkImpl::SharedPlans {};

namespace {
std::shared_ptr<NetworkImpl::SharedPlans> NetworkImpl::kept_plans(KeptState& kept) {
    auto& slot = kept.plans();
    if (!slot) slot = std::make_shared<KeptPlans>();
    return slot;
}
}  // namespace

std::unique_ptr<Network> make_network(Simulation& sim, const Cluster& cluster,
                                      const NetworkConfig& config, KeptState* kept) {
    return std::make_unique<NetworkImpl>(sim, cluster, config, kept);
}

Time isolated_collective_time(const Cluster& cluster, const NetworkConfig& config,
                              CollectiveKind kind, const std::vector<int>& ranks, Bytes size,
                              Algorithm algorithm, KeptState* kept) {
    struct Done final : TransferClient {
        Time at = Time::max();
        void on_transfer_done(Simulation& sim, std::uint64_t) override { at = sim.now(); }
    };
    Simulation sim;
    auto net = std::make_unique<NetworkImpl>(sim, cluster, config, kept, /*compact=*/true);
    Done done;
    net->set_client(&done);
    net->collective(kind, net->register_group(ranks), size, algorithm, 0);
    sim.run();
    if (done.at == Time::max())
        throw SimulationError("network", "an isolated collective never completed", sim.now());
    return done.at;
}

std::pair<Algorithm, Protocol> collective_choice(const Cluster& cluster,
                                                 const NetworkConfig& config, CollectiveKind kind,
                                                 const std::vector<int>& ranks, Bytes size,
                                                 Algorithm algorithm) {
    Simulation sim;
    NetworkImpl net(sim, cluster, config, /*kept=*/nullptr, /*compact=*/true);
    return net.choice(kind, net.register_group(ranks), size, algorithm);
}

}  // namespace cs::network
