// A lower bound on a prepared iteration's time, without replaying it (`plan` prunes layouts with
// it, docs/plan.md "How it searches").
#pragma once

#include "core/units.hpp"
#include "replay/prepare.hpp"
#include "replay/replay.hpp"

namespace cs::replay {

// The longest path through the passes' dependencies (schedule::critical_path) when every pass
// takes what the replay charges its GPU, compute plus blocking collectives (cost_steps, with
// `costs` pricing the collectives as the replay's own CollectiveCosts does), and each device
// ends with its optimizer step. A pass of an overlapped group (PipelineOp::overlap: DualPipe's
// F&B, whose collectives may hide behind the other pass's compute) counts its compute only.
//
// The replay runs exactly these passes, in these orders, for at least these times, and only
// adds waiting: for pipeline messages, the data-parallel reduction and parameter gathers, the
// host. So with `costs` made for the experiment's cluster and network configuration, no replay
// of `p` on that network model ends sooner, unless a duration model (variability) shortens
// passes, which nothing bundled does. It counts the pipeline's fill and drain, and the tensor,
// context and expert-parallel collectives inside passes. Throws SimulationError for orders that
// deadlock (a schedule's bug).
Time iteration_lower_bound(const PreparedIteration& p, CollectiveCosts& costs);

}  // namespace cs::replay
