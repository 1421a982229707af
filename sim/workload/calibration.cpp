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

}  // namespace

CalibrationFile parse_calibration(const config::Document& doc) {
    const config::Reader root = config::root_reader(doc);
    if (!root.has("clustersim_calibration"))
        root.fail_here("not a clustersim calibration file: missing `clustersim_calibration: " +
                       std::to_string(kCalibrationVersion) +
                       "` (write one with clustersim calibrate)");
    const auto version = root.integer("clustersim_calibration");
    if (version != kCalibrationVersion)
        root.fail("clustersim_calibration", "version " + std::to_string(version) +
                                                " is not supported; this clustersim reads "
                                                "version " +
                                                std::to_string(kCalibrationVersion));
    CalibrationFile cal;
    cal.gpu_model = root.string("gpu_model");
    if (root.has("sources")) {
        const YAML::Node s = root.value("sources");
        if (!s.IsSequence()) root.fail("sources", "expected a list of file names");
        for (const auto& item : s) {
            if (!item.IsScalar()) root.fail("sources", "expected a list of file names");
            cal.sources.push_back(item.Scalar());
        }
    }
    if (auto c = root.map_opt("compute")) {
        if (auto g = c->map_opt("gemm")) {
            topology::GemmCurve curve;
            curve.peak_fraction = fraction(*g, "peak_fraction", 0, 1,
                                           "the best 16-bit GEMM's fraction of the bf16 peak");
            curve.half_dim = g->number("half_dim");
            if (!(curve.half_dim > 0 && curve.half_dim < 1e6))
                g->fail("half_dim", "must be in (0, 1000000)");
            curve.exponent = g->number("exponent");
            if (!(curve.exponent >= 0.5 && curve.exponent <= 8))
                g->fail("exponent", "must be in [0.5, 8]");
            curve.source = "calibration " + doc.display_path;
            g->finish();
            cal.gemm = curve;
        }
        if (auto h = c->map_opt("hbm_fractions")) {
            for (const auto& k : kMemKindNames)
                if (h->has(std::string(k.name)))
                    cal.hbm_fractions[static_cast<std::size_t>(k.value)] =
                        fraction(*h, std::string(k.name), 0, 1,
                                 "the kind's achieved fraction of the HBM bandwidth");
            h->finish();
        }
        cal.launch_overhead = c->time_opt("launch_overhead");
        if (auto h = c->map_opt("host")) {
            cal.host_launch = h->time_opt("launch");
            h->finish();
        }
        c->finish();
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
    out << "gpu_model: " << cal.gpu_model << "\n";
    out << "sources:\n";
    for (const auto& s : cal.sources)
        out << "  - \"" << s << "\"\n";
    out << "compute:\n";
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
    if (cal.launch_overhead)
        out << "  launch_overhead: " << time_text(*cal.launch_overhead) << "\n";
    if (cal.host_launch) out << "  host: {launch: " << time_text(*cal.host_launch) << "}\n";
    if (!cal.gemm && !any && !cal.launch_overhead && !cal.host_launch) out << "  {}\n";
    return out.str();
}

void apply_calibration(const CalibrationFile& cal, RooflineCompute& roofline, HostModel& host) {
    if (cal.gemm) roofline.gemm_curve = cal.gemm;
    for (std::size_t i = 0; i < kMemKindCount; ++i)
        if (cal.hbm_fractions[i]) roofline.hbm_fractions[i] = *cal.hbm_fractions[i];
    if (cal.launch_overhead) roofline.launch_overhead = *cal.launch_overhead;
    if (cal.host_launch && host.enabled) host.launch = *cal.host_launch;
}

}  // namespace cs::workload
