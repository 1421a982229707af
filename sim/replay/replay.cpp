#include "replay/replay.hpp"

#include <algorithm>
#include <cmath>

#include "core/errors.hpp"

namespace cs::replay {

using schedule::Pass;

// ---- CollectiveCosts --------------------------------------------------------------------------

CollectiveCosts::CollectiveCosts(const topology::Cluster& cluster,
                                 const network::NetworkConfig& config)
    : cluster_(cluster), config_(config) {}

Time CollectiveCosts::cost(network::CollectiveKind kind, const std::vector<int>& group,
                           Bytes size) {
    if (group.size() <= 1 || size.value <= 0 || config_.fidelity == network::Fidelity::Ideal)
        return Time::zero();
    const auto key = std::make_tuple(static_cast<int>(kind), group, size.value);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    return cache_
        .emplace(key, network::isolated_collective_time(cluster_, config_, kind, group, size))
        .first->second;
}

// ---- Replay state -----------------------------------------------------------------------------

namespace {
enum EventKind : std::uint32_t {
    kPassDone = 1,
    kOptimizerDone = 2,
    kLocalDelivery = 3,
    kBucketReady = 4
};
}

struct Replay::WorkerState {
    std::size_t cursor = 0;
    bool busy = false;
    bool finished_ops = false;
    Time idle_since = Time::zero();
    PassRecord current;
    std::vector<std::uint8_t> arrived;          // [arrival_key]
    std::vector<std::int32_t> pending_message;  // [arrival_key] -> message carrying it, or -1
    std::vector<int> backward_done;             // per chunk
    int dp_done = 0;                            // chunks whose gradients are synchronised
    bool optimizer_started = false;
    bool optimizer_done = false;
    bool parameters_done = false;  // distributed optimizer: updated parameters gathered back
    Time last_compute_end = Time::zero();
    // The host model: when the worker's host thread is free to start issuing its next pass, and
    // when each pass's input arrived (the host waits for it before issuing the pass).
    Time host_free = Time::zero();
    std::vector<Time> arrived_at;  // [arrival_key], filled only with a host model
    // variability.hosts: every host cost of this worker times this (the slowest of its GPUs).
    double host_factor = 1;
};

namespace {
// pass_costs_ holds, per virtual stage, the ChunkPlan's passes in schedule::Pass order.
constexpr int kPassKinds = 4;
static_assert(static_cast<int>(Pass::Forward) == 0 && static_cast<int>(Pass::Backward) == 1 &&
              static_cast<int>(Pass::BackwardInput) == 2 &&
              static_cast<int>(Pass::BackwardWeight) == 3);
}  // namespace

Replay::Replay(const workload::ExperimentSpec& spec, const workload::IterationPlan& plan,
               const schedule::Schedule& schedule, const schedule::PipelineShape& shape)
    : spec_(spec),
      plan_(plan),
      schedule_(schedule),
      shape_(shape),
      layout_(spec.layout),
      ranks_(spec.layout),
      sim_(spec.seed),
      costs_(*spec.cluster, spec.network) {
    handler_ = sim_.add_handler(*this);
    network_ = network::make_network(sim_, *spec.cluster, spec.network);
    network_->set_client(this);

    const int members = ranks_.members();
    for (int w = 0; w < ranks_.workers(); ++w)
        workers_.push_back(Worker{ranks_.stage_of(w), ranks_.replica_of(w), ranks_.worker_gpus(w)});
    orders_.resize(static_cast<std::size_t>(layout_.pp));
    for (int s = 0; s < layout_.pp; ++s)
        orders_[static_cast<std::size_t>(s)] = schedule_.order(shape_, s);

    const std::size_t keys = static_cast<std::size_t>(shape_.chunks * shape_.microbatches * 2);
    states_.resize(workers_.size());
    for (auto& st : states_) {
        st.arrived.assign(keys, 0);
        st.pending_message.assign(keys, -1);
        st.backward_done.assign(static_cast<std::size_t>(shape_.chunks), 0);
        if (spec_.compute.host.enabled) st.arrived_at.assign(keys, Time::zero());
    }
    for (const auto& slow : spec_.variability.hosts)
        for (std::size_t w = 0; w < workers_.size(); ++w)
            for (int g : workers_[w].gpus)
                if (std::binary_search(slow.gpus.begin(), slow.gpus.end(), g))
                    states_[w].host_factor = std::max(states_[w].host_factor, slow.factor);
    if (layout_.dp > 1)
        for (int s = 0; s < layout_.pp; ++s)
            for (int m = 0; m < members; ++m)
                dp_groups_.push_back(network_->register_group(
                    ranks_.group(workload::GroupKind::Dp, worker_of(s, 0), m).gpus));
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
            const auto& group = ranks_.group(workload::GroupKind::Dp, worker_of(s, 0), 0).gpus;
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
    return layout_.overlap_grad_reduce && layout_.dp > 1 &&
           plan_.devices[static_cast<std::size_t>(stage)].dp_gradient_bytes.value > 0;
}

Replay::~Replay() = default;

void Replay::add_network_observer(network::NetworkObserver& observer) {
    network_->add_observer(&observer);
}

int Replay::arrival_key(int chunk, int microbatch, bool gradient) const {
    return (chunk * shape_.microbatches + microbatch) * 2 + (gradient ? 1 : 0);
}

const workload::PassPlan& Replay::pass_plan(const schedule::PipelineOp& op, int vs) const {
    const auto& c = plan_.virtual_stages[static_cast<std::size_t>(vs)];
    switch (op.pass) {
        case Pass::Forward:
            return c.forward;
        case Pass::Backward:
            return c.backward;
        case Pass::BackwardInput:
            return c.backward_input;
        case Pass::BackwardWeight:
            return c.backward_weight;
    }
    return c.forward;
}

Replay::PassCost Replay::cost_pass(const workload::PassPlan& plan, bool backward) {
    PassCost cost;
    cost.step_times.reserve(plan.steps.size());
    for (const auto& step : plan.steps) {
        if (step.kind == workload::Step::Kind::Compute) {
            cost.step_times.push_back(step.duration);
            cost.compute += step.duration * step.repeat;
            continue;
        }
        // All workers have the same shape, so worker 0's groups stand for every worker's.
        const Time once =
            costs_.cost(step.collective, ranks_.group(step.group, 0, 0).gpus, step.size);
        cost.step_times.push_back(once);
        cost.collective += once * step.repeat;
    }
    const auto& host = spec_.compute.host;
    if (!host.enabled) return cost;
    cost.blocks = kernel_blocks(plan.steps, cost.step_times);
    for (const auto& step : plan.steps)
        cost.block_compute.push_back(step.kind == workload::Step::Kind::Compute ? 1 : 0);
    cost.lead = host.pass + (backward ? host.backward : Time::zero());
    if (workload::HostModel::runs_on_runtime(schedule_.name())) cost.lead += host.runtime_pass;
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
        for (auto* o : observers_)
            o->on_idle(worker, st.idle_since, until, cause);
    st.idle_since = until;
}

void Replay::emit_host(int worker, Time start, Time end, HostWork kind, std::uint64_t pass) {
    if (end > start)
        for (auto* o : observers_)
            o->on_host(worker, start, end, kind, pass);
}

bool Replay::p2p_target(int worker, Pass pass, int vs, int microbatch, int& dst, int& key,
                        int& target_vs, bool& gradient) const {
    const int last_vs = shape_.devices * shape_.chunks - 1;
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
    for (int s = 0; s < layout_.pp && layout_.dp > 1; ++s) {
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
            c.size = Bytes{dev.dp_parameter_bytes.value * shape_.chunks};
            classes.push_back(c);
        }
    }
    std::string why;
    if (network_->fold(members, classes, why)) {
        members_on_network_ = 1;
        result.fold_copies = members;
    } else {
        result.fold_refused = why;
    }
}

bool Replay::sends_p2p(int worker, Pass pass, int vs, int microbatch) const {
    const int last_vs = shape_.devices * shape_.chunks - 1;
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

void Replay::try_start(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    if (st.busy || st.finished_ops) return;
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    const auto& order = orders_[static_cast<std::size_t>(w.stage)];
    if (st.cursor >= order.size()) {
        st.finished_ops = true;
        maybe_start_optimizer(worker);
        return;
    }
    const auto& op = order[st.cursor];
    const int vs = schedule_.virtual_stage(shape_, w.stage, op.chunk, op.microbatch);
    const int last_vs = shape_.devices * shape_.chunks - 1;
    int need = -1;
    if (op.pass == Pass::Forward && vs > 0) need = arrival_key(op.chunk, op.microbatch, false);
    if ((op.pass == Pass::Backward || op.pass == Pass::BackwardInput) && vs < last_vs)
        need = arrival_key(op.chunk, op.microbatch, true);
    if (need >= 0 && !st.arrived[static_cast<std::size_t>(need)]) return;  // woken by deliver()

    const Time now = sim_.now();
    emit_idle(worker, now, IdleCause::Pipeline);
    const auto& plan = pass_plan(op, vs);
    PassRecord& r = st.current;
    r = PassRecord{};
    r.worker = worker;
    r.virtual_stage = vs;
    r.chunk = op.chunk;
    r.microbatch = op.microbatch;
    r.pass = op.pass;
    r.start = now;
    const PassCost& cost = pass_cost(op.pass, vs);
    r.compute = cost.compute;
    if (duration_model_) [[unlikely]]
        r.compute = modelled_compute(worker, r, r.compute);
    r.collective = cost.collective;
    const bool completes_gradients = op.pass == Pass::Backward || op.pass == Pass::BackwardWeight;
    const bool last_backward =
        completes_gradients && overlaps_dp(w.stage) &&
        st.backward_done[static_cast<std::size_t>(op.chunk)] == shape_.microbatches - 1;
    if (last_backward && !overlapped_buckets_.empty()) {
        // The pass's kernels run 1 + interference times as long while the buckets reduce. An
        // approximation: the buckets are taken at their isolated time (not their time on the
        // shared network) and as if they all ran inside the pass, so the slowed part is
        // min(compute, their time); the later buckets' readiness follows the longer pass.
        const Time overlap =
            std::min(r.compute, overlapped_buckets_[static_cast<std::size_t>(w.stage)]);
        r.interference = Time::ps(static_cast<std::int64_t>(
            std::llround(static_cast<double>(overlap.count_ps()) * spec_.compute.interference)));
        r.compute += r.interference;
    }
    r.end = now + r.compute + r.collective;
    r.plan = &plan;
    r.step_times = cost.step_times;
    r.id = next_pass_id_++;
    if (spec_.compute.host.enabled) start_on_host(worker, r, cost, need, now);
    if (need >= 0) {
        const int msg = st.pending_message[static_cast<std::size_t>(need)];
        if (msg >= 0) {
            auto& rec = messages_[static_cast<std::size_t>(msg)].record;
            rec.to_pass = r.id;
            for (auto* o : observers_)
                o->on_transfer(rec);
        }
    }
    st.busy = true;
    ++st.cursor;
    sim_.schedule_at(r.end, handler_, kPassDone, static_cast<std::uint64_t>(worker));
    if (last_backward) schedule_buckets(worker, op.chunk, r.start, r.end);
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
    if (++ready < layout_.dp) return;
    Message msg;
    msg.record.kind = TransferRecord::Kind::DpGradients;
    msg.record.src_worker = msg.record.dst_worker = worker;
    msg.record.bytes = bucket_bytes(w.stage, bucket);
    msg.purpose = GradientBucket{w.stage, chunk};
    msg.remaining = members_on_network_;
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
    const int members = layout_.tp * layout_.cp;
    for (int m = 0; m < members_on_network_; ++m)
        network_->collective(kind, dp_groups_[static_cast<std::size_t>(stage * members + m)],
                             msg.record.bytes, network::Algorithm::Auto, id);
}

void Replay::deliver(int worker, int key) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    st.arrived[static_cast<std::size_t>(key)] = 1;
    if (!st.arrived_at.empty()) st.arrived_at[static_cast<std::size_t>(key)] = sim_.now();
    try_start(worker);
}

void Replay::finish_pass(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    const PassRecord r = st.current;
    st.busy = false;
    st.idle_since = r.end;
    st.last_compute_end = r.end;
    end_time_ = std::max(end_time_, r.end);
    for (auto* o : observers_)
        o->on_pass(r);

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
        msg.record.start = r.end;
        msg.record.from_pass = r.id;
        msg.purpose = PipelineDelivery{key};
        const auto id = static_cast<std::int32_t>(messages_.size());
        states_[static_cast<std::size_t>(dst)].pending_message[static_cast<std::size_t>(key)] = id;
        if (dst == worker) {
            msg.record.end = r.end;
            messages_.push_back(msg);
            sim_.schedule_at(r.end, handler_, kLocalDelivery, static_cast<std::uint64_t>(id));
        } else {
            const auto& dw = workers_[static_cast<std::size_t>(dst)];
            msg.remaining = members_on_network_;
            messages_.push_back(msg);
            for (std::size_t g = 0; g < static_cast<std::size_t>(members_on_network_); ++g)
                network_->send(w.gpus[g], dw.gpus[g], msg.record.bytes,
                               static_cast<std::uint64_t>(id));
        }
    }

    const bool completes_gradients = (r.pass == Pass::Backward || r.pass == Pass::BackwardWeight);
    if (completes_gradients &&
        ++st.backward_done[static_cast<std::size_t>(r.chunk)] == shape_.microbatches &&
        !overlaps_dp(w.stage))
        start_dp_sync(worker, r.chunk);
    try_start(worker);
}

void Replay::start_dp_sync(int worker, int chunk) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    const auto& dev = plan_.devices[static_cast<std::size_t>(w.stage)];
    if (layout_.dp <= 1 || dev.dp_gradient_bytes.value <= 0) {
        ++st.dp_done;
        return;
    }
    // The collective starts once every replica of the stage has finished this chunk's backward
    // passes; the last replica to get there launches it for all.
    int ready = 0;
    for (int d = 0; d < layout_.dp; ++d)
        if (states_[static_cast<std::size_t>(worker_of(w.stage, d))]
                .backward_done[static_cast<std::size_t>(chunk)] == shape_.microbatches)
            ++ready;
    if (ready < layout_.dp) return;
    Message msg;
    msg.record.kind = TransferRecord::Kind::DpGradients;
    msg.record.src_worker = msg.record.dst_worker = worker;
    msg.record.bytes = dev.dp_gradient_bytes;
    msg.record.start = sim_.now();
    msg.purpose = GradientSync{w.stage};
    const int members = ranks_.members();
    msg.remaining = members_on_network_;
    const auto id = static_cast<std::uint64_t>(messages_.size());
    messages_.push_back(msg);
    const auto kind = dev.dp_sharded ? network::CollectiveKind::ReduceScatter
                                     : network::CollectiveKind::AllReduce;
    for (int m = 0; m < members_on_network_; ++m)
        network_->collective(kind, dp_groups_[static_cast<std::size_t>(w.stage * members + m)],
                             dev.dp_gradient_bytes, network::Algorithm::Auto, id);
}

void Replay::maybe_start_optimizer(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    if (!st.finished_ops || st.optimizer_started || st.dp_done < shape_.chunks) return;
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
    if (!dev.dp_sharded || layout_.dp <= 1 || dev.dp_gradient_bytes.value <= 0) {
        st.parameters_done = true;
        return;
    }
    // Megatron's distributed optimizer updates a 1/dp shard and all-gathers the updated 16-bit
    // parameters (without --overlap-param-gather this is exposed before the next forward). The
    // last replica of the stage to finish its optimizer step launches it for all.
    for (int d = 0; d < layout_.dp; ++d)
        if (!states_[static_cast<std::size_t>(worker_of(w.stage, d))].optimizer_done) return;
    Message msg;
    msg.record.kind = TransferRecord::Kind::DpParameters;
    msg.record.src_worker = msg.record.dst_worker = worker;
    msg.record.bytes = Bytes{dev.dp_parameter_bytes.value * shape_.chunks};
    msg.record.start = sim_.now();
    msg.purpose = ParameterGather{w.stage};
    const int members = ranks_.members();
    msg.remaining = members_on_network_;
    const auto id = static_cast<std::uint64_t>(messages_.size());
    messages_.push_back(msg);
    for (int m = 0; m < members_on_network_; ++m)
        network_->collective(network::CollectiveKind::AllGather,
                             dp_groups_[static_cast<std::size_t>(w.stage * members + m)],
                             msg.record.bytes, network::Algorithm::Auto, id);
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
                for (auto* o : observers_)
                    o->on_optimizer(worker, start, sim.now());
            st.idle_since = sim.now();
            st.last_compute_end = sim.now();
            st.optimizer_done = true;
            end_time_ = std::max(end_time_, sim.now());
            start_parameter_gather(worker);
            break;
        }
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
        default:
            throw SimulationError("replay", "unknown event kind", sim.now());
    }
}

void Replay::on_transfer_done(Simulation& sim, std::uint64_t token) {
    auto& msg = messages_[static_cast<std::size_t>(token)];
    if (--msg.remaining > 0) return;
    msg.record.end = sim.now();
    end_time_ = std::max(end_time_, sim.now());
    // A copy: `msg` may move when launch_bucket or deliver add messages.
    const auto purpose = msg.purpose;
    if (const auto* p2p = std::get_if<PipelineDelivery>(&purpose)) {
        deliver(msg.record.dst_worker, p2p->arrival_key);
        return;
    }
    for (auto* o : observers_)
        o->on_transfer(msg.record);
    if (const auto* gather = std::get_if<ParameterGather>(&purpose)) {
        for (int d = 0; d < layout_.dp; ++d) {
            const int w = worker_of(gather->stage, d);
            emit_idle(w, sim.now(), IdleCause::Collective);
            states_[static_cast<std::size_t>(w)].parameters_done = true;
        }
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
    chunk_synchronised(std::get<GradientSync>(purpose).stage);
}

void Replay::chunk_synchronised(int stage) {
    for (int d = 0; d < layout_.dp; ++d) {
        const int w = worker_of(stage, d);
        ++states_[static_cast<std::size_t>(w)].dp_done;
        maybe_start_optimizer(w);
    }
}

ReplayResult Replay::run() {
    ReplayResult result;
    decide_fold(result);
    for (std::size_t w = 0; w < workers_.size(); ++w)
        try_start(static_cast<int>(w));
    sim_.run();
    for (std::size_t w = 0; w < workers_.size(); ++w) {
        const auto& st = states_[w];
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
    // The tail after a worker's last op: waiting for the slowest stage (pipeline cool-down).
    for (std::size_t w = 0; w < workers_.size(); ++w)
        emit_idle(static_cast<int>(w), end_time_, IdleCause::Pipeline);
    for (auto* o : observers_)
        o->on_iteration_end(end_time_);
    result.iteration_time = end_time_;
    result.events = sim_.events_processed();
    return result;
}

}  // namespace cs::replay
