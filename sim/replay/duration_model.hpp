// Per-worker duration models: the seam through which per-GPU behaviour (a slow GPU, stragglers,
// jitter, thermal throttling) changes the time of a pass.
//
// The plan gives every pass a nominal compute time, the same on every worker of a stage. A
// DurationModel installed in a Replay (Replay::set_duration_model) maps that nominal time to the
// time this worker takes for this pass of this step. Blocking TP/CP/EP collectives inside the
// pass are network time: they keep their (cached, nominal) cost and are added after the model;
// a slow link is a link-capacity change on the network (Network::set_link_capacity).
//
// Without a model the replay uses the nominal times and makes no call at all. Randomness comes
// only from DurationContext::random, the worker's own stream of the Replay's Simulation (seeded by
// the experiment's `seed`), so results are reproducible and do not depend on the order in which
// simultaneous events run.
//
// This is the one seam for per-GPU behaviour. The experiment's `variability:` is the model users
// reach (durations/variability.hpp; api::run installs it); a new behaviour users can ask for is a
// new entry kind of `variability:` or a new model built the same way, in sim/replay/durations/.
// Tests and embedding programs install models of their own through api::RunOptions::attach.
#pragma once

#include <cstdint>
#include <span>

#include "core/units.hpp"
#include "engine/random.hpp"
#include "schedule/schedule.hpp"

namespace cs::replay {

// What a model may know about the pass being timed. Valid only during the call.
struct DurationContext {
    int worker = 0;             // index into Replay::workers()
    std::span<const int> gpus;  // the worker's GPUs (tp x cp, tp innermost)
    int stage = 0;              // pipeline device
    int dp = 0;                 // data-parallel replica
    int virtual_stage = 0;      // model chunk in pipeline order
    int chunk = 0;              // chunk index on this device
    int microbatch = 0;
    schedule::Pass pass = schedule::Pass::Forward;
    std::int64_t step = 0;           // training iteration (Replay::set_step), 0 by default
    Time start;                      // when the pass starts
    RandomStream* random = nullptr;  // this worker's stream for this step (never null)
};

class DurationModel {
  public:
    virtual ~DurationModel() = default;
    // The compute time of the pass described by `ctx`, whose plan gives `nominal`. Must not be
    // negative (the replay throws SimulationError). Called once per pass, in the order each worker
    // runs its passes.
    virtual Time pass_duration(const DurationContext& ctx, Time nominal) = 0;
};

// Random stream ids of duration models: domain 1 in the top 16 bits, then the step (24 bits) and
// the worker (24 bits). Other users of Simulation::random take other domains.
inline constexpr std::uint64_t kDurationStreamDomain = 1;
inline constexpr std::int64_t kMaxDurationStep = (std::int64_t{1} << 24) - 1;
inline constexpr int kMaxDurationWorker = (1 << 24) - 1;
constexpr std::uint64_t duration_stream_id(std::int64_t step, int worker) {
    return kDurationStreamDomain << 48 | static_cast<std::uint64_t>(step) << 24 |
           static_cast<std::uint64_t>(worker);
}

}  // namespace cs::replay
