// The replay's private state types, shared by its translation units (replay.cpp: the pipeline's
// events; replay_build.cpp: construction; replay_fold.cpp: folding; replay_dp.cpp: data
// parallelism): a worker's state and what a ReplayScratch keeps.
#pragma once

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "replay/replay.hpp"

namespace cs::replay {

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
    // Its part of the iteration ended: every op, the optimizer step and the parameters' gather.
    bool done() const { return finished_ops && optimizer_done && parameters_done; }
    Time last_compute_end = Time::zero();
    // The host model: when the worker's host thread is free to start issuing its next pass (and
    // Replay::Input::arrived_at: when each pass's input arrived; the host waits for it before
    // issuing).
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

// The passes a worker runs at once, at most an overlapped group's: a ring in the worker's state
// (a deque kept them in blocks of their own, one more dependent load for each pass's end, and
// blocks that wander through the heap as passes come and go).
class RunningPasses {
  public:
    static constexpr std::size_t kCapacity = schedule::kMaxOverlapGroup;
    bool empty() const { return count_ == 0; }
    std::size_t size() const { return count_; }
    PassRecord& front() { return slots_[head_]; }
    PassRecord& operator[](std::size_t k) { return slots_[(head_ + k) % kCapacity]; }
    // A new record at the back, as default-constructed.
    PassRecord& emplace_back() {
        if (count_ == kCapacity)
            throw SimulationError("replay", "more passes running at once than a group holds");
        PassRecord& r = slots_[(head_ + count_++) % kCapacity];
        r = PassRecord{};
        return r;
    }
    void pop_front() {
        head_ = (head_ + 1) % kCapacity;
        --count_;
    }
    void clear() { head_ = count_ = 0; }

  private:
    std::array<PassRecord, kCapacity> slots_{};
    std::size_t head_ = 0, count_ = 0;
};

struct Replay::WorkerState : WorkerScalars {
    // The passes running: one, or an overlapped group (PipelineOp::overlap) laid back to back;
    // each ends in turn. `held`: the group's finished passes, whose outputs leave with the last.
    RunningPasses running;
    std::vector<PassRecord> held;
    std::vector<int> backward_done;         // per chunk
    std::vector<std::int64_t> unit_gather;  // [k]: the all-gather unit k waits for, -1: not issued
    // Batched exchanges: messages of this round's passes not posted yet.
    std::vector<std::int32_t> held_sends;

    // The state of a new run, every container sized as in a newly built state (`chunks`
    // chunks), keeping their storage.
    void reset(std::size_t chunks) {
        static_cast<WorkerScalars&>(*this) = WorkerScalars{};
        running.clear();
        held.clear();
        backward_done.assign(chunks, 0);
        unit_gather.clear();
        held_sends.clear();
    }
};

struct ReplayScratch::Parts {
    struct Entry {
        std::vector<Worker> workers;
        std::vector<Replay::WorkerState> states;
        std::vector<Replay::Input> inputs;
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

}  // namespace cs::replay
