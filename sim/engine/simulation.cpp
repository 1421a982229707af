#include "engine/simulation.hpp"

#include "core/errors.hpp"

namespace cs {
namespace {
// splitmix64: a bijection on 64-bit values, so shuffled orders stay unique.
std::uint64_t mix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
constexpr std::size_t kArity = 4;
}  // namespace

HandlerId Simulation::add_handler(EventHandler& handler) {
    handlers_.push_back(&handler);
    return static_cast<HandlerId>(handlers_.size() - 1);
}

void Simulation::schedule_at(Time at, HandlerId handler, std::uint32_t kind, std::uint64_t a,
                             std::uint64_t b) {
    if (at < now_)
        throw SimulationError("engine", "event scheduled in the past (at " + format_time(at) + ")",
                              now_);
    if (handler >= handlers_.size())
        throw SimulationError("engine", "event for an unregistered handler", now_);
    const std::uint64_t seq = next_seq_++;
    push(Event{at, shuffle_ ? mix(seq ^ shuffle_seed_) : seq, handler, kind, a, b});
}

void Simulation::push(const Event& e) {
    heap_.push_back(e);
    std::size_t i = heap_.size() - 1;
    while (i > 0) {
        const std::size_t parent = (i - 1) / kArity;
        if (!before(e, heap_[parent])) break;
        heap_[i] = heap_[parent];
        i = parent;
    }
    heap_[i] = e;
}

Event Simulation::pop() {
    Event top = heap_.front();
    Event last = heap_.back();
    heap_.pop_back();
    const std::size_t n = heap_.size();
    if (n == 0) return top;
    std::size_t i = 0;
    for (;;) {
        const std::size_t first = i * kArity + 1;
        if (first >= n) break;
        std::size_t best = first;
        const std::size_t end = first + kArity < n ? first + kArity : n;
        for (std::size_t c = first + 1; c < end; ++c)
            if (before(heap_[c], heap_[best])) best = c;
        if (!before(heap_[best], last)) break;
        heap_[i] = heap_[best];
        i = best;
    }
    heap_[i] = last;
    return top;
}

bool Simulation::step() {
    if (heap_.empty()) return false;
    const Event e = pop();
    if (e.at < now_) throw SimulationError("engine", "time went backwards", now_);
    now_ = e.at;
    ++processed_;
    handlers_[e.handler]->on_event(*this, e);
    return true;
}

void Simulation::run() {
    stopped_ = false;
    while (!stopped_ && step()) {
    }
}

void Simulation::run_until(Time limit) {
    stopped_ = false;
    while (!stopped_ && !heap_.empty() && heap_.front().at <= limit)
        step();
}

}  // namespace cs
