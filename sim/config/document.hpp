// Loading YAML documents and reading them strictly.
//
// A Document is one parsed YAML file plus the `--set` overrides applied to it. A Reader is a view
// of one mapping inside a document that records every key it is asked for; finish() then rejects
// any key nobody asked for, listing the accepted ones. Every error names file:line:column (or the
// `--set` argument the value came from) and what would have been accepted.
//
// Readers only ever look at `const YAML::Node`s: a lookup on a non-const yaml-cpp node inserts the
// key and would hide typos.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "core/name_table.hpp"
#include "core/units.hpp"

namespace cs::config {

struct Document {
    std::string display_path;      // as shown in messages
    std::filesystem::path folder;  // relative paths inside the document resolve against this
    YAML::Node root;
    // dotted key -> the text given on the command line, for locating errors in overridden values
    std::map<std::string, std::string> overrides;
    // How the user reached this document's keys on the command line: "topology." when an
    // experiment's --set topology.nodes=4 overrides its topology file's `nodes`. Messages about an
    // override name it as typed: "--set " + override_prefix + key + "=" + value.
    std::string override_prefix;

    // The --set argument that set `key` to `value`, as the user typed it.
    std::string override_text(const std::string& key, const std::string& value) const {
        return "--set " + override_prefix + key + "=" + value;
    }

    // A path written in this document, made absolute against `folder`. A path holding a NUL
    // byte (a YAML escape "\0" or "\x00") would be cut at it by the operating system, so it is
    // refused: the node overload names its file:line:column, the string one the document.
    std::filesystem::path resolve(const std::string& relative) const;
    std::filesystem::path resolve(const YAML::Node& node) const;
};

// Reads and parses a YAML file. Throws ConfigError for a missing/unreadable file or bad YAML.
Document load_document(const std::filesystem::path& path);
// The folder a document at `path` resolves its relative paths against (load_document's): its
// parent folder, "." for a bare file name.
std::filesystem::path document_folder(const std::filesystem::path& path);
// Parses YAML text (for tests and inline documents) under a display name.
Document parse_document(const std::string& text, const std::string& display_path,
                        const std::filesystem::path& folder = ".");

// A copy of `doc` whose tree shares no node with doc.root, so that overrides applied to one do not
// reach the other. A reader cannot tell it from `doc`: every node (mappings, lists, values and
// mapping keys) keeps its position (file:line:column in messages), type, text, tag and style, and
// a node several aliases name stays one node. (yaml-cpp's YAML::Clone drops the positions.)
Document copy_document(const Document& doc);

// Documents parsed once and kept, for a process that loads the same files many times: a sweep
// loads its experiment, model and topology files once per combination (workload::load_experiment
// takes it beside its workload::ClusterCache). A file is read on first use only: it is assumed not
// to change while the cache lives (one sweep). Holds the kMaxEntries most recently used; a
// document is a few kB.
class DocumentCache {
  public:
    static constexpr std::size_t kMaxEntries = 8;
    // What load_document(path) gives, parsed on first use. Kept under `path` as spelled: that
    // spelling is the file name messages show and gives the folder relative paths resolve
    // against, so the same file reached by another spelling is another entry. Throws as
    // load_document; a failure keeps nothing (the next call fails the same way). The document is
    // shared and read-only: a caller that applies overrides applies them to copy_document of it.
    std::shared_ptr<const Document> load(const std::filesystem::path& path);
    // What parse_document(text, display_path, folder) gives, the same way, kept under all three.
    std::shared_ptr<const Document> parse(const std::string& text, const std::string& display_path,
                                          const std::filesystem::path& folder);
    std::size_t parses() const { return parses_; }

  private:
    std::shared_ptr<const Document> find_or_add(std::string key,
                                                const std::function<Document()>& parse);
    struct Entry {
        std::string key;
        std::shared_ptr<const Document> doc;
    };
    std::vector<Entry> entries_;  // the least recently used first
    std::size_t parses_ = 0;
};

// Splits "a.b.c=value" (as given to --set); throws ConfigError when there is no '=' or no key.
std::pair<std::string, std::string> split_assignment(const std::string& assignment);
// Sets dotted key `key` (e.g. "parallelism.tp", "links.0.bandwidth") to the YAML value `value`,
// creating missing mappings on the way. Throws ConfigError if the path crosses a scalar.
void apply_override(Document& doc, const std::string& key, const std::string& value);

// The largest value count() accepts (INT_MAX).
inline constexpr std::int64_t kMaxCount = 2147483647;

class Reader {
  public:
    Reader(const Document& doc, YAML::Node node, std::string key_path);

    // Location of this mapping, or of one of its keys' values.
    SourceLocation location() const;
    SourceLocation location(const std::string& key) const;
    [[noreturn]] void fail(const std::string& key, const std::string& message) const;
    [[noreturn]] void fail_here(const std::string& message) const;

    bool has(const std::string& key) const;
    const YAML::Node value(const std::string& key) const;  // marks the key as accepted

    std::string string(const std::string& key) const;
    // A path (relative to the document's folder), checked as Document::resolve checks it.
    std::filesystem::path path(const std::string& key) const;
    std::string string_or(const std::string& key, const std::string& fallback) const;
    std::int64_t integer(const std::string& key) const;
    std::int64_t integer_or(const std::string& key, std::int64_t fallback) const;
    // A count: min_value <= value <= kMaxCount, so that it fits an int.
    std::int64_t count(const std::string& key, std::int64_t min_value = 1) const;
    std::int64_t count_or(const std::string& key, std::int64_t fallback,
                          std::int64_t min_value = 1) const;
    double number(const std::string& key) const;
    double number_or(const std::string& key, double fallback) const;
    bool boolean_or(const std::string& key, bool fallback) const;
    std::string choice(const std::string& key, std::initializer_list<const char*> options,
                       const char* fallback = nullptr) const;
    std::string choice(const std::string& key, const std::vector<std::string>& options,
                       const char* fallback = nullptr) const;
    // One of a name table's values (core/name_table.hpp); `fallback` when the key is absent,
    // otherwise an absent key is an error. Messages list the table's names.
    template <class E, std::size_t N>
    E choice(const std::string& key, const std::array<Named<E>, N>& table,
             std::optional<E> fallback = std::nullopt) const {
        if (fallback && !has(key)) return *fallback;
        return *find_named(table, choice(key, names_of(table)));
    }

    Time time(const std::string& key) const;
    std::optional<Time> time_opt(const std::string& key) const;
    Bytes bytes(const std::string& key) const;
    std::optional<Bytes> bytes_opt(const std::string& key) const;
    Bandwidth bandwidth(const std::string& key) const;  // must be > 0
    std::optional<Bandwidth> bandwidth_opt(const std::string& key) const;
    FlopRate flop_rate(const std::string& key) const;  // must be > 0

    Reader map(const std::string& key) const;  // the key must hold a mapping
    std::optional<Reader> map_opt(const std::string& key) const;
    std::vector<Reader> list_of_maps(const std::string& key) const;
    // The mapping's keys in document order (for mappings whose keys are names, e.g. gpu_models).
    std::vector<std::string> keys() const;

    // Throws for any key of this mapping that no accessor above asked for.
    void finish() const;

    const Document& document() const { return *doc_; }
    const std::string& key_path() const { return path_; }

  private:
    std::string child_path(const std::string& key) const;
    // The --set argument that gave the value at dotted path `full`: one that set the path itself
    // or a mapping above it (its value's positions are in the argument's text, not the file), or
    // with `below`, one that set a key under it (a mapping --set created has no position).
    std::optional<SourceLocation> override_location(const std::string& full, bool below) const;
    std::string scalar_text(const std::string& key, const char* expected) const;
    // node_[key] as yaml-cpp gives it, through index_.
    YAML::Node lookup(const std::string& key) const;
    // A mapping's scalar keys, each with its value and whether a key was asked for by its name.
    struct Entry {
        std::string key;
        YAML::Node value;
        bool accepted = false;
    };
    static YAML::Node absent(const std::string& key);  // what a mapping gives for a missing key
    // index_, made on first use (node_ must be a mapping).
    std::vector<Entry>& index() const;

    const Document* doc_;
    YAML::Node node_;
    std::string path_;
    // The keys asked for, once each in the order first asked (finish() lists them). A mapping
    // has a few dozen keys at most, so a scan finds one faster than a set allocates its node.
    mutable std::vector<std::string> accepted_order_;
    // A mapping's scalar keys and their values in document order, made at the first lookup:
    // yaml-cpp's own lookup scans the mapping and converts every key it passes to a string (a
    // copy of the key and of the document's memory handle each), so reading a section of n keys
    // cost n scans; plan loads every layout through these (10-12% of its search). finish() reads
    // the accepted flags here rather than walk the mapping again.
    mutable std::optional<std::vector<Entry>> index_;
    mutable bool other_keys_ = false;  // the mapping has a key that is not a scalar
};

// Reads the whole mapping at the root of a document.
Reader root_reader(const Document& doc);

// "a, b or c" for error messages.
std::string join_alternatives(const std::vector<std::string>& options);

}  // namespace cs::config
