#include "config/document.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "core/input_file.hpp"
#include "core/quantity.hpp"

namespace cs::config {
namespace {
// Names the specialization of YAML::as_if below; nothing else uses it.
struct MarkedTreeCopy {};
}  // namespace
}  // namespace cs::config

// copy_document's deep copy of a yaml-cpp tree, which keeps every node's mark.
//
// Messages name file:line:column from Node::Mark(), and YAML::Clone rebuilds the tree from events
// whose marks are null, so a cloned document would name no position. No public yaml-cpp interface
// sets a mark or reaches the detail::node behind a Node, but Node befriends every specialization
// of YAML::as_if (`template <typename T, typename S> friend struct as_if;`, node/node.h). This
// explicit specialization, for a tag type private to this file, is the one place that uses that
// access: it reads the source's detail::node tree and builds a new one through detail::node's
// public members, making the calls yaml-cpp's NodeBuilder makes while it parses (create_node,
// set_mark, then set_null, set_scalar or set_type with set_tag and set_style, then push_back or
// insert of finished children), so that the copy is what a parse of the same text gives:
//   - each node keeps its mark, type, scalar text, tag and style (a parse sets nothing else;
//     mapping keys are nodes with marks too, and keep their order);
//   - a node that aliases (*name) refer to is one node reached from several places, and stays
//     one node: an override through one path shows at the others, as in a fresh parse;
//   - the copy lives in its own memory_holder, so it shares nothing with the source.
// Written against yaml-cpp 0.7.0 (node/detail/node.h); Clone is not needed.
namespace YAML {
template <>
struct as_if<cs::config::MarkedTreeCopy, void> {
    explicit as_if(const Node& node_) : node(node_) {}
    const Node& node;

    Node operator()() const {
        if (!node.m_isValid || node.m_pNode == nullptr) return node;  // no tree to share
        const auto memory = std::make_shared<detail::memory_holder>();
        std::unordered_map<const detail::node*, detail::node*> copies;
        return Node(copy(*node.m_pNode, memory, copies), memory);
    }

  private:
    // `copies`: the copy of each node already copied, so that aliases stay shared.
    static detail::node& copy(const detail::node& from, const detail::shared_memory_holder& memory,
                              std::unordered_map<const detail::node*, detail::node*>& copies) {
        if (const auto it = copies.find(&from); it != copies.end()) return *it->second;
        detail::node& to = memory->create_node();
        copies.emplace(&from, &to);
        to.set_mark(from.mark());
        switch (from.type()) {
            case NodeType::Undefined:  // not in a parsed tree; left undefined as it was
                return to;
            case NodeType::Null:
                to.set_null();
                break;
            case NodeType::Scalar:
                to.set_scalar(from.scalar());
                break;
            case NodeType::Sequence:
            case NodeType::Map:
                to.set_type(from.type());
                break;
        }
        to.set_tag(from.tag());
        to.set_style(from.style());
        if (from.type() == NodeType::Sequence)
            for (const auto item : from)
                to.push_back(copy(*item, memory, copies), memory);
        if (from.type() == NodeType::Map)
            for (const auto pair : from)
                to.insert(copy(*pair.first, memory, copies), copy(*pair.second, memory, copies),
                          memory);
        return to;
    }
};
}  // namespace YAML

namespace cs::config {
namespace {

SourceLocation mark_location(const std::string& file, const YAML::Mark& mark) {
    if (mark.is_null() || mark.line < 0) return SourceLocation{file, 0, 0};
    return SourceLocation{file, mark.line + 1, mark.column + 1};
}

std::string describe(const YAML::Node& n) {
    switch (n.Type()) {
        case YAML::NodeType::Null:
            return "nothing";
        case YAML::NodeType::Scalar:
            return "\"" + n.Scalar() + "\"";
        case YAML::NodeType::Sequence:
            return "a list";
        case YAML::NodeType::Map:
            return "a mapping";
        default:
            return "an undefined value";
    }
}

// Aliases share nodes, so a walk that follows them can grow exponentially ("billion laughs"):
// a document this large is refused rather than walked.
constexpr std::size_t kMaxNodes = 10'000'000;

// yaml-cpp's messages about a tab in the indentation ("illegal map value") do not say so: when
// the line of the error, or the one before it, indents with a tab, the hint names it.
std::string tab_hint(const std::string& text, const YAML::Mark& mark) {
    if (mark.is_null() || mark.line < 0) return "";
    std::istringstream lines(text);
    std::string line;
    for (int n = 0; std::getline(lines, line); ++n) {
        if (n < mark.line - 1) continue;
        const auto indent = line.substr(0, line.find_first_not_of(" \t"));
        if (indent.find('\t') != std::string::npos)
            return "; line " + std::to_string(n + 1) +
                   " is indented with a tab, and YAML indents with spaces only";
        if (n >= mark.line) break;
    }
    return "";
}

std::string line_column(const YAML::Mark& mark) {
    return std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// yaml-cpp keeps both entries of a repeated key and lookups see only the first: a repeated key
// is an error (naming where each was given) at any depth.
// `file` is a file name (errors carry line:column) or a --set argument (positions only in the
// text).
void reject_duplicate_keys(const YAML::Node& node, const std::string& file, bool in_file,
                           std::size_t& visited) {
    if (++visited > kMaxNodes)
        throw ConfigError(SourceLocation{file}, "the document expands to more than " +
                                                    std::to_string(kMaxNodes) +
                                                    " values (aliases repeated too often)");
    if (node.IsSequence()) {
        for (const auto& item : node)
            reject_duplicate_keys(item, file, in_file, visited);
        return;
    }
    if (!node.IsMap()) return;
    std::map<std::string, YAML::Mark> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
        if (it->first.IsScalar()) {
            const auto [at, fresh] = seen.emplace(it->first.Scalar(), it->first.Mark());
            if (!fresh)
                throw ConfigError(
                    in_file ? mark_location(file, it->first.Mark()) : SourceLocation{file},
                    "duplicate key '" + it->first.Scalar() + "' (given at " +
                        line_column(at->second) + " and again at " + line_column(it->first.Mark()) +
                        "); give each key once");
        }
        reject_duplicate_keys(it->second, file, in_file, visited);
    }
}

// The documents in `text`, counted from its document markers: a "---" line after content or
// after another "---", or content after a "..." line, starts another. (yaml-cpp's LoadAll would
// count them, but loops without end on some inputs, such as ",us".) `second_line`, when given,
// receives the 1-based line where the second document starts (0 for one document).
int document_count(const std::string& text, int* second_line = nullptr) {
    const auto marker = [](const std::string& line, const char* m) {
        return line.compare(0, 3, m) == 0 &&
               (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    };
    int documents = 0;
    int number = 0;
    if (second_line) *second_line = 0;
    const auto count = [&] {
        if (++documents == 2 && second_line) *second_line = number;
    };
    bool open = false, content = false;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        ++number;
        const auto first = line.find_first_not_of(" \t\r");
        const bool blank = first == std::string::npos || line[first] == '#';
        if (marker(line, "---")) {
            if (!open || content) count();
            open = true;
            content = line.find_first_not_of(" \t\r", 3) != std::string::npos;
        } else if (marker(line, "...")) {
            open = false;
            content = false;
        } else if (!blank) {
            if (!open) {
                count();
                open = true;
            }
            content = true;
        }
    }
    return std::max(documents, 1);
}

void reject_duplicate_keys(const YAML::Node& node, const std::string& file, bool in_file) {
    std::size_t visited = 0;
    reject_duplicate_keys(node, file, in_file, visited);
}

// The line and column (1-based, in bytes) of the first byte of `text` that is not well-formed
// UTF-8 (RFC 3629: no overlong forms, surrogates or code points above U+10FFFF), if any. Names
// read from YAML reach JSON outputs, whose writer refuses such bytes (an internal error once).
std::optional<std::pair<int, int>> first_invalid_utf8(const std::string& text) {
    int line = 1, column = 1;
    for (std::size_t i = 0; i < text.size();) {
        const auto c = static_cast<unsigned char>(text[i]);
        std::size_t n = 0;
        unsigned lo = 0x80, hi = 0xbf;  // the range of the second byte
        if (c < 0x80)
            n = 1;
        else if (c >= 0xc2 && c <= 0xdf)
            n = 2;
        else if (c >= 0xe0 && c <= 0xef)
            n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        else if (c >= 0xf0 && c <= 0xf4)
            n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        else
            return std::pair{line, column};
        if (i + n > text.size()) return std::pair{line, column};
        for (std::size_t k = 1; k < n; ++k) {
            const auto b = static_cast<unsigned char>(text[i + k]);
            if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf))
                return std::pair{line, column};
        }
        if (c == '\n')
            ++line, column = 1;
        else
            ++column;
        i += n;
    }
    return std::nullopt;
}

void refuse_nul(const std::string& path, const SourceLocation& where) {
    const auto nul = path.find('\0');
    if (nul == std::string::npos) return;
    throw ConfigError(where, "the path \"" + path.substr(0, nul) +
                                 "\\0...\" holds a NUL byte (character " + std::to_string(nul + 1) +
                                 "), which would cut it short; give a path without one");
}

}  // namespace

std::filesystem::path Document::resolve(const YAML::Node& node) const {
    if (node.IsScalar())
        refuse_nul(node.Scalar(), node.Mark().is_null() ? SourceLocation{display_path}
                                                        : mark_location(display_path, node.Mark()));
    return resolve(node.Scalar());
}

std::filesystem::path Document::resolve(const std::string& relative) const {
    refuse_nul(relative, SourceLocation{display_path});
    std::filesystem::path p(relative);
    if (p.is_absolute()) return p;
    return (folder / p).lexically_normal();
}

Document parse_document(const std::string& text, const std::string& display_path,
                        const std::filesystem::path& folder) {
    Document doc;
    doc.display_path = display_path;
    doc.folder = folder;
    // yaml-cpp reads UTF-16 (after its byte-order mark) and stops at a NUL byte; neither is
    // what a user meant to give, and the messages that follow would show mangled text.
    const bool utf16 = text.size() >= 2 && ((text[0] == '\xff' && text[1] == '\xfe') ||
                                            (text[0] == '\xfe' && text[1] == '\xff'));
    if (utf16 || text.find('\0') != std::string::npos)
        throw ConfigError(SourceLocation{display_path, 1, 1},
                          std::string(utf16 ? "is UTF-16 text" : "holds NUL bytes (binary data?)") +
                              "; expected a YAML text file in UTF-8");
    if (const auto bad = first_invalid_utf8(text))
        throw ConfigError(SourceLocation{display_path, bad->first, bad->second},
                          "is not UTF-8 text (a byte that starts or continues no UTF-8 "
                          "character); expected a YAML text file in UTF-8");
    try {
        doc.root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
        throw ConfigError(mark_location(display_path, e.mark),
                          "invalid YAML: " + e.msg + tab_hint(text, e.mark));
    }
    // yaml-cpp reads the first document only: a second one ("---" and more keys) would be
    // ignored without a word.
    int second = 0;
    if (const int documents = document_count(text, &second); documents > 1)
        throw ConfigError(SourceLocation{display_path, second, 1},
                          "the file holds " + std::to_string(documents) +
                              " YAML documents (separated by ---); expected one: join their keys "
                              "into one mapping");
    reject_duplicate_keys(doc.root, display_path, true);
    if (!doc.root.IsMap())
        throw ConfigError(SourceLocation{display_path, 1, 1},
                          "expected a YAML mapping of keys to values at the top level, found " +
                              describe(doc.root));
    return doc;
}

std::filesystem::path document_folder(const std::filesystem::path& path) {
    const auto folder = path.parent_path();
    return folder.empty() ? std::filesystem::path(".") : folder;
}

Document load_document(const std::filesystem::path& path) {
    const std::string shown = path.string();
    const std::string text = read_input_file(path, shown, "a YAML file");
    return parse_document(text, shown, document_folder(path));
}

Document copy_document(const Document& doc) {
    Document copy = doc;
    // reset, not assignment: assigning to a yaml-cpp node rewrites the node both handles share,
    // which would replace the original's tree too.
    copy.root.reset(YAML::as_if<MarkedTreeCopy, void>(doc.root)());
    return copy;
}

std::shared_ptr<const Document> DocumentCache::find_or_add(std::string key,
                                                           const std::function<Document()>& parse) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->key == key) {
            // The most recently used last: a sweep's experiment file stays while model files
            // it varies over come and go.
            std::rotate(it, it + 1, entries_.end());
            return entries_.back().doc;
        }
    auto doc = std::make_shared<const Document>(parse());
    ++parses_;
    if (entries_.size() >= kMaxEntries) entries_.erase(entries_.begin());
    entries_.push_back({std::move(key), doc});
    return doc;
}

std::shared_ptr<const Document> DocumentCache::load(const std::filesystem::path& path) {
    return find_or_add("file\n" + path.string(), [&] { return load_document(path); });
}

std::shared_ptr<const Document> DocumentCache::parse(const std::string& text,
                                                     const std::string& display_path,
                                                     const std::filesystem::path& folder) {
    // Lengths first, so that no two (display path, folder, text) give one key.
    const std::string shown_folder = folder.string();
    return find_or_add("text " + std::to_string(display_path.size()) + " " +
                           std::to_string(shown_folder.size()) + "\n" + display_path +
                           shown_folder + text,
                       [&] { return parse_document(text, display_path, folder); });
}

std::pair<std::string, std::string> split_assignment(const std::string& assignment) {
    const auto eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0)
        throw ConfigError(SourceLocation{"--set " + assignment, 0, 0},
                          "expected key=value, for example parallelism.tp=4");
    return {assignment.substr(0, eq), assignment.substr(eq + 1)};
}

namespace {

// An override's value as YAML, checked: one document, not empty, no duplicate keys; `~` or null
// written as such to remove the key.
YAML::Node parse_override_value(const std::string& value, const SourceLocation& where) {
    // A value already accepted is not checked and parsed again: a sweep or plan applies the same
    // few values ("4", "true", "zero1") to thousands of documents. Each document gets its own
    // copy of the parsed tree.
    thread_local std::unordered_map<std::string, YAML::Node> accepted;
    YAML::Node parsed;
    if (const auto hit = accepted.find(value); hit != accepted.end()) {
        parsed = YAML::Clone(hit->second);
    } else {
        // An empty value would read as null, which removes a key silently; `~` says so on
        // purpose.
        if (value.find_first_not_of(" \t") == std::string::npos)
            throw ConfigError(where, "no value after '='; give a value, or ~ to remove the key");
        // More than one document in a value ("1\n---\n2") would silently keep the first.
        if (const int documents = document_count(value); documents > 1)
            throw ConfigError(where, "the value holds " + std::to_string(documents) +
                                         " YAML documents; give one value");
        try {
            parsed = YAML::Load(value);
        } catch (const YAML::ParserException& e) {
            throw ConfigError(where, "the value is not valid YAML: " + e.msg);
        }
        // yaml-cpp reads some malformed text (",us") as nothing: only a null written as such
        // clears a key.
        if (parsed.IsNull() || !parsed.IsDefined()) {
            std::string text = value;
            text.erase(0, text.find_first_not_of(" \t"));
            text.erase(text.find_last_not_of(" \t") + 1);
            if (text != "~" && text != "null" && text != "Null" && text != "NULL")
                throw ConfigError(where, "the value \"" + value +
                                             "\" is not valid YAML; quote it, or give ~ to "
                                             "remove the key");
        }
        reject_duplicate_keys(parsed, where.file, false);
        if (accepted.size() >= 4096) accepted.clear();
        accepted.emplace(value, YAML::Clone(parsed));
    }
    return parsed;
}

// An override's dotted key as its components, none empty.
std::vector<std::string> key_parts(const std::string& key, const SourceLocation& where) {
    // A split that kept empty components would let "parallelism." replace the whole mapping.
    if (key.empty() || key.front() == '.' || key.back() == '.')
        throw ConfigError(where, "empty component in the key '" + key +
                                     "'; expected dotted names such as parallelism.tp");
    std::vector<std::string> parts;
    for (std::size_t from = 0;;) {
        const std::size_t dot = key.find('.', from);
        std::string part =
            key.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
        if (part.empty()) throw ConfigError(where, "empty component in the key '" + key + "'");
        parts.push_back(std::move(part));
        if (dot == std::string::npos) break;
        from = dot + 1;
    }
    return parts;
}

}  // namespace

void apply_override(Document& doc, const std::string& key, const std::string& value) {
    const SourceLocation where{doc.override_text(key, value), 0, 0};
    const YAML::Node parsed = parse_override_value(value, where);
    const std::vector<std::string> parts = key_parts(key, where);
    // Walk with non-const nodes on purpose: this is the one place that edits a document.
    YAML::Node cur = doc.root;
    std::string walked;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        const std::string& p = parts[i];
        const bool last = i + 1 == parts.size();
        walked += (walked.empty() ? "" : ".") + p;
        if (cur.IsSequence()) {
            char* end = nullptr;
            const long idx = std::strtol(p.c_str(), &end, 10);
            if (*end != '\0' || idx < 0 || static_cast<std::size_t>(idx) >= cur.size())
                throw ConfigError(where, "'" + walked + "' indexes a list of " +
                                             std::to_string(cur.size()) +
                                             " entries; use an index from 0 to " +
                                             std::to_string(cur.size() == 0 ? 0 : cur.size() - 1));
            if (last) {
                cur[idx] = parsed;
            } else {
                YAML::Node next = cur[idx];
                cur.reset(next);
            }
            continue;
        }
        if (!cur.IsMap() && !cur.IsNull())
            throw ConfigError(where, "'" + walked.substr(0, walked.rfind('.')) +
                                         "' holds a single value, not a mapping with keys");
        if (last) {
            cur[p] = parsed;
        } else {
            YAML::Node next = cur[p];
            if (!next.IsDefined() || next.IsNull()) {
                cur[p] = YAML::Node(YAML::NodeType::Map);
                next = cur[p];
            }
            cur.reset(next);
        }
    }
    doc.overrides[key] = value;
}

// ---- Reader ---------------------------------------------------------------------------------

Reader::Reader(const Document& doc, YAML::Node node, std::string key_path)
    : doc_(&doc), node_(std::move(node)), path_(std::move(key_path)) {}

Reader root_reader(const Document& doc) {
    return Reader(doc, doc.root, "");
}

std::string Reader::child_path(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
}

std::optional<SourceLocation> Reader::override_location(const std::string& full, bool below) const {
    std::optional<SourceLocation> under;
    for (const auto& [k, text] : doc_->overrides) {
        if (k == full || full.rfind(k + ".", 0) == 0)
            return SourceLocation{doc_->override_text(k, text)};
        if (below && !under && k.rfind(full + ".", 0) == 0)
            under = SourceLocation{doc_->override_text(k, text)};
    }
    return under;
}

SourceLocation Reader::location() const {
    if (auto o = override_location(path_, false)) return *o;
    if (!node_.Mark().is_null()) return mark_location(doc_->display_path, node_.Mark());
    if (auto o = override_location(path_, !path_.empty())) return *o;
    return mark_location(doc_->display_path, node_.Mark());
}

SourceLocation Reader::location(const std::string& key) const {
    const std::string full = child_path(key);
    if (auto o = override_location(full, false)) return *o;
    const YAML::Node v = lookup(key);
    if (v.IsDefined() && !v.Mark().is_null()) return mark_location(doc_->display_path, v.Mark());
    // A mapping --set created (traning.seq_length=4 creates `traning`): the argument under it.
    if (v.IsDefined())
        if (auto o = override_location(full, true)) return *o;
    // Missing: point at the mapping.
    return location();
}

void Reader::fail(const std::string& key, const std::string& message) const {
    throw ConfigError(location(key), "'" + child_path(key) + "': " + message);
}

void Reader::fail_here(const std::string& message) const {
    throw ConfigError(location(), (path_.empty() ? std::string() : "'" + path_ + "': ") + message);
}

bool Reader::has(const std::string& key) const {
    const YAML::Node v = value(key);
    return v.IsDefined() && !v.IsNull();
}

// One lookup per call: has() and every typed accessor come through here.
const YAML::Node Reader::value(const std::string& key) const {
    if (std::find(accepted_order_.begin(), accepted_order_.end(), key) == accepted_order_.end())
        accepted_order_.push_back(key);
    const YAML::Node& cn = node_;
    if (!cn.IsMap()) return cn[key];
    const Entry* first = nullptr;
    for (auto& e : index())
        if (e.key == key) {
            e.accepted = true;  // every key of that name (a mapping may repeat one)
            if (!first) first = &e;
        }
    return first ? first->value : absent(key);
}

std::vector<Reader::Entry>& Reader::index() const {
    if (!index_) {
        // The keys yaml-cpp's lookup can match: scalars, compared by their text (its
        // convert<std::string>); the first of equal keys wins, as there.
        index_.emplace();
        const YAML::Node& cn = node_;
        for (auto it = cn.begin(); it != cn.end(); ++it) {
            if (it->first.IsScalar())
                index_->push_back({it->first.Scalar(), it->second});
            else
                other_keys_ = true;
        }
    }
    return *index_;
}

YAML::Node Reader::lookup(const std::string& key) const {
    const YAML::Node& cn = node_;
    if (!cn.IsMap()) return cn[key];
    for (const auto& e : index())
        if (e.key == key) return e.value;
    return absent(key);
}

// The undefined node yaml-cpp returns for a missing key (it names the key in its own errors),
// from an empty mapping: no scan. yaml-cpp makes it through a string stream (a locale and its
// facets, about a microsecond), and a load asks for a hundred absent keys, so each key's node is
// made once per thread and copied (the keys asked for are the readers' own names: a few hundred
// at most; the memo starts over past 1,024).
YAML::Node Reader::absent(const std::string& key) {
    thread_local const YAML::Node empty(YAML::NodeType::Map);
    thread_local std::unordered_map<std::string, YAML::Node> made;
    if (const auto it = made.find(key); it != made.end()) return it->second;
    if (made.size() >= 1024) made.clear();
    return made.emplace(key, empty[key]).first->second;
}

std::string Reader::scalar_text(const std::string& key, const char* expected) const {
    const YAML::Node v = value(key);
    if (!v.IsDefined() || v.IsNull()) fail(key, std::string("missing; expected ") + expected);
    if (!v.IsScalar()) fail(key, std::string("expected ") + expected + ", found " + describe(v));
    return v.Scalar();
}

std::string Reader::string(const std::string& key) const {
    return scalar_text(key, "a string");
}

std::filesystem::path Reader::path(const std::string& key) const {
    const std::string text = string(key);
    refuse_nul(text, location(key));
    return doc_->resolve(text);
}

std::string Reader::string_or(const std::string& key, const std::string& fallback) const {
    return has(key) ? string(key) : fallback;
}

std::int64_t Reader::integer(const std::string& key) const {
    const std::string text = scalar_text(key, "a whole number");
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (errno == ERANGE)
        fail(key, "\"" + text + "\" is out of range; expected a whole number from " +
                      std::to_string(std::numeric_limits<std::int64_t>::min()) + " to " +
                      std::to_string(std::numeric_limits<std::int64_t>::max()));
    if (text.empty() || *end != '\0') fail(key, "expected a whole number, found \"" + text + "\"");
    return v;
}

std::int64_t Reader::integer_or(const std::string& key, std::int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
}

std::int64_t Reader::count(const std::string& key, std::int64_t min_value) const {
    const auto v = integer(key);
    if (v < min_value)
        fail(key, "must be at least " + std::to_string(min_value) + ", found " + std::to_string(v));
    // Counts are stored as int: a larger value would wrap (4294967297 would become 1).
    if (v > kMaxCount)
        fail(key, "must be at most " + std::to_string(kMaxCount) + ", found " + std::to_string(v));
    return v;
}

std::int64_t Reader::count_or(const std::string& key, std::int64_t fallback,
                              std::int64_t min_value) const {
    return has(key) ? count(key, min_value) : fallback;
}

double Reader::number(const std::string& key) const {
    const std::string text = scalar_text(key, "a number");
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    // YAML spells infinity and NaN .inf and .nan, which strtod does not read.
    static const std::set<std::string> yaml_non_finite = {".inf",  ".Inf",  ".INF",  "+.inf",
                                                          "+.Inf", "+.INF", "-.inf", "-.Inf",
                                                          "-.INF", ".nan",  ".NaN",  ".NAN"};
    if (yaml_non_finite.count(text) || (!text.empty() && *end == '\0' && !std::isfinite(v)))
        fail(key, "expected a finite number, found \"" + text + "\"");
    if (text.empty() || *end != '\0') fail(key, "expected a plain number, found \"" + text + "\"");
    return v;
}

double Reader::number_or(const std::string& key, double fallback) const {
    return has(key) ? number(key) : fallback;
}

bool Reader::boolean_or(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const std::string text = scalar_text(key, "true or false");
    if (text == "true") return true;
    if (text == "false") return false;
    fail(key, "expected true or false, found \"" + text + "\"");
}

std::string join_alternatives(const std::vector<std::string>& options) {
    std::string out;
    for (std::size_t i = 0; i < options.size(); ++i) {
        if (i > 0) out += (i + 1 == options.size()) ? " or " : ", ";
        out += options[i];
    }
    return out;
}

std::string Reader::choice(const std::string& key, std::initializer_list<const char*> options,
                           const char* fallback) const {
    return choice(key, std::vector<std::string>(options.begin(), options.end()), fallback);
}

std::string Reader::choice(const std::string& key, const std::vector<std::string>& names,
                           const char* fallback) const {
    if (!has(key)) {
        if (fallback) return fallback;
        fail(key, "missing; expected one of " + join_alternatives(names));
    }
    const std::string text = scalar_text(key, "a name");
    for (const auto& n : names)
        if (n == text) return text;
    fail(key, "unknown value \"" + text + "\"; expected " + join_alternatives(names));
}

namespace {
template <typename T, typename Parse>
T parse_with_unit(const Reader& r, const std::string& key, Parse parse, const char* units,
                  const char* what, const char* limit) {
    const YAML::Node v = r.value(key);
    if (!v.IsDefined() || v.IsNull()) r.fail(key, std::string("missing; expected ") + what);
    if (!v.IsScalar()) r.fail(key, std::string("expected ") + what);
    const std::string text = v.Scalar();
    auto parsed = parse(text);
    if (!parsed) {
        char* end = nullptr;
        const double number = std::strtod(text.c_str(), &end);
        const bool read_number = end != text.c_str();
        const bool bare_number = !text.empty() && *end == '\0';
        // Say what is wrong: the sign, the magnitude (the unit alone reads, as "1" + unit), or
        // the unit.
        if (read_number && number < 0)
            r.fail(key, "\"" + text + "\" is negative, and " + what + " cannot be");
        if (read_number && !bare_number && parse("1" + std::string(end)))
            r.fail(key, "\"" + text + "\" is too large for " + what + " (" + limit +
                            "); check the number and its unit");
        r.fail(key, std::string(bare_number ? "missing unit in \"" : "cannot read \"") + text +
                        "\" as " + what + "; accepted units: " + units);
    }
    return *parsed;
}
}  // namespace

Time Reader::time(const std::string& key) const {
    return parse_with_unit<Time>(*this, key, parse_time, kTimeUnits, "a duration",
                                 "at most 9e6 s, about 104 days");
}
std::optional<Time> Reader::time_opt(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return time(key);
}
Bytes Reader::bytes(const std::string& key) const {
    return parse_with_unit<Bytes>(*this, key, parse_bytes, kBytesUnits, "a size",
                                  "at most 9e18 bytes");
}
std::optional<Bytes> Reader::bytes_opt(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return bytes(key);
}
Bandwidth Reader::bandwidth(const std::string& key) const {
    auto bw = parse_with_unit<Bandwidth>(*this, key, parse_bandwidth, kBandwidthUnits,
                                         "a bandwidth", "a finite number of bytes per second");
    if (!(bw.bytes_per_s > 0)) fail(key, "a bandwidth must be greater than zero");
    return bw;
}
std::optional<Bandwidth> Reader::bandwidth_opt(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return bandwidth(key);
}
FlopRate Reader::flop_rate(const std::string& key) const {
    auto r = parse_with_unit<FlopRate>(*this, key, parse_flop_rate, kFlopRateUnits,
                                       "a compute rate", "a finite number of FLOP/s");
    // Below a megaFLOP/s no processor computes: 1e-300 FLOP/s gave an MFU of inf%.
    if (!(r.flops_per_s >= 1e6))
        fail(key, "a compute rate must be at least 1 MFLOP/s (1e6 FLOP/s)");
    return r;
}

Reader Reader::map(const std::string& key) const {
    const YAML::Node v = value(key);
    if (!v.IsDefined() || v.IsNull()) fail(key, "missing; expected a mapping of keys to values");
    if (!v.IsMap()) fail(key, "expected a mapping of keys to values, found " + describe(v));
    return Reader(*doc_, v, child_path(key));
}

std::optional<Reader> Reader::map_opt(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return map(key);
}

std::vector<Reader> Reader::list_of_maps(const std::string& key) const {
    const YAML::Node v = value(key);
    std::vector<Reader> out;
    if (!v.IsDefined() || v.IsNull()) return out;
    if (!v.IsSequence()) fail(key, "expected a list, found " + describe(v));
    for (std::size_t i = 0; i < v.size(); ++i) {
        const YAML::Node item = v[i];
        Reader r(*doc_, item, child_path(key) + "." + std::to_string(i));
        if (!item.IsMap())
            r.fail_here("expected a mapping of keys to values, found " + describe(item));
        out.push_back(r);
    }
    return out;
}

std::vector<std::string> Reader::keys() const {
    std::vector<std::string> out;
    const YAML::Node& cn = node_;
    for (auto it = cn.begin(); it != cn.end(); ++it)
        out.push_back(it->first.Scalar());
    return out;
}

void Reader::finish() const {
    const YAML::Node& cn = node_;
    // Every scalar key asked for (the common case): nothing to report.
    if (cn.IsMap()) {
        const auto& entries = index();  // first: it notes other_keys_
        if (!other_keys_ &&
            std::all_of(entries.begin(), entries.end(), [](const Entry& e) { return e.accepted; }))
            return;
    }
    const auto accepted = [&](const std::string& k) {
        return std::find(accepted_order_.begin(), accepted_order_.end(), k) !=
               accepted_order_.end();
    };
    for (auto it = cn.begin(); it != cn.end(); ++it) {
        const std::string k = it->first.Scalar();
        if (accepted(k)) continue;
        // Given by --set (the key itself, a mapping above it, or, for a mapping --set created,
        // a key under it), else where the file has it.
        SourceLocation where = mark_location(doc_->display_path, it->first.Mark());
        if (auto o = override_location(child_path(k), it->first.Mark().is_null())) where = *o;
        std::vector<std::string> names(accepted_order_.begin(), accepted_order_.end());
        throw ConfigError(where, "unknown key '" + child_path(k) +
                                     "'; accepted keys here: " + join_alternatives(names));
    }
}

}  // namespace cs::config
