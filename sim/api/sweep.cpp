#include "api/sweep.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "api/run.hpp"
#include "api/text.hpp"
#include "core/errors.hpp"

namespace cs::api {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SweepResult, tokens_per_s, iteration_time_s, mfu,
                                   bubble_fraction, exposed_comm_fraction, dp, memory_bytes, fits,
                                   summary, summary_digest, wall_time_s)

namespace {

std::string trim(std::string s) {
    s.erase(0, s.find_first_not_of(' '));
    s.erase(s.find_last_not_of(' ') + 1);
    return s;
}

bool mentions_key(const std::vector<std::string>& sets, const std::string& key) {
    return std::any_of(sets.begin(), sets.end(),
                       [&](const std::string& s) { return s.rfind(key + "=", 0) == 0; });
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
    out << cell("dp", 4) << cell("iteration", 11) << cell("tokens/s", 10) << cell("MFU", 7)
        << cell("bubble", 7) << cell("exp.comm", 9) << cell("mem/GPU", 9) << "fits HBM\n";
    for (std::size_t r = 0; r < ranked.size() && r < top; ++r) {
        const SweepRow& row = *ranked[r];
        const auto& s = *row.result;
        char tokens[32];
        std::snprintf(tokens, sizeof tokens, "%.0f", s.tokens_per_s);
        out << cell(std::to_string(r + 1), 5);
        for (std::size_t i = 0; i < axes.size(); ++i)
            out << cell(row.values[i], width[i]);
        out << cell(std::to_string(s.dp), 4)
            << cell(format_time(Time::from_seconds_ceil(s.iteration_time_s)), 11)
            << cell(tokens, 10) << cell(percent(s.mfu, 1), 7)
            << cell(percent(s.bubble_fraction, 1), 7)
            << cell(percent(s.exposed_comm_fraction, 1), 9)
            << cell(format_bytes(Bytes{s.memory_bytes}), 9) << (s.fits ? "yes" : "NO") << "\n";
    }
}

nlohmann::ordered_json row_json(const std::vector<SweepAxis>& axes, const SweepRow& row) {
    nlohmann::ordered_json j;
    auto settings = nlohmann::ordered_json::object();
    for (std::size_t i = 0; i < axes.size(); ++i)
        settings[axes[i].key] = row.values[i];
    j["settings"] = settings;
    if (row.result) {
        j["fits_hbm"] = row.result->fits;
        // The text parses back to what to_json gave (numbers are printed to round-trip), and
        // wall_time_s goes back where to_json puts it: last.
        // Without SweepOptions::keep_summaries there is no summary text to give.
        if (!row.result->summary.empty()) {
            auto& summary = j["summary"] = nlohmann::ordered_json::parse(row.result->summary);
            summary["wall_time_s"] = row.result->wall_time_s;
        }
    } else {
        j["error"] = row.error;
    }
    return j;
}

// The values of combination `n`: the last axis varies fastest.
std::vector<std::string> combination(const std::vector<SweepAxis>& axes, std::size_t n) {
    std::vector<std::string> values(axes.size());
    for (std::size_t i = axes.size(); i-- > 0;) {
        values[i] = axes[i].values[n % axes[i].values.size()];
        n /= axes[i].values.size();
    }
    return values;
}

// Where a sweep's experiment comes from: a file, or its text (SweepOptions::text).
struct Source {
    const std::filesystem::path* path = nullptr;
    const workload::ExperimentText* text = nullptr;
    workload::ExperimentSpec load(const std::vector<std::string>& overrides) const {
        return text ? workload::load_experiment(*text, overrides)
                    : workload::load_experiment(*path, overrides);
    }
};

std::uint64_t fnv1a(std::string_view text) {
    std::uint64_t h = 0xcbf29ce484222325;
    for (const char c : text) {
        h ^= static_cast<unsigned char>(c);
        h *= 0x100000001b3;
    }
    return h;
}

void simulate_row(const Source& experiment, const std::vector<std::string>& base,
                  const std::vector<SweepAxis>& axes, bool keep_summary, SweepRow& row) {
    std::vector<std::string> overrides = base;
    for (std::size_t i = 0; i < axes.size(); ++i)
        overrides.push_back(axes[i].key + "=" + row.values[i]);
    try {
        const auto spec = experiment.load(overrides);
        row.source = spec.source;
        const auto s = run(spec).summary;
        const auto hbm = spec.cluster->gpu_model(0).hbm;
        auto json = report::to_json(s);
        json.erase("wall_time_s");
        std::string text = json.dump();
        const std::uint64_t digest = fnv1a(text);
        if (!keep_summary) text.clear();
        row.result = SweepResult{.tokens_per_s = s.tokens_per_s,
                                 .iteration_time_s = s.iteration_time_s,
                                 .mfu = s.mfu,
                                 .bubble_fraction = s.bubble_fraction,
                                 .exposed_comm_fraction = s.exposed_comm_fraction,
                                 .dp = s.dp,
                                 .memory_bytes = s.memory.total.value,
                                 .fits = hbm.value <= 0 || s.memory.total <= hbm,
                                 .summary = std::move(text),
                                 .summary_digest = digest,
                                 .wall_time_s = s.wall_time_s};
    } catch (const ConfigError& e) {
        row.error = e.what();
    } catch (const SimulationError& e) {
        // An internal failure of one combination is reported with it, not for the sweep.
        row.error = std::string("simulation failed: ") + e.what();
    }
}

// The combinations rank `rank` of `size` simulates, in enumeration order. They are dealt round
// the ranks in a fixed pseudo-random order: with a stride or blocks, a key's values line up with
// the ranks (a stride of 2 over micro_batch_size=1,2 gives one rank every mbs 1, the slow half).
// Every rank computes the same deal, so it costs no message and the output does not depend on it.
std::vector<std::size_t> dealt_to(int rank, int size, std::size_t total) {
    // splitmix64's finaliser: a bijection, so the order has no ties.
    const auto mix = [](std::uint64_t x) {
        x += 0x9e3779b97f4a7c15;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
        x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
        return x ^ (x >> 31);
    };
    std::vector<std::pair<std::uint64_t, std::size_t>> order;
    for (std::size_t n = 0; n < total; ++n)
        order.emplace_back(mix(n), n);
    std::sort(order.begin(), order.end());
    std::vector<std::size_t> mine;
    for (std::size_t p = static_cast<std::size_t>(rank); p < total;
         p += static_cast<std::size_t>(size))
        mine.push_back(order[p].second);
    std::sort(mine.begin(), mine.end());
    return mine;
}

// One rank's part of the sweep. A rank that fails unexpectedly stops and records the combination
// it failed on, so that it still takes part in the gather and no rank is left waiting.
struct Share {
    std::vector<SweepRow> rows;                                  // in enumeration order
    std::optional<std::pair<std::size_t, std::string>> failure;  // combination and message
};

Share simulate_share(const Source& experiment, const std::vector<std::string>& base,
                     const std::vector<SweepAxis>& axes, std::size_t total, bool keep_summaries,
                     const SweepRanks& ranks,
                     const std::function<void(std::size_t, std::size_t)>& on_row) {
    Share share;
    // Per-combination warnings (e.g. memory above HBM) are dropped: the table's "fits HBM"
    // column says it.
    const auto mine = dealt_to(ranks.rank(), ranks.size(), total);
    for (const std::size_t n : mine) {
        SweepRow row;
        row.index = n;
        row.values = combination(axes, n);
        try {
            simulate_row(experiment, base, axes, keep_summaries, row);
        } catch (const std::exception& e) {
            share.failure.emplace(n, e.what());
            break;
        } catch (...) {
            share.failure.emplace(n, "unknown exception");
            break;
        }
        share.rows.push_back(std::move(row));
        if (on_row) on_row(share.rows.size(), mine.size());
    }
    return share;
}

// A share as CBOR, which keeps every double bit for bit: {"rows": [[index, values, result or
// null, error, source], ...], "failure": [index, message] or null}.
std::vector<std::uint8_t> encode(const Share& share) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : share.rows)
        rows.push_back({r.index, r.values, r.result ? nlohmann::json(*r.result) : nlohmann::json(),
                        r.error, r.source});
    nlohmann::json failure;
    if (share.failure) failure = {share.failure->first, share.failure->second};
    return nlohmann::json::to_cbor(nlohmann::json{{"rows", rows}, {"failure", failure}});
}

void decode_into(const std::vector<std::uint8_t>& bytes, Share& merged) {
    const auto part = nlohmann::json::from_cbor(bytes);
    for (const auto& r : part.at("rows")) {
        SweepRow row;
        row.index = r.at(0).get<std::size_t>();
        row.values = r.at(1).get<std::vector<std::string>>();
        if (!r.at(2).is_null()) row.result = r.at(2).get<SweepResult>();
        row.error = r.at(3).get<std::string>();
        row.source = r.at(4).get<std::string>();
        merged.rows.push_back(std::move(row));
    }
    const auto& f = part.at("failure");
    if (!f.is_null() && (!merged.failure || f.at(0).get<std::size_t>() < merged.failure->first))
        merged.failure.emplace(f.at(0).get<std::size_t>(), f.at(1).get<std::string>());
}

// Every rank's share, merged on rank 0 in enumeration order so that nothing after depends on the
// number of ranks; the first failing combination's failure is kept, as one process going through
// them in order would stop there. Empty on the other ranks. A job of one keeps its share as is.
std::optional<Share> gather(Share mine, const SweepRanks& ranks) {
    if (ranks.size() == 1) return mine;
    auto parts =
        ranks.gather_to_root(ranks.rank() == 0 ? std::vector<std::uint8_t>{} : encode(mine));
    if (ranks.rank() != 0) return std::nullopt;
    for (std::size_t from = 1; from < parts.size(); ++from) {
        decode_into(parts[from], mine);
        std::vector<std::uint8_t>().swap(parts[from]);
    }
    std::sort(mine.rows.begin(), mine.rows.end(),
              [](const SweepRow& x, const SweepRow& y) { return x.index < y.index; });
    return mine;
}

}  // namespace

std::vector<SweepAxis> parse_sweep_axes(const std::vector<std::string>& vary) {
    std::vector<SweepAxis> axes;
    for (const auto& v : vary) {
        const SourceLocation where{"--vary " + v};
        const auto eq = v.find('=');
        if (eq == std::string::npos || eq == 0)
            throw ConfigError(where, "expected KEY=VALUE1,VALUE2,..., e.g. parallelism.tp=1,2,4,8");
        SweepAxis a;
        a.key = trim(v.substr(0, eq));
        std::stringstream ss(v.substr(eq + 1));
        for (std::string item; std::getline(ss, item, ',');) {
            item = trim(item);
            if (item.empty()) throw ConfigError(where, "an empty value in the list");
            if (std::find(a.values.begin(), a.values.end(), item) != a.values.end())
                throw ConfigError(where, "value \"" + item + "\" is listed twice");
            a.values.push_back(item);
        }
        if (a.values.empty()) throw ConfigError(where, "no values after '='");
        for (const auto& other : axes)
            if (other.key == a.key)
                throw ConfigError(where, "key '" + a.key +
                                             "' is varied twice; list its values in "
                                             "one --vary");
        axes.push_back(std::move(a));
    }
    if (axes.empty())
        throw ConfigError(
            SourceLocation{"sweep"},
            "give at least one --vary KEY=V1,V2,... (e.g. --vary parallelism.tp=2,4,8)");
    return axes;
}

std::optional<std::vector<SweepRow>> sweep(const SweepOptions& options, const SweepRanks& ranks) {
    const auto& axes = options.axes;
    if (axes.empty())
        throw ConfigError(
            SourceLocation{"sweep"},
            "give at least one --vary KEY=V1,V2,... (e.g. --vary parallelism.tp=2,4,8)");
    std::uint64_t total = 1;
    std::string product;
    bool too_many = false;
    for (const auto& axis : axes) {
        product += (product.empty() ? "" : " x ") + std::to_string(axis.values.size());
        too_many = too_many || __builtin_mul_overflow(total, axis.values.size(), &total) ||
                   total > kMaxSweepCombinations;
    }
    if (too_many)
        throw ConfigError(SourceLocation{"--vary"},
                          "the " + std::to_string(axes.size()) + " --vary options give " + product +
                              " combinations, more than the " +
                              std::to_string(kMaxSweepCombinations) +
                              " a sweep may run; vary fewer keys or fewer values");

    // A varied layout size keeps the world size: dp follows unless the sweep fixes it.
    std::vector<std::string> base = options.sets;
    const bool layout_varied = std::any_of(axes.begin(), axes.end(), [](const SweepAxis& x) {
        return x.key.rfind("parallelism.", 0) == 0 || x.key.rfind("topology.", 0) == 0;
    });
    const bool dp_given = mentions_key(options.sets, "parallelism.dp") ||
                          std::any_of(axes.begin(), axes.end(),
                                      [](const SweepAxis& x) { return x.key == "parallelism.dp"; });
    if (layout_varied && !dp_given) base.insert(base.begin(), "parallelism.dp=~");

    auto all =
        gather(simulate_share(Source{&options.experiment, options.text ? &*options.text : nullptr},
                              base, axes, total, options.keep_summaries, ranks, options.on_row),
               ranks);
    if (!all) return std::nullopt;  // rank 0 reports
    if (all->failure) throw std::runtime_error(all->failure->second);
    return std::move(all->rows);
}

SweepRanking rank_sweep(const std::vector<SweepRow>& rows, const std::string& experiment) {
    SweepRanking out;
    for (const auto& r : rows)
        if (!r.source.empty()) out.source = r.source;
    for (const auto& r : rows)
        if (r.result) out.ranked.push_back(&r);
    if (out.ranked.empty())
        throw ConfigError(SourceLocation{experiment},
                          "none of the " + std::to_string(rows.size()) +
                              " combinations is a valid experiment; the first fails with: " +
                              (rows.empty() ? std::string("(none)") : rows.front().error));
    std::stable_sort(out.ranked.begin(), out.ranked.end(),
                     [](const SweepRow* x, const SweepRow* y) {
                         if (x->result->fits != y->result->fits) return x->result->fits;
                         return x->result->tokens_per_s > y->result->tokens_per_s;
                     });
    std::map<std::uint64_t, const SweepRow*> seen;
    for (const SweepRow* r : out.ranked) {
        if (seen.emplace(r->result->summary_digest, r).second)
            out.listed.push_back(r);
        else
            ++out.repeats;
    }
    return out;
}

nlohmann::ordered_json sweep_json(const std::vector<SweepAxis>& axes,
                                  const std::vector<SweepRow>& rows, const SweepRanking& ranking) {
    auto list = nlohmann::ordered_json::array();
    for (const SweepRow* r : ranking.ranked)
        list.push_back(row_json(axes, *r));
    for (const auto& r : rows)
        if (!r.result) list.push_back(row_json(axes, r));
    return list;
}

void print_sweep(std::ostream& out, const std::vector<SweepAxis>& axes,
                 const std::vector<SweepRow>& rows, const SweepRanking& ranking, std::size_t top) {
    const std::size_t total = rows.size();
    const std::size_t listed = ranking.listed.size();
    out << "experiment " << ranking.source << "\n"
        << total << " combinations: " << listed + ranking.repeats << " simulated, "
        << total - listed - ranking.repeats << " not valid";
    if (ranking.repeats > 0)
        out << "; " << ranking.repeats
            << " gave the same result as a listed one (a key the run ignores) and are not listed";
    out << "\n\n";
    print_table(out, axes, ranking.listed, top);
    if (listed > top) out << "(" << listed - top << " more; --top N to show them)\n";
    // Reasons of the invalid combinations, each reason once with how often it occurred.
    std::map<std::string, std::pair<std::size_t, const SweepRow*>> reasons;
    std::vector<std::string> order;
    for (const auto& r : rows) {
        if (r.result) continue;
        auto [it, fresh] = reasons.emplace(r.error, std::make_pair(0, &r));
        if (fresh) order.push_back(r.error);
        ++it->second.first;
    }
    if (!order.empty()) out << "\nnot valid:\n";
    for (const auto& reason : order) {
        const auto& [count, first] = reasons[reason];
        out << "  " << count << " x, e.g.";
        for (std::size_t i = 0; i < axes.size(); ++i)
            out << " " << short_name(axes[i].key) << "=" << first->values[i];
        out << ": " << reason << "\n";
    }
}

}  // namespace cs::api
