#include "report/chrome_trace.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/errors.hpp"

namespace cs::report {

namespace {
// Whole nanoseconds of `ps`, rounded down (monotonic, so order and nesting survive).
std::int64_t floor_ns(std::int64_t ps) {
    return ps >= 0 ? ps / 1000 : -((-ps + 999) / 1000);
}

// Appends `ns` nanoseconds as microseconds that every reader turns back into exactly `ns`.
// Perfetto's JSON importer parses the number as a double and truncates double(us) * 1000.0; for
// about 0.6 % of values the nearest double to "u.nnn" lands just below the integer and would
// lose a nanosecond. Those values are written as the shortest decimal of the next doubles up
// until the product truncates to `ns` (e.g. "1.0050000000000001"); readers that round, or that
// read the decimal exactly and round down, also get `ns`. Everything else is "u.nnn".
void append_ns_as_us(std::string& out, std::int64_t ns) {
    char buf[40];
    if (ns > 0) {
        double d = static_cast<double>(ns) / 1000.0;
        if (static_cast<std::int64_t>(d * 1000.0) != ns) {
            while (static_cast<std::int64_t>(d * 1000.0) < ns)
                d = std::nextafter(d, std::numeric_limits<double>::infinity());
            auto r = std::to_chars(buf, buf + sizeof buf, d);
            out.append(buf, r.ptr);
            return;
        }
    }
    if (ns < 0) {
        out += '-';
        ns = -ns;
    }
    auto r = std::to_chars(buf, buf + sizeof buf, ns / 1000);
    out.append(buf, r.ptr);
    std::int64_t f = ns % 1000;
    char digits[4] = {'.', '0', '0', '0'};
    for (int i = 3; i >= 1; --i, f /= 10)
        digits[i] = static_cast<char>('0' + f % 10);
    out.append(digits, 4);
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

std::int64_t trace_ns(Time t) {
    return floor_ns(t.count_ps());
}

std::string trace_timestamp(Time t) {
    std::string s;
    append_ns_as_us(s, trace_ns(t));
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

void ChromeJsonSink::complete(const TraceSlice& s, int pid, const FlowRef* flow) {
    const std::int64_t start = trace_ns(s.start);
    begin_event();
    buf_ += "{\"ph\":\"X\",";
    append_thread(buf_, pid, s.track);
    buf_ += ",\"ts\":";
    append_ns_as_us(buf_, start);
    // The duration of the rounded interval, so that a child never ends after its parent.
    buf_ += ",\"dur\":";
    append_ns_as_us(buf_, trace_ns(s.end) - start);
    buf_ += ",\"name\":\"";
    append_escaped(buf_, s.name);
    buf_ += '"';
    if (flow) {
        buf_ += ",\"bind_id\":";
        append_int(buf_, static_cast<std::int64_t>(flow->id));
        if (flow->role != FlowRef::Role::Begin) buf_ += ",\"flow_in\":true";
        if (flow->role != FlowRef::Role::End) buf_ += ",\"flow_out\":true";
    }
    buf_ += ",\"args\":";
    append_args(buf_, s.args);
    buf_ += '}';
}

void ChromeJsonSink::slice(const TraceSlice& s, const std::vector<TraceSlice>& children) {
    const int pid = find(s.track).pid;
    complete(s, pid, s.flows.empty() ? nullptr : &s.flows.front());
    // An X event binds one flow; further ones fall back to v1 flow events, which Perfetto binds
    // to the innermost slice open at their time (the writer gives each slice at most one flow).
    for (std::size_t i = 1; i < s.flows.size(); ++i) {
        const FlowRef& f = s.flows[i];
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
        append_ns_as_us(buf_, trace_ns(s.start));
        buf_ += ",\"name\":\"dependency\",\"cat\":\"pipeline\"";
        if (f.role == FlowRef::Role::End) buf_ += ",\"bp\":\"e\"";
        buf_ += '}';
    }
    for (const auto& c : children)
        complete(c, pid, nullptr);
}

void ChromeJsonSink::instant(std::uint64_t track, Time at, const std::string& name,
                             const TraceArgs& args) {
    const int pid = find(track).pid;
    begin_event();
    buf_ += "{\"ph\":\"i\",\"s\":\"t\",";
    append_thread(buf_, pid, track);
    buf_ += ",\"ts\":";
    append_ns_as_us(buf_, trace_ns(at));
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
    append_ns_as_us(buf_, trace_ns(at));
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
