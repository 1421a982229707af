// The schedules bundled with clustersim (builtin_schedules.def) and helpers their .cpp files
// share. Not a public header.
#pragma once

#include <memory>
#include <string>

#include "schedule/schedule.hpp"

namespace cs::schedule::detail {

// One factory per line of builtin_schedules.def.
#define CS_SCHEDULE(factory, name, description) std::unique_ptr<Schedule> factory();
#include "schedule/builtin_schedules.def"
#undef CS_SCHEDULE

// Empty if p, m and v are all at least 1; otherwise what is wrong, prefixed by the schedule name.
std::string check_positive(const std::string& name, const PipelineShape& shape);
// check_positive plus "exactly `chunks` chunks per device".
std::string check_fixed_chunks(const std::string& name, const PipelineShape& shape, int chunks);
// Throws SimulationError if `shape` fails schedule.check (order()'s precondition).
void require_valid(const Schedule& schedule, const PipelineShape& shape, int device);

}  // namespace cs::schedule::detail
