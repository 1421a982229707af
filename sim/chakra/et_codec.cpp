#include <array>
#include <cstring>
#include <unordered_set>

#include "chakra/et.hpp"
#include "core/errors.hpp"

namespace cs::chakra {

namespace {

// Wire types of the protobuf encoding.
constexpr int kWireVarint = 0, kWireFixed64 = 1, kWireDelimited = 2, kWireFixed32 = 5;

// Field numbers of et_def.proto.
namespace metadata_field {
constexpr int kVersion = 1, kAttr = 2;
}
namespace node_field {
constexpr int kId = 1, kName = 2, kType = 3, kCtrlDeps = 4, kDataDeps = 5, kStartTime = 6,
              kDuration = 7, kAttr = 10;
}
namespace attr_field {
constexpr int kName = 1, kDocString = 2, kDouble = 3, kFloat = 5, kInt32 = 7, kInt64 = 9,
              kUint32 = 11, kUint64 = 13, kSint32 = 15, kSint64 = 17, kFixed32 = 19, kFixed64 = 21,
              kSfixed32 = 23, kSfixed64 = 25, kBool = 27, kBoolList = 28, kString = 29, kBytes = 31,
              kLast = 32;
}

constexpr std::array<const char*, 33> kAttrFieldNames{"",
                                                      "name",
                                                      "doc_string",
                                                      "double_val",
                                                      "double_list",
                                                      "float_val",
                                                      "float_list",
                                                      "int32_val",
                                                      "int32_list",
                                                      "int64_val",
                                                      "int64_list",
                                                      "uint32_val",
                                                      "uint32_list",
                                                      "uint64_val",
                                                      "uint64_list",
                                                      "sint32_val",
                                                      "sint32_list",
                                                      "sint64_val",
                                                      "sint64_list",
                                                      "fixed32_val",
                                                      "fixed32_list",
                                                      "fixed64_val",
                                                      "fixed64_list",
                                                      "sfixed32_val",
                                                      "sfixed32_list",
                                                      "sfixed64_val",
                                                      "sfixed64_list",
                                                      "bool_val",
                                                      "bool_list",
                                                      "string_val",
                                                      "string_list",
                                                      "bytes_val",
                                                      "bytes_list"};

// The wire type the schema gives each oneof member of AttributeProto.
int attr_wire_type(int field) {
    using namespace attr_field;
    switch (field) {
        case kDouble:
        case kFixed64:
        case kSfixed64:
            return kWireFixed64;
        case kFloat:
        case kFixed32:
        case kSfixed32:
            return kWireFixed32;
        case kInt32:
        case kInt64:
        case kUint32:
        case kUint64:
        case kSint32:
        case kSint64:
        case kBool:
            return kWireVarint;
        default:
            return kWireDelimited;  // strings, bytes and every *_list message
    }
}

const char* wire_type_name(int wire) {
    switch (wire) {
        case kWireVarint:
            return "a varint";
        case kWireFixed64:
            return "a fixed64";
        case kWireDelimited:
            return "a length-delimited field";
        case kWireFixed32:
            return "a fixed32";
        default:
            return "a group (deprecated wire type)";
    }
}

// Reads protobuf wire format from a byte range; every error names the file, what is being read
// and the absolute byte offset.
class Cursor {
  public:
    Cursor(std::string_view bytes, std::size_t base, const std::string& label, std::string context)
        : bytes_(bytes), base_(base), label_(label), context_(std::move(context)) {}

    bool done() const { return pos_ >= bytes_.size(); }
    std::size_t offset() const { return base_ + pos_; }
    void set_context(std::string context) { context_ = std::move(context); }

    [[noreturn]] void fail(const std::string& what) const {
        throw ConfigError(SourceLocation{label_, 0, 0},
                          context_ + " (byte " + std::to_string(offset()) + "): " + what);
    }

    std::uint64_t varint(const char* what) {
        std::uint64_t v = 0;
        for (int shift = 0; shift < 70; shift += 7) {
            if (done()) fail("truncated " + std::string(what) + ": the file ends inside a varint");
            const auto b = static_cast<std::uint8_t>(bytes_[pos_++]);
            if (shift == 63 && b > 1) fail("a varint overflows 64 bits in " + std::string(what));
            v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
            if (!(b & 0x80)) return v;
        }
        fail("a varint longer than 10 bytes in " + std::string(what));
    }
    std::uint64_t fixed(int width, const char* what) {
        if (bytes_.size() - pos_ < static_cast<std::size_t>(width))
            fail("truncated " + std::string(what) + ": " + std::to_string(width) +
                 " bytes expected, " + std::to_string(bytes_.size() - pos_) + " left");
        std::uint64_t v = 0;
        for (int i = 0; i < width; ++i)
            v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(bytes_[pos_ + i])) << (8 * i);
        pos_ += static_cast<std::size_t>(width);
        return v;
    }
    // A length-delimited payload; `sub` gets a cursor over it.
    std::string_view delimited(const char* what) {
        const std::uint64_t n = varint(what);
        if (n > bytes_.size() - pos_)
            fail("truncated " + std::string(what) + ": it declares " + std::to_string(n) +
                 " bytes but " + std::to_string(bytes_.size() - pos_) + " remain");
        auto out = bytes_.substr(pos_, static_cast<std::size_t>(n));
        pos_ += static_cast<std::size_t>(n);
        return out;
    }
    Cursor sub(std::string_view payload, std::string context) const {
        return Cursor(payload, base_ + static_cast<std::size_t>(payload.data() - bytes_.data()),
                      label_, std::move(context));
    }
    // Skips a field of wire type `wire` the reader does not interpret.
    void skip(int wire, int field) {
        switch (wire) {
            case kWireVarint:
                varint("a skipped field");
                return;
            case kWireFixed64:
                fixed(8, "a skipped field");
                return;
            case kWireDelimited:
                delimited("a skipped field");
                return;
            case kWireFixed32:
                fixed(4, "a skipped field");
                return;
            default:
                fail("field " + std::to_string(field) + " has wire type " + std::to_string(wire) +
                     ", which no Chakra message uses (is this a Chakra ET?)");
        }
    }
    // Reads a tag: field number and wire type.
    std::pair<int, int> tag() {
        const std::uint64_t t = varint("a field tag");
        const auto field = t >> 3;
        if (field == 0 || field > 536870911) fail("invalid field number " + std::to_string(field));
        return {static_cast<int>(field), static_cast<int>(t & 7)};
    }
    void expect(int wire, int expected, const std::string& field) {
        if (wire != expected)
            fail("field " + field + " is " + wire_type_name(wire) + ", et_def.proto makes it " +
                 wire_type_name(expected));
    }
    const std::string& context() const { return context_; }

  private:
    std::string_view bytes_;
    std::size_t base_ = 0, pos_ = 0;
    const std::string& label_;
    std::string context_;
};

Attribute decode_attribute(Cursor c) {
    Attribute a;
    while (!c.done()) {
        const auto [field, wire] = c.tag();
        if (field == attr_field::kName) {
            c.expect(wire, kWireDelimited, "AttributeProto.name");
            a.name = std::string(c.delimited("an attribute name"));
        } else if (field == attr_field::kDocString) {
            c.expect(wire, kWireDelimited, "AttributeProto.doc_string");
            c.delimited("an attribute doc_string");
        } else if (field <= attr_field::kLast) {
            c.expect(
                wire, attr_wire_type(field),
                std::string("AttributeProto.") + kAttrFieldNames[static_cast<std::size_t>(field)]);
            a.field = field;
            if (wire == kWireVarint)
                a.raw = c.varint("an attribute value");
            else if (wire == kWireFixed64)
                a.raw = c.fixed(8, "an attribute value");
            else if (wire == kWireFixed32)
                a.raw = c.fixed(4, "an attribute value");
            else
                a.bytes = std::string(c.delimited("an attribute value"));
        } else {
            c.skip(wire, field);
        }
    }
    return a;
}

void decode_deps(Cursor& c, int wire, std::vector<std::uint64_t>& out, const char* what) {
    if (wire == kWireVarint) {
        out.push_back(c.varint(what));
        return;
    }
    c.expect(wire, kWireDelimited, what);
    Cursor packed = c.sub(c.delimited(what), c.context());
    while (!packed.done())
        out.push_back(packed.varint(what));
}

Node decode_node(Cursor c) {
    Node n;
    while (!c.done()) {
        const auto [field, wire] = c.tag();
        switch (field) {
            case node_field::kId:
                c.expect(wire, kWireVarint, "Node.id");
                n.id = c.varint("Node.id");
                c.set_context("node " + std::to_string(n.id));
                break;
            case node_field::kName:
                c.expect(wire, kWireDelimited, "Node.name");
                n.name = std::string(c.delimited("Node.name"));
                break;
            case node_field::kType:
                c.expect(wire, kWireVarint, "Node.type");
                n.type = c.varint("Node.type");
                break;
            case node_field::kCtrlDeps:
                decode_deps(c, wire, n.ctrl_deps, "Node.ctrl_deps");
                break;
            case node_field::kDataDeps:
                decode_deps(c, wire, n.data_deps, "Node.data_deps");
                break;
            case node_field::kStartTime:
                c.expect(wire, kWireVarint, "Node.start_time_micros");
                n.start_time_micros = c.varint("Node.start_time_micros");
                break;
            case node_field::kDuration:
                c.expect(wire, kWireVarint, "Node.duration_micros");
                n.duration_micros = c.varint("Node.duration_micros");
                break;
            case node_field::kAttr: {
                c.expect(wire, kWireDelimited, "Node.attr");
                const auto payload = c.delimited("Node.attr");
                n.attrs.push_back(decode_attribute(c.sub(payload, c.context() + ", an attribute")));
                break;
            }
            default:
                c.skip(wire, field);
                n.skipped_fields.push_back(field);
        }
    }
    return n;
}

// Appending writers of the wire format into a caller's buffer (EtEncoder reuses its buffers).
void put_varint(std::string& out, std::uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>(v | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire) {
    put_varint(out, static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire));
}
void put_varint_field(std::string& out, int field, std::uint64_t v) {
    put_tag(out, field, kWireVarint);
    put_varint(out, v);
}
void put_bytes_field(std::string& out, int field, std::string_view bytes) {
    put_tag(out, field, kWireDelimited);
    put_varint(out, bytes.size());
    out.append(bytes);
}
void put_fixed(std::string& out, std::uint64_t v, int width) {
    for (int i = 0; i < width; ++i)
        out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The AttributeProto message of `a` (without tag or length), appended to `out`.
void put_attribute(std::string& out, const Attribute& a) {
    put_bytes_field(out, attr_field::kName, a.name);
    if (a.field <= 0) return;
    switch (attr_wire_type(a.field)) {
        case kWireVarint:
            put_varint_field(out, a.field, a.raw);
            break;
        case kWireFixed64:
            put_tag(out, a.field, kWireFixed64);
            put_fixed(out, a.raw, 8);
            break;
        case kWireFixed32:
            put_tag(out, a.field, kWireFixed32);
            put_fixed(out, a.raw, 4);
            break;
        default:
            put_bytes_field(out, a.field, a.bytes);
    }
}

// A packed repeated varint field; `scratch` holds the payload.
void put_packed(std::string& out, std::string& scratch, int field,
                const std::vector<std::uint64_t>& values) {
    if (values.empty()) return;
    scratch.clear();
    for (const auto v : values)
        put_varint(scratch, v);
    put_bytes_field(out, field, scratch);
}

// The Node message of `n` (without length), appended to `out`; `attr` and `scratch` are
// buffers of the caller's.
void put_node(std::string& out, std::string& attr, std::string& scratch, const Node& n) {
    if (n.id) put_varint_field(out, node_field::kId, n.id);
    if (!n.name.empty()) put_bytes_field(out, node_field::kName, n.name);
    if (n.type) put_varint_field(out, node_field::kType, n.type);
    put_packed(out, scratch, node_field::kCtrlDeps, n.ctrl_deps);
    put_packed(out, scratch, node_field::kDataDeps, n.data_deps);
    if (n.start_time_micros) put_varint_field(out, node_field::kStartTime, n.start_time_micros);
    if (n.duration_micros) put_varint_field(out, node_field::kDuration, n.duration_micros);
    for (const auto& a : n.attrs) {
        attr.clear();
        put_attribute(attr, a);
        put_bytes_field(out, node_field::kAttr, attr);
    }
}

void put_metadata(std::string& out, std::string& attr, const EtFile& et) {
    if (!et.version.empty()) put_bytes_field(out, metadata_field::kVersion, et.version);
    for (const auto& a : et.metadata) {
        attr.clear();
        put_attribute(attr, a);
        put_bytes_field(out, metadata_field::kAttr, attr);
    }
}

}  // namespace

std::string node_type_name(std::uint64_t type) {
    static constexpr std::array<const char*, 11> kNames{
        "INVALID_NODE", "METADATA_NODE",  "MEM_LOAD_NODE",  "MEM_STORE_NODE",
        "COMP_NODE",    "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE",
        "STORAGE_NODE", "BATCH_NODE",     "CHECKPOINT_NODE"};
    if (type < kNames.size()) return kNames[type];
    return "NodeType " + std::to_string(type);
}

std::string comm_type_name(std::int64_t type) {
    static constexpr std::array<const char*, 10> kNames{
        "ALL_REDUCE", "REDUCE",         "ALL_GATHER",           "GATHER", "SCATTER", "BROADCAST",
        "ALL_TO_ALL", "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER"};
    if (type >= 0 && type < static_cast<std::int64_t>(kNames.size()))
        return kNames[static_cast<std::size_t>(type)];
    return "CollectiveCommType " + std::to_string(type);
}

Attribute Attribute::int32(std::string name, std::int32_t v) {
    return Attribute{std::move(name),
                     attr_field::kInt32,
                     static_cast<std::uint64_t>(static_cast<std::int64_t>(v)),
                     {}};
}
Attribute Attribute::int64(std::string name, std::int64_t v) {
    return Attribute{std::move(name), attr_field::kInt64, static_cast<std::uint64_t>(v), {}};
}
Attribute Attribute::uint64(std::string name, std::uint64_t v) {
    return Attribute{std::move(name), attr_field::kUint64, v, {}};
}
Attribute Attribute::boolean(std::string name, bool v) {
    return Attribute{std::move(name), attr_field::kBool, v ? 1u : 0u, {}};
}
Attribute Attribute::string(std::string name, std::string v) {
    return Attribute{std::move(name), attr_field::kString, 0, std::move(v)};
}

Attribute Attribute::bool_list(std::string name, const std::vector<bool>& v) {
    std::string values;
    for (const bool b : v)
        put_varint(values, b ? 1 : 0);
    std::string list;
    put_bytes_field(list, 1, values);
    return Attribute{std::move(name), attr_field::kBoolList, 0, list};
}

std::optional<std::vector<bool>> Attribute::as_bool_list() const {
    if (field != attr_field::kBoolList) return std::nullopt;
    // BoolList { repeated bool values = 1; }: packed (one delimited run of varints) or one
    // varint per value; other fields are skipped as protobuf readers do.
    std::vector<bool> out;
    std::size_t pos = 0;
    const auto varint = [&](std::uint64_t& v) {
        v = 0;
        for (int shift = 0; shift < 64 && pos < bytes.size(); shift += 7) {
            const auto b = static_cast<std::uint8_t>(bytes[pos++]);
            v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
            if (!(b & 0x80)) return true;
        }
        return false;
    };
    while (pos < bytes.size()) {
        std::uint64_t tag = 0;
        if (!varint(tag)) return std::nullopt;
        const auto wire = static_cast<int>(tag & 7);
        const auto number = tag >> 3;
        std::uint64_t v = 0;
        if (wire == kWireVarint) {
            if (!varint(v)) return std::nullopt;
            if (number == 1) out.push_back(v != 0);
        } else if (wire == kWireDelimited) {
            if (!varint(v) || v > bytes.size() - pos) return std::nullopt;
            const std::size_t end = pos + static_cast<std::size_t>(v);
            if (number != 1) {
                pos = end;
                continue;
            }
            while (pos < end) {
                if (!varint(v) || pos > end) return std::nullopt;
                out.push_back(v != 0);
            }
        } else if (wire == kWireFixed64 && bytes.size() - pos >= 8) {
            pos += 8;
        } else if (wire == kWireFixed32 && bytes.size() - pos >= 4) {
            pos += 4;
        } else {
            return std::nullopt;
        }
    }
    return out;
}

std::optional<std::int64_t> Attribute::as_int() const {
    using namespace attr_field;
    switch (field) {
        case kInt32:
            return static_cast<std::int32_t>(static_cast<std::uint32_t>(raw));
        case kInt64:
        case kFixed64:
        case kSfixed64:
            return static_cast<std::int64_t>(raw);
        case kUint32:
        case kFixed32:
            return static_cast<std::int64_t>(static_cast<std::uint32_t>(raw));
        case kUint64:
            return static_cast<std::int64_t>(raw);
        case kSint32:
        case kSint64:
            return static_cast<std::int64_t>(raw >> 1) ^ -static_cast<std::int64_t>(raw & 1);
        case kSfixed32:
            return static_cast<std::int32_t>(static_cast<std::uint32_t>(raw));
        case kBool:
            return raw != 0 ? 1 : 0;
        default:
            return std::nullopt;
    }
}

std::optional<bool> Attribute::as_bool() const {
    if (field == attr_field::kBool) return raw != 0;
    if (auto i = as_int()) return *i != 0;
    return std::nullopt;
}

std::optional<std::string> Attribute::as_string() const {
    if (field == attr_field::kString || field == attr_field::kBytes) return bytes;
    return std::nullopt;
}

const char* Attribute::field_name() const {
    if (field <= 0 || field > attr_field::kLast) return "no value";
    return kAttrFieldNames[static_cast<std::size_t>(field)];
}

const Attribute* Node::attr(std::string_view want) const {
    for (const auto& a : attrs)
        if (a.name == want) return &a;
    return nullptr;
}

EtFile decode_et(std::string_view bytes, const std::string& label, std::int64_t* budget) {
    EtFile et;
    if (bytes.empty())
        throw ConfigError(SourceLocation{label, 0, 0},
                          "the file is empty: a Chakra ET starts with a length-prefixed "
                          "GlobalMetadata message");
    Cursor file(bytes, 0, label, "the GlobalMetadata message");
    {
        Cursor meta =
            file.sub(file.delimited("the GlobalMetadata message"), "the GlobalMetadata message");
        while (!meta.done()) {
            const auto [field, wire] = meta.tag();
            if (field == metadata_field::kVersion) {
                if (wire != kWireDelimited)
                    meta.fail("the first message is not a GlobalMetadata (its field 1 is " +
                              std::string(wire_type_name(wire)) +
                              ", a string in GlobalMetadata; a Node's id is a varint: the file may "
                              "lack the GlobalMetadata message that ASTRA-sim 2.x reads first)");
                et.version = std::string(meta.delimited("GlobalMetadata.version"));
            } else if (field == metadata_field::kAttr) {
                meta.expect(wire, kWireDelimited, "GlobalMetadata.attr");
                const auto payload = meta.delimited("GlobalMetadata.attr");
                et.metadata.push_back(
                    decode_attribute(meta.sub(payload, "a GlobalMetadata attribute")));
            } else {
                meta.fail("the first message is not a GlobalMetadata: it has field " +
                          std::to_string(field) +
                          " (GlobalMetadata has version = 1 and attr = 2 only)");
            }
        }
    }
    std::size_t index = 0;
    // Node ids seen: a repeated one is refused where it is read, not after the whole file is
    // decoded (a file of zeros is a node of id 0 per byte: 48 MiB of them took 10 GB first).
    std::unordered_set<std::uint64_t> ids;
    while (!file.done()) {
        ++index;
        const std::string where =
            "node message " + std::to_string(index) + " (after node " +
            (et.nodes.empty() ? std::string("none") : std::to_string(et.nodes.back().id)) + ")";
        file.set_context(where);
        const auto payload = file.delimited("a Node message");
        et.nodes.push_back(decode_node(file.sub(payload, where)));
        if (!ids.insert(et.nodes.back().id).second)
            throw ConfigError(SourceLocation{label, 0, 0},
                              "node message " + std::to_string(index) + ": node " +
                                  std::to_string(et.nodes.back().id) +
                                  ": a second node with this id (node ids must be unique in a "
                                  "file)");
        if (budget) {
            const Node& n = et.nodes.back();
            // kIdBytes: the id's entry in `ids` (a hash node and its bucket).
            constexpr std::size_t kIdBytes = 32;
            std::size_t held = sizeof(Node) + kIdBytes + n.name.size() +
                               (n.ctrl_deps.size() + n.data_deps.size()) * sizeof(std::uint64_t) +
                               n.skipped_fields.size() * sizeof(int);
            for (const auto& a : n.attrs)
                held += sizeof(Attribute) + a.name.size() + a.bytes.size();
            *budget -= static_cast<std::int64_t>(held);
            if (*budget < 0)
                throw ConfigError(SourceLocation{label, 0, 0},
                                  "at node message " + std::to_string(index) +
                                      ": the ETs' nodes read so far, and the program built from "
                                      "them, would take more than --max-memory; raise it or "
                                      "give fewer or smaller ETs");
        }
    }
    return et;
}

std::string encode_node(const Node& n) {
    std::string out, attr, scratch;
    put_node(out, attr, scratch, n);
    return out;
}

std::string encode_metadata(const EtFile& et) {
    std::string out, attr;
    put_metadata(out, attr, et);
    return out;
}

const std::string& EtEncoder::encode(const EtFile& et) {
    out_.clear();
    message_.clear();
    put_metadata(message_, attr_, et);
    put_varint(out_, message_.size());
    out_.append(message_);
    for (const auto& n : et.nodes) {
        message_.clear();
        put_node(message_, attr_, scratch_, n);
        put_varint(out_, message_.size());
        out_.append(message_);
    }
    return out_;
}

std::string encode_et(const EtFile& et) {
    EtEncoder encoder;
    return encoder.encode(et);
}

}  // namespace cs::chakra
