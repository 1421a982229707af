#include "session/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <vector>

#include "core/errors.hpp"
#include "core/hash.hpp"
#include "fit/validate.hpp"
#include "ingest/inputs.hpp"
#include "session/run.hpp"

namespace cs::api {

namespace {

namespace fs = std::filesystem;

constexpr const char* kScoresFormat = "clustersim-validation-scores";
constexpr int kScoresVersion = 1;

// A 64-bit digest of a file's bytes, 8 at a time through splitmix64's mixer (not cryptographic:
// it tells a rebuilt binary or an edited case file from the one the scores came from). 0 when
// the file cannot be read.
std::uint64_t file_digest(const fs::path& path, std::uint64_t h) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return 0;
    std::vector<char> buffer(1 << 20);
    while (in) {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        const auto n = static_cast<std::size_t>(in.gcount());
        std::size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            std::uint64_t word = 0;
            std::memcpy(&word, buffer.data() + i, 8);
            h = mix64(h ^ word);
        }
        for (; i < n; ++i)
            h = mix64(h ^ static_cast<unsigned char>(buffer[i]));
        h = mix64(h ^ n);
    }
    return h;
}

// The running program (clustersim, or the interpreter that loaded the Python module).
fs::path self_path() {
    std::error_code ec;
    auto p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path{} : p;
}

// Every regular file the suite reads, in path order, names and bytes: the suite folder, and the
// bundled topologies and models its experiments name (topologies/, workloads/models/).
std::uint64_t suite_digest(const fs::path& suite) {
    std::uint64_t h = kFnv1aBasis;
    for (const fs::path& dir :
         {suite, data_root() / "topologies", data_root() / "workloads" / "models"}) {
        std::vector<fs::path> files;
        std::error_code ec;
        for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
            if (it->is_regular_file(ec)) files.push_back(it->path());
        std::sort(files.begin(), files.end());
        h = fnv1a(dir.filename().generic_string(), h);
        for (const auto& f : files) {
            h = fnv1a(fs::relative(f, dir, ec).generic_string(), h);
            h = file_digest(f, h);
        }
    }
    return h;
}

fs::path bundled_suite() {
    return data_root() / "tests" / "validation";
}

// Whether a family tests a model `spec` uses (see validation_confidence).
bool family_applies(const std::string& mode, const workload::ExperimentSpec& spec) {
    const bool profile = spec.compute.kind == workload::ComputeSpec::Kind::Profile;
    const bool network = spec.network.fidelity != network::Fidelity::Ideal;
    return mode.find(profile ? "profile" : "roofline") != std::string::npos ||
           (network && mode.find("network") != std::string::npos);
}

nlohmann::ordered_json family_scores(const ValidationReport& report) {
    const auto stats = family_stats(report.families, report.cases);
    auto families = nlohmann::ordered_json::array();
    for (const auto& f : report.families) {
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
    return families;
}

// The families of a scores file written by this very program for the bundled suite as it is
// now; none otherwise (another build, an edited suite, no file, a file that does not parse).
std::optional<nlohmann::ordered_json> built_scores() {
    const fs::path exe = self_path();
    if (exe.empty()) return std::nullopt;
    const fs::path file = scores_path_for(exe);
    std::error_code ec;
    if (!fs::is_regular_file(file, ec) || fs::file_size(file, ec) > (16u << 20))
        return std::nullopt;
    std::ifstream in(file, std::ios::binary);
    const auto doc = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object() || doc.value("format", "") != kScoresFormat ||
        doc.value("version", 0) != kScoresVersion || !doc.contains("families") ||
        !doc["families"].is_array())
        return std::nullopt;
    if (doc.value("program_digest", std::string()) != std::to_string(file_digest(exe, 0)) ||
        doc.value("suite_digest", std::string()) != std::to_string(suite_digest(bundled_suite())))
        return std::nullopt;
    return doc["families"];
}

}  // namespace

fs::path scores_path_for(const fs::path& program) {
    return program.parent_path().parent_path() / "share" / "clustersim" / "validation-scores.json";
}

nlohmann::ordered_json validation_scores_file(const ValidationReport& report,
                                              const fs::path& suite) {
    const fs::path exe = self_path();
    nlohmann::ordered_json doc;
    doc["format"] = kScoresFormat;
    doc["version"] = kScoresVersion;
    doc["program_digest"] = std::to_string(exe.empty() ? 0 : file_digest(exe, 0));
    doc["suite_digest"] = std::to_string(suite_digest(suite.empty() ? bundled_suite() : suite));
    doc["families"] = family_scores(report);
    return doc;
}

nlohmann::ordered_json validation_confidence(const workload::ExperimentSpec& spec,
                                             const nlohmann::ordered_json& all) {
    auto families = nlohmann::ordered_json::array();
    for (const auto& f : all)
        if (family_applies(f.at("mode").get<std::string>(), spec)) families.push_back(f);
    const bool profile = spec.compute.kind == workload::ComputeSpec::Kind::Profile;
    const bool network = spec.network.fidelity != network::Fidelity::Ideal;
    const std::string models =
        std::string(profile ? "profile" : "roofline") + " compute" +
        (network
             ? " and the " + std::string(network::fidelity_name(spec.network.fidelity)) + " network"
             : "");
    return {{"note",
             "The bundled validation suite (docs/validation.md), scored for the models this "
             "experiment uses: " +
                 models + "."},
            {"families", families}};
}

nlohmann::ordered_json validation_confidence(const workload::ExperimentSpec& spec) {
    if (auto built = built_scores()) return validation_confidence(spec, *built);
    nlohmann::ordered_json all;
    try {
        ValidateOptions options;
        options.run = [](const workload::ExperimentSpec& s) { return run(s).summary; };
        all = family_scores(validate(options));
    } catch (const ConfigError& e) {
        return {{"note", std::string("validation suite not run: ") + e.what()}};
    }
    return validation_confidence(spec, all);
}

void write_html(const std::filesystem::path& path, const report::HtmlReport& report,
                OutputSet* outputs) {
    write_file_atomically(
        path, [&](std::ostream& out) { report::write_html_report(out, report); }, outputs);
}

}  // namespace cs::api
