// Asks the kernel to back a large, randomly accessed array with 2 MiB pages (transparent huge
// pages, where the system leaves them to madvise).
//
// The flow solver's link records (128 bytes each, 42 MB at 16,384 GPUs) are read in an order set by
// the routes, so nearly every access is to another 4 KiB page: with 4 KiB pages the translations
// of the array do not fit the TLB, and in a virtual machine each miss walks two page tables. On
// 2 MiB pages the whole array needs a few dozen translations. The advice must come before the
// pages are first written (pages already present stay 4 KiB); only the whole 2 MiB pages inside
// the range are advised. A hint: nothing changes where the kernel does not support or allow it
// (madvise's result is not checked), and results never depend on it. The advice stays with the
// address range after the array is freed; an allocation the allocator later places there may get
// 2 MiB pages too (memory and speed only). reserve_on_huge_pages() does this for a vector of 4 MiB
// and more (smaller ones keep the allocator's pages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace cs {

inline void advise_huge_pages(const void* data, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
    const auto begin = reinterpret_cast<std::uintptr_t>(data);
    const std::uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
    const std::uintptr_t last = (begin + bytes) & ~(kHuge - 1);
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
    (void)data;
    (void)bytes;
#endif
}

// Gives `v` room for `count` elements on 2 MiB pages when that is 4 MiB or more and it has less
// room now: its storage is replaced (its elements dropped), so call it before filling `v`.
template <typename T>
void reserve_on_huge_pages(std::vector<T>& v, std::size_t count) {
    constexpr std::size_t kWorthIt = std::size_t{4} << 20;
    if (count * sizeof(T) < kWorthIt || v.capacity() >= count) return;
    std::vector<T>().swap(v);
    v.reserve(count);
    advise_huge_pages(v.data(), v.capacity() * sizeof(T));
}

}  // namespace cs
