// Replays one training iteration as events: every pipeline worker runs its schedule's op order,
// passes wait for the activations and gradients they need, transfers go over the network model,
// data-parallel gradient synchronisation and the optimizer step close the iteration.
//
// A worker is the group of tp x cp GPUs that run one pipeline stage of one data-parallel replica
// in lockstep (they execute the same program; their TP and CP collectives synchronise them). Which
// GPUs form a worker and each of its communicators is workload::RankLayout's answer, which the
// replay owns and hands to observers (ranks(), group()). A worker's passes are costed once per
// distinct PassPlan: compute steps from the plan, blocking TP/CP/EP collectives by running that
// collective alone on the network model (CollectiveCosts); observers receive each step's time
// with the pass (PassRecord::step_times) and never cost anything again. Pipeline transfers and DP
// collectives are issued on the shared network per GPU, so they contend for links with each other.
//
// With a host model (compute.host, docs/architecture.md "The host") each worker also keeps a host
// clock: a pass cannot start before its first kernel is issued nor end before its last kernel,
// issued `launch` apart, has run (host.hpp's closed form, once per plan). The replay decides the
// host's timeline when a pass starts, so a pass stays one event.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/hash.hpp"
#include "engine/simulation.hpp"
#include "network/accelerator.hpp"
#include "network/network.hpp"
#include "replay/duration_model.hpp"
#include "replay/host.hpp"
#include "schedule/schedule.hpp"
#include "workload/experiment.hpp"
#include "workload/groups.hpp"
#include "workload/plan.hpp"

namespace cs::replay {

enum class IdleCause : std::uint8_t {
    Pipeline,    // waiting for another stage's activation or gradient, warm-up and cool-down
    Collective,  // waiting for the worker's own DP collectives (gradient sync, parameter gather)
    // Waiting inside a batched point-to-point exchange (Megatron-LM's schedules) for its
    // transfers once every peer has joined it: the pipeline's exposed communication. The wait
    // for peers to join is Pipeline.
    PipelineComm,
    // Waiting for the host to issue the next pass's first kernel (compute.host): the part of the
    // wait beyond max(the GPU's previous work, the pass's input arriving).
    Host,
};

// What a worker's host thread does (ReplayObserver::on_host).
enum class HostWork : std::uint8_t {
    Issue,  // the framework work and kernel launches of a pass (or of the optimizer step)
    P2p,    // posting a point-to-point send or receive
    Sync,   // waiting for the GPU (sync_after_p2p: the pass whose output it sends to finish)
};

// The plan of `pass` in a chunk: forward, full backward, or one half of a split backward.
const workload::PassPlan& pass_plan(const workload::ChunkPlan& chunk, schedule::Pass pass);

struct Worker {
    int stage = 0;
    int dp = 0;
    std::vector<int> gpus;  // tp x cp GPU numbers, tp index innermost (RankLayout::worker_gpus)
};

struct PassRecord {
    int worker = 0;
    int virtual_stage = 0;
    int chunk = 0;
    int microbatch = 0;
    schedule::Pass pass = schedule::Pass::Forward;
    Time start, end;
    Time compute;     // part of [start, end) spent computing
    Time collective;  // part spent in blocking collectives
    // Part of [start, end) beyond start + compute + collective: the GPU waiting, inside a
    // host-bound pass, for kernels the host had not issued yet. Zero without a host model.
    Time host_stall;
    // Part of compute added by compute-communication interference (compute.interference): the
    // last backward pass of a chunk slowed by the DP gradient buckets reduced during it, and the
    // compute steps slowed by the collectives overlapping them (Step::OverlapNext).
    Time interference;
    // Part of [start, end) the GPU waited inside the pass for ZeRO-3 parameter all-gathers
    // (parallelism.sharding: zero3) of its units that prefetching did not hide. The pass's steps
    // are drawn back to back from its start, the wait after them. Zero otherwise.
    Time gather_wait;
    const workload::PassPlan* plan = nullptr;
    // The time of one execution of each of plan->steps, index for index (a step runs `repeat`
    // times back to back, in order, from `start`): compute steps' durations from the plan,
    // collective steps as CollectiveCosts costed them. compute and collective are their sums
    // (compute plus `interference`).
    // Points into the Replay, which computed it once for the plan; valid while the Replay lives.
    std::span<const Time> step_times;
    // The plan's blocking collectives by what they are for (workload::Step::comm_kind), each the
    // sum of its steps' step_times x repeat as costed for the plan: `collective` before an
    // overlapped group shortened it (exposed_by_kind shares that out). Points into the Replay,
    // like step_times; null for a pass without a plan.
    const workload::CommTimes* collective_kinds = nullptr;
    std::uint64_t id = 0;  // unique per pass in the iteration, for dependency arrows
};

// The pass's exposed communication by kind, summing exactly to collective + gather_wait: its
// blocking collectives (collective_kinds, or, where an overlapped group left only part of them
// exposed, `collective` shared out in proportion to them, rounded cumulatively so the parts add
// up) and its wait for ZeRO-3 parameter gathers (data parallelism).
workload::CommTimes exposed_by_kind(const PassRecord& pass);

struct TransferRecord {
    enum class Kind : std::uint8_t { Activation, Gradient, DpGradients, DpParameters } kind;
    // DP collectives: the communicator of each GPU taking part: its whole dp group, its shard
    // group (ZeRO-2/3 units, HSDP) or its group across shard groups (HSDP's all-reduce).
    enum class Scope : std::uint8_t { Dp, Shard, Replica } scope = Scope::Dp;
    // DP collectives: the replicas of the stage taking part, [replica_first, replica_first +
    // replica_count) (count 0: every replica), and a static label ("fsdp all-gather", ...;
    // nullptr: the DP gradient sync or parameter gather).
    int replica_first = 0, replica_count = 0;
    const char* label = nullptr;
    int src_worker = 0, dst_worker = 0;  // dst = src for DP collectives
    int microbatch = -1;
    int virtual_stage = -1;  // the receiving virtual stage for p2p
    Bytes bytes;             // per GPU
    Time start, end;
    std::uint64_t from_pass = 0, to_pass = 0;  // PassRecord ids (to_pass filled for p2p)
};

class ReplayObserver {
  public:
    virtual ~ReplayObserver() = default;
    virtual void on_pass(const PassRecord& pass) { (void)pass; }
    virtual void on_idle(int worker, Time start, Time end, IdleCause cause) {
        (void)worker, (void)start, (void)end, (void)cause;
    }
    // The worker's host thread (compute.host) busy with `kind` over [start, end); `pass` is the
    // PassRecord id of the pass whose kernels it issues (Issue), 0 for the optimizer step and for
    // P2p and Sync. Calls come when the replay decides them: in order per worker, but possibly
    // ahead of or behind the simulation time of other notifications (the host runs ahead).
    virtual void on_host(int worker, Time start, Time end, HostWork kind, std::uint64_t pass) {
        (void)worker, (void)start, (void)end, (void)kind, (void)pass;
    }
    virtual void on_optimizer(int worker, Time start, Time end) {
        (void)worker, (void)start, (void)end;
    }
    // Called when the receiving pass starts (so to_pass is known) or, for DP, when it ends.
    virtual void on_transfer(const TransferRecord& transfer) { (void)transfer; }
    virtual void on_iteration_end(Time end) { (void)end; }
};

// Replica folding (Replay::set_fold), a fast path: an observer whose records of a worker depend
// on the notifications naming that worker alone, summed or min/max'ed in any order (whole
// numbers), may say so by being a FollowerCopier too. When every observer is, a representative's
// notifications are not repeated for its followers as they happen; instead, after the last
// notification and before on_iteration_end, copy_worker(representative, follower) is called once
// per follower: the follower's records become exactly what the repeated notifications would have
// made them.
class FollowerCopier {
  public:
    virtual ~FollowerCopier() = default;
    virtual void copy_worker(int from, int to) = 0;
};

// Cost of a collective run alone on the network model (network::isolated_collective_time), cached
// per kind, group and size. A group of one GPU, an empty collective and the ideal network cost
// nothing (the replay issues no collective for them). `kept`: the run's network::KeptState, which
// the isolated networks share (null: none).
class CollectiveCosts {
  public:
    CollectiveCosts(const topology::Cluster& cluster, const network::NetworkConfig& config,
                    network::KeptState* kept = nullptr);
    Time cost(network::CollectiveKind kind, const std::vector<int>& group, Bytes size);
    // One point-to-point send alone on an otherwise idle network (Network::send, as the replay
    // sends a pipeline message's part).
    Time send(int src, int dst, Bytes size);

  private:
    const topology::Cluster& cluster_;
    network::NetworkConfig config_;
    network::KeptState* kept_;
    // Each group seen, numbered (found without copying it), and the costs by (kind, group's
    // number, size) and the sends by (source, destination, size), hashed: plan's bounds look
    // them up for every pass of every survivor bounded, where a tree's walk was 2% of its time.
    struct KeyHash {
        std::size_t operator()(const std::tuple<int, int, std::int64_t>& k) const {
            const auto [a, b, c] = k;
            return static_cast<std::size_t>(
                mix64(mix64(static_cast<std::uint64_t>(c)) ^
                      (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32 |
                       static_cast<std::uint32_t>(b))));
        }
    };
    std::map<std::vector<int>, int> groups_;
    std::unordered_map<std::tuple<int, int, std::int64_t>, Time, KeyHash> cache_;
    std::unordered_map<std::tuple<int, int, std::int64_t>, Time, KeyHash> sends_;
    // One network times every send, one after another, each alone on it (building one per send
    // costs a pass over every link).
    struct SendTimer;
    std::shared_ptr<SendTimer> timer_;
};

struct ReplayResult {
    Time iteration_time;       // first op start (t = 0) to last op end; the stop time if stopped
    std::uint64_t events = 0;  // engine events processed
    bool stopped = false;      // ended by stop_at() before the iteration completed
    // Member folding (set_fold): the members each pipeline and DP transfer stood for on the
    // network (1: not folded), and why not when it was allowed but refused.
    int fold_copies = 1;
    std::string fold_refused;
    // Replica folding (`analytical` and `ideal` networks): the data-parallel replicas simulated,
    // one per class of replicas whose pipeline messages cost the same (dp when not folded), and
    // why not when it was allowed but refused.
    int replicas_simulated = 1;
    std::string replicas_refused;
};

// How the replay runs a layout's data parallelism (Replay::setup_sharding, read_schedule), stated
// once for the replay and its lower bound (bound.cpp).
struct DataParallelMode {
    int shard_size = 1;           // the shard group size S: dp unless sharded with HSDP
    bool hsdp = false;            // sharded with 1 < S < dp
    bool sharded_units = false;   // ZeRO-2/3 with S > 1: passes run unit by unit
    bool param_prefetch = false;  // --overlap-param-gather under the distributed optimizer
    static DataParallelMode of(const workload::ParallelLayout& layout);
};

// Megatron-LM's DDP gradient buckets (--overlap-grad-reduce): a chunk's `stage.dp_parameters` cut
// into buckets of layout.bucket_parameters() (at least one), and bucket b's share of the chunk's
// gradient bytes (the bytes between b and b + 1 bucket sizes; the last takes the rest).
int gradient_buckets(const workload::StagePlan& stage, const workload::ParallelLayout& layout);
Bytes gradient_bucket_bytes(const workload::StagePlan& stage,
                            const workload::ParallelLayout& layout, int buckets, int bucket);

// An overlapped group's time (DualPipe's F&B, Replay's overlap_group), in picoseconds: the
// passes' total compute and blocking-collective times, each chain's compute plus collectives (the
// forward's, the backward's), and compute.interference. `group` is the longest of the two chains
// and of the shared-resource bound (collectives hidden in compute slowed by 1 + i while they run:
// C + A i / (1 + i); or compute hidden in collectives: A); beyond C it is `slowed` compute
// first, then `exposed` collective time.
struct OverlappedTime {
    std::int64_t group = 0, slowed = 0, exposed = 0;
};
OverlappedTime overlapped_time(std::int64_t compute, std::int64_t collective, std::int64_t chain_f,
                               std::int64_t chain_b, double interference);

// A shared-fabric run (`jobs:`, session/jobs.hpp): one Replay per job, all on one Simulation and
// one Network, so that the jobs' pipeline transfers and DP collectives contend for links. The
// caller owns both and routes the network's completions to the job whose token range they fall in.
struct SharedFabric {
    Simulation* sim = nullptr;
    network::Network* network = nullptr;
    std::uint64_t token_base = 0;  // added to every network token this replay issues
    std::vector<int> placement;    // rank r on GPU placement[r] (RankLayout::place)
    // Called from inside the simulation when the iteration completes (every worker's ops,
    // optimizer step and parameter gather done), with its end; a job's next iteration can start
    // there. Empty: nothing is called.
    std::function<void(Time)> on_complete;
};

// What a replay builds per worker (its workers' GPU lists and per-worker state, their arrays
// sized by the schedule's shape), kept between the runs of a sweep: a replay given a scratch
// takes the containers kept for its worker count, resets every field and refills them (the
// same values as built anew), and gives them back when it is destroyed, so that a sweep's later
// runs do not allocate and free thousands of small vectors each. At most kMaxEntries worker
// counts are kept (the most recently used).
//
// It also keeps what a rank placement (tp, cp, dp, pp, ep, order) gives whatever the model's
// sizes and the microbatches: the workers' GPUs, the data-parallel communicators' GPUs and, for
// one cluster and network configuration, the replica fold's classes and the followers' send
// routes. A later run of the same placement takes them as they are instead of deriving them
// again (the same values: they are functions of that key alone). kMaxEntries placements are
// kept. Not thread-safe: one replay at a time.
class ReplayScratch {
  public:
    ReplayScratch();
    ~ReplayScratch();
    ReplayScratch(const ReplayScratch&) = delete;
    ReplayScratch& operator=(const ReplayScratch&) = delete;
    static constexpr std::size_t kMaxEntries = 4;
    // How many worker counts are kept (for tests).
    std::size_t entries() const;
    // How many placements are kept, and how many of them hold a replica fold (for tests).
    std::size_t placements() const;
    std::size_t folds() const;
    // How many runs took a kept replica fold as it was (for tests).
    std::size_t folds_taken() const;

  private:
    friend class Replay;
    struct Parts;
    struct Placement;
    // The entry kept for `layout`'s placement, made (empty) if there is none.
    std::shared_ptr<Placement> placement(const workload::ParallelLayout& layout);
    std::unique_ptr<Parts> parts_;
};

// The speed paths a replay may take (docs/architecture.md, "One seam for speed"), none of which
// changes a result: member and replica folding (Replay::set_fold), the network's accelerator
// (network/accelerator.hpp) and what a caller keeps across runs. `enabled` false
// (`--no-fast-paths`): none of them; the replay's network and its isolated collectives are made
// without a KeptState, and nothing is taken from or left in a scratch.
struct FastPaths {
    bool enabled = true;
    // The per-worker containers and per-placement results a sweep keeps across its runs
    // (ReplayScratch; null: built and freed by the run). Must outlive the replay.
    ReplayScratch* scratch = nullptr;
    // What the networks on the run's cluster keep for each other (a sweep's, made for that
    // cluster; null, or made for another cluster: the run's own). Must outlive the replay.
    network::KeptState* network = nullptr;
};

class Replay final : public EventHandler, public network::TransferClient {
  public:
    // With `shared`, the replay runs on its simulation and network (start(), then the caller
    // runs the simulation, then finish()); member folding is refused. Otherwise it owns both.
    // `fast`: the speed paths it may take (FastPaths).
    Replay(const workload::ExperimentSpec& spec, const workload::IterationPlan& plan,
           const schedule::Schedule& schedule, const schedule::PipelineShape& shape,
           const SharedFabric* shared = nullptr, const FastPaths& fast = {});
    ~Replay() override;

    void add_observer(ReplayObserver& observer) {
        observers_.push_back(&observer);
        copiers_.push_back(dynamic_cast<FollowerCopier*>(&observer));
    }
    void add_network_observer(network::NetworkObserver& observer);
    // Installs the model that times every worker's passes (call before run()); nullptr restores
    // the nominal times. Without a model the replay makes no per-pass call (duration_model.hpp).
    void set_duration_model(std::unique_ptr<DurationModel> model);
    // The training iteration this replay stands for, in [0, kMaxDurationStep]: the duration
    // model's DurationContext::step and the random streams it draws from. 0 by default.
    void set_step(std::int64_t step);
    // Ends the run at `at` if the iteration is still going then (a failed GPU ends the job):
    // nothing at or after `at` happens, run() returns with `stopped` set and iteration_time =
    // `at`, and observers get no on_iteration_end (nor on_pass for passes under way at `at`).
    // Once the iteration has completed, the stop does nothing.
    void stop_at(Time at);
    // Ends the run at the first check at which the iteration is still going and `past(now)`
    // holds, for a caller whose stop moves earlier while the run goes on (plan's confirmations:
    // the k-th best improves as the other threads confirm). Checks come at the start and then
    // every `every` (> 0) of simulated time, while other events are pending; they are engine
    // events that change nothing else. `past` must be monotone (true at t, then true at every later
    // t): a stop at a check then says what stop_at(now) would, that the iteration takes longer than
    // now. Called on the replay's thread.
    void stop_when(std::function<bool(Time)> past, Time every);
    // Member folding (docs/performance-history.md, "Folding"), on by default: the tp x cp GPUs
    // of a worker run in lockstep and send their pipeline messages and DP collectives at the same
    // instants with the same sizes, so when Accelerator::fold accepts (their routes are carried
    // onto each other by a link map and share no link) only member 0's transfers go on the network,
    // each standing for all members. Results are the same (the network's observers still see
    // every member's flows); only engine events and time drop. run() decides.
    //
    // Replica folding (same switch): under `analytical` and `ideal` networks a transfer's time
    // depends on its own route alone, so data-parallel replicas whose pipeline messages cost the
    // same (Accelerator::p2p_cost, member by member and pair by pair) run exactly alike: one
    // representative per class is simulated, the DP collectives (which span every replica) start
    // when every class's representative is ready, and observers hear every replica's passes,
    // idle times and transfers (the representative's, renumbered) and the network's observers
    // every replica's flows (Accelerator::account_send). Refused where a replica may differ: a
    // duration model (variability), faults, a stop, sharded data parallelism (ZeRO-2/3, HSDP), a
    // shared fabric, or refuse_replica_fold().
    void set_fold(bool allowed) { fold_allowed_ = allowed && fast_; }
    // Keeps replicas unfolded, with `why` reported (ReplayResult::replicas_refused): for an
    // observer that needs every replica's own records (a trace's per-pass dependency arrows).
    void refuse_replica_fold(std::string why) { replica_refused_ = std::move(why); }
    ReplayResult run();
    // run() in three parts for a shared fabric: start() issues the first passes, the owner of the
    // shared Simulation runs it, finish() checks completion and notifies the iteration's end.
    // start() begins the iteration at the simulation's current time (0 for a run of its own; a
    // shared fabric's next iteration of a job starts where its last ended); iteration_time counts
    // from there.
    void start();
    ReplayResult finish();
    // The tokens this replay gives the network are [token_base, token_base + messages).
    std::uint64_t token_base() const { return token_base_; }

    const std::vector<Worker>& workers() const { return workers_; }
    const network::Network& network() const { return *network_; }
    // Where every GPU sits in the layout; workers are numbered as RankLayout::worker numbers them.
    const workload::RankLayout& ranks() const { return ranks_; }
    // The communicator of `kind` that member `member` of `worker` belongs to: the GPUs the
    // replay runs that kind's collectives on (DP gradient synchronisation on the dp groups; the
    // passes' TP/CP/EP collectives are costed on worker 0's groups, all workers having the same
    // shape).
    workload::CollectiveGroup group(int worker, int member, workload::GroupKind kind) const {
        return ranks_.group(kind, worker, member);
    }
    // For callers that change the network before or during the run (link capacities).
    network::Network& network() { return *network_; }
    // Seeded with the experiment's `seed`; owns the random streams of the run.
    Simulation& simulation() { return sim_; }

    void on_event(Simulation& sim, const Event& event) override;
    void prefetch(const Event& event) const override;
    bool wants_hints() const override { return true; }
    void on_transfer_done(Simulation& sim, std::uint64_t token) override;

    struct WorkerState;  // defined in replay_state.hpp
    // Per worker and arrival key (an input a pass waits for), what the worker knows of it, in one
    // record, and every worker's records in one array: a message's delivery, its receiver's pass
    // start and a batched exchange each read or write several fields of one key of another
    // worker, one cache line where a worker's state and four arrays of its own were five.
    struct Input {
        Time arrived_at;               // when it arrived (read by the host model only)
        std::int32_t message = -1;     // the message carrying it, or -1
        std::uint8_t arrived = 0;      // it has arrived
        std::uint8_t recv_posted = 0;  // batched exchanges: the worker has posted its receive
    };
    static_assert(sizeof(Input) == 16);

  private:
    // Worker `worker`'s record of arrival key `key`.
    Input& input(int worker, int key) {
        return inputs_[static_cast<std::size_t>(worker) * keys_ + static_cast<std::size_t>(key)];
    }
    // The replay's own engine events (Event::kind).
    enum EventKind : std::uint32_t {
        kPassDone = 1,
        kOptimizerDone = 2,
        kLocalDelivery = 3,
        kBucketReady = 4,
        kUnitDone = 5,
        kStop = 6,
        kStopCheck = 7
    };
    // pass_costs_ holds, per virtual stage, the ChunkPlan's passes in schedule::Pass order.
    static constexpr int kPassKinds = 4;
    struct PassCost {
        Time compute, collective;
        workload::CommTimes collective_kinds{};  // PassRecord::collective_kinds
        // Part of compute added by the interference of overlapped collectives (Step::
        // OverlapNext, OverlapPrevious), in step_times already.
        Time interference;
        std::vector<Time> step_times;  // PassRecord::step_times
        // With a host model: the plan's kernels and their issue (host.hpp); blocks[i] is a
        // compute step when block_compute[i] (a duration model scales those).
        HostIssue host;
        Time lead;  // the framework's work before the first kernel: host.pass (+ backward)
        std::vector<KernelBlock> blocks;
        std::vector<std::uint8_t> block_compute;
    };
    // What a message in flight is for, and what to do when its last transfer has arrived.
    struct PipelineDelivery {  // activation or gradient: wakes the receiving pass
        int arrival_key;
    };
    struct GradientSync {  // DP gradient synchronisation of one chunk of a stage, all replicas
        int stage;
        int chunk;
    };
    struct GradientBucket {  // one bucket of it under --overlap-grad-reduce
        int stage;
        int chunk;
    };
    struct ParameterGather {  // distributed optimizer: updated parameters all-gathered back
        int stage;
    };
    // --overlap-param-gather: the previous step's parameters of one chunk, gathered under this
    // iteration's forward passes (the chunk's first forward waits for it).
    struct PrefetchGather {
        int stage;
        int chunk;
    };
    struct UnitCollective {  // ZeRO-2/3: one unit's all-gather or reduce-scatter, a shard group
        int stream;          // index into shard_streams_
        bool gather;
    };
    struct ReplicaReduce {  // HSDP with ZeRO-2/3: the gradient shards all-reduced across groups
        int stage;
    };
    using Purpose = std::variant<PipelineDelivery, GradientSync, GradientBucket, ParameterGather,
                                 UnitCollective, ReplicaReduce, PrefetchGather>;
    struct Message {
        TransferRecord record;
        int remaining = 0;  // transfers (one per GPU or per DP group) still running
        // Batched exchanges (batched_): the sender has posted it (its exchange began); it goes
        // on the network once the receiver has posted its receive too.
        bool posted = true;
        // HSDP: after this reduce-scatter inside the shard groups, an all-reduce of this many
        // bytes per GPU across them completes the message (0: nothing more).
        Bytes then_all_reduce;
        Purpose purpose;
    };
    // ZeRO-2/3: the all-gathers (or reduce-scatters) of one shard group of one stage, in the
    // order its replicas issue them: collective n starts when all its replicas have issued it and
    // collective n - 1 has ended (one communication stream each).
    struct ShardStream {
        int stage = 0, group = 0;
        bool gather = true;
        std::vector<int> ready;    // [n]: replicas that issued collective n
        std::vector<Bytes> bytes;  // [n]: per GPU
        std::int64_t launched = 0, done = 0;
        bool busy = false;
    };
    static constexpr std::size_t kMaxGroup = schedule::kMaxOverlapGroup;
    void try_start(int worker);
    // try_start's parts: whether the worker waits for its round's exchange (batched_; posts it
    // when due), and the host model's start of the `group` passes now in `running`.
    bool waits_for_exchange(int worker);
    void start_group_on_host(int worker, std::size_t group, int need, Time now);
    // Megatron-LM's batched exchanges (docs/schedules.md, "What interleaving costs"): the
    // worker's exchange after its round (the round's outputs and the next round's inputs, held
    // until all are done); true when it must wait for it.
    bool post_exchange(int worker, int next_round);
    // A pipeline message of `worker`'s onto the network (its member transfers, the followers'
    // accounting).
    void start_message(std::size_t id);
    // One transfer of `worker`'s exchange is done; the exchange ends with its last.
    void exchange_transfer_done(int worker);
    // The worker that sends the input `op` at virtual stage `vs` needs, or -1 (none, or itself).
    int input_sender(int worker, const schedule::PipelineOp& op, int vs) const;
    // The arrival key a pass waits for (its activation or gradient), or -1.
    int input_key(const schedule::PipelineOp& op, int vs) const;
    // Fills `r` for `op` starting at `now` (nominal or modelled compute, bucket interference);
    // true when it is the chunk's last gradient-completing pass under --overlap-grad-reduce.
    bool begin_record(int worker, const schedule::PipelineOp& op, int vs, Time now, PassRecord& r);
    // The observers learn which pass received the input `need` (if it came as a message).
    void announce_input(int worker, int need, std::uint64_t pass_id);
    // Times the worker's running group (two or more passes) as overlapped: see replay.cpp.
    void overlap_group(int worker);
    std::span<const Time> overlapped_steps(const PassRecord& r, Time compute, Time collective);
    // The fold check's classes (every p2p worker pair and DP collective the run will issue) and
    // Accelerator::fold; sets members_on_network_.
    void decide_fold(ReplayResult& result);
    // Replica folding: the classes of replicas (set_fold) and followers_; sets replicas_simulated.
    void decide_replica_fold(ReplayResult& result);
    // Every (sender, receiver) pair of workers among `senders`' pipeline messages to another
    // worker, sorted, each once.
    std::vector<std::pair<int, int>> message_pairs(std::span<const int> senders) const;
    // Why members may not fold (null: they may be checked), and the DP collectives' fold classes.
    const char* member_fold_refusal() const;
    void add_dp_fold_classes(std::vector<network::FoldClass>& classes) const;
    // Why replicas may not fold (empty: they may be classed).
    std::string replica_fold_refusal() const;
    // Replicas classed by the costs of their members' messages over the stage `pairs`: fills
    // rep_replica_ (each replica's class representative) and returns the class count.
    int classify_replicas(const std::vector<std::pair<int, int>>& pairs);
    // Followers from rep_replica_ (`classes` representatives); sets replicas_simulated.
    void set_followers(ReplayResult& result, int classes);
    // Whether `worker` is a folded replica's (not simulated: its class's representative stands
    // for it).
    bool follower(int worker) const {
        return !is_follower_.empty() && is_follower_[static_cast<std::size_t>(worker)];
    }
    int class_size(int worker) const { return 1 + static_cast<int>(followers_of(worker).size()); }
    // The workers a representative stands for (empty for any other worker, or unfolded).
    const std::vector<int>& followers_of(int worker) const {
        return followers_.empty() ? kNoFollowers : followers_[static_cast<std::size_t>(worker)];
    }
    static inline const std::vector<int> kNoFollowers;
    // notify(observer, w) for every observer, with w = `worker` and then every worker it stands
    // for: a representative's idle, host and optimizer records are its followers' too.
    template <class Notify>
    void notify_replicas(int worker, Notify&& notify) const {
        for (auto* o : observers_) {
            notify(*o, worker);
            if (copy_followers_) continue;  // copied at the end (FollowerCopier::copy_worker)
            for (int f : followers_of(worker))
                notify(*o, f);
        }
    }
    // The followers repeated notifications stand for, none when the observers copy them.
    const std::vector<int>& notified_followers(int worker) const {
        return copy_followers_ ? kNoFollowers : followers_of(worker);
    }
    // The worker that runs for worker(stage, replica): itself, or its class's representative.
    int simulated_worker(int stage, int replica) const {
        return worker_of(stage, rep_replica_.empty()
                                    ? replica
                                    : rep_replica_[static_cast<std::size_t>(replica)]);
    }
    // Where the output of `worker`'s pass goes: the receiving worker, arrival key and whether it
    // is a gradient; false when the pass sends nothing.
    bool p2p_target(int worker, schedule::Pass pass, int vs, int microbatch, int& dst, int& key,
                    int& target_vs, bool& gradient) const;
    void finish_pass(int worker);
    // A pass's outputs (p2p sends, gradient completion): at its end, or at its group's end.
    void complete_pass(int worker, const PassRecord& r);
    void deliver(int worker, int key);
    void start_dp_sync(int worker, int chunk);
    // Issues chunk `chunk`'s DP gradient collective of the worker's stage (every replica ready).
    void issue_dp_sync(int worker, int chunk);
    // Whether the worker has run every backward pass of every chunk.
    bool all_chunks_backward_done(const WorkerState& st) const;
    // --overlap-grad-reduce: the gradient buckets of a stage's chunk, launched during the last
    // backward pass of the chunk as they become ready.
    bool overlaps_dp(int stage) const;
    void schedule_buckets(int worker, int chunk, Time start, Time end);
    void bucket_ready(int worker, int chunk, int bucket);
    void launch_bucket(int stage);
    Bytes bucket_bytes(int stage, int bucket) const;  // per GPU
    void maybe_start_optimizer(int worker);
    // Issues one DP collective of `bytes` per GPU per member for message `id` over `stage`'s
    // replicas: on the dp groups (Scope::Dp), every shard group or every cross-shard group;
    // returns how many collectives were issued.
    void issue_dp(int stage, network::CollectiveKind kind, TransferRecord::Scope scope, Bytes bytes,
                  std::uint64_t id);
    int dp_collective_count(TransferRecord::Scope scope) const;
    // The DP gradient reduction of message `id` (all-reduce or reduce-scatter over the dp
    // groups; with HSDP a reduce-scatter inside the shard groups, then an all-reduce of the
    // shard across them); sets the message's remaining count.
    void issue_gradient_reduce(int stage, network::CollectiveKind kind, Bytes bytes,
                               std::uint64_t id);
    // The constructor's steps, in its order: the scratch's containers and placement, the workers'
    // GPUs, the schedule's orders and exchange rounds, the workers' states, the DP communicators,
    // (setup_sharding) and, after the pass costs, the gradient buckets.
    void take_scratch(ReplayScratch* scratch, bool shared);
    void place_workers();
    void read_schedule();
    void reset_states();
    void register_dp_groups();
    void setup_buckets();
    void setup_sharding();
    void unit_collective_done(int stream);
    // ZeRO-2/3 (sharded_units_): a pass run unit by unit, its units' all-gathers and
    // reduce-scatters issued on its shard group's streams.
    bool runs_units(schedule::Pass pass) const;
    void begin_units(int worker);
    void advance_units(int worker);
    void unit_done(int worker);
    // Issues the all-gather (or reduce-scatter) of the pass's k-th unit; returns its number on the
    // stream.
    std::int64_t request_unit(int worker, bool gather, int k);
    void launch_unit_collectives(int stream);
    int shard_stream(int worker, bool gather) const;
    bool sharded_gradients_done(int worker) const;
    void maybe_replica_reduce(int stage);
    void start_parameter_gather(int worker);
    void emit_idle(int worker, Time until, IdleCause cause);
    void emit_host(int worker, Time start, Time end, HostWork kind, std::uint64_t pass);
    // A pipeline message's parts, srcs[i] to dsts[i]: at once through the accelerator
    // (Accelerator::send_together), else one send each; returns the completions to wait for.
    int send_parts(std::span<const int> srcs, std::span<const int> dsts, Bytes size,
                   std::uint64_t token);
    // Whether the pass of `worker` at virtual stage `vs` sends its output to another worker.
    bool sends_p2p(int worker, schedule::Pass pass, int vs, int microbatch) const;
    // The host model's part of starting a pass at `now` (try_start): fills r.start, r.end and
    // r.host_stall and moves the worker's host clock.
    void start_on_host(int worker, PassRecord& r, const PassCost& cost, int need, Time now);
    // The duration model's compute time for the pass `r` of `worker` (nominal: the plan's).
    Time modelled_compute(int worker, const PassRecord& r, Time nominal);
    int worker_of(int stage, int dp) const { return ranks_.worker(stage, dp); }
    // Microbatches each model chunk of a device runs: all of them, or half with two model copies
    // (DualPipe: chunk 0 runs those entering at device 0, chunk 1 those entering at device p-1).
    int chunk_microbatches() const { return shape_.microbatches / schedule_.model_copies(); }
    int arrival_key(int chunk, int microbatch, bool gradient) const;
    const workload::PassPlan& pass_plan(const schedule::PipelineOp& op, int vs) const;
    const PassCost& pass_cost(schedule::Pass pass, int vs) const;
    PassCost cost_pass(const workload::PassPlan& plan, bool backward);
    // Every replica of `stage` has one more chunk's gradients synchronised.
    void chunk_synchronised(int stage);
    // A DP collective's message (any purpose but PipelineDelivery) has completed: what follows
    // it. `launcher`: the message's src_worker.
    void collective_done(const Purpose& purpose, int launcher);

    const workload::ExperimentSpec& spec_;
    const workload::IterationPlan& plan_;
    const schedule::Schedule& schedule_;
    schedule::PipelineShape shape_;
    workload::ParallelLayout layout_;
    workload::RankLayout ranks_;
    bool fast_ = true;                              // FastPaths::enabled
    std::unique_ptr<network::KeptState> own_kept_;  // the run's own, when none is given
    network::KeptState* kept_ = nullptr;            // what its networks keep (null: no fast path)
    std::unique_ptr<Simulation> own_sim_;           // null on a shared fabric
    Simulation& sim_;
    HandlerId handler_ = 0;
    std::unique_ptr<network::Network> own_network_;  // null on a shared fabric
    network::Network* network_ = nullptr;
    network::Accelerator* accel_ = nullptr;  // network_->accelerator(): null without fast paths
    bool shared_ = false;
    std::uint64_t token_base_ = 0;
    ReplayResult started_;  // decide_fold's part of the result, between start() and finish()
    CollectiveCosts costs_;
    std::vector<std::vector<schedule::PipelineOp>> orders_;  // per stage, shared by dp replicas
    // Batched exchanges (Schedule::exchange_rounds) under Megatron-LM without
    // overlap_p2p_comm: per stage the round of each op; empty: asynchronous sends.
    bool batched_ = false;
    std::vector<std::vector<int>> rounds_;
    // Every chunk's DP gradient reduction after the stage's whole backward, one chunk after
    // another (grad_reduce_after_backward, or Megatron-LM without overlap_grad_reduce).
    bool reduce_after_backward_ = false;
    std::vector<Worker> workers_;
    std::vector<WorkerState> states_;
    std::vector<Input> inputs_;         // [worker * keys_ + arrival key]
    std::size_t keys_ = 0;              // arrival keys per worker
    ReplayScratch* scratch_ = nullptr;  // where workers_ and states_ go back, or null
    // The scratch's entry for this run's placement (own runs with a scratch only), and whether
    // this run's fold is the one kept there (follower_routes_ goes back to it at the end).
    std::shared_ptr<ReplayScratch::Placement> placement_;
    bool fold_kept_ = false;
    std::vector<Message> messages_;
    std::vector<ReplayObserver*> observers_;
    std::vector<FollowerCopier*> copiers_;     // per observer: itself as a FollowerCopier, or null
    std::vector<PassCost> pass_costs_;         // [virtual stage * kPassKinds + pass]
    std::vector<network::GroupId> dp_groups_;  // [stage * tp*cp + member]
    int dp_ranks_ = 1;  // dp x cp: the GPUs of one gradient reduction (dp_cp_group)
    // --overlap-param-gather: per (stage, chunk) whether its parameters are gathered, and the
    // next chunk each stage gathers (one after another on its DP communicator).
    bool param_prefetch_ = false;
    std::vector<std::uint8_t> params_ready_;
    std::vector<int> next_prefetch_;
    void prefetch_parameters(int stage);
    // Sharded data parallelism: the shard group size S (dp without HSDP), the shard groups
    // [(stage * tp*cp + member) * dp/S + g] and the cross-shard (replica) groups
    // [(stage * tp*cp + member) * S + i] (HSDP only).
    int shard_size_ = 1;
    bool sharded_units_ = false;  // ZeRO-2/3 with S > 1: passes run unit by unit
    bool hsdp_ = false;           // sharded with 1 < S < dp
    std::vector<network::GroupId> shard_groups_, replica_groups_;
    std::vector<ShardStream> shard_streams_;  // [(stage * dp/S + g) * 2 + (gather ? 0 : 1)]
    std::vector<std::uint8_t> replica_reduce_started_;  // per stage (HSDP, ZeRO-2/3)
    std::vector<int> bucket_count_;                     // per stage: gradient buckets per chunk
    // Per stage: the isolated time of the DP gradient buckets that run during the last backward
    // pass of a chunk (all but the last), when compute.interference applies; empty otherwise.
    std::vector<Time> overlapped_buckets_;
    std::vector<int> buckets_ready_;  // [(stage * chunks + chunk) * max buckets + b]: replicas
    std::vector<int> buckets_done_;   // [stage * chunks + chunk]: buckets synchronised
    int max_buckets_ = 0;
    std::vector<std::deque<std::size_t>> bucket_queue_;  // per stage: ready buckets (messages)
    std::vector<std::uint8_t> bucket_busy_;              // per stage: a bucket is in flight
    // Step times of overlapped passes, scaled into their spans (PassRecord::step_times points
    // here): per (virtual stage, pass, nominal and overlapped compute and collective).
    std::map<std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t>,
             std::vector<Time>>
        overlapped_steps_;
    std::uint64_t next_pass_id_ = 1;
    std::unique_ptr<DurationModel> duration_model_;  // null: nominal times, no call per pass
    std::vector<RandomStream*> duration_streams_;    // per worker, filled on first use
    std::int64_t step_ = 0;
    Time end_time_ = Time::zero();
    Time origin_ = Time::zero();  // when start() ran
    std::function<void(Time)> on_complete_;
    bool completed_ = false;
    // Calls on_complete_ once, when every worker is done (shared fabrics only).
    void check_complete();
    bool stopped_ = false;
    std::function<bool(Time)> stop_past_;  // stop_when's
    Time stop_every_;
    // Whether some simulated worker has not finished its iteration (replica followers are
    // copied at the end, so their own states never advance and are not asked).
    bool iteration_going() const;
    bool fold_allowed_ = true;
    int members_on_network_ = 1;  // members whose transfers are issued: 1 when folded
    // Replica folding: per replica its class's representative replica; per worker whether it is
    // a follower (not simulated) and, for a representative, its followers (same stage, in replica
    // order, so that two representatives' i-th followers are the same replica). Empty unfolded.
    std::vector<int> rep_replica_;
    std::vector<std::uint8_t> is_follower_;
    std::vector<std::vector<int>> followers_;
    std::string replica_refused_;
    // Replica folding with observers that all copy followers (FollowerCopier):
    // no notification is repeated for a follower; copy_followers() copies at the end instead.
    bool copy_followers_ = false;
    void copy_followers();
    // Replica folding with observers that only sum per link (Accelerator::accounts_in_bulk): the
    // representatives' pipeline messages counted per (sending worker, receiving worker, bytes);
    // their followers' copies are accounted once per entry at the end (flush_follower_sends).
    bool bulk_accounting_ = false;
    std::map<std::tuple<int, int, std::int64_t>, std::int64_t> follower_sends_;
    // Per (representative worker, its receiver): the followers' GPU pairs' routes, every
    // follower's members in turn (Accelerator::send_routes).
    std::map<std::pair<int, int>, std::shared_ptr<const network::Accelerator::SendRoutes>>
        follower_routes_;
    void account_follower_sends(int worker, int dst, Bytes bytes, std::int64_t count);
    void flush_follower_sends();
};

}  // namespace cs::replay
