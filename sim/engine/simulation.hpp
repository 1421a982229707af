// The discrete-event engine: one event queue and clock per Simulation, no global state.
//
// Events are small values ordered by (time, insertion sequence), so two runs of the same input
// process events in the same order. An event names a handler (registered once, by pointer) and
// carries a kind and two 64-bit payload words that the handler interprets; no allocation happens
// per event. Handlers are not owned by the Simulation and must outlive run().
//
// The queue is a calendar in front of a heap. Keys are 16 bytes (time, order << 32 | slot); the
// handler, kind and payload words wait in a slot array (slots are recycled through a free list).
//  - A "year" of buckets (a power of two of them, each a power-of-two span of time, unsorted)
//    holds the keys from near_end_ to year_end_. When the keys before near_end_ are used up, the
//    earliest occupied bucket (found through two levels of bit flags) becomes the run: sorted in
//    place, latest first, and popped from its end.
//  - The near heap, a 4-ary min-heap whose four children of a node fill one 64-byte cache line,
//    holds the keys scheduled before near_end_ after their bucket was taken. The next event is the
//    earlier of the run's last key and the heap's root. An event taken from the heap stays at its
//    root while its handler runs: a first successor that belongs in the heap replaces it with a
//    single sift (a "hold" costs one pass instead of a pop and a push).
//  - far_ holds, unsorted, the keys after the year. When the year is used up, the next one is
//    laid out over far_'s keys: four buckets per key (at most 4,096), and long enough that most
//    successors of its events fall inside it.
// An event is thus filed once or twice and sorted among the few keys of its bucket, instead of
// sifted through log4(n) levels. Keys are unique and each structure yields them in key order, so
// the processing order is the same as with any other exact priority queue.
#pragma once

#include <array>
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
    // A hint, called before the engine hands out the event before it: `event` (its time, kind
    // and payload words) is likely the next one this handler gets. A handler may ask for the
    // memory that event will read (__builtin_prefetch), so that the misses overlap the work in
    // between; it must change nothing (the event may come later, or its data change first).
    // Given only when some handler of the simulation wants_hints() (asked at add_handler); a
    // simulation without one runs the engine loop it had before hints.
    virtual void prefetch(const Event& event) const { (void)event; }
    virtual bool wants_hints() const { return false; }
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
    // Pending events, excluding the one being processed (counts the buckets: not for a hot path).
    std::size_t pending() const;
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

    // A pending event's key. Compared as one unsigned 128-bit number (time high, order_slot low),
    // hence the member order on a little-endian machine.
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

    // Files a key at or after near_end_ in its bucket of the year, or in far_ after the year.
    void file(Key k);
    // Out of line (noinline: an inlined call here would make schedule_at() save registers).
    [[gnu::noinline]] void file_far(Key k);
    [[gnu::noinline, gnu::cold]] void file_growing(Key k, std::uint64_t j);
    // Puts a new key where it belongs: the root's place, the near heap, a bucket or far_.
    void place(Key k);
    [[gnu::noinline]] void push_near(Key k);
    [[gnu::noinline]] void schedule_in_new_slot(Time at, HandlerId handler, std::uint32_t kind,
                                                std::uint64_t a, std::uint64_t b);
    // Makes the earliest occupied bucket the run (the run and the near heap are empty), starting a
    // new year from far_ first if the year is used up; returns false when nothing is pending.
    bool advance();
    void new_year();
    // Ends the event last processed: drops its key if no successor took its place, and frees its
    // slot if no successor took it.
    void finish_event();
    // Puts `k` in place of the root (which is overwritten) and restores the heap order.
    void sift_from_root(Key k);
    void sift_up(std::size_t i, Key k);
    void drop_taken_root();
    void grow_keys(std::size_t capacity);
    std::uint32_t new_slot();
    void renumber();
    std::uint64_t next_order();
    [[gnu::noinline, gnu::cold]] void schedule_rare(Time at, HandlerId handler, std::uint32_t kind,
                                                    std::uint64_t a, std::uint64_t b);
    [[noreturn, gnu::cold]] void throw_time_went_backwards() const;
    // step(), when hinting_: tells the handler of the key likely to be next to prefetch it.
    void hint_next() const;
    // step() with or without hint_next() (run() chooses once, outside its loop).
    template <bool kHint>
    bool step_as();

    // The near heap: a 4-ary min-heap of the keys scheduled before near_end_ since the run was
    // taken (with the run, every pending key before near_end_). keys_ points 3 entries into a
    // 64-byte aligned block, so that the children 4i+1 .. 4i+4 of every node share a cache line.
    std::unique_ptr<Key[], AlignedDelete> key_block_;
    Key* keys_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
    bool root_taken_ = false;  // keys_[0] is the event being (or last) processed
    // The slot of the event being processed: its handler's first schedule_at() takes it over.
    std::uint32_t held_slot_ = 0;
    bool holding_ = false;
    // The year: bucket j < bucket_count_ holds, unsorted, the keys from year_start_ + j * 2^shift_
    // (inclusive) to year_start_ + (j + 1) * 2^shift_; buckets that end at or before near_end_
    // are empty. Bit j % 64 of occupied_[j / 64] is set when bucket j is not empty, bit
    // w of occupied_words_ when occupied_[w] is not 0. far_ holds, unsorted, the keys at or after
    // year_end_.
    struct Bucket {  // a growable array of keys, 16 bytes so that four share a cache line
        std::unique_ptr<Key[]> keys;
        std::uint32_t size = 0;
        std::uint32_t capacity = 0;
    };
    [[gnu::cold]] static void grow(Bucket& bucket);
    std::vector<Bucket> buckets_;
    // The bucket last taken from the year, sorted latest first (its earliest key is last): all
    // its keys are before near_end_, like the near heap's. The next event is the earlier of its
    // last key and the heap's root.
    Bucket run_;
    std::array<std::uint64_t, 64> occupied_{};
    std::uint64_t occupied_words_ = 0;
    std::size_t bucket_count_ = 0;
    std::uint64_t near_end_ = 0;
    std::uint64_t year_start_ = 0;
    std::uint64_t year_end_ = 0;
    int shift_ = 0;
    std::vector<Key> far_;
    std::vector<Payload> payloads_;
    std::vector<std::uint32_t> free_slots_;
    std::vector<EventHandler*> handlers_;
    std::size_t handler_count_ = 0;  // handlers_.size(), read by every schedule_at()
    Time now_ = Time::zero();
    std::uint64_t next_seq_ = 0;
    std::uint64_t processed_ = 0;
    bool stopped_ = false;
    bool hinting_ = false;  // a handler wants_hints()
    bool shuffle_ = false;
    std::uint32_t shuffle_key_ = 0;
    std::uint64_t seed_ = 0;
    std::map<std::uint64_t, RandomStream> random_streams_;  // node-based: references stay valid
};

}  // namespace cs
