#include "report/trace_sink.hpp"

#include <stdexcept>

#include "core/errors.hpp"
#include "report/chrome_trace.hpp"
#include "report/perfetto_proto.hpp"

namespace cs::report {

namespace detail {
#define CS_TRACE_FORMAT(factory) TraceFormatEntry factory();
#include "report/builtin_trace_formats.def"
#undef CS_TRACE_FORMAT
}  // namespace detail

TraceArg TraceArg::integer(std::string key, std::int64_t v) {
    TraceArg a;
    a.key = std::move(key);
    a.kind = Kind::Int;
    a.int_value = v;
    return a;
}

TraceArg TraceArg::real(std::string key, double v) {
    TraceArg a;
    a.key = std::move(key);
    a.kind = Kind::Double;
    a.double_value = v;
    return a;
}

TraceArg TraceArg::text(std::string key, std::string v) {
    TraceArg a;
    a.key = std::move(key);
    a.kind = Kind::String;
    a.string_value = std::move(v);
    return a;
}

// The bundled formats, one function per row of builtin_trace_formats.def.
namespace detail {

TraceFormatEntry chrome_json_format() {
    return {"chrome-json",
            {".json"},
            "Chrome JSON",
            [](const std::filesystem::path& path, OutputSet* outputs) {
                return std::unique_ptr<TraceSink>(std::make_unique<ChromeJsonSink>(path, outputs));
            }};
}

TraceFormatEntry perfetto_format() {
    return {
        "perfetto",
        {".pftrace", ".perfetto-trace"},
        "Perfetto protobuf",
        [](const std::filesystem::path& path, OutputSet* outputs) {
            return std::unique_ptr<TraceSink>(std::make_unique<PerfettoProtoSink>(path, outputs));
        }};
}

}  // namespace detail

const TraceFormatRegistry& TraceFormatRegistry::builtin() {
    static const TraceFormatRegistry registry = [] {
        TraceFormatRegistry r;
#define CS_TRACE_FORMAT(factory) r.add(detail::factory());
#include "report/builtin_trace_formats.def"
#undef CS_TRACE_FORMAT
        return r;
    }();
    return registry;
}

TraceFormatRegistry& TraceFormatRegistry::add(TraceFormatEntry entry) {
    if (entry.name.empty()) throw std::invalid_argument("a trace format needs a name");
    if (entry.extensions.empty() || !entry.open)
        throw std::invalid_argument("trace format '" + entry.name +
                                    "' needs an extension and an open function");
    for (const std::string& ext : entry.extensions) {
        if (ext.size() < 2 || ext.front() != '.')
            throw std::invalid_argument("trace format '" + entry.name + "': extension '" + ext +
                                        "' must start with a dot");
        if (find_extension(ext))
            throw std::invalid_argument("trace format '" + entry.name + "': extension '" + ext +
                                        "' is already taken");
    }
    entries_.push_back(std::move(entry));
    return *this;
}

const TraceFormatEntry* TraceFormatRegistry::find_extension(std::string_view extension) const {
    for (const TraceFormatEntry& e : entries_)
        for (const std::string& ext : e.extensions)
            if (ext == extension) return &e;
    return nullptr;
}

std::string TraceFormatRegistry::help() const {
    std::string out;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
        out += i == 0 ? "" : (i + 1 == entries_.size() ? " or " : ", ");
        out += "FILE" + entries_[i].extensions.front() + " (" + entries_[i].description + ")";
    }
    return out;
}

const TraceFormatEntry& trace_format_for(const std::filesystem::path& path,
                                         const TraceFormatRegistry& registry) {
    const std::string ext = path.extension().string();
    if (const TraceFormatEntry* format = registry.find_extension(ext)) return *format;
    std::string accepted;
    const auto& entries = registry.entries();
    for (std::size_t i = 0; i < entries.size(); ++i) {
        accepted += i == 0 ? "" : (i + 1 == entries.size() ? " or " : ", ");
        accepted += entries[i].extensions.front() + " (" + entries[i].description + ")";
    }
    throw ConfigError(
        SourceLocation{"--trace " + path.string()},
        "unknown trace format \"" + ext + "\"; expected a file name ending in " + accepted);
}

std::unique_ptr<TraceSink> make_trace_sink(const std::filesystem::path& path, OutputSet* outputs,
                                           const TraceFormatRegistry& registry) {
    return trace_format_for(path, registry).open(path, outputs);
}

}  // namespace cs::report
