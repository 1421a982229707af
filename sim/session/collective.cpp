#include "session/collective.hpp"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/errors.hpp"
#include "core/quantity.hpp"
#include "ingest/topology.hpp"
#include "session/run.hpp"
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
    // 4,096 ranks held 3.7 GB and growing.
    if (request.kind == CollectiveKind::AllToAll) {
        const double need = all_to_all_bytes(static_cast<double>(ranks.size()));
        if (need > static_cast<double>(request.max_memory)) {
            char text[32];
            std::snprintf(text, sizeof text, "%.3g", need / 1e9);
            throw ConfigError(
                request.ranks_text.empty() ? SourceLocation{"--op all_to_all"} : where,
                "an all-to-all of " + std::to_string(ranks.size()) + " ranks is " +
                    std::to_string(ranks.size()) + " x " + std::to_string(ranks.size() - 1) +
                    " flows, about " + text + " GB, more than the limit of " +
                    format_bytes(Bytes{request.max_memory}) +
                    "; give fewer --ranks or raise --max-memory");
        }
    }

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
    config.protocol[static_cast<std::size_t>(request.kind)] = request.protocol;
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
            row.protocol =
                collective_choice(cluster, config, request.kind, ranks, row.size, used[i]).second;
        } catch (const ClockOverflow&) {
            throw ConfigError(SourceLocation{"--sizes " + std::to_string(row.size.value) + "B"},
                              "a collective of this size takes longer than the simulator's clock "
                              "can hold (2^63 ps, about 106 days): give smaller sizes, or check "
                              "the topology's bandwidths and latencies and the calibration's "
                              "efficiencies, which set its time with the size");
        } catch (const NoPathError& e) {
            // Topologies above 4,096 GPUs are not checked for it when built.
            throw unreachable_gpu_error(e, SourceLocation{"--ranks"}, " in this topology");
        }
        const double seconds = row.time.seconds();
        row.algbw_GBps = seconds > 0 ? static_cast<double>(row.size.value) / seconds * 1e-9 : 0;
        row.busbw_GBps = row.algbw_GBps * factor;
        report.rows.push_back(row);
    }
    return report;
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
        row["protocol"] = network::protocol_name(r.protocol);
        rows.push_back(std::move(row));
    }
    return rows;
}

}  // namespace cs::api
