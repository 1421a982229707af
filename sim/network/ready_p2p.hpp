// Point-to-point messages under `flow`, ready to start: the network's fast path for pipeline
// messages. Per (source, destination) GPU pair, one 64-byte record holds what starting the
// message's single flow needs: the delay from the send to the flow's start, the plan's flow
// template (for observers and detours, read only by them) and the flow's solver path (link chains
// merged, links every folded member crosses repeated: Network's solver_path). A record is found
// through a per-source memo of the last few destinations, one 32-byte entry per GPU. Without it
// a message reads its plan, the plan's phase, the phase's flow, the flow's route and each route
// link's chain: six dependent loads from memory far apart, for each of the 3.1 million messages of
// a 16,384-GPU iteration. Records depend on the routes, the chains and the fold: the network
// forgets them (clear()) when any of those changes, and a message sent before starts its flow
// from the template as any other (current() is false for its record, which stays readable).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/units.hpp"
#include "network/collectives.hpp"
#include "topology/cluster.hpp"

namespace cs::network::detail {

struct alignas(64) ReadyP2p {
    static constexpr std::uint32_t kMaxHops = 10;
    Time delay;                            // from the send to the flow's start
    const FlowTemplate* flow = nullptr;    // the plan's one flow (bytes_per_size 1, no rate cap)
    std::uint32_t generation = 0;          // ReadyP2ps::clear()s before it was made
    std::uint32_t hops = 0;                // solver links in `path`
    topology::LinkId path[kMaxHops] = {};  // the solver path
    std::span<const topology::LinkId> solver_path() const { return {path, hops}; }
};
static_assert(sizeof(ReadyP2p) == 64);

class ReadyP2ps {
  public:
    // find(): a pair not seen since the last clear() / a pair whose plan has no record (not a
    // single flow of a message's whole size without a rate cap, or a path too long).
    static constexpr std::uint32_t kUnknown = 0xfffffffeu;
    static constexpr std::uint32_t kNone = 0xffffffffu;

    // The record of src -> dst, kNone, or kUnknown (then the caller makes it: remember()).
    std::uint32_t find(int src, int dst) {
        if (memo_.empty()) return kUnknown;
        Memo& m = memo_[static_cast<std::size_t>(src)];
        for (std::uint32_t w = 0; w < kWays; ++w)
            if (m.dst[w] == dst) return m.index[w];
        const auto it = index_of_.find(key(src, dst));
        if (it == index_of_.end()) return kUnknown;
        note(m, dst, it->second);
        return it->second;
    }
    // Records src -> dst's record (`ready`, or none when null) for a cluster of `gpus` GPUs, and
    // returns its index as find() will.
    std::uint32_t remember(int src, int dst, const ReadyP2p* ready, int gpus) {
        if (memo_.empty()) memo_.resize(static_cast<std::size_t>(gpus));
        std::uint32_t index = kNone;
        if (ready) {
            index = static_cast<std::uint32_t>(records_.size());
            records_.push_back(*ready);
            records_.back().generation = generation_;
        }
        index_of_.emplace(key(src, dst), index);
        note(memo_[static_cast<std::size_t>(src)], dst, index);
        return index;
    }
    const ReadyP2p& operator[](std::uint32_t index) const { return records_[index]; }
    // Whether `r` was made since the last clear().
    bool current(const ReadyP2p& r) const { return r.generation == generation_; }
    // Forgets every pair (records made stay readable: messages in flight hold their index).
    void clear() {
        memo_.clear();
        index_of_.clear();
        ++generation_;
    }

    // Groups: the records of a message's parts whose flows all start after one delay
    // (Network's send_together under `flow`), held from the send to that start. begin_group()
    // gives an empty list to fill (a group given up needs nothing more), keep_group() keeps it
    // and returns its number for group(), and close_group() frees it once read.
    std::vector<std::uint32_t>& begin_group() {
        forming_.clear();
        return forming_;
    }
    std::uint32_t keep_group() {
        std::uint32_t g;
        if (free_groups_.empty()) {
            g = static_cast<std::uint32_t>(groups_.size());
            groups_.emplace_back();
        } else {
            g = free_groups_.back();
            free_groups_.pop_back();
        }
        groups_[g].swap(forming_);  // the lists' storage goes round: nothing allocated once warm
        return g;
    }
    const std::vector<std::uint32_t>& group(std::uint32_t g) const { return groups_[g]; }
    // Asks for group g's records ahead of its start (a hint) and returns its first part's record
    // (kNone for an empty group).
    std::uint32_t prefetch_group(std::uint32_t g) const {
        for (const std::uint32_t r : groups_[g])
            __builtin_prefetch(&records_[r]);
        return groups_[g].empty() ? kNone : groups_[g][0];
    }
    void close_group(std::uint32_t g) { free_groups_.push_back(g); }

  private:
    static constexpr std::uint32_t kWays = 4;
    struct Memo {  // the newest first
        int dst[kWays] = {-1, -1, -1, -1};
        std::uint32_t index[kWays] = {};
    };
    static std::uint64_t key(int src, int dst) {
        return static_cast<std::uint64_t>(static_cast<std::uint32_t>(src)) << 32 |
               static_cast<std::uint32_t>(dst);
    }
    static void note(Memo& m, int dst, std::uint32_t index) {
        for (std::uint32_t w = kWays - 1; w > 0; --w) {
            m.dst[w] = m.dst[w - 1];
            m.index[w] = m.index[w - 1];
        }
        m.dst[0] = dst;
        m.index[0] = index;
    }
    std::vector<Memo> memo_;  // per source GPU, empty until the first remember()
    std::vector<ReadyP2p> records_;
    std::uint32_t generation_ = 0;
    std::unordered_map<std::uint64_t, std::uint32_t> index_of_;  // every pair seen
    std::vector<std::uint32_t> forming_;                         // begin_group()'s list
    std::vector<std::vector<std::uint32_t>> groups_;
    std::vector<std::uint32_t> free_groups_;
};

}  // namespace cs::network::detail
