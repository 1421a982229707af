#include "engine/simulation.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <new>
#include <numeric>

#include "core/errors.hpp"
#include "core/hash.hpp"

namespace cs {
namespace {
constexpr std::size_t kArity = 4;
constexpr std::size_t kCacheLine = 64;
// Heaps larger than this (half a first-level data cache) prefetch during the sift.
constexpr std::size_t kPrefetchFromBytes = 16 * 1024;
// keys_[0] sits this many entries into its aligned block, so that keys_[1] starts a cache line.
constexpr std::size_t kRootOffset = kCacheLine / 16 - 1;
constexpr int kSlotBits = 32;
constexpr std::uint64_t kSlotMask = (std::uint64_t{1} << kSlotBits) - 1;
constexpr std::uint64_t kOrderLimit = std::uint64_t{1} << (64 - kSlotBits);
__extension__ using U128 = unsigned __int128;

// A bijection on 32-bit values (Wellons' lowbias32), so shuffled orders stay unique.
std::uint32_t mix32(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    return x ^ (x >> 16);
}

// (at, order, slot) as one 128-bit comparison, which compiles to cmp/sbb without a branch. Times
// are never negative (nothing is scheduled before now() >= 0), so comparing them unsigned is exact.
template <class K>  // K is Simulation::Key, private to the class
inline bool before(const K& x, const K& y) {
    return std::bit_cast<U128>(x) < std::bit_cast<U128>(y);
}

// Branch-free choice: which child is smaller is a coin toss, and a mispredicted branch per heap
// level cost more than the whole comparison.
inline std::size_t mask(bool condition) {
    return 0 - static_cast<std::size_t>(condition);
}
inline std::size_t choose(bool condition, std::size_t if_true, std::size_t if_false) {
    return if_false ^ ((if_false ^ if_true) & mask(condition));
}
}  // namespace

void Simulation::AlignedDelete::operator()(Key* p) const {
    ::operator delete (p, std::align_val_t{kCacheLine});
}

HandlerId Simulation::add_handler(EventHandler& handler) {
    handlers_.push_back(&handler);
    return static_cast<HandlerId>(handlers_.size() - 1);
}

void Simulation::set_tie_shuffle(std::uint64_t seed) {
    shuffle_ = true;
    shuffle_key_ = static_cast<std::uint32_t>(splitmix64(seed));  // every bit of the seed
}

RandomStream& Simulation::random(std::uint64_t stream_id) {
    auto it = random_streams_.find(stream_id);
    if (it == random_streams_.end())
        it = random_streams_.try_emplace(stream_id, seed_, stream_id).first;
    return it->second;
}

void Simulation::reserve(std::size_t events) {
    if (events > capacity_) grow_keys(events);
    payloads_.reserve(events);
    free_slots_.reserve(events);
}

void Simulation::grow_keys(std::size_t capacity) {
    const std::size_t bytes = (capacity + kRootOffset) * sizeof(Key);
    std::unique_ptr<Key[], AlignedDelete> block(
        static_cast<Key*>(::operator new (bytes, std::align_val_t{kCacheLine})));
    Key* keys = block.get() + kRootOffset;
    if (size_ > 0) std::memcpy(keys, keys_, size_ * sizeof(Key));
    key_block_ = std::move(block);
    keys_ = keys;
    capacity_ = capacity;
}

std::uint32_t Simulation::new_slot() {
    if (!free_slots_.empty()) {
        const std::uint32_t slot = free_slots_.back();
        free_slots_.pop_back();
        return slot;
    }
    if (payloads_.size() > kSlotMask)
        throw SimulationError("engine", "more than 2^32 pending events", now_);
    payloads_.emplace_back();
    return static_cast<std::uint32_t>(payloads_.size() - 1);
}

// The rare cases of schedule_at, kept out of its way: errors, and orders running out.
void Simulation::schedule_rare(Time at, HandlerId handler, std::uint32_t kind, std::uint64_t a,
                               std::uint64_t b) {
    if (handler >= handlers_.size())
        throw SimulationError("engine", "event for an unregistered handler", now_);
    if (at < now_)
        throw SimulationError("engine", "event scheduled in the past (at " + format_time(at) + ")",
                              now_);
    renumber();
    schedule_at(at, handler, kind, a, b);
}

void Simulation::throw_time_went_backwards() const {
    throw SimulationError("engine", "time went backwards", now_);
}

// Orders are 32 bits wide: once they run out, the pending events are relabelled with their ranks,
// which keeps every pairwise order (so the heap stays valid) and frees the orders above them.
void Simulation::renumber() {
    std::vector<std::uint32_t> by_key(size_);
    std::iota(by_key.begin(), by_key.end(), 0U);
    std::sort(by_key.begin(), by_key.end(), [this](std::uint32_t x, std::uint32_t y) {
        return std::bit_cast<U128>(keys_[x]) < std::bit_cast<U128>(keys_[y]);
    });
    for (std::size_t rank = 0; rank < size_; ++rank) {
        Key& k = keys_[by_key[rank]];
        k.order_slot = static_cast<std::uint64_t>(rank) << kSlotBits | (k.order_slot & kSlotMask);
    }
    next_seq_ = size_;
}

std::uint64_t Simulation::next_order() {
    const std::uint64_t seq = next_seq_++;
    return shuffle_ ? mix32(static_cast<std::uint32_t>(seq) ^ shuffle_key_) : seq;
}

void Simulation::schedule_at(Time at, HandlerId handler, std::uint32_t kind, std::uint64_t a,
                             std::uint64_t b) {
    if (at < now_ || handler >= handlers_.size() || next_seq_ == kOrderLimit) [[unlikely]]
        return schedule_rare(at, handler, kind, a, b);
    if (!root_taken_) return push(at, handler, kind, a, b);
    // The handler's first successor takes over the slot of the event being processed.
    root_taken_ = false;
    const std::uint64_t slot = keys_[0].order_slot & kSlotMask;
    payloads_[slot] = Payload{handler, kind, a, b};
    sift_from_root(
        Key{next_order() << kSlotBits | slot, static_cast<std::uint64_t>(at.count_ps())});
}

void Simulation::push(Time at, HandlerId handler, std::uint32_t kind, std::uint64_t a,
                      std::uint64_t b) {
    const std::uint32_t slot = new_slot();
    payloads_[slot] = Payload{handler, kind, a, b};
    if (size_ == capacity_) grow_keys(std::max<std::size_t>(16, 2 * capacity_));
    sift_up(size_++,
            Key{next_order() << kSlotBits | slot, static_cast<std::uint64_t>(at.count_ps())});
}

// Moves the hole at `i` up past every parent that `k` precedes, then fills it with `k`.
void Simulation::sift_up(std::size_t i, Key k) {
    Key* h = keys_;
    while (i > 0) {
        const std::size_t parent = (i - 1) / kArity;
        if (!before(k, h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = k;
}

void Simulation::sift_from_root(Key k) {
    // Bottom-up: the hole at the root follows the smaller children down to a leaf, then `k` rises
    // from there. A new event usually belongs near the bottom, so this saves the comparison with
    // `k` at every level. Positions are byte offsets: x86 addressing scales an index by at most 8,
    // so 16-byte indices would cost a shift per access.
    constexpr std::size_t kKey = sizeof(Key);
    char* const base = reinterpret_cast<char*>(keys_);
    const auto at = [base](std::size_t offset) -> Key& {
        return *reinterpret_cast<Key*>(base + offset);
    };
    const std::size_t end = size_ * kKey;
    // Moves the smallest of the four children of `hole` up into it; returns its position.
    const auto promote_min_child = [&](std::size_t hole, std::size_t first) {
        const std::size_t min01 = first + (kKey & mask(before(at(first + kKey), at(first))));
        const std::size_t min23 =
            first + 2 * kKey + (kKey & mask(before(at(first + 3 * kKey), at(first + 2 * kKey))));
        const std::size_t best = choose(before(at(min23), at(min01)), min23, min01);
        at(hole) = at(best);
        return best;
    };
    // Once the heap is out of the first-level cache, the grandchildren are fetched one level
    // ahead: the branch-free descent gives the processor no speculative loads to overlap
    // (prefetching past the end of the heap is harmless, hence no bounds check).
    const auto descend = [&]<bool kPrefetch>(std::size_t hole) {
        const std::size_t last_full_first = end - kArity * kKey;  // called with end > that
        for (;;) {
            const std::size_t first = hole * kArity + kKey;
            if (first > last_full_first) return hole;
            if constexpr (kPrefetch) {
                const char* grandchildren = base + first * kArity + kKey;
                for (std::size_t offset = 0; offset < kArity * kArity * kKey; offset += kCacheLine)
                    __builtin_prefetch(grandchildren + offset);
            }
            hole = promote_min_child(hole, first);
        }
    };
    std::size_t hole = 0;
    if (end >= (1 + kArity) * kKey) {
        hole = promote_min_child(0, kKey);
        // The new root's payload was written long ago; fetch it while the sift goes on.
        __builtin_prefetch(&payloads_[keys_[0].order_slot & kSlotMask]);
        hole = end > kPrefetchFromBytes ? descend.template operator()<true>(hole)
                                        : descend.template operator()<false>(hole);
    }
    const std::size_t first = hole * kArity + kKey;
    if (first < end) {  // a last node with fewer than kArity children
        std::size_t best = first;
        for (std::size_t c = first + kKey; c < end; c += kKey)
            if (before(at(c), at(best))) best = c;
        at(hole) = at(best);
        hole = best;
    }
    sift_up(hole / kKey, k);
}

void Simulation::drop_taken_root() {
    root_taken_ = false;
    free_slots_.push_back(static_cast<std::uint32_t>(keys_[0].order_slot & kSlotMask));
    const Key last = keys_[--size_];
    if (size_ > 0) sift_from_root(last);
}

bool Simulation::step() {
    if (root_taken_) drop_taken_root();
    if (size_ == 0) return false;
    const Key k = keys_[0];
    const Payload& p = payloads_[k.order_slot & kSlotMask];
    // A copy: the handler's first schedule_at() overwrites the root and its slot.
    const Event e{Time::ps(static_cast<std::int64_t>(k.at_ps)),
                  k.order_slot >> kSlotBits,
                  p.handler,
                  p.kind,
                  p.a,
                  p.b};
    if (e.at < now_) [[unlikely]]
        throw_time_went_backwards();
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
        if (stopped_ || size_ == 0 || Time::ps(static_cast<std::int64_t>(keys_[0].at_ps)) > limit)
            break;
        step();
    }
}

}  // namespace cs
