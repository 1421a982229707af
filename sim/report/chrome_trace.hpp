// The Chrome JSON trace format (what ui.perfetto.dev and chrome://tracing open): one document
// {"displayTimeUnit": "ns", "traceEvents": [...], "metadata": {...}}, streamed event by event.
//
// Mapping of the TraceSink model: a process is a JSON process (pid), a slice track is a thread
// (tid = its uuid, named "<group> <track>", sorted by group then track rank), a slice is a complete
// event ("X") followed by its children, flows are v1 flow events ("s" / "t" / "f" with bp "e")
// placed at the start of the slice they bind to and written right after it, so they bind to that
// slice and not to its children; counters are "C" events of their process, instants "i" events
// on their thread. Timestamps are microseconds with six decimals, printed from the integer
// picoseconds, so the output is byte-identical across runs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <unordered_map>

#include "core/atomic_file.hpp"
#include "report/trace_sink.hpp"

namespace cs::report {

class ChromeJsonSink final : public TraceSink {
  public:
    explicit ChromeJsonSink(const std::filesystem::path& path, OutputSet* outputs = nullptr);
    void process(std::uint64_t uuid, int pid, const std::string& name) override;
    void group(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
               int rank) override;
    void track(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
               int rank) override;
    void counter_track(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
                       const std::string& unit, int rank) override;
    void slice(const TraceSlice& slice, const std::vector<TraceSlice>& children) override;
    void instant(std::uint64_t track, Time at, const std::string& name,
                 const TraceArgs& args) override;
    void counter(std::uint64_t track, Time at, double value) override;
    void finish(const TraceArgs& metadata) override;

  private:
    struct Track {
        int pid = 0;
        std::string name;  // group prefix for groups, full name for tracks, counter name
        std::string unit;
        int rank = 0;  // order among siblings
    };
    void begin_event();
    void complete(const TraceSlice& s, int pid);
    const Track& find(std::uint64_t uuid) const;

    AtomicFile file_;
    std::ostream& out_;
    std::unordered_map<std::uint64_t, Track> tracks_;
    std::string buf_;  // pending output, written out in blocks
    bool first_ = true;
};

// "12.345678" (microseconds) from picoseconds, exactly.
std::string trace_timestamp(Time t);
// JSON string literal contents: quotes, backslashes and control characters escaped.
std::string json_escape(const std::string& s);
// Shortest decimal that reads back to the same double; "null" for non-finite values.
std::string json_number(double v);

}  // namespace cs::report
