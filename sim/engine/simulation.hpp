// The discrete-event engine: one event queue and clock per Simulation, no global state.
//
// Events are small values ordered by (time, insertion sequence), so two runs of the same input
// process events in the same order. An event names a handler (registered once, by pointer) and
// carries a kind and two 64-bit payload words that the handler interprets; no allocation happens
// per event. Handlers are not owned by the Simulation and must outlive run().
//
// The queue is a 4-ary min-heap of events. The event being processed stays at the root while its
// handler runs: the handler's first schedule_at() replaces it with a single sift from the root
// (a "hold" costs one pass instead of a pop and a push); if the handler schedules nothing, the
// root is removed before the next event. Keys are unique, so the processing order is the same as
// with any other exact priority queue.
#pragma once

#include <cstdint>
#include <vector>

#include "core/units.hpp"

namespace cs {

class Simulation;

using HandlerId = std::uint32_t;

struct Event {
    Time at;
    std::uint64_t order = 0;  // insertion sequence (or its shuffled image in tie-shuffle mode)
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
    std::size_t pending() const { return heap_.size() - (root_taken_ ? 1 : 0); }
    void reserve(std::size_t events) { heap_.reserve(events); }

    // Debug switch: order same-time events by a seeded permutation of their insertion sequence
    // instead of the sequence itself. Models must not depend on the order of simultaneous events
    // beyond what their own sequencing guarantees; tests run with this on to prove it.
    void set_tie_shuffle(std::uint64_t seed) {
        shuffle_ = true;
        shuffle_seed_ = seed;
    }

  private:
    void push(const Event& e);
    // Puts `e` in place of the root (which is overwritten) and restores the heap order.
    void sift_from_root(const Event& e);
    void sift_up(std::size_t i, const Event& e);
    void drop_taken_root();

    std::vector<Event> heap_;  // 4-ary min-heap on (at, order)
    bool root_taken_ = false;  // heap_.front() is the event being (or last) processed
    std::vector<EventHandler*> handlers_;
    Time now_ = Time::zero();
    std::uint64_t next_seq_ = 0;
    std::uint64_t processed_ = 0;
    bool stopped_ = false;
    bool shuffle_ = false;
    std::uint64_t shuffle_seed_ = 0;
};

}  // namespace cs
