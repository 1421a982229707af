// A network's per-transfer memo, (plan, size) -> T (NetworkImpl's kept_cost and unshared_start).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/hash.hpp"
#include "network/collectives.hpp"

namespace cs::network::detail {

// Open addressing with linear probing in a power-of-two table kept at most half full, the keys
// inline. Every transfer outside `flow` looks its (plan, size) up here; with a node-based map
// that was a division and two dependent loads per lookup, 22% of the samples of Llama 3 405B's
// 8K plan (268,496 lookups of 1,776 keys in one iteration of its best layout). Entries are never
// erased: plans live as long as the network (routes changed retire them, so no address is
// reused).
template <typename T>
class PlanSizeMap {
  public:
    // The value of (plan, size) and whether it was just inserted (value-initialised then). The
    // pointer is valid until the next insertion.
    std::pair<T*, bool> try_emplace(const Plan* plan, std::int64_t size) {
        if (2 * (used_ + 1) > slots_.size()) grow();
        for (std::size_t i = slot_of(plan, size);; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (s.plan == nullptr) {
                s = Slot{plan, size, T{}};
                ++used_;
                return {&s.value, true};
            }
            if (s.plan == plan && s.size == size) return {&s.value, false};
        }
    }
    std::size_t size() const { return used_; }

  private:
    struct Slot {
        const Plan* plan = nullptr;  // null: empty
        std::int64_t size = 0;
        T value{};
    };
    std::size_t slot_of(const Plan* plan, std::int64_t size) const {
        return static_cast<std::size_t>(
                   mix64(reinterpret_cast<std::uintptr_t>(plan) ^
                         static_cast<std::uint64_t>(size) * 0x9e3779b97f4a7c15ULL)) &
               mask_;
    }
    void grow() {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(old.empty() ? 64 : 2 * old.size(), Slot{});
        mask_ = slots_.size() - 1;
        used_ = 0;
        for (Slot& s : old)
            if (s.plan != nullptr) *try_emplace(s.plan, s.size).first = std::move(s.value);
    }
    std::vector<Slot> slots_;
    std::size_t mask_ = 0;
    std::size_t used_ = 0;
};

}  // namespace cs::network::detail
