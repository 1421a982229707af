#include "engine/simulation.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <new>

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
// A year has between these many buckets (a power of two, kSpans per key it is laid out over).
constexpr std::size_t kMinBuckets = 16;
constexpr std::size_t kMaxBuckets = 64 * 64;  // what occupied_ can flag
// A year spans this many times the mean distance of its keys from the earliest, doubled, with as
// many times more buckets than keys: the events its own events schedule mostly fall inside it.
constexpr std::size_t kSpans = 4;
// A used run's array larger than this many keys (1 KiB) is freed rather than handed to a bucket.
constexpr std::uint32_t kKeptRun = 64;

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
    handler_count_ = handlers_.size();
    hinting_ = hinting_ || handler.wants_hints();
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

std::size_t Simulation::pending() const {
    std::size_t in_buckets = 0;
    for (std::size_t j = 0; j < bucket_count_; ++j)
        in_buckets += buckets_[j].size;
    return run_.size + size_ - (root_taken_ ? 1 : 0) + in_buckets + far_.size();
}

void Simulation::reserve(std::size_t events) {
    if (events > capacity_) grow_keys(events);
    payloads_.reserve(events);
    free_slots_.reserve(events);
    far_.reserve(events);
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
    std::vector<Key*> by_key;
    by_key.reserve(pending() + 1);  // and the root, if taken
    for (std::size_t i = 0; i < size_; ++i)
        by_key.push_back(&keys_[i]);
    for (std::uint32_t i = 0; i < run_.size; ++i)
        by_key.push_back(&run_.keys[i]);
    for (std::size_t j = 0; j < bucket_count_; ++j)
        for (std::uint32_t i = 0; i < buckets_[j].size; ++i)
            by_key.push_back(&buckets_[j].keys[i]);
    for (Key& k : far_)
        by_key.push_back(&k);
    std::sort(by_key.begin(), by_key.end(),
              [](const Key* x, const Key* y) { return before(*x, *y); });
    for (std::size_t rank = 0; rank < by_key.size(); ++rank) {
        Key& k = *by_key[rank];
        k.order_slot = static_cast<std::uint64_t>(rank) << kSlotBits | (k.order_slot & kSlotMask);
    }
    next_seq_ = by_key.size();
}

std::uint64_t Simulation::next_order() {
    const std::uint64_t seq = next_seq_++;
    return shuffle_ ? mix32(static_cast<std::uint32_t>(seq) ^ shuffle_key_) : seq;
}

// The hot paths below end in tail calls only, so that schedule_at() saves no registers.
inline void Simulation::file(Key k) {
    if (k.at_ps >= year_end_) [[unlikely]]
        return file_far(k);
    const std::uint64_t j = (k.at_ps - year_start_) >> shift_;
    Bucket& bucket = buckets_[j];
    if (bucket.size == bucket.capacity) [[unlikely]]
        return file_growing(k, j);
    bucket.keys[bucket.size++] = k;
    occupied_[j / 64] |= std::uint64_t{1} << (j % 64);
    occupied_words_ |= std::uint64_t{1} << (j / 64);
}

void Simulation::file_far(Key k) {
    far_.push_back(k);
}

void Simulation::file_growing(Key k, std::uint64_t j) {
    grow(buckets_[j]);
    file(k);
}

inline void Simulation::place(Key k) {
    if (k.at_ps >= near_end_) return file(k);
    if (root_taken_) {  // the place of the event being processed, at the root
        root_taken_ = false;
        return sift_from_root(k);
    }
    push_near(k);
}

void Simulation::push_near(Key k) {
    if (size_ == capacity_) grow_keys(std::max<std::size_t>(16, 2 * capacity_));
    sift_up(size_++, k);
}

void Simulation::schedule_at(Time at, HandlerId handler, std::uint32_t kind, std::uint64_t a,
                             std::uint64_t b) {
    if (at < now_ || handler >= handler_count_ || next_seq_ == kOrderLimit) [[unlikely]]
        return schedule_rare(at, handler, kind, a, b);
    if (!holding_) return schedule_in_new_slot(at, handler, kind, a, b);
    // The handler's first successor takes over its event's slot.
    holding_ = false;
    payloads_[held_slot_] = Payload{handler, kind, a, b};
    place(Key{next_order() << kSlotBits | held_slot_, static_cast<std::uint64_t>(at.count_ps())});
}

void Simulation::schedule_in_new_slot(Time at, HandlerId handler, std::uint32_t kind,
                                      std::uint64_t a, std::uint64_t b) {
    const std::uint32_t slot = new_slot();
    payloads_[slot] = Payload{handler, kind, a, b};
    place(Key{next_order() << kSlotBits | slot, static_cast<std::uint64_t>(at.count_ps())});
}

bool Simulation::advance() {
    if (occupied_words_ == 0) {
        if (far_.empty()) return false;
        new_year();
    }
    const int word = std::countr_zero(occupied_words_);
    std::uint64_t& bits = occupied_[static_cast<std::size_t>(word)];
    const auto j = static_cast<std::size_t>(word * 64 + std::countr_zero(bits));
    bits &= bits - 1;
    if (bits == 0) occupied_words_ &= occupied_words_ - 1;
    near_end_ = year_start_ + ((std::uint64_t{j} + 1) << shift_);  // at most year_end_
    // The bucket's array becomes the run (the empty run's array the bucket's, unless it is larger
    // than kKeptRun: a burst's array is not kept by every bucket it passes through), sorted in
    // place, latest first; buckets are small, so insertion sort first.
    if (run_.capacity > kKeptRun) {
        run_.keys.reset();
        run_.capacity = 0;
    }
    Bucket& bucket = buckets_[j];
    std::swap(run_.keys, bucket.keys);
    std::swap(run_.capacity, bucket.capacity);
    run_.size = bucket.size;
    bucket.size = 0;
    Key* const r = run_.keys.get();
    const auto later = [](const Key& x, const Key& y) { return before(y, x); };
    if (run_.size == 2) {
        if (later(r[1], r[0])) std::swap(r[0], r[1]);
    } else if (run_.size <= 16) {
        for (std::uint32_t i = 1; i < run_.size; ++i) {
            const Key k = r[i];
            std::uint32_t hole = i;
            for (; hole > 0 && later(k, r[hole - 1]); --hole)
                r[hole] = r[hole - 1];
            r[hole] = k;
        }
    } else {
        std::sort(r, r + run_.size, later);
    }
    return true;
}

void Simulation::grow(Bucket& bucket) {
    const std::uint32_t capacity = std::max<std::uint32_t>(4, 2 * bucket.capacity);
    std::unique_ptr<Key[]> keys(new Key[capacity]);
    std::copy(bucket.keys.get(), bucket.keys.get() + bucket.size, keys.get());
    bucket.keys = std::move(keys);
    bucket.capacity = capacity;
}

// A year is laid out over the keys in far_ (all of them, as the year before is used up): kSpans
// buckets per key (a power of two, 16 to 4,096) over more than 2 * kSpans times their mean distance
// from the earliest, so that a bucket holds about one key when times are spread evenly and the
// events they schedule mostly fall inside the year. Markov's inequality puts at least 7/8 of the
// keys in the year however they are spread (all of them when the year is capped at 2^63 ps).
void Simulation::new_year() {
    std::uint64_t earliest = far_.front().at_ps;
    for (const Key& k : far_)
        earliest = std::min(earliest, k.at_ps);
    U128 distance = 0;
    for (const Key& k : far_)
        distance += k.at_ps - earliest;
    const std::uint64_t mean = static_cast<std::uint64_t>(distance / far_.size());
    bucket_count_ = std::clamp(std::bit_ceil(far_.size()) * kSpans, kMinBuckets, kMaxBuckets);
    // The smallest power-of-two width with bucket_count_ * width > 2 * kSpans * mean, but a year
    // of at most 2^63 ps: it then ends below 2^64 (times are below 2^63), and so does every bucket.
    const auto wide = static_cast<std::uint64_t>(U128{2 * kSpans} * mean / bucket_count_);
    shift_ = std::min(static_cast<int>(std::bit_width(wide)), 63 - std::countr_zero(bucket_count_));
    if (buckets_.size() < bucket_count_) buckets_.resize(bucket_count_);
    year_start_ = earliest;
    near_end_ = earliest;
    year_end_ = earliest + (std::uint64_t{bucket_count_} << shift_);
    std::size_t kept = 0;
    for (const Key& k : far_) {
        if (k.at_ps >= year_end_)
            far_[kept++] = k;
        else
            file(k);
    }
    far_.resize(kept);
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
    const Key last = keys_[--size_];
    if (size_ > 1)
        sift_from_root(last);
    else  // the heap is empty, or `last` alone is left
        keys_[0] = last;
}

void Simulation::finish_event() {
    if (root_taken_) drop_taken_root();
    if (holding_) {
        holding_ = false;
        free_slots_.push_back(held_slot_);
    }
}

void Simulation::hint_next() const {
    const Key* next = run_.size > 0 ? &run_.keys[run_.size - 1] : nullptr;
    auto consider = [&next](const Key& k) {
        if (!next || before(k, *next)) next = &k;
    };
    if (!root_taken_) {
        if (size_ > 0) consider(keys_[0]);
    } else {
        // The current event is the heap's root: the next of the heap is among its children.
        for (std::size_t c = 1; c <= 4 && c < size_; ++c)
            consider(keys_[c]);
    }
    if (!next) return;
    const Payload& p = payloads_[static_cast<std::size_t>(next->order_slot & kSlotMask)];
    handlers_[p.handler]->prefetch(Event{Time::ps(static_cast<std::int64_t>(next->at_ps)),
                                         next->order_slot >> kSlotBits, p.handler, p.kind, p.a,
                                         p.b});
}

bool Simulation::step() {
    return hinting_ ? step_as<true>() : step_as<false>();
}

template <bool kHint>
bool Simulation::step_as() {
    finish_event();
    Key k;
    if (run_.size > 0 && (size_ == 0 || before(run_.keys[run_.size - 1], keys_[0]))) {
        k = run_.keys[--run_.size];
    } else if (size_ > 0) {
        k = keys_[0];
        root_taken_ = true;  // stays at the root for the handler's first successor
    } else {
        if (!advance()) return false;
        k = run_.keys[--run_.size];
    }
    if constexpr (kHint) hint_next();
    const auto slot = static_cast<std::uint32_t>(k.order_slot & kSlotMask);
    const Payload& p = payloads_[slot];
    // A copy: the handler's first schedule_at() may overwrite the root and the slot.
    const Event e{Time::ps(static_cast<std::int64_t>(k.at_ps)),
                  k.order_slot >> kSlotBits,
                  p.handler,
                  p.kind,
                  p.a,
                  p.b};
    if (e.at < now_) [[unlikely]]
        throw_time_went_backwards();
    holding_ = true;
    held_slot_ = slot;
    now_ = e.at;
    ++processed_;
    handlers_[e.handler]->on_event(*this, e);
    return true;
}

void Simulation::run() {
    stopped_ = false;
    // The choice made once, outside the loop: without hints the loop is the one it was before
    // them (no call in it to save registers around).
    if (hinting_)
        while (!stopped_ && step_as<true>()) {
        }
    else
        while (!stopped_ && step_as<false>()) {
        }
}

void Simulation::run_until(Time limit) {
    stopped_ = false;
    for (;;) {
        finish_event();
        if (stopped_ || (run_.size == 0 && size_ == 0 && !advance())) break;
        std::uint64_t next = ~std::uint64_t{0};
        if (run_.size > 0) next = run_.keys[run_.size - 1].at_ps;
        if (size_ > 0) next = std::min(next, keys_[0].at_ps);
        if (Time::ps(static_cast<std::int64_t>(next)) > limit) break;
        step();
    }
}

}  // namespace cs
