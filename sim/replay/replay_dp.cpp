// Data parallelism: gradient buckets (--overlap-grad-reduce), gradient synchronisation, the
// optimizer step, parameter gathers and prefetches, and sharded data parallelism (ZeRO-1/2/3,
// HSDP) with its unit-by-unit passes.
#include <algorithm>
#include <cmath>

#include "core/errors.hpp"
#include "replay/replay.hpp"
#include "replay/replay_state.hpp"
#include "workload/memory.hpp"

namespace cs::replay {

using schedule::Pass;

DataParallelMode DataParallelMode::of(const workload::ParallelLayout& layout) {
    DataParallelMode m;
    const bool sharded = layout.sharding != workload::Sharding::None && layout.dp > 1;
    m.shard_size = sharded ? layout.shard_group_size() : layout.dp;
    m.hsdp = sharded && layout.hsdp();
    m.sharded_units = layout.sharding >= workload::Sharding::Gradients && m.shard_size > 1;
    m.param_prefetch = layout.overlap_param_gather && layout.dp * layout.cp > 1 &&
                       layout.sharding == workload::Sharding::Optimizer;
    return m;
}

int gradient_buckets(const workload::StagePlan& stage, const workload::ParallelLayout& layout) {
    const std::int64_t per = layout.bucket_parameters();
    return static_cast<int>(std::max<std::int64_t>(1, (stage.dp_parameters + per - 1) / per));
}

Bytes gradient_bucket_bytes(const workload::StagePlan& stage,
                            const workload::ParallelLayout& layout, int buckets, int bucket) {
    const double total = static_cast<double>(stage.dp_gradient_bytes.value);
    const double params = static_cast<double>(stage.dp_parameters);
    const double per = static_cast<double>(layout.bucket_parameters());
    const auto upto = [&](int b) {
        return b >= buckets ? stage.dp_gradient_bytes.value
                            : static_cast<std::int64_t>(
                                  std::llround(total * std::min(1.0, b * per / params)));
    };
    return Bytes{upto(bucket + 1) - upto(bucket)};
}

Bytes Replay::bucket_bytes(int stage, int bucket) const {
    return gradient_bucket_bytes(plan_.devices[static_cast<std::size_t>(stage)], layout_,
                                 bucket_count_[static_cast<std::size_t>(stage)], bucket);
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

void Replay::collective_done(const Purpose& purpose, int launcher) {
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
            emit_idle(w, sim_.now(), IdleCause::Collective);
            try_start(w);
        }
        return;
    }
    if (const auto* gather = std::get_if<ParameterGather>(&purpose)) {
        for (int d = 0; d < layout_.dp; ++d) {
            const int w = worker_of(gather->stage, d);
            if (follower(w)) continue;  // its representative's notifications stand for it
            emit_idle(w, sim_.now(), IdleCause::Collective);
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

}  // namespace cs::replay
