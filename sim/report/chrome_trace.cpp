#include "report/chrome_trace.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/errors.hpp"

namespace cs::report {

namespace {
// Appends "12.345678" (microseconds, six decimals) for `ps` picoseconds.
void append_timestamp(std::string& out, std::int64_t ps) {
    if (ps < 0) {
        out += '-';
        ps = -ps;
    }
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, ps / 1000000);
    out.append(buf, r.ptr);
    const std::int64_t frac = ps % 1000000;
    char digits[7] = {'.', '0', '0', '0', '0', '0', '0'};
    std::int64_t f = frac;
    for (int i = 6; i >= 1; --i, f /= 10)
        digits[i] = static_cast<char>('0' + f % 10);
    out.append(digits, 7);
}

void append_int(std::string& out, std::int64_t v) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

void append_escaped(std::string& out, const std::string& s) {
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (u < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", u);
            out += buf;
        } else {
            out += c;
        }
    }
}

void append_number(std::string& out, double v) {
    if (!std::isfinite(v)) {
        out += "null";
        return;
    }
    // Shortest decimal that reads back to the same double.
    char buf[40];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}
}  // namespace

std::string trace_timestamp(Time t) {
    std::string s;
    append_timestamp(s, t.count_ps());
    return s;
}

std::string json_escape(const std::string& s) {
    std::string out;
    append_escaped(out, s);
    return out;
}

std::string json_number(double v) {
    std::string out;
    append_number(out, v);
    return out;
}

namespace {
void append_args(std::string& out, const TraceArgs& args) {
    out += '{';
    bool first = true;
    for (const auto& a : args) {
        if (!first) out += ',';
        first = false;
        out += '"';
        append_escaped(out, a.key);
        out += "\":";
        switch (a.kind) {
            case TraceArg::Kind::Int:
                append_int(out, a.int_value);
                break;
            case TraceArg::Kind::Double:
                append_number(out, a.double_value);
                break;
            case TraceArg::Kind::String:
                out += '"';
                append_escaped(out, a.string_value);
                out += '"';
                break;
        }
    }
    out += '}';
}

// "pid":P,"tid":T
void append_thread(std::string& out, int pid, std::uint64_t tid) {
    out += "\"pid\":";
    append_int(out, pid);
    out += ",\"tid\":";
    append_int(out, static_cast<std::int64_t>(tid));
}

constexpr std::size_t kFlushBytes = 1 << 16;
}  // namespace

ChromeJsonSink::ChromeJsonSink(const std::filesystem::path& path, OutputSet* outputs)
    : file_(path, outputs), out_(file_.stream()) {
    buf_ = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
}

void ChromeJsonSink::begin_event() {
    if (buf_.size() >= kFlushBytes) {
        out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
        buf_.clear();
    }
    if (!first_) buf_ += ",\n";
    first_ = false;
}

const ChromeJsonSink::Track& ChromeJsonSink::find(std::uint64_t uuid) const {
    auto it = tracks_.find(uuid);
    if (it == tracks_.end())
        throw SimulationError("trace", "event on undeclared track " + std::to_string(uuid));
    return it->second;
}

void ChromeJsonSink::process(std::uint64_t uuid, int pid, const std::string& name) {
    tracks_[uuid] = Track{pid, "", "", 0};
    begin_event();
    buf_ += "{\"ph\":\"M\",\"pid\":";
    append_int(buf_, pid);
    buf_ += ",\"name\":\"process_name\",\"args\":{\"name\":\"";
    append_escaped(buf_, name);
    buf_ += "\"}}";
    begin_event();
    buf_ += "{\"ph\":\"M\",\"pid\":";
    append_int(buf_, pid);
    buf_ += ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":";
    append_int(buf_, pid);
    buf_ += "}}";
}

void ChromeJsonSink::group(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
                           int rank) {
    // Only the innermost group names a thread ("GPU 3" + "compute"); outer groups just nest.
    tracks_[uuid] = Track{find(parent).pid, name, "", rank};
}

void ChromeJsonSink::track(std::uint64_t uuid, std::uint64_t parent, const std::string& name,
                           int rank) {
    const Track& p = find(parent);
    Track t{p.pid, p.name.empty() ? name : p.name + " " + name, "", rank};
    begin_event();
    buf_ += "{\"ph\":\"M\",";
    append_thread(buf_, t.pid, uuid);
    buf_ += ",\"name\":\"thread_name\",\"args\":{\"name\":\"";
    append_escaped(buf_, t.name);
    buf_ += "\"}}";
    begin_event();
    buf_ += "{\"ph\":\"M\",";
    append_thread(buf_, t.pid, uuid);
    buf_ += ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":";
    // Threads sort by their group's rank (the GPU), then their own (the stream).
    append_int(buf_, static_cast<std::int64_t>(p.rank) * 4096 + rank);
    buf_ += "}}";
    tracks_[uuid] = std::move(t);
}

void ChromeJsonSink::counter_track(std::uint64_t uuid, std::uint64_t parent,
                                   const std::string& name, const std::string& unit, int) {
    tracks_[uuid] = Track{find(parent).pid, name, unit, 0};
}

void ChromeJsonSink::complete(const TraceSlice& s, int pid) {
    begin_event();
    buf_ += "{\"ph\":\"X\",";
    append_thread(buf_, pid, s.track);
    buf_ += ",\"ts\":";
    append_timestamp(buf_, s.start.count_ps());
    buf_ += ",\"dur\":";
    append_timestamp(buf_, (s.end - s.start).count_ps());
    buf_ += ",\"name\":\"";
    append_escaped(buf_, s.name);
    buf_ += "\",\"args\":";
    append_args(buf_, s.args);
    buf_ += '}';
}

void ChromeJsonSink::slice(const TraceSlice& s, const std::vector<TraceSlice>& children) {
    const int pid = find(s.track).pid;
    complete(s, pid);
    for (const auto& f : s.flows) {
        const char* ph = f.role == FlowRef::Role::Begin  ? "s"
                         : f.role == FlowRef::Role::Step ? "t"
                                                         : "f";
        begin_event();
        buf_ += "{\"ph\":\"";
        buf_ += ph;
        buf_ += "\",\"id\":";
        append_int(buf_, static_cast<std::int64_t>(f.id));
        buf_ += ',';
        append_thread(buf_, pid, s.track);
        buf_ += ",\"ts\":";
        append_timestamp(buf_, s.start.count_ps());
        buf_ += ",\"name\":\"dependency\",\"cat\":\"pipeline\"";
        if (f.role == FlowRef::Role::End) buf_ += ",\"bp\":\"e\"";
        buf_ += '}';
    }
    for (const auto& c : children)
        complete(c, pid);
}

void ChromeJsonSink::instant(std::uint64_t track, Time at, const std::string& name,
                             const TraceArgs& args) {
    const int pid = find(track).pid;
    begin_event();
    buf_ += "{\"ph\":\"i\",\"s\":\"t\",";
    append_thread(buf_, pid, track);
    buf_ += ",\"ts\":";
    append_timestamp(buf_, at.count_ps());
    buf_ += ",\"name\":\"";
    append_escaped(buf_, name);
    buf_ += "\",\"args\":";
    append_args(buf_, args);
    buf_ += '}';
}

void ChromeJsonSink::counter(std::uint64_t track, Time at, double value) {
    const Track& t = find(track);
    begin_event();
    buf_ += "{\"ph\":\"C\",\"pid\":";
    append_int(buf_, t.pid);
    buf_ += ",\"ts\":";
    append_timestamp(buf_, at.count_ps());
    buf_ += ",\"name\":\"";
    append_escaped(buf_, t.name);
    buf_ += "\",\"args\":{\"";
    append_escaped(buf_, t.unit);
    buf_ += "\":";
    append_number(buf_, value);
    buf_ += "}}";
}

void ChromeJsonSink::finish(const TraceArgs& metadata) {
    buf_ += "\n],\"metadata\":";
    append_args(buf_, metadata);
    buf_ += "}\n";
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
    file_.commit();
}

}  // namespace cs::report
