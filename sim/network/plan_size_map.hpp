// A network's per-transfer memos: (plan, size) -> T (NetworkImpl's kept_cost and
// unshared_start), and (sources, destinations, size) -> time (send_together).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/hash.hpp"
#include "network/collectives.hpp"

namespace cs::network::detail {

// Open addressing with linear probing in a power-of-two table kept at most half full, the keys
// inline: (key, size) -> T, where the key is a plan's address or a word, never Key{} (which
// marks an empty slot). Every transfer outside `flow` looks its (plan, size) up here; with a
// node-based map that was a division and two dependent loads per lookup, 22% of the samples of
// Llama 3 405B's 8K plan (268,496 lookups of 1,776 keys in one iteration of its best layout).
// Entries are never erased, only all at once (clear): plans live as long as the network
// (routes changed retire them, so no address is reused).
template <typename T, typename Key = const Plan*>
class PlanSizeMap {
  public:
    // The value of (key, size) and whether it was just inserted (value-initialised then). The
    // pointer is valid until the next insertion.
    std::pair<T*, bool> try_emplace(Key key, std::int64_t size) {
        if (2 * (used_ + 1) > slots_.size()) grow();
        Slot& s = probe(key, size);
        if (s.key != Key{}) return {&s.value, false};
        s = Slot{key, size, T{}};
        ++used_;
        return {&s.value, true};
    }
    // The value of (key, size), null if none; valid until the next insertion.
    T* find(Key key, std::int64_t size) {
        if (slots_.empty()) return nullptr;
        Slot& s = probe(key, size);
        return s.key != Key{} ? &s.value : nullptr;
    }
    void clear() {
        slots_.clear();
        mask_ = 0;
        used_ = 0;
    }
    std::size_t size() const { return used_; }

  private:
    struct Slot {
        Key key{};  // Key{}: empty
        std::int64_t size = 0;
        T value{};
    };
    static std::uint64_t bits(Key key) {
        if constexpr (std::is_pointer_v<Key>)
            return reinterpret_cast<std::uintptr_t>(key);
        else
            return static_cast<std::uint64_t>(key);
    }
    // The slot holding (key, size), or the empty one where it would go (the table not empty).
    Slot& probe(Key key, std::int64_t size) {
        for (std::size_t i =
                 static_cast<std::size_t>(
                     mix64(bits(key) ^ static_cast<std::uint64_t>(size) * 0x9e3779b97f4a7c15ULL)) &
                 mask_;
             ; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (s.key == Key{} || (s.key == key && s.size == size)) return s;
        }
    }
    void grow() {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(old.empty() ? 64 : 2 * old.size(), Slot{});
        mask_ = slots_.size() - 1;
        used_ = 0;
        for (Slot& s : old)
            if (s.key != Key{}) *try_emplace(s.key, s.size).first = std::move(s.value);
    }
    std::vector<Slot> slots_;
    std::size_t mask_ = 0;
    std::size_t used_ = 0;
};

// send_together's memo: the time and the last part's plan of a message whose parts go from
// srcs[i] to dsts[i], all of `size` bytes, keyed by the lists' contents (kept inline, so a key
// never depends on where the caller holds them). A replica's pipeline message sends the same
// parts for every microbatch: one lookup instead of one plan and one cost lookup per part (22%
// of a Llama 3 405B plan's analytical runs). Open addressing as PlanSizeMap; cleared whole.
template <typename Value>
class GroupSendMap {
  public:
    // The value of the message and whether it was just inserted (value-initialised then). The
    // pointer is valid until the next insertion or clear().
    std::pair<Value*, bool> try_emplace(std::span<const int> srcs, std::span<const int> dsts,
                                        std::int64_t size) {
        if (2 * (used_ + 1) > slots_.size()) grow();
        const std::uint64_t h = hash_of(srcs, dsts, size);
        Slot& s = probe(h, srcs, dsts, size);
        if (s.used) return {&s.value, false};
        s = Slot{true,
                 h,
                 size,
                 static_cast<std::uint32_t>(ranks_.size()),
                 static_cast<std::uint32_t>(srcs.size()),
                 Value{}};
        ranks_.insert(ranks_.end(), srcs.begin(), srcs.end());
        ranks_.insert(ranks_.end(), dsts.begin(), dsts.end());
        ++used_;
        return {&s.value, true};
    }
    // The value of the message, null if none; valid until the next insertion or clear().
    Value* find(std::span<const int> srcs, std::span<const int> dsts, std::int64_t size) {
        if (slots_.empty()) return nullptr;
        Slot& s = probe(hash_of(srcs, dsts, size), srcs, dsts, size);
        return s.used ? &s.value : nullptr;
    }
    void clear() {
        slots_.clear();
        ranks_.clear();
        mask_ = 0;
        used_ = 0;
    }
    std::size_t size() const { return used_; }

  private:
    struct Slot {
        bool used = false;
        std::uint64_t hash = 0;
        std::int64_t size = 0;
        std::uint32_t offset = 0;  // of srcs in ranks_, dsts after them
        std::uint32_t parts = 0;
        Value value{};
    };
    // The slot holding the message, or the empty one where it would go (the table not empty).
    Slot& probe(std::uint64_t h, std::span<const int> srcs, std::span<const int> dsts,
                std::int64_t size) {
        for (std::size_t i = static_cast<std::size_t>(h) & mask_;; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (!s.used ||
                (s.hash == h && s.size == size && s.parts == srcs.size() &&
                 std::equal(srcs.begin(), srcs.end(), ranks_.begin() + s.offset) &&
                 std::equal(dsts.begin(), dsts.end(), ranks_.begin() + s.offset + s.parts)))
                return s;
        }
    }
    static std::uint64_t hash_of(std::span<const int> srcs, std::span<const int> dsts,
                                 std::int64_t size) {
        std::uint64_t h = mix64(static_cast<std::uint64_t>(size) ^ srcs.size() << 48);
        for (std::size_t i = 0; i < srcs.size(); ++i)
            h = mix64(h ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(srcs[i])) << 32 |
                           static_cast<std::uint32_t>(dsts[i])));
        return h;
    }
    void grow() {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(old.empty() ? 64 : 2 * old.size(), Slot{});
        mask_ = slots_.size() - 1;
        for (Slot& s : old)
            if (s.used)
                for (std::size_t i = static_cast<std::size_t>(s.hash) & mask_;; i = (i + 1) & mask_)
                    if (!slots_[i].used) {
                        slots_[i] = std::move(s);
                        break;
                    }
    }
    std::vector<Slot> slots_;
    std::vector<int> ranks_;
    std::size_t mask_ = 0;
    std::size_t used_ = 0;
};

}  // namespace cs::network::detail
