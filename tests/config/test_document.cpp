#include <doctest/doctest.h>

#include "../error_of.hpp"

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <unistd.h>

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

TEST_CASE("a reader finds a key as yaml-cpp's lookup does, from its index") {
    // Reader indexes a mapping's scalar keys at its first lookup. yaml-cpp compares a key by its
    // scalar text (so 1 and "1" are the same key), skips keys that are not scalars (a sequence
    // as a key), and reads an absent key as undefined; a key read after others, the last key,
    // and a key of a nested mapping are found the same way, each at its own position.
    auto doc = parse_document("1: one\n? [x, y]\n: seq\nb: 2\nlast: {k: 4}\n", "k.yaml");
    Reader r = root_reader(doc);
    CHECK(r.string("1") == "one");
    CHECK(!r.has("x"));
    CHECK(!r.has("[x, y]"));
    CHECK(r.integer("b") == 2);
    CHECK(!r.has("absent"));
    CHECK(r.integer_or("absent", 7) == 7);
    CHECK(r.map("last").integer("k") == 4);
    CHECK(error_of([&] { r.string("missing"); }) ==
          "k.yaml:1:1: 'missing': missing; expected a string");
    CHECK(r.location("b").render() == "k.yaml:4:4");
    // An absent key reads as undefined however often it is asked (the node is made once).
    CHECK(!r.value("absent").IsDefined());
    CHECK(!root_reader(doc).value("absent").IsDefined());
    // finish(): every scalar key was asked for, but the sequence key cannot be: it is named
    // (by its empty scalar text, at its position), as when only some keys were asked for.
    CHECK(error_of([&] { r.finish(); }) ==
          "k.yaml:2:3: unknown key ''; accepted keys here: 1, x, [x, y], b, absent, last or "
          "missing");
    auto plain = parse_document("a: 1\nb: 2\n", "p.yaml");
    Reader p = root_reader(plain);
    CHECK(error_of([&] { p.finish(); }) == "p.yaml:1:1: unknown key 'a'; accepted keys here: ");
    CHECK(p.integer("a") == 1);
    CHECK(error_of([&] { p.finish(); }) == "p.yaml:2:1: unknown key 'b'; accepted keys here: a");
    CHECK(p.has("b"));
    p.finish();  // every key asked for
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

namespace {

// Twelve lines holding each kind of node a reader meets: a comment, nested mappings, a list of
// flow and block mappings, a tagged value, a flow list, a null, an anchor and its alias.
const char* const kEveryKind =
    "# a comment, as experiment files open with\n"  // line 1
    "p:\n"                                          // line 2
    "  tp: 4\n"                                     // line 3: the 4 at column 7
    "  list:\n"                                     // line 4: the key at column 3
    "    - {a: 1, b: two}\n"                        // line 5
    "    - a: 3\n"                                  // line 6
    "      b: !custom four\n"                       // line 7
    "  flow: [1, 2, 3]\n"                           // line 8: the [ at column 9
    "empty:\n"                                      // line 9
    "base: &base\n"                                 // line 10: the anchor at column 7
    "  v: 1\n"                                      // line 11
    "alias: *base\n";                               // line 12

// Walks two trees side by side and checks that they hold the same nodes (type, text, tag, style,
// mark: line and column), keys included; returns the number of nodes compared.
int check_same_tree(const YAML::Node& fresh, const YAML::Node& copy) {
    CHECK(copy.Type() == fresh.Type());
    CHECK(copy.Tag() == fresh.Tag());
    CHECK(copy.Style() == fresh.Style());
    CHECK(copy.Mark().line == fresh.Mark().line);
    CHECK(copy.Mark().column == fresh.Mark().column);
    CHECK(copy.Mark().pos == fresh.Mark().pos);
    if (fresh.IsScalar()) CHECK(copy.Scalar() == fresh.Scalar());
    REQUIRE(copy.size() == fresh.size());
    int nodes = 1;
    auto c = copy.begin();
    for (auto f = fresh.begin(); f != fresh.end(); ++f, ++c) {
        if (fresh.IsMap()) {
            nodes += check_same_tree(f->first, c->first);
            nodes += check_same_tree(f->second, c->second);
        } else {
            nodes += check_same_tree(*f, *c);
        }
    }
    return nodes;
}

}  // namespace

TEST_CASE("copy_document: every node keeps the position, tag and style a fresh parse gives") {
    const Document fresh = parse_document(kEveryKind, "k.yaml");
    const Document copy = copy_document(fresh);
    // Nodes: the root 1; p's key and mapping 2; tp 2; list's key and list 2; the flow item 1 +
    // 2 x 2; the block item 1 + 2 x 2; flow's key and list 2 + 3; empty 2; base 2 + v 2;
    // alias's key 1 and its value 1 (the base mapping, walked again) + v 2: 32.
    CHECK(check_same_tree(fresh.root, copy.root) == 32);
    CHECK(YAML::Dump(copy.root) == YAML::Dump(fresh.root));
    CHECK(copy.display_path == "k.yaml");
    // The alias is the anchored mapping itself, in the copy as in the parse, and none of the
    // copy's nodes is the original's.
    CHECK(copy.root["alias"].is(copy.root["base"]));
    CHECK_FALSE(copy.root["base"].is(fresh.root["base"]));

    // The messages a reader gives name the same file:line:column on both.
    const auto both = [&](const std::function<void(const Document&)>& read) {
        const std::string from_fresh = error_of([&] { read(fresh); });
        CHECK(error_of([&] { read(copy); }) == from_fresh);
        return from_fresh;
    };
    // A scalar value: the 4 of line 3 starts at column 7.
    CHECK(both([](const Document& d) {
              root_reader(d).map("p").time("tp");
          }).rfind("k.yaml:3:7: 'p.tp': missing unit in \"4\"", 0) == 0);
    // A key: `list` (line 4, column 3) is the first key of p no reader asked for.
    CHECK(both([](const Document& d) {
              const Reader p = root_reader(d).map("p");
              p.has("tp");
              p.finish();
          }) == "k.yaml:4:3: unknown key 'p.list'; accepted keys here: tp");
    // A nested value: `four` in the list's second mapping, after its tag `!custom` at column 10.
    CHECK(both([](const Document& d) {
              root_reader(d).map("p").list_of_maps("list")[1].integer("b");
          }) == "k.yaml:7:10: 'p.list.1.b': expected a whole number, found \"four\"");
    // A list where a mapping is expected: the [ of line 8, column 9.
    CHECK(both([](const Document& d) { root_reader(d).map("p").map("flow"); }) ==
          "k.yaml:8:9: 'p.flow': expected a mapping of keys to values, found a list");
    // A list item: the flow mapping of line 5 opens at column 7.
    CHECK(both([](const Document& d) {
              root_reader(d).map("p").list_of_maps("list")[0].fail_here("x");
          }) == "k.yaml:5:7: 'p.list.0': x");
    // A null (`empty:` with no value): yaml-cpp marks it where the next token starts, line 10
    // column 1.
    CHECK(both([](const Document& d) { root_reader(d).map("empty"); }) ==
          "k.yaml:10:1: 'empty': missing; expected a mapping of keys to values");
    // Through the alias: the mapping it names is marked where its properties start, at the
    // anchor (line 10, column 7).
    CHECK(both([](const Document& d) { root_reader(d).map("alias").fail_here("x"); }) ==
          "k.yaml:10:7: 'alias': x");
}

TEST_CASE("copy_document: overrides applied to a copy leave the original as parsed") {
    const Document original = parse_document(kEveryKind, "k.yaml");
    Document first = copy_document(original);
    apply_override(first, "p.tp", "8");
    apply_override(first, "p.list.1.a", "5");
    apply_override(first, "q.r", "new");
    // Through the alias: base and alias are one node, so base.v changes too, as it would in a
    // fresh parse.
    apply_override(first, "alias.v", "2");
    const Reader edited = root_reader(first);
    CHECK(edited.map("p").integer("tp") == 8);
    CHECK(edited.map("q").string("r") == "new");
    CHECK(edited.map("base").integer("v") == 2);
    Document fresh = parse_document(kEveryKind, "k.yaml");
    apply_override(fresh, "alias.v", "2");
    CHECK(root_reader(fresh).map("base").integer("v") == 2);

    // A second copy holds the file's values (tp 4, a 3, base.v and alias.v 1, no q), as does
    // the original.
    const Document second = copy_document(original);
    const Reader r = root_reader(second);
    CHECK(r.map("p").integer("tp") == 4);
    CHECK(r.map("p").list_of_maps("list")[1].integer("a") == 3);
    CHECK(r.map("base").integer("v") == 1);
    CHECK(r.map("alias").integer("v") == 1);
    CHECK_FALSE(r.has("q"));
    CHECK(second.overrides.empty());
    CHECK(root_reader(original).map("p").integer("tp") == 4);
    CHECK(YAML::Dump(original.root) == YAML::Dump(parse_document(kEveryKind, "k.yaml").root));
    // An error in an overridden value names the --set argument on the copy.
    apply_override(first, "p.tp", "many");
    CHECK(error_of([&] { root_reader(first).map("p").integer("tp"); }) ==
          "--set p.tp=many: 'p.tp': expected a whole number, found \"many\"");
}

TEST_CASE("DocumentCache: each file parsed once, failures kept nowhere") {
    const auto dir =
        std::filesystem::temp_directory_path() / ("cs_config_tests_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = dir / "c.yaml";
    std::ofstream(path) << "a: 1\n";
    DocumentCache cache;
    const auto first = cache.load(path);
    const auto second = cache.load(path);
    CHECK(first == second);  // the same parsed document
    CHECK(cache.parses() == 1);
    CHECK(first->display_path == path.string());
    CHECK(first->folder == dir);
    // The same text under another name is another document.
    const auto text = cache.parse("a: 1\n", "inline", ".");
    CHECK(text != first);
    CHECK(cache.parse("a: 1\n", "inline", ".") == text);
    CHECK(cache.parse("a: 2\n", "inline", ".") != text);
    CHECK(cache.parses() == 3);
    // A file that does not load fails each time with load_document's message.
    const auto missing = dir / "missing.yaml";
    const std::string message = error_of([&] { load_document(missing); });
    CHECK(message != "(no error)");
    CHECK(error_of([&] { cache.load(missing); }) == message);
    CHECK(error_of([&] { cache.load(missing); }) == message);
    CHECK(cache.parses() == 3);
    // At most kMaxEntries are kept: after that many others, the first is parsed again.
    for (std::size_t i = 0; i < DocumentCache::kMaxEntries; ++i)
        cache.parse("a: 1\n", "other " + std::to_string(i), ".");
    CHECK(cache.load(path) != first);
    CHECK(cache.parses() == 4 + DocumentCache::kMaxEntries);
    // The least recently used goes first: a use keeps a document. In a fresh cache, the file,
    // then kMaxEntries - 1 texts fill it; the file used again, one more text evicts text 0 (the
    // oldest use), not the file: the file is not parsed again, text 0 is.
    DocumentCache lru;
    const auto kept = lru.load(path);
    for (std::size_t i = 0; i + 1 < DocumentCache::kMaxEntries; ++i)
        lru.parse("a: 1\n", "text " + std::to_string(i), ".");
    CHECK(lru.load(path) == kept);
    lru.parse("a: 1\n", "one more", ".");
    CHECK(lru.parses() == DocumentCache::kMaxEntries + 1);
    CHECK(lru.load(path) == kept);
    lru.parse("a: 1\n", "text 0", ".");
    CHECK(lru.parses() == DocumentCache::kMaxEntries + 2);
    std::filesystem::remove_all(dir);
}
