#include "report/chrome_trace.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/errors.hpp"

namespace cs::report {

std::string trace_timestamp(Time t) {
    const std::int64_t ps = t.count_ps();
    const char* sign = ps < 0 ? "-" : "";
    const long long a = static_cast<long long>(ps < 0 ? -ps : ps);
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s%lld.%06lld", sign, a / 1000000, a % 1000000);
    return buf;
}

std::string json_escape(const std::string& s) {
    std::string out;
    out.reserve(s.size());
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
    return out;
}

std::string json_number(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.15g", v);
    if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

namespace {
void write_args(std::ostream& out, const TraceArgs& args) {
    out << '{';
    bool first = true;
    for (const auto& a : args) {
        if (!first) out << ',';
        first = false;
        out << '"' << json_escape(a.key) << "\":";
        switch (a.kind) {
            case TraceArg::Kind::Int:
                out << a.int_value;
                break;
            case TraceArg::Kind::Double:
                out << json_number(a.double_value);
                break;
            case TraceArg::Kind::String:
                out << '"' << json_escape(a.string_value) << '"';
                break;
        }
    }
    out << '}';
}
}  // namespace

ChromeJsonSink::ChromeJsonSink(const std::filesystem::path& path)
    : file_(path), out_(file_.stream()) {
    out_ << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
}

void ChromeJsonSink::begin_event() {
    if (!first_) out_ << ",\n";
    first_ = false;
}

const ChromeJsonSink::Track& ChromeJsonSink::find(std::uint64_t uuid) const {
    auto it = tracks_.find(uuid);
    if (it == tracks_.end())
        throw SimulationError("trace", "event on undeclared track " + std::to_string(uuid));
    return it->second;
}

void ChromeJsonSink::process(std::uint64_t uuid, int pid, const std::string& name) {
    tracks_[uuid] = Track{pid, "", ""};
    begin_event();
    out_ << "{\"ph\":\"M\",\"pid\":" << pid << ",\"name\":\"process_name\",\"args\":{\"name\":\""
         << json_escape(name) << "\"}}";
    begin_event();
    out_ << "{\"ph\":\"M\",\"pid\":" << pid
         << ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":" << pid << "}}";
}

void ChromeJsonSink::group(std::uint64_t uuid, std::uint64_t parent, const std::string& name, int) {
    // Only the innermost group names a thread ("GPU 3" + "compute"); outer groups just nest.
    tracks_[uuid] = Track{find(parent).pid, name, ""};
}

void ChromeJsonSink::track(std::uint64_t uuid, std::uint64_t parent, const std::string& name, int) {
    const Track& p = find(parent);
    Track t{p.pid, p.name.empty() ? name : p.name + " " + name, ""};
    begin_event();
    out_ << "{\"ph\":\"M\",\"pid\":" << t.pid << ",\"tid\":" << uuid
         << ",\"name\":\"thread_name\",\"args\":{\"name\":\"" << json_escape(t.name) << "\"}}";
    begin_event();
    out_ << "{\"ph\":\"M\",\"pid\":" << t.pid << ",\"tid\":" << uuid
         << ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":" << next_sort_++ << "}}";
    tracks_[uuid] = std::move(t);
}

void ChromeJsonSink::counter_track(std::uint64_t uuid, std::uint64_t parent,
                                   const std::string& name, const std::string& unit, int) {
    tracks_[uuid] = Track{find(parent).pid, name, unit};
}

void ChromeJsonSink::complete(const TraceSlice& s, int pid) {
    begin_event();
    out_ << "{\"ph\":\"X\",\"pid\":" << pid << ",\"tid\":" << s.track
         << ",\"ts\":" << trace_timestamp(s.start)
         << ",\"dur\":" << trace_timestamp(s.end - s.start) << ",\"name\":\"" << json_escape(s.name)
         << "\",\"args\":";
    write_args(out_, s.args);
    out_ << '}';
}

void ChromeJsonSink::slice(const TraceSlice& s, const std::vector<TraceSlice>& children) {
    const int pid = find(s.track).pid;
    complete(s, pid);
    for (const auto& f : s.flows) {
        const char* ph = f.role == FlowRef::Role::Begin  ? "s"
                         : f.role == FlowRef::Role::Step ? "t"
                                                         : "f";
        begin_event();
        out_ << "{\"ph\":\"" << ph << "\",\"id\":" << f.id << ",\"pid\":" << pid
             << ",\"tid\":" << s.track << ",\"ts\":" << trace_timestamp(s.start)
             << ",\"name\":\"dependency\",\"cat\":\"pipeline\"";
        if (f.role == FlowRef::Role::End) out_ << ",\"bp\":\"e\"";
        out_ << '}';
    }
    for (const auto& c : children)
        complete(c, pid);
}

void ChromeJsonSink::instant(std::uint64_t track, Time at, const std::string& name,
                             const TraceArgs& args) {
    const int pid = find(track).pid;
    begin_event();
    out_ << "{\"ph\":\"i\",\"s\":\"t\",\"pid\":" << pid << ",\"tid\":" << track
         << ",\"ts\":" << trace_timestamp(at) << ",\"name\":\"" << json_escape(name)
         << "\",\"args\":";
    write_args(out_, args);
    out_ << '}';
}

void ChromeJsonSink::counter(std::uint64_t track, Time at, double value) {
    const Track& t = find(track);
    begin_event();
    out_ << "{\"ph\":\"C\",\"pid\":" << t.pid << ",\"ts\":" << trace_timestamp(at) << ",\"name\":\""
         << json_escape(t.name) << "\",\"args\":{\"" << json_escape(t.unit)
         << "\":" << json_number(value) << "}}";
}

void ChromeJsonSink::finish(const TraceArgs& metadata) {
    out_ << "\n],\"metadata\":";
    write_args(out_, metadata);
    out_ << "}\n";
    file_.commit();
}

}  // namespace cs::report
