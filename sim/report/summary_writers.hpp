// Renderings of a run's Summary (summary.hpp) as files or on the terminal: one row of a
// SummaryWriterRegistry per format, {name, extension, description, write}.
//
// builtin() is the bundled table (builtin_summary_writers.def: json, text, csv), built once and
// immutable. A test or an embedding program that adds a format copies it and add()s to the copy;
// there is no process-wide registration. `run --summary FILE` picks the writer by FILE's
// extension; `run --json FILE` is the "json" writer.
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/atomic_file.hpp"
#include "report/summary.hpp"

namespace cs::report {

struct SummaryWriterEntry {
    std::string name;         // "json", "text", "csv"
    std::string extension;    // with the dot: ".json"
    std::string description;  // one line, for --help and messages
    // Writes the whole rendering of one summary. Must depend on the summary only (no clock, no
    // path), like every output of clustersim.
    std::function<void(std::ostream&, const Summary&)> write;
};

class SummaryWriterRegistry {
  public:
    SummaryWriterRegistry() = default;  // empty
    static const SummaryWriterRegistry& builtin();

    // Throws std::invalid_argument for an empty or taken name, an extension without a leading
    // dot or already taken, or no write function.
    SummaryWriterRegistry& add(SummaryWriterEntry entry);
    const SummaryWriterEntry* find(std::string_view name) const;  // nullptr if unknown
    const SummaryWriterEntry* find_extension(std::string_view extension) const;
    const std::vector<SummaryWriterEntry>& entries() const { return entries_; }
    // "FILE.json (JSON), FILE.txt (text table) or FILE.csv (...)", for --summary's help.
    std::string help() const;

  private:
    std::vector<SummaryWriterEntry> entries_;
};

// The writer for `path` by its extension; throws ConfigError at `option path` naming the accepted
// extensions.
const SummaryWriterEntry& summary_writer_for(
    const std::filesystem::path& path, const std::string& option = "--summary",
    const SummaryWriterRegistry& registry = SummaryWriterRegistry::builtin());

// The writer called `name`; throws std::invalid_argument if the registry lacks it (a bundled
// name used by the program itself, not user input).
const SummaryWriterEntry& summary_writer(
    std::string_view name,
    const SummaryWriterRegistry& registry = SummaryWriterRegistry::builtin());

// Writes `summary` to `path` with `writer`, atomically (no file is left if writing fails); with
// `outputs`, staged there until the command's outputs are committed together.
void write_summary_file(const std::filesystem::path& path, const Summary& summary,
                        const SummaryWriterEntry& writer, OutputSet* outputs = nullptr);

}  // namespace cs::report
