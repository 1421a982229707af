// Chakra execution traces (ETs) in memory, and their wire format: the messages of et_def.proto
// (this folder) encoded and decoded by hand, in the framing ASTRA-sim 2.x reads: a GlobalMetadata
// message, then Node messages, each preceded by its length as a varint.
//
// The codec keeps what it does not interpret: an attribute is its name, the number of the oneof
// field that holds its value and the value's raw wire form, so that the reader can report an
// attribute it does not use by name and the accessors convert any integer encoding. Decoding
// errors are ConfigErrors naming the file, the message (the node id once it is known) and the
// byte offset.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cs::chakra {

// NodeType of et_def.proto.
enum class NodeType : std::uint8_t {
    Invalid = 0,
    Metadata = 1,
    MemLoad = 2,
    MemStore = 3,
    Comp = 4,
    CommSend = 5,
    CommRecv = 6,
    CommColl = 7,
    Storage = 8,
    Batch = 9,
    Checkpoint = 10,
};
// "COMP_NODE", ...; "NodeType 42" for a value outside the enum.
std::string node_type_name(std::uint64_t type);

// CollectiveCommType of et_def.proto (a COMM_COLL_NODE's "comm_type" attribute).
enum class CollectiveCommType : std::uint8_t {
    AllReduce = 0,
    Reduce = 1,
    AllGather = 2,
    Gather = 3,
    Scatter = 4,
    Broadcast = 5,
    AllToAll = 6,
    ReduceScatter = 7,
    ReduceScatterBlock = 8,
    Barrier = 9,
};
std::string comm_type_name(std::int64_t type);  // "ALL_REDUCE", ...

// An AttributeProto: `field` is the number of the oneof member set (et_def.proto: 3 double_val,
// 7 int32_val, 9 int64_val, 13 uint64_val, 27 bool_val, 29 string_val, ...; 0 when none is).
// Scalars keep their wire value in `raw` (a varint, or the bits of a fixed32/fixed64/float/
// double), strings, bytes and lists their bytes in `bytes`.
struct Attribute {
    std::string name;
    int field = 0;
    std::uint64_t raw = 0;
    std::string bytes;

    static Attribute int32(std::string name, std::int32_t v);
    static Attribute int64(std::string name, std::int64_t v);
    static Attribute uint64(std::string name, std::uint64_t v);
    static Attribute boolean(std::string name, bool v);
    static Attribute string(std::string name, std::string v);
    // A bool_list (BoolList, values packed), as ASTRA-sim's feeder reads "involved_dim".
    static Attribute bool_list(std::string name, const std::vector<bool>& v);

    // The value as a signed integer, whichever integer or bool field holds it; nullopt for a
    // double, a string or a list.
    std::optional<std::int64_t> as_int() const;
    std::optional<bool> as_bool() const;
    std::optional<std::string> as_string() const;  // string_val or bytes_val
    // The values of a bool_list (packed or not); nullopt for any other member or a list whose
    // bytes are no BoolList message.
    std::optional<std::vector<bool>> as_bool_list() const;
    const char* field_name() const;  // "int64_val", ...
};

struct Node {
    std::uint64_t id = 0;
    std::string name;
    std::uint64_t type = 0;  // NodeType, kept as read so that unknown values can be reported
    std::vector<std::uint64_t> ctrl_deps, data_deps;
    std::uint64_t start_time_micros = 0;
    std::uint64_t duration_micros = 0;
    std::vector<Attribute> attrs;
    // Node fields the reader skipped (inputs 8, outputs 9, storage 11, unknown numbers).
    std::vector<int> skipped_fields;

    const Attribute* attr(std::string_view name) const;
};

struct EtFile {
    std::string version;
    std::vector<Attribute> metadata;  // GlobalMetadata.attr
    std::vector<Node> nodes;          // in file order
};

// The whole file as bytes. `label` names the file in errors. Throws ConfigError: truncated
// messages, a first message that is no GlobalMetadata, wire types that contradict the schema,
// varints longer than ten bytes.
// With `budget`, each decoded node's memory (its struct, name, dependencies and attributes) is
// taken from *budget, and a file whose nodes would take more than is left is refused, naming
// the node count and --max-memory: a file of zeros decodes to a node per byte.
EtFile decode_et(std::string_view bytes, const std::string& label, std::int64_t* budget = nullptr);
std::string encode_et(const EtFile& et);
// encode_et into buffers it keeps from call to call, so that encoding file after file allocates
// only when a file is larger than every one before (chakra export). One per thread.
class EtEncoder {
  public:
    // The file's bytes, valid until the next call.
    const std::string& encode(const EtFile& et);

  private:
    std::string out_, message_, attr_, scratch_;
};
// One message without its length prefix (the tests hand it to protoc --decode).
std::string encode_node(const Node& node);
std::string encode_metadata(const EtFile& et);

}  // namespace cs::chakra
