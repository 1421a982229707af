// Output files as the command line writes them: never clobbered, never half written, never
// left behind when the command fails (sim/core/atomic_file.hpp).
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "support.hpp"

namespace fs = std::filesystem;
using cs::test::kProfile;
using cs::test::kRoot;
using cs::test::kTwoGpus;
using cs::test::run_binary;
using cs::test::slurp;

namespace {

std::size_t entries(const fs::path& dir) {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir))
        ++n;
    return n;
}
}  // namespace

TEST_CASE("the same file given to two outputs is refused before anything runs") {
    const fs::path dir = cs::test::scratch("outputs_same");
    const std::string f = (dir / "out.json").string();
    const auto run = run_binary({"run", kProfile, "--json", f, "--trace", f});
    CHECK(run.status == 2);
    CHECK(run.err.find("--trace " + f + ": is the same file as --json " + f) != std::string::npos);
    CHECK(run.out.empty());  // refused before the summary is printed
    const auto cmp =
        run_binary({"compare", kProfile, "--schedules", "gpipe,1f1b", "--json", f, "--svg", f});
    CHECK(cmp.status == 2);
    CHECK(cmp.err.find("--svg " + f + ": is the same file as --json") != std::string::npos);
    const auto topo = run_binary({"topology", kTwoGpus, "--json", f, "--dot", f});
    CHECK(topo.status == 2);
    CHECK(topo.err.find("--dot " + f + ": is the same file as --json") != std::string::npos);
    CHECK(entries(dir) == 0);
}

TEST_CASE("a failing output fails the command with exit 2 and leaves no other output behind") {
    const fs::path dir = cs::test::scratch("outputs_fail");
    const std::string json = (dir / "s.json").string();
    // /dev/full takes the trace's open and fails its writes (ENOSPC): the summary JSON, written
    // after the trace, must not be left behind either.
    fs::create_symlink("/dev/full", dir / "full.json");
    const std::string trace = (dir / "full.json").string();
    const auto r = run_binary({"run", kProfile, "--json", json, "--trace", trace});
    CHECK(r.status == 2);
    CHECK(r.err.find("--trace " + trace + ": write failed: No space left on device") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(json));
    CHECK(entries(dir) == 1);  // only the link made above
    // The other order: the trace is fine, the JSON fails.
    const std::string good_trace = (dir / "t.json").string();
    const auto r2 = run_binary({"run", kProfile, "--json", "/dev/full", "--trace", good_trace});
    CHECK(r2.status == 2);
    CHECK(r2.err.find("--json /dev/full: write failed: No space left on device") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(good_trace));
    // A folder that does not exist is reported before anything runs, naming the option.
    const auto r3 = run_binary({"topology", kTwoGpus, "--dot", (dir / "nope" / "t.dot").string()});
    CHECK(r3.status == 2);
    CHECK(r3.err.find("--dot " + (dir / "nope" / "t.dot").string() + ": cannot write: folder") !=
          std::string::npos);
    CHECK(r3.out.empty());
}

TEST_CASE(
    "a symbolic link stays a link; a device is written through; old files are kept on failure") {
    const fs::path dir = cs::test::scratch("outputs_link");
    fs::create_directories(dir / "real");
    fs::create_symlink("real/s.json", dir / "link.json");
    const auto r = run_binary({"run", kProfile, "--json", (dir / "link.json").string()});
    REQUIRE(r.status == 0);
    CHECK(fs::is_symlink(fs::symlink_status(dir / "link.json")));
    CHECK(nlohmann::json::parse(slurp(dir / "real" / "s.json"))["schedule"] == "1f1b");
    // /dev/null stays a device (as root, a rename over it would replace it with a file).
    CHECK(run_binary({"run", kProfile, "--json", "/dev/null"}).status == 0);
    CHECK(fs::is_character_file("/dev/null"));
    // A failing run keeps the previous output as it was.
    const auto before = slurp(dir / "real" / "s.json");
    const auto bad = run_binary(
        {"run", kProfile, "--set", "parallelism.tp=3", "--json", (dir / "link.json").string()});
    CHECK(bad.status == 2);
    CHECK(slurp(dir / "real" / "s.json") == before);
    CHECK(entries(dir / "real") == 1);
}
