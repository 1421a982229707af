// The schedules bundled with clustersim, for the factory in schedule.cpp. Not a public header.
#pragma once

#include <memory>
#include <string>

#include "schedule/schedule.hpp"

namespace cs::schedule::detail {

std::unique_ptr<Schedule> make_gpipe();
std::unique_ptr<Schedule> make_one_f_one_b();
std::unique_ptr<Schedule> make_interleaved();
std::unique_ptr<Schedule> make_zb_h1();
std::unique_ptr<Schedule> make_zb_h2();
std::unique_ptr<Schedule> make_zb_v();
std::unique_ptr<Schedule> make_dualpipev();

// Empty if p, m and v are all at least 1; otherwise what is wrong, prefixed by the schedule name.
std::string check_positive(const std::string& name, const PipelineShape& shape);
// check_positive plus "exactly `chunks` chunks per device".
std::string check_fixed_chunks(const std::string& name, const PipelineShape& shape, int chunks);
// Throws SimulationError if `shape` fails schedule.check (order()'s precondition).
void require_valid(const Schedule& schedule, const PipelineShape& shape, int device);

}  // namespace cs::schedule::detail
