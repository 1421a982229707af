#include "report/perfetto_proto.hpp"

#include <cstring>
#include <string>

#include "core/errors.hpp"

namespace cs::report {

namespace {
// Wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2;

// Field numbers (see the header and tests/report/perfetto_subset.proto).
namespace trace {
constexpr int kPacket = 1;
}
namespace packet {
constexpr int kTimestamp = 8, kSequenceId = 10, kTrackEvent = 11, kInternedData = 12,
              kSequenceFlags = 13, kTrackDescriptor = 60;
constexpr std::uint64_t kIncrementalStateCleared = 1, kNeedsIncrementalState = 2;
}  // namespace packet
namespace track_descriptor {
constexpr int kUuid = 1, kName = 2, kProcess = 3, kParentUuid = 5, kCounter = 8,
              kChildOrdering = 11, kSiblingOrderRank = 12;
constexpr std::uint64_t kExplicitOrdering = 3;
}  // namespace track_descriptor
namespace process_descriptor {
constexpr int kPid = 1, kProcessName = 6;
}
namespace counter_descriptor {
constexpr int kUnitName = 6;
}
namespace track_event {
constexpr int kDebugAnnotations = 4, kType = 9, kNameIid = 10, kTrackUuid = 11,
              kDoubleCounterValue = 44, kFlowIds = 47, kTerminatingFlowIds = 48;
}
namespace debug_annotation {
constexpr int kNameIid = 1, kIntValue = 4, kDoubleValue = 5, kStringValue = 6;
}
namespace interned_data {
constexpr int kEventNames = 2, kDebugAnnotationNames = 3;
}
namespace interned_string {  // EventName and DebugAnnotationName share this shape
constexpr int kIid = 1, kName = 2;
}

std::uint64_t to_ns(Time t) {
    return static_cast<std::uint64_t>(t.count_ps() / 1000);
}
}  // namespace

void ProtoBuffer::varint(std::uint64_t v) {
    // Most varints (field tags, small values, lengths) take one byte.
    if (v < 0x80) {
        data_.push_back(static_cast<char>(v));
        return;
    }
    char buf[10];
    int n = 0;
    while (v >= 0x80) {
        buf[n++] = static_cast<char>((v & 0x7f) | 0x80);
        v >>= 7;
    }
    buf[n++] = static_cast<char>(v);
    data_.append(buf, static_cast<std::size_t>(n));
}

void ProtoBuffer::varint_field(int field, std::uint64_t v) {
    varint(static_cast<std::uint64_t>(field) << 3 | kVarint);
    varint(v);
}

void ProtoBuffer::sint_as_varint_field(int field, std::int64_t v) {
    varint_field(field, static_cast<std::uint64_t>(v));
}

void ProtoBuffer::fixed64_field(int field, std::uint64_t v) {
    varint(static_cast<std::uint64_t>(field) << 3 | kFixed64);
    char buf[8];
    for (int i = 0; i < 8; ++i)
        buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    data_.append(buf, 8);
}

void ProtoBuffer::append_raw(const std::string& bytes) {
    data_ += bytes;
}

void ProtoBuffer::double_field(int field, double v) {
    std::uint64_t bits = 0;
    static_assert(sizeof bits == sizeof v);
    std::memcpy(&bits, &v, sizeof bits);
    fixed64_field(field, bits);
}

void ProtoBuffer::bytes_field(int field, const std::string& bytes) {
    varint(static_cast<std::uint64_t>(field) << 3 | kLengthDelimited);
    varint(bytes.size());
    data_ += bytes;
}

PerfettoProtoSink::PerfettoProtoSink(const std::filesystem::path& path, OutputSet* outputs)
    : file_(path, outputs), out_(file_.stream()) {}

void PerfettoProtoSink::write_packet(const std::string& payload_fields, std::uint64_t flags,
                                     std::uint32_t sequence) {
    packet_.clear();
    packet_.varint_field(packet::kSequenceId, sequence);
    if (flags != 0) packet_.varint_field(packet::kSequenceFlags, flags);
    packet_.append_raw(payload_fields);
    out_buf_.bytes_field(trace::kPacket, packet_.data());
    if (out_buf_.data().size() >= (1u << 16)) flush();
}

void PerfettoProtoSink::flush() {
    out_.write(out_buf_.data().data(), static_cast<std::streamsize>(out_buf_.data().size()));
    out_buf_.clear();
}

void PerfettoProtoSink::process(std::uint64_t uuid, int pid, const std::string& name) {
    ProtoBuffer proc, desc, payload;
    proc.sint_as_varint_field(process_descriptor::kPid, pid);
    proc.bytes_field(process_descriptor::kProcessName, name);
    desc.varint_field(track_descriptor::kUuid, uuid);
    desc.bytes_field(track_descriptor::kName, name);
    desc.bytes_field(track_descriptor::kProcess, proc.data());
    // Processes rank by pid among the root tracks, groups by their rank inside a process.
    desc.varint_field(track_descriptor::kChildOrdering, track_descriptor::kExplicitOrdering);
    desc.sint_as_varint_field(track_descriptor::kSiblingOrderRank, pid);
    payload.bytes_field(packet::kTrackDescriptor, desc.data());
    write_descriptor(uuid, payload.data(), false);
}

void PerfettoProtoSink::write_descriptor(std::uint64_t uuid, const std::string& payload,
                                         bool event_track) {
    std::uint32_t sequence = kDescriptorSequence;
    std::uint64_t flags = 0;
    if (event_track) {
        sequence = next_sequence_++;
        const auto index = static_cast<std::uint32_t>(track_states_.size());
        track_states_.push_back(TrackState{sequence, 0, {}, {}});
        if (uuid < kSmallUuids) {
            if (small_uuid_index_.size() <= uuid) small_uuid_index_.resize(uuid + 1, 0);
            small_uuid_index_[uuid] = index + 1;
        } else {
            large_uuid_index_[uuid] = index + 1;
        }
        flags = packet::kIncrementalStateCleared;
    } else if (!descriptor_sequence_started_) {
        descriptor_sequence_started_ = true;
        flags = packet::kIncrementalStateCleared;
    }
    write_packet(payload, flags, sequence);
}

PerfettoProtoSink::TrackState& PerfettoProtoSink::state(std::uint64_t track) {
    std::uint32_t index = 0;
    if (track < small_uuid_index_.size()) {
        index = small_uuid_index_[track];
    } else if (track >= kSmallUuids) {
        auto it = large_uuid_index_.find(track);
        if (it != large_uuid_index_.end()) index = it->second;
    }
    if (index == 0)
        throw SimulationError("trace", "event on undeclared track " + std::to_string(track));
    return track_states_[index - 1];
}

void PerfettoProtoSink::child_track(std::uint64_t uuid, std::uint64_t parent,
                                    const std::string& name, int rank, bool event_track) {
    ProtoBuffer desc, payload;
    desc.varint_field(track_descriptor::kUuid, uuid);
    desc.bytes_field(track_descriptor::kName, name);
    desc.varint_field(track_descriptor::kParentUuid, parent);
    desc.varint_field(track_descriptor::kChildOrdering, track_descriptor::kExplicitOrdering);
    desc.sint_as_varint_field(track_descriptor::kSiblingOrderRank, rank);
    payload.bytes_field(packet::kTrackDescriptor, desc.data());
    write_descriptor(uuid, payload.data(), event_track);
}

void PerfettoProtoSink::group(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
                              int rank) {
    child_track(uuid, parent, name, rank, false);
}

void PerfettoProtoSink::track(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
                              int rank) {
    child_track(uuid, parent, name, rank, true);
}

void PerfettoProtoSink::counter_track(std::uint64_t uuid, std::uint64_t parent,
                                      const std::string& name, const std::string& unit, int rank) {
    ProtoBuffer counter, desc, payload;
    counter.bytes_field(counter_descriptor::kUnitName, unit);
    desc.varint_field(track_descriptor::kUuid, uuid);
    desc.bytes_field(track_descriptor::kName, name);
    desc.varint_field(track_descriptor::kParentUuid, parent);
    desc.bytes_field(track_descriptor::kCounter, counter.data());
    desc.sint_as_varint_field(track_descriptor::kSiblingOrderRank, rank);
    payload.bytes_field(packet::kTrackDescriptor, desc.data());
    write_descriptor(uuid, payload.data(), true);
}

namespace {
// Marks `iid` as sent on a sequence; true if it was not yet.
bool first_use(std::vector<char>& sent, std::uint64_t iid) {
    if (sent.size() <= iid) sent.resize(iid + 1, 0);
    if (sent[iid]) return false;
    sent[iid] = 1;
    return true;
}
}  // namespace

std::uint64_t PerfettoProtoSink::event_name(TrackState& track, const std::string& name) {
    // One iid per name across the trace; each sequence receives the name on its first use there.
    auto it = event_names_.try_emplace(name, event_names_.size() + 1).first;
    if (first_use(track.event_names_sent, it->second)) {
        ProtoBuffer entry;
        entry.varint_field(interned_string::kIid, it->second);
        entry.bytes_field(interned_string::kName, name);
        interned_.bytes_field(interned_data::kEventNames, entry.data());
    }
    return it->second;
}

void PerfettoProtoSink::add_args(TrackState& track, ProtoBuffer& event, const TraceArgs& args) {
    for (const auto& a : args) {
        auto it = arg_names_.try_emplace(a.key, arg_names_.size() + 1).first;
        if (first_use(track.arg_names_sent, it->second)) {
            ProtoBuffer entry;
            entry.varint_field(interned_string::kIid, it->second);
            entry.bytes_field(interned_string::kName, a.key);
            interned_.bytes_field(interned_data::kDebugAnnotationNames, entry.data());
        }
        ProtoBuffer ann;
        ann.varint_field(debug_annotation::kNameIid, it->second);
        switch (a.kind) {
            case TraceArg::Kind::Int:
                ann.sint_as_varint_field(debug_annotation::kIntValue, a.int_value);
                break;
            case TraceArg::Kind::Double:
                ann.double_field(debug_annotation::kDoubleValue, a.double_value);
                break;
            case TraceArg::Kind::String:
                ann.bytes_field(debug_annotation::kStringValue, a.string_value);
                break;
        }
        event.bytes_field(track_event::kDebugAnnotations, ann.data());
    }
}

void PerfettoProtoSink::event_packet(TrackState& track, Time at, const ProtoBuffer& event) {
    const std::uint64_t ns = to_ns(at);
    // The sink's promise to streaming readers: time never goes backwards on a sequence.
    if (ns < track.last_ns)
        throw SimulationError("trace", "event at " + std::to_string(ns) + " ns after one at " +
                                           std::to_string(track.last_ns) +
                                           " ns on packet sequence " +
                                           std::to_string(track.sequence));
    track.last_ns = ns;
    ProtoBuffer payload;
    payload.varint_field(packet::kTimestamp, ns);
    payload.bytes_field(packet::kTrackEvent, event.data());
    if (!interned_.data().empty()) {
        payload.bytes_field(packet::kInternedData, interned_.data());
        interned_.clear();
    }
    write_packet(payload.data(), packet::kNeedsIncrementalState, track.sequence);
}

void PerfettoProtoSink::begin(TrackState& track, const TraceSlice& s) {
    ProtoBuffer event;
    event.varint_field(track_event::kType, kSliceBegin);
    event.varint_field(track_event::kTrackUuid, s.track);
    event.varint_field(track_event::kNameIid, event_name(track, s.name));
    add_args(track, event, s.args);
    for (const auto& f : s.flows)
        event.fixed64_field(
            f.role == FlowRef::Role::End ? track_event::kTerminatingFlowIds : track_event::kFlowIds,
            f.id);
    event_packet(track, s.start, event);
}

void PerfettoProtoSink::end(TrackState& track, std::uint64_t uuid, Time at) {
    ProtoBuffer event;
    event.varint_field(track_event::kType, kSliceEnd);
    event.varint_field(track_event::kTrackUuid, uuid);
    event_packet(track, at, event);
}

void PerfettoProtoSink::slice(const TraceSlice& s, const std::vector<TraceSlice>& children) {
    TrackState& track = state(s.track);
    begin(track, s);
    for (const auto& c : children) {
        begin(track, c);
        end(track, c.track, c.end);
    }
    end(track, s.track, s.end);
}

void PerfettoProtoSink::instant(std::uint64_t track, Time at, const std::string& name,
                                const TraceArgs& args) {
    TrackState& st = state(track);
    ProtoBuffer event;
    event.varint_field(track_event::kType, kInstant);
    event.varint_field(track_event::kTrackUuid, track);
    event.varint_field(track_event::kNameIid, event_name(st, name));
    add_args(st, event, args);
    event_packet(st, at, event);
}

void PerfettoProtoSink::counter(std::uint64_t track, Time at, double value) {
    ProtoBuffer event;
    event.varint_field(track_event::kType, kCounter);
    event.varint_field(track_event::kTrackUuid, track);
    event.double_field(track_event::kDoubleCounterValue, value);
    event_packet(state(track), at, event);
}

void PerfettoProtoSink::finish(const TraceArgs&) {
    // The writer already put the metadata on the "summary" instant; the protobuf format has no
    // trace-level metadata map that TrackEvent producers fill.
    flush();
    file_.commit();
}

}  // namespace cs::report
