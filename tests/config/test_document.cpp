#include <doctest/doctest.h>

#include "../error_of.hpp"

#include <functional>

#include "config/document.hpp"

using namespace cs;
using namespace cs::config;

namespace {
using cs::test::error_of;
}  // namespace

TEST_CASE("strict reader: values, units and unknown keys with file:line:column") {
    auto doc = parse_document("a: 3\nb: 1.5us\nc: {d: 25GB/s}\ntypo: 1\n", "x.yaml");
    Reader r = root_reader(doc);
    CHECK(r.integer("a") == 3);
    CHECK(r.time("b") == Time::ns(1500));
    Reader c = r.map("c");
    CHECK(c.bandwidth("d").bytes_per_s == doctest::Approx(25e9));
    c.finish();
    // 'typo' is on line 4, column 1.
    CHECK(error_of([&] { r.finish(); }) ==
          "x.yaml:4:1: unknown key 'typo'; accepted keys here: a, b or c");
}

TEST_CASE("missing units and wrong types are named") {
    auto doc = parse_document("lat: 5\nbw: fast\nn: -2\n", "t.yaml");
    Reader r = root_reader(doc);
    CHECK(error_of([&] { r.time("lat"); }).find("t.yaml:1:6: 'lat': missing unit in \"5\"") == 0);
    CHECK(error_of([&] { r.bandwidth("bw"); }).find("t.yaml:2:5: 'bw': cannot read") == 0);
    CHECK(error_of([&] { r.count("n"); }) == "t.yaml:3:4: 'n': must be at least 1, found -2");
}

TEST_CASE("bad YAML reports the parser's position") {
    CHECK(error_of([] { parse_document("a: [1, 2\n", "bad.yaml"); }).rfind("bad.yaml:", 0) == 0);
    CHECK(error_of([] {
              parse_document("- 1\n- 2\n", "list.yaml");
          }).find("list.yaml:1:1: expected a YAML mapping") == 0);
}

TEST_CASE("--set overrides create and replace keys and are named in errors") {
    auto doc = parse_document("p: {tp: 1}\n", "e.yaml");
    apply_override(doc, "p.tp", "4");
    apply_override(doc, "q.r", "x");
    Reader r = root_reader(doc);
    CHECK(r.map("p").integer("tp") == 4);
    CHECK(r.map("q").string("r") == "x");
    apply_override(doc, "p.tp", "many");
    CHECK(error_of([&] { root_reader(doc).map("p").integer("tp"); }) ==
          "--set p.tp=many: 'p.tp': expected a whole number, found \"many\"");
    CHECK(error_of([&] { apply_override(doc, "p.tp.x", "1"); }).find("holds a single value") !=
          std::string::npos);
}
