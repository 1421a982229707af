// Building a replay: its collectives' costs, the scratch it takes its containers from, the
// constructor (workers, schedule, states, communicators, buckets) and the pass costs.
#include <algorithm>
#include <cmath>

#include "core/errors.hpp"
#include "core/huge_pages.hpp"
#include "replay/pass_cost.hpp"
#include "replay/replay.hpp"
#include "replay/replay_state.hpp"
#include "workload/pipeline_comm.hpp"

namespace cs::replay {

using schedule::Pass;

// ---- CollectiveCosts --------------------------------------------------------------------------

CollectiveCosts::CollectiveCosts(const topology::Cluster& cluster,
                                 const network::NetworkConfig& config, network::KeptState* kept)
    : cluster_(cluster), config_(config), kept_(kept) {}

Time CollectiveCosts::cost(network::CollectiveKind kind, const std::vector<int>& group,
                           Bytes size) {
    if (group.size() <= 1 || size.value <= 0 || config_.fidelity == network::Fidelity::Ideal)
        return Time::zero();
    auto g = groups_.find(group);
    if (g == groups_.end()) g = groups_.emplace(group, static_cast<int>(groups_.size())).first;
    const auto key = std::make_tuple(static_cast<int>(kind), g->second, size.value);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    return cache_
        .emplace(key, network::isolated_collective_time(cluster_, config_, kind, group, size,
                                                        network::Algorithm::Auto, kept_))
        .first->second;
}

struct CollectiveCosts::SendTimer final : network::TransferClient {
    Simulation sim;
    std::unique_ptr<network::Network> net;
    Time done = Time::max();
    SendTimer(const topology::Cluster& cluster, const network::NetworkConfig& config,
              network::KeptState* kept)
        : net(network::make_network(sim, cluster, config, kept)) {
        net->set_client(this);
    }
    void on_transfer_done(Simulation& s, std::uint64_t) override { done = s.now(); }
    Time time(int src, int dst, Bytes size) {
        const Time start = sim.now();
        done = Time::max();
        net->send(src, dst, size, 0);
        sim.run();
        if (done == Time::max())
            throw SimulationError("replay", "a send priced alone never completed", sim.now());
        return done - start;
    }
};

Time CollectiveCosts::send(int src, int dst, Bytes size) {
    if (src == dst || size.value <= 0 || config_.fidelity == network::Fidelity::Ideal)
        return Time::zero();
    const auto key = std::make_tuple(src, dst, size.value);
    auto it = sends_.find(key);
    if (it != sends_.end()) return it->second;
    if (!timer_) timer_ = std::make_shared<SendTimer>(cluster_, config_, kept_);
    return sends_.emplace(key, timer_->time(src, dst, size)).first->second;
}

// ---- ReplayScratch ----------------------------------------------------------------------------

ReplayScratch::ReplayScratch() : parts_(std::make_unique<Parts>()) {}
ReplayScratch::~ReplayScratch() = default;
std::size_t ReplayScratch::entries() const {
    return parts_->entries.size();
}
std::size_t ReplayScratch::placements() const {
    return parts_->placements.size();
}
std::size_t ReplayScratch::folds() const {
    return static_cast<std::size_t>(
        std::count_if(parts_->placements.begin(), parts_->placements.end(),
                      [](const auto& p) { return p->fold.has_value(); }));
}

std::size_t ReplayScratch::folds_taken() const {
    return parts_->folds_taken;
}

std::shared_ptr<ReplayScratch::Placement> ReplayScratch::placement(
    const workload::ParallelLayout& layout) {
    auto& kept = parts_->placements;
    auto it = std::find_if(kept.begin(), kept.end(), [&](const auto& p) { return p->of(layout); });
    std::shared_ptr<Placement> found;
    if (it != kept.end()) {
        found = *it;
        kept.erase(it);
    } else {
        if (kept.size() >= kMaxEntries) kept.erase(kept.begin());
        found = std::make_shared<Placement>();
        found->tp = layout.tp;
        found->cp = layout.cp;
        found->dp = layout.dp;
        found->pp = layout.pp;
        found->ep = layout.ep;
        found->order = layout.order;
    }
    kept.push_back(found);
    return found;
}

namespace {
// The KeptState a replay's networks use: the caller's when made for the run's cluster, else one
// of the run's own (`own`), none without fast paths.
network::KeptState* kept_state(const FastPaths& fast, const topology::Cluster& cluster,
                               std::unique_ptr<network::KeptState>& own) {
    if (!fast.enabled) return nullptr;
    if (fast.network && &fast.network->cluster() == &cluster) return fast.network;
    own = std::make_unique<network::KeptState>(cluster);
    return own.get();
}
}  // namespace

Replay::Replay(const workload::ExperimentSpec& spec, const workload::IterationPlan& plan,
               const schedule::Schedule& schedule, const schedule::PipelineShape& shape,
               const SharedFabric* shared, const FastPaths& fast)
    : spec_(spec),
      plan_(plan),
      schedule_(schedule),
      shape_(shape),
      layout_(spec.layout),
      ranks_(spec.layout),
      fast_(fast.enabled),
      kept_(kept_state(fast, *spec.cluster, own_kept_)),
      own_sim_(shared ? nullptr : std::make_unique<Simulation>(spec.seed)),
      sim_(shared ? *shared->sim : *own_sim_),
      costs_(*spec.cluster, spec.network, kept_) {
    ReplayScratch* scratch = fast_ ? fast.scratch : nullptr;
    if (!fast_) fold_allowed_ = false;
    handler_ = sim_.add_handler(*this);
    if (shared) {
        shared_ = true;
        token_base_ = shared->token_base;
        network_ = shared->network;
        on_complete_ = shared->on_complete;
        if (!shared->placement.empty()) ranks_.place(shared->placement);
    } else {
        own_network_ = network::make_network(sim_, *spec.cluster, spec.network, kept_);
        network_ = own_network_.get();
        accel_ = network_->accelerator();
        // Its link totals may be held to the end of the iteration (flushed in run()).
        if (accel_) accel_->hold_link_totals();
        network_->set_client(this);
    }
    take_scratch(scratch, shared != nullptr);
    place_workers();
    read_schedule();
    reset_states();
    register_dp_groups();
    setup_sharding();
    // Every pass kind of every virtual stage, costed once before the run.
    pass_costs_.reserve(plan_.virtual_stages.size() * kPassKinds);
    for (const auto& c : plan_.virtual_stages)
        for (const auto* pass : {&c.forward, &c.backward, &c.backward_input, &c.backward_weight})
            // A backward pass (or its input half) starts the autograd engine: host.backward more.
            pass_costs_.push_back(
                cost_pass(*pass, pass == &c.backward || pass == &c.backward_input));
    setup_buckets();
}

void Replay::take_scratch(ReplayScratch* scratch, bool shared) {
    if (!scratch) return;
    scratch_ = scratch;
    const auto worker_count = static_cast<std::size_t>(ranks_.workers());
    auto& entries = scratch->parts_->entries;
    for (auto it = entries.begin(); it != entries.end(); ++it)
        if (it->workers.size() == worker_count) {
            workers_.swap(it->workers);
            states_.swap(it->states);
            inputs_.swap(it->inputs);
            entries.erase(it);
            break;
        }
    // An own run's placement: its GPUs and communicators as a scratch keeps them, if it does.
    if (!shared) placement_ = scratch->placement(layout_);
}

void Replay::place_workers() {
    const int members = ranks_.members();
    const auto worker_count = static_cast<std::size_t>(ranks_.workers());
    const bool placed = placement_ && !placement_->gpus.empty();
    // Filled in place: a scratch's workers keep their GPU lists' storage.
    workers_.resize(worker_count);
    const auto width = static_cast<std::size_t>(members);
    for (std::size_t w = 0; w < worker_count; ++w) {
        auto& worker = workers_[w];
        worker.stage = ranks_.stage_of(static_cast<int>(w));
        worker.dp = ranks_.replica_of(static_cast<int>(w));
        worker.gpus.resize(width);
        if (placed) {
            std::copy_n(placement_->gpus.begin() + static_cast<std::ptrdiff_t>(w * width), width,
                        worker.gpus.begin());
            continue;
        }
        for (int m = 0; m < members; ++m)
            worker.gpus[static_cast<std::size_t>(m)] = ranks_.member_gpu(static_cast<int>(w), m);
        if (placement_)
            placement_->gpus.insert(placement_->gpus.end(), worker.gpus.begin(), worker.gpus.end());
    }
}

void Replay::read_schedule() {
    orders_.resize(static_cast<std::size_t>(layout_.pp));
    for (int s = 0; s < layout_.pp; ++s)
        orders_[static_cast<std::size_t>(s)] = schedule_.order(shape_, s);
    // Megatron-LM without --overlap-grad-reduce reduces every model chunk's gradients after the
    // whole backward (finalize_model_grads: finish_grad_sync of each chunk, one after another),
    // as its local DDP did in 2021 (grad_reduce_after_backward); with one chunk that is the same
    // as reducing it after its last backward.
    reduce_after_backward_ = workload::dp_reduce_after_backward(spec_);
    param_prefetch_ = DataParallelMode::of(layout_).param_prefetch;
    // Megatron-LM's schedules exchange in synchronised batches unless
    // --overlap-p2p-communication; other frameworks, and schedules without rounds, send as passes
    // end.
    if (workload::batched_p2p(spec_) && layout_.pp > 1) {
        batched_ = true;
        for (int s = 0; s < layout_.pp && batched_; ++s) {
            rounds_.push_back(schedule_.exchange_rounds(shape_, s));
            batched_ = rounds_.back().size() == orders_[static_cast<std::size_t>(s)].size();
        }
        if (!batched_) rounds_.clear();
    }
}

void Replay::reset_states() {
    keys_ = static_cast<std::size_t>(shape_.chunks * shape_.microbatches * 2);
    states_.resize(workers_.size());
    for (auto& st : states_)
        st.reset(static_cast<std::size_t>(shape_.chunks));
    // On 2 MiB pages when large (core/huge_pages.hpp): a delivery reads another worker's inputs.
    reserve_on_huge_pages(inputs_, workers_.size() * keys_);
    inputs_.assign(workers_.size() * keys_, Input{});
    for (const auto& slow : spec_.variability.hosts)
        for (std::size_t w = 0; w < workers_.size(); ++w)
            for (int g : workers_[w].gpus)
                if (std::binary_search(slow.gpus.begin(), slow.gpus.end(), g))
                    states_[w].host_factor = std::max(states_[w].host_factor, slow.factor);
}

void Replay::register_dp_groups() {
    // The gradient reduction spans the dp x cp GPUs holding the same parameters (Megatron-LM's
    // data-parallel group with context parallelism); with cp > 1 the members of one tensor rank
    // share one such group, registered once (dp_groups_ repeats it for them).
    dp_ranks_ = layout_.dp * layout_.cp;
    if (dp_ranks_ <= 1) return;
    const int members = ranks_.members();
    const auto dp_group = [&](int s, int m) { return ranks_.dp_cp_group(worker_of(s, 0), m).gpus; };
    if (placement_ && placement_->dp_groups.empty())
        for (int s = 0; s < layout_.pp; ++s)
            for (int m = 0; m < members; ++m)
                placement_->dp_groups.push_back(dp_group(s, m));
    for (int s = 0; s < layout_.pp; ++s)
        for (int m = 0; m < members; ++m)
            dp_groups_.push_back(
                layout_.cp > 1 && m >= layout_.tp
                    ? dp_groups_[static_cast<std::size_t>(s * members + m % layout_.tp)]
                    : network_->register_group(
                          placement_
                              ? placement_->dp_groups[static_cast<std::size_t>(s * members + m)]
                              : dp_group(s, m)));
}

void Replay::setup_buckets() {
    // Gradient buckets of --overlap-grad-reduce: each chunk's parameters in buckets of
    // bucket_parameters(), as Megatron-LM's DDP cuts them.
    bucket_count_.assign(static_cast<std::size_t>(layout_.pp), 1);
    for (int s = 0; s < layout_.pp; ++s) {
        if (overlaps_dp(s))
            bucket_count_[static_cast<std::size_t>(s)] =
                gradient_buckets(plan_.devices[static_cast<std::size_t>(s)], layout_);
        max_buckets_ = std::max(max_buckets_, bucket_count_[static_cast<std::size_t>(s)]);
    }
    buckets_ready_.assign(static_cast<std::size_t>(layout_.pp * shape_.chunks * max_buckets_), 0);
    buckets_done_.assign(static_cast<std::size_t>(layout_.pp * shape_.chunks), 0);
    bucket_queue_.resize(static_cast<std::size_t>(layout_.pp));
    bucket_busy_.assign(static_cast<std::size_t>(layout_.pp), 0);
    // Compute-communication interference: only with a framework (a plain profile run adds
    // nothing to its measured times), and only where buckets overlap a backward pass.
    if (spec_.compute.interference > 0 && spec_.compute.framework != workload::Framework::None) {
        overlapped_buckets_.assign(static_cast<std::size_t>(layout_.pp), Time::zero());
        for (int s = 0; s < layout_.pp; ++s) {
            if (!overlaps_dp(s)) continue;
            const auto& dev = plan_.devices[static_cast<std::size_t>(s)];
            const auto kind = dev.dp_sharded ? network::CollectiveKind::ReduceScatter
                                             : network::CollectiveKind::AllReduce;
            const auto& group = ranks_.dp_cp_group(worker_of(s, 0), 0).gpus;
            const int buckets = bucket_count_[static_cast<std::size_t>(s)];
            for (int b = 0; b + 1 < buckets; ++b)
                overlapped_buckets_[static_cast<std::size_t>(s)] +=
                    costs_.cost(kind, group, bucket_bytes(s, b));
        }
    }
}

Replay::~Replay() {
    // The followers' send routes this run asked for, kept with its fold for later runs.
    if (fold_kept_) placement_->fold->follower_routes.swap(follower_routes_);
    if (!scratch_) return;
    auto& entries = scratch_->parts_->entries;
    if (entries.size() >= ReplayScratch::kMaxEntries) entries.erase(entries.begin());
    entries.emplace_back();
    entries.back().workers.swap(workers_);
    entries.back().states.swap(states_);
    entries.back().inputs.swap(inputs_);
}

Replay::PassCost Replay::cost_pass(const workload::PassPlan& plan, bool backward) {
    // All workers have the same shape, so worker 0's groups stand for every worker's.
    const double interference =
        spec_.compute.framework != workload::Framework::None ? spec_.compute.interference : 0.0;
    StepCosts steps = cost_steps(
        plan,
        [this](const workload::Step& s) {
            return costs_.cost(s.collective, ranks_.group(s.group, 0, 0).gpus, s.size);
        },
        interference);
    PassCost cost;
    cost.compute = steps.compute;
    cost.collective = steps.collective;
    cost.collective_kinds = steps.collective_kinds;
    cost.interference = steps.interference;
    cost.step_times = std::move(steps.step_times);
    const auto& host = spec_.compute.host;
    if (!host.enabled) return cost;
    cost.blocks = kernel_blocks(plan.steps, cost.step_times);
    for (const auto& step : plan.steps)
        cost.block_compute.push_back(step.kind == workload::Step::Kind::Compute ? 1 : 0);
    cost.lead = pass_lead(host, schedule_, backward);
    cost.host = host_issue(cost.lead, host.launch, cost.blocks);
    return cost;
}

void Replay::set_duration_model(std::unique_ptr<DurationModel> model) {
    duration_model_ = std::move(model);
}

void Replay::set_step(std::int64_t step) {
    if (step < 0 || step > kMaxDurationStep)
        throw SimulationError("replay", "step " + std::to_string(step) + " is outside [0, " +
                                            std::to_string(kMaxDurationStep) + "]");
    step_ = step;
    duration_streams_.clear();
}

void Replay::setup_sharding() {
    const auto mode = DataParallelMode::of(layout_);
    shard_size_ = mode.shard_size;
    hsdp_ = mode.hsdp;
    sharded_units_ = mode.sharded_units;
    if (!sharded_units_ && !hsdp_) return;
    const int members = ranks_.members();
    const int groups = layout_.dp / shard_size_;
    for (int s = 0; s < layout_.pp; ++s)
        for (int m = 0; m < members; ++m) {
            const int t = m % layout_.tp, c = m / layout_.tp;
            for (int g = 0; g < groups; ++g) {
                std::vector<int> gpus;
                for (int i = 0; i < shard_size_; ++i)
                    gpus.push_back(ranks_.gpu(t, c, g * shard_size_ + i, s));
                shard_groups_.push_back(network_->register_group(std::move(gpus)));
            }
            if (!hsdp_) continue;
            for (int i = 0; i < shard_size_; ++i) {
                std::vector<int> gpus;
                for (int g = 0; g < groups; ++g)
                    gpus.push_back(ranks_.gpu(t, c, g * shard_size_ + i, s));
                replica_groups_.push_back(network_->register_group(std::move(gpus)));
            }
        }
    if (!sharded_units_) return;
    shard_streams_.resize(static_cast<std::size_t>(layout_.pp * groups * 2));
    for (int s = 0; s < layout_.pp; ++s)
        for (int g = 0; g < groups; ++g)
            for (int k = 0; k < 2; ++k) {
                auto& ss = shard_streams_[static_cast<std::size_t>((s * groups + g) * 2 + k)];
                ss.stage = s;
                ss.group = g;
                ss.gather = k == 0;
            }
    replica_reduce_started_.assign(static_cast<std::size_t>(layout_.pp), 0);
}

}  // namespace cs::replay
