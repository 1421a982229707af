// The HTML report as the front ends write it (`run --html`, `compare --html`, `sweep --html`,
// clustersim.report in Python): the report layer's page plus what only the api layer knows, the
// validation confidence of the models an experiment uses.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "fit/validate.hpp"
#include "report/html_report.hpp"
#include "workload/experiment.hpp"

namespace cs::api {

// The validation families (docs/validation.md) that test the models `spec` uses: `profile`
// compute -> the families whose mode names profile, roofline compute -> roofline; a network that
// is not ideal adds those whose mode names the network. Per family: id, title, mode, tolerance,
// absolute, cases, pass, fail, gaps, mean_abs_error, worst_error (the largest |error|, signed).
// {"note": why} when the suite cannot be found. The scores come from the file the build wrote
// next to this program (scores_path_for, `clustersim validate --scores`) when it was written by
// this same program for the bundled suite as it is now; otherwise the bundled suite is run here
// (seconds: the Table 1 iterations of Narayanan et al. are full 2,000-GPU runs). Either way the
// figures are the same.
nlohmann::ordered_json validation_confidence(const workload::ExperimentSpec& spec);
// The same from every family's scores `all` (the "families" array of a scores file): those that
// apply to `spec`, in order, with the note.
nlohmann::ordered_json validation_confidence(const workload::ExperimentSpec& spec,
                                             const nlohmann::ordered_json& all);

// Where the scores of the program at `program` live: <program's folder>/../share/clustersim/
// validation-scores.json (build/share/... for build/bin/clustersim).
std::filesystem::path scores_path_for(const std::filesystem::path& program);

// The scores file of `report` (every family of the suite folder `suite`, empty for the bundled
// one): the families as validation_confidence embeds them, with digests of the running program
// and of the suite's files, which validation_confidence compares before trusting the file.
nlohmann::ordered_json validation_scores_file(const ValidationReport& report,
                                              const std::filesystem::path& suite);

// Writes `report` to `path` through `outputs` (declared by the caller before anything ran).
void write_html(const std::filesystem::path& path, const report::HtmlReport& report,
                OutputSet* outputs);

}  // namespace cs::api
