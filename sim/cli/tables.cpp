#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/tables.hpp"
#include "cli/text.hpp"
#include "session/run.hpp"

namespace cs::cli {

using namespace api;

namespace {

std::string counts_text(const std::map<std::string, std::int64_t>& counts) {
    std::string out;
    for (const auto& [kind, n] : counts)
        out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
    return out.empty() ? "none" : out;
}

// A table cell: padded to `width`, then one space.
std::string cell(const std::string& s, std::size_t width) {
    return pad(s, width) + " ";
}

// The last part of a dotted key: parallelism.tp -> tp.
std::string short_name(const std::string& key) {
    const auto dot = key.rfind('.');
    return dot == std::string::npos ? key : key.substr(dot + 1);
}

// A table's column of one summary field (summary_fields.def): headed by the field's label, or by
// `header` where the table prints its own (a shorter one, or a field without a label); its value
// printed by the field's unit (report::format_by_unit).
struct FieldColumn {
    std::string path;
    std::size_t width;
    std::string header;  // "": the field's label
};

std::string header_of(const FieldColumn& c) {
    return c.header.empty() ? std::string(report::summary_field(c.path).label) : c.header;
}

std::string text_of(const FieldColumn& c, const nlohmann::ordered_json& value, int decimals) {
    return report::format_by_unit(report::summary_field(c.path).unit, value, decimals);
}

// The exposed-communication parts' columns, `width` each: exp.tp, exp.cp, exp.ep, exp.dp, exp.pp.
void add_exposed_columns(std::vector<FieldColumn>& columns, std::size_t width) {
    for (std::size_t k = 0; k < workload::kCommKinds; ++k)
        columns.push_back({report::exposed_kind_keys()[k], width,
                           exposed_column(workload::kCommKindNames[k].name)});
}

// The sweep's columns after its axes' (fractions with one decimal).
std::vector<FieldColumn> sweep_columns() {
    std::vector<FieldColumn> c{
        {"parallelism.dp", 4, "dp"}, {"iteration_time_s", 11, ""},
        {"tokens_per_s", 10, ""},    {"mfu", 7, ""},
        {"bubble_fraction", 7, ""},  {"exposed_comm_fraction", 9, "exp.comm"}};
    add_exposed_columns(c, 8);
    c.push_back({"memory_per_gpu_bytes.total", 9, "mem/GPU"});
    return c;
}

void print_table(std::ostream& out, const std::vector<SweepAxis>& axes,
                 const std::vector<const SweepRow*>& ranked, std::size_t top) {
    std::vector<std::size_t> width;
    for (const auto& a : axes) {
        std::size_t w = short_name(a.key).size();
        for (const auto& v : a.values)
            w = std::max(w, v.size());
        width.push_back(w);
    }
    out << cell("rank", 5);
    for (std::size_t i = 0; i < axes.size(); ++i)
        out << cell(short_name(axes[i].key), width[i]);
    const auto columns = sweep_columns();
    for (const auto& c : columns)
        out << cell(header_of(c), c.width);
    out << "fits HBM\n";
    for (std::size_t r = 0; r < ranked.size() && r < top; ++r) {
        const SweepRow& row = *ranked[r];
        const auto figures = nlohmann::ordered_json::parse(row.result->figures);
        out << cell(std::to_string(r + 1), 5);
        for (std::size_t i = 0; i < axes.size(); ++i)
            out << cell(row.values[i], width[i]);
        for (const auto& c : columns)
            out << cell(text_of(c, *report::at_path(figures, c.path), 1), c.width);
        out << (row.result->fits ? "yes" : "NO") << "\n";
    }
}

// nccl-tests' time column: whole microseconds from 10 ms, one decimal from 100 us, else two.
std::string nccl_time_text(double us) {
    char buf[32];
    if (us >= 10000.0)
        std::snprintf(buf, sizeof buf, "%7.0f", us);
    else if (us >= 100.0)
        std::snprintf(buf, sizeof buf, "%7.1f", us);
    else
        std::snprintf(buf, sizeof buf, "%7.2f", us);
    return buf;
}

}  // namespace

void print_topology(std::ostream& out, const std::string& display_path,
                    const topology::TopologySummary& s) {
    std::string tiers;
    for (const auto& [tier, n] : s.switches_by_tier)
        tiers += (tiers.empty() ? "" : ", ") + std::to_string(n) + " tier " + std::to_string(tier);
    out << "topology: " << display_path << " (" << s.fabric << ")\n"
        << "gpus: " << s.gpus << "\n"
        << "nodes: " << s.nodes << "\n"
        << "devices: " << counts_text(s.devices_by_kind)
        << (tiers.empty() ? "" : " (switches: " + tiers + ")") << "\n"
        << "links: " << counts_text(s.links_by_kind)
        << " (physical links; each direction has the full capacity)\n"
        << "per-GPU bandwidth inside a node: " << format_bandwidth(s.intra_node_bandwidth_per_gpu)
        << " each way\n"
        << "per-GPU bandwidth between nodes: "
        << (s.nodes > 1 ? format_bandwidth(s.inter_node_bandwidth_per_gpu) + " each way"
                        : std::string("none (one node)"))
        << "\n"
        << "bisection bandwidth: "
        << (s.bisection_bandwidth ? format_bandwidth(*s.bisection_bandwidth) + " each way"
                                  : std::string("not derived (explicit topology)"))
        << "\n"
        << "diameter: " << s.diameter_hops << (s.diameter_hops == 1 ? " hop" : " hops") << "\n"
        << "routing: " << s.routing;
    if (const auto routing = find_named(topology::kRoutingNames, s.routing))
        out << " (" << topology::routing_rule(*routing) << ")";
    out << "\n";
}

void print_compare_table(std::ostream& out, const std::vector<report::Summary>& results) {
    // One field a column up to MFU; then the peak activation memory (the most of any stage: no
    // field of the summary) and the p2p bytes (a field without a label).
    std::vector<FieldColumn> columns{{"schedule", 13, "schedule"},
                                     {"iteration_time_s", 13, ""},
                                     {"bubble_fraction", 9, ""},
                                     {"exposed_comm_fraction", 14, ""}};
    add_exposed_columns(columns, 10);
    columns.push_back({"host_fraction", 9, "host"});
    columns.push_back({"mfu", 9, ""});
    for (const auto& c : columns)
        out << pad(header_of(c), c.width);
    out << pad("peak act", 12) << "p2p bytes\n";
    for (const auto& r : results) {
        std::int64_t peak = 0;
        for (const auto& st : r.stages)
            peak = std::max(peak, st.peak_activation_bytes);
        for (const auto& c : columns)
            out << pad(text_of(c, report::summary_field(c.path).value(r), 2), c.width);
        out << pad(format_bytes(Bytes{peak}), 12) << report::field_text(r, "p2p_bytes") << "\n";
    }

    // Where the host shows (more than 1% of GPU time), say how: passes whose kernels issue slower
    // than they run, or the host's per-pass cost exposed where a stage waits for its input.
    bool host_note = false;
    for (const auto& r : results) {
        if (r.host_fraction <= 0.01) continue;
        if (!host_note) out << "\n";
        host_note = true;
        out << r.schedule << ": " << percent(r.host_fraction)
            << " of GPU time waits for the host: ";
        if (r.host_bound_passes > 0)
            out << r.host_bound_passes
                << " passes are host-bound (their kernels issue slower than they run)";
        else
            out << "no pass is host-bound; the host's cost per pass (framework work, the first "
                   "launch, p2p, synchronisation) shows where the GPU waits for it, after a "
                   "receive or a synchronisation";
        out << "\n";
    }

    // Per stage: activation memory and, in parentheses, the chunk activations it holds at once.
    // Long pipelines show their first four and last stages.
    out << "\npeak activation memory per stage (chunk activations in flight)\n";
    for (const auto& r : results) {
        out << pad(r.schedule, 13);
        const std::size_t n = r.stages.size();
        for (std::size_t i = 0; i < n; ++i) {
            if (n > 6 && i == 4) {
                out << " ...";
                i = n - 1;
            }
            const auto& st = r.stages[i];
            out << (i == 0 ? "" : "  ") << "s" << st.stage << " "
                << format_bytes(Bytes{st.peak_activation_bytes}) << " ("
                << st.peak_inflight_microbatches << ")";
        }
        out << "\n";
    }
}

void print_jobs(std::ostream& out, const JobsSpec& spec, const JobsResult& r,
                std::size_t max_links) {
    char buf[256];
    out << "jobs file             " << spec.source << "\n";
    out << "topology              " << spec.topology_source << " (" << spec.cluster->gpu_count()
        << " GPUs)\n";
    out << "shared run            " << format_time(Time::from_seconds_ceil(r.makespan_s))
        << (r.iterations == 1 ? std::string(" until the last job's iteration ends")
                              : " until every job has run " + std::to_string(r.iterations) +
                                    " iterations (each job's iteration " +
                                    std::to_string(r.iterations) + " below)")
        << "; member folding off (" << (r.fold_refused.empty() ? "nothing to fold" : r.fold_refused)
        << ")\n\n";
    std::snprintf(buf, sizeof buf, "%-14s %-11s %-16s %12s %12s %9s %7s %7s %8s\n", "job",
                  "placement", "GPUs", "alone", "shared", "slowdown", "MFU", "alone", "bubble");
    out << buf;
    // GPU lists longer than the column are given whole below the table.
    constexpr std::size_t kGpuColumn = 16;
    std::vector<std::string> long_lists;
    for (const auto& j : r.jobs) {
        auto sorted = j.gpus;
        std::sort(sorted.begin(), sorted.end());
        std::string gpus = workload::gpu_list_text(sorted);
        if (gpus.size() > kGpuColumn) {
            long_lists.push_back(j.name + ": " + gpus);
            gpus = std::to_string(sorted.size()) + " (below)";
        }
        // The summaries' fields printed by their units.
        using report::field_text;
        std::snprintf(buf, sizeof buf, "%-14s %-11s %-16s %12s %12s %8.4fx %7s %7s %8s\n",
                      j.name.c_str(), placement_name(j.placement), gpus.c_str(),
                      field_text(j.alone, "iteration_time_s").c_str(),
                      field_text(j.shared, "iteration_time_s").c_str(), j.slowdown,
                      field_text(j.shared, "mfu").c_str(), field_text(j.alone, "mfu").c_str(),
                      field_text(j.shared, "bubble_fraction").c_str());
        out << buf;
    }
    for (const auto& l : long_lists)
        out << "  GPUs of " << l << "\n";
    out << "\n";
    if (r.links.empty()) {
        out << "contested links       none (no link carried traffic of two jobs)\n";
        return;
    }
    out << "contested links (" << r.links.size() << " carried traffic of more than one job)\n";
    std::snprintf(buf, sizeof buf, "  %-28s %8s %8s", "link", "busy", "shared");
    out << buf;
    for (const auto& j : r.jobs) {
        std::snprintf(buf, sizeof buf, " %14s", (j.name + " bytes").c_str());
        out << buf;
    }
    out << "\n";
    for (std::size_t i = 0; i < r.links.size() && i < max_links; ++i) {
        const auto& l = r.links[i];
        const double shared_share = r.makespan_s > 0 ? l.shared_s / r.makespan_s : 0;
        std::snprintf(buf, sizeof buf, "  %-28s %7.2f%% %7.2f%%", l.name.c_str(),
                      100 * l.busy_share, 100 * shared_share);
        out << buf;
        for (double b : l.bytes) {
            std::snprintf(buf, sizeof buf, " %14s",
                          format_bytes(Bytes{static_cast<std::int64_t>(b)}).c_str());
            out << buf;
        }
        out << "\n";
    }
    if (r.links.size() > max_links)
        out << "  ... " << r.links.size() - max_links << " more in --json\n";
}

void print_sweep(std::ostream& out, const std::vector<SweepAxis>& axes, const SweepTally& tally,
                 std::size_t top) {
    const std::size_t total = tally.combinations();
    const std::size_t listed = tally.listed();
    out << "experiment " << tally.source() << "\n"
        << total << " combinations: " << tally.valid() << " simulated, " << total - tally.valid()
        << " not valid";
    if (tally.repeats() > 0)
        out << "; " << tally.repeats()
            << " gave the same result as a listed one (the same figures: a key the run ignores, "
               "or values that happen to give the same run) and are not listed";
    out << "\n\n";
    const auto rows = tally.top_rows();
    print_table(out, axes, rows, top);
    if (listed > top) out << "(" << listed - top << " more; --top N to show them)\n";
    // An MFU above 100% is no real run, as `run` warns (its warnings are not kept per row).
    std::size_t above = 0;
    for (const SweepRow* r : rows)
        if (r->result && r->result->figure("mfu").get<double>() > 1) ++above;
    if (above > 0)
        out << "warning: " << above
            << " of the rows listed show an MFU above 100%: " << api::above_peak_reason() << "\n";
    // Reasons of the invalid combinations, each reason once with how often it occurred.
    const auto reasons = tally.reasons();
    if (!reasons.empty()) out << "\nnot valid:\n";
    for (const auto& reason : reasons) {
        out << "  " << reason.count << " x, e.g.";
        for (std::size_t i = 0; i < axes.size(); ++i)
            out << " " << short_name(axes[i].key) << "=" << reason.first_values[i];
        out << ": " << reason.text << "\n";
    }
}

void print_collective(std::ostream& out, const CollectiveRequest& request,
                      const CollectiveReport& report) {
    using namespace network;
    char line[256];
    out << "# clustersim collective: " << collective_name(request.kind) << " on " << report.ranks
        << " ranks of " << report.topology << ", network " << fidelity_name(request.fidelity)
        << " (" << (request.nominal ? "nominal links" : "calibrated")
        << (request.calibration.empty() ? "" : " + " + request.calibration.string()) << ")"
        << (request.host_overhead > Time::zero()
                ? ", plus " + format_time(request.host_overhead) + " host launch"
                : std::string())
        << "\n#\n";
    std::snprintf(line, sizeof line, "#%11s  %12s  %8s  %10s  %7s  %7s  %-12s %s\n", "size",
                  "count", "type", "time", "algbw", "busbw", "algorithm", "protocol");
    out << line;
    std::snprintf(line, sizeof line, "#%11s  %12s  %8s  %10s  %7s  %7s\n", "(B)", "(elements)", "",
                  "(us)", "(GB/s)", "(GB/s)");
    out << line;
    for (const auto& row : report.rows) {
        std::snprintf(line, sizeof line, "%12lld  %12lld  %8s  %10.2f  %7.2f  %7.2f  %-12s %s\n",
                      static_cast<long long>(row.size.value), static_cast<long long>(row.count),
                      request.data_type.name, row.time.seconds() * 1e6, row.algbw_GBps,
                      row.busbw_GBps, algorithm_name(row.algorithm).c_str(),
                      protocol_name(row.protocol));
        out << line;
    }
    if (!report.skipped.empty())
        out << "# " << report.skipped.size() << " size(s) from " << report.skipped.front().value
            << " B skipped: less than one " << request.data_type.name << " per rank\n";
}

void print_collective_nccl_tests(std::ostream& out, const CollectiveRequest& request,
                                 const CollectiveReport& report, const std::string& sweep) {
    using network::CollectiveKind;
    char line[512];
    const std::int64_t min_bytes = request.sizes.empty() ? 0 : request.sizes.front().value;
    const std::int64_t max_bytes = request.sizes.empty() ? 0 : request.sizes.back().value;
    out << "# nccl-tests version clustersim (simulated: no GPU ran; " << report.topology
        << ", network " << network::fidelity_name(request.fidelity) << ", "
        << (request.nominal ? "nominal links" : "calibrated")
        << (request.calibration.empty() ? "" : " + " + request.calibration.string()) << ")\n";
    out << "# Collective test starting: " << nccl_binary(request.kind) << "\n";
    std::snprintf(line, sizeof line,
                  "# nThread 1 nGpus 1 minBytes %lld maxBytes %lld step: %s warmup iters: 0 "
                  "iters: 1 agg iters: 1 validation: 0 graph: 0\n",
                  static_cast<long long>(min_bytes), static_cast<long long>(max_bytes),
                  sweep.c_str());
    out << line << "#\n# Using devices\n";
    for (int r = 0; r < report.ranks; ++r) {
        std::snprintf(line, sizeof line,
                      "#  Rank %2d Group  0 Pid %6d on %10s device %2d [0x%02x] %s\n", r, 0,
                      "clustersim", r, 0, report.gpu_names[static_cast<std::size_t>(r)].c_str());
        out << line;
    }
    out << "#\n";
    std::snprintf(line, sizeof line,
                  "# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
                  "in-place          \n",
                  "", "", "", "", "");
    out << line;
    std::snprintf(line, sizeof line,
                  "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size",
                  "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                  "algbw", "busbw", "#wrong");
    out << line;
    std::snprintf(line, sizeof line,
                  "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
                  "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                  "(GB/s)", "");
    out << line;
    // nccl-tests checks in-place results of neither all_to_all nor sendrecv.
    const bool in_place_checked =
        request.kind != CollectiveKind::AllToAll && request.kind != CollectiveKind::SendRecv;
    const int root = request.kind == CollectiveKind::Broadcast ? 0 : -1;
    double busbw_sum = 0;
    for (const auto& row : report.rows) {
        const std::string time = nccl_time_text(row.time.seconds() * 1e6);
        std::snprintf(line, sizeof line,
                      "%12lld  %12lld  %8s  %6s  %6i  %7s  %6.2f  %6.2f  %5g  %7s  %6.2f  %6.2f  "
                      "%5s\n",
                      static_cast<long long>(row.size.value), static_cast<long long>(row.count),
                      request.data_type.name, nccl_redop(request.kind), root, time.c_str(),
                      row.algbw_GBps, row.busbw_GBps, 0.0, time.c_str(), row.algbw_GBps,
                      row.busbw_GBps, in_place_checked ? "0" : "N/A");
        out << line;
        busbw_sum += 2 * row.busbw_GBps;  // the average runs over both column groups
    }
    const double average =
        report.rows.empty() ? 0 : busbw_sum / (2 * static_cast<double>(report.rows.size()));
    out << "# Out of bounds values : 0 OK\n";
    std::snprintf(line, sizeof line, "# Avg bus bandwidth    : %g \n", average);
    out << line << "#\n";
    out << "# Collective test concluded: " << nccl_binary(request.kind) << "\n";
}

}  // namespace cs::cli
