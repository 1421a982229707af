// The format-independent side of trace writing: tracks, slices, flows, counters and instants, as
// the trace writer (trace_writer.hpp) produces them, and the registry of the sinks that encode
// them: Chrome JSON (chrome_trace.hpp) and Perfetto's protobuf TracePacket stream
// (perfetto_proto.hpp), listed in builtin_trace_formats.def.
//
// Sinks stream: every call is encoded and written at once, nothing of the trace is kept beyond
// per-track bookkeeping. A sink writes into an AtomicFile; finish() completes the document and
// renames it into place, so an aborted run leaves no file.
//
// Ordering contract (what the writer guarantees and the sinks rely on):
//   - a track is declared (process / group / track / counter_track) before its first event, and
//     its parent before it;
//   - on one slice track, slices are written in start order and never overlap; children of a
//     slice lie within it, in order, without overlapping each other;
//   - events at equal times on one track are written in the order they happen (the end of a
//     slice before the start of the next one);
//   - counter values on one counter track are written in time order, at most one per time;
//   - so every event of one track (slice starts and ends, instants, counter values) comes in
//     non-decreasing time: the protobuf sink gives each track a packet sequence of its own and
//     throws SimulationError if time goes backwards on one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/units.hpp"

namespace cs::report {

struct TraceArg {
    enum class Kind : std::uint8_t { Int, Double, String };
    std::string key;
    Kind kind = Kind::Int;
    std::int64_t int_value = 0;
    double double_value = 0;
    std::string string_value;

    static TraceArg integer(std::string key, std::int64_t v);
    static TraceArg real(std::string key, double v);
    static TraceArg text(std::string key, std::string v);
};
using TraceArgs = std::vector<TraceArg>;

// One end or step of a flow arrow attached to a slice. A flow is Begin on its first slice, Step
// on every intermediate one and End on its last; ids are unique in a trace and never reused.
struct FlowRef {
    enum class Role : std::uint8_t { Begin, Step, End };
    std::uint64_t id = 0;
    Role role = Role::Begin;
};

struct TraceSlice {
    std::uint64_t track = 0;
    Time start, end;
    std::string name;
    TraceArgs args;
    std::vector<FlowRef> flows;
};

class TraceSink {
  public:
    virtual ~TraceSink() = default;
    // A top-level group (a Perfetto process): `pid` is unique and > 0.
    virtual void process(std::uint64_t uuid, int pid, const std::string& name) = 0;
    // A group of tracks inside a process or group (a GPU), shown in `rank` order among siblings.
    virtual void group(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
                       int rank) = 0;
    // A slice track inside a process or group.
    virtual void track(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
                       int rank) = 0;
    // A counter track inside a process; `unit` is shown beside the values ("%").
    virtual void counter_track(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
                               const std::string& unit, int rank) = 0;
    // A slice and the slices nested directly inside it (same track; children carry no flows).
    virtual void slice(const TraceSlice& slice, const std::vector<TraceSlice>& children) = 0;
    virtual void instant(std::uint64_t track, Time at, const std::string& name,
                         const TraceArgs& args) = 0;
    virtual void counter(std::uint64_t track, Time at, double value) = 0;
    // Completes the document (`metadata` becomes trace-level metadata where the format has it)
    // and commits the file.
    virtual void finish(const TraceArgs& metadata) = 0;
};

// A trace file format: the row of a TraceFormatRegistry that make_trace_sink, --trace's help and
// the unknown-extension message read.
struct TraceFormatEntry {
    std::string name;                     // "chrome-json", "perfetto"
    std::vector<std::string> extensions;  // with the dot, first one preferred: {".json"}
    std::string description;              // "Chrome JSON", shown beside the extension
    // Opens the file (ConfigError if it cannot be created) and returns its sink.
    std::function<std::unique_ptr<TraceSink>(const std::filesystem::path&, OutputSet*)> open;
};

// The trace formats, chosen by file extension. builtin() is the bundled table
// (builtin_trace_formats.def), built once and immutable; tests and embedding programs copy it and
// add() to the copy.
class TraceFormatRegistry {
  public:
    TraceFormatRegistry() = default;  // empty
    static const TraceFormatRegistry& builtin();

    // Throws std::invalid_argument for an empty name, no extension, an extension without a
    // leading dot or already taken, or no `open`.
    TraceFormatRegistry& add(TraceFormatEntry entry);
    const TraceFormatEntry* find_extension(std::string_view extension) const;  // nullptr if none
    const std::vector<TraceFormatEntry>& entries() const { return entries_; }
    // "FILE.json (Chrome JSON) or FILE.pftrace (Perfetto protobuf)", for --trace's help.
    std::string help() const;

  private:
    std::vector<TraceFormatEntry> entries_;
};

// The format of `path` by its extension; throws ConfigError naming the accepted extensions.
const TraceFormatEntry& trace_format_for(
    const std::filesystem::path& path,
    const TraceFormatRegistry& registry = TraceFormatRegistry::builtin());

// Opens the file (ConfigError if it cannot be created) and returns the sink for its format.
std::unique_ptr<TraceSink> make_trace_sink(
    const std::filesystem::path& path, OutputSet* outputs = nullptr,
    const TraceFormatRegistry& registry = TraceFormatRegistry::builtin());

}  // namespace cs::report
