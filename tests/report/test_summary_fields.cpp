// The table of the summary's scalar fields (report/summary_fields.def) against what the summary's
// renderings write: every field in the JSON at its path with its value, every column in the CSV,
// and no scalar of the JSON that the table lacks.
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

#include "../replay/test_support.hpp"
#include "report/summary.hpp"
#include "report/summary_writers.hpp"
#include "session/run.hpp"

using namespace cs;
using report::at_path;
using report::summary_fields;

namespace {

// GPipe on two stages of one layer each, four microbatches, forward 1 us and backward 2 us per
// layer, no network cost (ideal) and one data-parallel replica.
report::Summary small_run() {
    const auto spec =
        test::profile_experiment(2, 4, 2, Time::us(1), Time::us(2), network::Fidelity::Ideal);
    api::RunOptions options;
    options.schedule = "gpipe";
    return api::run(spec, options).summary;
}

// Every scalar's dotted path in `j`, outside the hand-written sections.
void leaf_paths(const nlohmann::ordered_json& j, const std::string& prefix,
                std::set<std::string>& out) {
    for (const auto& [key, value] : j.items()) {
        if (prefix.empty()) {
            bool section = false;
            for (const auto s : report::summary_sections())
                section = section || s == key;
            if (section) continue;
        }
        // Appended piece by piece: `prefix + "." + key` trips GCC 12's -Wrestrict false
        // positive.
        std::string path = prefix;
        if (!path.empty()) path += '.';
        path += key;
        if (value.is_object())
            leaf_paths(value, path, out);
        else
            out.insert(path);
    }
}

}  // namespace

TEST_CASE("every field of the table is in a run's JSON at its path, with the run's value") {
    const auto s = small_run();
    const auto j = report::to_json(s);
    for (const auto& f : summary_fields()) {
        CAPTURE(f.path);
        const auto* at = at_path(j, f.path);
        REQUIRE(at != nullptr);
        CHECK(*at == f.value(s));
        CHECK(!f.description.empty());
        CHECK(!f.unit.empty());
    }
    // The values at some paths, derived from the run. GPipe: stage 0 runs its 4 forwards from 0
    // to 4 us; stage 1 its forwards from 1 to 5 us and its backwards from 5 to 13 us; stage 0
    // its backwards from 7 (after stage 1's first) to 15 us. The iteration: (m + pp - 1) x
    // (f + b) = 5 x 3 us = 15 us, of which each stage computes 4 x 3 = 12 us: the bubble is
    // 3 / 15 = 0.2 on both.
    CHECK(at_path(j, "schedule")->get<std::string>() == "gpipe");
    CHECK(at_path(j, "iteration_time_s")->get<double>() == Time::us(15).seconds());
    CHECK(at_path(j, "bubble_fraction")->get<double>() == doctest::Approx(0.2));
    CHECK(at_path(j, "idle_fraction")->get<double>() == doctest::Approx(0.2));
    CHECK(at_path(j, "exposed_comm_fraction")->get<double>() == 0);
    // 4 microbatches of 1 sequence of 1024 tokens in 15 us.
    CHECK(at_path(j, "tokens_per_s")->get<double>() == doctest::Approx(4 * 1024 / 15e-6));
    CHECK(at_path(j, "world_size")->get<int>() == 2);
    CHECK(at_path(j, "microbatches")->get<int>() == 4);
    CHECK(at_path(j, "parallelism.pp")->get<int>() == 2);
    CHECK(at_path(j, "parallelism.tp")->get<int>() == 1);
    CHECK(at_path(j, "parallelism.dp")->get<int>() == 1);
    CHECK(at_path(j, "memory_per_gpu_bytes.total")->get<std::int64_t>() == s.memory.total.value);
}

TEST_CASE("the JSON has no scalar the table lacks (outside the sections written by hand)") {
    auto s = small_run();
    // Every optional part present, so that nothing is missed because this run has none of it.
    s.variability.present = true;
    s.variability.clean_iteration_time_s = s.iteration_time_s;
    s.faults.present = true;
    s.goodput.present = true;
    s.fold_refused = "because";
    const auto j = report::to_json(s);
    std::set<std::string> json_paths;
    leaf_paths(j, "", json_paths);
    std::set<std::string> table_paths;
    for (const auto& f : summary_fields())
        table_paths.insert(std::string(f.path));
    CHECK(json_paths == table_paths);
    // And the sections are all the JSON's other keys.
    std::set<std::string> owned;
    for (const auto& f : summary_fields())
        owned.insert(std::string(f.path.substr(0, f.path.find('.'))));
    for (const auto section : report::summary_sections())
        owned.insert(std::string(section));
    for (const auto& [key, value] : j.items())
        CHECK_MESSAGE(owned.count(key) == 1, key);
}

TEST_CASE("the exposed_<kind>_fraction fields follow the communication kinds") {
    // exposed_by_kind[k] is written at exposed_kind_keys()[k]: set one part at a time.
    for (std::size_t k = 0; k < workload::kCommKinds; ++k) {
        report::Summary s;
        s.exposed_by_kind[k] = 0.5;
        const auto j = report::to_json(s);
        for (std::size_t i = 0; i < workload::kCommKinds; ++i)
            CHECK(j.at(report::exposed_kind_keys()[i]).get<double>() == (i == k ? 0.5 : 0));
    }
}

TEST_CASE("the CSV's header is the table's columns, its row their values") {
    const auto s = small_run();
    std::ostringstream out;
    report::summary_writer("csv").write(out, s);
    std::istringstream in(out.str());
    std::string header, row;
    REQUIRE(std::getline(in, header));
    REQUIRE(std::getline(in, row));
    std::string expected;
    for (const auto& f : summary_fields())
        if (!f.column.empty()) {
            if (!expected.empty()) expected += ',';
            expected += f.column;
        }
    CHECK(header == expected);
    // The columns in order, the ones this test can name: schedule first, memory last (the
    // worst GPU's peak, an integer).
    CHECK(header.rfind("schedule,iteration_time_s,bubble_fraction,", 0) == 0);
    CHECK(row.rfind("gpipe,", 0) == 0);
    CHECK(row.substr(row.rfind(',') + 1) == std::to_string(s.memory.total.value));
}

TEST_CASE("column_figures: the fields with a column at their paths, in the JSON's order") {
    const auto s = small_run();
    const auto figures = report::column_figures(s);
    const auto j = report::to_json(s);
    std::size_t columns = 0;
    for (const auto& f : summary_fields()) {
        CAPTURE(f.path);
        CHECK((at_path(figures, f.path) != nullptr) == !f.column.empty());
        if (!f.column.empty()) CHECK(*at_path(figures, f.path) == *at_path(j, f.path));
        columns += f.column.empty() ? 0 : 1;
    }
    CHECK(columns > 20);
    CHECK(figures.begin().key() == "schedule");
}

TEST_CASE("summary_field finds a field by its path and names a path the table lacks") {
    CHECK(report::summary_field("parallelism.tp").column == "tp");
    CHECK(report::summary_field("memory_per_gpu_bytes.total").label == "memory per GPU");
    CHECK_THROWS_WITH_AS(report::summary_field("parallelism"),
                         "summary_fields.def has no field 'parallelism'", std::out_of_range);
}

TEST_CASE("format_by_unit: each unit as the console prints it") {
    using report::format_by_unit;
    // 0.0123456 s: format_time's 4 significant digits in ms; 1.5e-12 s rounds up to 2 ps.
    CHECK(format_by_unit("s", 0.0123456) == "12.35 ms");
    CHECK(format_by_unit("s", 1.5e-12) == "2 ps");
    // 0.12345 as a percentage: 12.35% with two decimals, 12.3% with one.
    CHECK(format_by_unit("fraction", 0.12345) == "12.35%");
    CHECK(format_by_unit("fraction", 0.12345, 1) == "12.3%");
    CHECK(format_by_unit("bytes", std::int64_t{40'160'000'000}) == "40.16 GB");
    CHECK(format_by_unit("tokens/s", 103372.4) == "103372");
    CHECK(format_by_unit("TFLOP/s", 434.66) == "434.7");
    CHECK(format_by_unit("count", 64) == "64");
    CHECK(format_by_unit("text", "1f1b") == "1f1b");
}

TEST_CASE("field_text: a run's field printed by its unit") {
    const auto s = small_run();
    CHECK(report::field_text(s, "schedule") == "gpipe");
    CHECK(report::field_text(s, "parallelism.pp") == "2");
    // GPipe, p = 2 stages, m = 4 microbatches: bubble (p - 1) / (m + p - 1) = 1/5; the
    // iteration (m + p - 1)(F + B) = 5 x 3 us.
    CHECK(report::field_text(s, "bubble_fraction", 1) == "20.0%");
    CHECK(report::field_text(s, "iteration_time_s") == "15 us");
}
