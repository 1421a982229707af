#include <doctest/doctest.h>

#include "../error_of.hpp"

#include <functional>
#include <sstream>

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

TEST_CASE("--set refuses values and keys that would silently mean something else") {
    auto doc = parse_document("p: {tp: 1}\n", "e.yaml");
    // An empty value would read as null and drop the key.
    CHECK(error_of([&] { apply_override(doc, "p.tp", ""); }) ==
          "--set p.tp=: no value after '='; give a value, or ~ to remove the key");
    // Two documents: yaml-cpp's Load would keep the first (1) and drop the second.
    CHECK(error_of([&] {
              apply_override(doc, "p.tp", "1\n---\n2");
          }).find("the value holds 2 YAML documents; give one value") != std::string::npos);
    // "p." would replace the whole mapping p by 4 (getline drops the empty last component).
    CHECK(error_of([&] { apply_override(doc, "p.", "4"); }) ==
          "--set p.=4: empty component in the key 'p.'; expected dotted names such as "
          "parallelism.tp");
    CHECK(error_of([&] { apply_override(doc, ".p", "4"); }).find("empty component") !=
          std::string::npos);
    // Found by fuzzing: yaml-cpp's LoadAll loops for ever on ",us" and Load reads it as null,
    // which would drop the key.
    CHECK(error_of([&] { apply_override(doc, "p.tp", ",us"); }) ==
          "--set p.tp=,us: the value \",us\" is not valid YAML; quote it, or give ~ to remove "
          "the key");
    // Nothing was applied: p.tp is still 1.
    CHECK(root_reader(doc).map("p").integer("tp") == 1);
}

TEST_CASE("a key given twice is an error naming both places, at any depth") {
    // 'a' first at line 1 column 1, again at line 3 column 1.
    CHECK(error_of([] { parse_document("a: 1\nb: 2\na: 3\n", "d.yaml"); }) ==
          "d.yaml:3:1: duplicate key 'a' (given at 1:1 and again at 3:1); give each key once");
    // Inside a flow mapping inside a list: "  - {x: 1, x: 2}" puts the keys at columns 6 and 12.
    CHECK(error_of([] { parse_document("l:\n  - {x: 1, x: 2}\n", "d.yaml"); }) ==
          "d.yaml:2:12: duplicate key 'x' (given at 2:6 and again at 2:12); give each key once");
    // Different keys, and equal keys in different mappings, are fine.
    CHECK(error_of([] { parse_document("a: {x: 1}\nb: {x: 1}\n", "d.yaml"); }) == "(no error)");
    // A --set value is checked too.
    auto doc = parse_document("a: 1\n", "d.yaml");
    CHECK(error_of([&] { apply_override(doc, "c", "{k: 1, k: 2}"); }) ==
          "--set c={k: 1, k: 2}: duplicate key 'k' (given at 1:2 and again at 1:8); give each key "
          "once");
}

TEST_CASE("counts that do not fit an int and integers beyond int64 are errors, never wrapped") {
    // 4294967297 = 2^32 + 1 would wrap to 1 in an int.
    auto doc = parse_document(
        "tp: 4294967297\nmax: 2147483647\nhuge: 99999999999999999999\nneg: -9223372036854775809\n",
        "i.yaml");
    Reader r = root_reader(doc);
    CHECK(error_of([&] { r.count("tp"); }) ==
          "i.yaml:1:5: 'tp': must be at most 2147483647, found 4294967297");
    CHECK(r.count("max") == 2147483647);  // INT_MAX itself fits
    CHECK(error_of([&] { r.integer("huge"); }) ==
          "i.yaml:3:7: 'huge': \"99999999999999999999\" is out of range; expected a whole number "
          "from -9223372036854775808 to 9223372036854775807");
    CHECK(error_of([&] { r.integer("neg"); }).find("is out of range") != std::string::npos);
}

TEST_CASE("non-finite numbers are errors wherever a number is read") {
    auto doc = parse_document(
        "a: .inf\nb: .nan\nc: 1e999\nd: -.inf\nt: 1e999s\nbw: 1e308TB/s\nf: 1e300PFLOPS\n",
        "n.yaml");
    Reader r = root_reader(doc);
    CHECK(error_of([&] { r.number("a"); }) ==
          "n.yaml:1:4: 'a': expected a finite number, found \".inf\"");
    CHECK(error_of([&] { r.number("b"); }) ==
          "n.yaml:2:4: 'b': expected a finite number, found \".nan\"");
    // 1e999 overflows a double to infinity.
    CHECK(error_of([&] { r.number("c"); }) ==
          "n.yaml:3:4: 'c': expected a finite number, found \"1e999\"");
    CHECK(error_of([&] { r.number("d"); }).find("expected a finite number") != std::string::npos);
    // The unit reads ("1s" would): the number is what is wrong, and the message says so.
    CHECK(error_of([&] {
              r.time("t");
          }).find("'t': \"1e999s\" is too large for a duration (at most 9e6 s, about 104 days)") !=
          std::string::npos);
    // 1e308 TB/s = 1e320 B/s: the number is finite, the bandwidth is not.
    CHECK(error_of([&] { r.bandwidth("bw"); }).find("'bw': \"1e308TB/s\" is too large") !=
          std::string::npos);
    // 1e300 PFLOPS = 1e315 FLOP/s.
    CHECK(error_of([&] { r.flop_rate("f"); }).find("'f': \"1e300PFLOPS\" is too large") !=
          std::string::npos);
}

TEST_CASE("a document whose aliases expand past ten million values is refused, not walked") {
    // Each level lists the previous one 10 times: level 8 stands for 10^8 values.
    std::ostringstream text;
    text << "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
    for (int i = 1; i <= 8; ++i) {
        text << "l" << i << ": &l" << i << " [*l" << i - 1;
        for (int k = 1; k < 10; ++k)
            text << ", *l" << i - 1;
        text << "]\n";
    }
    CHECK(error_of([&] { parse_document(text.str(), "laughs.yaml"); }) ==
          "laughs.yaml: the document expands to more than 10000000 values (aliases repeated too "
          "often)");
}
