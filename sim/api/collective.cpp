#include "api/collective.hpp"

#include <cmath>
#include <cstdio>

#include "api/topology.hpp"
#include "core/errors.hpp"
#include "core/quantity.hpp"

namespace cs::api {

std::vector<Bytes> parse_size_range(const std::string& text, double factor) {
    const SourceLocation where{"--sizes " + text};
    const auto colon = text.find(':');
    const std::string first = text.substr(0, colon);
    const std::string last = colon == std::string::npos ? first : text.substr(colon + 1);
    const auto a = parse_bytes(first), b = parse_bytes(last);
    if (!a || !b)
        throw ConfigError(where,
                          std::string("expected SIZE or FIRST:LAST with units ") + kBytesUnits);
    if (a->value <= 0 || b->value < a->value)
        throw ConfigError(where, "sizes must be positive and the last at least the first");
    char factor_text[32];
    std::snprintf(factor_text, sizeof factor_text, "%g", factor);
    const SourceLocation factor_where{std::string("--step-factor ") + factor_text};
    if (!(factor > 1) || !std::isfinite(factor))
        throw ConfigError(factor_where, "the step factor must be a finite number above 1");
    // A factor barely above 1 over a wide range would make millions of rows.
    constexpr std::size_t kMaxRows = 10'000;
    std::vector<Bytes> out;
    for (double s = static_cast<double>(a->value); s <= static_cast<double>(b->value) * (1 + 1e-12);
         s *= factor) {
        if (out.size() == kMaxRows)
            throw ConfigError(factor_where, "more than " + std::to_string(kMaxRows) +
                                                " sizes from " + first + " to " + last +
                                                "; use a larger step factor");
        out.push_back(Bytes{std::llround(s)});
    }
    return out;
}

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

    const NetworkConfig config = request.nominal ? NetworkConfig{request.fidelity}
                                                 : NetworkConfig::calibrated(request.fidelity);
    const double factor = busbw_factor(request.kind, static_cast<int>(ranks.size()));
    CollectiveReport report;
    report.topology = loaded.display_path;
    report.ranks = static_cast<int>(ranks.size());
    for (std::size_t i = 0; i < request.sizes.size(); ++i) {
        CollectiveRow row;
        row.size = request.sizes[i];
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
        << " (" << (request.nominal ? "nominal links" : "calibrated") << ")"
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
                      static_cast<long long>(row.size.value),
                      static_cast<long long>(row.size.value / 4), "float", row.time.seconds() * 1e6,
                      row.algbw_GBps, row.busbw_GBps, algorithm_name(row.algorithm).c_str());
        out << line;
    }
}

nlohmann::json collective_json(const CollectiveReport& report) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : report.rows) {
        nlohmann::json row;
        row["bytes"] = r.size.value;
        row["time_s"] = r.time.seconds();
        row["algbw_GBps"] = r.algbw_GBps;
        row["busbw_GBps"] = r.busbw_GBps;
        row["algorithm"] = network::algorithm_name(r.algorithm);
        rows.push_back(std::move(row));
    }
    return rows;
}

}  // namespace cs::api
