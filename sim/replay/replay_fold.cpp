// Folding (docs/performance-history.md, "Folding"): member folding's check (decide_fold) and
// replica folding's classes and followers (decide_replica_fold), with the followers' accounting.
#include <algorithm>
#include <map>
#include <numeric>
#include <string>

#include "core/errors.hpp"
#include "replay/replay.hpp"
#include "replay/replay_state.hpp"

namespace cs::replay {

using schedule::Pass;

namespace {
constexpr const char* kReplicasDiffer = "every replica's pipeline messages cost differently";
}  // namespace

std::vector<std::pair<int, int>> Replay::message_pairs(std::span<const int> senders) const {
    std::vector<std::pair<int, int>> pairs;
    for (const int w : senders) {
        const int stage = workers_[static_cast<std::size_t>(w)].stage;
        for (const auto& op : orders_[static_cast<std::size_t>(stage)]) {
            const int vs = schedule_.virtual_stage(shape_, stage, op.chunk, op.microbatch);
            int dst = -1, key = -1, target_vs = -1;
            bool gradient = false;
            if (p2p_target(w, op.pass, vs, op.microbatch, dst, key, target_vs, gradient) &&
                dst != w)
                pairs.emplace_back(w, dst);
        }
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    return pairs;
}

const char* Replay::member_fold_refusal() const {
    // Other jobs' flows on the shared network break the symmetry folding relies on.
    if (shared_) return "a shared-fabric (jobs:) run is not folded";
    // Not checked for folding: the shard groups' collectives of ZeRO-2/3 and HSDP, and faults
    // (routes that change during the run). Such runs are not folded.
    if (sharded_units_ || hsdp_)
        return "sharded data parallelism (zero2/zero3 or HSDP) is not folded";
    if (!spec_.faults.links.empty() || !spec_.faults.gpus.empty())
        return "a run with faults is not folded";
    if (layout_.cp > 1 && dp_ranks_ > 1)
        return "context parallelism's gradient reduction spans the cp ranks of a tensor rank "
               "(members share its group)";
    return nullptr;
}

void Replay::add_dp_fold_classes(std::vector<network::FoldClass>& classes) const {
    // Per stage, every kind and size start_dp_sync, launch_bucket and start_parameter_gather
    // issue.
    const int members = ranks_.members();
    for (int s = 0; s < layout_.pp && dp_ranks_ > 1; ++s) {
        const auto& dev = plan_.devices[static_cast<std::size_t>(s)];
        if (dev.dp_gradient_bytes.value <= 0) continue;
        network::FoldClass c;
        c.collective = true;
        for (int m = 0; m < members; ++m)
            c.groups.push_back(dp_groups_[static_cast<std::size_t>(s * members + m)]);
        c.kind = dev.dp_sharded ? network::CollectiveKind::ReduceScatter
                                : network::CollectiveKind::AllReduce;
        if (overlaps_dp(s)) {
            for (int b = 0; b < bucket_count_[static_cast<std::size_t>(s)]; ++b) {
                c.size = bucket_bytes(s, b);
                classes.push_back(c);
            }
        } else {
            c.size = dev.dp_gradient_bytes;
            classes.push_back(c);
        }
        if (dev.dp_sharded) {
            c.kind = network::CollectiveKind::AllGather;
            c.size = Bytes{dev.dp_parameter_bytes.value * (param_prefetch_ ? 1 : shape_.chunks)};
            classes.push_back(c);
        }
    }
}

void Replay::decide_fold(ReplayResult& result) {
    const int members = ranks_.members();
    members_on_network_ = members;
    if (!fold_allowed_ || members < 2 || spec_.network.fidelity != network::Fidelity::Flow) return;
    if (const char* refused = member_fold_refusal()) {
        result.fold_refused = refused;
        return;
    }
    std::vector<network::FoldClass> classes;
    // Pipeline messages: every pair of workers that exchange one, once.
    std::vector<int> senders(workers_.size());
    std::iota(senders.begin(), senders.end(), 0);
    for (const auto& [a, b] : message_pairs(senders)) {
        network::FoldClass c;
        c.src = workers_[static_cast<std::size_t>(a)].gpus;
        c.dst = workers_[static_cast<std::size_t>(b)].gpus;
        classes.push_back(std::move(c));
    }
    add_dp_fold_classes(classes);
    std::string why;
    if (accel_ && accel_->fold(members, classes, why)) {
        members_on_network_ = 1;
        result.fold_copies = members;
    } else {
        result.fold_refused = why;
    }
}

std::string Replay::replica_fold_refusal() const {
    // Anything that may make one replica differ from another keeps them all.
    if (!replica_refused_.empty()) return replica_refused_;
    if (shared_) return "a shared-fabric (jobs:) run is not folded";
    if (duration_model_ || spec_.variability.any())
        return "variability (a per-worker duration or host model) makes replicas differ";
    if (!spec_.faults.links.empty() || !spec_.faults.gpus.empty())
        return "a run with faults is not folded";
    if (sharded_units_ || hsdp_)
        return "sharded data parallelism (zero2/zero3 or HSDP) is not folded by replicas";
    return {};
}

int Replay::classify_replicas(const std::vector<std::pair<int, int>>& pairs) {
    // The costs of every replica's pairs come at once (Network::send_routes, kept with a
    // cluster that keeps its routes: a sweep's later runs of this placement look them up).
    using Signature = std::vector<std::pair<std::int64_t, double>>;
    std::map<Signature, int> classes;
    rep_replica_.assign(static_cast<std::size_t>(layout_.dp), 0);
    const int members = ranks_.members();
    std::vector<std::pair<int, int>> gpu_pairs;
    gpu_pairs.reserve(static_cast<std::size_t>(layout_.dp) * pairs.size() *
                      static_cast<std::size_t>(members));
    for (int d = 0; d < layout_.dp; ++d)
        for (const auto& [a, b] : pairs) {
            const auto& src = workers_[static_cast<std::size_t>(worker_of(a, d))].gpus;
            const auto& dst = workers_[static_cast<std::size_t>(worker_of(b, d))].gpus;
            for (int m = 0; m < members; ++m)
                gpu_pairs.emplace_back(src[static_cast<std::size_t>(m)],
                                       dst[static_cast<std::size_t>(m)]);
        }
    const auto costs = accel_->send_routes(gpu_pairs);
    std::size_t next = 0;
    for (int d = 0; d < layout_.dp; ++d) {
        Signature sig;
        sig.reserve(pairs.size() * static_cast<std::size_t>(members));
        for (std::size_t i = 0; i < pairs.size() * static_cast<std::size_t>(members); ++i) {
            const auto cost = costs->cost(next++);
            sig.emplace_back(cost.delay.count_ps(), cost.rate);
        }
        rep_replica_[static_cast<std::size_t>(d)] =
            classes.try_emplace(std::move(sig), d).first->second;
    }
    return static_cast<int>(classes.size());
}

void Replay::decide_replica_fold(ReplayResult& result) {
    result.replicas_simulated = layout_.dp;
    if (!fold_allowed_ || layout_.dp < 2 || spec_.network.fidelity == network::Fidelity::Flow)
        return;
    if (std::string why = replica_fold_refusal(); !why.empty()) {
        result.replicas_refused = why;
        return;
    }
    // The stage pairs that exchange pipeline messages (the same in every replica).
    std::vector<int> senders;
    for (int s = 0; s < layout_.pp; ++s)
        senders.push_back(worker_of(s, 0));
    std::vector<std::pair<int, int>> pairs;
    for (const auto& [a, b] : message_pairs(senders))
        pairs.emplace_back(workers_[static_cast<std::size_t>(a)].stage,
                           workers_[static_cast<std::size_t>(b)].stage);
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    // A replica's class: the cost of every pipeline message route of every member, pair by pair.
    // Replicas with equal classes start, wait and finish alike (no contention: a message's time
    // is its route's), DP collectives being common to all.
    // A placement kept by the scratch may hold this very fold (same cluster, network and pairs).
    if (placement_ && placement_->fold &&
        placement_->fold->of(spec_.cluster, spec_.network, pairs)) {
        auto& kept = *placement_->fold;
        ++scratch_->parts_->folds_taken;
        if (kept.rep_replica.empty()) {
            result.replicas_refused = kReplicasDiffer;
            return;
        }
        rep_replica_ = kept.rep_replica;
        follower_routes_.swap(kept.follower_routes);
        fold_kept_ = true;
        set_followers(result, kept.classes);
        return;
    }
    const int classes = classify_replicas(pairs);
    const bool differ = classes == layout_.dp;
    if (differ) rep_replica_.clear();
    if (placement_) {
        auto& kept = placement_->fold.emplace();
        kept.cluster = spec_.cluster;
        kept.cluster_at = spec_.cluster.get();
        kept.network = spec_.network;
        kept.pairs = std::move(pairs);
        kept.rep_replica = rep_replica_;
        kept.classes = classes;
        fold_kept_ = true;
    }
    if (differ) {
        result.replicas_refused = kReplicasDiffer;
        return;
    }
    set_followers(result, classes);
}

void Replay::set_followers(ReplayResult& result, int classes) {
    is_follower_.assign(workers_.size(), 0);
    followers_.assign(workers_.size(), {});
    for (int s = 0; s < layout_.pp; ++s)
        for (int d = 0; d < layout_.dp; ++d) {
            const int r = rep_replica_[static_cast<std::size_t>(d)];
            if (r == d) continue;
            const int w = worker_of(s, d);
            is_follower_[static_cast<std::size_t>(w)] = 1;
            followers_[static_cast<std::size_t>(worker_of(s, r))].push_back(w);
        }
    result.replicas_simulated = classes;
    bulk_accounting_ = accel_->accounts_in_bulk();
    copy_followers_ = std::all_of(copiers_.begin(), copiers_.end(),
                                  [](const FollowerCopier* c) { return c != nullptr; });
}

void Replay::copy_followers() {
    if (!copy_followers_) return;
    for (std::size_t w = 0; w < workers_.size(); ++w)
        for (int f : followers_of(static_cast<int>(w)))
            for (auto* c : copiers_)
                c->copy_worker(static_cast<int>(w), f);
}

void Replay::account_follower_sends(int worker, int dst, Bytes bytes, std::int64_t count) {
    auto& routes = follower_routes_[{worker, dst}];
    if (!routes) {
        // Follower i's member g sends to the receiving representative's follower i's member g.
        const auto& from = followers_of(worker);
        const auto& to = followers_of(dst);
        std::vector<std::pair<int, int>> pairs;
        for (std::size_t i = 0; i < from.size(); ++i) {
            const auto& fs = workers_[static_cast<std::size_t>(from[i])].gpus;
            const auto& fd = workers_[static_cast<std::size_t>(to[i])].gpus;
            for (std::size_t g = 0; g < fs.size(); ++g)
                pairs.emplace_back(fs[g], fd[g]);
        }
        routes = accel_->send_routes(pairs);
    }
    accel_->account_sends(*routes, bytes, count);
}

void Replay::flush_follower_sends() {
    for (const auto& [key, count] : follower_sends_)
        account_follower_sends(std::get<0>(key), std::get<1>(key), Bytes{std::get<2>(key)}, count);
    follower_sends_.clear();
}

}  // namespace cs::replay
