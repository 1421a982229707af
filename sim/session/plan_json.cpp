// plan's results as JSON: the entries of every layout looked at (PlanEntries), `plan --json`
// (write_plan_json) and the HTML report's data (plan_html_data).
#include "session/plan.hpp"

#include <algorithm>
#include <limits>
#include <string_view>

#include "core/units.hpp"
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
    // Only where searched (--gpus, --uneven-stages, --hsdp, --partial-recompute, --cp-comm) and
    // set.
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
    if (l.cp_comm) {
        j["cp_comm_type"] = std::string(name_of(workload::kCpCommTypeNames, *l.cp_comm));
        if (l.cp_a2a_size > 0) j["cp_a2a_size"] = l.cp_a2a_size;
    }
    return j;
}

nlohmann::ordered_json entry_json(const PlanEntry& e) {
    nlohmann::ordered_json t;
    t["layout"] = layout_json(e.layout);
    t["status"] = plan_status_name(e.status);
    if (!e.reason.empty()) t["reason"] = e.reason;
    if (e.status != PlanEntry::Status::Invalid) t["memory_per_gpu_bytes"] = e.memory_bytes;
    if (e.lower_bound_s > 0) t["lower_bound_s"] = e.lower_bound_s;
    if (e.analytical) t["analytical"] = figures_json(*e.analytical);
    if (e.confirmed) t["confirmed"] = figures_json(*e.confirmed);
    if (e.confirmed_above_s) t["confirmed_above_s"] = *e.confirmed_above_s;
    return t;
}

// Writes one object member by member as dump(indent) prints it whole (-1: compact): each
// `"key": value` on its own line at depth 1, a value of several lines indented to its depth, an
// array member's items at depth 2 one at a time (open_member, array_item..., close_array).
class ObjectWriter {
  public:
    ObjectWriter(std::ostream& out, int indent) : out_(out), indent_(indent) {}
    void begin() { out_ << '{'; }
    // One member, with `value` as dump prints it at depth 1.
    void member(std::string_view key, const nlohmann::ordered_json& value) {
        open_member(key);
        write_nested(
            value.dump(indent_, ' ', false, nlohmann::ordered_json::error_handler_t::replace), 1);
    }
    // The opening of a member whose value the caller writes (an array: array_item, then
    // close_array).
    void open_member(std::string_view key) {
        out_ << (any_ ? "," : "") << newline(1)
             << nlohmann::ordered_json(std::string(key))
                    .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
             << (indent_ < 0 ? ":" : ": ");
        any_ = true;
    }
    // An array's items, each as dump prints it at depth 2; close_array after the last.
    void array_item(const nlohmann::ordered_json& value) {
        out_ << (items_ == 0 ? "[" : ",") << newline(2);
        write_nested(
            value.dump(indent_, ' ', false, nlohmann::ordered_json::error_handler_t::replace), 2);
        ++items_;
    }
    void close_array() {
        if (items_ == 0)
            out_ << "[]";
        else
            out_ << newline(1) << ']';
        items_ = 0;
    }
    void end() { out_ << (any_ ? newline(0) : std::string()) << '}'; }

  private:
    // A line break and the indentation of `depth` (nothing in the compact form).
    std::string newline(int depth) const {
        if (indent_ < 0) return {};
        std::string text(1 + static_cast<std::size_t>(depth * indent_), ' ');
        text.front() = '\n';
        return text;
    }
    // `text` (a value dumped at depth 0) at `depth`: every line after its first indented. Line
    // breaks in dumped text are structure only (a string's are escaped).
    void write_nested(const std::string& text, int depth) {
        if (indent_ < 0) {
            out_ << text;
            return;
        }
        const std::string pad = newline(depth);
        std::size_t from = 0;
        for (std::size_t at = text.find('\n'); at != std::string::npos;
             from = at + 1, at = text.find('\n', from))
            out_.write(text.data() + from, static_cast<std::streamsize>(at - from)) << pad;
        out_.write(text.data() + from, static_cast<std::streamsize>(text.size() - from));
    }
    std::ostream& out_;
    int indent_;
    bool any_ = false;
    std::size_t items_ = 0;
};

}  // namespace

const char* plan_status_name(PlanEntry::Status s) {
    return name_of(kPlanStatusNames, s).data();
}

PlanEntries::PlanEntries(std::vector<Record> records, std::map<std::size_t, PlanFigures> analytical,
                         std::map<std::size_t, PlanFigures> confirmed,
                         std::map<std::size_t, double> stopped, Context context)
    : records_(std::move(records)),
      analytical_(std::move(analytical)),
      confirmed_(std::move(confirmed)),
      stopped_(std::move(stopped)),
      context_(std::move(context)) {}

PlanEntry PlanEntries::operator[](std::size_t i) const {
    const Record& r = records_.at(i);
    PlanEntry e;
    e.layout = r.layout;
    e.index = r.index;
    e.status = r.status;
    e.memory_bytes = r.memory_bytes;
    e.lower_bound_s = r.lower_bound_s;
    switch (r.status) {
        case PlanEntry::Status::Invalid:
            if (r.invalid) e.reason = *r.invalid;
            break;
        case PlanEntry::Status::PrunedMemory:
            e.reason = "needs " + std::string(r.floor_only ? "at least " : "") +
                       format_bytes(Bytes{r.memory_bytes}) + " per GPU" +
                       (r.floor_only ? " (one microbatch in flight)" : "") + ", above " +
                       format_bytes(Bytes{context_.limit_bytes}) + " (HBM " +
                       format_bytes(Bytes{context_.hbm_bytes}) + " less the headroom)";
            break;
        case PlanEntry::Status::LeftByLimit:
            e.reason =
                "not simulated: the confirmation limit was reached first, and its lower "
                "bound " +
                std::to_string(r.lower_bound_s) + " s is no worse than the " +
                std::to_string(context_.top) + "-th confirmed result under the " +
                context_.network + " network (--confirm all simulates it)";
            break;
        default:
            if (const auto a = analytical_.find(r.index); a != analytical_.end()) {
                e.analytical = a->second;
                e.status = PlanEntry::Status::Simulated;
            } else {
                e.status = PlanEntry::Status::PrunedBound;
                e.reason = "its lower bound " + std::to_string(r.lower_bound_s) +
                           " s cannot beat the " + std::to_string(context_.top) +
                           "-th best result under the " + context_.network + " network";
            }
            if (const auto c = confirmed_.find(r.index); c != confirmed_.end()) {
                e.confirmed = c->second;
                e.status = PlanEntry::Status::Confirmed;
            }
            if (const auto c = stopped_.find(r.index); c != stopped_.end()) {
                e.confirmed_above_s = c->second;
                e.status = PlanEntry::Status::Confirmed;
                e.reason = "its run under the " + context_.network + " network was stopped at " +
                           std::to_string(c->second) + " s, where it could no longer beat the " +
                           std::to_string(context_.top) + "-th best confirmed result";
            }
    }
    return e;
}

std::vector<PlanEntry> PlanEntries::simulated() const {
    std::vector<PlanEntry> out;
    out.reserve(analytical_.size());
    for (std::size_t i = 0; i < records_.size(); ++i)
        if (records_[i].status != PlanEntry::Status::Invalid &&
            records_[i].status != PlanEntry::Status::PrunedMemory &&
            analytical_.count(records_[i].index))
            out.push_back((*this)[i]);
    return out;
}

void write_plan_json(std::ostream& out, const PlanResult& r, int indent) {
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
    j["left_by_limit"] = r.left_by_limit;
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
    // The members so far, then every layout's entry as it is made, then the guide's.
    ObjectWriter writer(out, indent);
    writer.begin();
    for (const auto& [key, value] : j.items())
        writer.member(key, value);
    writer.open_member("layouts_evaluated");
    for (const auto& e : r.entries)
        writer.array_item(entry_json(e));
    writer.close_array();
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
        writer.member("guide", g);
    }
    writer.end();
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
                   {"left_by_limit", r.left_by_limit},
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
    for (const auto& e : r.entries.simulated()) {
        // A confirmation stopped early is known only to take longer than the k-th best: not
        // a point (its analytical time would put it where it cannot be).
        if (e.confirmed_above_s) continue;
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
