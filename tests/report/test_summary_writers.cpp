// Output-format registries: the bundled csv summary, and a summary writer and a trace format added
// by a test the way a new output format is added to clustersim (one entry on a copy of the bundled
// registry).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/errors.hpp"
#include "report/summary_writers.hpp"
#include "report/trace_sink.hpp"

using namespace cs;
using namespace cs::report;

namespace {

Summary sample() {
    Summary s;
    s.schedule = "1f1b";
    s.iteration_time_s = 0.1;
    s.bubble_fraction = 0.25;
    s.mfu = 0.5;
    s.world_size = 16;
    s.microbatches = 8;
    s.pp = 4;
    s.dp = 4;
    return s;
}

// The toy: a Markdown table of the headline figures.
SummaryWriterEntry markdown() {
    return {"markdown", ".md", "a Markdown table", [](std::ostream& out, const Summary& s) {
                out << "| schedule | iteration_time_s | bubble_fraction |\n|---|---|---|\n| "
                    << s.schedule << " | " << s.iteration_time_s << " | " << s.bubble_fraction
                    << " |\n";
            }};
}

SummaryWriterRegistry with_markdown() {
    SummaryWriterRegistry registry = SummaryWriterRegistry::builtin();
    registry.add(markdown());
    return registry;
}

std::filesystem::path scratch(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / "clustersim-summary-writers";
    std::filesystem::create_directories(dir);
    return dir / name;
}

}  // namespace

TEST_CASE("bundled writers: json, text and csv by name and by extension") {
    const auto& builtin = SummaryWriterRegistry::builtin();
    CHECK(summary_writer("json").extension == ".json");
    CHECK(summary_writer_for("x/run.txt").name == "text");
    CHECK(summary_writer_for("run.csv").name == "csv");
    CHECK(builtin.help() == "FILE.json (json), FILE.txt (text) or FILE.csv (csv)");
    CHECK_THROWS_AS(summary_writer("markdown"), std::invalid_argument);
}

TEST_CASE("csv: one header and one row, numbers that read back to the same double") {
    std::ostringstream out;
    summary_writer("csv").write(out, sample());
    std::istringstream in(out.str());
    std::string header, row, extra;
    REQUIRE(std::getline(in, header));
    REQUIRE(std::getline(in, row));
    CHECK(!std::getline(in, extra));
    CHECK(header.rfind("schedule,iteration_time_s,bubble_fraction,", 0) == 0);
    // 0.1 has no exact double; %.17g writes 0.10000000000000001, which strtod reads back to the
    // same double. Integers are written as integers: world_size 16, microbatches 8, tp 1, pp 4.
    CHECK(row.rfind("1f1b,0.10000000000000001,0.25,", 0) == 0);
    const std::string time_field = row.substr(5, row.find(',', 5) - 5);
    CHECK(std::strtod(time_field.c_str(), nullptr) == 0.1);
    CHECK(row.find(",16,8,1,4,4,1,1,1,0") != std::string::npos);
    // The exposed-communication parts follow exposed_comm_fraction, in CommKind order.
    CHECK(header.find(",exposed_comm_fraction,exposed_tp_fraction,exposed_cp_fraction,"
                      "exposed_ep_fraction,exposed_dp_fraction,exposed_pipeline_fraction,"
                      "idle_fraction,") != std::string::npos);
}

TEST_CASE("a writer registered by a test is found by extension and writes its file") {
    const SummaryWriterRegistry registry = with_markdown();
    const auto path = scratch("run.md");
    std::filesystem::remove(path);
    const SummaryWriterEntry& writer = summary_writer_for(path, "--summary", registry);
    CHECK(writer.name == "markdown");
    write_summary_file(path, sample(), writer);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str() ==
          "| schedule | iteration_time_s | bubble_fraction |\n|---|---|---|\n| 1f1b | 0.1 | 0.25 "
          "|\n");
    std::filesystem::remove(path);
    // Only the copy knows it.
    CHECK(SummaryWriterRegistry::builtin().find("markdown") == nullptr);
    CHECK_THROWS_AS(summary_writer_for(path), ConfigError);
}

TEST_CASE("the unknown-format message lists the extensions of the registry it was given") {
    try {
        summary_writer_for("run.xml", "--summary", with_markdown());
        FAIL("no error for .xml");
    } catch (const ConfigError& e) {
        const std::string m = e.what();
        CHECK(m.find("--summary run.xml") != std::string::npos);
        CHECK(m.find("unknown summary format \".xml\"; expected a file name ending in .json "
                     "(json), .txt (text), .csv (csv) or .md (markdown)") != std::string::npos);
    }
}

TEST_CASE("registering a taken name or extension, a bad extension or no writer is refused") {
    SummaryWriterRegistry registry = with_markdown();
    CHECK_THROWS_AS(registry.add(markdown()), std::invalid_argument);
    SummaryWriterEntry e = markdown();
    e.name = "md2";
    CHECK_THROWS_AS(registry.add(e), std::invalid_argument);  // .md is taken
    e.extension = "md2";
    CHECK_THROWS_AS(registry.add(e), std::invalid_argument);  // no leading dot
    e.extension = ".md2";
    e.write = nullptr;
    CHECK_THROWS_AS(registry.add(e), std::invalid_argument);
}

namespace {

// A toy trace format: counts what the writer sends and writes the counts on finish().
class CountingSink final : public TraceSink {
  public:
    explicit CountingSink(const std::filesystem::path& path) : path_(path) {}
    void process(std::uint64_t, int, const std::string&) override { ++tracks_; }
    void group(std::uint64_t, std::uint64_t, const std::string&, int) override { ++tracks_; }
    void track(std::uint64_t, std::uint64_t, const std::string&, int) override { ++tracks_; }
    void counter_track(std::uint64_t, std::uint64_t, const std::string&, const std::string&,
                       int) override {
        ++tracks_;
    }
    void slice(const TraceSlice&, const std::vector<TraceSlice>& children) override {
        slices_ += 1 + static_cast<int>(children.size());
    }
    void instant(std::uint64_t, Time, const std::string&, const TraceArgs&) override {}
    void counter(std::uint64_t, Time, double) override {}
    void finish(const TraceArgs&) override {
        std::ofstream(path_) << tracks_ << " tracks, " << slices_ << " slices\n";
    }

  private:
    std::filesystem::path path_;
    int tracks_ = 0, slices_ = 0;
};

}  // namespace

TEST_CASE("a trace format registered by a test opens by extension; messages list it") {
    TraceFormatRegistry registry = TraceFormatRegistry::builtin();
    registry.add(
        {"counts", {".counts"}, "track and slice counts", [](const std::filesystem::path& p, cs::OutputSet*) {
             return std::unique_ptr<TraceSink>(std::make_unique<CountingSink>(p));
         }});
    CHECK(trace_format_for("t.pftrace", registry).name == "perfetto");
    CHECK(trace_format_for("t.perfetto-trace", registry).name == "perfetto");
    const auto path = scratch("t.counts");
    auto sink = make_trace_sink(path, nullptr, registry);
    // One process with one track holding a slice with two children: 2 tracks, 3 slices.
    sink->process(1, 1, "p");
    sink->track(2, 1, "t", 0);
    TraceSlice parent{2, Time::us(0), Time::us(3), "parent", {}, {}};
    TraceSlice child{2, Time::us(0), Time::us(1), "child", {}, {}};
    sink->slice(parent, {child, child});
    sink->finish({});
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    CHECK(line == "2 tracks, 3 slices");
    std::filesystem::remove(path);
    try {
        trace_format_for("t.txt", registry);
        FAIL("no error for .txt");
    } catch (const ConfigError& e) {
        CHECK(std::string(e.what()).find(
                  "expected a file name ending in .json (Chrome JSON), .pftrace (Perfetto "
                  "protobuf) or .counts (track and slice counts)") != std::string::npos);
    }
    CHECK(TraceFormatRegistry::builtin().find_extension(".counts") == nullptr);
    CHECK_THROWS_AS(
        registry.add({"again",
                      {".json"},
                      "",
                      [](const std::filesystem::path& p, cs::OutputSet*) {
                          return std::unique_ptr<TraceSink>(std::make_unique<CountingSink>(p));
                      }}),
        std::invalid_argument);
}
