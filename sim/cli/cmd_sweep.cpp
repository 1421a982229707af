// clustersim sweep EXPERIMENT.yaml --vary KEY=V1,V2,... [--vary ...] [--set k=v]...
//                 [--top N] [--json FILE]
//
// Simulates every combination of the varied keys (the cartesian product, in the order given) and
// ranks the valid ones by throughput. Combinations that are not valid layouts (heads % tp, layers
// that do not split, a schedule that needs more microbatches, ...), or whose simulation fails,
// are listed with the reason; they never stop the sweep.
#include <spdlog/spdlog.h>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/simulate.hpp"
#include "cli/table.hpp"
#include "config/document.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"

namespace cs::cli {

namespace {

struct SweepArgs {
    std::string experiment;
    std::vector<std::string> vary;
    std::vector<std::string> sets;
    std::size_t top = 20;
    std::string json;
};

struct Axis {
    std::string key;
    std::vector<std::string> values;
};

std::string trim(std::string s) {
    s.erase(0, s.find_first_not_of(' '));
    s.erase(s.find_last_not_of(' ') + 1);
    return s;
}

// "parallelism.tp=1,2,4,8" -> {parallelism.tp, [1, 2, 4, 8]}; checked before anything runs.
std::vector<Axis> parse_axes(const std::vector<std::string>& vary) {
    std::vector<Axis> axes;
    for (const auto& v : vary) {
        const SourceLocation where{"--vary " + v};
        const auto eq = v.find('=');
        if (eq == std::string::npos || eq == 0)
            throw ConfigError(where, "expected KEY=VALUE1,VALUE2,..., e.g. parallelism.tp=1,2,4,8");
        Axis a;
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

bool mentions_key(const std::vector<std::string>& sets, const std::string& key) {
    return std::any_of(sets.begin(), sets.end(),
                       [&](const std::string& s) { return s.rfind(key + "=", 0) == 0; });
}

struct Row {
    std::size_t index = 0;            // enumeration order
    std::vector<std::string> values;  // one per axis
    std::optional<report::Summary> summary;
    bool fits = true;  // worst GPU's memory within its HBM
    std::string error;
};

// A table cell: padded to `width`, then one space.
std::string cell(const std::string& s, std::size_t width) {
    return pad(s, width) + " ";
}

// The last part of a dotted key: parallelism.tp -> tp.
std::string short_name(const std::string& key) {
    const auto dot = key.rfind('.');
    return dot == std::string::npos ? key : key.substr(dot + 1);
}

void print_table(std::ostream& out, const std::vector<Axis>& axes,
                 const std::vector<const Row*>& ranked, std::size_t top) {
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
        const Row& row = *ranked[r];
        const auto& s = *row.summary;
        char tokens[32];
        std::snprintf(tokens, sizeof tokens, "%.0f", s.tokens_per_s);
        out << cell(std::to_string(r + 1), 5);
        for (std::size_t i = 0; i < axes.size(); ++i)
            out << cell(row.values[i], width[i]);
        out << cell(std::to_string(s.dp), 4)
            << cell(format_time(Time::from_seconds_ceil(s.iteration_time_s)), 11)
            << cell(tokens, 10) << cell(percent(s.mfu, 1), 7)
            << cell(percent(s.bubble_fraction, 1), 7)
            << cell(percent(s.exposed_comm_fraction, 1), 9) << cell(format_bytes(s.memory.total), 9)
            << (row.fits ? "yes" : "NO") << "\n";
    }
}

nlohmann::ordered_json row_json(const std::vector<Axis>& axes, const Row& row) {
    nlohmann::ordered_json j;
    auto settings = nlohmann::ordered_json::object();
    for (std::size_t i = 0; i < axes.size(); ++i)
        settings[axes[i].key] = row.values[i];
    j["settings"] = settings;
    if (row.summary) {
        j["fits_hbm"] = row.fits;
        j["summary"] = report::to_json(*row.summary);
    } else {
        j["error"] = row.error;
    }
    return j;
}

void sweep(const SweepArgs& a) {
    const auto axes = parse_axes(a.vary);
    std::size_t total = 1;
    for (const auto& axis : axes)
        total *= axis.values.size();

    // A varied layout size keeps the world size: dp follows unless the sweep fixes it.
    std::vector<std::string> base = a.sets;
    const bool layout_varied = std::any_of(axes.begin(), axes.end(), [](const Axis& x) {
        return x.key.rfind("parallelism.", 0) == 0 || x.key.rfind("topology.", 0) == 0;
    });
    const bool dp_given = mentions_key(a.sets, "parallelism.dp") ||
                          std::any_of(axes.begin(), axes.end(),
                                      [](const Axis& x) { return x.key == "parallelism.dp"; });
    if (layout_varied && !dp_given) base.insert(base.begin(), "parallelism.dp=~");

    std::vector<Row> rows(total);
    std::string source;
    // Per-combination warnings (e.g. memory above HBM) become the table's "fits HBM" column.
    const auto level = spdlog::get_level();
    spdlog::set_level(spdlog::level::err);
    for (std::size_t n = 0; n < total; ++n) {
        Row& row = rows[n];
        row.index = n;
        std::vector<std::string> overrides = base;
        std::size_t rest = n;
        row.values.resize(axes.size());
        for (std::size_t i = axes.size(); i-- > 0;) {
            row.values[i] = axes[i].values[rest % axes[i].values.size()];
            rest /= axes[i].values.size();
        }
        for (std::size_t i = 0; i < axes.size(); ++i)
            overrides.push_back(axes[i].key + "=" + row.values[i]);
        try {
            const auto spec = workload::load_experiment(a.experiment, overrides);
            source = spec.source;
            row.summary = simulate(spec, SimulateOptions{});
            const auto hbm = spec.cluster->gpu_model(0).hbm;
            row.fits = hbm.value <= 0 || row.summary->memory.total <= hbm;
        } catch (const ConfigError& e) {
            row.error = e.what();
        } catch (const SimulationError& e) {
            // An internal failure of one combination is reported with it, not for the sweep.
            row.error = std::string("simulation failed: ") + e.what();
        } catch (...) {
            spdlog::set_level(level);
            throw;
        }
    }
    spdlog::set_level(level);

    std::vector<const Row*> ranked;
    for (const auto& r : rows)
        if (r.summary) ranked.push_back(&r);
    if (ranked.empty())
        throw ConfigError(
            SourceLocation{a.experiment},
            "none of the " + std::to_string(total) +
                " combinations is a valid experiment; the first fails with: " + rows.front().error);
    // Layouts that fit in HBM first, each group by throughput; ties in enumeration order.
    std::stable_sort(ranked.begin(), ranked.end(), [](const Row* x, const Row* y) {
        if (x->fits != y->fits) return x->fits;
        return x->summary->tokens_per_s > y->summary->tokens_per_s;
    });
    // A combination whose simulation is identical to a better-ranked one's (vpp under a schedule
    // without virtual stages, say) is the same run: it is listed once.
    const std::vector<const Row*> all_ranked = ranked;  // the JSON lists repeats too
    std::size_t repeats = 0;
    {
        std::map<std::string, const Row*> seen;
        std::vector<const Row*> unique;
        for (const Row* r : ranked) {
            auto j = report::to_json(*r->summary);
            j.erase("wall_time_s");
            if (seen.emplace(j.dump(), r).second)
                unique.push_back(r);
            else
                ++repeats;
        }
        ranked.swap(unique);
    }

    if (!a.json.empty())
        write_file_atomically(a.json, [&](std::ostream& out) {
            auto list = nlohmann::ordered_json::array();
            for (const Row* r : all_ranked)
                list.push_back(row_json(axes, *r));
            for (const auto& r : rows)
                if (!r.summary) list.push_back(row_json(axes, r));
            out << list.dump(2) << "\n";
        });

    std::cout << "experiment " << source << "\n"
              << total << " combinations: " << ranked.size() + repeats << " simulated, "
              << total - ranked.size() - repeats << " not valid";
    if (repeats > 0)
        std::cout << "; " << repeats
                  << " gave the same result as a listed one (a key the run ignores) and are not "
                     "listed";
    std::cout << "\n\n";
    print_table(std::cout, axes, ranked, a.top);
    if (ranked.size() > a.top)
        std::cout << "(" << ranked.size() - a.top << " more; --top N to show them)\n";
    // Reasons of the invalid combinations, each reason once with how often it occurred.
    std::map<std::string, std::pair<std::size_t, const Row*>> reasons;
    std::vector<std::string> order;
    for (const auto& r : rows) {
        if (r.summary) continue;
        auto [it, fresh] = reasons.emplace(r.error, std::make_pair(0, &r));
        if (fresh) order.push_back(r.error);
        ++it->second.first;
    }
    if (!order.empty()) std::cout << "\nnot valid:\n";
    for (const auto& reason : order) {
        const auto& [count, first] = reasons[reason];
        std::cout << "  " << count << " x, e.g.";
        for (std::size_t i = 0; i < axes.size(); ++i)
            std::cout << " " << short_name(axes[i].key) << "=" << first->values[i];
        std::cout << ": " << reason << "\n";
    }
}

}  // namespace

void register_sweep(CLI::App& app) {
    auto args = std::make_shared<SweepArgs>();
    auto* cmd = app.add_subcommand(
        "sweep", "Simulate every combination of some experiment keys and rank them by throughput");
    cmd->add_option("experiment", args->experiment, "Experiment YAML")->required();
    cmd->add_option("--vary", args->vary, "A key and its values: parallelism.tp=1,2,4,8")
        ->type_name("KEY=V1,V2,...")
        ->required();
    cmd->add_option("--set", args->sets, "Override a key in every combination (see run)")
        ->type_name("KEY=VALUE");
    cmd->add_option("--top", args->top, "Rows of the ranking to print")->capture_default_str();
    cmd->add_option("--json", args->json,
                    "Write every combination (summary, or the reason it is not valid) as JSON");
    cmd->callback([args] { sweep(*args); });
}

}  // namespace cs::cli
