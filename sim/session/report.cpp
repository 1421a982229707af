#include "session/report.hpp"

#include <cmath>

#include "fit/validate.hpp"
#include "session/run.hpp"

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
    const auto stats = family_stats(report.families, report.cases);
    auto families = nlohmann::ordered_json::array();
    for (const auto& f : report.families) {
        const bool uses_compute =
            f.mode.find(profile ? "profile" : "roofline") != std::string::npos;
        const bool uses_network = network && f.mode.find("network") != std::string::npos;
        if (!uses_compute && !uses_network) continue;
        const FamilyStats& s = stats.at(f.id);
        families.push_back({{"id", f.id},
                            {"title", f.title},
                            {"mode", f.mode},
                            {"tolerance", f.tolerance},
                            {"absolute", f.absolute},
                            {"cases", s.reproduced},
                            {"pass", s.passed},
                            {"fail", s.failed},
                            {"gaps", s.gaps},
                            {"mean_abs_error", s.mean_abs},
                            {"worst_error", s.worst}});
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
