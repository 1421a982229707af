// plan's results as JSON: `plan --json` (plan_json) and the HTML report's data (plan_html_data).
#include "session/plan.hpp"

#include <algorithm>
#include <limits>

#include "report/summary.hpp"

namespace cs::api {

namespace {

// By hand, not through summary_fields.def: plan keeps a few of the summary's figures per layout
// (PlanFigures, typed for the ranking and why_lost), in an order of its own (time, throughput,
// MFU, then its objective, which no summary has, then memory and where the time goes), so the
// table's columns in the table's order would change `plan --json`. Each key other than
// "objective" is the summary's column of the same value (test_plan.cpp holds them to the table).
nlohmann::ordered_json figures_json(const PlanFigures& f) {
    nlohmann::ordered_json j{{"iteration_time_s", f.iteration_time_s},
                             {"tokens_per_s", f.tokens_per_s},
                             {"mfu", f.mfu},
                             {"objective", f.objective},
                             {"memory_per_gpu_bytes", f.memory_bytes},
                             {"bubble_fraction", f.bubble_fraction},
                             {"exposed_comm_fraction", f.exposed_comm_fraction}};
    // The summary's own keys for the parts (exposed_tp_fraction, ...).
    for (std::size_t k = 0; k < f.exposed_by_kind.size(); ++k)
        j[report::exposed_kind_keys()[k]] = f.exposed_by_kind[k];
    j["host_fraction"] = f.host_fraction;
    j["idle_fraction"] = f.idle_fraction;
    return j;
}

nlohmann::ordered_json layout_json(const PlanLayout& l) {
    nlohmann::ordered_json j{
        {"tp", l.tp},
        {"pp", l.pp},
        {"dp", l.dp},
        {"cp", l.cp},
        {"ep", l.ep},
        {"vpp", l.vpp},
        {"micro_batch_size", l.micro_batch_size},
        {"recompute", std::string(name_of(workload::kRecomputeNames, l.recompute))},
        {"sharding", std::string(name_of(workload::kShardingNames, l.sharding))},
        {"schedule", l.schedule}};
    // Only where searched (--gpus, --uneven-stages, --hsdp, --partial-recompute) and set.
    if (l.nodes > 0) {
        j["gpus"] = l.gpus();
        j["nodes"] = l.nodes;
    }
    if (l.first_stage_layers > 0) {
        j["first_stage_layers"] = l.first_stage_layers;
        j["last_stage_layers"] = l.last_stage_layers;
    }
    if (l.shard_size > 0) j["shard_size"] = l.shard_size;
    if (l.recompute_layers > 0) {
        j["recompute_method"] = "block";
        j["recompute_layers"] = l.recompute_layers;
    }
    if (l.global_batch > 0) j["global_batch_size"] = l.global_batch;
    return j;
}

}  // namespace

const char* plan_status_name(PlanEntry::Status s) {
    return name_of(kPlanStatusNames, s).data();
}

nlohmann::ordered_json plan_json(const PlanResult& r) {
    nlohmann::ordered_json j;
    j["experiment"] = r.source;
    j["gpus"] = r.gpus;
    if (!r.gpu_counts.empty()) j["gpu_counts"] = r.gpu_counts;
    if (!r.global_batches.empty()) j["global_batch_sizes"] = r.global_batches;
    j["hbm_bytes"] = r.hbm_bytes;
    j["network"] = r.network;
    j["objective"] = std::string(name_of(kPlanObjectiveNames, r.objective));
    j["objective_unit"] = r.objective_unit;
    j["margin"] = r.margin;
    j["layouts"] = r.layouts;
    j["invalid"] = r.invalid;
    j["pruned_memory"] = r.pruned_memory;
    j["pruned_bound"] = r.pruned_bound;
    j["simulated"] = r.simulated;
    j["confirmed"] = r.confirmed;
    j["faster_than_analytical"] = r.faster_than_analytical;
    // The confirmation limit (0: none) and what it left that could enter the top k.
    j["confirm_limit"] = r.confirm_limit;
    j["contenders"] = r.contenders;
    if (r.contenders > 0) j["best_contender"] = r.best_contender;
    auto top = nlohmann::ordered_json::array();
    for (const auto& c : r.top) {
        nlohmann::ordered_json t;
        t["layout"] = layout_json(c.layout);
        t["figures"] = figures_json(c.figures);
        t["analytical"] = figures_json(c.analytical);
        t["lower_bound_s"] = c.lower_bound_s;
        if (!c.megatron_args.empty()) t["megatron_args"] = c.megatron_args;
        if (!c.why_lost.empty()) t["why_lost"] = c.why_lost;
        top.push_back(std::move(t));
    }
    j["top"] = std::move(top);
    auto entries = nlohmann::ordered_json::array();
    for (const auto& e : r.entries) {
        nlohmann::ordered_json t;
        t["layout"] = layout_json(e.layout);
        t["status"] = plan_status_name(e.status);
        if (!e.reason.empty()) t["reason"] = e.reason;
        if (e.status != PlanEntry::Status::Invalid) t["memory_per_gpu_bytes"] = e.memory_bytes;
        if (e.lower_bound_s > 0) t["lower_bound_s"] = e.lower_bound_s;
        if (e.analytical) t["analytical"] = figures_json(*e.analytical);
        if (e.confirmed) t["confirmed"] = figures_json(*e.confirmed);
        entries.push_back(std::move(t));
    }
    j["layouts_evaluated"] = std::move(entries);
    if (!r.guide_reasoning.empty()) {
        nlohmann::ordered_json g;
        g["reasoning"] = r.guide_reasoning;
        auto layouts = nlohmann::ordered_json::array();
        for (const auto& e : r.guide) {
            nlohmann::ordered_json t;
            t["layout"] = layout_json(e.layout);
            if (e.figures) {
                t["figures"] = figures_json(*e.figures);
                t["rank"] = e.rank;
                if (!e.versus.empty()) t["versus_best"] = e.versus;
            } else {
                t["reason"] = e.reason;
            }
            layouts.push_back(std::move(t));
        }
        g["layouts"] = std::move(layouts);
        g["not_dividing"] = r.guide_not_dividing;
        j["guide"] = std::move(g);
    }
    return j;
}

nlohmann::ordered_json plan_html_data(const PlanResult& r) {
    nlohmann::ordered_json j;
    j["objective"] = std::string(name_of(kPlanObjectiveNames, r.objective));
    j["objective_unit"] = r.objective_unit;
    j["network"] = r.network;
    j["gpus"] = r.gpus;
    if (!r.gpu_counts.empty()) j["gpu_counts"] = r.gpu_counts;
    j["hbm_bytes"] = r.hbm_bytes;
    j["limit_bytes"] = r.limit_bytes;
    j["counts"] = {{"layouts", r.layouts},
                   {"invalid", r.invalid},
                   {"pruned_memory", r.pruned_memory},
                   {"pruned_bound", r.pruned_bound},
                   {"simulated", r.simulated},
                   {"confirmed", r.confirmed}};
    auto top = nlohmann::ordered_json::array();
    for (const auto& c : r.top)
        top.push_back({{"layout", c.layout.text()},
                       {"figures", figures_json(c.figures)},
                       {"megatron_args", c.megatron_args},
                       {"why_lost", c.why_lost},
                       {"overrides", c.layout.overrides()}});
    j["top"] = top;
    // Points: [memory per GPU (bytes), iteration time (s), 1 if under the experiment's network,
    // rank in the top k (0: none), layout].
    struct Point {
        std::int64_t memory;
        double time;
        bool confirmed;
        std::size_t rank;
        std::string text;
    };
    std::vector<Point> points;
    for (const auto& e : r.entries) {
        if (!e.analytical) continue;
        Point p{e.memory_bytes, (e.confirmed ? *e.confirmed : *e.analytical).iteration_time_s,
                e.confirmed.has_value(), 0, e.layout.text()};
        for (std::size_t i = 0; i < r.top.size(); ++i)
            if (r.top[i].index == e.index) p.rank = i + 1;
        points.push_back(std::move(p));
    }
    auto out = nlohmann::ordered_json::array();
    for (const auto& p : points)
        out.push_back({p.memory, p.time, p.confirmed ? 1 : 0, p.rank, p.text});
    j["points"] = out;
    // The front, by memory then time: a point is on it when it is faster than every point that
    // needs no more memory (ties in memory: the fastest, the first in enumeration order).
    std::vector<std::size_t> order(points.size());
    for (std::size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        if (points[a].memory != points[b].memory) return points[a].memory < points[b].memory;
        return points[a].time < points[b].time;
    });
    auto front = nlohmann::ordered_json::array();
    double fastest = std::numeric_limits<double>::infinity();
    for (const std::size_t i : order)
        if (points[i].time < fastest) {
            fastest = points[i].time;
            front.push_back(i);
        }
    j["pareto"] = front;
    return j;
}

}  // namespace cs::api
