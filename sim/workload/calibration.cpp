#include "workload/calibration.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/errors.hpp"

namespace cs::workload {
namespace {

// Shortest text that reads back as the same double for the fitted values (4 significant digits
// are all a fit carries), so the same fit always prints the same bytes.
std::string number_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
}

std::string time_text(Time t) {
    // Whole nanoseconds: every fitted time is microseconds with sub-microsecond noise.
    return std::to_string((t.count_ps() + 500) / 1000) + "ns";
}

double fraction(const config::Reader& r, const std::string& key, double lo, double hi,
                const char* what) {
    const double v = r.number(key);
    if (!(v > lo && v <= hi))
        r.fail(key, "must be in (" + number_text(lo) + ", " + number_text(hi) + "]: " + what);
    return v;
}

// `compute:`: the GEMM curve, HBM fractions, attention and grouped-GEMM multipliers, the
// residual and the launch and host overheads. `display_path` names the file as the curve's source.
void parse_compute_constants(const config::Reader& c, const std::string& display_path,
                             CalibrationFile& cal) {
    if (auto g = c.map_opt("gemm")) {
        topology::GemmCurve curve;
        curve.peak_fraction =
            fraction(*g, "peak_fraction", 0, 1, "the best 16-bit GEMM's fraction of the bf16 peak");
        curve.half_dim = g->number("half_dim");
        if (!(curve.half_dim > 0 && curve.half_dim < 1e6))
            g->fail("half_dim", "must be in (0, 1000000)");
        curve.exponent = g->number("exponent");
        if (!(curve.exponent >= 0.5 && curve.exponent <= 8))
            g->fail("exponent", "must be in [0.5, 8]");
        curve.source = "calibration " + display_path;
        g->finish();
        cal.gemm = curve;
    }
    if (auto h = c.map_opt("hbm_fractions")) {
        for (const auto& k : kMemKindNames)
            if (h->has(std::string(k.name)))
                cal.hbm_fractions[static_cast<std::size_t>(k.value)] =
                    fraction(*h, std::string(k.name), 0, 1,
                             "the kind's achieved fraction of the HBM bandwidth");
        h->finish();
    }
    if (auto a = c.map_opt("attention")) {
        if (a->has("forward"))
            cal.attention_forward =
                fraction(*a, "forward", 0, 4, "a multiplier on the forward's efficiency");
        if (a->has("backward"))
            cal.attention_backward =
                fraction(*a, "backward", 0, 4, "a multiplier on the backward's efficiency");
        a->finish();
    }
    if (auto g = c.map_opt("grouped_gemm")) {
        cal.grouped_gemm = fraction(*g, "scale", 0, 4, "a multiplier on the grouped rate");
        g->finish();
    }
    if (c.has("residual")) {
        const double v = c.number("residual");
        if (!(v >= 0 && v < 1))
            c.fail("residual", "must be in [0, 1): the unmapped kernel time over the mapped");
        cal.residual = v;
    }
    cal.launch_overhead = c.time_opt("launch_overhead");
    if (auto h = c.map_opt("host")) {
        cal.host_launch = h->time_opt("launch");
        h->finish();
    }
    c.finish();
}

// `network:` (version 2 on): a constant per collective and link kind.
void parse_network_constants(const config::Reader& n, CalibrationFile& cal) {
    for (const auto& op : network::kCollectiveNames) {
        const auto o = n.map_opt(std::string(op.name));
        if (!o) continue;
        for (const auto& link : topology::kLinkKindNames) {
            const auto l = o->map_opt(std::string(link.name));
            if (!l) continue;
            NetworkConstant k;
            k.op = op.value;
            k.link = link.value;
            k.efficiency = fraction(*l, "efficiency", 0, 1,
                                    "the fraction of the link's nominal bandwidth one "
                                    "flow of the operation reaches");
            k.latency = l->time_opt("latency").value_or(Time::zero());
            if (l->has("protocol_latency"))
                k.protocol_latency =
                    fraction(*l, "protocol_latency", 0, 1000,
                             "the factor on the LL and LL128 protocols' latencies");
            l->finish();
            cal.network.push_back(k);
        }
        o->finish();
    }
    n.finish();
}

}  // namespace

CalibrationFile parse_calibration(const config::Document& doc) {
    const config::Reader root = config::root_reader(doc);
    if (!root.has("clustersim_calibration"))
        root.fail_here("not a clustersim calibration file: missing `clustersim_calibration: " +
                       std::to_string(kCalibrationVersion) +
                       "` (write one with clustersim calibrate)");
    const auto version = root.integer("clustersim_calibration");
    if (version != 1 && version != kCalibrationVersion)
        root.fail("clustersim_calibration", "version " + std::to_string(version) +
                                                " is not supported; this clustersim reads "
                                                "versions 1 and " +
                                                std::to_string(kCalibrationVersion));
    CalibrationFile cal;
    cal.gpu_model = root.string_or("gpu_model", "");
    if (root.has("sources")) {
        const YAML::Node s = root.value("sources");
        if (!s.IsSequence()) root.fail("sources", "expected a list of file names");
        for (const auto& item : s) {
            if (!item.IsScalar()) root.fail("sources", "expected a list of file names");
            cal.sources.push_back(item.Scalar());
        }
    }
    if (auto c = root.map_opt("compute")) parse_compute_constants(*c, doc.display_path, cal);
    if (version >= 2) {
        if (auto n = root.map_opt("network")) parse_network_constants(*n, cal);
    }
    root.finish();
    return cal;
}

CalibrationFile load_calibration(const std::filesystem::path& path) {
    return parse_calibration(config::load_document(path));
}

std::string calibration_yaml(const CalibrationFile& cal, const std::vector<std::string>& header) {
    std::ostringstream out;
    for (const auto& line : header)
        out << (line.empty() ? "#" : "# " + line) << "\n";
    out << "clustersim_calibration: " << kCalibrationVersion << "\n";
    if (!cal.gpu_model.empty()) out << "gpu_model: " << cal.gpu_model << "\n";
    out << "sources:\n";
    for (const auto& s : cal.sources)
        out << "  - \"" << s << "\"\n";
    const bool compute = cal.has_compute() || cal.network.empty();
    if (compute) out << "compute:\n";
    if (cal.gemm)
        out << "  gemm: {peak_fraction: " << number_text(cal.gemm->peak_fraction)
            << ", half_dim: " << number_text(cal.gemm->half_dim)
            << ", exponent: " << number_text(cal.gemm->exponent) << "}\n";
    bool any = false;
    for (const auto& k : kMemKindNames) {
        const auto& v = cal.hbm_fractions[static_cast<std::size_t>(k.value)];
        if (!v) continue;
        if (!any) out << "  hbm_fractions:\n";
        any = true;
        out << "    " << k.name << ": " << number_text(*v) << "\n";
    }
    if (cal.attention_forward || cal.attention_backward) {
        out << "  attention: {";
        if (cal.attention_forward) out << "forward: " << number_text(*cal.attention_forward);
        if (cal.attention_forward && cal.attention_backward) out << ", ";
        if (cal.attention_backward) out << "backward: " << number_text(*cal.attention_backward);
        out << "}\n";
    }
    if (cal.grouped_gemm)
        out << "  grouped_gemm: {scale: " << number_text(*cal.grouped_gemm) << "}\n";
    if (cal.residual) out << "  residual: " << number_text(*cal.residual) << "\n";
    if (cal.launch_overhead)
        out << "  launch_overhead: " << time_text(*cal.launch_overhead) << "\n";
    if (cal.host_launch) out << "  host: {launch: " << time_text(*cal.host_launch) << "}\n";
    if (compute && !cal.has_compute()) out << "  {}\n";
    if (!cal.network.empty()) {
        out << "network:\n";
        for (std::size_t i = 0; i < cal.network.size(); ++i) {
            const auto& k = cal.network[i];
            if (i == 0 || cal.network[i - 1].op != k.op)
                out << "  " << network::collective_name(k.op) << ":\n";
            out << "    " << topology::link_kind_name(k.link)
                << ": {efficiency: " << number_text(k.efficiency)
                << ", latency: " << time_text(k.latency)
                << ", protocol_latency: " << number_text(k.protocol_latency) << "}\n";
        }
    }
    return out.str();
}

void apply_network_calibration(const CalibrationFile& cal, network::NetworkConfig& config) {
    for (const auto& k : cal.network) {
        config.op_efficiency[static_cast<int>(k.op)][static_cast<int>(k.link)] = k.efficiency;
        config.op_latency[static_cast<int>(k.op)][static_cast<int>(k.link)] = k.latency;
        config.op_protocol_latency[static_cast<int>(k.op)][static_cast<int>(k.link)] =
            k.protocol_latency;
    }
}

void apply_calibration(const CalibrationFile& cal, RooflineCompute& roofline, HostModel& host) {
    if (cal.gemm) roofline.gemm_curve = cal.gemm;
    for (std::size_t i = 0; i < kMemKindCount; ++i)
        if (cal.hbm_fractions[i]) roofline.hbm_fractions[i] = *cal.hbm_fractions[i];
    if (cal.attention_forward) roofline.attention_forward_scale = *cal.attention_forward;
    if (cal.attention_backward) roofline.attention_backward_scale = *cal.attention_backward;
    if (cal.grouped_gemm) roofline.grouped_gemm_scale = *cal.grouped_gemm;
    if (cal.residual) roofline.residual = *cal.residual;
    if (cal.launch_overhead) roofline.launch_overhead = *cal.launch_overhead;
    if (cal.host_launch && host.enabled) host.launch = *cal.host_launch;
}

}  // namespace cs::workload
