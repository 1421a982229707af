#include "fit/calibrate_network.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "ingest/nccl_format.hpp"
#include "ingest/topology.hpp"
#include "network/network.hpp"

namespace cs::api {
namespace {

using network::CollectiveKind;
using network::NetworkConfig;

struct Sample {
    const NcclTestsFile* file = nullptr;
    const NcclTestsRow* row = nullptr;
    std::vector<int> ranks;
    network::Algorithm algorithm;
    double measured_us = 0;
    double base_us = 0;  // simulated without the fitted fixed cost, at the current efficiency
};

// Half a unit of the last digit nccl-tests prints of a time of `us` microseconds (whole
// microseconds from 10 ms, one decimal from 100 us, else two; tables.cpp prints the same).
double nccl_tests_rounding_us(double us) {
    return us >= 10000.0 ? 0.5 : us >= 100.0 ? 0.05 : 0.005;
}

double simulate_us(const topology::Cluster& cluster, const NetworkConfig& config, CollectiveKind op,
                   const Sample& s) {
    try {
        return network::isolated_collective_time(cluster, config, op, s.ranks, Bytes{s.row->size},
                                                 s.algorithm)
                   .seconds() *
               1e6;
    } catch (const ClockOverflow&) {
        throw ConfigError(SourceLocation{s.file->path, s.row->line, 1},
                          "a collective of this size takes longer than the simulator's clock can "
                          "hold (2^63 ps); leave the row out with --nccl-sizes");
    }
}

// The link kinds the collective's flows cross (the cluster's links only, not NVLS's virtual ones).
std::set<int> link_kinds(const topology::Cluster& cluster, CollectiveKind op, const Sample& s) {
    std::set<int> kinds;
    const auto plan = network::build_plan(cluster, op, s.algorithm, s.ranks, 0);
    for (const auto& phase : plan.phases)
        for (const auto& flow : phase.flows)
            for (auto l : flow.path)
                if (static_cast<std::size_t>(l) < cluster.links().size())
                    kinds.insert(static_cast<int>(cluster.links()[l].kind));
    return kinds;
}

// The fixed cost L >= 0 that makes the largest |(base + L) / measured - 1| least, and that value.
// Each residual rises linearly in L (slope 1 / measured), so the largest residual above zero,
// U(L), rises and the largest below, D(L) (as a magnitude), falls: the least of max(U, D) is
// where they meet, or L = 0 when U(0) >= D(0). Bisection finds the two rows that meet; their
// crossing is then solved exactly: (b_i + L) / m_i - 1 = 1 - (b_j + L) / m_j.
std::pair<double, double> least_worst_latency(const std::vector<Sample>& samples) {
    struct Extremes {
        double up = -HUGE_VAL, down = -HUGE_VAL;  // max r, max -r
        std::size_t at_up = 0, at_down = 0;
    };
    const auto extremes = [&](double latency) {
        Extremes e;
        for (std::size_t i = 0; i < samples.size(); ++i) {
            const double r = (samples[i].base_us + latency) / samples[i].measured_us - 1;
            if (r > e.up) {
                e.up = r;
                e.at_up = i;
            }
            if (-r > e.down) {
                e.down = -r;
                e.at_down = i;
            }
        }
        return e;
    };
    Extremes at = extremes(0);
    double latency = 0;
    if (at.up < at.down) {
        // At L = max(m_i - b_i) every residual is >= 0: U >= D there.
        double lo = 0, hi = 0;
        for (const auto& s : samples)
            hi = std::max(hi, s.measured_us - s.base_us);
        for (int it = 0; it < 200 && lo < hi; ++it) {
            const double mid = lo + (hi - lo) / 2;
            if (mid <= lo || mid >= hi) break;
            const Extremes e = extremes(mid);
            (e.up < e.down ? lo : hi) = mid;
        }
        at = extremes(hi);
        const Sample& i = samples[at.at_up];
        const Sample& j = samples[at.at_down];
        latency = std::max(0.0, (2 - i.base_us / i.measured_us - j.base_us / j.measured_us) /
                                    (1 / i.measured_us + 1 / j.measured_us));
        at = extremes(latency);
    }
    return {latency, samples.empty() ? 0.0 : std::max(at.up, at.down)};
}

// The best fixed cost for the current base times under `objective`, and the objective it gives.
std::pair<double, double> best_latency(const std::vector<Sample>& samples,
                                       NetworkFitObjective objective) {
    if (objective == NetworkFitObjective::Worst) return least_worst_latency(samples);
    double num = 0, den = 0;
    for (const auto& s : samples) {
        num += (1 - s.base_us / s.measured_us) / s.measured_us;
        den += 1 / (s.measured_us * s.measured_us);
    }
    const double latency = std::max(0.0, num / den);
    double squares = 0;
    for (const auto& s : samples) {
        const double r = (s.base_us + latency) / s.measured_us - 1;
        squares += r * r;
    }
    return {latency, squares};
}

// The minimum of f on [lo, hi] by golden section (40 steps), or `start` (with f(start) =
// `start_value`) where that is lower: the argument and f there.
template <typename F>
std::pair<double, double> golden(double lo, double hi, F&& f, double start, double start_value) {
    const double g = (std::sqrt(5.0) - 1) / 2;
    double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
    double f1 = f(x1), f2 = f(x2);
    for (int it = 0; it < 40; ++it) {
        if (f1 < f2) {
            hi = x2;
            x2 = x1;
            f2 = f1;
            x1 = hi - g * (hi - lo);
            f1 = f(x1);
        } else {
            lo = x1;
            x1 = x2;
            f1 = f2;
            x2 = lo + g * (hi - lo);
            f2 = f(x2);
        }
    }
    const double mid = (lo + hi) / 2, at_mid = f(mid);
    return at_mid > start_value ? std::pair{start, start_value} : std::pair{mid, at_mid};
}

// The link kind whose efficiency decides the op's time: of those the largest sample's flows
// cross, the one whose halved efficiency slows it most (at least 1%); -1, with the reason in
// `result`, when none does. The others are listed as unfitted.
int bottleneck_kind(NetworkOpFit& fit, const std::vector<Sample>& samples,
                    const topology::Cluster& cluster, const NetworkConfig& base,
                    NetworkFitResult& result) {
    const CollectiveKind op = fit.op;
    const std::string op_name = network::collective_name(op);
    // The largest sample decides which link kind is the bottleneck.
    const auto largest =
        std::max_element(samples.begin(), samples.end(),
                         [](const auto& a, const auto& b) { return a.row->size < b.row->size; });
    fit.algorithm = network::algorithm_name(largest->algorithm);
    const double t_base = simulate_us(cluster, base, op, *largest);
    int best_kind = -1;
    double best_change = 0;
    std::vector<int> crossed;
    for (int k : link_kinds(cluster, op, *largest)) {
        crossed.push_back(k);
        NetworkConfig halved = base;
        halved.op_efficiency[static_cast<int>(op)][k] =
            0.5 * base.op_efficiency[static_cast<int>(op)][k];
        const double change = simulate_us(cluster, halved, op, *largest) / t_base - 1;
        if (change > best_change + 1e-9) {
            best_change = change;
            best_kind = k;
        }
    }
    if (best_kind < 0 || best_change < 0.01) {
        fit.note = "no link kind's efficiency changes the simulated time of the largest size";
        result.unfitted.push_back({op_name, fit.note});
        return -1;
    }
    fit.link = topology::link_kind_name(static_cast<topology::LinkKind>(best_kind));
    for (int k : crossed)
        if (k != best_kind)
            result.unfitted.push_back(
                {op_name + " on " + topology::link_kind_name(static_cast<topology::LinkKind>(k)),
                 std::string("not the bottleneck of ") + op_name + " (halving its efficiency " +
                     "changes the largest size's time less than " + fit.link + "'s); kept at " +
                     "the measured default"});
    return best_kind;
}

// Whether the configuration's protocols include LL or LL128, whose latency factor
// (NetworkConfig::op_protocol_latency) is then searched; without them it stays 1.
bool has_low_latency_protocols(const NetworkConfig& config) {
    return config.protocols[static_cast<std::size_t>(network::Protocol::Ll)].enabled ||
           config.protocols[static_cast<std::size_t>(network::Protocol::Ll128)].enabled;
}

// `base` with the op's constants on link kind `kind` set.
NetworkConfig with_constants(const NetworkConfig& base, CollectiveKind op, int kind,
                             double efficiency, Time latency, double protocol_factor) {
    NetworkConfig config = base;
    config.op_efficiency[static_cast<int>(op)][kind] = efficiency;
    config.op_latency[static_cast<int>(op)][kind] = latency;
    config.op_protocol_latency[static_cast<int>(op)][kind] = protocol_factor;
    return config;
}

struct FittedConstants {
    double efficiency = 1, latency_us = 0, protocol_factor = 1;
};

// The op's efficiency, fixed cost and protocol latency factor on link kind `kind` that fit the
// samples best under `objective` (the fixed cost solved for each trial). Leaves each sample's
// base_us at the fitted efficiency and factor.
FittedConstants fit_constants(CollectiveKind op, int kind, std::vector<Sample>& samples,
                              const topology::Cluster& cluster, const NetworkConfig& base,
                              NetworkFitObjective objective) {
    const bool protocols = has_low_latency_protocols(base);
    double factor = 1;
    const auto evaluate = [&](double e) {
        const NetworkConfig config = with_constants(base, op, kind, e, Time::zero(), factor);
        for (auto& s : samples)
            s.base_us = simulate_us(cluster, config, op, s);
        return best_latency(samples, objective);
    };
    // The efficiency for the current factor: a grid of 0.01, then golden section around the
    // best grid point; returns it and its objective (each trial with its best fixed cost).
    const auto best_efficiency = [&](int grid) {
        double best_e = 1, best_obj = HUGE_VAL;
        for (int i = 1; i <= grid; ++i) {
            const double e = i / static_cast<double>(grid);
            const double obj = evaluate(e).second;
            if (obj < best_obj) {
                best_obj = obj;
                best_e = e;
            }
        }
        const double step = 1.0 / grid;
        return golden(
            std::max(0.001, best_e - step), std::min(1.0, best_e + step),
            [&](double e) { return evaluate(e).second; }, best_e, best_obj);
    };
    double e = 1;
    if (!protocols) {
        e = best_efficiency(100).first;
    } else {
        // The factor on a geometric grid from 1/8 to 8 (each point with the efficiency on a
        // coarse grid of 0.05), then golden section in its logarithm around the best point,
        // each trial with the efficiency at 0.01.
        double best_log = 0, best_obj = HUGE_VAL;
        for (int i = -12; i <= 12; ++i) {
            factor = std::pow(2.0, i / 4.0);
            const double obj = best_efficiency(20).second;
            if (obj < best_obj) {
                best_obj = obj;
                best_log = i / 4.0;
            }
        }
        const auto at = [&](double log2f) {
            factor = std::pow(2.0, log2f);
            return best_efficiency(100).second;
        };
        const double log2f =
            golden(best_log - 0.25, best_log + 0.25, at, best_log, at(best_log)).first;
        factor = std::pow(2.0, log2f);
        e = best_efficiency(100).first;
    }
    return {e, evaluate(e).first, factor};
}

// The report: each sample as the fitted constants (`config`) simulate it, and the residuals.
void add_points(NetworkOpFit& fit, const std::vector<Sample>& samples,
                const topology::Cluster& cluster, const NetworkConfig& config) {
    const CollectiveKind op = fit.op;
    std::vector<double> residuals;
    double squares = 0;
    for (const auto& s : samples) {
        NetworkOpFit::Point p;
        p.file = s.file->path;
        p.line = s.row->line;
        p.ranks = static_cast<int>(s.ranks.size());
        p.size = s.row->size;
        p.measured_us = s.measured_us;
        p.fitted_us = simulate_us(cluster, config, op, s);
        p.protocol = network::collective_choice(cluster, config, op, s.ranks, Bytes{s.row->size},
                                                s.algorithm)
                         .second;
        fit.measured_us += p.measured_us;
        fit.fitted_us += p.fitted_us;
        const double r = p.fitted_us / p.measured_us - 1;
        residuals.push_back(r);
        squares += r * r;
        fit.points.push_back(p);
    }
    std::vector<double> sorted = residuals;
    std::sort(sorted.begin(), sorted.end());
    fit.median_residual = sorted[sorted.size() / 2];
    fit.worst_residual =
        *std::max_element(residuals.begin(), residuals.end(),
                          [](double a, double b) { return std::abs(a) < std::abs(b); });
    fit.rms_residual = std::sqrt(squares / static_cast<double>(residuals.size()));
}

// Rows that no efficiency and fixed cost can reach: even at the links' full rate and no fixed
// cost the simulated collective is slower than measured, its fixed part (pipeline steps x the
// step overhead, hop latencies) being larger than this machine's (e.g. 8 GPUs in a ring take
// 14 steps: 14 x 8.6 us, fitted on 2 H200s, against 79 us measured for a 1 MiB all-reduce on
// 8 A100s). Said, with the sizes, so the user can fit where bandwidth dominates.
void warn_unreachable(CollectiveKind op, int kind, const std::vector<Sample>& samples,
                      const topology::Cluster& cluster, const NetworkConfig& base,
                      NetworkFitResult& result) {
    const NetworkConfig full = with_constants(base, op, kind, 1, Time::zero(),
                                              has_low_latency_protocols(base) ? 0.125 : 1);
    int slower = 0;
    std::int64_t largest_slower = 0;
    double at_us = 0, measured_us = 0;
    for (const auto& smp : samples) {
        const double floor_us = simulate_us(cluster, full, op, smp);
        // Only a floor strictly above the measurement, by more than the measurement's own
        // rounding: nccl-tests prints a time with two decimals below 100 us, one below 10 ms
        // and none above (its "%7.2f" / "%7.1f" / "%7.0f"), so a printed time stands for
        // anything within half a unit of its last digit; a floor within that is equal to it
        // as far as the file can tell (e.g. the output of `clustersim collective` on a
        // network at full rate and no fixed cost). The simulated time's own rounding (up to
        // the next picosecond per step) is far below the smallest of these, 0.005 us.
        if (floor_us <= smp.measured_us + nccl_tests_rounding_us(smp.measured_us)) continue;
        ++slower;
        if (smp.row->size >= largest_slower) {
            largest_slower = smp.row->size;
            at_us = floor_us;
            measured_us = smp.measured_us;
        }
    }
    if (slower == 0) return;
    std::ostringstream w;
    // Sizes as nccl-tests gives them, in bytes ("4096" under "size (B)"), and times to
    // its finest printed digit, so that the two times never read equal.
    w << network::collective_name(op) << ": " << slower << " row(s) up to " << largest_slower
      << " B are faster than the model can be (at " << largest_slower << " B: " << std::fixed
      << std::setprecision(2) << at_us << " us simulated at full link rate and no fixed cost, "
      << measured_us
      << " us measured, with the protocols' latencies at the smallest factor tried, "
         "1/8): the per-step overheads and latencies are larger than this machine's; fit "
         "from where bandwidth dominates (--nccl-sizes)";
    result.warnings.push_back(w.str());
}

void fit_op(NetworkOpFit& fit, std::vector<Sample>& samples, const topology::Cluster& cluster,
            NetworkFitResult& result, NetworkFitObjective objective) {
    const CollectiveKind op = fit.op;
    const NetworkConfig base = NetworkConfig::calibrated(network::Fidelity::Flow);
    const int kind = bottleneck_kind(fit, samples, cluster, base, result);
    if (kind < 0) return;
    const FittedConstants c = fit_constants(op, kind, samples, cluster, base, objective);
    fit.efficiency = c.efficiency;
    fit.latency = Time::ps(std::llround(c.latency_us * 1e6));
    // Below the nanosecond the written file keeps, the fixed cost is at its bound: the search
    // for the least largest residual approaches L = 0 from one side and can stop a few
    // picoseconds above it. Kept as 0, so that the report and the file agree.
    if (fit.latency < Time::ns(1)) {
        fit.latency = Time::zero();
        fit.note = "the fixed cost fitted at its lower bound, 0";
    }
    fit.protocol_latency = c.protocol_factor;
    add_points(fit, samples, cluster,
               with_constants(base, op, kind, c.efficiency, fit.latency, c.protocol_factor));
    warn_unreachable(op, kind, samples, cluster, base, result);
    result.constants.push_back(
        {op, static_cast<topology::LinkKind>(kind), c.efficiency, fit.latency, c.protocol_factor});
}

}  // namespace

NetworkFitResult fit_network(const std::vector<NcclTestsFile>& files,
                             const topology::Cluster& cluster, const std::string& topology_name,
                             std::optional<std::pair<std::int64_t, std::int64_t>> size_range,
                             NetworkFitObjective objective) {
    NetworkFitResult result;
    result.topology = topology_name;
    result.objective = objective;
    std::map<int, NetworkOpFit> fits;
    std::map<int, std::vector<Sample>> samples;
    for (const auto& f : files) {
        result.sources.push_back(std::filesystem::path(f.path).filename().string());
        for (const auto& w : f.warnings)
            result.warnings.push_back(w);
        if (f.ranks > cluster.gpu_count())
            throw ConfigError(SourceLocation{f.path, 1, 1},
                              std::to_string(f.ranks) + " ranks, but " + topology_name + " has " +
                                  std::to_string(cluster.gpu_count()) +
                                  " GPUs (give the topology the run used; --set nodes=N)");
        const int op = static_cast<int>(f.kind);
        auto& fit = fits[op];
        fit.op = f.kind;
        fit.files.push_back(f.path);
        if (f.ranks < 2) {
            result.warnings.push_back(f.path +
                                      ": one rank moves nothing over the network; skipped");
            fit.left_out += static_cast<std::int64_t>(f.rows.size());
            continue;
        }
        if (std::find(fit.rank_counts.begin(), fit.rank_counts.end(), f.ranks) ==
            fit.rank_counts.end())
            fit.rank_counts.push_back(f.ranks);
        std::vector<int> ranks;
        for (int r = 0; r < f.ranks; ++r)
            ranks.push_back(r);
        for (const auto& row : f.rows) {
            const bool in_range =
                !size_range || (row.size >= size_range->first && row.size <= size_range->second);
            if (row.wrong_elements() || !in_range || row.size <= 0) {
                ++fit.left_out;
                continue;
            }
            Sample s;
            s.file = &f;
            s.row = &row;
            s.ranks = ranks;
            s.measured_us = row.time_us[0];
            s.algorithm = network::resolve_algorithm(cluster, f.kind, ranks, Bytes{row.size},
                                                     network::Algorithm::Auto);
            samples[op].push_back(std::move(s));
        }
    }
    for (auto& [op, fit] : fits) {
        auto& list = samples[op];
        fit.samples = static_cast<std::int64_t>(list.size());
        if (list.empty()) {
            fit.note = "no rows to fit (all left out by the size range or for wrong elements)";
            result.unfitted.push_back({network::collective_name(fit.op), fit.note});
        } else {
            fit_op(fit, list, cluster, result, objective);
        }
        result.ops.push_back(fit);
    }
    for (const auto& name : network::kCollectiveNames)
        if (!fits.count(static_cast<int>(name.value)))
            result.unfitted.push_back({std::string(name.name), "no nccl-tests file of it given"});
    return result;
}

NetworkFitResult calibrate_network(const NetworkFitOptions& options) {
    if (options.topology.empty())
        throw ConfigError(SourceLocation{"--nccl-tests"},
                          "fitting the network needs the topology the tests ran on: give "
                          "--topology T.yaml");
    std::optional<std::pair<std::int64_t, std::int64_t>> range;
    if (!options.sizes.empty()) {
        const auto sizes = parse_size_range(options.sizes, 2);
        const auto colon = options.sizes.find(':');
        const auto last = colon == std::string::npos
                              ? sizes.front()
                              : *parse_nccl_size(options.sizes.substr(colon + 1));
        range = std::pair{sizes.front().value, last.value};
    }
    std::vector<NcclTestsFile> files;
    for (const auto& spec : options.files)
        files.push_back(read_nccl_tests(spec));
    const auto topo = load_topology(options.topology, options.sets);
    return fit_network(files, topo.cluster, topo.display_path, range, options.objective);
}

NetworkFitObjective parse_network_fit_objective(const std::string& name) {
    if (name == "worst") return NetworkFitObjective::Worst;
    if (name == "rms") return NetworkFitObjective::Rms;
    throw ConfigError(SourceLocation{"--nccl-fit"},
                      "expected worst (the largest residual made least) or rms (least squares), "
                      "got \"" +
                          name + "\"");
}

const char* network_fit_objective_name(NetworkFitObjective objective) {
    return objective == NetworkFitObjective::Worst ? "worst" : "rms";
}

nlohmann::json network_fit_json(const NetworkFitResult& r) {
    nlohmann::json j;
    j["topology"] = r.topology;
    j["objective"] = network_fit_objective_name(r.objective);
    j["sources"] = r.sources;
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& f : r.ops) {
        nlohmann::json o{{"op", network::collective_name(f.op)},
                         {"files", f.files},
                         {"rank_counts", f.rank_counts},
                         {"samples", f.samples},
                         {"left_out", f.left_out},
                         {"fitted", !f.link.empty()},
                         {"note", f.note}};
        if (!f.link.empty()) {
            o["link"] = f.link;
            o["algorithm"] = f.algorithm;
            o["efficiency"] = f.efficiency;
            o["latency_us"] = f.latency.seconds() * 1e6;
            o["protocol_latency"] = f.protocol_latency;
            o["measured_us"] = f.measured_us;
            o["fitted_us"] = f.fitted_us;
            o["median_residual"] = f.median_residual;
            o["worst_residual"] = f.worst_residual;
            o["rms_residual"] = f.rms_residual;
            nlohmann::json points = nlohmann::json::array();
            for (const auto& p : f.points)
                points.push_back({{"file", p.file},
                                  {"line", p.line},
                                  {"ranks", p.ranks},
                                  {"bytes", p.size},
                                  {"measured_us", p.measured_us},
                                  {"fitted_us", p.fitted_us},
                                  {"protocol", network::protocol_name(p.protocol)},
                                  {"residual", p.fitted_us / p.measured_us - 1}});
            o["points"] = points;
        }
        ops.push_back(o);
    }
    j["ops"] = ops;
    nlohmann::json un = nlohmann::json::array();
    for (const auto& u : r.unfitted)
        un.push_back({{"what", u.what}, {"why", u.why}});
    j["unfitted"] = un;
    j["warnings"] = r.warnings;
    return j;
}

}  // namespace cs::api
