#include "replay/replay.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/errors.hpp"
#include "replay/replay_state.hpp"

namespace cs::replay {

using schedule::Pass;

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

bool Replay::overlaps_dp(int stage) const {
    return layout_.overlap_grad_reduce && dp_ranks_ > 1 && !sharded_units_ &&
           plan_.devices[static_cast<std::size_t>(stage)].dp_gradient_bytes.value > 0;
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

static_assert(static_cast<int>(Pass::Forward) == 0 && static_cast<int>(Pass::Backward) == 1 &&
              static_cast<int>(Pass::BackwardInput) == 2 &&
              static_cast<int>(Pass::BackwardWeight) == 3);

const Replay::PassCost& Replay::pass_cost(Pass pass, int vs) const {
    return pass_costs_[static_cast<std::size_t>(vs * kPassKinds + static_cast<int>(pass))];
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
        const auto& in = input(worker, need);
        arrival = in.arrived_at;
        const int msg = in.message;
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
    const int msg = input(worker, need).message;
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

bool Replay::waits_for_exchange(int worker) {
    // A round's passes run one after another; between rounds the exchange. After the last
    // round, one more with its sends alone.
    const auto& st = states_[static_cast<std::size_t>(worker)];
    if (st.exchanging) return true;  // woken by exchange_transfer_done
    const int stage = workers_[static_cast<std::size_t>(worker)].stage;
    const auto& order = orders_[static_cast<std::size_t>(stage)];
    const auto& rounds = rounds_[static_cast<std::size_t>(stage)];
    const int next =
        st.cursor < order.size() ? rounds[st.cursor] : (rounds.empty() ? 0 : rounds.back() + 1);
    return next != st.round && post_exchange(worker, next);
}

void Replay::start_group_on_host(int worker, std::size_t group, int need, Time now) {
    // The host issues an overlapped group as its first pass (the partner's launches are hidden
    // in the group); the rest follow that pass's end.
    auto& running = states_[static_cast<std::size_t>(worker)].running;
    PassRecord& first = running.front();
    start_on_host(worker, first, pass_cost(first.pass, first.virtual_stage), need, now);
    Time t = first.end;
    for (std::size_t k = 1; k < group; ++k) {
        PassRecord& r = running[k];
        const Time span = r.end - r.start;
        r.start = t;
        r.end = t = t + span;
    }
}

void Replay::try_start(int worker) {
    auto& st = states_[static_cast<std::size_t>(worker)];
    if (st.busy || st.finished_ops) return;
    const Worker& w = workers_[static_cast<std::size_t>(worker)];
    const auto& order = orders_[static_cast<std::size_t>(w.stage)];
    if (batched_ && waits_for_exchange(worker)) return;
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
        throw SimulationError(
            "replay", "an overlapped group of more than " + std::to_string(kMaxGroup) + " passes",
            sim_.now());
    for (std::size_t k = 0; k < group; ++k) {
        const auto& op = order[st.cursor + k];
        vs[k] = schedule_.virtual_stage(shape_, w.stage, op.chunk, op.microbatch);
        need[k] = input_key(op, vs[k]);
        if (need[k] >= 0 && !input(worker, need[k]).arrived) return;  // woken by deliver()
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
    if (spec_.compute.host.enabled) start_group_on_host(worker, group, need[0], now);
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

void Replay::deliver(int worker, int key) {
    auto& in = input(worker, key);
    in.arrived = 1;
    in.arrived_at = sim_.now();
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
        input(dst, key).message = id;
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
        if (input(msg.record.dst_worker, key).recv_posted)
            start_message(static_cast<std::size_t>(id));
    }
    st.held_sends.clear();
    for (std::size_t i = st.cursor; i < order.size() && rounds[i] == next_round; ++i) {
        const auto& op = order[i];
        const int vs = schedule_.virtual_stage(shape_, w.stage, op.chunk, op.microbatch);
        if (input_sender(worker, op, vs) < 0) continue;
        const int key = input_key(op, vs);
        auto& in = input(worker, key);
        in.recv_posted = 1;
        ++pending;
        const int id = in.message;
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

void Replay::prefetch(const Event& event) const {
    // A pass's end reads its worker's state first (scalars and running passes), far from the
    // state of the worker whose event came before.
    if (event.kind != kPassDone) return;
    const char* st = reinterpret_cast<const char*>(&states_[static_cast<std::size_t>(event.a)]);
    for (std::size_t at = 0; at < sizeof(WorkerState); at += 64)
        __builtin_prefetch(st + at);
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
            if (iteration_going()) {
                stopped_ = true;
                sim.stop();
            }
            break;
        case kStopCheck:
            if (!iteration_going()) break;
            if (stop_past_(sim.now())) {
                stopped_ = true;
                sim.stop();
            } else if (sim.pending() > 0) {
                sim.schedule_in(stop_every_, handler_, kStopCheck);
            }
            break;
        default:
            throw SimulationError("replay", "unknown event kind", sim.now());
    }
}

void Replay::check_complete() {
    if (!on_complete_ || completed_) return;
    for (const auto& st : states_)
        if (!st.done()) return;
    completed_ = true;
    on_complete_(end_time_);
}

void Replay::stop_at(Time at) {
    sim_.schedule_at(at, handler_, kStop);
}

void Replay::stop_when(std::function<bool(Time)> past, Time every) {
    if (!past || every <= Time::zero())
        throw SimulationError("replay", "stop_when needs a test and a period above zero",
                              sim_.now());
    stop_past_ = std::move(past);
    stop_every_ = every;
    sim_.schedule_in(Time::zero(), handler_, kStopCheck);
}

bool Replay::iteration_going() const {
    for (std::size_t w = 0; w < states_.size(); ++w) {
        if (follower(static_cast<int>(w))) continue;
        if (!states_[w].done()) return true;
    }
    return false;
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
    collective_done(purpose, launcher);
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
    }
    for (auto& in : inputs_)
        in.arrived_at = origin_;
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
        // What the network holds for its observers (totals, link tallies, fold images) is told
        // for the part that ran: a run stopped by a GPU failure is still summarised.
        if (accel_ && !shared_) accel_->flush_link_totals();
        result.iteration_time = sim_.now() - origin_;
        result.events = sim_.events_processed();
        result.stopped = true;
        return result;
    }
    for (std::size_t w = 0; w < workers_.size(); ++w) {
        const auto& st = states_[w];
        if (follower(static_cast<int>(w))) continue;
        if (!st.done()) {
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
