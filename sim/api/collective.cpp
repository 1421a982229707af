#include "api/collective.hpp"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "api/topology.hpp"
#include "core/errors.hpp"
#include "core/quantity.hpp"
#include "workload/calibration.hpp"

namespace cs::api {

std::optional<Bytes> parse_nccl_size(const std::string& text) {
    if (auto b = parse_bytes(text)) return b;
    // nccl-tests' parsesize: a number and an optional K, M or G (powers of two).
    std::size_t digits = 0;
    bool dot = false;
    while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) ||
                                    (text[digits] == '.' && !dot))) {
        dot = dot || text[digits] == '.';
        ++digits;
    }
    if (digits == 0 || text.size() > digits + 1) return std::nullopt;
    double unit = 1;
    if (text.size() == digits + 1) {
        switch (text.back()) {
            case 'K':
            case 'k':
                unit = 1024.0;
                break;
            case 'M':
            case 'm':
                unit = 1024.0 * 1024;
                break;
            case 'G':
            case 'g':
                unit = 1024.0 * 1024 * 1024;
                break;
            default:
                return std::nullopt;
        }
    }
    const double value = std::strtod(text.substr(0, digits).c_str(), nullptr) * unit;
    if (!std::isfinite(value) || value >= 9.2e18) return std::nullopt;
    return Bytes{static_cast<std::int64_t>(value)};
}

namespace {

constexpr std::size_t kMaxRows = 10'000;
constexpr const char* kSizeForms =
    "a size as nccl-tests writes it (8, 64K, 1M, 8G: K, M, G are 2^10, 2^20, 2^30 bytes) or with "
    "units ";

}  // namespace

std::vector<Bytes> nccl_size_sweep(Bytes first, Bytes last, double factor, std::int64_t increment,
                                   const std::string& option) {
    const SourceLocation where{option};
    if (first.value <= 0 || last.value < first.value)
        throw ConfigError(where, "sizes must be positive and the last at least the first");
    if (!std::isfinite(factor) || factor < 1)
        throw ConfigError(where, "the step factor must be a finite number of at least 1");
    if (factor == 1 && increment <= 0)
        throw ConfigError(where, "the increment must be a positive number of bytes");
    std::vector<Bytes> out;
    const auto too_many = [&] {
        return ConfigError(where, "more than " + std::to_string(kMaxRows) + " sizes from " +
                                      std::to_string(first.value) + " to " +
                                      std::to_string(last.value) +
                                      " bytes; use a larger step factor or increment");
    };
    if (factor > 1) {
        for (double s = static_cast<double>(first.value);
             s <= static_cast<double>(last.value) * (1 + 1e-12); s *= factor) {
            if (out.size() == kMaxRows) throw too_many();
            out.push_back(Bytes{std::llround(s)});
        }
    } else {
        for (std::int64_t s = first.value; s <= last.value; s += increment) {
            if (out.size() == kMaxRows) throw too_many();
            out.push_back(Bytes{s});
            if (s > last.value - increment) break;  // the next would pass the last (or overflow)
        }
    }
    return out;
}

std::vector<Bytes> parse_size_range(const std::string& text, double factor) {
    const SourceLocation where{"--sizes " + text};
    const auto colon = text.find(':');
    const std::string first = text.substr(0, colon);
    const std::string last = colon == std::string::npos ? first : text.substr(colon + 1);
    const auto a = parse_nccl_size(first), b = parse_nccl_size(last);
    if (!a || !b)
        throw ConfigError(
            where, std::string("expected SIZE or FIRST:LAST, each ") + kSizeForms + kBytesUnits);
    if (a->value <= 0 || b->value < a->value)
        throw ConfigError(where, "sizes must be positive and the last at least the first");
    char factor_text[32];
    std::snprintf(factor_text, sizeof factor_text, "%g", factor);
    const std::string factor_option = std::string("--step-factor ") + factor_text;
    if (!(factor > 1) || !std::isfinite(factor))
        throw ConfigError(SourceLocation{factor_option},
                          "the step factor must be a finite number above 1");
    try {
        return nccl_size_sweep(*a, *b, factor, 0, factor_option);
    } catch (const ConfigError& e) {
        // Name both options: the range and the factor make the count together.
        throw ConfigError(SourceLocation{factor_option}, "more than " + std::to_string(kMaxRows) +
                                                             " sizes from " + first + " to " +
                                                             last + "; use a larger step factor");
    }
}

std::optional<NcclDataType> find_nccl_data_type(const std::string& name) {
    static constexpr std::array<std::pair<const char*, NcclDataType>, 13> kTypes{{
        {"int8", {"int8", 1}},
        {"uint8", {"uint8", 1}},
        {"int32", {"int32", 4}},
        {"uint32", {"uint32", 4}},
        {"int64", {"int64", 8}},
        {"uint64", {"uint64", 8}},
        {"half", {"half", 2}},
        {"float16", {"half", 2}},
        {"float", {"float", 4}},
        {"float32", {"float", 4}},
        {"double", {"double", 8}},
        {"float64", {"double", 8}},
        {"bfloat16", {"bfloat16", 2}},
    }};
    for (const auto& [alias, type] : kTypes)
        if (name == alias) return type;
    return std::nullopt;
}

NcclCounts nccl_counts(network::CollectiveKind kind, std::int64_t requested_bytes, int ranks,
                       int type_bytes) {
    using network::CollectiveKind;
    const std::int64_t count = requested_bytes / type_bytes;
    switch (kind) {
        case CollectiveKind::AllGather:
        case CollectiveKind::ReduceScatter:
        case CollectiveKind::AllToAll: {
            const std::int64_t per_rank = count / ranks;
            return {per_rank * ranks * type_bytes, per_rank};
        }
        case CollectiveKind::AllReduce:
        case CollectiveKind::Broadcast:
        case CollectiveKind::SendRecv:
            break;
    }
    return {count * type_bytes, count};
}

const char* nccl_redop(network::CollectiveKind kind) {
    using network::CollectiveKind;
    return kind == CollectiveKind::AllReduce || kind == CollectiveKind::ReduceScatter ||
                   kind == CollectiveKind::SendRecv
               ? "sum"
               : "none";
}

const char* nccl_binary(network::CollectiveKind kind) {
    using network::CollectiveKind;
    switch (kind) {
        case CollectiveKind::AllReduce:
            return "all_reduce_perf";
        case CollectiveKind::AllGather:
            return "all_gather_perf";
        case CollectiveKind::ReduceScatter:
            return "reduce_scatter_perf";
        case CollectiveKind::AllToAll:
            return "alltoall_perf";
        case CollectiveKind::Broadcast:
            return "broadcast_perf";
        case CollectiveKind::SendRecv:
            return "sendrecv_perf";
    }
    return "?";
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
        row.protocol =
            collective_choice(cluster, config, request.kind, ranks, row.size, used[i]).second;
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
        row["protocol"] = network::protocol_name(r.protocol);
        rows.push_back(std::move(row));
    }
    return rows;
}

}  // namespace cs::api
