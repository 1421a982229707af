// What separates the GPU events of a PyTorch profiler trace on each stream, read the same way by
// `clustersim calibrate` (its launch gap and host launch fits) and `clustersim diff` (which adds
// each kernel's launch gap to its measured time, as the simulator's steps carry one per launch).
//
// For two back-to-back events a, b of one stream of one GPU (b the next to start, b launched by a
// runtime call of the trace):
// - a launch gap, b.ts - a.end, when b was queued (its runtime call) before a ended and no event
//   of another stream of that GPU ended in between (b may have waited for it: an NCCL kernel, an
//   event): the GPU's own cost of going from one kernel to the next;
// - a host interval, between the runtime calls of a and b on one host thread, when b was queued
//   after a ended: the GPU waited for the host.
// Overlapping events (b starting before a ends) give neither.
#pragma once

#include <vector>

#include "ingest/torch_trace.hpp"

namespace cs::api {

struct StreamGaps {
    // Per event of TorchTrace::gpu (same order): the launch gap before it in us, or -1 when it
    // has none.
    std::vector<double> launch_gap_us;
    // Per event: when its runtime call ran (us), or NaN when the trace has none for it.
    std::vector<double> launched_us;
    std::vector<double> host_us;  // every host interval, in the streams' order
};

StreamGaps stream_gaps(const TorchTrace& t);

}  // namespace cs::api
