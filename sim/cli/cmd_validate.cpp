// clustersim validate [DIR] [--check] [--write-doc FILE] [--scores FILE] [--only SUBSTRING]
//
// Runs the validation cases of DIR/cases.yaml (api::validate) and prints per case the inputs, the
// published or measured value, the prediction and the error, and per family the mean and worst
// error; --write-doc regenerates docs/validation.md. With --check the command exits with status 3
// when a case is outside its family's tolerance and not listed in DIR/known_gaps.txt. --scores
// writes every family's scores for the HTML reports (api::validation_scores_file; the build makes
// build/share/clustersim/validation-scores.json with it).
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/tables.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "fit/validate.hpp"
#include "ingest/inputs.hpp"
#include "session/report.hpp"
#include "session/run.hpp"

namespace cs::cli {

namespace {

// Exit status of `validate --check` when a case misses its tolerance (0 success, 1 internal
// error and 2 bad input are taken by main()).
constexpr int kValidationFailedExit = 3;

struct ValidateArgs {
    std::string dir;
    bool check = false;
    std::string write_doc;
    std::string scores;
    std::string only;
};

void run(const ValidateArgs& a) {
    // --write-doc is checked before the cases run, and may not name a file of the validation
    // folder (its cases, data, experiments), which the report would replace.
    OutputSet outputs;
    outputs.declare("--write-doc", a.write_doc);
    outputs.declare("--scores", a.scores);
    if (!a.scores.empty() && !a.only.empty())
        throw ConfigError(SourceLocation{"--scores " + a.scores},
                          "the scores file holds every family of the suite: drop --only");
    if (!a.write_doc.empty() || !a.scores.empty()) {
        namespace fs = std::filesystem;
        const fs::path dir =
            a.dir.empty() ? api::data_root() / "tests" / "validation" : fs::path(a.dir);
        std::error_code ec;
        for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
            if (it->is_regular_file(ec)) outputs.guard_input("the validation input", it->path());
    }
    api::ValidateOptions options;
    options.dir = a.dir;
    options.only = a.only;
    options.run = [](const workload::ExperimentSpec& spec) { return api::run(spec).summary; };
    options.on_case = [](const api::ValidationCase& c, const api::ValidationFamily& f) {
        print_validation_case(std::cout, c, f);
        std::cout << std::flush;
    };
    const auto report = api::validate(options);
    if (!a.only.empty() && report.cases.empty())
        throw ConfigError(SourceLocation{"--only " + a.only},
                          "no case id contains \"" + a.only +
                              "\"; the ids are the `id:` keys of the folder's cases.yaml");
    std::cout << "\n";
    print_validation_summary(std::cout, report);
    if (!a.write_doc.empty()) {
        write_validation_doc(a.write_doc, report);
        std::cout << "\nwrote " << a.write_doc << "\n";
    }
    if (!a.scores.empty()) {
        const auto doc = api::validation_scores_file(report, a.dir);
        write_file_atomically(
            a.scores, [&](std::ostream& out) { out << doc.dump(1) << "\n"; }, &outputs);
        outputs.commit();
        std::cout << "\nwrote " << a.scores << "\n";
    }
    std::cout << std::flush;
    if (a.check && report.failed)
        throw CommandExit{kValidationFailedExit,
                          "validation failed: cases outside their tolerance (exit 3)"};
}

}  // namespace

void register_validate(CLI::App& app) {
    auto args = std::make_shared<ValidateArgs>();
    auto* cmd = app.add_subcommand(
        "validate", "Compare predictions with published tables and measured microbenchmarks");
    cmd->add_option("dir", args->dir,
                    "Folder with cases.yaml (default: the bundled tests/validation)");
    cmd->add_flag("--check", args->check,
                  "Exit with status 3 when a case misses its tolerance and is not a known gap");
    cmd->add_option("--write-doc", args->write_doc,
                    "Regenerate this Markdown report (e.g. docs/validation.md), keeping the text "
                    "above its generated-section marker");
    cmd->add_option("--scores", args->scores,
                    "Write every family's scores as JSON, which run/compare --html read instead "
                    "of running the suite again (the build writes "
                    "build/share/clustersim/validation-scores.json)");
    cmd->add_option("--only", args->only, "Run only cases whose id contains this text");
    cmd->callback([args] { run(*args); });
}

}  // namespace cs::cli
