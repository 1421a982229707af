#include "session/report.hpp"

#include <cmath>

#include "session/run.hpp"
#include "fit/validate.hpp"

namespace cs::api {

nlohmann::ordered_json validation_confidence(const workload::ExperimentSpec& spec) {
    const bool profile = spec.compute.kind == workload::ComputeSpec::Kind::Profile;
    const bool network = spec.network.fidelity != network::Fidelity::Ideal;
    ValidationReport report;
    try {
        ValidateOptions options;
        options.run = [](const workload::ExperimentSpec& s) { return run(s).summary; };
        report = validate(options);
    } catch (const ConfigError& e) {
        return {{"note", std::string("validation suite not run: ") + e.what()}};
    }
    auto families = nlohmann::ordered_json::array();
    for (const auto& f : report.families) {
        const bool uses_compute =
            f.mode.find(profile ? "profile" : "roofline") != std::string::npos;
        const bool uses_network = network && f.mode.find("network") != std::string::npos;
        if (!uses_compute && !uses_network) continue;
        int cases = 0, pass = 0, fail = 0, gaps = 0;
        double sum = 0, worst = 0;
        for (const auto& c : report.cases) {
            if (c.family != f.id || c.status == ValidationStatus::NotReproduced) continue;
            ++cases;
            pass += c.status == ValidationStatus::Pass;
            fail += c.status == ValidationStatus::Fail;
            gaps += c.status == ValidationStatus::KnownGap;
            sum += std::abs(c.error);
            if (std::abs(c.error) > std::abs(worst)) worst = c.error;
        }
        families.push_back({{"id", f.id},
                            {"title", f.title},
                            {"mode", f.mode},
                            {"tolerance", f.tolerance},
                            {"absolute", f.absolute},
                            {"cases", cases},
                            {"pass", pass},
                            {"fail", fail},
                            {"gaps", gaps},
                            {"mean_abs_error", cases > 0 ? sum / cases : 0.0},
                            {"worst_error", worst}});
    }
    const std::string models =
        std::string(profile ? "profile" : "roofline") + " compute" +
        (network
             ? " and the " + std::string(network::fidelity_name(spec.network.fidelity)) + " network"
             : "");
    return {{"note",
             "The bundled validation suite (docs/validation.md), scored when this report "
             "was made, for the models this experiment uses: " +
                 models + "."},
            {"families", families}};
}

void write_html(const std::filesystem::path& path, const report::HtmlReport& report,
                OutputSet* outputs) {
    write_file_atomically(
        path, [&](std::ostream& out) { report::write_html_report(out, report); }, outputs);
}

}  // namespace cs::api
