#include "ingest/nccl_format.hpp"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/errors.hpp"
#include "core/quantity.hpp"

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

}  // namespace cs::api
