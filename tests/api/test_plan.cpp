// api::plan (`clustersim plan`): against a brute-force sweep of the same space, its bounds, its
// bad input; and the Megatron-LM flags of a layout read back by the flag parser.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../error_of.hpp"
#include "cli/tables.hpp"
#include "ingest/inputs.hpp"
#include "replay/bound.hpp"
#include "replay/pass_cost.hpp"
#include "replay/prepare.hpp"
#include "report/summary.hpp"
#include "schedule/critical_path.hpp"
#include "session/plan.hpp"
#include "session/plan_guide.hpp"
#include "session/run.hpp"
#include "session/sweep.hpp"
#include "session/worker_pool.hpp"
#include "workload/megatron_args.hpp"

using namespace cs;
using cs::test::error_of;

namespace {

const std::string kData = std::string(CLUSTERSIM_SOURCE_DIR) + "/tests/api/data/";
const std::string kSmall = kData + "plan-small.yaml";

// What `plan --json` writes (write_plan_json), read back.
nlohmann::ordered_json plan_json(const api::PlanResult& r) {
    std::ostringstream text;
    api::write_plan_json(text, r);
    return nlohmann::ordered_json::parse(text.str());
}

// write_plan_json's text at `indent`, and the check that it is what nlohmann prints for the
// same document (the writer streams the entries one by one instead of building the tree).
std::string checked_plan_json(const api::PlanResult& r, int indent) {
    std::ostringstream text;
    api::write_plan_json(text, r, indent);
    CHECK(nlohmann::ordered_json::parse(text.str()).dump(indent) == text.str());
    return text.str();
}

// The space both searches cover: 8 GPUs (two nodes of four), cp 1, sharding zero1, micro-batch
// 1 or 2, every recompute, 1f1b and interleaved (vpp 2, 4 or 8: the divisors >= 2 of 8 / pp
// layers per stage; 1 for 1f1b). A headroom of 98% of the H100's 80 GB (1.6 GB per GPU left) prunes
// the layouts whose weights are held by few GPUs (about 0.13 B parameters with the embedding and
// output layer: 2 + 4 bytes of weights and gradients each and 12 / dp of optimizer state, about
// 1 GB at tp 1, pp 1, dp 8 before activations), so the memory pruning is exercised; which ones
// it prunes the test reads from the sweep, not from this estimate.
api::PlanOptions small_options() {
    api::PlanOptions o;
    o.experiment = kSmall;
    o.sets = {"topology.nodes=2"};
    o.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1"};
    o.schedules = {"1f1b", "interleaved"};
    o.max_micro_batch_size = 2;
    o.headroom = 0.98;
    o.top = 5;
    o.margin = 0;
    o.keep_entries = true;
    return o;
}

// small_options() on one schedule (1f1b), zero1 and micro-batch 1, cp searched: the space of
// the --cp-comm tests.
api::PlanOptions one_schedule_options() {
    auto o = small_options();
    o.fixes = {"parallelism.sharding=zero1"};
    o.schedules = {"1f1b"};
    o.max_micro_batch_size = 1;
    return o;
}

// Every layout a plan looked at (PlanOptions::keep_entries), as text, in enumeration order.
std::vector<std::string> layout_texts(const api::PlanResult& r) {
    std::vector<std::string> texts;
    for (const auto& e : r.entries)
        texts.push_back(e.layout.text());
    return texts;
}

// The space of the flow tests: 1f1b, no recompute, zero1, cp 1, micro-batch 1 or 2, tp x pp x
// dp of 16 GPUs on four nodes of the oversubscribed cluster under flow, the top 3.
api::PlanOptions flow_space_options() {
    auto o = small_options();
    o.sets = {"topology.nodes=4", "network.model=flow"};
    o.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1", "training.recompute=none"};
    o.schedules = {"1f1b"};
    o.top = 3;
    return o;
}

// The iteration times, best first, of every layout of flow_space_options()'s space that fits in
// `limit` bytes per GPU, by a brute-force sweep under `network` (analytical or flow).
std::vector<double> brute_force_times(const std::string& network, double limit) {
    api::SweepOptions sweep;
    sweep.experiment = kSmall;
    sweep.sets = {"topology.nodes=4",           "network.model=" + network, "parallelism.cp=1",
                  "parallelism.sharding=zero1", "training.recompute=none",  "schedule=1f1b"};
    sweep.axes = api::parse_sweep_axes({"parallelism.tp=1,2,4,8", "parallelism.pp=1,2,4,8",
                                        "parallelism.sequence_parallel=false,true",
                                        "training.micro_batch_size=1,2"});
    sweep.keep_summaries = false;
    const auto rows = api::sweep(sweep, api::SweepRanks{});
    REQUIRE(rows);
    std::vector<double> times;
    for (const auto& r : *rows)
        // plan runs sequence parallelism exactly when tp > 1
        if (r.result && (r.values[2] == "true") == (r.values[0] != "1") &&
            static_cast<double>(r.result->memory_bytes()) <= limit)
            times.push_back(r.result->iteration_time_s());
    std::sort(times.begin(), times.end());
    return times;
}

bool in_plan_space(const api::SweepRow& row) {
    // values: tp, pp, vpp, sequence_parallel, schedule, mbs, recompute (the sweep's axes below)
    const int tp = std::stoi(row.values[0]);
    const int vpp = std::stoi(row.values[2]);
    const bool sp = row.values[3] == "true";
    const std::string& schedule = row.values[4];
    if (sp != (tp > 1)) return false;  // plan runs sequence parallelism exactly when tp > 1
    if (schedule == "1f1b" && vpp != 1) return false;
    if (schedule == "interleaved" && vpp == 1) return false;
    // plan leaves out interleaving on one pipeline stage, which Megatron-Core refuses.
    if (schedule == "interleaved" && std::stoi(row.values[1]) == 1) return false;
    return true;
}

}  // namespace

TEST_CASE("plan finds the brute-force sweep's best layout and prunes none of its top k") {
    const api::SweepRanks ranks;
    const auto options = small_options();
    const auto result = api::plan(options, ranks);
    REQUIRE(result);
    REQUIRE(!result->top.empty());

    // The same space as a sweep: every value of every axis (a superset: tp x pp above 8, vpp
    // under 1f1b, sequence parallelism off at tp > 1 are filtered below or refused).
    api::SweepOptions sweep;
    sweep.experiment = kSmall;
    sweep.sets = {"topology.nodes=2", "parallelism.cp=1", "parallelism.sharding=zero1"};
    sweep.axes = api::parse_sweep_axes(
        {"parallelism.tp=1,2,4,8", "parallelism.pp=1,2,4,8", "parallelism.vpp=1,2,4,8",
         "parallelism.sequence_parallel=false,true", "schedule=1f1b,interleaved",
         "training.micro_batch_size=1,2", "training.recompute=none,selective,full"});
    sweep.keep_summaries = false;
    const auto rows = api::sweep(sweep, ranks);
    REQUIRE(rows);
    // The sweep's ranking of the layouts plan may choose: valid, within HBM less the headroom,
    // by iteration time (ties in enumeration order).
    const double limit = static_cast<double>(result->hbm_bytes) * (1 - options.headroom);
    std::vector<const api::SweepRow*> fitting;
    for (const auto& r : *rows)
        if (r.result && in_plan_space(r) && static_cast<double>(r.result->memory_bytes()) <= limit)
            fitting.push_back(&r);
    REQUIRE(fitting.size() > options.top);
    std::stable_sort(fitting.begin(), fitting.end(), [](const auto* x, const auto* y) {
        return x->result->iteration_time_s() < y->result->iteration_time_s();
    });
    const auto& best = *fitting.front();
    const auto& winner = result->top.front();
    CHECK(winner.figures.iteration_time_s == best.result->iteration_time_s());
    CHECK(std::to_string(winner.layout.tp) == best.values[0]);
    CHECK(std::to_string(winner.layout.pp) == best.values[1]);
    CHECK(winner.layout.schedule == best.values[4]);
    CHECK(std::to_string(winner.layout.micro_batch_size) == best.values[5]);

    // plan's figures (figures_json: by hand, in plan's own order) against summary_fields.def:
    // every key but the objective is a column of the table, of the value the sweep's run of the
    // same layout gave it.
    const auto figures = plan_json(*result)["top"][0]["figures"];
    const auto& fields = report::summary_fields();
    for (const auto& [key, value] : figures.items()) {
        if (key == "objective") continue;
        const auto f = std::find_if(fields.begin(), fields.end(),
                                    [&key](const auto& x) { return x.column == key; });
        REQUIRE_MESSAGE(f != fields.end(), key);
        CHECK_MESSAGE(value == best.result->figure(f->path), key);
    }

    // Plan's top k are the sweep's k best times, in order (margin 0, one network model).
    REQUIRE(result->top.size() == options.top);
    for (std::size_t i = 0; i < options.top; ++i)
        CHECK(result->top[i].figures.iteration_time_s == fitting[i]->result->iteration_time_s());

    // No layout of the sweep's top k was pruned: each is among plan's simulated entries, with
    // the same time.
    std::map<std::string, api::PlanEntry> entries;
    for (const auto& e : result->entries) {
        const auto& l = e.layout;
        entries[std::to_string(l.tp) + "/" + std::to_string(l.pp) + "/" + std::to_string(l.vpp) +
                "/" + l.schedule + "/" + std::to_string(l.micro_batch_size) + "/" +
                std::string(name_of(workload::kRecomputeNames, l.recompute))] = e;
    }
    for (std::size_t i = 0; i < options.top; ++i) {
        const auto& v = fitting[i]->values;
        const auto key = v[0] + "/" + v[1] + "/" + v[2] + "/" + v[4] + "/" + v[5] + "/" + v[6];
        const auto at = entries.find(key);
        REQUIRE_MESSAGE(at != entries.end(), key);
        CHECK_MESSAGE(at->second.analytical.has_value(), key);
        if (at->second.analytical)
            CHECK(at->second.analytical->iteration_time_s ==
                  fitting[i]->result->iteration_time_s());
    }

    // Every fitting layout of the sweep is one of plan's entries that passed the memory check,
    // and every layout the sweep found above the limit plan pruned by memory: the memory plan
    // prunes by is the run's.
    std::size_t above = 0;
    for (const auto& r : *rows)
        if (r.result && in_plan_space(r) && static_cast<double>(r.result->memory_bytes()) > limit)
            ++above;
    CHECK(above == result->pruned_memory);
    CHECK(result->layouts == result->entries.size());
    CHECK(result->layouts ==
          result->invalid + result->pruned_memory + result->pruned_bound + result->simulated);
    CHECK(result->pruned_bound > 0);  // the bound prunes something here
}

TEST_CASE("plan's lower bound is below every simulated iteration time") {
    // The bound is the longest path through the passes' dependencies with each pass at its
    // compute plus blocking collectives, issued by its host no earlier than the replay's host
    // could, overlapped groups whole (replay::iteration_lower_bound); the replay runs the same
    // passes in the same orders for at least as long and adds waiting, so bound <= time for
    // every layout simulated.
    auto options = small_options();
    options.fixes = {};      // every sharding and cp too
    options.schedules = {};  // every schedule: DualPipe's overlapped groups, zb's split passes
    options.hsdp = true;
    // Prunes nothing by the bound: every survivor runs. (The host-bound layouts here, tp 8 with
    // full recomputation, have a bound equal to their time, 16 times the best; a margin of 10
    // pruned them.)
    options.margin = 1000;
    const api::SweepRanks ranks;
    const auto result = api::plan(options, ranks);
    REQUIRE(result);
    CHECK(result->pruned_bound == 0);
    std::size_t checked = 0;
    for (const auto& e : result->entries)
        if (e.analytical) {
            CHECK(e.lower_bound_s > 0);
            CHECK(e.lower_bound_s <= e.analytical->iteration_time_s);
            ++checked;
        }
    CHECK(checked == result->simulated);
    CHECK(checked > 0);
}

TEST_CASE("the lower bound counts the pipeline's fill and drain and the collectives in passes") {
    // tp 2, pp 4, dp 1, 1f1b, 16 microbatches of the small GPT: the bound must be at least the
    // critical path of the compute alone, which is at least the busiest device's compute (the
    // bound of the planner's first version), and above it by the pipeline's fill and drain
    // ((p - 1) passes' worth, so strictly above) and by the tensor-parallel collectives (tp 2:
    // every pass has some, so strictly above the compute-only path too).
    const auto spec = workload::load_experiment(
        kSmall, {"topology.nodes=2", "parallelism.tp=2", "parallelism.pp=4", "parallelism.dp=1",
                 "parallelism.sequence_parallel=true"});
    const auto p = replay::prepare(spec, "");
    replay::CollectiveCosts costs(*spec.cluster, spec.network);
    const Time bound = replay::iteration_lower_bound(p, costs);
    const auto compute = [&](int, std::size_t, const schedule::PipelineOp& op, int vs) {
        return replay::pass_plan(p.plan.virtual_stages[static_cast<std::size_t>(vs)], op.pass)
            .compute_time();
    };
    std::vector<Time> tail;
    Time busiest;
    for (std::size_t d = 0; d < p.orders.size(); ++d) {
        tail.push_back(p.plan.devices[d].optimizer_step);
        Time t = tail.back();
        for (std::size_t k = 0; k < p.orders[d].size(); ++k) {
            const auto& op = p.orders[d][k];
            t += compute(
                0, k, op,
                p.schedule->virtual_stage(p.shape, static_cast<int>(d), op.chunk, op.microbatch));
        }
        busiest = std::max(busiest, t);
    }
    const auto path = schedule::critical_path(*p.schedule, p.shape, p.orders, compute, tail);
    REQUIRE(path);
    CHECK(*path > busiest);
    CHECK(bound > *path);
    // And below the simulated iteration (analytical network, as plan compares it).
    api::RunOptions run;
    const auto summary = api::run(spec, run).summary;
    CHECK(bound.seconds() <= summary.iteration_time_s);
}

TEST_CASE("the lower bound of a long pipeline: each device's own chain") {
    // tp 2, pp 4, dp 1, 1f1b, 128 microbatches (32 per virtual stage: replay::kChainMicrobatches)
    // of the small GPT: each device's passes one after another with the walk's costs and host
    // rules, without waiting for the other devices. So the bound is above the busiest device's
    // compute plus its optimizer step (the passes' collectives and the host add to it: this small
    // model is host-bound), and below the simulated time, by about the pipeline's fill and
    // drain: the busiest device runs its m forward-backward pairs and waits for p - 1 pairs' worth
    // upstream and downstream, (p - 1) / (m + p - 1) = 3 / 131 = 2.3% of the time, plus the
    // point-to-point messages the bound leaves out (2 MiB activations within a node, mostly
    // overlapped): within 3%.
    const auto spec = workload::load_experiment(
        kSmall, {"topology.nodes=2", "parallelism.tp=2", "parallelism.pp=4", "parallelism.dp=1",
                 "parallelism.sequence_parallel=true", "training.global_batch_size=128"});
    const auto p = replay::prepare(spec, "");
    REQUIRE(p.shape.microbatches == 128);
    replay::CollectiveCosts costs(*spec.cluster, spec.network);
    const Time bound = replay::iteration_lower_bound(p, costs);
    Time busiest;
    for (std::size_t d = 0; d < p.orders.size(); ++d) {
        Time t = p.plan.devices[d].optimizer_step;
        for (const auto& op : p.orders[d]) {
            const int vs =
                p.schedule->virtual_stage(p.shape, static_cast<int>(d), op.chunk, op.microbatch);
            t += replay::pass_plan(p.plan.virtual_stages[static_cast<std::size_t>(vs)], op.pass)
                     .compute_time();
        }
        busiest = std::max(busiest, t);
    }
    api::RunOptions run;
    const double time = api::run(spec, run).summary.iteration_time_s;
    CHECK(bound > busiest);
    CHECK(bound.seconds() <= time);
    CHECK(bound.seconds() >= 0.97 * time);
}

TEST_CASE("the lower bound counts the host") {
    // tp 8, pp 1, dp 1 with full recomputation of the small GPT: one device whose passes are
    // short next to the host's issue (25 us a kernel, 100 us a pass, 300 us more before a
    // backward), so the GPU waits for the host; with no pipeline, no data parallelism and an
    // analytical network, the replay's time is the host's issue chain (host_issue's closed form
    // pass after pass, then the optimizer step's issue), which the bound follows rule for rule:
    // equal.
    const std::vector<std::string> sets = {
        "topology.nodes=2",          "parallelism.tp=8",
        "parallelism.pp=1",          "parallelism.dp=1",
        "parallelism.cp=1",          "training.recompute=full",
        "parallelism.sharding=none", "parallelism.sequence_parallel=true"};
    const auto spec = workload::load_experiment(kSmall, sets);
    const auto p = replay::prepare(spec, "");
    replay::CollectiveCosts costs(*spec.cluster, spec.network);
    const Time bound = replay::iteration_lower_bound(p, costs);
    api::RunOptions run;
    CHECK(bound.seconds() == doctest::Approx(api::run(spec, run).summary.iteration_time_s));
}

TEST_CASE("the bound's floor is below the bound, for every schedule and sharding") {
    // plan orders its survivors by replay::iteration_floor and works out the full bound only
    // for those that could still be simulated, which is exact only if the floor never exceeds
    // the bound: each device's passes back to back at their GPU time (an overlapped group's
    // members at their compute), then its optimizer step. On tp 2, pp 4 of the small GPT, 16
    // microbatches, every registered schedule (interleaved and the V schedules with two chunks)
    // under no sharding, ZeRO-1 and ZeRO-3: floor <= bound, and floor < bound where the pipeline
    // fills and drains (every schedule here has a bubble), floor above the busiest device's
    // compute alone (the tensor-parallel collectives in the passes). The small GPT runs with
    // the host model (its passes wait for their kernels' issue: the bound's host path), and
    // again with 128 microbatches: 32 per virtual stage for the schedules with one chunk per
    // stage, where the bound takes each device's own chain (replay::kChainMicrobatches) instead
    // of the critical path (the host's issue keeps it strictly above the floor there too).
    int checked = 0;
    for (const char* batch : {"16", "128"})
        for (const auto& schedule : schedule::ScheduleRegistry::builtin().names())
            for (const char* sharding : {"none", "zero1", "zero3"}) {
                CAPTURE(batch);
                CAPTURE(schedule);
                CAPTURE(sharding);
                const bool chunks = schedule == "interleaved";
                const auto spec = workload::load_experiment(
                    kSmall,
                    {"topology.nodes=2", "parallelism.tp=2", "parallelism.pp=4", "parallelism.dp=1",
                     "parallelism.sequence_parallel=true",
                     "parallelism.vpp=" + std::string(chunks ? "2" : "1"),
                     "parallelism.sharding=" + std::string(sharding), "schedule=" + schedule,
                     "training.global_batch_size=" + std::string(batch)});
                REQUIRE(spec.compute.host.enabled);
                const auto p = replay::prepare(spec, "");
                replay::CollectiveCosts costs(*spec.cluster, spec.network);
                const Time floor = replay::iteration_floor(p, costs);
                const Time bound = replay::iteration_lower_bound(p, costs);
                Time busiest;
                for (std::size_t d = 0; d < p.orders.size(); ++d) {
                    Time t = p.plan.devices[d].optimizer_step;
                    for (const auto& op : p.orders[d]) {
                        const int vs = p.schedule->virtual_stage(p.shape, static_cast<int>(d),
                                                                 op.chunk, op.microbatch);
                        t += replay::pass_plan(p.plan.virtual_stages[static_cast<std::size_t>(vs)],
                                               op.pass)
                                 .compute_time();
                    }
                    busiest = std::max(busiest, t);
                }
                CHECK(floor >= busiest);
                CHECK(floor < bound);
                ++checked;
            }
    CHECK(checked == 6 * static_cast<int>(schedule::ScheduleRegistry::builtin().names().size()));
}

TEST_CASE("plan's memory floor prunes only layouts whose full memory is above it") {
    // A layout refused before its op orders (reason "at least ... one microbatch in flight")
    // has a floor of one microbatch's activations; prepared in full, its memory is at least that
    // floor and so above the limit too.
    const api::SweepRanks ranks;
    const auto options = small_options();
    const auto result = api::plan(options, ranks);
    REQUIRE(result);
    const double limit = static_cast<double>(result->hbm_bytes) * (1 - options.headroom);
    std::size_t floors = 0;
    for (const auto& e : result->entries) {
        if (e.status != api::PlanEntry::Status::PrunedMemory ||
            e.reason.find("one microbatch in flight") == std::string::npos)
            continue;
        ++floors;
        auto overrides = options.sets;
        for (const auto& f : options.fixes)
            overrides.push_back(f);
        for (const auto& o : e.layout.overrides())
            overrides.push_back(o);
        const auto full = replay::prepare(workload::load_experiment(kSmall, overrides), "");
        std::int64_t memory = 0;
        for (const auto& d : full.plan.devices)
            memory = std::max(memory, d.memory.total.value);
        CAPTURE(e.layout.text());
        CHECK(memory >= e.memory_bytes);
        CHECK(static_cast<double>(memory) > limit);
    }
    CHECK(floors > 0);  // the floor prunes some layouts of this space
}

TEST_CASE("plan's shape rules refuse only what the loader or the schedule refuses") {
    // plan counts a layout invalid without loading it when its shape breaks the model's split
    // over tp, cp and ep or the pipeline split (shape_refusal), for all its variants at once.
    // Sound only if each such layout, loaded and prepared as a run would, is refused too, and
    // each layout plan loaded and found valid is not. Checked on every layout of a space where
    // both rules bite: 6 layers (pp 4 and 8 and most vpp do not split them; --uneven-stages
    // adds derived splits), 4 heads over tp up to 8 (tp 8 refused), every schedule, cp up to 8
    // (a 1,024-token sequence: 2 x cp divides it), micro-batch 1 or 2 (two variants a shape).
    auto o = small_options();
    o.sets = {"topology.nodes=2", "model.layers=6", "model.attention_heads=4"};
    o.fixes = {"parallelism.sharding=zero1", "training.recompute=none"};
    o.schedules = {};
    o.max_micro_batch_size = 2;
    o.uneven_stages = true;
    const api::SweepRanks ranks;
    const auto result = api::plan(o, ranks);
    REQUIRE(result);
    std::size_t by_shape = 0, checked = 0;
    for (const auto& e : result->entries) {
        // Those refused for the sharding alone are sharding_refusal's (the loader's own rule).
        if (e.status == api::PlanEntry::Status::Invalid &&
            e.reason.find("sharding") != std::string::npos)
            continue;
        auto overrides = o.sets;
        for (const auto& f : o.fixes)
            overrides.push_back(f);
        for (const auto& v : e.layout.overrides())
            overrides.push_back(v);
        bool refused = false;
        try {
            (void)replay::prepare(workload::load_experiment(kSmall, overrides), "");
        } catch (const ConfigError&) {
            refused = true;
        }
        CAPTURE(e.layout.text());
        CAPTURE(e.reason);
        CHECK(refused == (e.status == api::PlanEntry::Status::Invalid));
        ++checked;
        // The model-split rule's message, located as the loader locates it.
        if (e.reason.rfind("--set parallelism.tp=8: 'parallelism.tp': attention_heads (4)", 0) == 0)
            ++by_shape;
    }
    CHECK(checked > 100);
    CHECK(by_shape > 0);
}

TEST_CASE("plan under the flow network: the same top k as a brute-force sweep under flow") {
    // The confirmation stops once no layout left can enter the top k, assuming no layout runs
    // faster under flow than under the analytical network (checked: faster_than_analytical is
    // 0 here). 1f1b, no recompute, zero1, cp 1, micro-batch 1 or 2: tp x pp x dp of 16 GPUs on
    // four nodes of the oversubscribed cluster, where contention reorders the layouts: the flow
    // top 3 include layouts outside the analytical top 3 (measured when the test was written),
    // so confirming only the analytical top 3 gives another answer (checked by mutation).
    auto options = flow_space_options();
    options.confirm = 0;  // as many as the stop rule needs
    const api::SweepRanks ranks;
    const auto result = api::plan(options, ranks);
    REQUIRE(result);
    CHECK(result->faster_than_analytical == 0);
    CHECK(result->contenders == 0);
    CHECK(result->confirmed > options.top);        // contention made it confirm more
    CHECK(result->confirmed < result->simulated);  // and not everything

    const auto times =
        brute_force_times("flow", static_cast<double>(result->hbm_bytes) * (1 - options.headroom));
    REQUIRE(times.size() > options.top);
    REQUIRE(result->top.size() == options.top);
    for (std::size_t i = 0; i < options.top; ++i)
        CHECK(result->top[i].figures.iteration_time_s == times[i]);
}

TEST_CASE("plan under the flow network: a confirmation that cannot enter the top k is stopped") {
    // The space above with the top 1: once one layout is confirmed, every later confirmation
    // whose run reaches the best confirmed time without ending is stopped there
    // (RunOptions::stop_at). Its entry says where (`confirmed_above_s`, above the best time)
    // instead of its figures, and its iteration, run here to its end, takes at least that long;
    // the answer is still the brute force's best.
    auto options = flow_space_options();
    options.confirm = 0;
    options.top = 1;
    const api::SweepRanks ranks;
    const auto result = api::plan(options, ranks);
    REQUIRE(result);
    const auto times =
        brute_force_times("flow", static_cast<double>(result->hbm_bytes) * (1 - options.headroom));
    REQUIRE(!times.empty());
    REQUIRE(result->top.size() == 1);
    CHECK(result->top[0].figures.iteration_time_s == times[0]);
    std::size_t stopped = 0;
    for (const auto& e : result->entries) {
        if (e.status != api::PlanEntry::Status::Confirmed) continue;
        CAPTURE(e.layout.text());
        CHECK(e.confirmed.has_value() != e.confirmed_above_s.has_value());
        if (!e.confirmed_above_s) continue;
        ++stopped;
        CHECK(*e.confirmed_above_s > times[0]);
        auto overrides = options.sets;
        overrides.insert(overrides.end(), options.fixes.begin(), options.fixes.end());
        for (const auto& v : e.layout.overrides())
            overrides.push_back(v);
        const auto whole = api::run(workload::load_experiment(kSmall, overrides));
        CHECK(whole.summary.iteration_time_s >= *e.confirmed_above_s);
    }
    CHECK(stopped > 0);
    CHECK(result->confirmed > stopped);  // the best one ran to its end
}

TEST_CASE("plan --confirm: a limit confirms the analytical best and counts what it left") {
    // The space of the test above, where the flow top 3 is not the analytical top 3. With
    // --confirm 3 plan re-simulates exactly the 3 best analytical results and then stops (step 4
    // too: nothing more could be confirmed), and must say what could still enter the top 3:
    // every simulated, not confirmed layout whose analytical time beats the 3rd confirmed time
    // (`contenders`, counted here from its own entries) and every survivor left unsimulated
    // whose lower bound does (`left_by_limit`, status left_by_limit); a layout pruned by its
    // bound has a bound no better. Since the exact top 3 differs, each of its layouts that the
    // limited search did not confirm is among those (its flow time beats the 3rd, so its
    // analytical result does, and so does its bound). With the limit at the number the exact
    // search confirmed, the answer is the exact one and nothing is left.
    auto options = flow_space_options();
    options.confirm = 0;
    const api::SweepRanks ranks;
    const auto exact = api::plan(options, ranks);
    REQUIRE(exact);
    REQUIRE(exact->confirmed > 3);
    CHECK(exact->confirm_limit == 0);
    CHECK(exact->left_by_limit == 0);

    options.confirm = 3;
    const auto limited = api::plan(options, ranks);
    REQUIRE(limited);
    CHECK(limited->confirm_limit == 3);
    CHECK(limited->confirmed == 3);
    std::vector<std::pair<double, std::size_t>> analytical;  // (time, index) of the simulated
    std::set<std::size_t> confirmed;
    for (const auto& e : limited->entries) {
        if (!e.analytical) continue;
        analytical.emplace_back(e.analytical->objective, e.index);
        if (e.confirmed) confirmed.insert(e.index);
    }
    std::sort(analytical.begin(), analytical.end());
    REQUIRE(analytical.size() >= 3);
    CHECK(confirmed ==
          std::set<std::size_t>{analytical[0].second, analytical[1].second, analytical[2].second});
    const double third = limited->top.back().figures.objective;
    std::set<std::size_t> could;  // what the limited search says could still enter
    std::size_t left = 0;
    for (const auto& [t, index] : analytical)
        if (!confirmed.count(index) && t < third) {
            ++left;
            could.insert(index);
        }
    CHECK(limited->contenders == left);
    CHECK(plan_json(*limited)["contenders"] == left);
    std::size_t unsimulated = 0;
    for (const auto& e : limited->entries) {
        CAPTURE(e.layout.text());
        if (e.status == api::PlanEntry::Status::LeftByLimit) {
            CHECK(e.lower_bound_s <= third);
            ++unsimulated;
            could.insert(e.index);
        }
        if (e.status == api::PlanEntry::Status::PrunedBound) CHECK(e.lower_bound_s > third);
    }
    CHECK(limited->left_by_limit == unsimulated);
    CHECK(plan_json(*limited)["left_by_limit"] == unsimulated);
    CHECK(limited->contenders + limited->left_by_limit > 0);
    bool differs = false;
    for (std::size_t i = 0; i < 3; ++i) {
        const std::size_t index = exact->top[i].index;
        differs |= limited->top[i].index != index;
        CAPTURE(exact->top[i].layout.text());
        if (!confirmed.count(index)) CHECK(could.count(index) == 1);
    }
    CHECK(differs);

    options.confirm = exact->confirmed;
    const auto enough = api::plan(options, ranks);
    REQUIRE(enough);
    CHECK(enough->contenders == 0);
    for (std::size_t i = 0; i < 3; ++i)
        CHECK(enough->top[i].index == exact->top[i].index);

    // Fewer than --top cannot fill the top k; "all" is 0.
    options.confirm = 2;
    CHECK(error_of([&] { api::plan(options, ranks); }) ==
          "--confirm 2: expected a number of layouts from --top (3) to 1000000, or all");
    CHECK(api::parse_confirm("all") == 0);
    CHECK(api::parse_confirm("12") == 12);
    CHECK(error_of([&] { api::parse_confirm("-1"); }) ==
          "--confirm -1: expected a number of layouts, 1 to 1000000, or all");
}

TEST_CASE("plan --confirm: step 4 stops at the limit's analytical result, not the margin's") {
    // With a limit L, step 5 confirms the L best analytical results and nothing beyond, so
    // before it step 4 runs only while a bound beats the L-th best analytical result (as well
    // as the margin's rule): a layout left then has a bound, and so an analytical result, above
    // the L-th. What is confirmed must still be the L best analytical results of the whole
    // space: here they are the 4 best times of a brute-force sweep of the same space under the
    // analytical network (the plan's own analytical runs are those runs: same override lists,
    // same caches' results). And a margin of 10 (every survivor's bound divided by 11 beats
    // the 3rd best analytical result, so the margin alone would simulate all of them) leaves
    // unsimulated the layouts whose bound is above what the limit needs (checked: some are
    // pruned by the bound).
    auto options = flow_space_options();
    options.confirm = 4;
    options.margin = 10;
    const api::SweepRanks ranks;
    const auto limited = api::plan(options, ranks);
    REQUIRE(limited);
    CHECK(limited->confirmed == 4);
    CHECK(limited->pruned_bound > 0);
    std::vector<double> confirmed;
    for (const auto& e : limited->entries)
        if (e.confirmed) confirmed.push_back(e.analytical->iteration_time_s);
    std::sort(confirmed.begin(), confirmed.end());

    const auto times = brute_force_times(
        "analytical", static_cast<double>(limited->hbm_bytes) * (1 - options.headroom));
    REQUIRE(times.size() > 4);
    REQUIRE(confirmed.size() == 4);
    for (std::size_t i = 0; i < 4; ++i)
        CHECK(confirmed[i] == times[i]);
}

TEST_CASE("plan --guide: the guide's row, its topology and sequence rules, its layouts") {
    // GPT-3 175B (174.6B parameters: the guide's 70-175B row, TP=8 + PP=4-8 + DP) on 20 DGX
    // H100 nodes (160 GPUs; InfiniBand, 8 GPUs per node: TP 8 stays in a node), sequence 2,048
    // (below 8K: the row's CP 1). PP 4 or 8: tp 8 x pp 4 = 32 divides 160 (dp 5); tp 8 x pp 8 =
    // 64 does not. (The experiment itself at pp 4, dp 5 and 160 sequences, so that it loads.)
    const std::string recipe =
        std::string(CLUSTERSIM_SOURCE_DIR) + "/workloads/gpt3-175b-dgx-h100.yaml";
    const auto spec = workload::load_experiment(
        recipe, {"topology.nodes=20", "parallelism.pp=4", "training.global_batch_size=160"});
    const auto advice = api::guide_advice(spec);
    REQUIRE(advice.reasoning.size() >= 2);
    CHECK(advice.reasoning[0].find("70-175B on 64-256 GPUs") != std::string::npos);
    REQUIRE(advice.layouts.size() == 1);
    const auto& l = advice.layouts[0];
    CHECK(l.tp == 8);
    CHECK(l.pp == 4);
    CHECK(l.cp == 1);
    CHECK(l.dp == 5);
    CHECK(l.schedule == spec.schedule);  // the experiment's own other axes
    REQUIRE(advice.not_dividing.size() == 1);
    CHECK(advice.not_dividing[0] == "tp 8 x pp 8 x cp 1 = 64 does not divide the 160 GPUs");

    // Sequence 16,384 (the guide's 8K-32K: CP 2): tp 8 x pp 4 x cp 2 = 64 divides 256 (dp 4).
    const auto longer = api::guide_advice(
        workload::load_experiment(recipe, {"topology.nodes=32", "training.seq_length=16384"}));
    REQUIRE(!longer.layouts.empty());
    CHECK(longer.layouts[0].cp == 2);
    CHECK(longer.layouts[0].dp == 4);

    // On the planner's 8-GPU fixture (a 0.13B model: the row "< 1B on 1-8 GPUs: DP only"),
    // plan simulates the guide's one layout, tp 1 pp 1 dp 8, and ranks it against its top k:
    // 1 + the top layouts it does not beat.
    auto options = small_options();
    options.guide = true;
    const api::SweepRanks ranks;
    const auto result = api::plan(options, ranks);
    REQUIRE(result);
    REQUIRE(result->guide.size() == 1);
    const auto& g = result->guide[0];
    CHECK(g.layout.tp == 1);
    CHECK(g.layout.pp == 1);
    CHECK(g.layout.dp == 8);
    REQUIRE(g.figures);
    std::size_t rank = 1;
    for (const auto& c : result->top)
        if (c.figures.objective <= g.figures->objective) ++rank;
    CHECK(g.rank == rank);
    CHECK(!g.versus.empty());

    // Its --json (every layout's entry, then the guide's), streamed, at indent 2 and compact.
    for (const int indent : {2, -1}) {
        CAPTURE(indent);
        const auto doc = nlohmann::ordered_json::parse(checked_plan_json(*result, indent));
        CHECK(doc["layouts_evaluated"].size() == result->layouts);
        CHECK(doc["guide"]["layouts"].size() == 1);
    }
}

TEST_CASE("plan --fix bounds an axis to a set or a range: exactly the layouts inside it") {
    // The space of small_options() searched whole, and again with tp at most 2 (an open range),
    // pp 2 or 4 (a set), recomputation none or full (a set of choices) and the schedule one of
    // --schedules (named in the other order: the order stays --schedules'). The bounded search
    // must enumerate exactly the whole one's layouts that satisfy every bound, in the same
    // order, and rank only such layouts.
    const api::SweepRanks ranks;
    auto whole = small_options();
    auto bounded = small_options();
    bounded.fixes.insert(bounded.fixes.end(),
                         {"parallelism.tp=..2", "parallelism.pp=2,4",
                          "training.recompute=full,none", "schedule=interleaved,1f1b"});
    const auto all = api::plan(whole, ranks);
    const auto some = api::plan(bounded, ranks);
    REQUIRE(all);
    REQUIRE(some);
    const auto inside = [](const api::PlanLayout& l) {
        return l.tp <= 2 && (l.pp == 2 || l.pp == 4) &&
               l.recompute != workload::Recompute::Selective;
    };
    std::vector<std::string> expected;
    for (const auto& e : all->entries)
        if (inside(e.layout)) expected.push_back(e.layout.text());
    const auto got = layout_texts(*some);
    CHECK(!expected.empty());
    CHECK(expected.size() < all->layouts);
    CHECK(got == expected);
    REQUIRE(!some->top.empty());
    for (const auto& c : some->top)
        CHECK(inside(c.layout));
    // A range closed at both ends and a one-sided one from below: tp=2..2 is tp=2.
    bounded.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1", "parallelism.tp=2..2",
                     "parallelism.pp=2.."};
    const auto narrow = api::plan(bounded, ranks);
    REQUIRE(narrow);
    for (const auto& e : narrow->entries) {
        CHECK(e.layout.tp == 2);
        CHECK(e.layout.pp >= 2);
    }
}

TEST_CASE("plan --cp-comm: each cp > 1 layout also with every other exchange, right after it") {
    // The small space with cp searched (cp 1, 2, 4, 8 on 8 GPUs), 1f1b, zero1. With --cp-comm a
    // layout of cp > 1 is named with the experiment's exchange (the p2p ring) and followed by
    // a2a, allgather and a2a+p2p at each all-to-all group size s, 2 <= s < cp dividing cp: cp 2
    // gets 2 more, cp 4 3 (s = 2), cp 8 4 (s = 2, 4); cp 1 none. Nothing else changes.
    const api::SweepRanks ranks;
    const auto plain = one_schedule_options();
    auto more = plain;
    more.cp_comm = true;
    const auto a = api::plan(plain, ranks);
    const auto b = api::plan(more, ranks);
    REQUIRE(a);
    REQUIRE(b);
    std::vector<std::string> expected;
    for (const auto& e : a->entries) {
        const int cp = e.layout.cp;
        if (cp < 2) {
            expected.push_back(e.layout.text());
            continue;
        }
        expected.push_back(e.layout.text() + " cp_comm p2p");
        expected.push_back(e.layout.text() + " cp_comm a2a");
        expected.push_back(e.layout.text() + " cp_comm allgather");
        for (int s = 2; s < cp; ++s)
            if (cp % s == 0)
                expected.push_back(e.layout.text() + " cp_comm a2a+p2p " + std::to_string(s));
    }
    const auto got = layout_texts(*b);
    CHECK(got == expected);
    CHECK(got.size() > a->layouts);
    // Held by --fix, the exchange is the experiment's for every layout: no variants.
    more.fixes.push_back("parallelism.cp_comm_type=a2a");
    const auto held = api::plan(more, ranks);
    REQUIRE(held);
    CHECK(held->layouts == a->layouts);
}

TEST_CASE("plan: what a hostile audit of bounds, --cp-comm and profiles found (stop 60)") {
    const api::SweepRanks ranks;
    // An experiment of cp 4 with a2a+p2p in groups of 2: a cp 1 layout exchanges nothing and
    // is not refused for the group size (every cp 1 layout was); cp 2, where a group of 2 is
    // not strictly inside cp, is refused with the loader's reason.
    auto o = one_schedule_options();
    o.sets = {"topology.nodes=2",         "parallelism.tp=1", "parallelism.pp=2",
              "parallelism.cp=4",         "parallelism.dp=1", "parallelism.cp_comm_type=a2a+p2p",
              "parallelism.cp_a2a_size=2"};
    const auto grouped = api::plan(o, ranks);
    REQUIRE(grouped);
    int cp1 = 0, cp1_refused = 0, cp2_refused = 0;
    for (const auto& e : grouped->entries) {
        const bool invalid = e.status == api::PlanEntry::Status::Invalid;
        if (e.layout.cp == 1) ++cp1;
        if (e.layout.cp == 1 && invalid) ++cp1_refused;
        if (e.layout.cp == 2 && invalid) ++cp2_refused;
    }
    CHECK(cp1 > 0);
    CHECK(cp1_refused == 0);
    CHECK(cp2_refused > 0);
    // A held group size is checked against each layout's cp, not the experiment's (cp 1 here).
    o = small_options();
    o.fixes = {"parallelism.sharding=zero1", "parallelism.cp=8", "parallelism.cp_comm_type=a2a+p2p",
               "parallelism.cp_a2a_size=4"};
    o.schedules = {"1f1b"};
    o.sets = {"topology.nodes=2", "training.seq_length=2048"};
    const auto held = api::plan(o, ranks);
    REQUIRE(held);
    REQUIRE(!held->top.empty());
    CHECK(held->top.front().layout.cp == 8);
    // Aliases and spellings of one value are one value given twice.
    o = small_options();
    o.fixes.push_back("parallelism.tp=2,02");
    CHECK(error_of([&] { api::plan(o, ranks); }) == "--fix parallelism.tp=2,02: 2 is given twice");
    o = small_options();
    o.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1,optim"};
    CHECK(error_of([&] { api::plan(o, ranks); }) ==
          "--fix parallelism.sharding=zero1,optim: \"optim\" names a value given already");
    // A micro-batch range open above lifts --max-micro-batch's cap of 2: 16 divides 16 / dp
    // for dp 1.
    o = small_options();
    o.fixes.push_back("training.micro_batch_size=16..");
    o.schedules = {"1f1b"};
    const auto big = api::plan(o, ranks);
    REQUIRE(big);
    REQUIRE(!big->entries.empty());
    for (const auto& e : big->entries)
        CHECK(e.layout.micro_batch_size >= 16);
    // A vpp held above 1 asks for virtual stages: schedules without them are not searched.
    o = small_options();
    o.fixes.push_back("parallelism.vpp=2");
    const auto virtual_stages = api::plan(o, ranks);
    REQUIRE(virtual_stages);
    for (const auto& e : virtual_stages->entries)
        CHECK(e.layout.schedule == "interleaved");
    // A held dp needs to divide one of the GPU counts searched, not each.
    o = small_options();
    o.gpus = {4, 8};
    o.objective = api::PlanObjective::Mfu;
    o.fixes.push_back("parallelism.dp=8");
    const auto counts = api::plan(o, ranks);
    REQUIRE(counts);
    for (const auto& e : counts->entries)
        CHECK(e.layout.gpus() == 8);
    o.fixes.back() = "parallelism.dp=16";
    CHECK(error_of([&] { api::plan(o, ranks); }) ==
          "--fix parallelism.dp=16: divides none of the GPU counts searched (4, 8)");
    // A guide layout outside the space (tp 1 when --fix holds tp 8) scores better than #1: said
    // so, not "ranks lower".
    o = small_options();
    o.fixes.push_back("parallelism.tp=8");
    o.guide = true;
    const auto guided = api::plan(o, ranks);
    REQUIRE(guided);
    REQUIRE(guided->guide.size() == 1);
    CHECK(guided->guide.front().versus.find("scores better than #1") == 0);
    CHECK(guided->guide.front().versus.find("outside the space searched") != std::string::npos);
    // Under a profile, the guide's layout at another tp than the profiled one is not timed; a
    // stage profile needs pp held; block recomputation needs the measured recomputation.
    o = small_options();
    o.sets.push_back("compute={model: profile, layer_forward: 1ms, layer_backward: 2ms}");
    o.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1",  "parallelism.tp=2",
               "parallelism.ep=1", "training.micro_batch_size=1", "training.recompute=none"};
    o.guide = true;
    const auto profiled = api::plan(o, ranks);
    REQUIRE(profiled);
    REQUIRE(profiled->guide.size() == 1);
    CHECK(!profiled->guide.front().figures);
    CHECK(profiled->guide.front().reason ==
          "compute.model: profile: its times were measured at parallelism.tp 2 (--fix), not this "
          "layout's 1; not timed");
    // A layer's profiled time holds at any pp: with pp held at 2 and tp at the guide's 1, the
    // guide's pp 1 layout is timed.
    o.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1",  "parallelism.tp=1",
               "parallelism.ep=1", "training.micro_batch_size=1", "training.recompute=none",
               "parallelism.pp=2"};
    const auto layer_profile = api::plan(o, ranks);
    REQUIRE(layer_profile);
    REQUIRE(layer_profile->guide.size() == 1);
    CHECK(layer_profile->guide.front().layout.pp == 1);
    CHECK(layer_profile->guide.front().figures.has_value());
    o.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1",  "parallelism.tp=2",
               "parallelism.ep=1", "training.micro_batch_size=1", "training.recompute=none"};
    o.guide = false;
    o.partial_recompute = true;
    o.fixes.back() = "training.recompute=full";
    CHECK(error_of([&] { api::plan(o, ranks); })
              .find("--partial-recompute: compute.model: profile "
                    "charges each layer's measured backward") == 0);
    o.partial_recompute = false;
    o.sets.back() = "compute={model: profile, stage_forward: 4ms, stage_backward: 8ms}";
    CHECK(error_of([&] { api::plan(o, ranks); }).find("--fix parallelism.pp=2 (stage_forward") !=
          std::string::npos);
    // A dense model has no expert parallelism: ep 2 is refused (it ran, labelled ep 2).
    o = small_options();
    o.fixes.push_back("parallelism.ep=2");
    CHECK(error_of([&] {
              api::plan(o, ranks);
          }).find("the model has no experts, so no expert parallelism: ep must be 1") !=
          std::string::npos);
}

TEST_CASE("plan --fix: bad sets and ranges are refused at the option") {
    const api::SweepRanks ranks;
    const auto refused = [&](const std::string& fix) {
        auto o = small_options();
        o.fixes.push_back(fix);
        return error_of([&] { api::plan(o, ranks); });
    };
    const std::string forms =
        "expected a positive whole number N, a set N1,N2,... or a range MIN..MAX (MIN.. or ..MAX "
        "leave an end open)";
    CHECK(refused("parallelism.tp=4..2") ==
          "--fix parallelism.tp=4..2: the range runs backwards (" + forms + ")");
    CHECK(refused("parallelism.tp=0..2") == "--fix parallelism.tp=0..2: " + forms);
    CHECK(refused("parallelism.tp=..") == "--fix parallelism.tp=..: " + forms);
    CHECK(refused("parallelism.pp=2,x") == "--fix parallelism.pp=2,x: " + forms);
    CHECK(refused("parallelism.pp=2,,4") ==
          "--fix parallelism.pp=2,,4: an empty value in the list");
    CHECK(refused("parallelism.pp=2,2") == "--fix parallelism.pp=2,2: \"2\" is given twice");
    CHECK(refused("training.recompute=none,bogus") ==
          "--fix training.recompute=none,bogus: unknown value \"bogus\"; expected none, selective, "
          "full (one, or several separated by commas)");
    CHECK(refused("schedule=1f1b,gpipe") ==
          "--fix schedule=1f1b,gpipe: the schedule gpipe is not among --schedules");
    // The HTML report's command line keeps what a single experiment can hold.
    CHECK(
        api::plan_fixes_as_sets({"parallelism.tp=4,8", "parallelism.pp=2",
                                 "training.recompute=none,full", "parallelism.vpp=2..",
                                 "training.seq_length=2048", "schedule=1f1b"}) ==
        std::vector<std::string>{"parallelism.pp=2", "training.seq_length=2048", "schedule=1f1b"});
}

TEST_CASE("plan refuses bad input with a clear message") {
    const api::SweepRanks ranks;
    auto o = small_options();
    o.fixes = {"model.layers=4"};
    CHECK(error_of([&] { api::plan(o, ranks); }).find("--fix model.layers=4: unknown key") !=
          std::string::npos);
    o = small_options();
    o.fixes = {"parallelism.tp=3"};
    CHECK(error_of([&] { api::plan(o, ranks); }) ==
          "--fix parallelism.tp=3: does not divide the experiment's 8 GPUs");
    o = small_options();
    o.headroom = 0.999;  // 80 MB left per GPU: less than any layout's weights
    CHECK(error_of([&] { api::plan(o, ranks); }).find("layouts searched is valid and fits") !=
          std::string::npos);
    // A GPU model of the topology's own, unknown to the catalogue and without board_power.
    o = small_options();
    o.objective = api::PlanObjective::Energy;
    o.experiment = kData + "plan-no-board-power.yaml";
    o.sets.clear();
    CHECK(error_of([&] {
              api::plan(o, ranks);
          }).find("--objective energy: no board power is known for the GPU model X1") !=
          std::string::npos);
    o = small_options();
    o.objective = api::PlanObjective::Cost;
    CHECK(error_of([&] { api::plan(o, ranks); }).find("--gpu-hour-price") != std::string::npos);
    o = small_options();
    o.schedules = {"nope"};
    CHECK(error_of([&] { api::plan(o, ranks); }).find("unknown schedule") != std::string::npos);
}

TEST_CASE("plan's cost objective ranks as time does, with the price per 1M tokens") {
    // cost = price x GPUs x T / 3600 / tokens x 1e6, tokens = 16 x 1024 per iteration: a
    // multiple of T, so the same order; at $2 per GPU-hour on 8 GPUs the winner's cost is
    // 2 x 8 x T / 3600 / 16384 x 1e6.
    auto o = small_options();
    o.objective = api::PlanObjective::Cost;
    o.gpu_hour_price = 2;
    o.keep_entries = false;
    const api::SweepRanks ranks;
    const auto cost = api::plan(o, ranks);
    const auto time = api::plan(small_options(), ranks);
    REQUIRE(cost);
    REQUIRE(time);
    CHECK(cost->top.front().layout.text() == time->top.front().layout.text());
    const double T = cost->top.front().figures.iteration_time_s;
    CHECK(cost->top.front().figures.objective == doctest::Approx(2.0 * 8 * T / 3600 / 16384 * 1e6));
    // Without keep_entries the JSON's list (its last member) is empty: "[]" as nlohmann prints
    // an empty array.
    CHECK(checked_plan_json(*cost, 2).find("\"layouts_evaluated\": []\n}") != std::string::npos);
    CHECK(checked_plan_json(*cost, -1).find("\"layouts_evaluated\":[]}") != std::string::npos);
}

TEST_CASE("plan's energy objective: the catalogue's board power, or the experiment's") {
    // energy per token = GPUs x board power x PUE x T / tokens: the H100's 700 W (the
    // catalogue), 8 GPUs, PUE 1, 16 x 1024 tokens per iteration: 8 x 700 x T / 16384 J. A
    // multiple of T, so the same winner as time. With goodput.gpu_power 500 and pue 1.2 (the
    // experiment's figures win over the catalogue's): 8 x 500 x 1.2 x T / 16384.
    auto o = small_options();
    o.objective = api::PlanObjective::Energy;
    o.keep_entries = false;
    const api::SweepRanks ranks;
    const auto energy = api::plan(o, ranks);
    const auto time = api::plan(small_options(), ranks);
    REQUIRE(energy);
    REQUIRE(time);
    CHECK(energy->objective_unit == "J per token");
    CHECK(energy->top.front().layout.text() == time->top.front().layout.text());
    const double T = energy->top.front().figures.iteration_time_s;
    CHECK(energy->top.front().figures.objective == doctest::Approx(8 * 700 * T / 16384));
    // The block needs a failure rate and a checkpoint cost; only its power and PUE count here.
    o.sets.push_back("goodput.failures_per_gpu_hour=1e-5");
    o.sets.push_back("goodput.checkpoint.write_time=10s");
    o.sets.push_back("goodput.gpu_power=500");
    o.sets.push_back("goodput.pue=1.2");
    const auto given = api::plan(o, ranks);
    REQUIRE(given);
    const double T2 = given->top.front().figures.iteration_time_s;
    CHECK(given->top.front().figures.objective == doctest::Approx(8 * 500 * 1.2 * T2 / 16384));
}

TEST_CASE("megatron_args_for reads back through the Megatron-LM flag parser") {
    // Each layout's flags, parsed by megatron_args_to_overrides and loaded over the same
    // experiment with another layout, give back the layout and training settings.
    const std::vector<std::vector<std::string>> layouts{
        {"parallelism.tp=2", "parallelism.pp=2", "parallelism.dp=2", "parallelism.vpp=2",
         "schedule=interleaved", "parallelism.sequence_parallel=true", "parallelism.sharding=zero1",
         "training.recompute=selective", "training.micro_batch_size=2"},
        {"parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8", "parallelism.sharding=zero3",
         "training.recompute=full", "training.precision=fp16"},
        {"parallelism.tp=4", "parallelism.pp=2", "parallelism.dp=1", "parallelism.cp=1",
         "parallelism.sequence_parallel=true", "parallelism.sharding=none"},
        {"parallelism.tp=1", "parallelism.pp=2", "parallelism.dp=2", "parallelism.cp=2",
         "parallelism.sharding=zero1"},
        {"parallelism.tp=2", "parallelism.pp=1", "parallelism.dp=4", "parallelism.sharding=zero2",
         "parallelism.sequence_parallel=true"},
        {"parallelism.tp=2", "parallelism.pp=2", "parallelism.dp=2", "training.precision=fp8",
         "training.fp8_recipe=blockwise"},
        {"parallelism.tp=2", "parallelism.pp=2", "parallelism.dp=2", "training.precision=fp8"},
        // Context parallelism's exchange (plan --cp-comm) and the overlaps, each a flag.
        {"parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=2", "parallelism.cp=4",
         "parallelism.cp_comm_type=a2a+p2p", "parallelism.cp_a2a_size=2",
         "parallelism.overlap_grad_reduce=true", "parallelism.sharding=zero1",
         "parallelism.overlap_param_gather=true"},
        {"parallelism.tp=2", "parallelism.pp=2", "parallelism.dp=1", "parallelism.cp=2",
         "parallelism.cp_comm_type=allgather", "parallelism.sequence_parallel=true",
         "parallelism.tp_comm_overlap=true", "parallelism.overlap_p2p_comm=true"},
    };
    for (const auto& layout : layouts) {
        std::vector<std::string> sets{"topology.nodes=2"};
        for (const auto& o : layout)
            sets.push_back(o);
        const auto spec = workload::load_experiment(kSmall, sets);
        const auto flags = api::megatron_args_for(spec);
        std::vector<std::string> warnings;
        auto back = workload::megatron_args_to_overrides(flags, warnings);
        CHECK_MESSAGE(warnings.empty(), flags);
        // Megatron derives dp from the world size; the schedule follows vpp as Megatron's does.
        back.insert(back.begin(), {"topology.nodes=2", "parallelism.tp=8", "parallelism.pp=1",
                                   "parallelism.vpp=1", "training.micro_batch_size=1"});
        back.push_back("parallelism.dp=" + std::to_string(spec.layout.dp));
        back.push_back("schedule=" + spec.schedule);
        const auto again = workload::load_experiment(kSmall, back);
        const auto& a = spec.layout;
        const auto& b = again.layout;
        CHECK_MESSAGE(a.tp == b.tp, flags);
        CHECK_MESSAGE(a.pp == b.pp, flags);
        CHECK_MESSAGE(a.cp == b.cp, flags);
        CHECK_MESSAGE(a.dp == b.dp, flags);
        CHECK_MESSAGE(a.vpp == b.vpp, flags);
        CHECK_MESSAGE(a.sequence_parallel == b.sequence_parallel, flags);
        CHECK_MESSAGE(a.sharding == b.sharding, flags);
        CHECK_MESSAGE(spec.training.micro_batch_size == again.training.micro_batch_size, flags);
        CHECK_MESSAGE(spec.training.global_batch_size == again.training.global_batch_size, flags);
        CHECK_MESSAGE(spec.training.seq_length == again.training.seq_length, flags);
        CHECK_MESSAGE(spec.training.recompute == again.training.recompute, flags);
        CHECK_MESSAGE(spec.training.precision == again.training.precision, flags);
        CHECK_MESSAGE(spec.training.fp8_recipe == again.training.fp8_recipe, flags);
        CHECK_MESSAGE(a.cp_comm_type == b.cp_comm_type, flags);
        CHECK_MESSAGE(a.cp_a2a_size == b.cp_a2a_size, flags);
        CHECK_MESSAGE(a.overlap_grad_reduce == b.overlap_grad_reduce, flags);
        CHECK_MESSAGE(a.overlap_param_gather == b.overlap_param_gather, flags);
        CHECK_MESSAGE(a.tp_comm_overlap == b.tp_comm_overlap, flags);
        CHECK_MESSAGE(a.overlap_p2p_comm == b.overlap_p2p_comm, flags);
    }
}

TEST_CASE("megatron_args_for names the schedule by its traits, not its name") {
    // Interleaved (in Megatron-LM, vpp chunks per device) writes the virtual stages; zb-v also runs
    // two chunks per device but Megatron-LM has no such schedule: no virtual-stage flag, a note.
    const auto flags_of = [](const std::string& schedule, std::vector<std::string>* notes) {
        return api::megatron_args_for(
            workload::load_experiment(
                kSmall, {"topology.nodes=2", "parallelism.tp=2", "parallelism.pp=2",
                         "parallelism.dp=2", "parallelism.vpp=2", "schedule=" + schedule}),
            notes);
    };
    std::vector<std::string> notes;
    CHECK(flags_of("interleaved", &notes).find("--num-virtual-stages-per-pipeline-rank 2") !=
          std::string::npos);
    CHECK(notes.empty());
    const auto zbv = flags_of("zb-v", &notes);
    CHECK(zbv.find("--num-virtual-stages") == std::string::npos);
    CHECK(zbv.find("--pipeline-model-parallel-size 2") != std::string::npos);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].find("no flag for the zb-v schedule") != std::string::npos);
    notes.clear();
    flags_of("1f1b", &notes);
    CHECK(notes.empty());
}

TEST_CASE("run_ahead commits what the sequential loop commits, for any number of workers") {
    // The loop: for (i = 0; i < 40 && go(i); ++i) commit(i, eval(i)), where eval(i) = i * i and
    // go(i) holds while the sum committed so far is below 3000, a rule that only turns from true
    // to false as results are committed (as plan's k-th best score). Sequentially: the sum of
    // the squares 0..k-1 is (k-1) k (2k-1) / 6; it is 2870 for k = 21 (0..20) and 3311 for 22,
    // so items 0..21 are committed (go(21) sees 2870 < 3000) and go(22) stops it: 22 commits,
    // the first item not committed 22. Evaluations sleep for a time that varies with i, so
    // that later items often finish first.
    for (const auto& [workers, ahead] : std::vector<std::pair<std::size_t, std::size_t>>{
             {1, 1}, {2, 2}, {3, 3}, {8, 8}, {2, 8}, {3, 12}}) {
        CAPTURE(workers);
        CAPTURE(ahead);
        api::WorkerPool pool(workers);
        long sum = 0;
        std::vector<std::size_t> committed;
        std::set<std::size_t> worker_ids;
        std::mutex ids;
        const std::size_t stop = api::run_ahead(
            pool, ahead, 0, 40, [&](std::size_t, std::size_t) { return sum < 3000; },
            [&](std::size_t i, std::size_t w) {
                {
                    std::lock_guard<std::mutex> lock(ids);
                    worker_ids.insert(w);
                }
                std::this_thread::sleep_for(std::chrono::microseconds(200 * ((i * 7) % 5)));
                return static_cast<long>(i * i);
            },
            [&](std::size_t i, long r) {
                committed.push_back(i);
                sum += r;
            });
        CHECK(stop == 22);
        REQUIRE(committed.size() == 22);
        for (std::size_t i = 0; i < committed.size(); ++i)
            CHECK(committed[i] == i);
        CHECK(sum == 3311);
        for (const auto w : worker_ids)
            CHECK(w < workers);
    }
}

TEST_CASE("MemoryBudget: a hold waits until it fits beside those held, one alone always starts") {
    api::MemoryBudget budget(10);
    {
        // Above the whole budget, alone: starts (run() refuses what is above the limit).
        const api::MemoryBudget::Hold big(budget, 25);
    }
    std::atomic<bool> first_released{false};
    std::atomic<bool> second_started_early{false};
    std::optional<api::MemoryBudget::Hold> first(std::in_place, budget, 6);
    std::thread second([&] {
        // 6 + 6 > 10: waits for the first to be released.
        const api::MemoryBudget::Hold hold(budget, 6);
        second_started_early = !first_released.load();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    first_released = true;
    first.reset();
    second.join();
    CHECK(!second_started_early);
    // 4 + 6 = 10 fit together: the second does not wait.
    const api::MemoryBudget::Hold four(budget, 4);
    const api::MemoryBudget::Hold six(budget, 6);
}

TEST_CASE("run_ahead passes an evaluation's exception on and leaves nothing running") {
    api::WorkerPool pool(2);
    std::vector<std::size_t> committed;
    CHECK_THROWS_AS(api::run_ahead(
                        pool, 2, 0, 10, [](std::size_t, std::size_t) { return true; },
                        [](std::size_t i, std::size_t) {
                            if (i == 3) throw std::runtime_error("three");
                            return i;
                        },
                        [&](std::size_t i, std::size_t) { committed.push_back(i); }),
                    std::runtime_error);
    CHECK(committed == std::vector<std::size_t>{0, 1, 2});
}

TEST_CASE("plan's answer is the same for any number of threads") {
    // Each layout is evaluated alone, the caches change no result and run_ahead commits what
    // one thread would: the JSON of every layout (figures, statuses, reasons) is the same byte
    // for byte with 1, 2 and 3 threads. Under flow, so that both steps 4 and 5 run ahead; with
    // the top 1 too, where confirming runs are stopped (a run launched ahead is judged by the
    // k-th best at its commit, as one thread would stop it).
    auto options = small_options();
    options.sets = {"topology.nodes=4", "network.model=flow"};
    options.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1", "training.recompute=none"};
    options.schedules = {"1f1b", "interleaved"};
    const api::SweepRanks ranks;
    for (const std::size_t top : {3, 1}) {
        CAPTURE(top);
        options.top = top;
        std::string first;
        for (const int threads : {1, 2, 3}) {
            CAPTURE(threads);
            options.threads = threads;
            const auto result = api::plan(options, ranks);
            REQUIRE(result);
            const auto text = plan_json(*result).dump();
            if (first.empty()) {
                first = text;
                CHECK(result->confirmed > options.top);
                if (top == 1) CHECK(text.find("confirmed_above_s") != std::string::npos);
            } else {
                CHECK(text == first);
            }
        }
    }
}

TEST_CASE("plan --hsdp and --partial-recompute: their layouts, loaded as the overrides say") {
    // tp 1, pp 2 on 8 GPUs: dp 4. 1f1b has one chunk per stage, so a chunk holds 8 / 2 = 4
    // layers and the block method takes N = 1, 2 or 3 (with N = 0, the uniform method: 4
    // variants of recompute full); HSDP's shard groups of dp 4: s = 2 (with 0, all of dp: 2
    // variants of zero3). 4 x 2 = 8 layouts.
    auto o = small_options();
    o.fixes = {"parallelism.tp=1",        "parallelism.pp=2",
               "parallelism.cp=1",        "parallelism.sharding=zero3",
               "training.recompute=full", "training.micro_batch_size=1"};
    o.schedules = {"1f1b"};
    o.headroom = 0;
    o.margin = 100;  // every layout simulated
    o.hsdp = true;
    o.partial_recompute = true;
    const api::SweepRanks ranks;
    const auto result = api::plan(o, ranks);
    REQUIRE(result);
    CHECK(result->layouts == 8);
    std::set<std::pair<int, int>> seen;
    for (const auto& e : result->entries)
        seen.insert({e.layout.recompute_layers, e.layout.shard_size});
    CHECK(seen == std::set<std::pair<int, int>>{
                      {0, 0}, {0, 2}, {1, 0}, {1, 2}, {2, 0}, {2, 2}, {3, 0}, {3, 2}});
    // Each simulated layout's time is a run of the experiment with the same keys.
    for (const auto& e : result->entries) {
        if (!e.analytical) continue;
        std::vector<std::string> sets = o.sets;
        for (const auto& s : e.layout.overrides())
            sets.push_back(s);
        const auto spec = workload::load_experiment(kSmall, sets);
        CHECK(spec.layout.shard_size == (e.layout.shard_size > 0 ? e.layout.shard_size : 0));
        CHECK(spec.training.recompute_layers ==
              (e.layout.recompute_layers > 0 ? e.layout.recompute_layers : 1));
        CHECK(api::run(spec).summary.iteration_time_s == e.analytical->iteration_time_s);
    }
    // More recomputed layers, more compute: with the sharding fixed, N = 3 is slower than N = 1.
    const auto time_of = [&](int n) {
        for (const auto& e : result->entries)
            if (e.layout.recompute_layers == n && e.layout.shard_size == 0 && e.analytical)
                return e.analytical->iteration_time_s;
        return -1.0;
    };
    CHECK(time_of(1) > 0);
    CHECK(time_of(3) > time_of(1));
    // The flags of a block layout say so.
    api::PlanLayout l = result->entries.front().layout;
    l.recompute_layers = 2;
    std::vector<std::string> sets = o.sets;
    for (const auto& s : l.overrides())
        sets.push_back(s);
    const auto args = api::megatron_args_for(workload::load_experiment(kSmall, sets));
    CHECK(args.find("--recompute-method block") != std::string::npos);
    CHECK(args.find("--recompute-num-layers 2") != std::string::npos);
}

TEST_CASE("plan --gpus: the best over several GPU counts is the best of each count's plan") {
    // Energy per token = GPUs x 700 W x T / tokens: fewer GPUs can win though each is slower.
    // The search over 4, 8 and 16 GPUs must rank first the best of three plans each run at one
    // count (topology.nodes = 1, 2, 4 of four GPUs), and its layouts carry their count.
    auto o = small_options();
    o.objective = api::PlanObjective::Energy;
    o.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1", "training.recompute=none"};
    o.schedules = {"1f1b"};
    o.headroom = 0.9;
    o.top = 3;
    const api::SweepRanks ranks;
    double best = std::numeric_limits<double>::infinity();
    std::string best_text;
    for (const int nodes : {1, 2, 4}) {
        auto one = o;
        one.sets = {"topology.nodes=" + std::to_string(nodes)};
        const auto r = api::plan(one, ranks);
        REQUIRE(r);
        if (r->top.front().figures.objective < best) {
            best = r->top.front().figures.objective;
            best_text = r->top.front().layout.text();
        }
    }
    o.gpus = {4, 8, 16};
    const auto all = api::plan(o, ranks);
    REQUIRE(all);
    CHECK(all->gpu_counts == std::vector<int>{4, 8, 16});
    CHECK(all->top.front().figures.objective == best);
    const auto& l = all->top.front().layout;
    CHECK(l.nodes * 4 == l.gpus());
    CHECK(l.text() == best_text + " on " + std::to_string(l.gpus()) + " GPUs");
    // A count that is not whole nodes is refused, naming it.
    o.gpus = {6};
    CHECK(error_of([&] { api::plan(o, ranks); }) ==
          "--gpus 6: expected a whole number of nodes of 4 GPUs (the topology's node), e.g. 8");
}

TEST_CASE("plan --global-batch: ranked per token, the best of each batch's own plan") {
    // With several batches the time objective is seconds per 1M tokens: T / (B x 1024) x 1e6 for
    // a batch of B sequences of 1,024 tokens. Searching B = 8, 16 and 32 must rank first the
    // best of three plans each run at one batch (ranked by T alone, which per token is the same
    // order within a batch), and must search exactly the layouts of those three together.
    auto o = small_options();
    o.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1", "training.recompute=none"};
    o.schedules = {"1f1b"};
    o.top = 3;
    const api::SweepRanks ranks;
    double best = std::numeric_limits<double>::infinity();
    std::string best_text;
    std::size_t layouts = 0;
    for (const std::int64_t batch : {8, 16, 32}) {
        auto one = o;
        one.sets.push_back("training.global_batch_size=" + std::to_string(batch));
        const auto r = api::plan(one, ranks);
        REQUIRE(r);
        CHECK(r->objective_unit == "s");
        layouts += r->layouts;
        const double per_token = r->top.front().figures.iteration_time_s / (batch * 1024.0) * 1e6;
        if (per_token < best) {
            best = per_token;
            best_text = r->top.front().layout.text() + " batch " + std::to_string(batch);
        }
    }
    o.global_batches = {8, 16, 32};
    const auto all = api::plan(o, ranks);
    REQUIRE(all);
    CHECK(all->objective_unit == "s per 1M tokens");
    CHECK(all->global_batches == std::vector<std::int64_t>{8, 16, 32});
    CHECK(all->layouts == layouts);
    CHECK(all->top.front().figures.objective == doctest::Approx(best));
    CHECK(all->top.front().layout.text() == best_text);
    // The batch is the layout's own override, and in its JSON.
    const auto& l = all->top.front().layout;
    const auto overrides = l.overrides();
    CHECK(std::count(overrides.begin(), overrides.end(),
                     "training.global_batch_size=" + std::to_string(l.global_batch)) == 1);
    CHECK(plan_json(*all)["top"][0]["layout"]["global_batch_size"] == l.global_batch);
    // One batch: time stays the iteration time.
    o.global_batches = {16};
    const auto one = api::plan(o, ranks);
    REQUIRE(one);
    CHECK(one->objective_unit == "s");
    // The batch is searched or fixed, not both.
    o.global_batches = {8, 16};
    o.fixes.push_back("training.global_batch_size=16");
    CHECK(error_of([&] { api::plan(o, ranks); }) ==
          "--fix training.global_batch_size=16: the global batch is searched (--global-batch): fix "
          "it there");
}

TEST_CASE("plan --global-batch: the option's sizes and ranges") {
    using V = std::vector<std::int64_t>;
    CHECK(api::parse_global_batches("2048") == V{2048});
    // MIN..MAX: the multiples of MIN up to MAX (4096 is 4 x 1024).
    CHECK(api::parse_global_batches("1024..4096") == V{1024, 2048, 3072, 4096});
    // MIN..MAX:STEP from MIN; 36 is not reached (8 + 3 x 8 = 32, then 40 > 36). Sorted, each once.
    CHECK(api::parse_global_batches("8..36:8,4,16") == V{4, 8, 16, 24, 32});
    const auto bad = [](const std::string& text) {
        return error_of([&] { api::parse_global_batches(text); });
    };
    CHECK(bad("0").find("--global-batch 0: '0': sizes go from 1 to") == 0);
    CHECK(bad("64..32").find("'64..32': the range ends below its start") != std::string::npos);
    CHECK(bad("1k").find("'1k': '1k' is not a whole number") != std::string::npos);
    CHECK(bad("8,,16").find("an empty item") != std::string::npos);
    CHECK(bad("8,").find("a trailing comma") != std::string::npos);
    CHECK(bad("").find("nothing to search") != std::string::npos);
    // 1..1000 is a thousand sizes: refused before any is made.
    CHECK(bad("1..1000:1").find("more than 256 sizes") != std::string::npos);
    CHECK(bad("1..99999999999999999999").find("is not a whole number") != std::string::npos);
    // training.global_batch_size is a count (an int): 2^31 wrapped to -2^31 and searched nothing.
    CHECK(api::parse_global_batches("2147483647") == V{2147483647});
    CHECK(bad("2147483648").find("sizes go from 1 to 2147483647") != std::string::npos);
}

TEST_CASE("plan counts the simulator's own memory against --max-memory, layout by layout") {
    // A batch of 2^24 sequences on plan-small's 8 GPUs: at dp 8 and micro-batch 2, 2^20
    // microbatches per replica, 8 workers x 2^20 x 3 passes x 128 bytes = 3.2 GB by
    // estimate_run_bytes, above 1 GiB; every layout has at least 2^20 microbatches per replica
    // (2^24 / (dp x mbs) with dp x mbs <= 16) and at least 8 x 2^20 x 3 passes in all, so all are
    // refused for it, each before its op orders are made (it reached 11.5 GB and bad_alloc).
    auto o = small_options();
    o.global_batches = {std::int64_t{1} << 24};
    o.max_memory = std::int64_t{1} << 30;
    const auto error = error_of([&] { api::plan(o, api::SweepRanks{}); });
    CHECK(error.find("none of the") != std::string::npos);
    CHECK(error.find("this run would need about") != std::string::npos);
    CHECK(error.find("more than the limit of 1.074 GB") != std::string::npos);
}

TEST_CASE("plan refuses thread counts beyond 256, a failed job and a profile model's shapes") {
    const api::SweepRanks ranks;
    auto o = small_options();
    o.threads = 257;
    CHECK(error_of([&] { api::plan(o, ranks); }) ==
          "--threads 257: expected a number of threads from 1 to 256 (or 0: one per core)");
    o = small_options();
    o.sets.push_back("faults={gpus: [{gpus: 0, at: 0s}]}");
    CHECK(error_of([&] { api::plan(o, ranks); }).find("a GPU or node failure ends") !=
          std::string::npos);
    o = small_options();
    o.objective = api::PlanObjective::Cost;
    o.gpu_hour_price = 2e9;
    CHECK(error_of([&] { api::plan(o, ranks); }).find("--gpu-hour-price: expected the price") == 0);
    o = small_options();
    o.sets.push_back("compute={model: profile, layer_forward: 1ms, layer_backward: 2ms}");
    // --fix holds cp and sharding only: tp, ep, micro-batch size and recompute are named, each
    // with the experiment's value.
    const auto profile = error_of([&] { api::plan(o, ranks); });
    CHECK(profile.find("--fix parallelism.tp=") != std::string::npos);
    CHECK(profile.find("--fix parallelism.cp=") == std::string::npos);
    CHECK(profile.find("--fix training.micro_batch_size=1 --fix training.recompute=none (or "
                       "give compute.profiled_recompute") != std::string::npos);
    o.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1",  "parallelism.tp=2",
               "parallelism.ep=1", "training.micro_batch_size=1", "training.recompute=none"};
    CHECK(!api::plan(o, ranks)->top.empty());
}

TEST_CASE("plan searches recomputation under a profile that says what it measured") {
    // compute.profiled_recompute: none says the profiled backward holds no recomputation, so
    // plan needs no --fix of training.recompute: each recomputation is charged its difference
    // (full: the profiled 1 ms forward again per layer; workload/test_plan.cpp checks the
    // times) and searched. On this small model no recomputation fits and costs nothing extra,
    // so it ranks first; layouts with full recomputation are evaluated, not refused.
    const api::SweepRanks ranks;
    auto o = small_options();
    o.sets.push_back(
        "compute={model: profile, layer_forward: 1ms, layer_backward: 2ms, "
        "profiled_recompute: none}");
    o.fixes = {"parallelism.cp=1", "parallelism.sharding=zero1", "parallelism.tp=2",
               "parallelism.ep=1", "training.micro_batch_size=1"};
    o.keep_entries = true;
    const auto result = api::plan(o, ranks);
    REQUIRE(result);
    REQUIRE(!result->top.empty());
    CHECK(result->top.front().layout.recompute == workload::Recompute::None);
    bool full_seen = false;
    for (const auto& e : result->entries)
        full_seen |= e.layout.recompute == workload::Recompute::Full &&
                     e.status != api::PlanEntry::Status::Invalid;
    CHECK(full_seen);
}

TEST_CASE("plan --uneven-stages: a first/last split where the layers do not divide") {
    // 10 layers (model.layers=10), tp 1, 1f1b: pp 1, 2, 4 or 8 on 8 GPUs. The experiment's own
    // pp is 2 (its split stays its own). pp 4: 10 over 4 does not divide; of m = 2 and 3 middle
    // layers, m = 2 leaves 10 - 2 x 2 = 6 for the ends, 3 + 3 (largest stage 3), and m = 3
    // leaves 4, 2 + 2 (largest 3 too): the tie goes to m = 2, so 3/2/2/3. pp 8: m = 1 leaves
    // 10 - 6 = 4, 2 + 2 (m = 2 would leave a negative rest), so 2/1/.../1/2. So 6 layouts: pp 1
    // and 2 once, pp 4 and 8 twice, the even ones of pp 4 and 8 invalid.
    auto o = small_options();
    o.sets = {"topology.nodes=2", "model.layers=10"};
    o.fixes = {"parallelism.tp=1", "parallelism.cp=1", "parallelism.sharding=zero1",
               "training.recompute=none", "training.micro_batch_size=1"};
    o.schedules = {"1f1b"};
    o.headroom = 0;
    o.margin = 100;
    o.uneven_stages = true;
    const api::SweepRanks ranks;
    const auto result = api::plan(o, ranks);
    REQUIRE(result);
    CHECK(result->layouts == 6);
    std::map<std::pair<int, int>, std::pair<int, int>> split_of;  // (pp, variant) -> (first, last)
    for (const auto& e : result->entries) {
        CAPTURE(e.layout.text());
        if (e.layout.first_stage_layers > 0) {
            split_of[{e.layout.pp, 1}] = {e.layout.first_stage_layers, e.layout.last_stage_layers};
            CHECK(e.status != api::PlanEntry::Status::Invalid);
            // Simulated as a run with the same keys.
            std::vector<std::string> sets = o.sets;
            for (const auto& s : e.layout.overrides())
                sets.push_back(s);
            const auto spec = workload::load_experiment(kSmall, sets);
            REQUIRE(e.analytical);
            CHECK(api::run(spec).summary.iteration_time_s == e.analytical->iteration_time_s);
        } else if (e.layout.pp == 4 || e.layout.pp == 8) {
            CHECK(e.status == api::PlanEntry::Status::Invalid);
        }
    }
    CHECK(split_of ==
          std::map<std::pair<int, int>, std::pair<int, int>>{{{4, 1}, {3, 3}}, {{8, 1}, {2, 2}}});
}

TEST_CASE("plan --guide: a guide layout at another pp takes the derived first/last split") {
    // A 41-layer model of about 13B parameters (12 x 41 x 5120^2 = 12.9B in its blocks) on 16
    // GPUs: the guide's row 10-70B on 16-64 GPUs gives TP=4-8 + PP=2-4. The experiment's pp is 1
    // (its split is for pp 1), and 41 layers divide neither pp 2 nor pp 4, so each guide layout
    // takes first_last_split: pp 2, 21 + 20; pp 4, middle m = 10 (41 - 20 = 21 for the ends,
    // 11 + 10, largest 11) against m = 11 (19, 10 + 9, largest 11 too): the tie keeps m = 10,
    // 11/10/10/10. The search itself is held to one layout (everything fixed).
    auto o = small_options();
    o.sets = {"topology.nodes=4", "parallelism.pp=1", "model.layers=41", "model.hidden_size=5120",
              "model.attention_heads=40"};
    o.fixes = {"parallelism.tp=1",        "parallelism.pp=1",
               "parallelism.cp=1",        "parallelism.sharding=zero3",
               "training.recompute=full", "training.micro_batch_size=1"};
    o.schedules = {"1f1b"};
    o.headroom = 0;
    o.top = 1;
    o.guide = true;
    o.keep_entries = false;
    const api::SweepRanks ranks;
    const auto result = api::plan(o, ranks);
    REQUIRE(result);
    std::map<int, std::pair<int, int>> split_of_pp;
    for (const auto& g : result->guide) {
        CAPTURE(g.layout.text());
        CAPTURE(g.reason);
        if (g.layout.pp < 2) continue;
        split_of_pp[g.layout.pp] = {g.layout.first_stage_layers, g.layout.last_stage_layers};
        CHECK(g.figures.has_value());  // valid with the split (the experiment's would not be)
    }
    CHECK(split_of_pp.count(2) == 1);
    CHECK(split_of_pp.count(4) == 1);
    if (split_of_pp.count(2)) CHECK(split_of_pp[2] == std::pair{21, 20});
    if (split_of_pp.count(4)) CHECK(split_of_pp[4] == std::pair{11, 10});
}

TEST_CASE("plan: why a runner-up lost, slower, tied or not slower on another objective") {
    // Winner: 1 s per iteration, half of it compute (idle 0.5), 0.2 s bubble. Loser: 1.5 s,
    // compute 0.6 x 1.5 = 0.9 s, bubble 0.2 x 1.5 = 0.3 s. It is 0.5 s slower; the part that grew
    // the most is compute, +0.4 s (bubble +0.1 s, the rest 0).
    api::PlanFigures winner, loser;
    winner.iteration_time_s = 1.0;
    winner.idle_fraction = 0.5;
    winner.bubble_fraction = 0.2;
    winner.objective = 1.0;
    loser.iteration_time_s = 1.5;
    loser.idle_fraction = 0.4;
    loser.bubble_fraction = 0.2;
    loser.objective = 1.5;
    const auto t = [](double s) { return format_time(Time::from_seconds_ceil(s)); };
    std::string slower("+");
    slower.append(t(0.5)).append(" per iteration; the most: compute +").append(t(0.4));
    slower.append(" (").append(t(0.9)).append(" against ").append(t(0.5)).append(")");
    CHECK(api::why_lost(loser, winner, false, api::PlanObjective::Time) == slower);

    // The same time and score: a tie, listed after the winner by enumeration order (not "+0 ps").
    CHECK(api::why_lost(winner, winner, false, api::PlanObjective::Time) ==
          "ties with the best (the same time); listed after it in enumeration order");

    // Faster by 0.2 s but a lower MFU (the score is -MFU: -0.40 against -0.45), as with more
    // GPUs under --objective mfu: not slower, and the two MFUs.
    api::PlanFigures faster = winner;
    faster.iteration_time_s = 0.8;
    faster.objective = -0.40;
    api::PlanFigures best = winner;
    best.objective = -0.45;
    std::string not_slower("-");
    not_slower.append(t(0.2)).append(
        " per iteration, not slower; ranks lower on MFU 40.0% against MFU 45.0%");
    CHECK(api::why_lost(faster, best, false, api::PlanObjective::Mfu) == not_slower);
}
