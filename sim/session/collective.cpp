#include "session/collective.hpp"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "ingest/topology.hpp"
#include "core/errors.hpp"
#include "core/quantity.hpp"
#include "workload/calibration.hpp"

namespace cs::api {

CollectiveReport run_collective(const CollectiveRequest& request) {
    using namespace network;
    const auto loaded = load_topology(request.topology, request.sets, request.max_memory);
    const topology::Cluster& cluster = loaded.cluster;
    std::vector<int> ranks = request.ranks;
    if (ranks.empty())
        for (int g = 0; g < cluster.gpu_count(); ++g)
            ranks.push_back(g);
    const SourceLocation where{"--ranks " + request.ranks_text};
    for (int r : ranks)
        if (r >= cluster.gpu_count())
            throw ConfigError(where, "GPU " + std::to_string(r) + " does not exist; " +
                                         loaded.display_path + " has GPUs 0-" +
                                         std::to_string(cluster.gpu_count() - 1));
    if (ranks.size() < 2 && request.kind != CollectiveKind::Broadcast)
        throw ConfigError(where, "a collective needs two ranks");

    std::vector<Algorithm> used;
    try {
        for (Bytes size : request.sizes)
            used.push_back(
                resolve_algorithm(cluster, request.kind, ranks, size, request.algorithm));
    } catch (const ConfigError& e) {
        // The algorithm came from the command line: name the option and its value.
        if (!e.where().file.empty()) throw;
        throw ConfigError(SourceLocation{"--algo " + algorithm_name(request.algorithm)},
                          e.message());
    }

    NetworkConfig config = request.nominal ? NetworkConfig{request.fidelity}
                                           : NetworkConfig::calibrated(request.fidelity);
    if (!request.calibration.empty()) {
        const auto cal = workload::load_calibration(request.calibration);
        if (cal.network.empty())
            throw ConfigError(SourceLocation{"--calibration " + request.calibration.string()},
                              "the file holds no network constants (fit them with clustersim "
                              "calibrate --nccl-tests)");
        workload::apply_network_calibration(cal, config);
    }
    const double factor = busbw_factor(request.kind, static_cast<int>(ranks.size()));
    CollectiveReport report;
    report.topology = loaded.display_path;
    report.ranks = static_cast<int>(ranks.size());
    for (int r : ranks)
        report.gpu_names.push_back(cluster.gpu_model(r).name);
    for (std::size_t i = 0; i < request.sizes.size(); ++i) {
        const NcclCounts counts = nccl_counts(request.kind, request.sizes[i].value, report.ranks,
                                              request.data_type.bytes);
        if (counts.count_column <= 0) {
            report.skipped.push_back(request.sizes[i]);
            continue;
        }
        CollectiveRow row;
        row.size = Bytes{counts.size_column};
        row.count = counts.count_column;
        row.algorithm = used[i];
        try {
            row.time =
                isolated_collective_time(cluster, config, request.kind, ranks, row.size, used[i]) +
                request.host_overhead;
        } catch (const ClockOverflow&) {
            throw ConfigError(SourceLocation{"--sizes " + std::to_string(row.size.value) + "B"},
                              "a collective of this size takes longer than the simulator's clock "
                              "can hold (2^63 ps, about 106 days); give smaller sizes");
        }
        const double seconds = row.time.seconds();
        row.algbw_GBps = seconds > 0 ? static_cast<double>(row.size.value) / seconds * 1e-9 : 0;
        row.busbw_GBps = row.algbw_GBps * factor;
        report.rows.push_back(row);
    }
    return report;
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
    std::snprintf(line, sizeof line, "#%11s  %12s  %8s  %10s  %7s  %7s  %s\n", "size", "count",
                  "type", "time", "algbw", "busbw", "algorithm");
    out << line;
    std::snprintf(line, sizeof line, "#%11s  %12s  %8s  %10s  %7s  %7s\n", "(B)", "(elements)", "",
                  "(us)", "(GB/s)", "(GB/s)");
    out << line;
    for (const auto& row : report.rows) {
        std::snprintf(line, sizeof line, "%12lld  %12lld  %8s  %10.2f  %7.2f  %7.2f  %s\n",
                      static_cast<long long>(row.size.value), static_cast<long long>(row.count),
                      request.data_type.name, row.time.seconds() * 1e6, row.algbw_GBps,
                      row.busbw_GBps, algorithm_name(row.algorithm).c_str());
        out << line;
    }
    if (!report.skipped.empty())
        out << "# " << report.skipped.size() << " size(s) from " << report.skipped.front().value
            << " B skipped: less than one " << request.data_type.name << " per rank\n";
}

namespace {

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

nlohmann::json collective_json(const CollectiveReport& report) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : report.rows) {
        nlohmann::json row;
        row["bytes"] = r.size.value;
        row["count"] = r.count;
        row["time_s"] = r.time.seconds();
        row["algbw_GBps"] = r.algbw_GBps;
        row["busbw_GBps"] = r.busbw_GBps;
        row["algorithm"] = network::algorithm_name(r.algorithm);
        rows.push_back(std::move(row));
    }
    return rows;
}

}  // namespace cs::api
