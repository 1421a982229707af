// AtomicFile and OutputSet: outputs replace regular files atomically, follow symbolic links, write
// devices directly, refuse two outputs naming one file, and leave nothing behind on failure.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "../error_of.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"

using namespace cs;
namespace fs = std::filesystem;
using cs::test::error_of;

namespace {

fs::path scratch(const std::string& name) {
    const auto dir = fs::temp_directory_path() / ("cs_atomic_file_" + name + "_" +
                                                  std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void put(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
}

// Every entry of `dir`, by name, sorted.
std::string listing(const fs::path& dir) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
        names.insert(e.path().filename().string());
    std::string out;
    for (const auto& n : names)
        out += (out.empty() ? "" : ",") + n;
    return out;
}

}  // namespace

TEST_CASE("a regular file is replaced only on commit; a throwing writer leaves the old content") {
    const auto dir = scratch("regular");
    const auto f = dir / "out.json";
    put(f, "old");
    ::chmod(f.c_str(), 0640);
    {
        AtomicFile file(f);
        file.stream() << "new";
        CHECK(slurp(f) == "old");  // not yet committed
        file.commit();
    }
    CHECK(slurp(f) == "new");
    // The replaced file keeps its permissions (0640 given above).
    CHECK((fs::status(f).permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
    CHECK_THROWS_AS(write_file_atomically(f,
                                          [](std::ostream& out) {
                                              out << "partial";
                                              throw ConfigError("writer failed");
                                          }),
                    ConfigError);
    CHECK(slurp(f) == "new");
    CHECK(listing(dir) == "out.json");  // no temporary left behind
}

TEST_CASE("a symbolic link is followed: its target is replaced, the link stays a link") {
    const auto dir = scratch("symlink");
    fs::create_directories(dir / "real");
    put(dir / "real" / "target.json", "old");
    // A relative link resolves against the link's folder: link -> real/target.json.
    fs::create_symlink("real/target.json", dir / "link.json");
    write_file_atomically(dir / "link.json", [](std::ostream& out) { out << "new"; });
    CHECK(fs::is_symlink(fs::symlink_status(dir / "link.json")));
    CHECK(slurp(dir / "real" / "target.json") == "new");
    CHECK(listing(dir / "real") == "target.json");
    // A dangling link creates its target.
    fs::create_symlink("real/fresh.json", dir / "dangling.json");
    write_file_atomically(dir / "dangling.json", [](std::ostream& out) { out << "fresh"; });
    CHECK(fs::is_symlink(fs::symlink_status(dir / "dangling.json")));
    CHECK(slurp(dir / "real" / "fresh.json") == "fresh");
    // A cycle of links is an error, not a hang.
    fs::create_symlink("b", dir / "a");
    fs::create_symlink("a", dir / "b");
    CHECK(error_of([&] { AtomicFile file(dir / "a"); }).find("too many levels of symbolic links") !=
          std::string::npos);
}

TEST_CASE("devices are written directly; a full device is an error naming the output") {
    // /dev/null is not replaced by a regular file (it stays a character device).
    write_file_atomically("/dev/null", [](std::ostream& out) { out << "discarded"; });
    CHECK(fs::is_character_file("/dev/null"));
    OutputSet outputs;
    outputs.declare("--json", "/dev/full");
    // /dev/full accepts the open and fails every write with ENOSPC.
    const std::string e = error_of([&] {
        write_file_atomically(
            "/dev/full", [](std::ostream& out) { out << std::string(1 << 16, 'x'); }, &outputs);
    });
    CHECK(e == "--json /dev/full: write failed: No space left on device");
}

TEST_CASE("a FIFO is written through, not replaced") {
    const auto dir = scratch("fifo");
    const auto fifo = dir / "pipe";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    // The reader is a child process: opening a FIFO for writing waits for one.
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        std::ifstream in(fifo);
        std::string word;
        in >> word;
        ::_exit(word == "through" ? 0 : 1);
    }
    write_file_atomically(fifo, [](std::ostream& out) { out << "through\n"; });
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(fs::is_fifo(fifo));
}

TEST_CASE("unwritable places are ConfigErrors that name the option and path") {
    const auto dir = scratch("unwritable");
    OutputSet outputs;
    const auto missing = (dir / "no-such-folder" / "x.json").string();
    CHECK(error_of([&] { outputs.declare("--json", missing); }) ==
          "--json " + missing + ": cannot write: folder '" + (dir / "no-such-folder").string() +
              "' does not exist");
    CHECK(error_of([&] { outputs.declare("--trace", dir.string()); }) ==
          "--trace " + dir.string() + ": cannot write: is a folder");
    if (::geteuid() != 0) {  // root writes anywhere
        fs::create_directories(dir / "locked");
        ::chmod((dir / "locked").c_str(), 0500);
        CHECK(error_of([&] { outputs.declare("--json", (dir / "locked" / "x.json").string()); })
                  .find("cannot write in folder") != std::string::npos);
        ::chmod((dir / "locked").c_str(), 0700);
    }
}

TEST_CASE("two outputs naming one file are refused before anything is written") {
    const auto dir = scratch("same");
    const auto a = dir / "a.json";
    OutputSet outputs;
    outputs.declare("--json", a.string());
    // The same file by another spelling, through a link, and as a hard link.
    CHECK(error_of([&] { outputs.declare("--trace", (dir / "." / "a.json").string()); }) ==
          "--trace " + (dir / "." / "a.json").string() + ": is the same file as --json " +
              a.string() + ": give each output its own file");
    fs::create_symlink("a.json", dir / "link.json");
    CHECK(error_of([&] { outputs.declare("--svg", (dir / "link.json").string()); })
              .find("is the same file as --json") != std::string::npos);
    put(a, "x");
    fs::create_hard_link(a, dir / "hard.json");
    CHECK(error_of([&] { outputs.declare("--dot", (dir / "hard.json").string()); })
              .find("is the same file as --json") != std::string::npos);
    CHECK(error_of([&] { outputs.declare("--dot", (dir / "b.json").string()); }) == "(no error)");
}

TEST_CASE("an output set renames all its files on commit, or none") {
    const auto dir = scratch("set");
    put(dir / "a.json", "old a");
    {
        OutputSet outputs;
        outputs.declare("--json", dir / "a.json");
        outputs.declare("--trace", dir / "b.json");
        write_file_atomically(dir / "a.json", [](std::ostream& out) { out << "new a"; }, &outputs);
        // The second output fails: the first, already written, must not replace anything.
        CHECK_THROWS_AS(write_file_atomically(dir / "b.json",
                                              [](std::ostream&) { throw ConfigError("fails"); },
                                              &outputs),
                        ConfigError);
    }
    CHECK(slurp(dir / "a.json") == "old a");
    CHECK(listing(dir) == "a.json");
    {
        OutputSet outputs;
        outputs.declare("--json", dir / "a.json");
        outputs.declare("--trace", dir / "b.json");
        write_file_atomically(dir / "a.json", [](std::ostream& out) { out << "new a"; }, &outputs);
        write_file_atomically(dir / "b.json", [](std::ostream& out) { out << "new b"; }, &outputs);
        CHECK(slurp(dir / "a.json") == "old a");  // staged, not yet renamed
        outputs.commit();
    }
    CHECK(slurp(dir / "a.json") == "new a");
    CHECK(slurp(dir / "b.json") == "new b");
    CHECK(listing(dir) == "a.json,b.json");
}
