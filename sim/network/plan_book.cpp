#include "network/plan_book.hpp"

#include <algorithm>
#include <string>

#include "core/errors.hpp"

namespace cs::network::detail {

void PlanBook::no_such_gpu(int gpu) const {
    throw ConfigError("GPU " + std::to_string(gpu) + " does not exist (the cluster has " +
                      std::to_string(cluster_.gpu_count()) + " GPUs)");
}

GroupId PlanBook::register_group(std::vector<int> ranks) {
    const std::uint64_t number = communicator_number(ranks);
    if (reuse_groups_) {
        auto [it, added] = group_ids_.try_emplace(ranks, static_cast<GroupId>(groups_.size()));
        if (!added) return it->second;
    }
    groups_.push_back(std::move(ranks));
    communicators_.push_back(number);
    return static_cast<GroupId>(groups_.size() - 1);
}

void PlanBook::check_communicator(const std::vector<int>& ranks) const {
    if (ranks.empty()) throw ConfigError("a communicator needs at least one rank");
    for (int r : ranks)
        check_gpu(r);
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        throw ConfigError("a communicator lists a GPU twice");
}

std::uint64_t PlanBook::communicator_number(std::vector<int>& ranks) {
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

SharedPlans::CollectiveKey PlanBook::group_key(GroupId group) const {
    SharedPlans::CollectiveKey k;
    k.communicator = communicators_[group];
    if (k.communicator == kNoCommunicator) k.ranks = groups_[group];
    return k;
}

void PlanBook::reuse_groups() {
    if (reuse_groups_) return;
    reuse_groups_ = true;
    for (std::size_t g = 0; g < groups_.size(); ++g)
        group_ids_.try_emplace(groups_[g], static_cast<GroupId>(g));
}

const Plan& PlanBook::find_p2p_plan(int src, int dst, std::uint64_t key, bool* kept) {
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

const Plan& PlanBook::own_p2p_plan(std::uint64_t key, int src, int dst) {
    auto it = p2p_plans_.find(key);
    if (it == p2p_plans_.end()) it = p2p_plans_.emplace(key, make_p2p_plan(src, dst, key)).first;
    return it->second;
}

bool PlanBook::crosses_failed(const std::vector<LinkId>& path) const {
    if (own_routes()) return false;
    const std::size_t real = cluster_.links().size();
    return std::any_of(path.begin(), path.end(),
                       [&](LinkId l) { return l < real && routing_->link_failed(l); });
}

const FlowTemplate& PlanBook::detour(const FlowTemplate& f) {
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

Plan PlanBook::make_p2p_plan(int src, int dst, std::uint64_t key) const {
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

const Plan& PlanBook::collective_plan(CollectiveKind kind, GroupId group, Bytes size,
                                      Algorithm algo, bool* kept) {
    if (group >= groups_.size())
        throw SimulationError("network", "collective on an unregistered group", sim_.now());
    // Once per (group, operation, algorithm asked, size): every DP bucket and unit collective
    // of every stage asks again, and resolving looks at every rank's node (a pure function of
    // them and the routing), choosing the protocol builds its candidates' plans. Kept after it
    // is made (one that throws is not kept and throws again). Group numbers are below
    // 2^32 - 1, so the word is never 0 (an empty slot).
    const std::uint64_t word = (static_cast<std::uint64_t>(group) + 1) << 32 |
                               static_cast<std::uint64_t>(kind) << 16 | algo.id;
    if (const Chosen* c = chosen_.find(word, size.value)) {
        if (kept) *kept = c->kept;
        return *c->plan;
    }
    const Algorithm resolved = resolve(kind, group, size, algo);
    const Protocol protocol = choose_protocol(kind, group, size, resolved);
    bool is_kept = false;
    const Plan& plan = protocol_plan(kind, group, resolved, protocol, &is_kept);
    *chosen_.try_emplace(word, size.value).first = Chosen{&plan, is_kept};
    if (kept) *kept = is_kept;
    return plan;
}

Protocol PlanBook::choose_protocol(CollectiveKind kind, GroupId group, Bytes size, Algorithm algo) {
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

Time PlanBook::estimate(const Plan& plan, Bytes size) const {
    Time total = plan.phases.empty() ? Time::zero() : plan.fixed_latency;
    for (const Phase& p : plan.phases) {
        Time longest = Time::zero();
        for (const FlowTemplate& f : p.flows) {
            const double fb = f.bytes_per_size * static_cast<double>(size.value);
            if (fb <= 0) continue;
            longest = std::max(longest, transfer_time(fb, Bandwidth{calibration_.nominal_rate(f)}));
        }
        total += calibration_.phase_delay(plan, p) + longest;
    }
    return total;
}

const Plan& PlanBook::protocol_plan(CollectiveKind kind, GroupId group, Algorithm resolved,
                                    Protocol protocol, bool* kept) {
    const auto& ranks = groups_[group];
    const AlgorithmRegistry& algorithms = *config_.algorithms;
    const auto made = [&] {
        // LL and LL128 are Simple's plan with the protocol's terms on it (apply_protocol):
        // copied from Simple's rather than routed again (choose_protocol asks for all three of
        // every new group's plans; building them was 7% of a Llama 3 405B plan's samples).
        if (protocol != Protocol::Simple) {
            Plan plan = protocol_plan(kind, group, resolved, Protocol::Simple);
            calibration_.apply_protocol(plan, kind, protocol, ranks);
            return plan;
        }
        Plan plan = build_plan(*routing_, kind, resolved, ranks, group, algorithms);
        calibration_.apply_operation(plan, kind);
        return plan;
    };
    const std::uint64_t key =
        static_cast<std::uint64_t>(group) << 26 | static_cast<std::uint64_t>(kind) << 18 |
        static_cast<std::uint64_t>(resolved.id) << 2 | (static_cast<std::uint64_t>(protocol) - 1);
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
        k.words = calibration_.calibration_words(kind, protocol);
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

Algorithm PlanBook::resolve(CollectiveKind kind, GroupId group, Bytes size, Algorithm algo) {
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

void PlanBook::change_routing(const Cluster& routing) {
    retired_plans_.push_back(std::move(plans_));
    retired_plans_.push_back(std::move(p2p_plans_));
    plans_.clear();
    p2p_plans_.clear();
    plan_memo_.clear();
    shared_plan_of_.clear();  // not used again: the routes are no longer the cluster's
    chosen_.clear();          // resolved on the old routes
    routing_ = &routing;
}

}  // namespace cs::network::detail
