#include "report/summary_writers.hpp"

#include <cstdio>
#include <stdexcept>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"

namespace cs::report {

namespace detail {
#define CS_SUMMARY_WRITER(factory) SummaryWriterEntry factory();
#include "report/builtin_summary_writers.def"
#undef CS_SUMMARY_WRITER

SummaryWriterEntry json_summary_writer() {
    return {"json", ".json", "JSON, every field (DESIGN.md's summary contract)",
            [](std::ostream& out, const Summary& s) { out << to_json(s).dump(2) << "\n"; }};
}

SummaryWriterEntry text_summary_writer() {
    return {"text", ".txt", "the text table `run` prints",
            [](std::ostream& out, const Summary& s) { print_summary(out, s); }};
}

namespace {
// A CSV field: quoted (quotes doubled) when it holds a comma, quote or line break (RFC 4180).
std::string csv_field(const std::string& text) {
    if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
    std::string out = "\"";
    for (char c : text)
        out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
}
// Full double precision: the number reads back to the same double.
std::string csv_number(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.17g", v);
    return b;
}
}  // namespace

SummaryWriterEntry csv_summary_writer() {
    return {"csv", ".csv", "CSV, one header line and one row of the run's scalar figures",
            [](std::ostream& out, const Summary& s) {
                out << "schedule,iteration_time_s,bubble_fraction,exposed_comm_fraction,";
                for (const std::string& key : exposed_kind_keys())
                    out << key << ",";
                out << "idle_fraction,host_fraction,mfu,hfu,tokens_per_s,tflops_per_gpu,world_size,"
                       "microbatches,tp,pp,dp,cp,ep,vpp,memory_per_gpu_bytes\n";
                out << csv_field(s.schedule);
                for (double v : {s.iteration_time_s, s.bubble_fraction, s.exposed_comm_fraction})
                    out << "," << csv_number(v);
                for (double v : s.exposed_by_kind)
                    out << "," << csv_number(v);
                for (double v : {s.idle_fraction, s.host_fraction, s.mfu, s.hfu, s.tokens_per_s,
                                 s.tflops_per_gpu})
                    out << "," << csv_number(v);
                for (long long v :
                     {static_cast<long long>(s.world_size), static_cast<long long>(s.microbatches),
                      static_cast<long long>(s.tp), static_cast<long long>(s.pp),
                      static_cast<long long>(s.dp), static_cast<long long>(s.cp),
                      static_cast<long long>(s.ep), static_cast<long long>(s.vpp),
                      static_cast<long long>(s.memory.total.value)})
                    out << "," << v;
                out << "\n";
            }};
}

}  // namespace detail

const SummaryWriterRegistry& SummaryWriterRegistry::builtin() {
    static const SummaryWriterRegistry registry = [] {
        SummaryWriterRegistry r;
#define CS_SUMMARY_WRITER(factory) r.add(detail::factory());
#include "report/builtin_summary_writers.def"
#undef CS_SUMMARY_WRITER
        return r;
    }();
    return registry;
}

SummaryWriterRegistry& SummaryWriterRegistry::add(SummaryWriterEntry entry) {
    if (entry.name.empty()) throw std::invalid_argument("a summary writer needs a name");
    if (find(entry.name))
        throw std::invalid_argument("summary writer '" + entry.name + "' is already registered");
    if (entry.extension.size() < 2 || entry.extension.front() != '.')
        throw std::invalid_argument("summary writer '" + entry.name +
                                    "': the extension must start with a dot");
    if (find_extension(entry.extension))
        throw std::invalid_argument("summary writer '" + entry.name + "': extension '" +
                                    entry.extension + "' is already taken");
    if (!entry.write)
        throw std::invalid_argument("summary writer '" + entry.name + "' has no write function");
    entries_.push_back(std::move(entry));
    return *this;
}

const SummaryWriterEntry* SummaryWriterRegistry::find(std::string_view name) const {
    for (const SummaryWriterEntry& e : entries_)
        if (e.name == name) return &e;
    return nullptr;
}

const SummaryWriterEntry* SummaryWriterRegistry::find_extension(std::string_view extension) const {
    for (const SummaryWriterEntry& e : entries_)
        if (e.extension == extension) return &e;
    return nullptr;
}

std::string SummaryWriterRegistry::help() const {
    std::string out;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
        out += i == 0 ? "" : (i + 1 == entries_.size() ? " or " : ", ");
        out += "FILE" + entries_[i].extension + " (" + entries_[i].name + ")";
    }
    return out;
}

const SummaryWriterEntry& summary_writer_for(const std::filesystem::path& path,
                                             const std::string& option,
                                             const SummaryWriterRegistry& registry) {
    const std::string ext = path.extension().string();
    if (const SummaryWriterEntry* writer = registry.find_extension(ext)) return *writer;
    std::string accepted;
    const auto& entries = registry.entries();
    for (std::size_t i = 0; i < entries.size(); ++i) {
        accepted += i == 0 ? "" : (i + 1 == entries.size() ? " or " : ", ");
        accepted += entries[i].extension + " (" + entries[i].name + ")";
    }
    throw ConfigError(
        SourceLocation{option + " " + path.string()},
        "unknown summary format \"" + ext + "\"; expected a file name ending in " + accepted);
}

const SummaryWriterEntry& summary_writer(std::string_view name,
                                         const SummaryWriterRegistry& registry) {
    if (const SummaryWriterEntry* writer = registry.find(name)) return *writer;
    throw std::invalid_argument("no summary writer '" + std::string(name) + "'");
}

void write_summary_file(const std::filesystem::path& path, const Summary& summary,
                        const SummaryWriterEntry& writer, OutputSet* outputs) {
    write_file_atomically(
        path, [&](std::ostream& out) { writer.write(out, summary); }, outputs);
}

}  // namespace cs::report
