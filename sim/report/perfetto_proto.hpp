// Perfetto's native trace format: a Trace message (repeated TracePacket packet = 1) written as a
// stream of length-delimited packets, encoded by hand (varints, fixed64, length-delimited
// fields); no protobuf library. The fields used, with their numbers, are listed in
// tests/report/perfetto_subset.proto, written from Perfetto's public protos
// (protos/perfetto/trace/trace_packet.proto, track_event/*.proto, interned_data/*.proto):
//
//   TracePacket      timestamp 8, trusted_packet_sequence_id 10, track_event 11,
//                    interned_data 12, sequence_flags 13, track_descriptor 60
//   TrackDescriptor  uuid 1, name 2, process 3, parent_uuid 5, counter 8, child_ordering 11,
//                    sibling_order_rank 12
//   ProcessDescriptor pid 1, process_name 6;   CounterDescriptor unit_name 6
//   TrackEvent       debug_annotations 4, type 9, name_iid 10, track_uuid 11,
//                    double_counter_value 44, flow_ids 47 (fixed64),
//                    terminating_flow_ids 48 (fixed64)
//   DebugAnnotation  name_iid 1, int_value 4, double_value 5, string_value 6
//   InternedData     event_names 2, debug_annotation_names 3 (each: iid 1, name 2)
//
// Packet sequences: processes and groups are described on sequence 1 (packets without
// timestamps); every slice or counter track gets a sequence of its own, opened by its descriptor
// (which clears the sequence's incremental state) and holding only that track's events. The
// writer produces a track's events in time order (trace_sink.hpp), so timestamps never decrease
// within a sequence and a streaming reader needs no sorting; the sink checks it and throws
// SimulationError otherwise. Event and argument names are interned with one iid per name across
// the trace, sent on each sequence at their first use there. Timestamps are integer
// nanoseconds of the default trace clock, rounded down from picoseconds (monotonic, so order
// and nesting survive). A process is a track with a ProcessDescriptor, ranked by pid
// (sibling_order_rank); groups and slice tracks are child tracks with explicit ordering (GPU
// groups inside a node, streams inside a GPU). A process or group may hold any number of tracks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/atomic_file.hpp"
#include "report/trace_sink.hpp"

namespace cs::report {

// Appends protobuf wire-format fields to a byte string.
class ProtoBuffer {
  public:
    void varint_field(int field, std::uint64_t v);
    void sint_as_varint_field(int field, std::int64_t v);  // int32/int64 (two's complement)
    void fixed64_field(int field, std::uint64_t v);
    void double_field(int field, double v);
    void bytes_field(int field, const std::string& bytes);  // also strings and sub-messages
    void append_raw(const std::string& bytes);              // already-encoded fields
    // A bare varint (no tag): a length prefix of delimited framing, an element of a packed field.
    void append_varint(std::uint64_t v) { varint(v); }
    const std::string& data() const { return data_; }
    void clear() { data_.clear(); }

  private:
    void varint(std::uint64_t v);
    std::string data_;
};

class PerfettoProtoSink final : public TraceSink {
  public:
    explicit PerfettoProtoSink(const std::filesystem::path& path, OutputSet* outputs = nullptr);
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
    enum EventType : int { kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounter = 4 };
    static constexpr std::uint32_t kDescriptorSequence = 1;
    static constexpr std::uint64_t kSmallUuids = 1u << 20;
    // An event track (slice or counter) and its packet sequence.
    struct TrackState {
        std::uint32_t sequence = 0;
        std::uint64_t last_ns = 0;                           // timestamp of the last event written
        std::vector<char> event_names_sent, arg_names_sent;  // by iid, on this sequence
    };
    void child_track(std::uint64_t uuid, std::uint64_t parent, const std::string& name, int rank,
                     bool event_track);
    // Writes a TrackDescriptor packet: an event track's opens its own sequence, the others go
    // on the descriptor sequence.
    void write_descriptor(std::uint64_t uuid, const std::string& payload, bool event_track);
    void write_packet(const std::string& payload_fields, std::uint64_t sequence_flags,
                      std::uint32_t sequence);
    TrackState& state(std::uint64_t track);
    // Writes one TrackEvent packet; `event` holds the TrackEvent fields other than names.
    void event_packet(TrackState& track, Time at, const ProtoBuffer& event);
    std::uint64_t event_name(TrackState& track, const std::string& name);
    void add_args(TrackState& track, ProtoBuffer& event, const TraceArgs& args);
    void begin(TrackState& track, const TraceSlice& s);
    void end(TrackState& track, std::uint64_t uuid, Time at);

    AtomicFile file_;
    std::ostream& out_;
    bool descriptor_sequence_started_ = false;
    std::uint32_t next_sequence_ = kDescriptorSequence + 1;
    // Event tracks by uuid: an index into track_states_, directly for the small uuids writers
    // count up from 1, through the map for the others. Looked up once per event.
    std::vector<TrackState> track_states_;
    std::vector<std::uint32_t> small_uuid_index_;  // index + 1, 0 = not an event track
    std::unordered_map<std::uint64_t, std::uint32_t> large_uuid_index_;
    std::unordered_map<std::string, std::uint64_t> event_names_, arg_names_;
    ProtoBuffer interned_;  // InternedData entries new in the packet being built
    void flush();
    ProtoBuffer packet_;
    ProtoBuffer out_buf_;  // encoded packets not yet written out
};

}  // namespace cs::report
