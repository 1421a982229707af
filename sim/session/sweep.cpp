#include "session/sweep.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <exception>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "core/errors.hpp"
#include "core/hash.hpp"
#include "session/run.hpp"
#include "session/sweep_cache.hpp"

namespace cs::api {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SweepResult, figures, tokens_per_s, fits, summary,
                                   summary_digest, wall_time_s)

nlohmann::ordered_json SweepResult::figure(std::string_view path) const {
    const auto all = nlohmann::ordered_json::parse(figures);
    const auto* at = report::at_path(all, path);
    if (!at) throw std::out_of_range("a sweep keeps no figure " + std::string(path));
    return *at;
}

namespace {

std::string trim(std::string s) {
    s.erase(0, s.find_first_not_of(' '));
    s.erase(s.find_last_not_of(' ') + 1);
    return s;
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
        // Without SweepOptions::keep_summaries there is no summary text to give: the figures
        // every row keeps stand in, under a summary's names (the HTML page's table and plots
        // read only these).
        if (!row.result->summary.empty()) {
            auto& summary = j["summary"] = nlohmann::ordered_json::parse(row.result->summary);
            summary["wall_time_s"] = row.result->wall_time_s;
        } else {
            j["summary"] = nlohmann::ordered_json::parse(row.result->figures);
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

// Where a sweep's experiment comes from: a file, or its text (SweepOptions::text).
struct Source {
    const std::filesystem::path* path = nullptr;
    const workload::ExperimentText* text = nullptr;
    std::int64_t max_memory = topology::kDefaultMaxMemory;
    // What the sweep keeps across its runs (SweepCache: at 16,384 GPUs building the topology took
    // longer than an analytical run of it); null with fast paths off (SweepOptions::fast_paths).
    std::shared_ptr<SweepCache> cache;
    workload::ExperimentSpec load(const std::vector<std::string>& overrides) const {
        auto* clusters = cache ? &cache->clusters : nullptr;
        auto* documents = cache ? &cache->documents : nullptr;
        return text ? workload::load_experiment(*text, overrides, max_memory, clusters, documents)
                    : workload::load_experiment(*path, overrides, max_memory, clusters, documents);
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
std::uint64_t link_record(std::uint64_t start, const report::LinkFigures& f) {
    std::uint64_t r = start;
    const auto add = [&r](std::uint64_t word, std::uint64_t odd) {
        r = std::rotl((r ^ word) * odd, 29);
    };
    add(std::bit_cast<std::uint64_t>(f.bytes), 0x9e3779b97f4a7c15);
    add(std::bit_cast<std::uint64_t>(f.busy_s), 0xbf58476d1ce4e5b9);
    add(std::bit_cast<std::uint64_t>(f.utilization), 0x94d049bb133111eb);
    add(std::bit_cast<std::uint64_t>(f.shared_s), 0xff51afd7ed558ccd);
    add(static_cast<std::uint64_t>(static_cast<std::int64_t>(f.max_concurrent_flows)),
        0xc4ceb9fe1a85ec53);
    return mix64(r);
}

// The summary's JSON text without `wall_time_s` (the one field that differs between two runs of
// one experiment): what `sweep --json` keeps, and what every digest starts from.
std::string summary_text(const report::Summary& s) {
    auto json = report::to_json(s);
    json.erase("wall_time_s");
    return json.dump();
}

std::uint64_t digest_of(const report::Summary& s, std::uint64_t links, std::uint64_t record_sum) {
    // without links: the caller took them or none were listed
    std::uint64_t h = fnv1a(summary_text(s));
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
    return fnv1a_bytes(sketch, fnv1a(summary_text(s)));  // no links: the sketch lists none
}

// From the summary's own link list (runs whose links are listed: link faults from the start).
// Takes the links out of `s` (they are not needed after).
std::uint64_t summary_digest_without_text(report::Summary& s) {
    std::vector<report::LinkSummary> links;
    links.swap(s.links);
    std::uint64_t sum = 0;
    for (const auto& l : links)
        sum += link_record(link_record_start(fnv1a(l.name), l.kind),
                           {l.bytes, l.busy_s, l.utilization, l.shared_s, l.max_concurrent_flows});
    return digest_of(s, links.size(), sum);
}

// From the run's accounting (`state`, RunOptions::link_list off), by the summary's own rule of
// which links it lists and what it says of them (report::for_each_listed_link), without building
// the list: one pass over the links the run touched, no strings (each link's record start is
// computed once per cluster).
std::uint64_t summary_digest_from_links(const report::Summary& s, SweepCache::Cluster& state) {
    const auto& cluster = *state.cluster;
    const auto& links = cluster.links();
    const auto& devices = cluster.devices();
    std::uint64_t count = 0;
    std::uint64_t sum = 0;
    report::for_each_listed_link(cluster, *state.accounting, s.iteration_time_s,
                                 [&](topology::LinkId l, const report::LinkFigures& figures) {
                                     std::uint64_t& start = state.record_start[l];
                                     if (start == 0) {
                                         std::uint64_t name = fnv1a(devices[links[l].from].id);
                                         name = fnv1a("->", name);
                                         name = fnv1a(devices[links[l].to].id, name);
                                         start = link_record_start(
                                             name, topology::link_kind_name(links[l].kind));
                                     }
                                     sum += link_record(start, figures);
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
        SweepCache* cache = experiment.cache.get();
        RunOptions options;
        options.fast_paths = cache != nullptr;
        options.max_memory = experiment.max_memory;  // --max-memory, for each combination
        // The digest reads the links from the sketch (outside `flow`) or the accounting kept
        // for the run's cluster: the experiment's own unless link faults from the start change
        // its capacities. Without a cache (no fast paths) from the summary's own list.
        const bool from_links = cache && !keep_summary && spec.faults.links.empty();
        const bool from_sketch = from_links && spec.network.fidelity != network::Fidelity::Flow;
        if (cache)
            cache->links = from_sketch  ? SweepCache::Links::Sketched
                           : from_links ? SweepCache::Links::Accounted
                                        : SweepCache::Links::Listed;
        auto s = run(spec, options, cache).summary;
        const auto hbm = spec.cluster->gpu_model(0).hbm;
        std::string text;
        std::uint64_t digest = 0;
        if (keep_summary) {
            text = summary_text(s);
            digest = fnv1a(text);
        } else if (from_sketch) {
            digest = summary_digest_from_sketch(s, cache->of(spec.cluster).sketch->value());
        } else if (from_links) {
            digest = summary_digest_from_links(s, cache->of(spec.cluster));
        } else {
            digest = summary_digest_without_text(s);  // takes s.links: nothing below reads them
        }
        row.result = SweepResult{.figures = report::column_figures(s).dump(),
                                 .tokens_per_s = s.tokens_per_s,
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

// How a sweep's combinations are dealt to the ranks of an MPI job as they ask (WorkQueue, on
// rank 0). A shape (one value of each axis that shapes_runs) costs most the first time a process
// runs it: its routes, plans and costs are found, then kept (in sweep D of
// docs/performance-history.md, about ten times a later combination of the shape). And shapes differ
// in cost (there a 1f1b shape costs about twice an interleaved one), so any deal fixed in advance
// leaves the rank that drew the slower shapes finishing last. Here:
//   - a position is a combination, shape by shape (shapes in enumeration order, each shape's
//     combinations in enumeration order), so a chunk is a run of one shape's combinations with
//     increasing indices;
//   - a rank keeps to the shape it works on, taking a quarter of what is left of it each time
//     (at least one): large chunks while it is alone on the shape, small ones near its end, so
//     that the last chunks of a sweep are short;
//   - when that shape is out, the first shape no rank has touched;
//   - when none is left, a chunk of the shape with the most combinations left (the earliest of
//     equals): the rank pays that shape's first run again, so this happens only at the tail.
//     With fewer shapes than ranks it spreads a shape over several ranks from the start. There
//     is no minimum: a needless chunk of another rank's shape costs one first run, a missed one
//     up to every row left there, and rows can take seconds (the flow network);
//   - once a rank reports a failure at index f, nothing after f is dealt: one process would have
//     stopped there, so those rows cannot change what is reported.
// A job of one takes every combination in enumeration order, as one chunk.
class ShapeDeal {
  public:
    ShapeDeal(const std::vector<SweepAxis>& axes, std::size_t total, int ranks)
        : axes_(axes), current_(static_cast<std::size_t>(ranks), kNone) {
        std::size_t shapes = 1;
        if (ranks > 1)
            for (const auto& axis : axes)
                if (shapes_runs(axis.key)) shapes *= axis.values.size();
        per_shape_ = total / shapes;  // every shape has as many combinations
        for (std::size_t g = 0; g < shapes; ++g) {
            next_.push_back(g * per_shape_);
            end_.push_back((g + 1) * per_shape_);
        }
    }

    // The combination at `position`: its shape's values on the shaping axes, the others' from its
    // place in the shape (the last axis varying fastest in both, as in the enumeration). With one
    // shape (a job of one, or no shaping axis) the position is the index.
    std::size_t index(std::uint64_t position) const {
        if (next_.size() == 1) return position;
        std::size_t shape = position / per_shape_, k = position % per_shape_;
        std::size_t n = 0, radix = 1;
        for (std::size_t i = axes_.size(); i-- > 0;) {
            const std::size_t values = axes_[i].values.size();
            std::size_t& digits = shapes_runs(axes_[i].key) ? shape : k;
            n += digits % values * radix;
            digits /= values;
            radix *= values;
        }
        return n;
    }

    WorkQueue::Chunk deal(int rank, std::uint64_t cutoff) {
        if (current_.size() == 1) {  // a job of one
            if (next_[0] >= end_[0]) return {};
            next_[0] = end_[0];
            return {0, end_[0]};
        }
        if (cutoff < cutoff_) {
            cutoff_ = cutoff;
            for (std::size_t g = 0; g < next_.size(); ++g)
                end_[g] = std::min(end_[g], g * per_shape_ + before(g, cutoff));
        }
        std::size_t& shape = current_[static_cast<std::size_t>(rank)];
        if (shape == kNone || left(shape) == 0) {
            while (fresh_ < next_.size() && left(fresh_) == 0)
                ++fresh_;
            if (fresh_ < next_.size()) {
                shape = fresh_++;
            } else {
                shape = 0;
                for (std::size_t g = 1; g < next_.size(); ++g)
                    if (left(g) > left(shape)) shape = g;
                if (left(shape) == 0) return {};
            }
        }
        const WorkQueue::Chunk chunk{next_[shape], next_[shape] + (left(shape) + 3) / 4};
        next_[shape] = chunk.end;
        return chunk;
    }

  private:
    static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

    std::uint64_t left(std::size_t g) const { return end_[g] - std::min(next_[g], end_[g]); }

    // How many of shape g's combinations come before index `cutoff` (a prefix of the shape's).
    std::uint64_t before(std::size_t g, std::uint64_t cutoff) const {
        std::uint64_t lo = 0, hi = per_shape_;
        while (lo < hi) {
            const std::uint64_t mid = lo + (hi - lo) / 2;
            if (index(g * per_shape_ + mid) < cutoff)
                lo = mid + 1;
            else
                hi = mid;
        }
        return lo;
    }

    const std::vector<SweepAxis>& axes_;
    std::size_t per_shape_ = 1;
    std::vector<std::uint64_t> next_;  // per shape, its positions not dealt: [next_, end_)
    std::vector<std::uint64_t> end_;
    std::size_t fresh_ = 0;             // shapes before it were touched
    std::vector<std::size_t> current_;  // per rank, the shape of its last chunk
    std::uint64_t cutoff_ = WorkQueue::kNoCutoff;
};

// The first combination a rank failed on unexpectedly, with the message; a ConfigError (input the
// sweep cannot take, found while running) stays one on rank 0.
struct Failure {
    std::size_t index = 0;
    std::string message;
    bool config = false;
};

// This rank's share of the combinations (all of them in a job of one, in enumeration order),
// taken chunk by chunk from `ranks`' work queue; each row is handed to `sink` as it is
// simulated. Returns the earliest combination this rank failed on unexpectedly. One process
// stops at its first failure; here a rank that failed at f goes on with the combinations it is
// handed before f (one of them could fail first) and skips those after f, or after an earlier
// failure of another rank (rank 0 passes the earliest on). So every combination before the
// earliest failure is run, the earliest failure over all ranks is the one process's, and every
// rank goes on asking until the work is out and then takes part in the gather: none is left
// waiting.
std::optional<Failure> simulate_share(const Source& experiment,
                                      const std::vector<std::string>& base,
                                      const SweepOptions& options, std::size_t total,
                                      const SweepRanks& ranks,
                                      const std::function<void(SweepRow&&)>& sink) {
    // Per-combination warnings (e.g. memory above HBM) are dropped: the table's "fits HBM"
    // column says it.
    ShapeDeal deal(options.axes, total, ranks.size());
    WorkQueue queue(ranks,
                    [&deal](int rank, std::uint64_t cutoff) { return deal.deal(rank, cutoff); });
    std::optional<Failure> failure;
    // One process makes the summary-size check below on the first valid row in enumeration
    // order. A rank checks each valid row that comes before every one it checked already, so the
    // rank holding that first row checks it (and reports it, the earliest failure). A rank's
    // check of a later row fails where that first row passed only if the two summaries' sizes
    // straddle the limit (a deal fixed in advance had the same edge).
    std::size_t checked = std::numeric_limits<std::size_t>::max();
    std::size_t done = 0, handed = 0;
    // A share's expected size, for the progress line: a rank learns its real share only as it
    // is dealt.
    const std::size_t share = (total + static_cast<std::size_t>(ranks.size()) - 1) /
                              static_cast<std::size_t>(ranks.size());
    for (auto chunk = queue.next(); !chunk.empty(); chunk = queue.next()) {
        handed += chunk.end - chunk.begin;
        for (std::uint64_t position = chunk.begin; position < chunk.end; ++position) {
            const std::size_t n = deal.index(position);
            if (n > queue.cutoff()) break;  // and the rest of the chunk, whose indices are larger
            queue.serve();
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
                if (options.keep_summaries && row.result && n < checked) {
                    checked = n;
                    // Every kept summary is about this size (the same topology's links): refuse
                    // a sweep whose summaries cannot be held before running the rest of it.
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
                                "), more than --max-memory " +
                                format_bytes(Bytes{options.max_memory}) +
                                "; leave out --json (the table and --html need no summaries), "
                                "vary fewer keys, or raise --max-memory");
                }
            } catch (const ConfigError& e) {
                failure = Failure{n, e.what(), true};
            } catch (const std::exception& e) {
                failure = Failure{n, e.what(), false};
            } catch (...) {
                failure = Failure{n, "unknown exception", false};
            }
            if (failure && failure->index == n) {
                queue.failed(n);  // n is below every failure before: it is this rank's earliest
                continue;
            }
            sink(std::move(row));
            if (options.on_row) options.on_row(++done, std::max(handed, share));
        }
    }
    return failure;
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

    // A varied layout size keeps the world size: the experiment loader lets dp follow whenever
    // the overrides resize tp, pp, cp or the topology without giving dp (as for run's --set).
    return {static_cast<std::size_t>(total), options.sets};
}

Source source_of(const SweepOptions& options) {
    return Source{&options.experiment, options.text ? &*options.text : nullptr, options.max_memory,
                  !options.fast_paths ? nullptr
                  : options.cache     ? options.cache
                                      : std::make_shared<SweepCache>()};
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

}  // namespace cs::api
