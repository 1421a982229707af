// Factories of the bundled duration models, for builtin_duration_models(). Not a public header.
#pragma once

#include <memory>

#include "replay/duration_model.hpp"

namespace cs::replay::detail {

std::unique_ptr<DurationModel> make_uniform(const DurationModelParams& params);

}  // namespace cs::replay::detail
