#include "replay/replay.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "core/errors.hpp"
#include "replay/pass_cost.hpp"
#include "workload/memory.hpp"
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
    const auto key = std::make_tuple(static_cast<int>(kind), group, size.value);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    return cache_
        .emplace(key, network::isolated_collective_time(cluster_, config_, kind, group, size,
                                                        network::Algorithm::Auto, kept_))
        .first->second;
}

workload::CommTimes exposed_by_kind(const PassRecord& pass) {
    workload::CommTimes out{};
    const auto dp = static_cast<std::size_t>(workload::CommKind::Dp);
    out[dp] = pass.gather_wait;
    if (pass.collective <= Time::zero()) return out;
    std::int64_t nominal = 0;
    if (pass.collective_kinds)
        for (Time t : *pass.collective_kinds)
            nominal += t.count_ps();
    if (nominal <= 0)
        throw SimulationError("replay", "a pass with collective time but no collective steps");
    const std::int64_t total = pass.collective.count_ps();
    if (total == nominal) {
        for (std::size_t k = 0; k < out.size(); ++k)
            out[k] += (*pass.collective_kinds)[k];
        return out;
    }
    // Cumulative rounding: kind k gets round(total x (its nominal and those before) / nominal)
    // minus what the kinds before got, so the parts sum to `total` exactly (and equal the
    // nominal times when nothing was shortened).
    std::int64_t before = 0, given = 0;
    for (std::size_t k = 0; k < out.size(); ++k) {
        const std::int64_t mine = (*pass.collective_kinds)[k].count_ps();
        if (mine == 0) continue;
        before += mine;
        const std::int64_t upto =
            before == nominal ? total
                              : static_cast<std::int64_t>(std::llround(
                                    static_cast<double>(total) * static_cast<double>(before) /
                                    static_cast<double>(nominal)));
        out[k] += Time::ps(upto - given);
        given = upto;
    }
    return out;
}

// ---- Replay state -----------------------------------------------------------------------------

namespace {
enum EventKind : std::uint32_t {
    kPassDone = 1,
    kOptimizerDone = 2,
    kLocalDelivery = 3,
    kBucketReady = 4,
    kUnitDone = 5,
    kStop = 6
};
}

// A worker's state: its scalars (reset as a whole when a scratch's state is reused) and its
// containers (cleared or refilled, keeping their storage).
struct WorkerScalars {
    std::size_t cursor = 0;
    bool busy = false;
    bool finished_ops = false;
    Time idle_since = Time::zero();
    int dp_done = 0;  // chunks whose gradients are synchronised
    bool optimizer_started = false;
    bool optimizer_done = false;
    bool parameters_done = false;  // distributed optimizer: updated parameters gathered back
    Time last_compute_end = Time::zero();
    // The host model: when the worker's host thread is free to start issuing its next pass (and
    // arrived_at below: when each pass's input arrived; the host waits for it before issuing).
    Time host_free = Time::zero();
    // variability.hosts: every host cost of this worker times this (the slowest of its GPUs).
    double host_factor = 1;
    // ZeRO-2/3: the current pass run unit by unit (units 0: in one piece). Unit k of the pass is
    // the chunk's unit k in a forward pass, unit units - 1 - k in a backward pass.
    int units = 0, unit = 0;
    bool unit_busy = false, unit_gathers = false, unit_reduces = false, unit_forward = true;
    Time unit_span;   // the pass's duration without waits, shared out over its units
    Time unit_ready;  // when the next unit may start: the previous unit's end
    std::int64_t gathers_issued = 0, reduces_issued = 0;  // on the worker's shard streams
    bool replica_done = false;  // HSDP: gradient shards all-reduced across the shard groups
    // Batched exchanges (Replay::batched_): the round whose passes run (-1 before the first
    // exchange); whether its exchange is under way and its transfers not done; when it was
    // posted and when its last transfer started (every peer had joined).
    int round = -1;
    bool exchanging = false;
    int exchange_pending = 0;
    Time exchange_started;
    // --overlap-param-gather: the next op is a forward waiting for its chunk's parameters.
    bool waiting_parameters = false;
};

struct Replay::WorkerState : WorkerScalars {
    // The passes running: one, or an overlapped group (PipelineOp::overlap) laid back to back;
    // each ends in turn. `held`: the group's finished passes, whose outputs leave with the last.
    std::deque<PassRecord> running;
    std::vector<PassRecord> held;
    std::vector<std::uint8_t> arrived;          // [arrival_key]
    std::vector<std::int32_t> pending_message;  // [arrival_key] -> message carrying it, or -1
    std::vector<int> backward_done;             // per chunk
    std::vector<Time> arrived_at;               // [arrival_key], filled only with a host model
    std::vector<std::int64_t> unit_gather;  // [k]: the all-gather unit k waits for, -1: not issued
    // Batched exchanges: messages of this round's passes not posted yet, and per arrival key
    // whether the worker has posted its receive.
    std::vector<std::int32_t> held_sends;
    std::vector<std::uint8_t> recv_posted;

    // The state of a new run, every container sized as in a newly built state (`keys` arrival
    // keys, `chunks` chunks; arrived_at only with a host model), keeping their storage.
    void reset(std::size_t keys, std::size_t chunks, bool host) {
        static_cast<WorkerScalars&>(*this) = WorkerScalars{};
        running.clear();
        held.clear();
        arrived.assign(keys, 0);
        pending_message.assign(keys, -1);
        backward_done.assign(chunks, 0);
        if (host)
            arrived_at.assign(keys, Time::zero());
        else
            arrived_at.clear();
        unit_gather.clear();
        held_sends.clear();
        recv_posted.assign(keys, 0);
    }
};

// ---- ReplayScratch ----------------------------------------------------------------------------

struct ReplayScratch::Parts {
    struct Entry {
        std::vector<Worker> workers;
        std::vector<Replay::WorkerState> states;
    };
    std::vector<Entry> entries;  // the most recently used last, each a distinct worker count
    std::vector<std::shared_ptr<Placement>> placements;  // the most recently used last
    std::size_t folds_taken = 0;
};

struct ReplayScratch::Placement {
    int tp = 0, cp = 0, dp = 0, pp = 0, ep = 0;
    workload::RankOrder order{};
    bool of(const workload::ParallelLayout& l) const {
        return l.tp == tp && l.cp == cp && l.dp == dp && l.pp == pp && l.ep == ep &&
               l.order == order;
    }
    std::vector<int> gpus;                    // [worker * members + member]; empty until filled
    std::vector<std::vector<int>> dp_groups;  // [stage * members + member]; empty until filled
    // decide_replica_fold's result for one cluster, network configuration and set of pipeline
    // stage pairs: the representative of each replica (empty: no two replicas alike) and the
    // class count; and the followers' send routes the runs asked for (account_follower_sends).
    struct Fold {
        std::weak_ptr<const topology::Cluster> cluster;
        const topology::Cluster* cluster_at = nullptr;
        network::NetworkConfig network;
        std::vector<std::pair<int, int>> pairs;
        std::vector<int> rep_replica;
        int classes = 0;
        std::map<std::pair<int, int>, std::shared_ptr<const network::Accelerator::SendRoutes>>
            follower_routes;
        bool of(const std::shared_ptr<const topology::Cluster>& c, const network::NetworkConfig& n,
                const std::vector<std::pair<int, int>>& p) const {
            // A cluster freed since is not the one asked about, even at the same address.
            return c.get() == cluster_at && cluster.lock() == c && network == n && pairs == p;
        }
    };
    std::optional<Fold> fold;
};

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
// pass_costs_ holds, per virtual stage, the ChunkPlan's passes in schedule::Pass order.
constexpr int kPassKinds = 4;
static_assert(static_cast<int>(Pass::Forward) == 0 && static_cast<int>(Pass::Backward) == 1 &&
              static_cast<int>(Pass::BackwardInput) == 2 &&
              static_cast<int>(Pass::BackwardWeight) == 3);
constexpr const char* kReplicasDiffer = "every replica's pipeline messages cost differently";
}  // namespace

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

    const int members = ranks_.members();
    const auto worker_count = static_cast<std::size_t>(ranks_.workers());
    if (scratch) {
        scratch_ = scratch;
        auto& entries = scratch->parts_->entries;
        for (auto it = entries.begin(); it != entries.end(); ++it)
            if (it->workers.size() == worker_count) {
                workers_.swap(it->workers);
                states_.swap(it->states);
                entries.erase(it);
                break;
            }
    }
    // An own run's placement: its GPUs and communicators as a scratch keeps them, if it does.
    if (scratch && !shared) placement_ = scratch->placement(layout_);
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
    orders_.resize(static_cast<std::size_t>(layout_.pp));
    for (int s = 0; s < layout_.pp; ++s)
        orders_[static_cast<std::size_t>(s)] = schedule_.order(shape_, s);
    // Megatron-LM without --overlap-grad-reduce reduces every model chunk's gradients after the
    // whole backward (finalize_model_grads: finish_grad_sync of each chunk, one after another),
    // as its local DDP did in 2021 (grad_reduce_after_backward); with one chunk that is the same
    // as reducing it after its last backward.
    reduce_after_backward_ = workload::dp_reduce_after_backward(spec_);
    param_prefetch_ = layout_.overlap_param_gather && layout_.dp * layout_.cp > 1 &&
                      layout_.sharding == workload::Sharding::Optimizer;
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

    const std::size_t keys = static_cast<std::size_t>(shape_.chunks * shape_.microbatches * 2);
    states_.resize(workers_.size());
    for (auto& st : states_)
        st.reset(keys, static_cast<std::size_t>(shape_.chunks), spec_.compute.host.enabled);
    for (const auto& slow : spec_.variability.hosts)
        for (std::size_t w = 0; w < workers_.size(); ++w)
            for (int g : workers_[w].gpus)
                if (std::binary_search(slow.gpus.begin(), slow.gpus.end(), g))
                    states_[w].host_factor = std::max(states_[w].host_factor, slow.factor);
    // The gradient reduction spans the dp x cp GPUs holding the same parameters (Megatron-LM's
    // data-parallel group with context parallelism); with cp > 1 the members of one tensor rank
    // share one such group, registered once (dp_groups_ repeats it for them).
    dp_ranks_ = layout_.dp * layout_.cp;
    if (dp_ranks_ > 1) {
        const auto dp_group = [&](int s, int m) {
            return ranks_.dp_cp_group(worker_of(s, 0), m).gpus;
        };
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
    setup_sharding();
    // Every pass kind of every virtual stage, costed once before the run.
    pass_costs_.reserve(plan_.virtual_stages.size() * kPassKinds);
    for (const auto& c : plan_.virtual_stages)
        for (const auto* pass : {&c.forward, &c.backward, &c.backward_input, &c.backward_weight})
            // A backward pass (or its input half) starts the autograd engine: host.backward more.
            pass_costs_.push_back(
                cost_pass(*pass, pass == &c.backward || pass == &c.backward_input));
    // Gradient buckets of --overlap-grad-reduce: each chunk's parameters in buckets of
    // bucket_parameters(), as Megatron-LM's DDP cuts them.
    bucket_count_.assign(static_cast<std::size_t>(layout_.pp), 1);
    for (int s = 0; s < layout_.pp; ++s) {
        const std::int64_t params = plan_.devices[static_cast<std::size_t>(s)].dp_parameters;
        const std::int64_t per = layout_.bucket_parameters();
        if (overlaps_dp(s))
            bucket_count_[static_cast<std::size_t>(s)] =
                static_cast<int>(std::max<std::int64_t>(1, (params + per - 1) / per));
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

Bytes Replay::bucket_bytes(int stage, int bucket) const {
    // The share of the chunk's gradient bytes between b and b + 1 bucket sizes.
    const auto& dev = plan_.devices[static_cast<std::size_t>(stage)];
    const int buckets = bucket_count_[static_cast<std::size_t>(stage)];
    const double total = static_cast<double>(dev.dp_gradient_bytes.value);
    const double params = static_cast<double>(dev.dp_parameters);
    const double per = static_cast<double>(layout_.bucket_parameters());
    const auto upto = [&](int b) {
        return b >= buckets ? dev.dp_gradient_bytes.value
                            : static_cast<std::int64_t>(
                                  std::llround(total * std::min(1.0, b * per / params)));
    };
    return Bytes{upto(bucket + 1) - upto(bucket)};
}

bool Replay::overlaps_dp(int stage) const {
    return layout_.overlap_grad_reduce && dp_ranks_ > 1 && !sharded_units_ &&
           plan_.devices[static_cast<std::size_t>(stage)].dp_gradient_bytes.value > 0;
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
}

int Replay::send_parts(std::span<const int> srcs, std::span<const int> dsts, Bytes size,
                       std::uint64_t token) {
    if (accel_) return accel_->send_together(srcs, dsts, size, token);
    for (std::size_t i = 0; i < srcs.size(); ++i)
        network_->send(srcs[i], dsts[i], size, token);
    return static_cast<int>(srcs.size());
}

void Replay::add_network_observer(network::NetworkObserver& observer) {
    network_->add_observer(&observer);
}

int Replay::arrival_key(int chunk, int microbatch, bool gradient) const {
    return (chunk * shape_.microbatches + microbatch) * 2 + (gradient ? 1 : 0);
}

const workload::PassPlan& pass_plan(const workload::ChunkPlan& chunk, schedule::Pass pass) {
    switch (pass) {
        case Pass::Forward:
            return chunk.forward;
        case Pass::Backward:
            return chunk.backward;
        case Pass::BackwardInput:
            return chunk.backward_input;
        case Pass::BackwardWeight:
            return chunk.backward_weight;
    }
    return chunk.forward;
}

const workload::PassPlan& Replay::pass_plan(const schedule::PipelineOp& op, int vs) const {
    return replay::pass_plan(plan_.virtual_stages[static_cast<std::size_t>(vs)], op.pass);
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

const Replay::PassCost& Replay::pass_cost(Pass pass, int vs) const {
    return pass_costs_[static_cast<std::size_t>(vs * kPassKinds + static_cast<int>(pass))];
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

Time Replay::modelled_compute(int worker, const PassRecord& r, Time nominal) {
    const auto w = static_cast<std::size_t>(worker);
    if (duration_streams_.empty()) {
        if (workers_.size() > static_cast<std::size_t>(kMaxDurationWorker) + 1)
            throw SimulationError("replay", "too many workers for per-worker random streams");
        duration_streams_.assign(workers_.size(), nullptr);
    }
    if (!duration_streams_[w])
        duration_streams_[w] = &sim_.random(duration_stream_id(step_, worker));
    const Worker& info = workers_[w];
    DurationContext ctx;
    ctx.worker = worker;
    ctx.gpus = info.gpus;
    ctx.stage = info.stage;
    ctx.dp = info.dp;
    ctx.virtual_stage = r.virtual_stage;
    ctx.chunk = r.chunk;
    ctx.microbatch = r.microbatch;
    ctx.pass = r.pass;
    ctx.step = step_;
    ctx.start = r.start;
    ctx.random = duration_streams_[w];
    const Time t = duration_model_->pass_duration(ctx, nominal);
    if (t < Time::zero())
        throw SimulationError(
            "replay",
            "the duration model gave a negative time to a pass of worker " + std::to_string(worker),
            sim_.now());
    return t;
}

void Replay::emit_idle(int worker, Time until, IdleCause cause) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    if (until > st.idle_since)
        notify_replicas(
            worker, [&](ReplayObserver& o, int w) { o.on_idle(w, st.idle_since, until, cause); });
    st.idle_since = until;
}

void Replay::emit_host(int worker, Time start, Time end, HostWork kind, std::uint64_t pass) {
    if (end > start)
        notify_replicas(worker,
                        [&](ReplayObserver& o, int w) { o.on_host(w, start, end, kind, pass); });
}

bool Replay::p2p_target(int worker, Pass pass, int vs, int microbatch, int& dst, int& key,
                        int& target_vs, bool& gradient) const {
    const int last_vs = schedule_.virtual_stages(shape_) - 1;
    target_vs = -1;
    gradient = false;
    if (pass == Pass::Forward && vs < last_vs) target_vs = vs + 1;
    if ((pass == Pass::Backward || pass == Pass::BackwardInput) && vs > 0) {
        target_vs = vs - 1;
        gradient = true;
    }
    if (target_vs < 0) return false;
    const auto place = schedule_.place(shape_, target_vs, microbatch);
    dst = worker_of(place.device, workers_[static_cast<std::size_t>(worker)].dp);
    key = arrival_key(place.chunk, microbatch, gradient);
    return true;
}

void Replay::decide_fold(ReplayResult& result) {
    const int members = ranks_.members();
    members_on_network_ = members;
    if (!fold_allowed_ || members < 2 || spec_.network.fidelity != network::Fidelity::Flow) return;
    // Other jobs' flows on the shared network break the symmetry folding relies on.
    if (shared_) {
        result.fold_refused = "a shared-fabric (jobs:) run is not folded";
        return;
    }
    // Not checked for folding: the shard groups' collectives of ZeRO-2/3 and HSDP, and faults
    // (routes that change during the run). Such runs are not folded.
    if (sharded_units_ || hsdp_) {
        result.fold_refused = "sharded data parallelism (zero2/zero3 or HSDP) is not folded";
        return;
    }
    if (!spec_.faults.links.empty() || !spec_.faults.gpus.empty()) {
        result.fold_refused = "a run with faults is not folded";
        return;
    }
    if (layout_.cp > 1 && dp_ranks_ > 1) {
        result.fold_refused =
            "context parallelism's gradient reduction spans the cp ranks of a tensor rank "
            "(members share its group)";
        return;
    }
    std::vector<network::FoldClass> classes;
    // Pipeline messages: every pair of workers that exchange one, once.
    std::vector<std::pair<int, int>> pairs;
    for (std::size_t w = 0; w < workers_.size(); ++w)
        for (const auto& op : orders_[static_cast<std::size_t>(workers_[w].stage)]) {
            const int vs =
                schedule_.virtual_stage(shape_, workers_[w].stage, op.chunk, op.microbatch);
            int dst = -1, key = -1, target_vs = -1;
            bool gradient = false;
            if (p2p_target(static_cast<int>(w), op.pass, vs, op.microbatch, dst, key, target_vs,
                           gradient) &&
                dst != static_cast<int>(w))
                pairs.emplace_back(static_cast<int>(w), dst);
        }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    for (const auto& [a, b] : pairs) {
        network::FoldClass c;
        c.src = workers_[static_cast<std::size_t>(a)].gpus;
        c.dst = workers_[static_cast<std::size_t>(b)].gpus;
        classes.push_back(std::move(c));
    }
    // DP collectives: per stage, every kind and size start_dp_sync, launch_bucket and
    // start_parameter_gather issue.
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
    std::string why;
    if (accel_ && accel_->fold(members, classes, why)) {
        members_on_network_ = 1;
        result.fold_copies = members;
    } else {
        result.fold_refused = why;
    }
}

void Replay::decide_replica_fold(ReplayResult& result) {
    result.replicas_simulated = layout_.dp;
    if (!fold_allowed_ || layout_.dp < 2 || spec_.network.fidelity == network::Fidelity::Flow)
        return;
    // Anything that may make one replica differ from another keeps them all.
    std::string why;
    if (!replica_refused_.empty())
        why = replica_refused_;
    else if (shared_)
        why = "a shared-fabric (jobs:) run is not folded";
    else if (duration_model_ || spec_.variability.any())
        why = "variability (a per-worker duration or host model) makes replicas differ";
    else if (!spec_.faults.links.empty() || !spec_.faults.gpus.empty() || stop_requested_)
        why = "a run with faults is not folded";
    else if (sharded_units_ || hsdp_)
        why = "sharded data parallelism (zero2/zero3 or HSDP) is not folded by replicas";
    if (!why.empty()) {
        result.replicas_refused = why;
        return;
    }
    // The stage pairs that exchange pipeline messages (the same in every replica).
    std::vector<std::pair<int, int>> pairs;
    for (int s = 0; s < layout_.pp; ++s) {
        const int w = worker_of(s, 0);
        for (const auto& op : orders_[static_cast<std::size_t>(s)]) {
            const int vs = schedule_.virtual_stage(shape_, s, op.chunk, op.microbatch);
            int dst = -1, key = -1, target_vs = -1;
            bool gradient = false;
            if (p2p_target(w, op.pass, vs, op.microbatch, dst, key, target_vs, gradient) &&
                dst != w)
                pairs.emplace_back(s, workers_[static_cast<std::size_t>(dst)].stage);
        }
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    // A replica's class: the cost of every pipeline message route of every member, pair by pair.
    // Replicas with equal classes start, wait and finish alike (no contention: a message's time
    // is its route's), DP collectives being common to all.
    // The costs of every replica's pairs come at once (Network::send_routes, kept with a
    // cluster that keeps its routes: a sweep's later runs of this placement look them up).
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
    const bool differ = static_cast<int>(classes.size()) == layout_.dp;
    if (differ) rep_replica_.clear();
    if (placement_) {
        auto& kept = placement_->fold.emplace();
        kept.cluster = spec_.cluster;
        kept.cluster_at = spec_.cluster.get();
        kept.network = spec_.network;
        kept.pairs = std::move(pairs);
        kept.rep_replica = rep_replica_;
        kept.classes = static_cast<int>(classes.size());
        fold_kept_ = true;
    }
    if (differ) {
        result.replicas_refused = kReplicasDiffer;
        return;
    }
    set_followers(result, static_cast<int>(classes.size()));
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

bool Replay::sends_p2p(int worker, Pass pass, int vs, int microbatch) const {
    const int last_vs = schedule_.virtual_stages(shape_) - 1;
    int target = -1;
    if (pass == Pass::Forward && vs < last_vs) target = vs + 1;
    if ((pass == Pass::Backward || pass == Pass::BackwardInput) && vs > 0) target = vs - 1;
    if (target < 0) return false;
    const auto place = schedule_.place(shape_, target, microbatch);
    return worker_of(place.device, workers_[static_cast<std::size_t>(worker)].dp) != worker;
}

void Replay::start_on_host(int worker, PassRecord& r, const PassCost& cost, int need, Time now) {
    // The host issues the worker's passes in order, each as soon as it is free and the pass's
    // input has arrived; it runs ahead of the GPU without bound (no queue limit: a pass's kernels
    // are few next to CUDA's launch queue) except where sync_after_p2p makes it wait. `now` is
    // when the GPU could start the pass: max(its previous work, the input's arrival).
    auto& st = states_[static_cast<std::size_t>(worker)];
    const auto& host = spec_.compute.host;
    const Time gpu_time = r.compute + r.collective;
    HostIssue issue = cost.host;
    const double hf = st.host_factor;
    const auto slow = [hf](Time t) {
        return hf == 1 ? t
                       : Time::ps(static_cast<std::int64_t>(
                             std::llround(static_cast<double>(t.count_ps()) * hf)));
    };
    const bool rescaled = r.compute != cost.compute && cost.compute > Time::zero();
    if (rescaled || hf != 1) [[unlikely]] {
        // A duration model changed the pass's compute: its compute kernels scale alike. A slow
        // host (variability.hosts) takes longer for everything it does.
        std::vector<KernelBlock> blocks = cost.blocks;
        if (rescaled) {
            const double scale = static_cast<double>(r.compute.count_ps()) /
                                 static_cast<double>(cost.compute.count_ps());
            for (std::size_t i = 0; i < blocks.size(); ++i)
                if (cost.block_compute[i])
                    blocks[i].time = Time::ps(static_cast<std::int64_t>(
                        std::llround(static_cast<double>(blocks[i].time.count_ps()) * scale)));
        }
        issue = host_issue(slow(cost.lead), slow(host.launch), blocks);
    }
    const Time p2p = slow(host.p2p);
    Time h = st.host_free;
    Time arrival = Time::zero();
    if (need >= 0) {
        arrival = st.arrived_at[static_cast<std::size_t>(need)];
        const int msg = st.pending_message[static_cast<std::size_t>(need)];
        // A receive from another worker is posted first (a local hand-over is no p2p operation).
        if (msg >= 0 && messages_[static_cast<std::size_t>(msg)].record.src_worker != worker) {
            emit_host(worker, h, h + p2p, HostWork::P2p, 0);
            h += p2p;
        }
    }
    // Megatron-LM synchronises the device after its batched p2p, so its host waits for the
    // received tensor before issuing the pass; eager torch.distributed's wait() only makes the
    // compute stream wait, and its host issues the pass's kernels ahead of the data.
    const Time h0 = host.sync_after_p2p ? std::max(h, arrival) : h;
    // The closed form of host.hpp, shifted to h0 and met with the GPU's own start: exact for
    // kernels issued at h0 + pass + (i + 1) x launch on a GPU free from `now`.
    r.start = std::max(now, h0 + issue.first_issue);
    emit_idle(worker, r.start, IdleCause::Host);
    r.end = std::max(now + gpu_time, h0 + issue.earliest_end);
    r.host_stall = r.end - r.start - gpu_time;
    emit_host(worker, h0, h0 + issue.issue, HostWork::Issue, r.id);
    h = h0 + issue.issue;
    if (sends_p2p(worker, r.pass, r.virtual_stage, r.microbatch)) {
        emit_host(worker, h, h + p2p, HostWork::P2p, 0);
        h += p2p;
        if (host.sync_after_p2p && r.end > h) {
            emit_host(worker, h, r.end, HostWork::Sync, 0);
            h = r.end;
        }
    }
    st.host_free = h;
}

int Replay::input_key(const schedule::PipelineOp& op, int vs) const {
    const int last_vs = schedule_.virtual_stages(shape_) - 1;
    if (op.pass == Pass::Forward && vs > 0) return arrival_key(op.chunk, op.microbatch, false);
    if ((op.pass == Pass::Backward || op.pass == Pass::BackwardInput) && vs < last_vs)
        return arrival_key(op.chunk, op.microbatch, true);
    return -1;
}

bool Replay::begin_record(int worker, const schedule::PipelineOp& op, int vs, Time now,
                          PassRecord& r) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    r = PassRecord{};
    r.worker = worker;
    r.virtual_stage = vs;
    r.chunk = op.chunk;
    r.microbatch = op.microbatch;
    r.pass = op.pass;
    r.start = now;
    const PassCost& cost = pass_cost(op.pass, vs);
    r.compute = cost.compute;
    r.interference = cost.interference;
    if (duration_model_) [[unlikely]]
        r.compute = modelled_compute(worker, r, r.compute);
    r.collective = cost.collective;
    const bool completes_gradients = op.pass == Pass::Backward || op.pass == Pass::BackwardWeight;
    const bool last_backward =
        completes_gradients && overlaps_dp(w.stage) &&
        st.backward_done[static_cast<std::size_t>(op.chunk)] == chunk_microbatches() - 1;
    if (last_backward && !overlapped_buckets_.empty()) {
        // The pass's kernels run 1 + interference times as long while the buckets reduce. An
        // approximation: the buckets are taken at their isolated time (not their time on the
        // shared network) and as if they all ran inside the pass, so the slowed part is
        // min(compute, their time); the later buckets' readiness follows the longer pass.
        const Time overlap =
            std::min(r.compute, overlapped_buckets_[static_cast<std::size_t>(w.stage)]);
        const Time slowed = Time::ps(static_cast<std::int64_t>(
            std::llround(static_cast<double>(overlap.count_ps()) * spec_.compute.interference)));
        r.interference += slowed;
        r.compute += slowed;
    }
    r.end = now + r.compute + r.collective;
    r.plan = &pass_plan(op, vs);
    r.step_times = cost.step_times;
    r.collective_kinds = &cost.collective_kinds;
    r.id = next_pass_id_++;
    return last_backward;
}

void Replay::announce_input(int worker, int need, std::uint64_t pass_id) {
    if (need < 0) return;
    const int msg =
        states_[static_cast<std::size_t>(worker)].pending_message[static_cast<std::size_t>(need)];
    if (msg < 0) return;
    auto& rec = messages_[static_cast<std::size_t>(msg)].record;
    rec.to_pass = pass_id;
    for (auto* o : observers_)
        o->on_transfer(rec);
    // The same message of every replica the receiver stands for (the sender is of its replica).
    const auto& to = notified_followers(worker);
    const auto& from = followers_of(rec.src_worker);
    TransferRecord copy = rec;
    for (std::size_t i = 0; i < to.size(); ++i) {
        copy.dst_worker = to[i];
        copy.src_worker = from[i];
        for (auto* o : observers_)
            o->on_transfer(copy);
    }
}

void Replay::try_start(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    if (st.busy || st.finished_ops) return;
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    const auto& order = orders_[static_cast<std::size_t>(w.stage)];
    if (batched_) {
        // A round's passes run one after another; between rounds the exchange. After the last
        // round, one more with its sends alone.
        if (st.exchanging) return;  // woken by exchange_transfer_done
        const auto& rounds = rounds_[static_cast<std::size_t>(w.stage)];
        const int next =
            st.cursor < order.size() ? rounds[st.cursor] : (rounds.empty() ? 0 : rounds.back() + 1);
        if (next != st.round && post_exchange(worker, next)) return;
    }
    if (st.cursor >= order.size()) {
        st.finished_ops = true;
        maybe_start_optimizer(worker);
        return;
    }
    // The op and, for an overlapped group, the ops that run alongside it: all their inputs must
    // be in before any starts.
    // ZeRO-2/3 runs a pass unit by unit; an overlapped group's passes then run one after another.
    const auto group =
        sharded_units_ ? std::size_t{1}
                       : static_cast<std::size_t>(1 + std::max<int>(0, order[st.cursor].overlap));
    if (st.cursor + group > order.size())
        throw SimulationError("replay",
                              "schedule " + schedule_.name() + " overlaps a pass of stage " +
                                  std::to_string(w.stage) + " with more passes than follow it",
                              sim_.now());
    std::array<int, kMaxGroup> vs{}, need{};
    if (group > kMaxGroup)
        throw SimulationError("replay", "an overlapped group of more than 4 passes", sim_.now());
    for (std::size_t k = 0; k < group; ++k) {
        const auto& op = order[st.cursor + k];
        vs[k] = schedule_.virtual_stage(shape_, w.stage, op.chunk, op.microbatch);
        need[k] = input_key(op, vs[k]);
        if (need[k] >= 0 && !st.arrived[static_cast<std::size_t>(need[k])])
            return;  // woken by deliver()
    }

    const Time now = sim_.now();
    emit_idle(worker, now, IdleCause::Pipeline);
    // --overlap-param-gather: a chunk's forward waits for the chunk's parameters (a DP wait,
    // told when they arrive: prefetch_parameters' completion).
    if (param_prefetch_ && order[st.cursor].pass == Pass::Forward &&
        !params_ready_[static_cast<std::size_t>(w.stage * shape_.chunks +
                                                order[st.cursor].chunk)]) {
        st.waiting_parameters = true;
        return;
    }
    std::array<bool, kMaxGroup> last_backward{};
    for (std::size_t k = 0; k < group; ++k)
        last_backward[k] =
            begin_record(worker, order[st.cursor + k], vs[k], now, st.running.emplace_back());
    if (group > 1) overlap_group(worker);
    if (spec_.compute.host.enabled) {
        // The host issues an overlapped group as its first pass (the partner's launches are
        // hidden in the group); the rest follow that pass's end.
        PassRecord& first = st.running.front();
        start_on_host(worker, first, pass_cost(first.pass, first.virtual_stage), need[0], now);
        Time t = first.end;
        for (std::size_t k = 1; k < group; ++k) {
            PassRecord& r = st.running[k];
            const Time span = r.end - r.start;
            r.start = t;
            r.end = t = t + span;
        }
    }
    for (std::size_t k = 0; k < group; ++k)
        announce_input(worker, need[k], st.running[k].id);
    st.busy = true;
    st.cursor += group;
    // One pass-done event at a time: the next is scheduled when this one fires, so the group's
    // passes end in order whatever the engine does with simultaneous events.
    if (group == 1 && sharded_units_ && runs_units(st.running.front().pass))
        begin_units(worker);
    else
        sim_.schedule_at(st.running.front().end, handler_, kPassDone,
                         static_cast<std::uint64_t>(worker));
    for (std::size_t k = 0; k < group; ++k)
        if (last_backward[k])
            schedule_buckets(worker, st.running[k].chunk, st.running[k].start, st.running[k].end);
}

OverlappedTime overlapped_time(std::int64_t compute, std::int64_t collective, std::int64_t chain_f,
                               std::int64_t chain_b, double interference) {
    const double cd = static_cast<double>(compute), ad = static_cast<double>(collective);
    const double i = interference;
    const double window = std::min(ad, cd * (1 + i));
    const double shared = ad >= cd * (1 + i) ? ad : cd + ad * i / (1 + i);
    OverlappedTime t;
    t.group = std::max({chain_f, chain_b, static_cast<std::int64_t>(std::llround(shared))});
    const std::int64_t extra = t.group - compute;
    t.slowed = std::min(extra, static_cast<std::int64_t>(std::llround(window * i / (1 + i))));
    t.exposed = extra - t.slowed;
    return t;
}

void Replay::overlap_group(int worker) {
    // DualPipe's F&B: a forward (record 0) and another microbatch's backward (the others) run
    // together, each one's expert-parallel all-to-all hidden behind the other's compute. The
    // group takes the longest of three bounds:
    //   - each chain alone: a pass's compute and its blocking collectives depend on each other
    //     in turn (attention, dispatch, experts, combine), so the forward takes C_F + A_F and
    //     the backward C_B + A_B however well they interleave;
    //   - the shared resources: compute C = C_F + C_B and communication A = A_F + A_B, with the
    //     compute slowed by 1 + i (compute.interference: the SMs the communication kernels take)
    //     while communication runs. Communication within the compute: C + A i / (1 + i);
    //     compute within the communication: A.
    // What the group takes beyond C is interference (compute slowed) first, then exposed
    // communication; both are shared out in proportion to each pass's compute and collective
    // time, and the passes are laid back to back from the group's start.
    auto& st = states_[static_cast<std::size_t>(worker)];
    auto& recs = st.running;
    const std::size_t n = recs.size();
    const double i =
        spec_.compute.framework != workload::Framework::None ? spec_.compute.interference : 0.0;
    std::int64_t c = 0, a = 0, chain_f = 0, chain_b = 0;
    for (std::size_t k = 0; k < n; ++k) {
        c += recs[k].compute.count_ps();
        a += recs[k].collective.count_ps();
        (k == 0 ? chain_f : chain_b) += (recs[k].compute + recs[k].collective).count_ps();
    }
    const auto [group, slowed, exposed] = overlapped_time(c, a, chain_f, chain_b, i);
    // Cumulative rounding, so the parts add up to the group exactly.
    std::int64_t c_before = 0, a_before = 0, slowed_given = 0, exposed_given = 0;
    Time t = recs.front().start;
    for (std::size_t k = 0; k < n; ++k) {
        PassRecord& r = recs[k];
        const std::int64_t ck = r.compute.count_ps(), ak = r.collective.count_ps();
        c_before += ck;
        a_before += ak;
        const auto share = [](std::int64_t total, std::int64_t upto, std::int64_t of) {
            return of == 0 ? (upto == of ? total : 0)
                           : static_cast<std::int64_t>(std::llround(static_cast<double>(total) *
                                                                    static_cast<double>(upto) /
                                                                    static_cast<double>(of)));
        };
        const std::int64_t s_upto = k + 1 == n ? slowed : share(slowed, c_before, c);
        const std::int64_t e_upto = k + 1 == n ? exposed : share(exposed, a_before, a);
        const Time slow_k = Time::ps(s_upto - slowed_given);
        const Time exposed_k = Time::ps(e_upto - exposed_given);
        slowed_given = s_upto;
        exposed_given = e_upto;
        r.interference += slow_k;
        const Time nominal_compute = r.compute, nominal_collective = r.collective;
        r.compute += slow_k;
        r.collective = exposed_k;
        r.start = t;
        r.end = t = t + r.compute + r.collective;
        r.step_times = overlapped_steps(r, nominal_compute, nominal_collective);
    }
}

std::span<const Time> Replay::overlapped_steps(const PassRecord& r, Time compute, Time collective) {
    // The pass's steps drawn inside its shorter (or longer) span: compute steps scaled with its
    // compute, collectives with the part of them left exposed. Kept for the replay's life, once
    // per distinct (pass, times).
    const auto key =
        std::make_tuple(r.virtual_stage, static_cast<int>(r.pass), compute.count_ps(),
                        r.compute.count_ps(), collective.count_ps(), r.collective.count_ps());
    auto it = overlapped_steps_.find(key);
    if (it != overlapped_steps_.end()) return it->second;
    const PassCost& cost = pass_cost(r.pass, r.virtual_stage);
    const auto scale = [](Time t, Time to, Time from) {
        return from <= Time::zero()
                   ? t
                   : Time::ps(static_cast<std::int64_t>(std::llround(
                         static_cast<double>(t.count_ps()) * static_cast<double>(to.count_ps()) /
                         static_cast<double>(from.count_ps()))));
    };
    std::vector<Time> times;
    times.reserve(cost.step_times.size());
    for (std::size_t k = 0; k < cost.step_times.size(); ++k)
        times.push_back(r.plan->steps[k].kind == workload::Step::Kind::Compute
                            ? scale(cost.step_times[k], r.compute, cost.compute)
                            : scale(cost.step_times[k], r.collective, cost.collective));
    return overlapped_steps_.emplace(key, std::move(times)).first->second;
}

void Replay::schedule_buckets(int worker, int chunk, Time start, Time end) {
    // The pass produces the chunk's gradients at an even pace (its layers are alike): bucket b of
    // K, holding the parameters up to (b + 1) x bucket size, is ready at that fraction of the pass.
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    const int buckets = bucket_count_[static_cast<std::size_t>(w.stage)];
    const double params =
        static_cast<double>(plan_.devices[static_cast<std::size_t>(w.stage)].dp_parameters);
    const double per = static_cast<double>(layout_.bucket_parameters());
    const double span = static_cast<double>((end - start).count_ps());
    for (int b = 0; b < buckets; ++b) {
        const double fraction = std::min(1.0, (b + 1) * per / params);
        const Time at =
            b + 1 == buckets
                ? end
                : start + Time::ps(static_cast<std::int64_t>(std::llround(span * fraction)));
        sim_.schedule_at(at, handler_, kBucketReady, static_cast<std::uint64_t>(worker),
                         static_cast<std::uint64_t>(chunk) << 32 | static_cast<std::uint32_t>(b));
    }
}

void Replay::bucket_ready(int worker, int chunk, int bucket) {
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    // Launched when every replica of the stage has this bucket (the last one launches it).
    auto& ready = buckets_ready_[static_cast<std::size_t>(
        (w.stage * shape_.chunks + chunk) * max_buckets_ + bucket)];
    ready += class_size(worker);  // a representative stands for its followers
    if (ready < layout_.dp) return;
    Message msg;
    msg.record.kind = TransferRecord::Kind::DpGradients;
    msg.record.src_worker = msg.record.dst_worker = worker;
    msg.record.bytes = bucket_bytes(w.stage, bucket);
    msg.purpose = GradientBucket{w.stage, chunk};
    bucket_queue_[static_cast<std::size_t>(w.stage)].push_back(messages_.size());
    messages_.push_back(msg);
    launch_bucket(w.stage);
}

void Replay::launch_bucket(int stage) {
    // Megatron-LM issues the buckets on one communicator, so they run one after another.
    auto& queue = bucket_queue_[static_cast<std::size_t>(stage)];
    auto& busy = bucket_busy_[static_cast<std::size_t>(stage)];
    if (busy || queue.empty()) return;
    busy = 1;
    const std::size_t id = queue.front();
    queue.pop_front();
    Message& msg = messages_[id];
    msg.record.start = sim_.now();
    const auto& dev = plan_.devices[static_cast<std::size_t>(stage)];
    const auto kind = dev.dp_sharded ? network::CollectiveKind::ReduceScatter
                                     : network::CollectiveKind::AllReduce;
    issue_gradient_reduce(stage, kind, msg.record.bytes, id);
}

void Replay::deliver(int worker, int key) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    st.arrived[static_cast<std::size_t>(key)] = 1;
    if (!st.arrived_at.empty()) st.arrived_at[static_cast<std::size_t>(key)] = sim_.now();
    try_start(worker);
}

void Replay::finish_pass(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    const PassRecord r = st.running.front();
    st.running.pop_front();
    st.idle_since = r.end;
    st.last_compute_end = r.end;
    end_time_ = std::max(end_time_, r.end);
    for (auto* o : observers_)
        o->on_pass(r);
    if (!notified_followers(worker).empty()) {
        PassRecord copy = r;
        for (int f : notified_followers(worker)) {
            copy.worker = f;
            for (auto* o : observers_)
                o->on_pass(copy);
        }
    }
    if (!st.running.empty()) {
        // An overlapped group runs on: its passes' outputs leave together when it ends.
        st.held.push_back(r);
        sim_.schedule_at(st.running.front().end, handler_, kPassDone,
                         static_cast<std::uint64_t>(worker));
        return;
    }
    st.busy = false;
    for (const PassRecord& h : st.held)
        complete_pass(worker, h);
    st.held.clear();
    complete_pass(worker, r);
    try_start(worker);
}

void Replay::complete_pass(int worker, const PassRecord& r) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    const Time now = sim_.now();
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    int target_vs = -1, dst = -1, key = -1;
    bool gradient = false;
    if (p2p_target(worker, r.pass, r.virtual_stage, r.microbatch, dst, key, target_vs, gradient)) {
        Message msg;
        msg.record.kind =
            gradient ? TransferRecord::Kind::Gradient : TransferRecord::Kind::Activation;
        msg.record.src_worker = worker;
        msg.record.dst_worker = dst;
        msg.record.microbatch = r.microbatch;
        msg.record.virtual_stage = target_vs;
        msg.record.bytes =
            plan_.virtual_stages[static_cast<std::size_t>(gradient ? target_vs : r.virtual_stage)]
                .activation_bytes;
        msg.record.start = now;
        msg.record.from_pass = r.id;
        msg.purpose = PipelineDelivery{key};
        const auto id = static_cast<std::int32_t>(messages_.size());
        states_[static_cast<std::size_t>(dst)].pending_message[static_cast<std::size_t>(key)] = id;
        if (dst == worker) {
            msg.record.end = now;
            messages_.push_back(msg);
            sim_.schedule_at(now, handler_, kLocalDelivery, static_cast<std::uint64_t>(id));
        } else if (batched_) {
            // Sent with the round's exchange (post_exchange).
            msg.posted = false;
            messages_.push_back(msg);
            st.held_sends.push_back(id);
        } else {
            messages_.push_back(msg);
            start_message(static_cast<std::size_t>(id));
        }
    }

    const bool completes_gradients = (r.pass == Pass::Backward || r.pass == Pass::BackwardWeight);
    // ZeRO-2/3 reduce-scatter every unit's gradients as its backward ends (sharded_units_).
    if (completes_gradients &&
        ++st.backward_done[static_cast<std::size_t>(r.chunk)] == chunk_microbatches() &&
        !overlaps_dp(w.stage) && !sharded_units_) {
        if (!reduce_after_backward_) {
            start_dp_sync(worker, r.chunk);
        } else if (all_chunks_backward_done(st)) {
            // Megatron-LM's local DDP: every chunk's all-reduce after the whole backward, one
            // after another on the data-parallel communicator (the next is issued when the one
            // before completes, on_transfer_done).
            start_dp_sync(worker, 0);
        }
    }
}

void Replay::start_message(std::size_t id) {
    Message& msg = messages_[id];
    const int worker = msg.record.src_worker, dst = msg.record.dst_worker;
    const auto& sw = workers_[static_cast<std::size_t>(worker)];
    const auto& dw = workers_[static_cast<std::size_t>(dst)];
    const auto members = static_cast<std::size_t>(members_on_network_);
    msg.record.start = sim_.now();
    // The message has arrived when every member's part has.
    const Bytes bytes = msg.record.bytes;
    msg.remaining = send_parts(std::span(sw.gpus).first(members), std::span(dw.gpus).first(members),
                               bytes, token_base_ + id);
    // Replica folding: the same message of every replica this one stands for costs the same time
    // (their classes are equal); the network's observers hear of its flows.
    if (!followers_of(worker).empty()) {
        if (bulk_accounting_)
            ++follower_sends_[{worker, dst, bytes.value}];
        else
            account_follower_sends(worker, dst, bytes, 1);
    }
    if (!batched_) return;
    for (int w : {worker, dst}) {
        auto& st = states_[static_cast<std::size_t>(w)];
        st.exchange_started = std::max(st.exchange_started, sim_.now());
    }
}

int Replay::input_sender(int worker, const schedule::PipelineOp& op, int vs) const {
    const int last_vs = schedule_.virtual_stages(shape_) - 1;
    int from = -1;
    if (op.pass == Pass::Forward && vs > 0) from = vs - 1;
    if ((op.pass == Pass::Backward || op.pass == Pass::BackwardInput) && vs < last_vs)
        from = vs + 1;
    if (from < 0) return -1;
    const auto place = schedule_.place(shape_, from, op.microbatch);
    const int sender = worker_of(place.device, workers_[static_cast<std::size_t>(worker)].dp);
    return sender == worker ? -1 : sender;
}

bool Replay::post_exchange(int worker, int next_round) {
    // Megatron-LM's p2p_communication: one batch_isend_irecv of the round's outputs and the next
    // round's inputs, then torch.cuda.synchronize(). NCCL's send and receive meet: a transfer
    // starts once both ends have posted it, and the worker goes on when all of its batch is done.
    auto& st = states_[static_cast<std::size_t>(worker)];
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    const auto& order = orders_[static_cast<std::size_t>(w.stage)];
    const auto& rounds = rounds_[static_cast<std::size_t>(w.stage)];
    st.round = next_round;
    st.exchange_started = sim_.now();
    int pending = 0;
    for (const std::int32_t id : st.held_sends) {
        Message& msg = messages_[static_cast<std::size_t>(id)];
        msg.posted = true;
        ++pending;
        const auto key = std::get<PipelineDelivery>(msg.purpose).arrival_key;
        if (states_[static_cast<std::size_t>(msg.record.dst_worker)]
                .recv_posted[static_cast<std::size_t>(key)])
            start_message(static_cast<std::size_t>(id));
    }
    st.held_sends.clear();
    for (std::size_t i = st.cursor; i < order.size() && rounds[i] == next_round; ++i) {
        const auto& op = order[i];
        const int vs = schedule_.virtual_stage(shape_, w.stage, op.chunk, op.microbatch);
        if (input_sender(worker, op, vs) < 0) continue;
        const int key = input_key(op, vs);
        st.recv_posted[static_cast<std::size_t>(key)] = 1;
        ++pending;
        const int id = st.pending_message[static_cast<std::size_t>(key)];
        if (id >= 0 && messages_[static_cast<std::size_t>(id)].posted)
            start_message(static_cast<std::size_t>(id));
    }
    st.exchange_pending += pending;
    st.exchanging = st.exchange_pending > 0;
    return st.exchanging;
}

void Replay::exchange_transfer_done(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    if (--st.exchange_pending > 0) return;
    st.exchanging = false;
    // Waiting for the peers to join is the pipeline's dependency; what is left once all have
    // joined is the exchange's own transfers.
    emit_idle(worker, st.exchange_started, IdleCause::Pipeline);
    emit_idle(worker, sim_.now(), IdleCause::PipelineComm);
    // The host synchronised with the device: it issues nothing before the exchange is done.
    if (spec_.compute.host.enabled) st.host_free = std::max(st.host_free, sim_.now());
    try_start(worker);
}

bool Replay::all_chunks_backward_done(const WorkerState& st) const {
    return std::all_of(st.backward_done.begin(), st.backward_done.end(),
                       [&](int done) { return done == chunk_microbatches(); });
}

void Replay::start_dp_sync(int worker, int chunk) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    const auto& dev = plan_.devices[static_cast<std::size_t>(w.stage)];
    if (dp_ranks_ <= 1 || dev.dp_gradient_bytes.value <= 0) {
        // Nothing to reduce: with grad_reduce_after_backward this call stands for every chunk.
        st.dp_done += reduce_after_backward_ ? shape_.chunks : 1;
        return;
    }
    // The collective starts once every replica of the stage has finished this chunk's backward
    // passes (with grad_reduce_after_backward: all its chunks' backward passes); the last replica
    // to get there launches it for all.
    int ready = 0;
    for (int d = 0; d < layout_.dp; ++d) {
        const auto& other = states_[static_cast<std::size_t>(simulated_worker(w.stage, d))];
        if (reduce_after_backward_
                ? all_chunks_backward_done(other)
                : other.backward_done[static_cast<std::size_t>(chunk)] == chunk_microbatches())
            ++ready;
    }
    if (ready < layout_.dp) return;
    issue_dp_sync(worker, chunk);
}

void Replay::issue_dp_sync(int worker, int chunk) {
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    const auto& dev = plan_.devices[static_cast<std::size_t>(w.stage)];
    Message msg;
    msg.record.kind = TransferRecord::Kind::DpGradients;
    msg.record.src_worker = msg.record.dst_worker = worker;
    msg.record.bytes = dev.dp_gradient_bytes;
    msg.record.start = sim_.now();
    msg.purpose = GradientSync{w.stage, chunk};
    const auto id = static_cast<std::uint64_t>(messages_.size());
    messages_.push_back(msg);
    const auto kind = dev.dp_sharded ? network::CollectiveKind::ReduceScatter
                                     : network::CollectiveKind::AllReduce;
    issue_gradient_reduce(w.stage, kind, dev.dp_gradient_bytes, id);
}

void Replay::maybe_start_optimizer(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    if (!st.finished_ops || st.optimizer_started) return;
    if (sharded_units_) {
        if (hsdp_) maybe_replica_reduce(workers_[static_cast<std::size_t>(worker)].stage);
        if (!sharded_gradients_done(worker)) return;
    } else if (st.dp_done < shape_.chunks) {
        return;
    }
    st.optimizer_started = true;
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    const Time step = plan_.devices[static_cast<std::size_t>(w.stage)].optimizer_step;
    // Time between the last backward and the optimizer step waits on DP synchronisation.
    emit_idle(worker, sim_.now(), IdleCause::Collective);
    Time start = sim_.now();
    const auto& host = spec_.compute.host;
    if (host.enabled && step > Time::zero()) {
        // The host issues the step as one more pass of one kernel.
        const Time h0 = st.host_free;
        Time issue = host.pass + host.launch;
        if (st.host_factor != 1)
            issue = Time::ps(static_cast<std::int64_t>(
                std::llround(static_cast<double>(issue.count_ps()) * st.host_factor)));
        start = std::max(start, h0 + issue);
        emit_idle(worker, start, IdleCause::Host);
        emit_host(worker, h0, h0 + issue, HostWork::Issue, 0);
        st.host_free = h0 + issue;
    }
    sim_.schedule_at(start + step, handler_, kOptimizerDone, static_cast<std::uint64_t>(worker));
}

void Replay::start_parameter_gather(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    const auto& dev = plan_.devices[static_cast<std::size_t>(w.stage)];
    // ZeRO-3 keeps its parameters sharded: the next forward's unit all-gathers fetch them.
    // With --overlap-param-gather the next iteration's forwards wait for them (as this one's
    // did, prefetch_parameters).
    if (!dev.dp_sharded || dp_ranks_ <= 1 || dev.dp_gradient_bytes.value <= 0 ||
        layout_.sharding == workload::Sharding::Parameters || param_prefetch_) {
        st.parameters_done = true;
        return;
    }
    // Megatron's distributed optimizer updates a 1/dp shard and all-gathers the updated 16-bit
    // parameters (without --overlap-param-gather this is exposed before the next forward). The
    // last replica of the stage to finish its optimizer step launches it for all.
    for (int d = 0; d < layout_.dp; ++d)
        if (!states_[static_cast<std::size_t>(simulated_worker(w.stage, d))].optimizer_done) return;
    Message msg;
    msg.record.kind = TransferRecord::Kind::DpParameters;
    msg.record.src_worker = msg.record.dst_worker = worker;
    msg.record.bytes = Bytes{dev.dp_parameter_bytes.value * shape_.chunks};
    msg.record.start = sim_.now();
    msg.purpose = ParameterGather{w.stage};
    // HSDP: every shard group gathers its own replica's parameters.
    const auto scope = hsdp_ ? TransferRecord::Scope::Shard : TransferRecord::Scope::Dp;
    msg.record.scope = scope;
    msg.remaining = dp_collective_count(scope);
    const auto id = static_cast<std::uint64_t>(messages_.size());
    messages_.push_back(msg);
    issue_dp(w.stage, network::CollectiveKind::AllGather, scope, msg.record.bytes, id);
}

// ---- Sharded data parallelism (ZeRO-1/2/3, HSDP) --------------------------------------------

void Replay::setup_sharding() {
    const bool sharded = layout_.sharding != workload::Sharding::None && layout_.dp > 1;
    shard_size_ = sharded ? layout_.shard_group_size() : layout_.dp;
    hsdp_ = sharded && layout_.hsdp();
    sharded_units_ = layout_.sharding >= workload::Sharding::Gradients && shard_size_ > 1;
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

int Replay::dp_collective_count(TransferRecord::Scope scope) const {
    const int members = ranks_.members();
    switch (scope) {
        case TransferRecord::Scope::Dp:
            // 1 when member 0 stands for all (decide_fold); with cp > 1 one per tensor rank.
            return std::min(members_on_network_, layout_.cp > 1 ? layout_.tp : members);
        case TransferRecord::Scope::Shard:
            return members * (layout_.dp / shard_size_);
        case TransferRecord::Scope::Replica:
            return members * shard_size_;
    }
    return members;
}

void Replay::issue_dp(int stage, network::CollectiveKind kind, TransferRecord::Scope scope,
                      Bytes bytes, std::uint64_t id) {
    const int members = ranks_.members();
    const int groups = layout_.dp / shard_size_;
    for (int m = 0; m < members; ++m) {
        const auto base = static_cast<std::size_t>(stage * members + m);
        switch (scope) {
            case TransferRecord::Scope::Dp:
                // Folded: member 0 stands for all; with cp > 1 the members of a tensor rank
                // share its group (the first context rank issues it).
                if (m >= members_on_network_ || (layout_.cp > 1 && m >= layout_.tp)) break;
                network_->collective(kind, dp_groups_[base], bytes, network::Algorithm::Auto,
                                     token_base_ + id);
                break;
            case TransferRecord::Scope::Shard:
                for (int g = 0; g < groups; ++g)
                    network_->collective(kind,
                                         shard_groups_[base * static_cast<std::size_t>(groups) +
                                                       static_cast<std::size_t>(g)],
                                         bytes, network::Algorithm::Auto, token_base_ + id);
                break;
            case TransferRecord::Scope::Replica:
                for (int i = 0; i < shard_size_; ++i)
                    network_->collective(
                        kind,
                        replica_groups_[base * static_cast<std::size_t>(shard_size_) +
                                        static_cast<std::size_t>(i)],
                        bytes, network::Algorithm::Auto, token_base_ + id);
                break;
        }
    }
}

void Replay::issue_gradient_reduce(int stage, network::CollectiveKind kind, Bytes bytes,
                                   std::uint64_t id) {
    auto& msg = messages_[static_cast<std::size_t>(id)];
    if (!hsdp_) {
        msg.remaining = dp_collective_count(TransferRecord::Scope::Dp);
        issue_dp(stage, kind, TransferRecord::Scope::Dp, bytes, id);
        return;
    }
    // The shard each GPU keeps after the reduce-scatter, all-reduced across the groups next.
    msg.then_all_reduce = Bytes{(bytes.value + shard_size_ - 1) / shard_size_};
    msg.remaining = dp_collective_count(TransferRecord::Scope::Shard);
    issue_dp(stage, network::CollectiveKind::ReduceScatter, TransferRecord::Scope::Shard, bytes,
             id);
}

bool Replay::runs_units(Pass pass) const {
    const bool zero3 = layout_.sharding == workload::Sharding::Parameters;
    switch (pass) {
        case Pass::Forward:
            return zero3;
        case Pass::Backward:
        case Pass::BackwardWeight:
            return true;  // gradients reduce-scattered unit by unit
        case Pass::BackwardInput:
            return zero3 && layout_.reshard_after_forward;
    }
    return false;
}

int Replay::shard_stream(int worker, bool gather) const {
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    const int groups = layout_.dp / shard_size_;
    return (w.stage * groups + w.dp / shard_size_) * 2 + (gather ? 0 : 1);
}

void Replay::begin_units(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    const PassRecord& r = st.running.front();
    const auto& chunk = plan_.virtual_stages[static_cast<std::size_t>(r.virtual_stage)];
    const int units = static_cast<int>(chunk.unit_parameters.size());
    if (units == 0) {
        sim_.schedule_at(r.end, handler_, kPassDone, static_cast<std::uint64_t>(worker));
        return;
    }
    const bool zero3 = layout_.sharding == workload::Sharding::Parameters;
    st.units = units;
    st.unit = 0;
    st.unit_busy = false;
    st.unit_forward = r.pass == Pass::Forward;
    // Parameters are gathered before a unit's forward, and again before its backward when they
    // were freed after the forward; the weight-gradient half of a split backward needs none.
    st.unit_gathers = zero3 && (r.pass == Pass::Forward ||
                                (layout_.reshard_after_forward &&
                                 (r.pass == Pass::Backward || r.pass == Pass::BackwardInput)));
    st.unit_reduces = r.pass == Pass::Backward || r.pass == Pass::BackwardWeight;
    st.unit_span = r.end - r.start;
    st.unit_ready = r.start;
    st.unit_gather.assign(static_cast<std::size_t>(units), -1);
    if (st.unit_gathers) st.unit_gather[0] = request_unit(worker, true, 0);
    advance_units(worker);
}

std::int64_t Replay::request_unit(int worker, bool gather, int k) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    const auto& chunk =
        plan_.virtual_stages[static_cast<std::size_t>(st.running.front().virtual_stage)];
    const int unit = st.unit_forward ? k : st.units - 1 - k;
    const double params =
        static_cast<double>(chunk.unit_parameters[static_cast<std::size_t>(unit)]);
    // All-gathers move the 16-bit weights, reduce-scatters the gradients in their reduce type.
    const double per = gather ? workload::weight_bytes_per_parameter(spec_.training.precision)
                              : workload::gradient_bytes_per_parameter(spec_.training.precision);
    const Bytes bytes{static_cast<std::int64_t>(std::llround(params * per))};
    const int index = shard_stream(worker, gather);
    auto& ss = shard_streams_[static_cast<std::size_t>(index)];
    const std::int64_t n = gather ? st.gathers_issued++ : st.reduces_issued++;
    if (static_cast<std::int64_t>(ss.ready.size()) <= n) {
        ss.ready.resize(static_cast<std::size_t>(n + 1), 0);
        ss.bytes.resize(static_cast<std::size_t>(n + 1));
    }
    ss.bytes[static_cast<std::size_t>(n)] = bytes;
    ++ss.ready[static_cast<std::size_t>(n)];
    launch_unit_collectives(index);
    return n;
}

void Replay::launch_unit_collectives(int index) {
    auto& ss = shard_streams_[static_cast<std::size_t>(index)];
    if (ss.busy || ss.launched >= static_cast<std::int64_t>(ss.ready.size()) ||
        ss.ready[static_cast<std::size_t>(ss.launched)] < shard_size_)
        return;
    ss.busy = true;
    const auto n = static_cast<std::size_t>(ss.launched++);
    Message msg;
    msg.record.kind =
        ss.gather ? TransferRecord::Kind::DpParameters : TransferRecord::Kind::DpGradients;
    msg.record.src_worker = msg.record.dst_worker = worker_of(ss.stage, ss.group * shard_size_);
    msg.record.bytes = ss.bytes[n];
    msg.record.start = sim_.now();
    msg.record.scope = TransferRecord::Scope::Shard;
    msg.record.replica_first = ss.group * shard_size_;
    msg.record.replica_count = shard_size_;
    msg.record.label = ss.gather ? "fsdp all-gather" : "fsdp reduce-scatter";
    msg.purpose = UnitCollective{index, ss.gather};
    const int members = ranks_.members();
    msg.remaining = members_on_network_;
    const auto id = static_cast<std::uint64_t>(messages_.size());
    messages_.push_back(msg);
    const int groups = layout_.dp / shard_size_;
    const auto kind =
        ss.gather ? network::CollectiveKind::AllGather : network::CollectiveKind::ReduceScatter;
    for (int m = 0; m < members; ++m)
        network_->collective(
            kind,
            shard_groups_[static_cast<std::size_t>((ss.stage * members + m) * groups + ss.group)],
            ss.bytes[n], network::Algorithm::Auto, token_base_ + id);
}

void Replay::unit_collective_done(int index) {
    auto& ss = shard_streams_[static_cast<std::size_t>(index)];
    ++ss.done;
    ss.busy = false;
    const int stage = ss.stage, group = ss.group;
    const bool gather = ss.gather;
    launch_unit_collectives(index);
    for (int i = 0; i < shard_size_; ++i) {
        const int w = worker_of(stage, group * shard_size_ + i);
        if (gather)
            advance_units(w);
        else
            maybe_start_optimizer(w);
    }
}

void Replay::advance_units(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    if (st.units == 0 || st.unit_busy || st.unit >= st.units) return;
    const int k = st.unit;
    if (st.unit_gathers) {
        // Without prefetch the all-gather is issued only when the unit is reached.
        if (st.unit_gather[static_cast<std::size_t>(k)] < 0)
            st.unit_gather[static_cast<std::size_t>(k)] = request_unit(worker, true, k);
        const auto& ss = shard_streams_[static_cast<std::size_t>(shard_stream(worker, true))];
        if (ss.done <= st.unit_gather[static_cast<std::size_t>(k)]) return;  // woken when done
    }
    const Time start = std::max(sim_.now(), st.unit_ready);
    st.running.front().gather_wait += start - st.unit_ready;
    // FSDP2 and Megatron-FSDP prefetch: the next unit's all-gather is issued as this unit starts,
    // so that it runs during this unit's compute.
    if (st.unit_gathers && layout_.shard_prefetch && k + 1 < st.units &&
        st.unit_gather[static_cast<std::size_t>(k + 1)] < 0)
        st.unit_gather[static_cast<std::size_t>(k + 1)] = request_unit(worker, true, k + 1);
    // The pass's duration shared out over its units, the remainder spread so that they sum to it.
    const std::int64_t span = st.unit_span.count_ps(), u = st.units;
    const auto boundary = [&](std::int64_t i) { return span / u * i + span % u * i / u; };
    st.unit_busy = true;
    sim_.schedule_at(start + Time::ps(boundary(k + 1) - boundary(k)), handler_, kUnitDone,
                     static_cast<std::uint64_t>(worker));
}

void Replay::unit_done(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    st.unit_busy = false;
    const int k = st.unit++;
    st.unit_ready = sim_.now();
    // The unit's gradients are reduce-scattered as soon as its backward has produced them.
    if (st.unit_reduces) request_unit(worker, false, k);
    if (st.unit < st.units) {
        advance_units(worker);
        return;
    }
    st.units = 0;
    st.running.front().end = sim_.now();
    finish_pass(worker);
}

bool Replay::sharded_gradients_done(int worker) const {
    const auto& st = states_[static_cast<std::size_t>(worker)];
    const auto& ss = shard_streams_[static_cast<std::size_t>(shard_stream(worker, false))];
    if (ss.done < st.reduces_issued) return false;
    return !hsdp_ || st.replica_done;
}

void Replay::maybe_replica_reduce(int stage) {
    auto& started = replica_reduce_started_[static_cast<std::size_t>(stage)];
    if (started) return;
    // Once every replica of the stage has all its unit gradients reduce-scattered, the shards
    // are all-reduced across the shard groups, the whole stage's at once.
    for (int d = 0; d < layout_.dp; ++d) {
        const int w = worker_of(stage, d);
        const auto& st = states_[static_cast<std::size_t>(w)];
        const auto& ss = shard_streams_[static_cast<std::size_t>(shard_stream(w, false))];
        if (!st.finished_ops || ss.done < st.reduces_issued) return;
    }
    started = 1;
    const auto& dev = plan_.devices[static_cast<std::size_t>(stage)];
    const std::int64_t total = dev.dp_gradient_bytes.value * shape_.chunks;
    Message msg;
    msg.record.kind = TransferRecord::Kind::DpGradients;
    msg.record.src_worker = msg.record.dst_worker = worker_of(stage, 0);
    msg.record.bytes = Bytes{(total + shard_size_ - 1) / shard_size_};
    msg.record.start = sim_.now();
    msg.record.scope = TransferRecord::Scope::Replica;
    msg.record.label = "hsdp gradient all-reduce";
    msg.purpose = ReplicaReduce{stage};
    msg.remaining = dp_collective_count(TransferRecord::Scope::Replica);
    const auto id = static_cast<std::uint64_t>(messages_.size());
    messages_.push_back(msg);
    issue_dp(stage, network::CollectiveKind::AllReduce, TransferRecord::Scope::Replica,
             msg.record.bytes, id);
}

void Replay::on_event(Simulation& sim, const Event& event) {
    switch (event.kind) {
        case kPassDone:
            finish_pass(static_cast<int>(event.a));
            break;
        case kOptimizerDone: {
            const int worker = static_cast<int>(event.a);
            auto& st = states_[static_cast<std::size_t>(worker)];
            const Time start = st.idle_since;
            if (sim.now() > start)
                notify_replicas(
                    worker, [&](ReplayObserver& o, int w) { o.on_optimizer(w, start, sim.now()); });
            st.idle_since = sim.now();
            st.last_compute_end = sim.now();
            st.optimizer_done = true;
            end_time_ = std::max(end_time_, sim.now());
            start_parameter_gather(worker);
            check_complete();
            break;
        }
        case kUnitDone:
            unit_done(static_cast<int>(event.a));
            break;
        case kBucketReady:
            bucket_ready(static_cast<int>(event.a), static_cast<int>(event.b >> 32),
                         static_cast<int>(event.b & 0xffffffffU));
            break;
        case kLocalDelivery: {
            const auto& msg = messages_[event.a];
            const auto* p2p = std::get_if<PipelineDelivery>(&msg.purpose);
            if (!p2p)
                throw SimulationError("replay", "a local delivery of a DP collective", sim.now());
            deliver(msg.record.dst_worker, p2p->arrival_key);
            break;
        }
        case kStop:
            for (const auto& st : states_)
                if (!st.finished_ops || !st.optimizer_done || !st.parameters_done) {
                    stopped_ = true;
                    sim.stop();
                    break;
                }
            break;
        default:
            throw SimulationError("replay", "unknown event kind", sim.now());
    }
}

void Replay::check_complete() {
    if (!on_complete_ || completed_) return;
    for (const auto& st : states_)
        if (!st.finished_ops || !st.optimizer_done || !st.parameters_done) return;
    completed_ = true;
    on_complete_(end_time_);
}

void Replay::stop_at(Time at) {
    stop_requested_ = true;
    sim_.schedule_at(at, handler_, kStop);
}

void Replay::on_transfer_done(Simulation& sim, std::uint64_t token) {
    token -= token_base_;
    auto& msg = messages_[static_cast<std::size_t>(token)];
    if (--msg.remaining > 0) return;
    if (msg.then_all_reduce.value > 0) {
        // HSDP: the gradients reduce-scattered inside the shard groups are all-reduced across.
        const Bytes shard = msg.then_all_reduce;
        msg.then_all_reduce = Bytes{};
        msg.remaining = dp_collective_count(TransferRecord::Scope::Replica);
        issue_dp(workers_[static_cast<std::size_t>(msg.record.src_worker)].stage,
                 network::CollectiveKind::AllReduce, TransferRecord::Scope::Replica, shard, token);
        return;
    }
    msg.record.end = sim.now();
    end_time_ = std::max(end_time_, sim.now());
    // Copies: `msg` may move when launch_bucket or deliver add messages.
    const auto purpose = msg.purpose;
    const int launcher = msg.record.src_worker;
    if (const auto* p2p = std::get_if<PipelineDelivery>(&purpose)) {
        const int dst = msg.record.dst_worker;
        deliver(dst, p2p->arrival_key);
        if (batched_) {
            exchange_transfer_done(launcher);
            exchange_transfer_done(dst);
        }
        return;
    }
    for (auto* o : observers_)
        o->on_transfer(msg.record);
    if (const auto* unit = std::get_if<UnitCollective>(&purpose)) {
        unit_collective_done(unit->stream);
        return;
    }
    if (const auto* replica = std::get_if<ReplicaReduce>(&purpose)) {
        for (int d = 0; d < layout_.dp; ++d) {
            const int w = worker_of(replica->stage, d);
            states_[static_cast<std::size_t>(w)].replica_done = true;
            maybe_start_optimizer(w);
        }
        return;
    }
    if (const auto* prefetch = std::get_if<PrefetchGather>(&purpose)) {
        params_ready_[static_cast<std::size_t>(prefetch->stage * shape_.chunks + prefetch->chunk)] =
            1;
        prefetch_parameters(prefetch->stage);
        for (int d = 0; d < layout_.dp; ++d) {
            const int w = worker_of(prefetch->stage, d);
            auto& st = states_[static_cast<std::size_t>(w)];
            if (follower(w) || !st.waiting_parameters) continue;
            st.waiting_parameters = false;
            emit_idle(w, sim.now(), IdleCause::Collective);
            try_start(w);
        }
        return;
    }
    if (const auto* gather = std::get_if<ParameterGather>(&purpose)) {
        for (int d = 0; d < layout_.dp; ++d) {
            const int w = worker_of(gather->stage, d);
            if (follower(w)) continue;  // its representative's notifications stand for it
            emit_idle(w, sim.now(), IdleCause::Collective);
            states_[static_cast<std::size_t>(w)].parameters_done = true;
        }
        check_complete();
        return;
    }
    if (const auto* bucket = std::get_if<GradientBucket>(&purpose)) {
        // The next bucket starts; the chunk is synchronised when its last bucket is.
        const auto stage = static_cast<std::size_t>(bucket->stage);
        bucket_busy_[stage] = 0;
        launch_bucket(bucket->stage);
        if (++buckets_done_[stage * static_cast<std::size_t>(shape_.chunks) +
                            static_cast<std::size_t>(bucket->chunk)] < bucket_count_[stage])
            return;
        chunk_synchronised(bucket->stage);
        return;
    }
    const auto& sync = std::get<GradientSync>(purpose);
    chunk_synchronised(sync.stage);
    // grad_reduce_after_backward: the stage's next chunk follows on the same communicator.
    if (reduce_after_backward_ && sync.chunk + 1 < shape_.chunks)
        issue_dp_sync(launcher, sync.chunk + 1);
}

void Replay::prefetch_parameters(int stage) {
    // The distributed optimizer's updated 16-bit parameters of the stage's next chunk, gathered
    // over the dp x cp group (Megatron-LM's --overlap-param-gather dispatches them bucket by
    // bucket before the forward pre-hooks wait for them; here per chunk, in chunk order). A
    // stage without gradients to shard has its parameters ready.
    auto& next = next_prefetch_[static_cast<std::size_t>(stage)];
    const auto& dev = plan_.devices[static_cast<std::size_t>(stage)];
    if (next >= shape_.chunks) return;
    const int chunk = next++;
    if (dev.dp_parameter_bytes.value <= 0) {
        params_ready_[static_cast<std::size_t>(stage * shape_.chunks + chunk)] = 1;
        prefetch_parameters(stage);
        return;
    }
    Message msg;
    msg.record.kind = TransferRecord::Kind::DpParameters;
    msg.record.src_worker = msg.record.dst_worker = worker_of(stage, 0);
    msg.record.bytes = dev.dp_parameter_bytes;
    msg.record.start = sim_.now();
    msg.record.label = "prefetch parameter all-gather";
    msg.purpose = PrefetchGather{stage, chunk};
    msg.remaining = dp_collective_count(TransferRecord::Scope::Dp);
    const auto id = static_cast<std::uint64_t>(messages_.size());
    messages_.push_back(msg);
    issue_dp(stage, network::CollectiveKind::AllGather, TransferRecord::Scope::Dp,
             dev.dp_parameter_bytes, id);
}

void Replay::chunk_synchronised(int stage) {
    for (int d = 0; d < layout_.dp; ++d) {
        const int w = worker_of(stage, d);
        if (follower(w)) continue;
        ++states_[static_cast<std::size_t>(w)].dp_done;
        maybe_start_optimizer(w);
    }
}

ReplayResult Replay::run() {
    start();
    sim_.run();
    return finish();
}

void Replay::start() {
    started_ = ReplayResult{};
    origin_ = sim_.now();
    end_time_ = origin_;
    for (auto& st : states_) {
        st.idle_since = origin_;
        st.last_compute_end = origin_;
        st.host_free = origin_;
        std::fill(st.arrived_at.begin(), st.arrived_at.end(), origin_);
    }
    decide_fold(started_);
    decide_replica_fold(started_);
    // Link chains carried as one solver link (exact; refused with faults or capacity changes).
    if (accel_ && !shared_) accel_->merge_link_chains();
    // Each op sends at most one pipeline message, and a stage's DP synchronisation a few: room
    // for them up front, so that the table of messages is not moved as it grows (hundreds of
    // thousands of records at 16,384 GPUs).
    std::size_t expected = 0;
    for (std::size_t w = 0; w < workers_.size(); ++w)
        if (!follower(static_cast<int>(w)))
            expected += orders_[static_cast<std::size_t>(workers_[w].stage)].size() + 4;
    messages_.reserve(messages_.size() + expected);
    if (param_prefetch_) {
        params_ready_.assign(static_cast<std::size_t>(layout_.pp * shape_.chunks), 0);
        next_prefetch_.assign(static_cast<std::size_t>(layout_.pp), 0);
        for (int s = 0; s < layout_.pp; ++s)
            prefetch_parameters(s);
    }
    for (std::size_t w = 0; w < workers_.size(); ++w)
        if (!follower(static_cast<int>(w))) try_start(static_cast<int>(w));
}

ReplayResult Replay::finish() {
    ReplayResult result = started_;
    if (stopped_) {
        result.iteration_time = sim_.now() - origin_;
        result.events = sim_.events_processed();
        result.stopped = true;
        return result;
    }
    for (std::size_t w = 0; w < workers_.size(); ++w) {
        const auto& st = states_[w];
        if (follower(static_cast<int>(w))) continue;
        if (!st.finished_ops || !st.optimizer_done || !st.parameters_done) {
            const auto& order = orders_[static_cast<std::size_t>(workers_[w].stage)];
            std::string what =
                "deadlock: pipeline stage " + std::to_string(workers_[w].stage) + " stopped";
            if (st.cursor < order.size()) {
                const auto& op = order[st.cursor];
                what += " before " + std::string(schedule::pass_letter(op.pass)) +
                        std::to_string(op.microbatch) + " of chunk " + std::to_string(op.chunk) +
                        ", which never received its input";
            } else {
                what += " waiting for data-parallel gradient synchronisation";
            }
            throw SimulationError("replay", what + " (schedule " + schedule_.name() + ")",
                                  sim_.now());
        }
    }
    flush_follower_sends();
    if (accel_ && !shared_) accel_->flush_link_totals();
    // The tail after a worker's last op: waiting for the slowest stage (pipeline cool-down).
    for (std::size_t w = 0; w < workers_.size(); ++w)
        if (!follower(static_cast<int>(w)))
            emit_idle(static_cast<int>(w), end_time_, IdleCause::Pipeline);
    copy_followers();
    for (auto* o : observers_)
        o->on_iteration_end(end_time_);
    result.iteration_time = end_time_ - origin_;
    result.events = sim_.events_processed();
    return result;
}

}  // namespace cs::replay
