#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../error_of.hpp"
#include "core/errors.hpp"
#include "core/input_file.hpp"

namespace fs = std::filesystem;
using cs::read_input_file;
using cs::test::error_of;

namespace {
fs::path scratch(const char* name) {
    const fs::path dir =
        fs::temp_directory_path() / ("cs-input-file-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir / name;
}
}  // namespace

TEST_CASE("read_input_file: a regular file whole, within the cap") {
    const auto p = scratch("ten.txt");
    std::ofstream(p) << "0123456789";
    CHECK(read_input_file(p, "ten.txt", "a file") == "0123456789");
    // A regular file is measured before it is read: 10 bytes against a cap of 9.
    CHECK(error_of([&] { read_input_file(p, "ten.txt", "a file", 9); }) ==
          "ten.txt: is 10 bytes, more than the 9 bytes an input file may hold");
    fs::remove(p);
}

TEST_CASE("read_input_file: an endless stream stops at the cap") {
    // /dev/zero never ends: with a 1 MiB cap the error comes after reading 1 MiB, not memory.
    CHECK(error_of([] { read_input_file("/dev/zero", "/dev/zero", "a file", 1 << 20); }) ==
          "/dev/zero: holds more than the 1 MiB an input file may hold (a stream that never "
          "ends, such as /dev/zero?); give a regular file");
}

TEST_CASE("read_input_file: a FIFO without a writer reads as empty instead of blocking") {
    const auto p = scratch("fifo");
    fs::remove(p);
    REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
    CHECK(read_input_file(p, "fifo", "a file").empty());
    fs::remove(p);
}

TEST_CASE("read_input_file: missing paths and folders") {
    CHECK(error_of([] { read_input_file("/no/such/file", "x.yaml", "a YAML file"); }) ==
          "x.yaml: no such file");
    CHECK(error_of([] { read_input_file("/", "/", "a YAML file"); }) ==
          "/: is a directory, expected a YAML file");
}
