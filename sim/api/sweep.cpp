#include "api/sweep.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <exception>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "api/run.hpp"
#include "api/text.hpp"
#include "core/errors.hpp"
#include "core/hash.hpp"

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
// Calls f(axis, index of its value) for each axis of combination `n`, the last axis first.
template <typename F>
void for_each_value(const std::vector<SweepAxis>& axes, std::size_t n, F&& f) {
    for (std::size_t i = axes.size(); i-- > 0;) {
        f(i, n % axes[i].values.size());
        n /= axes[i].values.size();
    }
}

std::vector<std::string> combination(const std::vector<SweepAxis>& axes, std::size_t n) {
    std::vector<std::string> values(axes.size());
    for_each_value(axes, n, [&](std::size_t i, std::size_t v) { values[i] = axes[i].values[v]; });
    return values;
}

// What a sweep keeps per cluster its runs use (at most kMaxEntries clusters, the most recently
// used), each made on first use:
//   - runs outside `flow`: one link sketch (RunOptions::link_sketch; the cluster's link keys, 8
//     bytes per link, are kept with the cluster);
//   - `flow` runs: one link accounting its runs reuse (RunOptions::link_accounting: reset over
//     the links a run touched instead of allocated and zeroed over all of them) and a hash of
//     each link's name, computed on first use (8 bytes per link). About 60 bytes per directed
//     link in all: 80 MB at 16,384 GPUs (1.3 M links), where a run allocated as much for itself
//     before.
struct LinkState {
    std::shared_ptr<const topology::Cluster> cluster;  // keeps the key alive
    std::optional<report::LinkSketch> sketch;
    std::optional<report::LinkAccounting> accounting;
    std::vector<std::uint64_t> name_hash;  // per link its record's start, 0 until computed
    explicit LinkState(std::shared_ptr<const topology::Cluster> c) : cluster(std::move(c)) {}
    report::LinkSketch& sketched() {
        if (!sketch) sketch.emplace(*cluster);
        return *sketch;
    }
    report::LinkAccounting& accounted() {
        if (!accounting) {
            accounting.emplace(cluster->links().size());
            name_hash.assign(cluster->links().size(), 0);
        }
        return *accounting;
    }
};

struct LinkStates {
    static constexpr std::size_t kMaxEntries = 2;
    std::vector<std::unique_ptr<LinkState>> entries;  // the most recently used last
    LinkState& of(const std::shared_ptr<const topology::Cluster>& cluster) {
        for (std::size_t i = 0; i < entries.size(); ++i)
            if (entries[i]->cluster == cluster) {
                std::rotate(entries.begin() + static_cast<std::ptrdiff_t>(i),
                            entries.begin() + static_cast<std::ptrdiff_t>(i) + 1, entries.end());
                return *entries.back();
            }
        if (entries.size() >= kMaxEntries) entries.erase(entries.begin());
        entries.push_back(std::make_unique<LinkState>(cluster));
        return *entries.back();
    }
};

// Where a sweep's experiment comes from: a file, or its text (SweepOptions::text).
struct Source {
    const std::filesystem::path* path = nullptr;
    const workload::ExperimentText* text = nullptr;
    std::int64_t max_memory = topology::kDefaultMaxMemory;
    // The topology is built once per distinct `topology.` settings, not once per combination
    // (at 16,384 GPUs building it took longer than an analytical run of it).
    std::shared_ptr<workload::ClusterCache> clusters = std::make_shared<workload::ClusterCache>();
    std::shared_ptr<LinkStates> links = std::make_shared<LinkStates>();
    // The replay's per-worker containers, reused by every run of the sweep (RunOptions).
    std::shared_ptr<replay::ReplayScratch> replay_scratch =
        std::make_shared<replay::ReplayScratch>();
    workload::ExperimentSpec load(const std::vector<std::string>& overrides) const {
        return text ? workload::load_experiment(*text, overrides, max_memory, clusters.get())
                    : workload::load_experiment(*path, overrides, max_memory, clusters.get());
    }
};

// Digests of a summary whose text is not kept (a table-only sweep). Outside `flow` without link
// faults, from the run's link sketch (summary_digest_from_sketch, below). Otherwise FNV-1a of its
// JSON without `links` and `wall_time_s`, then the number of links and the sum (mod 2^64) of one
// record hash per link: a hash of what the JSON prints of the link (its name, kind, bytes, busy
// time, utilisation, shared time and most flows at once, each number bit for bit). The list is
// printed in an order that is a function of those records (by utilisation, ties in link order),
// so a sum, which needs no sort and no grouping, stands for it:
//   - equal texts give equal digests (the same records);
//   - different texts give different digests (up to 64-bit hash collisions), except where the
//     only difference is the order of two same-named links (parallel links) of equal
//     utilisation whose other numbers were exchanged.
// Both functions below give the same digest for the same text, whichever a row takes, and every
// rank of a sweep computes digests the same way, so the ranking's repeats are those of the text.

// A link record's start: its name's FNV-1a (of "from->to", as Cluster::link_name writes it) and
// its kind's name, mixed.
std::uint64_t link_record_start(std::uint64_t name_fnv, std::string_view kind) {
    return mix64(mix64(name_fnv) ^ fnv1a(kind)) + 0x9e3779b97f4a7c15;
}

// The record: each number's bits xored in, then a multiply by an odd constant and a rotation (a
// bijection of the running value, so records that differ in one word differ), and one mix64 at
// the end.
std::uint64_t link_record(std::uint64_t start, double bytes, double busy_s, double utilization,
                          double shared_s, int max_concurrent_flows) {
    std::uint64_t r = start;
    const auto add = [&r](std::uint64_t word, std::uint64_t odd) {
        r = std::rotl((r ^ word) * odd, 29);
    };
    add(std::bit_cast<std::uint64_t>(bytes), 0x9e3779b97f4a7c15);
    add(std::bit_cast<std::uint64_t>(busy_s), 0xbf58476d1ce4e5b9);
    add(std::bit_cast<std::uint64_t>(utilization), 0x94d049bb133111eb);
    add(std::bit_cast<std::uint64_t>(shared_s), 0xff51afd7ed558ccd);
    add(static_cast<std::uint64_t>(static_cast<std::int64_t>(max_concurrent_flows)),
        0xc4ceb9fe1a85ec53);
    return mix64(r);
}

std::uint64_t digest_of(const report::Summary& s, std::uint64_t links, std::uint64_t record_sum) {
    auto json = report::to_json(s);  // without links: the caller took them or none were listed
    json.erase("wall_time_s");
    std::uint64_t h = fnv1a(json.dump());
    h = fnv1a_bytes(links, h);
    return fnv1a_bytes(record_sum, h);
}

// From the run's link sketch (RunOptions::link_sketch: outside `flow`, no link faults): the JSON's
// FNV-1a, then the sketch. The sketch stands for the link list as the record sum does, from
// another side: the list prints per link its name, kind, bytes, busy time (the holding times
// summed) and utilisation (bytes over bandwidth and iteration time, which is in the JSON), and
// nothing shared; the link keys are a function of name, kind, bandwidth and link number. So:
//   - different lists give different digests but for a chance of about 2^-61 (the sketch's);
//   - equal lists give equal digests when their links are numbered alike: always on one
//     cluster, except for parallel links of the same name whose figures were exchanged
//     (listed in the same order, so the same text; here two results, each listed).
// Where it errs it lists a repeat twice, never hides a result. A row of another kind (a `flow`
// run, link faults) never has this row's JSON, so no digest needs to match across the kinds.
std::uint64_t summary_digest_from_sketch(const report::Summary& s, std::uint64_t sketch) {
    auto json = report::to_json(s);  // no links: RunOptions::link_sketch lists none
    json.erase("wall_time_s");
    return fnv1a_bytes(sketch, fnv1a(json.dump()));
}

// From the summary's own link list (runs whose links are listed: link faults from the start).
// Takes the links out of `s` (they are not needed after).
std::uint64_t summary_digest_without_text(report::Summary& s) {
    std::vector<report::LinkSummary> links;
    links.swap(s.links);
    std::uint64_t sum = 0;
    for (const auto& l : links)
        sum += link_record(link_record_start(fnv1a(l.name), l.kind), l.bytes, l.busy_s,
                           l.utilization, l.shared_s, l.max_concurrent_flows);
    return digest_of(s, links.size(), sum);
}

// From the run's accounting (`state`, RunOptions::link_list off), as link_summaries would list
// the links (every link with bytes, its numbers computed as there), without building the list:
// one pass over the links the run touched, no strings (each link's record start is computed
// once per cluster).
std::uint64_t summary_digest_from_links(const report::Summary& s, LinkState& state) {
    const auto& cluster = *state.cluster;
    const auto& links = cluster.links();
    const auto& devices = cluster.devices();
    const auto seen = state.accounting->links();
    const double T = s.iteration_time_s;
    std::uint64_t count = 0;
    std::uint64_t sum = 0;
    state.accounting->for_each_seen([&](topology::LinkId l) {
        if (l >= links.size()) return;
        const auto st = seen[l];
        if (st.bytes <= 0) return;
        std::uint64_t& start = state.name_hash[l];
        if (start == 0) {
            std::uint64_t name = fnv1a(devices[links[l].from].id);
            name = fnv1a("->", name);
            name = fnv1a(devices[links[l].to].id, name);
            start = link_record_start(name, topology::link_kind_name(links[l].kind));
        }
        sum += link_record(start, st.bytes, st.busy.seconds(),
                           report::link_utilization(st.bytes, links[l].bandwidth.bytes_per_s, T),
                           st.shared.seconds(), st.max_concurrent_flows);
        ++count;
    });
    return digest_of(s, count, sum);
}

// What SweepOptions::on_loaded threw: not the combination's error but the sweep's.
struct LoadedHookError {
    std::exception_ptr error;
};

void simulate_row(const Source& experiment, const std::vector<std::string>& base,
                  const std::vector<SweepAxis>& axes, bool keep_summary,
                  const std::function<void(const workload::ExperimentSpec&)>& on_loaded,
                  SweepRow& row) {
    std::vector<std::string> overrides = base;
    for (std::size_t i = 0; i < axes.size(); ++i)
        overrides.push_back(axes[i].key + "=" + row.values[i]);
    try {
        const auto spec = experiment.load(overrides);
        if (on_loaded) {
            try {
                on_loaded(spec);
            } catch (...) {
                throw LoadedHookError{std::current_exception()};
            }
        }
        row.source = spec.source;
        LinkState& links = experiment.links->of(spec.cluster);
        RunOptions options;
        options.replay_scratch = experiment.replay_scratch.get();
        // The digest reads the links from the sketch (outside `flow`) or the accounting,
        // against the run's cluster: the experiment's own unless link faults from the start
        // change its capacities.
        const bool from_links = !keep_summary && spec.faults.links.empty();
        const bool from_sketch = from_links && spec.network.fidelity != network::Fidelity::Flow;
        if (from_sketch)
            options.link_sketch = &links.sketched();
        else
            options.link_accounting = &links.accounted();
        options.link_list = !from_links;
        auto s = run(spec, options).summary;
        const auto hbm = spec.cluster->gpu_model(0).hbm;
        std::string text;
        std::uint64_t digest = 0;
        if (keep_summary) {
            auto json = report::to_json(s);
            json.erase("wall_time_s");
            text = json.dump();
            digest = fnv1a(text);
        } else if (from_sketch) {
            digest = summary_digest_from_sketch(s, links.sketch->value());
        } else if (from_links) {
            digest = summary_digest_from_links(s, links);
        } else {
            digest = summary_digest_without_text(s);  // takes s.links: nothing below reads them
        }
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
        // A varied value is applied as an override, so its errors name "--set KEY=VALUE": the
        // user typed it as --vary KEY=...; say so, with this combination's value.
        row.error = e.what();
        for (std::size_t i = 0; i < axes.size(); ++i)
            if (e.where().file == "--set " + axes[i].key + "=" + row.values[i]) {
                row.error =
                    ConfigError(SourceLocation{"--vary " + axes[i].key + "=" + row.values[i],
                                               e.where().line, e.where().column},
                                e.message())
                        .what();
                break;
            }
    } catch (const SimulationError& e) {
        // An internal failure of one combination is reported with it, not for the sweep.
        row.error = std::string("simulation failed: ") + e.what();
    }
}

// Whether a varied key can change a run's shape: its cluster, parallel layout, schedule or
// network, and so the routes, plans and kept costs a sweep's cached cluster builds for it.
// Everything but the batch, sequence and recompute settings under `training.` is taken to.
bool shapes_runs(const std::string& key) {
    return key.rfind("training.", 0) != 0;
}

// The combinations rank `rank` of `size` simulates, in enumeration order. Every rank computes the
// same deal, so it costs no message, and the output does not depend on it.
//   - Shapes whole: a shape (one value of each axis that shapes_runs) costs most the first time
//     a process runs it (routes, plans, costs), so while there are at least two shapes per rank
//     each rank takes whole shapes, the same number of them (all shapes have the same number of
//     combinations), in a fixed pseudo-random order of the shapes;
//   - the rest: the combinations of the shapes left over (fewer than the ranks), or all of them
//     if there are too few shapes, are dealt round the ranks in a fixed pseudo-random order. With
//     a stride or blocks, a key's values would line up with the ranks (a stride of 2 over
//     micro_batch_size=1,2 gives one rank every mbs 1, the slow half).
std::vector<std::size_t> dealt_to(int rank, int size, const std::vector<SweepAxis>& axes,
                                  std::size_t total) {
    const auto ranks = static_cast<std::size_t>(size);
    const auto me = static_cast<std::size_t>(rank);
    // The shape of combination n: its values' indices on the shaping axes, as one number.
    std::size_t shapes = 1;
    for (const auto& axis : axes)
        if (shapes_runs(axis.key)) shapes *= axis.values.size();
    const auto shape_of = [&axes](std::size_t n) {
        std::size_t shape = 0, radix = 1;
        for_each_value(axes, n, [&](std::size_t i, std::size_t v) {
            if (!shapes_runs(axes[i].key)) return;
            shape += v * radix;
            radix *= axes[i].values.size();
        });
        return shape;
    };
    // splitmix64 is a bijection, so neither order has ties.
    const std::size_t whole = shapes >= 2 * ranks ? shapes - shapes % ranks : 0;
    std::vector<std::pair<std::uint64_t, std::size_t>> shape_order;
    for (std::size_t g = 0; g < shapes; ++g)
        shape_order.emplace_back(splitmix64(g ^ 0x5851f42d4c957f2d), g);
    std::sort(shape_order.begin(), shape_order.end());
    // Per shape: the rank that takes it whole, or `ranks` for a shape dealt combination by
    // combination.
    std::vector<std::size_t> owner(shapes, ranks);
    for (std::size_t p = 0; p < whole; ++p)
        owner[shape_order[p].second] = p % ranks;
    std::vector<std::size_t> mine;
    std::vector<std::pair<std::uint64_t, std::size_t>> order;
    for (std::size_t n = 0; n < total; ++n) {
        const std::size_t o = owner[shape_of(n)];
        if (o == me) mine.push_back(n);
        if (o == ranks) order.emplace_back(splitmix64(n), n);
    }
    std::sort(order.begin(), order.end());
    for (std::size_t p = me; p < order.size(); p += ranks)
        mine.push_back(order[p].second);
    std::sort(mine.begin(), mine.end());
    return mine;
}

// The first combination a rank failed on unexpectedly, with the message; a ConfigError (input the
// sweep cannot take, found while running) stays one on rank 0.
struct Failure {
    std::size_t index = 0;
    std::string message;
    bool config = false;
};

// One rank's combinations in enumeration order, each row handed to `sink` as it is simulated. A
// rank that fails unexpectedly stops and returns the combination it failed on, so that it still
// takes part in the gather and no rank is left waiting.
std::optional<Failure> simulate_share(const Source& experiment,
                                      const std::vector<std::string>& base,
                                      const SweepOptions& options, std::size_t total,
                                      const SweepRanks& ranks,
                                      const std::function<void(SweepRow&&)>& sink) {
    // Per-combination warnings (e.g. memory above HBM) are dropped: the table's "fits HBM"
    // column says it.
    const auto mine = dealt_to(ranks.rank(), ranks.size(), options.axes, total);
    std::size_t done = 0;
    bool sized = false;
    for (const std::size_t n : mine) {
        SweepRow row;
        row.index = n;
        row.values = combination(options.axes, n);
        try {
            try {
                simulate_row(experiment, base, options.axes, options.keep_summaries,
                             options.on_loaded, row);
            } catch (const LoadedHookError& e) {
                std::rethrow_exception(e.error);
            }
            if (options.keep_summaries && row.result && !sized) {
                sized = true;
                // Every kept summary is about this size (the same topology's links): refuse a
                // sweep whose summaries cannot be held before running the rest of it.
                const double need = static_cast<double>(total) *
                                    static_cast<double>(row.result->summary.size() + 512);
                if (need > static_cast<double>(options.max_memory))
                    throw ConfigError(
                        SourceLocation{"--json"},
                        "keeping every combination's summary would take about " +
                            format_bytes(Bytes{static_cast<std::int64_t>(need)}) + " (" +
                            std::to_string(total) + " combinations x " +
                            format_bytes(
                                Bytes{static_cast<std::int64_t>(row.result->summary.size())}) +
                            "), more than --max-memory " + format_bytes(Bytes{options.max_memory}) +
                            "; leave out --json (the table and --html need no summaries), vary "
                            "fewer "
                            "keys, or raise --max-memory");
            }
        } catch (const ConfigError& e) {
            return Failure{n, e.what(), true};
        } catch (const std::exception& e) {
            return Failure{n, e.what(), false};
        } catch (...) {
            return Failure{n, "unknown exception", false};
        }
        sink(std::move(row));
        if (options.on_row) options.on_row(++done, mine.size());
    }
    return std::nullopt;
}

nlohmann::json row_cbor(const SweepRow& r) {
    return {r.index, r.values, r.result ? nlohmann::json(*r.result) : nlohmann::json(), r.error,
            r.source};
}

SweepRow row_from_cbor(const nlohmann::json& r) {
    SweepRow row;
    row.index = r.at(0).get<std::size_t>();
    row.values = r.at(1).get<std::vector<std::string>>();
    if (!r.at(2).is_null()) row.result = r.at(2).get<SweepResult>();
    row.error = r.at(3).get<std::string>();
    row.source = r.at(4).get<std::string>();
    return row;
}

nlohmann::json failure_cbor(const std::optional<Failure>& f) {
    return f ? nlohmann::json{f->index, f->message, f->config} : nlohmann::json();
}

// Keeps the failure of the earliest combination, as one process going through them in order
// would stop there.
void merge_failure(std::optional<Failure>& into, const nlohmann::json& f) {
    if (f.is_null()) return;
    const auto index = f.at(0).get<std::size_t>();
    if (!into || index < into->index)
        into = Failure{index, f.at(1).get<std::string>(), f.at(2).get<bool>()};
}

[[noreturn]] void rethrow(const Failure& f) {
    if (f.config) throw ConfigError(f.message);
    throw std::runtime_error(f.message);
}

// What every rank sends rank 0: its payload (rows or a tally) and its failure, as CBOR. Rank 0
// gets the other ranks' parts (its own is not in the list); the other ranks get none.
std::vector<nlohmann::json> gather_parts(const nlohmann::json& payload,
                                         const std::optional<Failure>& failure,
                                         const SweepRanks& ranks) {
    if (ranks.size() == 1) return {};
    auto bytes = ranks.gather_to_root(ranks.rank() == 0 ? std::vector<std::uint8_t>{}
                                                        : nlohmann::json::to_cbor(nlohmann::json{
                                                              payload, failure_cbor(failure)}));
    std::vector<nlohmann::json> parts;
    for (std::size_t from = 1; from < bytes.size(); ++from) {
        parts.push_back(nlohmann::json::from_cbor(bytes[from]));
        std::vector<std::uint8_t>().swap(bytes[from]);
    }
    return parts;
}

// The product of the axes' value counts, refused above kMaxSweepCombinations; and the --set list
// every combination starts from.
std::pair<std::size_t, std::vector<std::string>> prepare(const SweepOptions& options) {
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
    return {static_cast<std::size_t>(total), base};
}

Source source_of(const SweepOptions& options) {
    return Source{&options.experiment, options.text ? &*options.text : nullptr, options.max_memory};
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
    const auto [total, base] = prepare(options);
    std::vector<SweepRow> rows;
    auto failure = simulate_share(source_of(options), base, options, total, ranks,
                                  [&](SweepRow&& row) { rows.push_back(std::move(row)); });
    nlohmann::json payload = nlohmann::json::array();
    if (ranks.rank() != 0)
        for (const auto& r : rows)
            payload.push_back(row_cbor(r));
    const auto parts = gather_parts(payload, failure, ranks);
    if (ranks.rank() != 0) return std::nullopt;  // rank 0 reports
    // Merged in enumeration order, so that nothing after depends on the number of ranks.
    for (const auto& part : parts) {
        for (const auto& r : part.at(0))
            rows.push_back(row_from_cbor(r));
        merge_failure(failure, part.at(1));
    }
    if (failure) rethrow(*failure);
    std::sort(rows.begin(), rows.end(),
              [](const SweepRow& x, const SweepRow& y) { return x.index < y.index; });
    return rows;
}

std::optional<SweepTally> sweep_tally(const SweepOptions& options, const SweepRanks& ranks,
                                      std::size_t top) {
    const auto [total, base] = prepare(options);
    SweepOptions lean = options;
    lean.keep_summaries = false;
    SweepTally tally(top);
    auto failure = simulate_share(source_of(options), base, lean, total, ranks,
                                  [&](SweepRow&& row) { tally.add(row); });
    const auto parts =
        gather_parts(ranks.rank() != 0 ? nlohmann::json::binary(tally.encode()) : nlohmann::json(),
                     failure, ranks);
    if (ranks.rank() != 0) return std::nullopt;  // rank 0 reports
    for (const auto& part : parts) {
        tally.merge(SweepTally::decode(part.at(0).get_binary()));
        merge_failure(failure, part.at(1));
    }
    if (failure) rethrow(*failure);
    if (tally.valid() == 0) {
        const auto reasons = tally.reasons();
        throw ConfigError(SourceLocation{options.experiment.string()},
                          "none of the " + std::to_string(tally.combinations()) +
                              " combinations is a valid experiment; the first fails with: " +
                              (reasons.empty() ? std::string("(none)") : reasons.front().text));
    }
    return tally;
}

bool SweepTally::Better::operator()(const Key& x, const Key& y) const {
    if (x.fits != y.fits) return x.fits;
    if (x.tokens_per_s != y.tokens_per_s) return x.tokens_per_s > y.tokens_per_s;
    return x.index < y.index;
}

// Keeps `row` among the best rows if it is its result's best and ranks within top_.
void SweepTally::offer(const Key& key, std::uint64_t digest, const SweepRow& row) {
    const auto [at, fresh] = best_.try_emplace(digest, key);
    if (!fresh) {
        if (!Better{}(key, at->second)) return;  // a repeat of a better row
        kept_.erase(at->second);                 // that row is now the repeat
        at->second = key;
    }
    if (kept_.size() >= top_ && (top_ == 0 || !Better{}(key, std::prev(kept_.end())->first)))
        return;
    SweepRow kept = row;
    kept.result->summary.clear();
    kept_.emplace(key, std::move(kept));
    if (kept_.size() > top_) kept_.erase(std::prev(kept_.end()));
}

void SweepTally::add(const SweepRow& row) {
    ++combinations_;
    if (source_.empty()) source_ = row.source;
    if (!row.result) {
        auto [at, fresh] = reasons_.try_emplace(row.error);
        Reason& r = at->second;
        if (fresh || row.index < r.first_index) {
            r.text = row.error;
            r.first_index = row.index;
            r.first_values = row.values;
        }
        ++r.count;
        return;
    }
    ++valid_;
    offer(Key{row.result->fits, row.result->tokens_per_s, row.index}, row.result->summary_digest,
          row);
}

void SweepTally::merge(const SweepTally& other) {
    combinations_ += other.combinations_;
    valid_ += other.valid_;
    if (source_.empty()) source_ = other.source_;
    for (const auto& [text, theirs] : other.reasons_) {
        auto [at, fresh] = reasons_.try_emplace(text, theirs);
        if (fresh) continue;
        Reason& r = at->second;
        r.count += theirs.count;
        if (theirs.first_index < r.first_index) {
            r.first_index = theirs.first_index;
            r.first_values = theirs.first_values;
        }
    }
    // Every result's best row of the two, then their kept rows that are still their result's best.
    // A merged top row is among the kept rows of the tally it came from: fewer than top_ distinct
    // results rank above it there, as fewer than top_ do in the union.
    for (const auto& [digest, key] : other.best_) {
        const auto [at, fresh] = best_.try_emplace(digest, key);
        if (!fresh && Better{}(key, at->second)) {
            kept_.erase(at->second);
            at->second = key;
        }
    }
    for (const auto& [key, row] : other.kept_) {
        const auto& best = best_.at(row.result->summary_digest);
        if (best.index != key.index) continue;
        kept_.emplace(key, row);
        if (kept_.size() > top_) kept_.erase(std::prev(kept_.end()));
    }
}

std::vector<std::uint8_t> SweepTally::encode() const {
    nlohmann::json best = nlohmann::json::array();
    for (const auto& [digest, key] : best_)
        best.push_back({digest, key.fits, key.tokens_per_s, key.index});
    nlohmann::json kept = nlohmann::json::array();
    for (const auto& [key, row] : kept_)
        kept.push_back(row_cbor(row));
    nlohmann::json reasons = nlohmann::json::array();
    for (const auto& [text, r] : reasons_)
        reasons.push_back({r.text, r.count, r.first_index, r.first_values});
    return nlohmann::json::to_cbor(nlohmann::json{top_, combinations_, valid_, source_,
                                                  std::move(best), std::move(kept),
                                                  std::move(reasons)});
}

SweepTally SweepTally::decode(const std::vector<std::uint8_t>& bytes) {
    const auto j = nlohmann::json::from_cbor(bytes);
    SweepTally t(j.at(0).get<std::size_t>());
    t.combinations_ = j.at(1).get<std::size_t>();
    t.valid_ = j.at(2).get<std::size_t>();
    t.source_ = j.at(3).get<std::string>();
    for (const auto& b : j.at(4))
        t.best_.emplace(
            b.at(0).get<std::uint64_t>(),
            Key{b.at(1).get<bool>(), b.at(2).get<double>(), b.at(3).get<std::size_t>()});
    for (const auto& r : j.at(5)) {
        auto row = row_from_cbor(r);
        const Key key{row.result->fits, row.result->tokens_per_s, row.index};
        t.kept_.emplace(key, std::move(row));
    }
    for (const auto& r : j.at(6))
        t.reasons_.emplace(
            r.at(0).get<std::string>(),
            Reason{r.at(0).get<std::string>(), r.at(1).get<std::size_t>(),
                   r.at(2).get<std::size_t>(), r.at(3).get<std::vector<std::string>>()});
    return t;
}

std::vector<const SweepRow*> SweepTally::top_rows() const {
    std::vector<const SweepRow*> out;
    for (const auto& [key, row] : kept_)
        out.push_back(&row);
    return out;
}

std::vector<SweepTally::Reason> SweepTally::reasons() const {
    std::vector<Reason> out;
    for (const auto& [text, r] : reasons_)
        out.push_back(r);
    std::sort(out.begin(), out.end(),
              [](const Reason& x, const Reason& y) { return x.first_index < y.first_index; });
    return out;
}

SweepTally tally_rows(const std::vector<SweepRow>& rows, std::size_t top) {
    SweepTally tally(top);
    for (const auto& r : rows)
        tally.add(r);
    return tally;
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

void print_sweep(std::ostream& out, const std::vector<SweepAxis>& axes, const SweepTally& tally,
                 std::size_t top) {
    const std::size_t total = tally.combinations();
    const std::size_t listed = tally.listed();
    out << "experiment " << tally.source() << "\n"
        << total << " combinations: " << tally.valid() << " simulated, " << total - tally.valid()
        << " not valid";
    if (tally.repeats() > 0)
        out << "; " << tally.repeats()
            << " gave the same result as a listed one (a key the run ignores) and are not listed";
    out << "\n\n";
    print_table(out, axes, tally.top_rows(), top);
    if (listed > top) out << "(" << listed - top << " more; --top N to show them)\n";
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

}  // namespace cs::api
