// Validation: predictions held against published tables and measured microbenchmarks. The cases
// live in DIR/cases.yaml (default: the bundled tests/validation), each simulated from its
// experiment, topology or shape; DIR/known_gaps.txt lists cases known to miss their tolerance.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "report/summary.hpp"
#include "workload/experiment.hpp"

namespace cs::api {

struct ValidationFamily {
    std::string id, title, mode;
    double tolerance = 0;
    bool absolute = false;  // error = predicted - published (else predicted / published - 1)
};

enum class ValidationStatus : std::uint8_t { Pass, Fail, KnownGap, NotReproduced };
const char* status_name(ValidationStatus s);  // "pass", "FAIL", "known gap", "not reproduced"

struct ValidationCase {
    std::string id, family, source, unit, inputs, note;
    double published = 0, predicted = 0, error = 0;
    bool fitted = false;  // a calibration row: the model was fitted on it
    ValidationStatus status = ValidationStatus::NotReproduced;
};

struct ValidateOptions {
    std::filesystem::path dir;  // empty: the bundled tests/validation
    std::string only;           // run only cases whose id contains this text
    // Called after each case is scored, in file order (lets a front end print as it goes).
    std::function<void(const ValidationCase&, const ValidationFamily&)> on_case;
    // Simulates an `experiment` case's iteration: the session's api::run (the fit layer sits
    // below the session and never runs a whole iteration itself). Required when the cases hold
    // an experiment case.
    std::function<report::Summary(const workload::ExperimentSpec&)> run;
};

struct ValidationReport {
    std::vector<ValidationFamily> families;
    std::vector<ValidationCase> cases;  // in file order
    bool failed = false;                // a case is outside its tolerance and not a known gap
};

// Throws ConfigError for a bad cases file (located, with the accepted values).
ValidationReport validate(const ValidateOptions& options);

// A value as the validation tables write it: significant digits that keep small and large values
// readable ("123.4", "12.34", "1.234", "0.1234").
std::string value_text(double v);
// A case's error as its family states it: "+1.2%" (relative), "+0.0123" (absolute); "-" for a
// case not reproduced.
std::string error_text(const ValidationCase& c, bool absolute);

// Per family: cases reproduced, passed, failed, known gaps and not reproduced; the mean |error|
// and the worst error (the largest |error|, signed) with its case.
struct FamilyStats {
    int reproduced = 0, passed = 0, failed = 0, gaps = 0, not_reproduced = 0;
    double mean_abs = 0, worst = 0;
    std::string worst_id;
};
std::map<std::string, FamilyStats> family_stats(const std::vector<ValidationFamily>& families,
                                                const std::vector<ValidationCase>& results);

}  // namespace cs::api
