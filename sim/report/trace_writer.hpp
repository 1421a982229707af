// The timeline of one simulated iteration, as Perfetto shows it, written while the replay runs.
//
// Layout (docs/traces.md shows a picture):
//   process "node N" (one per node with a traced GPU)
//     GPUs / GPU g / compute   passes F12 / B12 / W12 and "optimizer step"; nested inside each
//                              pass, its steps in order (kernels and the blocking collectives
//                              the compute stream waits for, e.g. "all-reduce tp")
//                  / tp comm, cp comm, ep comm   the blocking collectives of the passes
//                  / pp send, pp recv            pipeline activations and gradients
//                  / dp comm                     data-parallel gradient synchronisation
//                  / host                        the worker's host thread (compute.host):
//                                                "issue F12" (the pass's framework work and
//                                                kernel launches), "p2p", "sync"
//                  / memory: total, parameters, gradients, optimizer states, activations
//                                                counter tracks (GiB) of the GPU's memory: the
//                                                memory model's per-GPU figures for its stage,
//                                                activations held from a chunk's forward pass to
//                                                the pass that frees it (TraceOptions::memory)
//     links / <link name>       utilisation (%) of each directed link, a counter track
//   process "cluster": track "iteration" with instants "iteration start", "iteration end" and
//     "summary" (the summary metrics as arguments); links of the fabric.
// Flow arrows follow every pipeline dependency, per GPU: the sender's pass -> its "pp send"
// slice -> the receiver's "pp recv" slice -> the receiver's pass that waited for it (straight
// from pass to pass when a chunk hands over on the same GPU). A pass that both receives and
// sends continues the incoming flow to its output, so a flow follows a microbatch's path through
// the pipeline and every slice carries at most one flow. Streams whose slices overlap in time
// (two transfers in flight at once) spill onto extra tracks ("pp send 2").
//
// Scale: nothing of the trace is held in memory except, per pipeline worker, the passes whose
// outgoing transfer has not been received yet (bounded by the schedule's in-flight microbatches),
// and per link its last value. --trace-ranks keeps only some GPUs (and the links of their nodes);
// --trace-links keeps inter-node links, all links or none.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "network/network.hpp"
#include "replay/replay.hpp"
#include "report/trace_sink.hpp"
#include "workload/plan.hpp"

namespace cs::report {

enum class TraceLinks : std::uint8_t {
    Auto,       // all links on a single-node cluster, inter-node links otherwise
    InterNode,  // links that leave a node (NICs, fabric)
    All,
    None
};
// "auto", "inter-node", "all", "none"; nullopt for anything else.
std::optional<TraceLinks> trace_links_from_name(const std::string& name);

struct TraceOptions {
    std::vector<int> ranks;  // GPUs to trace; empty: every GPU
    TraceLinks links = TraceLinks::Auto;
    // Memory counter tracks per traced GPU (needs TraceContext::stage_memory).
    bool memory = true;
    // When set, the trace file is staged in this set of command outputs (committed with them).
    OutputSet* outputs = nullptr;
    // When set, the writer writes to the sink this returns instead of opening the path (the
    // shared-fabric run gives each job's writer a view of one file, session/jobs.cpp).
    std::function<std::unique_ptr<TraceSink>()> open_sink;
};

// What the writer needs to know about the run besides the notifications. Step times come with
// each pass (replay::PassRecord::step_times); the writer costs nothing itself.
struct TraceContext {
    const topology::Cluster* cluster = nullptr;
    std::vector<replay::Worker> workers;
    // The communicators the peers of collectives are named from (replay::Replay::ranks()).
    workload::RankLayout ranks{workload::ParallelLayout{}};
    std::vector<int> first_layer, layers;  // per virtual stage
    // Memory per GPU of each pipeline stage (plan.devices[s].memory, activations at the peak) and
    // the activation memory each virtual stage holds per microbatch in flight. Empty: no memory
    // tracks.
    std::vector<workload::MemoryBreakdown> stage_memory;
    std::vector<Bytes> activation_memory;

    // The context of a replay: its workers and groups.
    static TraceContext of(const workload::ExperimentSpec& spec,
                           const workload::IterationPlan& plan, const replay::Replay& replay);
};

class TraceWriter final : public replay::ReplayObserver, public network::NetworkObserver {
  public:
    // Opens `path` (format by extension, see trace_format_for). Throws ConfigError for an
    // unknown extension, an unwritable file or ranks outside the cluster.
    TraceWriter(const std::filesystem::path& path, TraceContext context, TraceOptions options);
    ~TraceWriter() override;

    void on_pass(const replay::PassRecord& pass) override;
    void on_optimizer(int worker, Time start, Time end) override;
    void on_host(int worker, Time start, Time end, replay::HostWork kind,
                 std::uint64_t pass) override;
    void on_transfer(const replay::TransferRecord& transfer) override;
    void on_iteration_end(Time end) override;
    void on_link_rate(Time at, topology::LinkId link, double bytes_per_s, int flows) override;

    // Writes `summary` (a JSON object; nested keys flattened as "a.b" and "a[0].b") as the
    // arguments of the "summary" instant and as trace metadata, then commits the file.
    void finish(const nlohmann::json& summary);

  private:
    enum Stream : int { kCompute, kTp, kCp, kEp, kPpSend, kPpRecv, kDp, kHost, kStreams };
    // A slice of the host track, held until the pass it issues is known (on_pass names it).
    struct HostSlice {
        Time start, end;
        replay::HostWork kind = replay::HostWork::Issue;
        std::uint64_t pass = 0;
        std::string name;  // empty until resolved
    };
    struct Pending {
        bool optimizer = false;
        replay::PassRecord pass;  // pass.start / end also hold the optimizer step's interval
        bool resolved = false;    // the outgoing transfer (if any) is known
        std::vector<std::uint64_t> in_flow, out_flow;  // per GPU of the worker, 0 = none
        std::vector<FlowRef::Role> out_role;           // of this pass in out_flow, per GPU
        int from_worker = -1, to_worker = -1;
        Bytes in_bytes, out_bytes;
    };
    struct Incoming {
        std::vector<std::uint64_t> flows;  // per GPU of the receiving worker
        int from_worker = -1;
        Bytes bytes;
    };
    struct LinkState {
        bool traced = false, pending = false;
        Time at;
        double value = 0, last = -1;
        std::uint64_t track = 0;
    };
    struct StepSpan {
        const workload::Step* step = nullptr;
        Time start, end;
        int repeat = 1;  // executions covered by this span
        int index = 0;   // first execution covered (0-based)
    };

    bool traced(int gpu) const { return traced_gpu_[static_cast<std::size_t>(gpu)] != 0; }
    int pid_of_node(int node) const { return node < 0 ? 2 : node + 2; }
    std::uint64_t process_uuid(int pid);
    std::uint64_t gpu_group(int gpu);
    std::uint64_t lane_track(int gpu, Stream stream, Time start, Time end);
    std::uint64_t iteration_track();
    void drain(int worker);
    void drain_host(int worker);
    void emit(Pending& pending);
    void emit_pass(Pending& pending);
    // The slices of a pass's steps, nested in the pass on every GPU (their track set there).
    static std::vector<TraceSlice> step_slices(const std::vector<StepSpan>& spans);
    // The comm stream a blocking collective of `group` is drawn on besides its pass.
    static Stream collective_stream(workload::GroupKind group);
    // The blocking collectives of pass `pending` (named `name`) on the comm streams of its
    // worker's GPU number `member`.
    void emit_collectives(const Pending& pending, std::size_t member,
                          const std::vector<StepSpan>& spans, const std::string& name);
    std::vector<StepSpan> step_spans(const replay::PassRecord& pass);
    std::string group_ranks(int worker, int index, workload::GroupKind group) const;
    // The GPUs a DP collective of `scope` runs on, for member `member` of `worker`.
    std::string dp_peers(int worker, int member, replay::TransferRecord::Scope scope) const;
    // A data-parallel collective's slices, on every traced replica of the stage it runs for.
    void emit_dp_transfer(const replay::TransferRecord& transfer);
    // A pipeline transfer's send and receive slices and the arrow from pass to pass.
    void emit_p2p_transfer(const replay::TransferRecord& transfer);
    void flush_link(topology::LinkId link);
    void write_memory(Time end);

    TraceContext ctx_;
    TraceOptions opts_;
    std::unique_ptr<TraceSink> sink_;
    std::vector<char> traced_gpu_;
    std::vector<char> worker_traced_;
    std::uint64_t next_uuid_ = 1;
    std::uint64_t next_flow_ = 1;
    std::unordered_map<int, std::uint64_t> processes_, gpus_groups_, links_groups_;
    std::vector<std::uint64_t> gpu_groups_;
    struct Lanes {
        std::vector<Time> ends;  // latest end on each lane
        std::vector<std::uint64_t> tracks;
    };
    std::unordered_map<std::uint64_t, Lanes> lanes_;  // per GPU and stream
    std::uint64_t iteration_track_ = 0;
    std::vector<std::deque<Pending>> queues_;
    std::vector<std::deque<HostSlice>> host_queues_;        // per worker, in host order
    std::unordered_map<std::uint64_t, Incoming> incoming_;  // by receiving pass id
    std::vector<LinkState> links_;
    // Per traced worker, its activation memory changes (+ at a forward pass's start, - at the end
    // of the pass that frees it), written out at the end of the iteration in time order.
    struct MemoryChange {
        Time at;
        std::int64_t delta = 0;
    };
    std::vector<std::vector<MemoryChange>> memory_;
    Time end_ = Time::zero();
    bool finished_iteration_ = false;
};

}  // namespace cs::report
