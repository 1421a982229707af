// A lower bound on a prepared iteration's time, without replaying it (`plan` prunes layouts with
// it, docs/plan.md "How it searches").
#pragma once

#include "core/units.hpp"
#include "replay/prepare.hpp"
#include "replay/replay.hpp"

namespace cs::replay {

// The longest path through the passes' dependencies (schedule::critical_path_ends) when every
// pass takes what the replay charges its GPU, compute plus blocking collectives (cost_steps, with
// `costs` pricing the collectives as the replay's own CollectiveCosts does), starts no earlier
// than the replay's host could issue its first kernel (workload::HostModel, as
// Replay::start_on_host: the host's own chain, a receive's post, sync_after_p2p's wait for the
// input and for a sending pass's end) and ends no earlier than host_issue's earliest end, and each
// device ends with its optimizer step (issued by its host). A pass of an overlapped group
// (PipelineOp::overlap: DualPipe's F&B, whose collectives may hide behind the other pass's
// compute) counts its compute only; outside ZeRO-2/3 the group runs whole, as the replay runs
// it: once every member's input is in, for overlapped_time's group time, its outputs leaving at
// its end.
//
// The replay runs exactly these passes, in these orders, for at least these times, and only
// adds waiting: for pipeline messages, the data-parallel reduction and parameter gathers,
// contention. So with `costs` made for the experiment's cluster and network configuration, no
// replay of `p` on that network model ends sooner, unless a duration model (variability)
// shortens passes, which nothing bundled does (a slow host only lengthens them). Throws
// SimulationError for orders that deadlock (a schedule's bug).
Time iteration_lower_bound(const PreparedIteration& p, CollectiveCosts& costs);

}  // namespace cs::replay
