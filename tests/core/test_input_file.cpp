#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

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

TEST_CASE("read_input_file: a FIFO held open without an end waits at most idle_ms (issue 40)") {
    // The writer here is this process (a FIFO opened read-write holds a writer end without
    // blocking): it sends "key: 1" and then neither writes nor closes. That blocked for ever;
    // now the reader gives up after idle_ms (100 ms here, 5 s by default).
    const auto p = scratch("held-fifo");
    fs::remove(p);
    REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
    const int writer = ::open(p.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(writer >= 0);
    REQUIRE(::write(writer, "key: 1\n", 7) == 7);
    CHECK(error_of([&] { read_input_file(p, "held.yaml", "a file", 1 << 20, 100); }) ==
          "held.yaml: sent nothing for 100 ms and did not end (a FIFO whose writer neither "
          "writes nor closes it?); give a regular file");
    // A writer that writes again within idle_ms, then closes: everything it sent is read.
    REQUIRE(::write(writer, "a: 1\n", 5) == 5);
    std::thread later([writer] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        CHECK(::write(writer, "b: 2\n", 5) == 5);
        ::close(writer);
    });
    CHECK(read_input_file(p, "fifo", "a file", 1 << 20, 2000) == "a: 1\nb: 2\n");
    later.join();
    fs::remove(p);
}

TEST_CASE("read_input_file: a FIFO that trickles is refused after total_ms (issue 40)") {
    // A writer (this process) that sends a byte every 20 ms is never idle for idle_ms (100 ms),
    // so only the 64 MiB cap bounded it (over a year at that pace); now the reader gives up once
    // total_ms (300 ms here, 60 s by default) have passed without the end.
    const auto p = scratch("trickle-fifo");
    fs::remove(p);
    REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
    const int writer = ::open(p.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(writer >= 0);
    std::atomic<bool> stop{false};
    std::thread trickle([&] {
        while (!stop) {
            CHECK(::write(writer, " ", 1) == 1);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    });
    CHECK(error_of([&] { read_input_file(p, "slow.yaml", "a file", 1 << 20, 100, 300); }) ==
          "slow.yaml: did not end within 300 ms (a stream that trickles, a byte now and then?); "
          "give a regular file");
    stop = true;
    trickle.join();
    ::close(writer);
    fs::remove(p);
}

TEST_CASE("read_input_file: missing paths and folders") {
    CHECK(error_of([] { read_input_file("/no/such/file", "x.yaml", "a YAML file"); }) ==
          "x.yaml: no such file");
    CHECK(error_of([] { read_input_file("/", "/", "a YAML file"); }) ==
          "/: is a directory, expected a YAML file");
}

TEST_CASE("read_regular_file: what must be read to its end is a regular file (issue 40)") {
    // A FIFO whose writer never closes would block a reader that waits for the end, and
    // /dev/zero never ends: both refused before they are opened, naming the kind and the limit.
    const auto fifo = scratch("trace-fifo");
    fs::remove(fifo);
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(error_of([&] { cs::read_regular_file(fifo, "t.json", "a trace", 1 << 20); }) ==
          "t.json: is not a regular file (a FIFO): a trace is read to its end, so it must be a "
          "regular file of at most 1 MiB");
    fs::remove(fifo);
    CHECK(error_of([] { cs::read_regular_file("/dev/zero", "z.et", "an ET file", 2LL << 30); }) ==
          "z.et: is not a regular file (a character device): an ET file is read to its end, so "
          "it must be a regular file of at most 2 GiB");
    // A link to a regular file is read; its size is checked against the limit (10 bytes > 9).
    const auto p = scratch("ten-regular.txt");
    const auto link = scratch("ten-link.txt");
    std::ofstream(p) << "0123456789";
    fs::remove(link);
    fs::create_symlink(p, link);
    CHECK(cs::read_regular_file(link, "ten-link.txt", "a log") == "0123456789");
    CHECK(error_of([&] { cs::require_regular_file(link, "ten-link.txt", "a log", 9); }) ==
          "ten-link.txt: is 10 bytes, more than the 9 bytes a log may hold");
    fs::remove(link);
    fs::remove(p);
}
