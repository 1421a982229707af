// The hand-written protobuf encoding and .pftrace traces decoded with protoc against
// tests/report/perfetto_subset.proto: tracks, slices, flows, counters, interning.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "core/errors.hpp"
#include "report/perfetto_proto.hpp"
#include "trace_test_support.hpp"

using namespace cs;

namespace {
std::string hex(const std::string& bytes) {
    std::string out;
    char buf[4];
    for (unsigned char c : bytes) {
        std::snprintf(buf, sizeof buf, "%02x", c);
        out += buf;
    }
    return out;
}
}  // namespace

TEST_CASE("protobuf wire encoding") {
    report::ProtoBuffer b;
    // Field 1, varint 300: key (1 << 3 | 0) = 0x08; 300 = 0b10_0101100 -> 0xac 0x02.
    b.varint_field(1, 300);
    CHECK(hex(b.data()) == "08ac02");
    b.clear();
    // Field 47, fixed64 1: key 47 << 3 | 1 = 377 -> varint 0xf9 0x02; then 8 little-endian bytes.
    b.fixed64_field(47, 1);
    CHECK(hex(b.data()) == "f9020100000000000000");
    b.clear();
    // Field 2, string "hi": key 2 << 3 | 2 = 0x12, length 2, bytes.
    b.bytes_field(2, "hi");
    CHECK(hex(b.data()) == "12026869");
    b.clear();
    // int64 -1 as a varint: 64 one-bits in 7-bit groups = nine 0xff and a final 0x01.
    b.sint_as_varint_field(4, -1);
    CHECK(hex(b.data()) == "20ffffffffffffffffff01");
    b.clear();
    // Field 44, double 1.0 = 0x3ff0000000000000: key 44 << 3 | 1 = 353 -> 0xe1 0x02.
    b.double_field(44, 1.0);
    CHECK(hex(b.data()) == "e102000000000000f03f");
}

TEST_CASE("pftrace of 16 GPUs decodes with protoc: tracks, slices, flows, counters") {
    if (!test::have_protoc()) {
        MESSAGE(
            "SKIPPED: protoc not found (Debian package protobuf-compiler); the .pftrace "
            "decoding checks need it");
        return;
    }
    const auto path = test::trace_dir() / "sixteen.pftrace";
    test::run_fixture(path);
    const auto packets = test::decode_pftrace(path);
    REQUIRE(!packets.empty());
    // Per packet sequence: names interned on it, the timestamp of its last packet.
    struct Sequence {
        std::map<std::uint64_t, std::string> names, arg_names;
        std::uint64_t last_ts = 0;
    };
    std::map<std::string, Sequence> sequences;
    struct Track {
        std::string name;
        bool counter = false;
        std::uint64_t parent = 0;
        int depth = 0;
        std::uint64_t last_ts = 0;
        std::vector<std::string> open;
    };
    std::map<std::uint64_t, Track> tracks;
    std::map<std::string, int> begins;  // by event name
    std::map<std::uint64_t, int> flow_marks, flow_ends;
    std::map<std::uint64_t, std::uint64_t> flow_last_mark_ts, flow_end_ts;
    std::size_t counters = 0, memory_counters = 0, processes = 0;
    std::set<std::string> instants;
    std::size_t summary_args = 0;

    std::size_t ranked_processes = 0;
    for (const auto& p : packets) {
        const std::string seq_id = p.field("trusted_packet_sequence_id");
        REQUIRE(!seq_id.empty());
        // The first packet of every sequence clears its incremental state
        // (SEQ_INCREMENTAL_STATE_CLEARED = 1), so a reader may start there.
        const bool first_on_sequence = sequences.count(seq_id) == 0;
        auto& seq = sequences[seq_id];
        if (first_on_sequence) CHECK((std::stoul(p.field("sequence_flags", "0")) & 1u) == 1u);
        // A streaming reader sees time go forward on each sequence: no sorting needed.
        if (p.fields.count("timestamp")) {
            const auto ts = std::stoull(p.field("timestamp"));
            CHECK_MESSAGE(ts >= seq.last_ts, "sequence " << seq_id);
            seq.last_ts = ts;
        }
        auto& names = seq.names;
        auto& arg_names = seq.arg_names;
        if (const auto* in = p.message("interned_data")) {
            for (auto [a, b] = in->messages.equal_range("event_names"); a != b; ++a) {
                const auto iid = std::stoull(a->second.field("iid"));
                CHECK(names.count(iid) == 0);  // each name interned once per sequence
                names[iid] = a->second.field("name");
            }
            for (auto [a, b] = in->messages.equal_range("debug_annotation_names"); a != b; ++a)
                arg_names[std::stoull(a->second.field("iid"))] = a->second.field("name");
        }
        if (const auto* d = p.message("track_descriptor")) {
            const auto uuid = std::stoull(d->field("uuid"));
            REQUIRE(tracks.count(uuid) == 0);
            Track t;
            t.name = d->field("name");
            t.counter = d->message("counter") != nullptr;
            t.parent = std::stoull(d->field("parent_uuid", "0"));
            if (t.parent) CHECK(tracks.count(t.parent) == 1);  // parents come first
            if (d->message("process")) {
                ++processes;
                // Processes are ranked among the root tracks by pid: cluster 1, node n: n + 2.
                const std::string pid = d->message("process")->field("pid");
                if (!pid.empty() && d->field("sibling_order_rank") == pid) ++ranked_processes;
            }
            tracks[uuid] = t;
        }
        const auto* e = p.message("track_event");
        if (!e) continue;
        const auto uuid = std::stoull(e->field("track_uuid"));
        REQUIRE(tracks.count(uuid) == 1);  // declared before use
        auto& t = tracks[uuid];
        const std::uint64_t ts = std::stoull(p.field("timestamp"));
        CHECK(ts >= t.last_ts);  // monotonic per track
        t.last_ts = ts;
        const std::string type = e->field("type");
        const std::string name =
            e->fields.count("name_iid") ? names.at(std::stoull(e->field("name_iid"))) : "";
        for (auto [a, b] = e->messages.equal_range("debug_annotations"); a != b; ++a)
            CHECK(arg_names.count(std::stoull(a->second.field("name_iid"))) == 1);
        if (type == "TYPE_COUNTER") {
            CHECK(t.counter);
            const double v = std::stod(e->field("double_counter_value"));
            CHECK(v >= 0.0);
            // Link utilisation in %; the GPUs' memory tracks ("GPU g memory: ...") are in GiB.
            if (t.name.find(" memory: ") == std::string::npos) {
                CHECK(v <= 100.0 + 1e-9);
                ++counters;
            } else {
                ++memory_counters;
            }
            continue;
        }
        CHECK_FALSE(t.counter);
        if (type == "TYPE_SLICE_BEGIN") {
            ++begins[name];
            t.open.push_back(name);
        } else if (type == "TYPE_SLICE_END") {
            REQUIRE(!t.open.empty());  // never more ends than begins: no overlap on a track
            t.open.pop_back();
        } else if (type == "TYPE_INSTANT") {
            instants.insert(name);
            if (name == "summary") summary_args = e->messages.count("debug_annotations");
        }
        for (const auto& id : e->all("flow_ids")) {
            ++flow_marks[std::stoull(id)];
            flow_last_mark_ts[std::stoull(id)] = std::max(flow_last_mark_ts[std::stoull(id)], ts);
        }
        for (const auto& id : e->all("terminating_flow_ids")) {
            ++flow_ends[std::stoull(id)];
            flow_end_ts[std::stoull(id)] = ts;
        }
    }
    for (const auto& [uuid, t] : tracks)
        CHECK_MESSAGE(t.open.empty(), t.name);

    // Same closed forms as the JSON test: 64 forward and 64 backward passes, 2 layers each.
    int forwards = 0, backwards = 0;
    for (const auto& [name, n] : begins) {
        if (name.size() > 1 && name.find_first_not_of("0123456789", 1) == std::string::npos) {
            if (name[0] == 'F') forwards += n;
            if (name[0] == 'B') backwards += n;
        }
    }
    CHECK(forwards == 64);
    CHECK(backwards == 64);
    CHECK(begins["layer"] == 256);
    CHECK(begins["optimizer step"] == 16);
    // A flow follows a microbatch through the pipeline, per replica, TP rank and direction:
    // 4 microbatches x 2 replicas x 2 TP ranks x 2 directions = 32 flows. Each crosses the 3
    // stage boundaries: 4 passes + 3 x (send + receive) = 10 slices, the last terminating it:
    // 9 flow_ids marks and 1 terminating mark (9 arrows; 32 x 9 = 288 = 96 transfers x 3).
    CHECK(flow_ends.size() == 32);
    for (const auto& [id, n] : flow_ends) {
        CHECK(n == 1);
        CHECK(flow_marks[id] == 9);
        CHECK(flow_last_mark_ts[id] <= flow_end_ts[id]);
    }
    CHECK(flow_marks.size() == 32);
    CHECK(processes == 3);  // cluster, node 0, node 1
    CHECK(ranked_processes == 3);
    CHECK(counters > 0);
    CHECK(memory_counters > 0);
    CHECK(instants == std::set<std::string>{"iteration start", "iteration end", "summary"});
    CHECK(summary_args > 10);
}

TEST_CASE("the protobuf sink refuses time going backwards on a track, not across tracks") {
    const auto path = test::trace_dir() / "order.pftrace";
    report::PerfettoProtoSink sink(path);
    sink.process(1, 2, "node 0");
    sink.track(2, 1, "compute", 0);
    sink.track(3, 1, "pp send", 1);
    // Track 2 at [5, 6] us, then track 3 at [1, 2] us: two sequences, each in order.
    sink.slice({2, Time::us(5), Time::us(6), "F0", {}, {}}, {});
    sink.slice({3, Time::us(1), Time::us(2), "send act 0", {}, {}}, {});
    // Track 2 again at [3, 4] us: before its last event (6 us) on its own sequence.
    CHECK_THROWS_AS(sink.slice({2, Time::us(3), Time::us(4), "F1", {}, {}}, {}), SimulationError);
    CHECK_THROWS_AS(sink.counter(7, Time::us(1), 1.0), SimulationError);  // undeclared track
}
