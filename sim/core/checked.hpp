// Products of user-given counts (tp x pp x cp, micro_batch_size x dp, ...) computed in 64 bits
// with overflow detected, so that a huge input is reported instead of wrapping to a small or zero
// value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace cs {

// The product of `factors`, or nullopt if it does not fit an int64.
inline std::optional<std::int64_t> checked_product(std::initializer_list<std::int64_t> factors) {
    std::int64_t p = 1;
    for (std::int64_t f : factors)
        if (__builtin_mul_overflow(p, f, &p)) return std::nullopt;
    return p;
}

}  // namespace cs
