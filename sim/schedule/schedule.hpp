// Pipeline schedules: for every pipeline device (stage), the order in which it runs the passes
// of every microbatch on each of its model chunks.
//
// Vocabulary
//  - p devices (pipeline ranks) 0..p-1, m microbatches 0..m-1.
//  - The model is cut into V = p * v "virtual stages" 0..V-1 that every microbatch traverses in
//    order forward and in reverse order backward. Each device holds v model chunks 0..v-1; the
//    schedule's placement says which virtual stage a (device, chunk) runs for a given microbatch
//    (microbatch-dependent only for bidirectional schedules such as DualPipe).
//  - Passes: F (forward), B (full backward), or, for schedules that split the backward, Bi
//    (input gradient, feeds the previous virtual stage) and Bw (weight gradient, local only).
//
// Dependencies (enforced by the replay layer, not here):
//  F(vs, i) needs F(vs-1, i) (activation); B/Bi(vs, i) needs B/Bi(vs+1, i) (gradient) and
//  F(vs, i); Bw(vs, i) needs Bi(vs, i). Every (vs, i) gets exactly one F and one B (or one Bi and
//  one Bw) somewhere in the orders.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/errors.hpp"
#include "core/name_table.hpp"

namespace cs::schedule {

enum class Pass : std::uint8_t { Forward, Backward, BackwardInput, BackwardWeight };

const char* pass_letter(Pass p);  // "F", "B", "B", "W"
// The passes' names: the trace's "pass" argument of a pass slice, which `diff` reads (the slice's
// name, "F3", is for people and never parsed back).
inline constexpr std::array<Named<Pass>, 4> kPassNames{{
    {"forward", Pass::Forward},
    {"backward", Pass::Backward},
    {"backward_input", Pass::BackwardInput},
    {"backward_weight", Pass::BackwardWeight},
}};

struct PipelineOp {
    Pass pass;
    std::int32_t microbatch;
    std::int32_t chunk;  // model chunk on this device, 0..v-1
    // DualPipe's overlapped F&B: this forward runs overlapped with the next `overlap` ops of the
    // device (another microbatch's backward, input and weight halves), one hiding the other's
    // expert-parallel communication. The replay starts them together once all their inputs are
    // in; 0 for an op that runs alone.
    std::int8_t overlap = 0;
    bool operator==(const PipelineOp&) const = default;
};
// The most passes an overlapped group (an op and the `overlap` after it) may hold: the replay
// refuses a longer one, and the critical path runs groups up to this size whole.
inline constexpr std::size_t kMaxOverlapGroup = 4;

struct PipelineShape {
    int devices = 1;       // p
    int microbatches = 1;  // m
    int chunks = 1;        // v, model chunks per device
    bool operator==(const PipelineShape&) const = default;
};

struct Placement {
    int device;
    int chunk;
};

class Schedule {
  public:
    virtual ~Schedule() = default;
    // The name as users write it: "gpipe", "1f1b", "interleaved", "zb-h1", ...
    virtual std::string name() const = 0;
    // Chunks per device this schedule uses for a requested vpp (1 for schedules without virtual
    // stages, vpp for interleaved, 2 for V-shaped schedules).
    virtual int chunks_for(int requested_vpp) const = 0;
    // Empty if the shape is valid; otherwise a message naming what is wrong and what would work.
    virtual std::string check(const PipelineShape& shape) const = 0;
    // Whether passes are split into Bi + Bw.
    virtual bool splits_backward() const { return false; }
    // Op order of one device. Precondition: check(shape) is empty.
    virtual std::vector<PipelineOp> order(const PipelineShape& shape, int device) const = 0;
    // Every device's order, index for index: order(shape, d) for each d. A schedule that builds
    // all of them at once (zb-h2's list scheduling) overrides it to do so once.
    virtual std::vector<std::vector<PipelineOp>> orders(const PipelineShape& shape) const;
    // Virtual stage of (device, chunk) for microbatch `microbatch`.
    virtual int virtual_stage(const PipelineShape& shape, int device, int chunk,
                              int microbatch) const;
    // Inverse of virtual_stage.
    virtual Placement place(const PipelineShape& shape, int virtual_stage, int microbatch) const;
    // Copies of the model the pipeline holds: 1, or 2 for the bidirectional DualPipe, whose
    // device d holds stage d of one copy (chunk 0, the microbatches that enter at device 0) and
    // stage p-1-d of the other (chunk 1, those that enter at device p-1).
    virtual int model_copies() const { return 1; }
    // Megatron-LM's batched point-to-point exchanges (docs/schedules.md, "What interleaving
    // costs"): for each op of order(shape, device), index for index, the round it belongs to
    // (non-decreasing from 0). After a round the device sends the outputs of its passes and
    // receives the inputs of the next round's passes in one batch, and waits for all of it
    // (batch_isend_irecv, then torch.cuda.synchronize()). Empty (the default): the schedule has
    // no such rounds and its passes send as they end (the replay's asynchronous sends).
    virtual std::vector<int> exchange_rounds(const PipelineShape& shape, int device) const {
        (void)shape, (void)device;
        return {};
    }
    // Traits: facts about the schedule that other layers' models read, so that no model tests a
    // schedule's name.
    // Whether torch.distributed.pipelining runs this schedule on its pipeline runtime
    // (_PipelineScheduleRuntime), whose host pays HostModel::runtime_pass more per pass: every
    // schedule but gpipe and 1f1b, which torch runs as classes of their own.
    virtual bool on_torch_pipeline_runtime() const { return true; }
    // Whether Megatron-LM runs this schedule (forward_backward_pipelining_without_interleaving,
    // _with_interleaving), so that flags can name it: 1f1b and interleaved only.
    virtual bool in_megatron_lm() const { return false; }
    // Virtual stages a microbatch runs through: devices x chunks / model_copies.
    int virtual_stages(const PipelineShape& shape) const {
        return shape.devices * shape.chunks / model_copies();
    }
};

// One schedule a user can name: the registry row that make_schedule, schedule_names and every
// message listing schedules read.
struct ScheduleEntry {
    std::string name;  // as users write it; equals the made schedule's name()
    std::function<std::unique_ptr<Schedule>()> make;
    std::string description;  // one line, for --help and docs
};

// The schedules a run can use, by name, in registration order.
//
// builtin() is the bundled table (builtin_schedules.def), built once and immutable. A test or an
// embedding program that adds a schedule copies it and add()s to the copy, then passes the copy
// to make_schedule / schedule_names; there is no process-wide registration, so two registries can
// be used side by side.
class ScheduleRegistry {
  public:
    ScheduleRegistry() = default;  // empty
    static const ScheduleRegistry& builtin();

    // Appends a schedule. Throws std::invalid_argument for an empty name, a missing factory or a
    // name already registered.
    ScheduleRegistry& add(ScheduleEntry entry);

    const ScheduleEntry* find(std::string_view name) const;  // nullptr if unknown
    const std::vector<ScheduleEntry>& entries() const { return entries_; }
    std::vector<std::string> names() const;

  private:
    std::vector<ScheduleEntry> entries_;
};

// Known schedule names, for messages: "gpipe, 1f1b, interleaved, ...".
std::vector<std::string> schedule_names(
    const ScheduleRegistry& registry = ScheduleRegistry::builtin());
// nullptr if the name is unknown.
std::unique_ptr<Schedule> make_schedule(
    std::string_view name, const ScheduleRegistry& registry = ScheduleRegistry::builtin());
// make_schedule that throws ConfigError at `where` (the YAML value or command-line option the name
// came from) for an unknown name: 'unknown schedule "x"; expected gpipe, 1f1b, ... or dualpipev'.
std::unique_ptr<Schedule> require_schedule(
    std::string_view name, const SourceLocation& where,
    const ScheduleRegistry& registry = ScheduleRegistry::builtin());

// Most chunk activations device `device` holds at once under `schedule`: the maximum over its op
// order of forwards started minus activations released. An activation is released when its
// Backward ends, or, for schedules that split the backward, when its BackwardWeight ends (the
// weight gradient still reads the stored inputs). Independent of op durations, because a device
// runs its ops one after another in order. Precondition: schedule.check(shape) is empty.
int peak_inflight_microbatches(const Schedule& schedule, const PipelineShape& shape, int device);

// As peak_inflight_microbatches, with each held activation weighing
// `bytes_of_virtual_stage(vs)` for the virtual stage vs its forward ran (model chunks of unequal
// size, as uneven pipeline splits make them): the most bytes of activations `device` holds at
// once.
std::int64_t peak_inflight_bytes(const Schedule& schedule, const PipelineShape& shape, int device,
                                 const std::function<std::int64_t(int)>& bytes_of_virtual_stage);

// The two above, given `order` = schedule.order(shape, device) already made (prepare makes each
// order once).
int peak_inflight_microbatches(const Schedule& schedule, std::span<const PipelineOp> order);
std::int64_t peak_inflight_bytes(const Schedule& schedule, const PipelineShape& shape, int device,
                                 std::span<const PipelineOp> order,
                                 const std::function<std::int64_t(int)>& bytes_of_virtual_stage);

// What a device holds at the moments its holding may peak, as activations held per virtual stage
// (each state's (virtual stage, count) pairs in increasing virtual stage): of the states after
// each forward of its order, those that no other such state holds at least as much of in every
// virtual stage. Whatever the bytes per virtual stage (never negative), the most the device holds
// is the largest of these states' weighted sums (peak_held_bytes), which is how
// peak_inflight_bytes works it out: a caller pricing many layouts of one shape (plan) walks the
// order once and weighs a state or two per layout. Empty for a device that runs no forward.
using HeldState = std::vector<std::pair<int, int>>;
std::vector<HeldState> peak_held_states(const Schedule& schedule, const PipelineShape& shape,
                                        int device, std::span<const PipelineOp> order);
// The largest weighted sum of `states`, each virtual stage's activation weighing
// bytes_of_virtual_stage(vs) (>= 0; a negative weight throws SimulationError); 0 for none.
std::int64_t peak_held_bytes(std::span<const HeldState> states,
                             const std::function<std::int64_t(int)>& bytes_of_virtual_stage);

}  // namespace cs::schedule
