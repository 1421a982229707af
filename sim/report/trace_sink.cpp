#include "report/trace_sink.hpp"

#include "core/errors.hpp"
#include "report/chrome_trace.hpp"
#include "report/perfetto_proto.hpp"

namespace cs::report {

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

TraceFormat trace_format_for(const std::filesystem::path& path) {
    const std::string ext = path.extension().string();
    if (ext == ".json") return TraceFormat::ChromeJson;
    if (ext == ".pftrace" || ext == ".perfetto-trace") return TraceFormat::PerfettoProto;
    throw ConfigError(SourceLocation{"--trace " + path.string()},
                      "unknown trace format \"" + ext +
                          "\"; expected a file name ending in .json (Chrome JSON) or .pftrace "
                          "(Perfetto protobuf)");
}

std::unique_ptr<TraceSink> make_trace_sink(const std::filesystem::path& path,
                                           OutputSet* outputs) {
    switch (trace_format_for(path)) {
        case TraceFormat::ChromeJson:
            return std::make_unique<ChromeJsonSink>(path, outputs);
        case TraceFormat::PerfettoProto:
            return std::make_unique<PerfettoProtoSink>(path, outputs);
    }
    return nullptr;
}

}  // namespace cs::report
