// The HTML report as the front ends write it (`run --html`, `compare --html`, `sweep --html`,
// clustersim.report in Python): the report layer's page plus what only the api layer knows, the
// validation confidence of the models an experiment uses.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "report/html_report.hpp"
#include "workload/experiment.hpp"

namespace cs::api {

// The validation families (docs/validation.md) that test the models `spec` uses, scored now by
// running the bundled suite: `profile` compute -> the families whose mode names profile, roofline
// compute -> roofline; a network that is not ideal adds those whose mode names the network. Per
// family: id, title, mode, tolerance, absolute, cases, pass, fail, gaps, mean_abs_error,
// worst_error (the largest |error|, signed). {"note": why} when the suite cannot be found.
nlohmann::ordered_json validation_confidence(const workload::ExperimentSpec& spec);

// Writes `report` to `path` through `outputs` (declared by the caller before anything ran).
void write_html(const std::filesystem::path& path, const report::HtmlReport& report,
                OutputSet* outputs);

}  // namespace cs::api
