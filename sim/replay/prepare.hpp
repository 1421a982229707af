// One training iteration made ready to replay: the one place where an experiment and a schedule
// meet. Everything that runs or writes an iteration (api::run, a jobs file's jobs, the Chakra
// export, validate through run, the CLI's progress display) starts from prepare(); nothing else
// picks chunks, model copies, the plan, in-flight counts or memory on its own.
//
// What prepare() decides, in order:
//   schedule   the experiment's own, or the one named (a ConfigError at the schedule's location
//              for an unknown name)
//   shape      p = pp, m = the training's microbatches, chunks = the schedule's chunks for vpp
//              (a warning when the schedule ignores vpp), checked by Schedule::check
//   plan       workload::plan_iteration over chunks / model_copies chunks per device (DualPipe
//              holds the model twice: one copy's p virtual stages, each device holding two),
//              placed by the schedule
//   admit      the caller's check of the size and of the memory floor (one microbatch in flight),
//              before anything that grows with the microbatches
//   orders     every device's op order (Schedule::order), and the passes they run
//   memory     each device's peak in-flight microbatches and activation bytes
//              (schedule::peak_inflight_*), then workload::fill_memory
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.hpp"
#include "schedule/schedule.hpp"
#include "workload/experiment.hpp"
#include "workload/plan.hpp"

namespace cs::replay {

// Every pipeline device's op order, held once and shared by the iterations that use it (those
// prepared from one OrdersMemo: a Llama 3 405B zb-v layout at 16,384 GPUs has 64 orders of 768
// ops, whose copy was a sixth of a memoized prepare). Reads as the vector of orders it holds.
class OpOrders {
  public:
    using Orders = std::vector<std::vector<schedule::PipelineOp>>;
    OpOrders() = default;
    OpOrders(Orders orders) : orders_(std::make_shared<const Orders>(std::move(orders))) {}
    const Orders& get() const {
        static const Orders none;
        return orders_ ? *orders_ : none;
    }
    operator const Orders&() const { return get(); }
    const std::vector<schedule::PipelineOp>& operator[](std::size_t device) const {
        return get()[device];
    }
    std::size_t size() const { return get().size(); }
    bool empty() const { return get().empty(); }
    Orders::const_iterator begin() const { return get().begin(); }
    Orders::const_iterator end() const { return get().end(); }

  private:
    std::shared_ptr<const Orders> orders_;
};

struct PreparedIteration {
    // The experiment with `schedule` set to the schedule prepared (messages name it).
    workload::ExperimentSpec spec;
    std::unique_ptr<schedule::Schedule> schedule;
    schedule::PipelineShape shape;
    int copies = 1;  // Schedule::model_copies()
    workload::IterationPlan plan;
    // Per pipeline device: its op order, shared by the data-parallel replicas.
    OpOrders orders;
    // Per pipeline device: the most microbatch activations held at once, and their bytes with
    // each chunk weighing its own activation_memory.
    std::vector<int> peak_inflight;
    std::vector<Bytes> peak_activations;
    // Notes for the user, in the order found (a vpp the schedule ignores).
    std::vector<std::string> warnings;

    // The device virtual stage `vs` runs on (for microbatch 0: the placement the plan uses).
    int device_of(int vs) const { return schedule->place(shape, vs, 0).device; }
    // Passes of one data-parallel replica, every device's order summed; all replicas: x dp.
    std::int64_t passes_per_replica() const;
    std::int64_t passes() const { return passes_per_replica() * spec.layout.dp; }
};

// The op orders prepare made for the last few pipeline shapes it met, for a caller that prepares
// many layouts of few shapes (plan's search: the recompute and sharding variants of a layout
// share its shape, and its enumeration comes back to a shape for each ep value and for each tp
// and cp of one dp). A schedule's orders, and so each device's peak of microbatches in flight
// and its peak states, depend on its name and the shape alone.
struct OpCensus;  // bound.hpp
struct OrdersMemo {
    struct Entry {
        std::string schedule;
        schedule::PipelineShape shape;
        OpOrders orders;
        std::vector<int> peak_inflight;
        // Each device's schedule::peak_held_states: its peak activations for any layout of the
        // shape.
        std::vector<std::vector<schedule::HeldState>> peak_states;
        // The orders' op_census, once a caller has made it (prepare leaves it).
        std::shared_ptr<const OpCensus> census;
        std::size_t ops = 0;  // in `orders`, every device's
    };
    // At most this many, the most recently used last (16 orders of a 16,384-GPU zb-v layout
    // take about 10 MB), holding at most kOps ops between them (an entry of more is not kept):
    // orders grow with the microbatches, and a plan over a batch of millions of sequences
    // would otherwise keep gigabytes of them between layouts.
    static constexpr std::size_t kEntries = 16;
    static constexpr std::size_t kOps = std::size_t{1} << 21;
    std::vector<Entry> entries;
    // The entry of the last prepare that made or reused orders; none when they were too many to
    // keep.
    Entry* current() { return last_kept ? &entries.back() : nullptr; }
    bool last_kept = false;
};

struct PrepareOptions {
    // Called once the shape and plan are known, before the orders and memory (which grow with
    // the microbatches) are built; throws to refuse the iteration (api::run's --max-memory).
    // The plan's device memory is then a floor: each device holding one microbatch's
    // activations of its largest chunk (the schedule's peak holds at least that), so a layout
    // whose floor does not fit can be refused without its orders (`plan`).
    std::function<void(const PreparedIteration&)> admit;
    // Reused when it holds this schedule's orders for this shape, else refilled (optional).
    OrdersMemo* orders = nullptr;
};

// Prepares `spec` under `schedule_name` (empty: the experiment's own schedule). Throws
// ConfigError for a schedule that is unknown or cannot run the shape, and for layouts the plan
// refuses (layers that do not split).
PreparedIteration prepare(workload::ExperimentSpec spec, std::string_view schedule_name,
                          const PrepareOptions& options = {});

}  // namespace cs::replay
