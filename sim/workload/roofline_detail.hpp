// Helpers the roofline's two files share (roofline.cpp: the passes of a layer;
// roofline_kernels.cpp: the time of one kernel). Not for other layers' use.
#pragma once

#include <algorithm>
#include <cstddef>

#include "workload/roofline.hpp"

namespace cs::workload::detail {

// A calibration file's fraction for the kind wins over the catalogue's.
inline Bandwidth achievable_hbm(const topology::GpuModel& gpu, const RooflineCompute& compute,
                                MemKind kind = MemKind::Fused) {
    const double given = compute.hbm_fractions[static_cast<std::size_t>(kind)];
    const double fraction = given > 0 ? given : default_calibration().hbm_fraction_of(kind);
    return Bandwidth{gpu.hbm_bandwidth.bytes_per_s * fraction};
}

// GPU time between kernels: `launches` kernel gaps + the user's per-op overhead.
inline Time overheads(const RooflineCompute& compute, int launches = 1) {
    return compute.launch_overhead * launches + compute.op_overhead;
}

inline Time roofline_time(Flops executed, FlopRate rate, Bytes bytes, const topology::GpuModel& gpu,
                          const RooflineCompute& compute, int launches = 1,
                          MemKind kind = MemKind::Fused) {
    const Time math = executed.value > 0 ? compute_time(executed, rate) : Time::zero();
    const Time memory = transfer_time(bytes, achievable_hbm(gpu, compute, kind));
    return std::max(math, memory) + overheads(compute, launches);
}

inline FlopRate scaled(FlopRate peak, double fraction) {
    return FlopRate{peak.flops_per_s * fraction};
}

}  // namespace cs::workload::detail
