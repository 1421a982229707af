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

// Columns: summary_fields.def's, in its order.
SummaryWriterEntry csv_summary_writer() {
    return {"csv", ".csv", "CSV, one header line and one row of the run's scalar figures",
            [](std::ostream& out, const Summary& s) {
                std::string header, row;
                for (const SummaryField& f : summary_fields()) {
                    if (f.column.empty()) continue;
                    const char* comma = header.empty() ? "" : ",";
                    header.append(comma).append(f.column);
                    const auto v = f.value(s);
                    row.append(comma).append(v.is_string()         ? csv_field(v.get<std::string>())
                                             : v.is_number_float() ? csv_number(v.get<double>())
                                                                   : v.dump());
                }
                out << header << "\n" << row << "\n";
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
