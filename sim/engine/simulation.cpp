#include "engine/simulation.hpp"

#include <cstdint>

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
constexpr std::size_t kCacheLine = 64;

// (at, order) as one 128-bit comparison, which compiles to cmp/sbb without a branch. Times are
// never negative (nothing is scheduled before now() >= 0), so comparing them unsigned is exact.
inline bool before(const Event& x, const Event& y) {
    __extension__ using Key = unsigned __int128;
    const Key kx = Key{static_cast<std::uint64_t>(x.at.count_ps())} << 64 | x.order;
    const Key ky = Key{static_cast<std::uint64_t>(y.at.count_ps())} << 64 | y.order;
    return kx < ky;
}

// Branch-free choice: which child is smaller is a coin toss, and a mispredicted branch per heap
// level cost more than the whole comparison.
inline std::size_t choose(bool condition, std::size_t if_true, std::size_t if_false) {
    return if_false ^ ((if_false ^ if_true) & (0 - static_cast<std::size_t>(condition)));
}
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
    const Event e{at, shuffle_ ? mix(seq ^ shuffle_seed_) : seq, handler, kind, a, b};
    if (root_taken_) {
        root_taken_ = false;
        sift_from_root(e);
    } else {
        push(e);
    }
}

void Simulation::push(const Event& e) {
    heap_.push_back(e);
    sift_up(heap_.size() - 1, e);
}

// Moves the hole at `i` up past every parent that `e` precedes, then fills it with `e`.
void Simulation::sift_up(std::size_t i, const Event& e) {
    Event* h = heap_.data();
    while (i > 0) {
        const std::size_t parent = (i - 1) / kArity;
        if (!before(e, h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
}

void Simulation::sift_from_root(const Event& e) {
    Event* h = heap_.data();
    const std::size_t n = heap_.size();
    const auto base = reinterpret_cast<std::uintptr_t>(h);
    // Bottom-up: the hole at the root follows the smaller children down to a leaf, then `e` rises
    // from there. A new event usually belongs near the bottom, so this saves the comparison with
    // `e` at every level. The grandchildren are fetched one level ahead because the branch-free
    // descent gives the processor no speculative loads to overlap (prefetching past the end of
    // the heap is harmless, hence no bounds check).
    std::size_t i = 0;
    for (;;) {
        const std::size_t first = i * kArity + 1;
        if (first + kArity > n) break;
        const std::uintptr_t grandchildren = base + (first * kArity + 1) * sizeof(Event);
        for (std::size_t offset = 0; offset < kArity * kArity * sizeof(Event); offset += kCacheLine)
            __builtin_prefetch(reinterpret_cast<const void*>(grandchildren + offset));
        const std::size_t min01 = first + before(h[first + 1], h[first]);
        const std::size_t min23 = first + 2 + before(h[first + 3], h[first + 2]);
        const std::size_t best = choose(before(h[min23], h[min01]), min23, min01);
        h[i] = h[best];
        i = best;
    }
    const std::size_t first = i * kArity + 1;
    if (first < n) {  // a last node with fewer than kArity children
        std::size_t best = first;
        for (std::size_t c = first + 1; c < n; ++c)
            if (before(h[c], h[best])) best = c;
        h[i] = h[best];
        i = best;
    }
    sift_up(i, e);
}

void Simulation::drop_taken_root() {
    root_taken_ = false;
    const Event last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_from_root(last);
}

bool Simulation::step() {
    if (root_taken_) drop_taken_root();
    if (heap_.empty()) return false;
    // A copy: the handler's first schedule_at() overwrites the root.
    const Event e = heap_.front();
    if (e.at < now_) throw SimulationError("engine", "time went backwards", now_);
    root_taken_ = true;
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
    for (;;) {
        if (root_taken_) drop_taken_root();
        if (stopped_ || heap_.empty() || heap_.front().at > limit) break;
        step();
    }
}

}  // namespace cs
