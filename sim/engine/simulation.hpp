// The discrete-event engine: one event queue and clock per Simulation, no global state.
//
// Events are small values ordered by (time, insertion sequence), so two runs of the same input
// process events in the same order. An event names a handler (registered once, by pointer) and
// carries a kind and two 64-bit payload words that the handler interprets; no allocation happens
// per event. Handlers are not owned by the Simulation and must outlive run().
//
// The queue is a 4-ary min-heap of 16-byte keys (time, order << 32 | slot); the handler, kind and
// payload words wait in a slot array (slots are recycled through a free list), so the four
// children of a node fill one 64-byte cache line and a sift moves 16 bytes per level. The event
// being processed stays at the root while its handler runs: the handler's first schedule_at()
// reuses its slot and replaces its key with a single sift from the root (a "hold" costs one pass
// instead of a pop and a push); if the handler schedules nothing, the root is removed before the
// next event. Keys are unique, so the processing order is the same as with any other exact
// priority queue.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/units.hpp"
#include "engine/random.hpp"

namespace cs {

class Simulation;

using HandlerId = std::uint32_t;

struct Event {
    Time at;
    // Insertion sequence (or its shuffled image in tie-shuffle mode), 32 bits wide: after 2^32
    // insertions the pending events are relabelled 0, 1, ... in their (time, order) order.
    std::uint64_t order = 0;
    HandlerId handler = 0;
    std::uint32_t kind = 0;
    std::uint64_t a = 0;
    std::uint64_t b = 0;
};

class EventHandler {
  public:
    virtual ~EventHandler() = default;
    virtual void on_event(Simulation& sim, const Event& event) = 0;
};

class Simulation {
  public:
    Simulation() = default;
    // `seed` is the experiment's seed (its `seed` key); every random stream derives from it.
    explicit Simulation(std::uint64_t seed) : seed_(seed) {}
    Simulation(const Simulation&) = delete;
    Simulation& operator=(const Simulation&) = delete;

    HandlerId add_handler(EventHandler& handler);

    // Schedules an event at absolute time `at`; throws SimulationError if `at` is before now().
    void schedule_at(Time at, HandlerId handler, std::uint32_t kind, std::uint64_t a = 0,
                     std::uint64_t b = 0);
    void schedule_in(Time delay, HandlerId handler, std::uint32_t kind, std::uint64_t a = 0,
                     std::uint64_t b = 0) {
        schedule_at(now_ + delay, handler, kind, a, b);
    }

    // Processes events until the queue is empty (or stop() was called by a handler).
    void run();
    // Processes events with time <= limit; the clock ends at the last processed event.
    void run_until(Time limit);
    // Processes one event; returns false when the queue is empty.
    bool step();
    void stop() { stopped_ = true; }

    Time now() const { return now_; }
    std::uint64_t events_processed() const { return processed_; }
    std::size_t pending() const { return size_ - (root_taken_ ? 1 : 0); }
    // Preallocates room for `events` pending events.
    void reserve(std::size_t events);

    // Debug switch: order same-time events by a seeded permutation of their insertion sequence
    // instead of the sequence itself. Models must not depend on the order of simultaneous events
    // beyond what their own sequencing guarantees; tests run with this on to prove it.
    void set_tie_shuffle(std::uint64_t seed);

    std::uint64_t seed() const { return seed_; }
    // Random stream `stream_id` of this simulation, created on first use from (seed(), id) and
    // owned by the Simulation; the reference stays valid as long as the Simulation. The same
    // (seed, id) gives the same sequence in any Simulation; different ids are independent. Users
    // keep their ids apart by putting their domain in the high bits (see replay's
    // duration_stream_id). Not for the hot path: callers keep the reference.
    RandomStream& random(std::uint64_t stream_id);

  private:
    friend struct SimulationTestAccess;

    // Heap entry. Compared as one unsigned 128-bit number (time high, order_slot low), hence the
    // member order on a little-endian machine.
    struct alignas(16) Key {
        std::uint64_t order_slot;  // order << 32 | slot in payloads_
        std::uint64_t at_ps;
    };
    struct alignas(32) Payload {  // one per cache-line half, never split across two
        HandlerId handler;
        std::uint32_t kind;
        std::uint64_t a;
        std::uint64_t b;
    };
    struct AlignedDelete {
        void operator()(Key* p) const;
    };

    // schedule_at() for an event that gets a new slot and a new place in the heap.
    void push(Time at, HandlerId handler, std::uint32_t kind, std::uint64_t a, std::uint64_t b);
    // Puts `k` in place of the root (which is overwritten) and restores the heap order.
    void sift_from_root(Key k);
    void sift_up(std::size_t i, Key k);
    void drop_taken_root();
    void grow_keys(std::size_t capacity);
    std::uint32_t new_slot();
    void renumber();
    std::uint64_t next_order();
    [[gnu::cold]] void schedule_rare(Time at, HandlerId handler, std::uint32_t kind,
                                     std::uint64_t a, std::uint64_t b);
    [[noreturn, gnu::cold]] void throw_time_went_backwards() const;

    // 4-ary min-heap. keys_ points 3 entries into a 64-byte aligned block, so that the children
    // 4i+1 .. 4i+4 of every node share a cache line.
    std::unique_ptr<Key[], AlignedDelete> key_block_;
    Key* keys_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
    bool root_taken_ = false;  // keys_[0] is the event being (or last) processed
    std::vector<Payload> payloads_;
    std::vector<std::uint32_t> free_slots_;
    std::vector<EventHandler*> handlers_;
    Time now_ = Time::zero();
    std::uint64_t next_seq_ = 0;
    std::uint64_t processed_ = 0;
    bool stopped_ = false;
    bool shuffle_ = false;
    std::uint32_t shuffle_key_ = 0;
    std::uint64_t seed_ = 0;
    std::map<std::uint64_t, RandomStream> random_streams_;  // node-based: references stay valid
};

}  // namespace cs
