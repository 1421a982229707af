// Time of the PyTorch trace reader (read_torch_trace) per event.
//   build/bin/bench_torch_trace [events] [trace.json[.gz] ...]
// Without files: writes a trace of `events` kernel events (default 2,000,000; the block of
// tools/hostile_large.py's 40 M case: ~90 bytes of JSON each) to a temporary file, reads it three
// times and prints the fastest; with files, reads each of them instead. Columns: the events and
// JSON MB read, CPU seconds, microseconds and nanoseconds per event and per byte, and the
// process's peak RSS so far.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "ingest/torch_trace.hpp"

namespace {

double cpu_s() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::filesystem::path write_trace(long events) {
    const auto path = std::filesystem::temp_directory_path() / "bench_torch_trace.json";
    std::ofstream out(path, std::ios::binary);
    std::string block;
    for (int i = 0; i < 1000; ++i)
        block += R"({"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":)" +
                 std::to_string(i) + R"(,"dur":1,"args":{"stream":7}},)";
    out << R"({"traceEvents": [)";
    for (long i = 0; i + 1000 <= events; i += 1000)
        out << block;
    out << R"({"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":0,"dur":1,)"
        << R"("args":{"stream":7}}]})";
    return path;
}

void row(const std::string& name, int repeats) {
    double best = 1e300;
    cs::api::TorchTrace t;
    for (int r = 0; r < repeats; ++r) {
        const double start = cpu_s();
        t = cs::api::read_torch_trace(name, std::int64_t{64} << 30);
        best = std::min(best, cpu_s() - start);
    }
    std::printf("%-40s %10lld %9.1f %8.2f %9.3f %7.2f %9.0f\n",
                std::filesystem::path(name).filename().string().c_str(),
                static_cast<long long>(t.events), static_cast<double>(t.bytes) / 1e6, best,
                best * 1e6 / static_cast<double>(t.events),
                best * 1e9 / static_cast<double>(t.bytes), cs::bench::peak_rss_mib());
}

}  // namespace

int main(int argc, char** argv) {
    const long events = argc > 1 ? std::atol(argv[1]) : 2'000'000;
    std::printf("%-40s %10s %9s %8s %9s %7s %9s\n", "trace", "events", "JSON MB", "CPU s",
                "us/event", "ns/byte", "peak MiB");
    if (argc > 2) {
        for (int i = 2; i < argc; ++i)
            row(argv[i], 1);
        return 0;
    }
    const auto path = write_trace(events);
    row(path.string(), 3);
    std::filesystem::remove(path);
    return 0;
}
