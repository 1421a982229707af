#include "report/summary.hpp"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <stdexcept>

namespace cs::report {

MetricsObserver::MetricsObserver(std::size_t workers) : workers_(workers), totals_(workers) {}

void MetricsObserver::copy_worker(int from, int to) {
    const auto f = static_cast<std::size_t>(from);
    const auto t = static_cast<std::size_t>(to);
    workers_[t] = workers_[f];
    p2p_bytes_ += totals_[f].p2p_bytes - totals_[t].p2p_bytes;
    host_bound_passes_ += totals_[f].host_bound_passes - totals_[t].host_bound_passes;
    totals_[t] = totals_[f];
}

void MetricsObserver::on_pass(const replay::PassRecord& pass) {
    auto& w = workers_[static_cast<std::size_t>(pass.worker)];
    w.compute += pass.compute;
    // A ZeRO-3 pass's wait for its units' all-gathers is exposed communication like its
    // blocking collectives.
    w.collective += pass.collective + pass.gather_wait;
    const workload::CommTimes kinds = replay::exposed_by_kind(pass);
    for (std::size_t k = 0; k < kinds.size(); ++k)
        w.exposed[k] += kinds[k];
    w.host_stall += pass.host_stall;
    if (pass.host_stall > Time::zero()) {
        ++host_bound_passes_;
        ++totals_[static_cast<std::size_t>(pass.worker)].host_bound_passes;
    }
    w.first_pass = std::min(w.first_pass, pass.start);
    w.last_pass_end = std::max(w.last_pass_end, pass.end);
}

void MetricsObserver::on_idle(int worker, Time start, Time end, replay::IdleCause cause) {
    auto& w = workers_[static_cast<std::size_t>(worker)];
    switch (cause) {
        case replay::IdleCause::Pipeline:
            w.idle_pipeline += end - start;
            break;
        case replay::IdleCause::Collective:
            // The collectives a worker waits for outside its passes are its DP ones.
            w.idle_collective += end - start;
            w.exposed[static_cast<std::size_t>(workload::CommKind::Dp)] += end - start;
            break;
        case replay::IdleCause::PipelineComm:
            // Inside a batched exchange once every peer has joined: its own p2p transfers.
            w.idle_collective += end - start;
            w.exposed[static_cast<std::size_t>(workload::CommKind::Pipeline)] += end - start;
            break;
        case replay::IdleCause::Host:
            w.idle_host += end - start;
            break;
    }
}

void MetricsObserver::on_optimizer(int worker, Time start, Time end) {
    workers_[static_cast<std::size_t>(worker)].compute += end - start;
}

void MetricsObserver::on_transfer(const replay::TransferRecord& t) {
    using K = replay::TransferRecord::Kind;
    if (t.kind == K::Activation || t.kind == K::Gradient) {
        p2p_bytes_ += t.bytes.value;
        totals_[static_cast<std::size_t>(t.dst_worker)].p2p_bytes += t.bytes.value;
    }
}

LinkAccounting::LinkAccounting(std::size_t links) : starts_(links), seen_((links + 63) / 64) {}

void LinkAccounting::reset() {
    for_each_seen([this](topology::LinkId l) { starts_[l] = {}; });
    std::fill(seen_.begin(), seen_.end(), 0);
    shared_ = unshared_ = false;
}

void LinkAccounting::note_sharing(bool shared) {
    (shared ? shared_ : unshared_) = true;
    if (shared_ && unshared_)
        throw SimulationError("report", "one link accounting told of shared and unshared flows");
}

void LinkAccounting::on_flow_start(const FlowStart& flow) {
    sharing(flow.shared);
    if (flow.shared) {
        for (topology::LinkId l : flow.path) {
            see(l);
            auto& st = starts_[l];
            st.bytes += flow.bytes;
            count(st, flow.at, 1);
        }
        return;
    }
    const std::int64_t holds = flow.holds.count_ps();
    for (topology::LinkId l : flow.path) {
        see(l);
        auto& st = starts_[l];
        st.bytes += flow.bytes;
        st.word += holds;
    }
}

void LinkAccounting::on_link_totals(Time, std::span<const LinkTotal> totals, std::int64_t count) {
    sharing(false);
    const double n = static_cast<double>(count);
    for (const LinkTotal& t : totals) {
        see(t.link);
        auto& st = starts_[t.link];
        st.bytes += t.bytes * n;
        st.word += (t.holds * count).count_ps();
    }
}

void LinkAccounting::on_flow_end(Time at, std::span<const topology::LinkId> path) {
    for (topology::LinkId l : path)
        count(starts_[l], at, -1);
}

// Rates come at the instants of flows' starts and ends (the network re-solves then), with the
// flow counts those notifications keep: nothing to add but that the flows are shared.
void LinkAccounting::on_link_rate(Time, topology::LinkId, double, int) {
    sharing(true);
}

void LinkAccounting::on_link_rates(Time, std::span<const LinkRate> rates) {
    if (!rates.empty()) sharing(true);
}

void LinkAccounting::on_link_images(std::span<const LinkImage> images) {
    for (const LinkImage& i : images) {
        if (!seen(i.of)) continue;
        see(i.image);
        starts_[i.image] = starts_[i.of];
    }
}

void LinkAccounting::on_link_tallies(std::span<const LinkTally> tallies) {
    sharing(true);
    for (const LinkTally& t : tallies) {
        see(t.link);
        auto& st = starts_[t.link];
        st.bytes += t.bytes;
        st.busy += t.busy;
        st.shared += t.shared;
        // As count() keeps them: the flows on the link (low 32 bits), the most at once above.
        const std::int64_t flows = t.flows;
        st.word = std::max(st.word >> 32, std::int64_t{t.peak}) << 32 | flows;
    }
}

void LinkAccounting::count(Starts& st, Time at, std::int64_t delta) {
    const std::int64_t flows = st.word & 0xffffffff;
    const Time span = at - st.since;
    if (flows >= 1) st.busy += span;
    if (flows >= 2) st.shared += span;
    st.since = at;
    // The low 32 bits, never below zero (an end follows its start); the most at once above.
    const std::int64_t now = flows + delta;
    st.word = std::max(st.word >> 32, now) << 32 | now;
}

LinkSketch::LinkSketch(const topology::Cluster& cluster)
    : cluster_(&cluster), keys_(topology::link_keys(cluster)) {}

std::uint64_t LinkSketch::of(const LinkAccounting& accounting, const topology::Cluster& cluster) {
    const auto keys = topology::link_keys(cluster);
    const auto links = accounting.links();
    std::uint64_t sum = 0;
    accounting.for_each_seen([&](topology::LinkId l) {
        const auto st = links[l];
        sum = modp::add(
            sum, network::link_sketch_term(network::link_keys_of(keys, l), st.bytes, st.busy));
    });
    return sum;
}

void LinkSketch::on_flow_start(const FlowStart& flow) {
    if (flow.shared)
        throw SimulationError("report", "a link sketch told of a shared flow (`flow` fidelity)",
                              flow.at);
    value_ = modp::add(value_, network::link_sketch_term(network::path_keys(keys_, flow.path),
                                                         flow.bytes, flow.holds));
}

void LinkSketch::on_flow_end(Time at, std::span<const topology::LinkId>) {
    throw SimulationError("report", "a link sketch told of a shared flow's end", at);
}

void LinkSketch::on_link_rate(Time at, topology::LinkId, double, int) {
    throw SimulationError("report", "a link sketch told of link rates (`flow` fidelity)", at);
}

void LinkSketch::on_link_rates(Time at, std::span<const LinkRate> rates) {
    if (!rates.empty()) on_link_rate(at, rates.front().link, 0, 0);
}

void LinkSketch::on_link_totals(Time, std::span<const LinkTotal> totals, std::int64_t count) {
    value_ = modp::add(value_, modp::mul(network::link_totals_sketch(keys_, totals),
                                         modp::of(static_cast<std::uint64_t>(count))));
}

namespace {

// Per stage, the means over its workers of their records over an iteration of T seconds. Every
// worker stands for the same number of GPUs, so means over workers are means over GPUs.
std::vector<StageSummary> stage_summaries(const SummaryInputs& in, double T) {
    const auto& plan = *in.plan;
    const auto& workers = in.replay->workers();
    const auto& per = in.metrics->per_worker();
    std::vector<StageSummary> stages(static_cast<std::size_t>(in.spec->layout.pp));
    std::vector<int> count(stages.size(), 0);
    for (std::size_t w = 0; w < workers.size(); ++w) {
        auto& st = stages[static_cast<std::size_t>(workers[w].stage)];
        const auto& p = per[w];
        st.busy_s += p.compute.seconds();
        if (p.first_pass != Time::max())
            st.pass_span_s = std::max(st.pass_span_s, (p.last_pass_end - p.first_pass).seconds());
        if (T > 0) {
            st.bubble_fraction += p.idle_pipeline.seconds() / T;
            st.exposed_comm_fraction += (p.collective + p.idle_collective).seconds() / T;
            for (std::size_t k = 0; k < p.exposed.size(); ++k)
                st.exposed_by_kind[k] += p.exposed[k].seconds() / T;
            st.idle_fraction += (T - p.compute.seconds()) / T;
            st.host_fraction += (p.idle_host + p.host_stall).seconds() / T;
        }
        ++count[static_cast<std::size_t>(workers[w].stage)];
    }
    for (std::size_t i = 0; i < stages.size(); ++i) {
        auto& st = stages[i];
        st.stage = static_cast<int>(i);
        const double n = count[i] > 0 ? count[i] : 1;
        st.busy_s /= n;
        st.bubble_fraction /= n;
        st.exposed_comm_fraction /= n;
        for (double& f : st.exposed_by_kind)
            f /= n;
        st.idle_fraction /= n;
        st.host_fraction /= n;
        if (i < in.peak_inflight.size()) st.peak_inflight_microbatches = in.peak_inflight[i];
        // The memory model's figure (workload::fill_memory, with the schedule's placement of
        // virtual stages on devices), never recomputed here.
        if (i < plan.devices.size())
            st.peak_activation_bytes = plan.devices[i].memory.activations.value;
    }
    return stages;
}

// The summary's fractions: the means of the stages' (each stage's mean over its GPUs).
void add_stage_means(Summary& s) {
    const double n = static_cast<double>(s.stages.size());
    for (const auto& st : s.stages) {
        s.bubble_fraction += st.bubble_fraction / n;
        s.exposed_comm_fraction += st.exposed_comm_fraction / n;
        for (std::size_t k = 0; k < st.exposed_by_kind.size(); ++k)
            s.exposed_by_kind[k] += st.exposed_by_kind[k] / n;
        s.idle_fraction += st.idle_fraction / n;
        s.host_fraction += st.host_fraction / n;
    }
}

// MFU, HFU, tokens/s and TFLOP/s per GPU over an iteration of T seconds.
void add_rates(Summary& s, const workload::ExperimentSpec& spec,
               const workload::IterationPlan& plan, double T) {
    const auto& gpu = spec.cluster->gpu_model(0);
    double peak = gpu.peak_bf16.flops_per_s;
    if (spec.training.precision == workload::Precision::Fp16) peak = gpu.peak_fp16.flops_per_s;
    if (spec.training.precision == workload::Precision::Fp8) peak = gpu.peak_fp8.flops_per_s;
    if (T > 0 && peak > 0) {
        s.mfu = plan.model_flops_per_iteration.value / (T * s.world_size * peak);
        s.hfu = plan.hardware_flops_per_iteration.value / (T * s.world_size * peak);
    }
    if (T > 0) {
        s.tokens_per_s = static_cast<double>(plan.tokens_per_iteration) / T;
        s.tflops_per_gpu = plan.model_flops_per_iteration.value / (T * s.world_size) * 1e-12;
    }
}

}  // namespace

Summary summarize(const SummaryInputs& in) {
    const auto& spec = *in.spec;
    const auto& plan = *in.plan;
    Summary s;
    s.schedule = in.schedule;
    const double T = in.result.iteration_time.seconds();
    s.iteration_time_s = T;
    s.world_size = spec.layout.world_size();
    s.microbatches = plan.microbatches;
    s.tp = spec.layout.tp;
    s.pp = spec.layout.pp;
    s.dp = spec.layout.dp;
    s.cp = spec.layout.cp;
    s.ep = spec.layout.ep;
    s.vpp = plan.chunks;
    s.events = in.result.events;
    s.fold_copies = in.result.fold_copies;
    s.fold_refused = in.result.fold_refused;
    s.fold_replicas = in.result.replicas_simulated;
    s.fold_replicas_refused = in.result.replicas_refused;
    s.host_bound_passes = in.metrics->host_bound_passes();
    s.stages = stage_summaries(in, T);
    add_stage_means(s);
    add_rates(s, spec, plan, T);
    const double gpus_per_worker = static_cast<double>(spec.layout.tp * spec.layout.cp);
    s.p2p_bytes = in.metrics->p2p_bytes_per_gpu() * gpus_per_worker;

    if (in.links) s.links = link_summaries(*spec.cluster, *in.links, T);
    for (const auto& d : plan.devices)
        if (d.memory.total > s.memory.total) s.memory = d.memory;
    return s;
}

namespace {
struct RankedLink {
    topology::LinkId link;
    LinkFigures figures;
};
// The listed links (for_each_listed_link), busiest first (stable: link order breaks ties).
std::vector<RankedLink> ranked_links(const topology::Cluster& cluster,
                                     const LinkAccounting& accounting, double iteration_s) {
    std::vector<RankedLink> ranked;
    for_each_listed_link(cluster, accounting, iteration_s,
                         [&](topology::LinkId l, const LinkFigures& f) {
                             ranked.push_back({l, f});
                         });
    std::stable_sort(ranked.begin(), ranked.end(), [](const RankedLink& a, const RankedLink& b) {
        return a.figures.utilization > b.figures.utilization;
    });
    return ranked;
}
}  // namespace

std::vector<topology::LinkId> links_by_utilization(const topology::Cluster& cluster,
                                                   const LinkAccounting& accounting,
                                                   double iteration_s) {
    std::vector<topology::LinkId> out;
    for (const RankedLink& r : ranked_links(cluster, accounting, iteration_s))
        out.push_back(r.link);
    return out;
}

std::vector<LinkSummary> link_summaries(const topology::Cluster& cluster,
                                        const LinkAccounting& accounting, double iteration_s) {
    std::vector<LinkSummary> out;
    const auto& links = cluster.links();
    for (const RankedLink& r : ranked_links(cluster, accounting, iteration_s)) {
        const LinkFigures& f = r.figures;
        out.push_back({cluster.link_name(r.link), topology::link_kind_name(links[r.link].kind),
                       f.bytes, f.busy_s, f.utilization, f.shared_s, f.max_concurrent_flows});
    }
    return out;
}

nlohmann::ordered_json trace_summary(const Summary& s) {
    auto meta = to_json(s);
    for (const char* key : {"wall_time_s", "links", "events", "fold"})
        meta.erase(key);
    return meta;
}

const std::array<std::string, workload::kCommKinds>& exposed_kind_keys() {
    static const std::array<std::string, workload::kCommKinds> keys = [] {
        std::array<std::string, workload::kCommKinds> k;
        for (std::size_t i = 0; i < k.size(); ++i)
            k[i] = "exposed_" + std::string(workload::kCommKindNames[i].name) + "_fraction";
        return k;
    }();
    return keys;
}

namespace {
void put_exposed(nlohmann::ordered_json& j, const std::array<double, workload::kCommKinds>& f) {
    for (std::size_t k = 0; k < f.size(); ++k)
        j[exposed_kind_keys()[k]] = f[k];
}
}  // namespace

namespace {

using Json = nlohmann::ordered_json;

void put_stages(Json& j, const Summary& s) {
    auto& stages = j["stages"] = Json::array();
    for (const auto& st : s.stages) {
        Json o = {{"stage", st.stage},
                  {"busy_s", st.busy_s},
                  {"pass_span_s", st.pass_span_s},
                  {"bubble_fraction", st.bubble_fraction},
                  {"exposed_comm_fraction", st.exposed_comm_fraction}};
        put_exposed(o, st.exposed_by_kind);
        o["idle_fraction"] = st.idle_fraction;
        o["host_fraction"] = st.host_fraction;
        o["peak_inflight_microbatches"] = st.peak_inflight_microbatches;
        o["peak_activation_bytes"] = st.peak_activation_bytes;
        stages.push_back(std::move(o));
    }
}

void put_links(Json& j, const Summary& s) {
    auto& links = j["links"] = Json::array();
    for (const auto& l : s.links)
        links.push_back({{"name", l.name},
                         {"kind", l.kind},
                         {"bytes", l.bytes},
                         {"busy_s", l.busy_s},
                         {"utilization", l.utilization},
                         {"shared_s", l.shared_s},
                         {"max_concurrent_flows", l.max_concurrent_flows}});
}

void put_variability(Json& j, const Summary& s) {
    if (!s.variability.present) return;
    const auto& v = s.variability;
    j["variability"] = {{"clean_iteration_time_s", v.clean_iteration_time_s},
                        {"cost_s", v.cost_s},
                        {"slowdown", s.iteration_time_s / v.clean_iteration_time_s},
                        {"critical_worker", v.critical_worker},
                        {"critical_stage", v.critical_stage},
                        {"critical_dp", v.critical_dp},
                        {"critical_gpus", v.critical_gpus},
                        {"critical_share", v.critical_share},
                        {"slowest_gpu", v.slowest_gpu},
                        {"slowest_factor", v.slowest_factor}};
}

void put_faults(Json& j, const Summary& s) {
    if (!s.faults.present) return;
    const auto& f = s.faults;
    auto& o =
        j["faults"] = {{"clean_iteration_time_s", f.clean_iteration_time_s}, {"cost_s", f.cost_s}};
    auto& faulty = o["links"] = Json::array();
    for (const auto& l : f.links)
        faulty.push_back({{"link", l.link}, {"fraction", l.fraction}, {"at_s", l.at_s}});
    o["job_failed"] = f.job_failed;
    if (!f.job_failed) return;
    Json lost = Json::array();
    for (std::size_t i = 0; i < f.failed_workers.size(); ++i)
        lost.push_back({{"worker", f.failed_workers[i]},
                        {"stage", f.failed_stages[i]},
                        {"replica", f.failed_replicas[i]}});
    o["failure"] = {{"at_s", f.failed_at_s},        {"what", f.failed_what},
                    {"gpus", f.failed_gpus},        {"workers", lost},
                    {"passes_done", f.passes_done}, {"passes_total", f.passes_total},
                    {"lost_gpu_s", f.lost_gpu_s}};
}

void put_goodput(Json& j, const Summary& s) {
    if (!s.goodput.present) return;
    const auto& g = s.goodput;
    auto& o = j["goodput"] = {{"mtbf_s", g.mtbf_s},
                              {"checkpoint_bytes", g.checkpoint_bytes},
                              {"checkpoint_write_s", g.checkpoint_write_s},
                              {"restart_s", g.restart_s},
                              {"interval_s", g.interval_s},
                              {"interval_iterations", g.interval_iterations},
                              {"young_interval_s", g.young_interval_s},
                              {"daly_interval_s", g.daly_interval_s},
                              {"fraction", g.fraction},
                              {"gpu_power_w", g.gpu_power_w},
                              {"iteration_energy_j", g.iteration_energy_j}};
    if (g.monte_carlo_runs > 0)
        o["monte_carlo"] = {{"runs", g.monte_carlo_runs},
                            {"fraction", g.monte_carlo_fraction},
                            {"ci95", g.monte_carlo_ci95}};
    if (g.tokens > 0) {
        o["tokens"] = g.tokens;
        o["train_time_s"] = g.train_time_s;
        o["gpu_hours"] = g.gpu_hours;
        o["energy_kwh"] = g.energy_kwh;
        o["energy_per_token_j"] = g.energy_per_token_j;
    }
}

void put_fold(Json& j, const Summary& s) {
    auto& fold = j["fold"] = {{"copies", s.fold_copies}};
    if (!s.fold_refused.empty()) fold["refused"] = s.fold_refused;
    fold["replicas"] = s.fold_replicas;
    if (!s.fold_replicas_refused.empty()) fold["replicas_refused"] = s.fold_replicas_refused;
}

// summary_fields.def, line by line: a field (`field` set) or a section (`put` set).
struct Part {
    SummaryField field;
    std::string_view section;
    void (*put)(Json&, const Summary&) = nullptr;
};
// clang-format off
const Part kParts[] = {
#define CS_SUMMARY_FIELD(member, path, column, unit, label, description) \
    {{path, column, unit, label, description, [](const Summary& s) { return Json(s.member); }}, {}, nullptr},
#define CS_SUMMARY_SECTION(key, put) {{}, key, put},
#include "report/summary_fields.def"
#undef CS_SUMMARY_FIELD
#undef CS_SUMMARY_SECTION
};
// clang-format on

}  // namespace

const std::vector<SummaryField>& summary_fields() {
    static const std::vector<SummaryField> fields = [] {
        std::vector<SummaryField> out;
        for (const Part& p : kParts)
            if (!p.put) out.push_back(p.field);
        return out;
    }();
    return fields;
}

const std::vector<std::string_view>& summary_sections() {
    static const std::vector<std::string_view> sections = [] {
        std::vector<std::string_view> out;
        for (const Part& p : kParts)
            if (p.put) out.push_back(p.section);
        return out;
    }();
    return sections;
}

nlohmann::ordered_json summary_fields_json() {
    Json out = Json::array();
    for (const SummaryField& f : summary_fields())
        out.push_back({{"path", f.path},
                       {"column", f.column},
                       {"unit", f.unit},
                       {"label", f.label},
                       {"description", f.description}});
    return out;
}

void put_at_path(nlohmann::ordered_json& j, std::string_view path, nlohmann::ordered_json value) {
    Json* at = &j;
    for (auto dot = path.find('.'); dot != std::string_view::npos; dot = path.find('.')) {
        at = &(*at)[std::string(path.substr(0, dot))];
        path.remove_prefix(dot + 1);
    }
    (*at)[std::string(path)] = std::move(value);
}

const nlohmann::ordered_json* at_path(const nlohmann::ordered_json& j, std::string_view path) {
    const Json* at = &j;
    for (;;) {
        const auto dot = path.find('.');
        if (!at->is_object()) return nullptr;
        const auto it = at->find(std::string(path.substr(0, dot)));
        if (it == at->end()) return nullptr;
        at = &*it;
        if (dot == std::string_view::npos) return at;
        path.remove_prefix(dot + 1);
    }
}

nlohmann::ordered_json column_figures(const Summary& s) {
    Json j = Json::object();
    for (const SummaryField& f : summary_fields())
        if (!f.column.empty()) put_at_path(j, f.path, f.value(s));
    return j;
}

const SummaryField& summary_field(std::string_view path) {
    for (const SummaryField& f : summary_fields())
        if (f.path == path) return f;
    throw std::out_of_range("summary_fields.def has no field '" + std::string(path) + "'");
}

nlohmann::ordered_json to_json(const Summary& s) {
    Json j;
    for (const Part& p : kParts)
        if (p.put)
            p.put(j, s);
        else
            put_at_path(j, p.field.path, p.field.value(s));
    return j;
}

namespace {
std::string pct(double f, int decimals = 2) {
    char b[32];
    std::snprintf(b, sizeof b, "%.*f%%", decimals, f * 100);
    return b;
}
std::string num(double v, const char* fmt = "%.4g") {
    char b[64];
    std::snprintf(b, sizeof b, fmt, v);
    return b;
}
}  // namespace

std::string format_by_unit(std::string_view unit, const nlohmann::ordered_json& value,
                           int decimals) {
    if (unit == "s") return format_time(Time::from_seconds_ceil(value.get<double>()));
    if (unit == "fraction") return pct(value.get<double>(), decimals);
    if (unit == "bytes") return format_bytes(Bytes{value.get<std::int64_t>()});
    if (unit == "tokens/s") return num(value.get<double>(), "%.0f");
    if (unit == "TFLOP/s") return num(value.get<double>(), "%.1f");
    return value.is_string() ? value.get<std::string>() : value.dump();
}

std::string field_text(const Summary& s, std::string_view path, int decimals) {
    const SummaryField& f = summary_field(path);
    return format_by_unit(f.unit, f.value(s), decimals);
}

namespace {
// " tp 1.20%  cp 0.00%  ep 0.00%  dp 3.40%  pipeline 0.10%"
std::string exposed_parts(const std::array<double, workload::kCommKinds>& f) {
    std::string out;
    // Appended piece by piece: `" " + std::string(...)` trips GCC 12's -Wrestrict false
    // positive (a memcpy of 2^63 bytes) when inlined here.
    for (std::size_t k = 0; k < f.size(); ++k) {
        out += ' ';
        out += workload::kCommKindNames[k].name;
        out += ' ';
        out += pct(f[k]);
        if (k + 1 < f.size()) out += ' ';
    }
    return out;
}

// schedule, layout, time, fractions, MFU, throughput and memory. Each value printed by its
// field's unit (field_text); the labels are the console's own, not the HTML cards' of
// summary_fields.def ("bubble fraction", not "bubble"), and the lines that join several fields
// (the layout, MFU / HFU, throughput, memory) are laid out here.
void print_headline(std::ostream& out, const Summary& s) {
    const auto text = [&s](std::string_view path) { return field_text(s, path); };
    out << "schedule              " << text("schedule") << "\n"
        << "layout                tp=" << s.tp << " pp=" << s.pp << " dp=" << s.dp << " cp=" << s.cp
        << " ep=" << s.ep << " vpp=" << s.vpp << "  (" << s.world_size << " GPUs, "
        << s.microbatches << " microbatches)\n"
        << (s.faults.job_failed ? "job failed after      " : "iteration time        ")
        << text("iteration_time_s") << "\n"
        << "bubble fraction       " << text("bubble_fraction") << "\n"
        << "exposed comm fraction " << text("exposed_comm_fraction") << "\n"
        << "  by kind            " << exposed_parts(s.exposed_by_kind) << "\n"
        << "idle fraction         " << text("idle_fraction") << "\n"
        << "host fraction         " << text("host_fraction") << "\n"
        << "MFU / HFU             " << text("mfu") << " / " << text("hfu") << "\n"
        << "throughput            " << text("tokens_per_s") << " tokens/s, "
        << text("tflops_per_gpu") << " TFLOP/s per GPU\n";
    if (s.memory.total.value > 0)
        out << "memory per GPU        " << text("memory_per_gpu_bytes.total") << " (params "
            << text("memory_per_gpu_bytes.parameters") << ", grads "
            << text("memory_per_gpu_bytes.gradients") << ", optimizer "
            << text("memory_per_gpu_bytes.optimizer_states") << ", activations "
            << text("memory_per_gpu_bytes.activations")
            << (s.memory.temporary_gradients.value > 0
                    ? ", or 16-bit gradients " + text("memory_per_gpu_bytes.temporary_gradients") +
                          " at the optimizer step"
                    : std::string())
            << ")\n";
}

void print_variability(std::ostream& out, const Summary& s) {
    if (!s.variability.present) return;
    const auto& v = s.variability;
    // Factors below 1 make GPUs faster than planned: a cost below zero.
    out << "variability           " << format_time(Time::from_seconds_ceil(std::abs(v.cost_s)))
        << (v.cost_s >= 0 ? " slower than " : " faster than ")
        << format_time(Time::from_seconds_ceil(v.clean_iteration_time_s)) << " without it ("
        << pct(s.iteration_time_s / v.clean_iteration_time_s - 1) << ")\n";
    if (v.critical_worker >= 0) {
        out << "critical path         stage " << v.critical_stage << " of replica " << v.critical_dp
            << " (GPU" << (v.critical_gpus.size() > 1 ? "s " : " ");
        for (std::size_t i = 0; i < v.critical_gpus.size(); ++i)
            out << (i ? "," : "") << v.critical_gpus[i];
        out << "): " << pct(v.critical_share) << " of the critical path's pass time";
        if (v.slowest_factor != 1)
            out << "; GPU " << v.slowest_gpu << " runs " << num(v.slowest_factor, "%.3g") << "x";
        out << "\n";
    }
}

void print_faults(std::ostream& out, const Summary& s) {
    if (!s.faults.present) return;
    const auto& f = s.faults;
    for (const auto& l : f.links) {
        out << "link fault            " << l.link << " ";
        if (l.fraction > 0)
            out << "at " << pct(l.fraction) << " of its bandwidth";
        else
            out << "failed";
        out << (l.at_s > 0 ? " from " + format_time(Time::from_seconds_ceil(l.at_s))
                           : std::string(" for the whole run"))
            << "\n";
    }
    if (f.job_failed) {
        out << "job failed            at " << format_time(Time::from_seconds_ceil(f.failed_at_s))
            << ": " << f.failed_what << " (rank" << (f.failed_gpus.size() > 1 ? "s " : " ");
        for (std::size_t i = 0; i < f.failed_gpus.size(); ++i)
            out << (i ? "," : "") << f.failed_gpus[i];
        out << "; ";
        for (std::size_t i = 0; i < f.failed_workers.size(); ++i)
            out << (i ? ", " : "") << "stage " << f.failed_stages[i] << " of replica "
                << f.failed_replicas[i];
        out << ")\n"
            << "  done so far         " << f.passes_done << " of " << f.passes_total
            << " passes; the iteration ("
            << format_time(Time::from_seconds_ceil(f.clean_iteration_time_s))
            << " without faults) did not complete and its " << num(f.lost_gpu_s, "%.4g")
            << " GPU-seconds are lost\n";
    } else if (!f.links.empty()) {
        out << "faults                " << format_time(Time::from_seconds_ceil(std::abs(f.cost_s)))
            << (f.cost_s >= 0 ? " slower than " : " faster than ")
            << format_time(Time::from_seconds_ceil(f.clean_iteration_time_s)) << " without them ("
            << pct(s.iteration_time_s / f.clean_iteration_time_s - 1) << ")\n";
    }
}

void print_goodput(std::ostream& out, const Summary& s) {
    if (!s.goodput.present) return;
    const auto& g = s.goodput;
    out << "goodput               " << pct(g.fraction) << " of wall clock trains (MTBF "
        << num(g.mtbf_s / 3600, "%.3g") << " h, a checkpoint every " << g.interval_iterations
        << " iterations = " << num(g.interval_s / 60, "%.3g") << " min, written in "
        << num(g.checkpoint_write_s, "%.3g") << " s)\n";
    if (g.monte_carlo_runs > 0)
        out << "  Monte Carlo         " << pct(g.monte_carlo_fraction) << " +- "
            << pct(g.monte_carlo_ci95) << " (" << g.monte_carlo_runs << " runs)\n";
    if (g.tokens > 0)
        out << "  token budget        " << num(g.tokens, "%.3g") << " tokens in "
            << num(g.train_time_s / 86400, "%.1f") << " days, " << num(g.gpu_hours, "%.4g")
            << " GPU-hours, " << num(g.energy_kwh / 1e3, "%.4g") << " MWh\n";
}

void print_stages(std::ostream& out, const Summary& s) {
    out << "\nstage   busy        bubble   exposed comm   idle     host     peak in-flight\n";
    for (const auto& st : s.stages) {
        char line[160];
        std::snprintf(line, sizeof line, "%-7d %-11s %-8s %-14s %-8s %-8s %d\n", st.stage,
                      format_time(Time::from_seconds_ceil(st.busy_s)).c_str(),
                      pct(st.bubble_fraction).c_str(), pct(st.exposed_comm_fraction).c_str(),
                      pct(st.idle_fraction).c_str(), pct(st.host_fraction).c_str(),
                      st.peak_inflight_microbatches);
        out << line;
    }
    out << "\nstage   exposed comm by kind\n";
    for (const auto& st : s.stages)
        out << std::left << std::setw(7) << st.stage << exposed_parts(st.exposed_by_kind) << "\n";
}

void print_links(std::ostream& out, const Summary& s, std::size_t max_links) {
    if (s.links.empty()) return;
    out << "\nbusiest links (" << s.links.size() << " carried traffic)\n"
        << "link                                   kind        bytes        util     max "
           "flows\n";
    for (std::size_t i = 0; i < s.links.size() && i < max_links; ++i) {
        const auto& l = s.links[i];
        char line[200];
        std::snprintf(line, sizeof line, "%-38s %-11s %-12s %-8s %d\n", l.name.c_str(),
                      l.kind.c_str(),
                      format_bytes(Bytes{static_cast<std::int64_t>(l.bytes)}).c_str(),
                      pct(l.utilization).c_str(), l.max_concurrent_flows);
        out << line;
    }
}

}  // namespace

// A hand layout, not summary_fields.def's order: lines join several fields (MFU / HFU, the
// layout), and the sections (stages, links, ...) are not the table's; single values are printed
// by their field's unit (print_headline).
void print_summary(std::ostream& out, const Summary& s, std::size_t max_links) {
    print_headline(out, s);
    print_variability(out, s);
    print_faults(out, s);
    print_goodput(out, s);
    print_stages(out, s);
    print_links(out, s, max_links);
}

}  // namespace cs::report
