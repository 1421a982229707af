#include "chakra/execute.hpp"

#include <algorithm>
#include <deque>
#include <set>

#include "core/errors.hpp"
#include "engine/simulation.hpp"
#include "replay/replay.hpp"
#include "report/trace_sink.hpp"

namespace cs::chakra {

namespace {

enum EventKind : std::uint32_t { kOpDone = 1, kCollectiveDone = 2 };
constexpr std::uint64_t kMessageToken = std::uint64_t{1} << 40;

const char* op_kind_name(OpKind k) {
    switch (k) {
        case OpKind::Compute:
            return "compute";
        case OpKind::HostCompute:
            return "host";
        case OpKind::Memory:
            return "memory";
        case OpKind::Delay:
            return "wait";
        case OpKind::Send:
        case OpKind::Recv:
        case OpKind::Collective:
            return "communication";
        case OpKind::Skip:
            return "other";
    }
    return "other";
}

class Executor final : public EventHandler, public network::TransferClient {
  public:
    Executor(const Program& program, const topology::Cluster& cluster,
             const network::NetworkConfig& config, std::vector<int> gpus, bool record)
        : program_(program),
          cluster_(cluster),
          costs_(cluster, config),
          gpus_(std::move(gpus)),
          record_(record),
          links_(cluster.links().size()) {
        handler_ = sim_.add_handler(*this);
        network_ = network::make_network(sim_, cluster, config);
        network_->set_client(this);
        network_->add_observer(&links_);
        ranks_.resize(program.ranks.size());
        for (std::size_t r = 0; r < program.ranks.size(); ++r) {
            auto& st = ranks_[r];
            const auto& prog = program.ranks[r];
            st.left.resize(prog.ops.size());
            st.start.assign(prog.ops.size(), Time::zero());
            st.done.assign(prog.ops.size(), 0);
            st.ready.assign(prog.ops.size(), 0);
            for (std::size_t i = 0; i < prog.ops.size(); ++i)
                st.left[i] = prog.ops[i].deps;
        }
        arrived_.assign(program.collectives.size(), 0);
        group_ids_.assign(program.collectives.size(), 0);
        message_arrived_.assign(program.messages.size(), 0);
        for (std::size_t c = 0; c < program.collectives.size(); ++c) {
            const auto& inst = program.collectives[c];
            if (inst.ranks.size() <= 1 || inst.sync_only || inst.costed_alone) continue;
            group_ids_[c] = network_->register_group(gpus_of(inst.ranks));
        }
    }

    ExecuteResult run() {
        for (std::size_t r = 0; r < ranks_.size(); ++r)
            for (std::uint32_t i = 0; i < ranks_[r].left.size(); ++i)
                if (ranks_[r].left[i] == 0) make_ready(static_cast<int>(r), i);
        sim_.run();
        check_finished();
        ExecuteResult out;
        out.iteration_time = end_;
        out.events = sim_.events_processed();
        for (std::size_t r = 0; r < ranks_.size(); ++r)
            out.ranks.push_back(RankStats{gpus_[r], ranks_[r].compute_busy, ranks_[r].last_end});
        out.links = report::link_summaries(cluster_, links_, end_.seconds());
        return out;
    }

    // Per rank: (op, start, end) of every node that took time, for the trace.
    struct Slice {
        std::uint32_t op;
        Time start, end;
    };
    const std::vector<Slice>& slices(std::size_t rank) const { return ranks_[rank].slices; }

    void on_event(Simulation& sim, const Event& e) override {
        switch (e.kind) {
            case kOpDone:
                complete(static_cast<int>(e.a), static_cast<std::uint32_t>(e.b));
                break;
            case kCollectiveDone:
                collective_done(static_cast<std::size_t>(e.a));
                break;
            default:
                throw SimulationError("chakra", "unknown event kind", sim.now());
        }
    }

    void on_transfer_done(Simulation&, std::uint64_t token) override {
        if (token & kMessageToken) {
            const auto m = static_cast<std::size_t>(token & (kMessageToken - 1));
            message_arrived(m);
            return;
        }
        collective_done(static_cast<std::size_t>(token));
    }

  private:
    struct RankState {
        std::vector<std::uint32_t> left;  // dependencies not yet completed
        std::vector<Time> start;
        std::vector<std::uint8_t> done, ready;
        std::deque<std::uint32_t> compute_queue, host_queue;
        bool compute_busy_flag = false, host_busy = false;
        Time compute_busy, last_end;
        std::vector<Slice> slices;
    };

    std::vector<int> gpus_of(const std::vector<int>& ranks) const {
        std::vector<int> g;
        g.reserve(ranks.size());
        for (const int r : ranks)
            g.push_back(gpus_[static_cast<std::size_t>(r)]);
        return g;
    }

    Time op_time(int rank, const Op& op) const {
        if (op.duration) return *op.duration;
        const auto& gpu = cluster_.gpu_model(gpus_[static_cast<std::size_t>(rank)]);
        // Beyond 1e6 s (11.6 days) a node is surely wrong, and near Time's range.
        const double seconds =
            std::max(gpu.hbm_bandwidth.bytes_per_s > 0
                         ? static_cast<double>(op.bytes) / gpu.hbm_bandwidth.bytes_per_s
                         : 0.0,
                     gpu.peak_bf16.flops_per_s > 0 ? op.flops / gpu.peak_bf16.flops_per_s : 0.0);
        if (seconds > 1e6)
            throw ConfigError(SourceLocation{program_.ranks[static_cast<std::size_t>(rank)].file},
                              "node " + std::to_string(op.id) + ": num_ops " +
                                  std::to_string(static_cast<std::int64_t>(op.flops)) +
                                  " and tensor_size " + std::to_string(op.bytes) + " take " +
                                  std::to_string(seconds) + " s on a " + gpu.name +
                                  " (at most 1e6 s)");
        Time t = transfer_time(Bytes{op.bytes}, gpu.hbm_bandwidth);
        if (op.flops > 0) t = std::max(t, compute_time(Flops{op.flops}, gpu.peak_bf16));
        return t;
    }

    void start_timed(int rank, std::uint32_t i) {
        auto& st = ranks_[static_cast<std::size_t>(rank)];
        st.start[i] = sim_.now();
        sim_.schedule_at(sim_.now() + op_time(rank, op(rank, i)), handler_, kOpDone,
                         static_cast<std::uint64_t>(rank), i);
    }

    void next_on_stream(int rank, bool host) {
        auto& st = ranks_[static_cast<std::size_t>(rank)];
        auto& queue = host ? st.host_queue : st.compute_queue;
        bool& busy = host ? st.host_busy : st.compute_busy_flag;
        if (busy || queue.empty()) return;
        busy = true;
        const auto i = queue.front();
        queue.pop_front();
        start_timed(rank, i);
    }

    const Op& op(int rank, std::uint32_t i) const {
        return program_.ranks[static_cast<std::size_t>(rank)].ops[i];
    }

    void make_ready(int rank, std::uint32_t i) {
        auto& st = ranks_[static_cast<std::size_t>(rank)];
        st.ready[i] = 1;
        st.start[i] = sim_.now();
        const Op& o = op(rank, i);
        switch (o.kind) {
            case OpKind::Compute:
            case OpKind::HostCompute: {
                const bool host = o.kind == OpKind::HostCompute;
                (host ? st.host_queue : st.compute_queue).push_back(i);
                next_on_stream(rank, host);
                return;
            }
            case OpKind::Memory:
            case OpKind::Delay:
                start_timed(rank, i);
                return;
            case OpKind::Skip:
                sim_.schedule_at(sim_.now(), handler_, kOpDone, static_cast<std::uint64_t>(rank),
                                 i);
                return;
            case OpKind::Send: {
                const auto& m = program_.messages[static_cast<std::size_t>(o.instance)];
                if (m.size.value <= 0) {
                    message_arrived(static_cast<std::size_t>(o.instance));
                    return;
                }
                network_->send(gpus_[static_cast<std::size_t>(m.src)],
                               gpus_[static_cast<std::size_t>(m.dst)], m.size,
                               kMessageToken | static_cast<std::uint64_t>(o.instance));
                return;
            }
            case OpKind::Recv:
                if (message_arrived_[static_cast<std::size_t>(o.instance)]) complete(rank, i);
                return;
            case OpKind::Collective: {
                const auto c = static_cast<std::size_t>(o.instance);
                const auto& inst = program_.collectives[c];
                if (++arrived_[c] < inst.members.size()) return;
                // Every member has reached it: it starts now (the members' slices too).
                for (const auto& [m, mi] : inst.members)
                    ranks_[static_cast<std::size_t>(m)].start[mi] = sim_.now();
                if (inst.sync_only || inst.size.value <= 0 || inst.ranks.size() <= 1) {
                    collective_done(c);
                } else if (inst.costed_alone) {
                    const Time t = costs_.cost(inst.kind, gpus_of(inst.ranks), inst.size);
                    sim_.schedule_at(sim_.now() + t, handler_, kCollectiveDone, c);
                } else {
                    network_->collective(inst.kind, group_ids_[c], inst.size,
                                         network::Algorithm::Auto, c);
                }
                return;
            }
        }
    }

    void message_arrived(std::size_t m) {
        message_arrived_[m] = 1;
        const auto& msg = program_.messages[m];
        complete(msg.src, msg.send_op);
        auto& dst = ranks_[static_cast<std::size_t>(msg.dst)];
        if (dst.ready[msg.recv_op]) complete(msg.dst, msg.recv_op);
    }

    void collective_done(std::size_t c) {
        for (const auto& [rank, i] : program_.collectives[c].members)
            complete(rank, i);
    }

    void complete(int rank, std::uint32_t i) {
        auto& st = ranks_[static_cast<std::size_t>(rank)];
        const Op& o = op(rank, i);
        const Time now = sim_.now();
        st.done[i] = 1;
        st.last_end = std::max(st.last_end, now);
        end_ = std::max(end_, now);
        if (record_ && now > st.start[i]) st.slices.push_back(Slice{i, st.start[i], now});
        const bool stream = o.kind == OpKind::Compute || o.kind == OpKind::HostCompute;
        if (o.kind == OpKind::Compute) st.compute_busy += now - st.start[i];
        // Children that become ready queue behind the nodes already waiting for the stream,
        // which is released only after them.
        const auto& prog = program_.ranks[static_cast<std::size_t>(rank)];
        for (std::uint32_t k = 0; k < o.children; ++k) {
            const auto ch = prog.child_list[o.first_child + k];
            if (--st.left[ch] == 0) make_ready(rank, ch);
        }
        if (stream) {
            (o.kind == OpKind::HostCompute ? st.host_busy : st.compute_busy_flag) = false;
            next_on_stream(rank, o.kind == OpKind::HostCompute);
        }
    }

    void check_finished() const {
        // The first node (in rank order) that was ready but never completed is the cause;
        // without one, the first node that never became ready.
        for (int pass = 0; pass < 2; ++pass)
            for (std::size_t r = 0; r < ranks_.size(); ++r) {
                const auto& st = ranks_[r];
                const auto& prog = program_.ranks[r];
                for (std::uint32_t i = 0; i < prog.ops.size(); ++i) {
                    if (st.done[i] || (pass == 0 && !st.ready[i])) continue;
                    const Op& o = prog.ops[i];
                    std::string why;
                    if (pass == 1) {
                        why = "it waits for nodes of its own file that never completed";
                    } else if (o.kind == OpKind::Collective) {
                        const auto& inst =
                            program_.collectives[static_cast<std::size_t>(o.instance)];
                        std::string missing;
                        for (const auto& [m, mi] : inst.members)
                            if (!ranks_[static_cast<std::size_t>(m)].ready[mi]) {
                                missing =
                                    "rank " + std::to_string(m) + " never reached node " +
                                    std::to_string(
                                        program_.ranks[static_cast<std::size_t>(m)].ops[mi].id) +
                                    " of " + program_.ranks[static_cast<std::size_t>(m)].file;
                                break;
                            }
                        why = "its collective waits for the other members: " + missing +
                              " (the members' dependencies order their collectives differently)";
                    } else if (o.kind == OpKind::Recv) {
                        const auto& msg = program_.messages[static_cast<std::size_t>(o.instance)];
                        why = "the message from rank " + std::to_string(msg.src) +
                              " never came: its send, node " +
                              std::to_string(program_.ranks[static_cast<std::size_t>(msg.src)]
                                                 .ops[msg.send_op]
                                                 .id) +
                              " of " + program_.ranks[static_cast<std::size_t>(msg.src)].file +
                              ", never ran";
                    } else {
                        why = "it never completed";
                    }
                    throw ConfigError(SourceLocation{prog.file, 0, 0},
                                      "node " + std::to_string(o.id) + " (" +
                                          node_type_name(o.type) +
                                          (o.name.empty() ? "" : " \"" + o.name + "\"") +
                                          ") never ran to completion: " + why +
                                          "; the ranks wait for each other (a deadlock)");
                }
            }
    }

    const Program& program_;
    const topology::Cluster& cluster_;
    Simulation sim_;
    HandlerId handler_ = 0;
    std::unique_ptr<network::Network> network_;
    replay::CollectiveCosts costs_;
    std::vector<int> gpus_;
    bool record_ = false;
    report::LinkAccounting links_;
    std::vector<RankState> ranks_;
    std::vector<std::size_t> arrived_;
    std::vector<network::GroupId> group_ids_;
    std::vector<std::uint8_t> message_arrived_;
    Time end_ = Time::zero();
};

void write_trace(const Program& program, const Executor& ex, const ExecuteResult& result,
                 const std::filesystem::path& path, OutputSet* outputs) {
    auto sink = report::make_trace_sink(path, outputs);
    std::uint64_t uuid = 1;
    for (std::size_t r = 0; r < program.ranks.size(); ++r) {
        auto slices = ex.slices(r);
        std::stable_sort(slices.begin(), slices.end(), [](const auto& a, const auto& b) {
            return a.start < b.start || (a.start == b.start && a.end > b.end);
        });
        const std::uint64_t proc = uuid++;
        sink->process(
            proc, static_cast<int>(r) + 1,
            "rank " + std::to_string(r) + " (GPU " + std::to_string(result.ranks[r].gpu) + ")");
        // Lanes per kind: a slice goes on the first lane of its kind free at its start.
        struct Lane {
            std::string kind;
            std::uint64_t track;
            Time free;
        };
        std::vector<Lane> lanes;
        const auto& prog = program.ranks[r];
        for (const auto& s : slices) {
            const Op& o = prog.ops[s.op];
            const std::string kind = op_kind_name(o.kind);
            Lane* lane = nullptr;
            for (auto& l : lanes)
                if (l.kind == kind && l.free <= s.start) {
                    lane = &l;
                    break;
                }
            if (!lane) {
                int n = 0;
                for (const auto& l : lanes)
                    n += l.kind == kind ? 1 : 0;
                lanes.push_back(Lane{kind, uuid++, Time::zero()});
                lane = &lanes.back();
                sink->track(lane->track, proc, n == 0 ? kind : kind + " " + std::to_string(n + 1),
                            static_cast<int>(lanes.size()));
            }
            lane->free = s.end;
            report::TraceSlice t;
            t.track = lane->track;
            t.start = s.start;
            t.end = s.end;
            t.name = o.name.empty() ? node_type_name(o.type) : o.name;
            t.args.push_back(report::TraceArg::integer("node", static_cast<std::int64_t>(o.id)));
            t.args.push_back(report::TraceArg::text("type", node_type_name(o.type)));
            sink->slice(t, {});
        }
    }
    report::TraceArgs meta;
    meta.push_back(report::TraceArg::real("iteration_time_s", result.iteration_time.seconds()));
    meta.push_back(
        report::TraceArg::integer("world_size", static_cast<std::int64_t>(program.ranks.size())));
    sink->finish(meta);
}

}  // namespace

ExecuteResult execute(const Program& program, const topology::Cluster& cluster,
                      const network::NetworkConfig& config, const ExecuteOptions& options) {
    const int n = static_cast<int>(program.ranks.size());
    std::vector<int> gpus = options.rank_gpus;
    if (gpus.empty()) {
        if (n > cluster.gpu_count())
            throw ConfigError(
                SourceLocation{program.ranks[static_cast<std::size_t>(cluster.gpu_count())].file, 0,
                               0},
                "rank " + std::to_string(cluster.gpu_count()) + " has no GPU: the topology has " +
                    std::to_string(cluster.gpu_count()) + " GPUs and the folder " +
                    std::to_string(n) +
                    " ranks (ranks map to GPUs 0, 1, ... in order; give a larger "
                    "topology or " +
                    options.rank_map_option + ")");
        for (int r = 0; r < n; ++r)
            gpus.push_back(r);
    } else {
        if (static_cast<int>(gpus.size()) != n)
            throw ConfigError(options.rank_map_option + " lists " + std::to_string(gpus.size()) +
                              " GPUs for " + std::to_string(n) +
                              " ranks: expected one GPU per rank, rank order");
        std::set<int> seen;
        for (const int g : gpus) {
            if (g < 0 || g >= cluster.gpu_count())
                throw ConfigError(options.rank_map_option + " names GPU " + std::to_string(g) +
                                  ", which the topology does not have (GPUs 0-" +
                                  std::to_string(cluster.gpu_count() - 1) + ")");
            if (!seen.insert(g).second)
                throw ConfigError(options.rank_map_option + " names GPU " + std::to_string(g) +
                                  " twice: one rank per GPU");
        }
    }
    Executor ex(program, cluster, config, gpus, options.trace.has_value());
    ExecuteResult result = ex.run();
    if (options.trace) write_trace(program, ex, result, *options.trace, options.outputs);
    return result;
}

nlohmann::ordered_json to_json(const Program& program, const ExecuteResult& result) {
    nlohmann::ordered_json j;
    j["workload"] = "chakra";
    j["prefix"] = program.prefix;
    j["world_size"] = program.ranks.size();
    j["nodes"] = program.nodes;
    j["iteration_time_s"] = result.iteration_time.seconds();
    j["iteration_time_ps"] = result.iteration_time.count_ps();
    auto& ranks = j["ranks"] = nlohmann::ordered_json::array();
    for (std::size_t r = 0; r < result.ranks.size(); ++r) {
        const auto& s = result.ranks[r];
        const double T = result.iteration_time.seconds();
        ranks.push_back({{"rank", r},
                         {"gpu", s.gpu},
                         {"compute_busy_s", s.compute_busy.seconds()},
                         {"compute_fraction", T > 0 ? s.compute_busy.seconds() / T : 0.0},
                         {"end_s", s.end.seconds()}});
    }
    auto& links = j["links"] = nlohmann::ordered_json::array();
    for (const auto& l : result.links)
        links.push_back({{"name", l.name},
                         {"kind", l.kind},
                         {"bytes", l.bytes},
                         {"busy_s", l.busy_s},
                         {"utilization", l.utilization},
                         {"max_concurrent_flows", l.max_concurrent_flows}});
    j["warnings"] = program.warnings;
    return j;
}

}  // namespace cs::chakra
