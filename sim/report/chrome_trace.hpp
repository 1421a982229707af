// The Chrome JSON trace format (what ui.perfetto.dev and chrome://tracing open): one document
// {"displayTimeUnit": "ns", "traceEvents": [...], "metadata": {...}}, streamed event by event.
//
// Mapping of the TraceSink model: a process is a JSON process (pid), a slice track is a thread
// (tid = its uuid, named "<group> <track>", sorted by group then track rank), a slice is a complete
// event ("X") followed by its children; a flow is bound to the X event of its slice with the
// v2 fields "bind_id", "flow_in", "flow_out" (Perfetto's importer binds them to that very slice,
// never to a child that starts at the same time); counters are "C" events of their process,
// instants "i" events on their thread.
//
// Times are whole nanoseconds, rounded down from the integer picoseconds, written as
// microseconds that read back to exactly those nanoseconds (see trace_timestamp); a slice's
// "dur" is the difference of its rounded end and start, so children still nest in their parent
// and neighbours do not overlap after a reader's rounding. The output is byte-identical across
// runs.
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
    void complete(const TraceSlice& s, int pid, const FlowRef* flow);
    const Track& find(std::uint64_t uuid) const;

    AtomicFile file_;
    std::ostream& out_;
    std::unordered_map<std::uint64_t, Track> tracks_;
    std::string buf_;  // pending output, written out in blocks
    bool first_ = true;
};

// Whole nanoseconds of `t`, rounded down: the times a JSON trace holds.
std::int64_t trace_ns(Time t);
// trace_ns(t) as microseconds: "12.345", or, where the nearest double of that decimal times 1000
// would truncate to one nanosecond less, the shortest decimal of a double just above it
// ("1.0050000000000001"). Parsed as a double and multiplied by 1000, truncated or rounded, every
// output gives back trace_ns(t).
std::string trace_timestamp(Time t);
// JSON string literal contents: quotes, backslashes and control characters escaped.
std::string json_escape(const std::string& s);
// Shortest decimal that reads back to the same double; "null" for non-finite values.
std::string json_number(double v);

}  // namespace cs::report
