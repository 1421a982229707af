// The parsers of an experiment's `variability`, `faults` and `goodput` sections, and gpu_set
// (the GPU and node numbers they and jobs' placements name).
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "workload/experiment.hpp"
#include "workload/experiment_parse.hpp"

namespace cs::workload {
namespace {

// The forms a `gpus:` or `nodes:` value may take, for messages.
constexpr const char* kGpuSetForms =
    "a number, \"all\", numbers and ranges such as \"0-3,8\", or a list";

// The numbers a `gpus:` or `nodes:` value names (`key`; each below `limit`), as ranges: collected,
// merged, and expanded only then, so that a long list that repeats a large range
// ("0-4095,0-4095,...") costs its text, not the sum of its ranges.
struct NumberRanges {
    const config::Reader& r;
    std::string key;
    bool by_gpu;
    int limit;
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    // The smallest number named more than once, -1 if none (found by merge()).
    std::int64_t repeated = -1;

    // Sorted and merged, overlapping or adjacent ranges joined; done whenever the list grows long
    // too, so that it never holds more than about as many ranges as the cluster has numbers. A
    // range that overlaps the ones before it names its first number twice: sorted by start, the
    // first such overlap gives the smallest repeated number (and a merge part-way keeps every
    // number, so a later repeat of it still overlaps).
    void merge() {
        std::sort(ranges.begin(), ranges.end());
        std::size_t kept = 0;
        for (const auto& range : ranges)
            if (kept > 0 && range.first <= ranges[kept - 1].second + 1) {
                if (range.first <= ranges[kept - 1].second &&
                    (repeated < 0 || range.first < repeated))
                    repeated = range.first;
                ranges[kept - 1].second = std::max(ranges[kept - 1].second, range.second);
            } else {
                ranges[kept++] = range;
            }
        ranges.resize(kept);
    }
    void check(std::int64_t v) const {
        if (v < 0 || v >= limit) outside(std::to_string(v));
    }
    [[noreturn]] void outside(const std::string& number) const {
        r.fail(key, (by_gpu ? "GPU " : "node ") + number + " is not in the cluster, whose " +
                        (by_gpu ? "GPUs" : "nodes") + " are numbered " +
                        (limit == 1 ? std::string("0") : "0-" + std::to_string(limit - 1)));
    }
    std::int64_t number(const std::string& t) const {
        if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
            r.fail(key, std::string("expected ") + kGpuSetForms + ", cannot read \"" + t + "\"");
        // Past nine digits no number is in a cluster (and none overflows the conversion).
        if (t.size() > 9) outside(t);
        return std::stoll(t);
    }
    // "all", or numbers and ranges separated by commas.
    void read_text(const std::string& text) {
        if (text == "all") {
            ranges.emplace_back(0, limit - 1);
            return;
        }
        std::size_t pos = 0;
        while (pos <= text.size()) {
            const std::size_t comma = std::min(text.find(',', pos), text.size());
            const std::string part = text.substr(pos, comma - pos);
            if (!part.empty() && part.front() == '-')
                r.fail(key, std::string("\"") + part + "\": " + (by_gpu ? "GPU" : "node") +
                                " numbers are 0 or more (" + kGpuSetForms + ")");
            const std::size_t dash = part.find('-');
            if (dash == std::string::npos) {
                const std::int64_t a = number(part);
                check(a);
                ranges.emplace_back(a, a);
            } else {
                const std::int64_t a = number(part.substr(0, dash)),
                                   b = number(part.substr(dash + 1));
                if (b < a) r.fail(key, "range " + part + " runs backwards");
                check(a);
                check(b);  // reports the first number outside the cluster
                ranges.emplace_back(a, b);
            }
            if (ranges.size() > 65536 + 2 * static_cast<std::size_t>(limit)) merge();
            pos = comma + 1;
        }
    }
};

// The GPUs an entry of `variability` names: `gpus:` (a number, "all", a string of numbers and
// ranges such as "0-3,8", or a list of numbers) or `nodes:` (the same forms, by node), one of the
// two. Sorted and unique; every number checked against the cluster. With `once`, a number named
// twice is refused (a job's placement runs a rank per GPU named).
std::vector<int> variability_gpus(const config::Reader& r, const topology::Cluster& cluster,
                                  bool once = false) {
    const bool by_gpu = r.has("gpus"), by_node = r.has("nodes");
    if (by_gpu == by_node)
        r.fail_here(by_gpu ? "give gpus or nodes, not both"
                           : "missing gpus (GPU numbers) or nodes (node numbers)");
    NumberRanges set{r,
                     by_gpu ? "gpus" : "nodes",
                     by_gpu,
                     by_gpu ? cluster.gpu_count() : cluster.node_count(),
                     {}};
    const std::string& key = set.key;
    const YAML::Node v = r.value(key);
    if (v.IsScalar()) {
        set.read_text(v.Scalar());
    } else if (v.IsSequence()) {
        for (const auto& item : v) {
            if (!item.IsScalar()) r.fail(key, std::string("expected ") + kGpuSetForms);
            set.read_text(item.Scalar());
        }
    } else {
        r.fail(key, std::string("expected ") + kGpuSetForms);
    }
    if (set.ranges.empty()) r.fail(key, "names no GPU");
    set.merge();
    if (once && set.repeated >= 0)
        r.fail(key, std::string(by_gpu ? "GPU " : "node ") + std::to_string(set.repeated) +
                        " is named more than once; name each " + (by_gpu ? "GPU" : "node") +
                        " once (a rank runs on each GPU named)");
    std::vector<int> picked;
    for (const auto& [a, b] : set.ranges)
        for (std::int64_t i = a; i <= b; ++i)
            picked.push_back(static_cast<int>(i));
    if (by_gpu) return picked;
    std::vector<int> gpus;
    for (int g = 0; g < cluster.gpu_count(); ++g)
        if (std::binary_search(picked.begin(), picked.end(), cluster.node_of_gpu(g)))
            gpus.push_back(g);
    if (gpus.empty()) r.fail(key, "the nodes named hold no GPU");
    return gpus;
}

// A factor of `variability`: finite, in (0, kMaxSlowdown] for a spread (sd, sigma), else in
// [kMinSlowdown, kMaxSlowdown] as the drawn factors are kept (1.2 is 20% slower).
double slowdown_factor(const config::Reader& r, const std::string& key, double fallback,
                       bool spread = false) {
    const double f = r.number_or(key, fallback);
    if (spread ? !(f > 0 && f <= kMaxSlowdown) : !(f >= kMinSlowdown && f <= kMaxSlowdown))
        r.fail(key, std::string("must be in ") + (spread ? "(0" : "[0.05") + ", " +
                        std::to_string(static_cast<int>(kMaxSlowdown)) +
                        "] (1 is the plan's time, 1.2 is 20% slower)");
    return f;
}

// The directed links a fault entry's `link:` names: the link of that name and its reverse (a
// cable fails or degrades both ways), and any parallel links between the same two devices.
std::vector<topology::LinkId> fault_links(const config::Reader& r,
                                          const topology::Cluster& cluster) {
    const std::string name = r.string("link");
    const auto& links = cluster.links();
    const std::size_t arrow = name.find("->");
    const std::string from = arrow == std::string::npos ? name : name.substr(0, arrow);
    const std::string to = arrow == std::string::npos ? std::string() : name.substr(arrow + 2);
    std::vector<topology::LinkId> found;
    for (topology::LinkId l = 0; l < links.size(); ++l)
        if (cluster.link_named(l, name)) {
            found.push_back(l);
            found.push_back(links[l].reverse);
        }
    if (!found.empty()) {
        std::sort(found.begin(), found.end());
        found.erase(std::unique(found.begin(), found.end()), found.end());
        return found;
    }
    std::string message = "unknown link '" + name + "'; links are named <from>-><to> by device id";
    const auto list_links_of = [&](topology::DeviceIndex d) {
        std::string names;
        int shown = 0, total = 0;
        for (topology::LinkId l = 0; l < links.size(); ++l)
            if (links[l].from == d) {
                if (shown < 8) {
                    names += (shown ? ", " : "") + cluster.link_name(l);
                    ++shown;
                }
                ++total;
            }
        if (total > shown) names += ", ... (" + std::to_string(total) + " in all)";
        return names;
    };
    if (arrow == std::string::npos) {
        message += " (docs/yaml/topology.md, \"Generated names\")";
        const auto d = cluster.find_device(name);
        if (d != topology::kNone)
            message += "; the links of device " + name + ": " + list_links_of(d);
    } else if (const auto d = cluster.find_device(from); d == topology::kNone) {
        message +=
            "; there is no device '" + from + "' (docs/yaml/topology.md, \"Generated names\")";
    } else if (cluster.find_device(to) == topology::kNone) {
        message +=
            "; there is no device '" + to + "'; the links of " + from + ": " + list_links_of(d);
    } else {
        message += "; no link joins " + from + " and " + to + "; the links of " + from + ": " +
                   list_links_of(d);
    }
    r.fail("link", message);
}

// A fault's `at:` (default 0, the whole run): a duration of at least 0.
Time fault_time(const config::Reader& r) {
    if (!r.has("at")) return Time::zero();
    // A negative time is unreadable as a duration; say what is wrong with it instead.
    const YAML::Node v = r.value("at");
    if (v.IsScalar() && v.Scalar().find_first_not_of(' ') != std::string::npos &&
        v.Scalar()[v.Scalar().find_first_not_of(' ')] == '-')
        r.fail("at",
               "must be at least 0 (a time from the start of the iteration, e.g. 2ms; 0 "
               "or no at: the whole run)");
    return r.time("at");
}

}  // namespace

namespace detail {

VariabilitySpec parse_variability(const config::Reader& r, const topology::Cluster& cluster) {
    VariabilitySpec v;
    std::vector<double> fixed;  // per GPU: the product of its fixed factors so far
    if (r.has("gpus"))
        for (const auto& e : r.list_of_maps("gpus")) {
            Slowdown s;
            s.gpus = variability_gpus(e, cluster);
            s.kind =
                e.choice("distribution", kSlowdownKindNames, std::optional{SlowdownKind::Fixed});
            switch (s.kind) {
                case SlowdownKind::Fixed:
                    s.factor = slowdown_factor(e, "factor", 1);
                    if (!e.has("factor")) e.fail_here("a fixed slowdown needs factor (e.g. 1.2)");
                    break;
                case SlowdownKind::Normal:
                    s.factor = slowdown_factor(e, "mean", 1);
                    s.spread = slowdown_factor(e, "sd", 1, true);
                    if (!e.has("sd")) e.fail_here("a normal slowdown needs sd (e.g. 0.05)");
                    break;
                case SlowdownKind::Lognormal:
                    s.factor = slowdown_factor(e, "median", 1);
                    s.spread = slowdown_factor(e, "sigma", 1, true);
                    if (!e.has("sigma"))
                        e.fail_here("a lognormal slowdown needs sigma (e.g. 0.05)");
                    break;
            }
            e.finish();
            v.gpus.push_back(std::move(s));
            // A GPU under several fixed entries runs the product of their factors: kept in
            // the range of one.
            if (v.gpus.back().kind == SlowdownKind::Fixed) {
                fixed.resize(static_cast<std::size_t>(cluster.gpu_count()), 1.0);
                for (int g : v.gpus.back().gpus) {
                    double& f = fixed[static_cast<std::size_t>(g)];
                    f *= v.gpus.back().factor;
                    if (!(f >= kMinSlowdown && f <= kMaxSlowdown)) {
                        char text[32];
                        std::snprintf(text, sizeof text, "%.6g", f);
                        e.fail("factor", "makes GPU " + std::to_string(g) +
                                             "'s factor (the product of its entries' factors) " +
                                             text + "; expected it in [0.05, " +
                                             std::to_string(static_cast<int>(kMaxSlowdown)) + "]");
                    }
                }
            }
        }
    if (r.has("hosts"))
        for (const auto& e : r.list_of_maps("hosts")) {
            HostSlowdown h;
            h.gpus = variability_gpus(e, cluster);
            if (!e.has("factor"))
                e.fail_here("a slow host needs factor (e.g. 2: its costs doubled)");
            h.factor = slowdown_factor(e, "factor", 1);
            e.finish();
            v.hosts.push_back(std::move(h));
        }
    r.finish();
    return v;
}

FaultsSpec parse_faults(const config::Reader& r, const topology::Cluster& cluster) {
    FaultsSpec f;
    if (r.has("links"))
        for (const auto& e : r.list_of_maps("links")) {
            LinkFault lf;
            lf.where = e.location();
            if (!e.has("link")) e.fail_here("missing link (a link's name, e.g. leaf0->spine0)");
            lf.name = e.string("link");
            lf.links = fault_links(e, cluster);
            const bool failed = e.boolean_or("failed", false);
            if (e.has("fraction") == failed)
                e.fail_here(failed ? "give failed: true or fraction, not both"
                                   : "missing fraction (of the link's bandwidth left, in (0, 1]) "
                                     "or failed: true");
            if (!failed) {
                lf.fraction = e.number("fraction");
                if (!(lf.fraction > 0 && lf.fraction <= 1))
                    e.fail("fraction",
                           "must be in (0, 1]: the fraction of the link's bandwidth left (0.5: "
                           "half); a link with nothing left is failed: true");
            }
            lf.at = fault_time(e);
            e.finish();
            f.links.push_back(std::move(lf));
        }
    if (r.has("gpus"))
        for (const auto& e : r.list_of_maps("gpus")) {
            GpuFault g;
            g.where = e.location();
            const bool by_node = e.has("nodes");
            g.gpus = variability_gpus(e, cluster);
            if (by_node) {
                std::vector<int> nodes;
                for (int gpu : g.gpus)
                    nodes.push_back(cluster.node_of_gpu(gpu));
                nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
                g.what = (nodes.size() == 1 ? "node " : "nodes ") + gpu_list_text(nodes);
            } else {
                g.what = (g.gpus.size() == 1 ? "GPU " : "GPUs ") + gpu_list_text(g.gpus);
            }
            g.at = fault_time(e);
            e.finish();
            f.gpus.push_back(std::move(g));
        }
    r.finish();
    return f;
}

GoodputSpec parse_goodput(const config::Reader& r) {
    GoodputSpec g;
    g.present = true;
    g.where = r.location();
    g.failures_per_gpu_hour = r.number("failures_per_gpu_hour");
    // Below 1e-12 (a failure per GPU every 114 million years) the optimum checkpoint interval
    // runs past any training run and past the iteration counts the report can hold.
    if (!(g.failures_per_gpu_hour >= 1e-12 && g.failures_per_gpu_hour <= 1))
        r.fail("failures_per_gpu_hour",
               "must be in [1e-12, 1] failures per GPU-hour (Llama 3's 16K-GPU run: about "
               "2.2e-5)");
    g.restart = r.time_opt("restart").value_or(Time::zero());
    if (auto c = r.map_opt("checkpoint")) {
        g.write_time = c->time_opt("write_time");
        if (c->has("bytes") && c->string("bytes") != "auto") {
            g.checkpoint_bytes = c->bytes("bytes");
            if (g.checkpoint_bytes.value <= 0)
                c->fail("bytes",
                        "a checkpoint holds more than 0 bytes; give its size (e.g. "
                        "2.5TB) or auto (the model and optimizer states)");
        }
        if (auto bw = c->bandwidth_opt("write_bandwidth")) g.write_bandwidth = *bw;
        if (g.write_time && c->has("write_bandwidth"))
            c->fail("write_time", "give write_time or write_bandwidth, not both");
        if (!g.write_time && !c->has("write_bandwidth"))
            c->fail_here("missing write_bandwidth (e.g. 100GB/s) or write_time (e.g. 120s)");
        c->finish();
    } else {
        r.fail_here("missing checkpoint: {write_bandwidth: ...} or {write_time: ...}");
    }
    if (r.has("interval") && r.string("interval") != "optimal") g.interval = r.time("interval");
    if (g.interval && *g.interval <= Time::zero())
        r.fail("interval", "must be a positive time or 'optimal'");
    g.tokens = r.number_or("tokens", 0);
    if (!(g.tokens >= 0 && g.tokens <= 1e18))
        r.fail("tokens", "must be a token count in [0, 1e18]");
    g.pue = r.number_or("pue", 1);
    if (!(g.pue >= 1 && g.pue <= 10)) r.fail("pue", "must be in [1, 10]");
    if (r.has("gpu_power")) {
        const double w = r.number("gpu_power");
        if (!(w > 0 && w <= 1e5)) r.fail("gpu_power", "must be in (0, 100000] watts");
        g.gpu_power_w = w;
    }
    if (auto mc = r.map_opt("monte_carlo")) {
        g.monte_carlo_runs = static_cast<int>(mc->count_or("runs", 200, 2));
        if (g.monte_carlo_runs > 100000) mc->fail("runs", "must be at most 100000");
        g.monte_carlo_segments = static_cast<int>(mc->count_or("segments", 1000, 1));
        if (g.monte_carlo_segments > 100000) mc->fail("segments", "must be at most 100000");
        // Each segment draws its own failures: 10^8 segments take about 0.6 s.
        if (static_cast<std::int64_t>(g.monte_carlo_runs) * g.monte_carlo_segments > 100000000)
            mc->fail("segments", "runs x segments = " +
                                     std::to_string(static_cast<std::int64_t>(g.monte_carlo_runs) *
                                                    g.monte_carlo_segments) +
                                     " must be at most 100,000,000 (each segment is drawn)");
        g.monte_carlo_seed = static_cast<std::uint64_t>(mc->count_or("seed", 1, 0));
        mc->finish();
    }
    r.finish();
    return g;
}

}  // namespace detail

std::vector<int> gpu_set(const config::Reader& r, const topology::Cluster& cluster) {
    return variability_gpus(r, cluster, true);
}

}  // namespace cs::workload
