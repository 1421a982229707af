// The hand-rolled codec of et_def.proto: wire encodings byte for byte, attributes in any integer
// encoding, and the located errors of files that are not Chakra ETs.
#include <doctest/doctest.h>

#include <string>

#include "../error_of.hpp"
#include "chakra/et.hpp"

using namespace cs::chakra;
using cs::test::error_of;

namespace {
std::string bytes(std::initializer_list<int> b) {
    std::string s;
    for (int c : b)
        s.push_back(static_cast<char>(c));
    return s;
}
}  // namespace

TEST_CASE("encode_node: the wire bytes of a small node") {
    Node n;
    n.id = 300;  // varint 300 = 0xAC 0x02
    n.type = static_cast<std::uint64_t>(NodeType::Comp);
    n.data_deps = {1, 2};
    n.attrs.push_back(Attribute::int32("comm_dst", -1));
    // id: tag (1 << 3 | 0) = 0x08, 0xAC 0x02; type: 0x18 0x04; data_deps packed: tag
    // (5 << 3 | 2) = 0x2A, length 2, 1, 2; attr: tag (10 << 3 | 2) = 0x52, length 0x15 (21):
    // name "comm_dst" (0x0A 0x08 + 8 bytes) and int32_val -1 (tag 0x38, sign-extended to ten
    // bytes 0xFF x 9, 0x01), 10 + 11 = 21 bytes.
    const std::string expected =
        bytes({0x08, 0xAC, 0x02, 0x18, 0x04, 0x2A, 0x02, 0x01, 0x02, 0x52, 0x15, 0x0A, 0x08}) +
        "comm_dst" + bytes({0x38, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01});
    CHECK(encode_node(n) == expected);
}

TEST_CASE("decode_et reads back what encode_et writes, deps packed or not") {
    EtFile et;
    et.version = "0.0.4";
    et.metadata.push_back(Attribute::string("schedule", "1f1b"));
    Node a;
    a.id = 1;
    a.name = "a";
    a.type = static_cast<std::uint64_t>(NodeType::CommColl);
    a.duration_micros = 7;
    a.attrs = {Attribute::int64("comm_type", 7), Attribute::uint64("comm_size", 1ull << 40),
               Attribute::boolean("cs_costed_alone", true), Attribute::string("pg_name", "2")};
    Node b;
    b.id = 2;
    b.ctrl_deps = {1};
    et.nodes = {a, b};
    const EtFile back = decode_et(encode_et(et), "x.0.et");
    CHECK(back.version == "0.0.4");
    REQUIRE(back.metadata.size() == 1);
    CHECK(back.metadata[0].as_string() == "1f1b");
    REQUIRE(back.nodes.size() == 2);
    CHECK(back.nodes[0].name == "a");
    CHECK(back.nodes[0].duration_micros == 7);
    CHECK(back.nodes[0].attr("comm_type")->as_int() == 7);
    CHECK(back.nodes[0].attr("comm_size")->as_int() == (1ll << 40));
    CHECK(back.nodes[0].attr("cs_costed_alone")->as_bool() == true);
    CHECK(back.nodes[0].attr("pg_name")->as_string() == "2");
    CHECK(back.nodes[1].ctrl_deps == std::vector<std::uint64_t>{1});

    // An unpacked repeated field (one varint per element, as proto2 writers do) reads the same:
    // metadata {} then node {id 2, ctrl_deps 1, ctrl_deps 3}.
    const std::string unpacked = bytes({0x00, 0x06, 0x08, 0x02, 0x20, 0x01, 0x20, 0x03});
    CHECK(decode_et(unpacked, "u.0.et").nodes[0].ctrl_deps == std::vector<std::uint64_t>{1, 3});
}

TEST_CASE("Attribute::as_int: every integer encoding of the oneof") {
    // sint64_val (17) zigzag: 3 -> -2; sfixed32_val (23): 0xFFFFFFFE -> -2; uint32_val (11).
    CHECK(Attribute{"s", 17, 3, {}}.as_int() == -2);
    CHECK(Attribute{"s", 23, 0xFFFFFFFEu, {}}.as_int() == -2);
    CHECK(Attribute{"u", 11, 4000000000u, {}}.as_int() == 4000000000ll);
    CHECK(Attribute{"b", 27, 1, {}}.as_int() == 1);
    CHECK(!Attribute{"d", 3, 0, {}}.as_int());  // a double is no integer
    CHECK(!Attribute::string("p", "x").as_int());
}

TEST_CASE("decode_et: located errors for files that are not Chakra ETs") {
    // A Node where the GlobalMetadata should be: field 1 is a varint (the id), not a string.
    CHECK(error_of([] {
              decode_et(bytes({0x02, 0x08, 0x01}), "n.0.et");
          }) ==
          "n.0.et: the GlobalMetadata message (byte 2): the first message is not a "
          "GlobalMetadata (its field 1 is a varint, a string in GlobalMetadata; a Node's id is a "
          "varint: the file may lack the GlobalMetadata message that ASTRA-sim 2.x reads first)");
    // A node message that declares 9 bytes with 2 left.
    CHECK(error_of([] {
              decode_et(bytes({0x00, 0x09, 0x08, 0x05}), "t.0.et");
          }) ==
          "t.0.et: node message 1 (after node none) (byte 2): truncated a Node message: it "
          "declares 9 bytes but 2 remain");
    // Node 5's type written as a string.
    CHECK(error_of([] {
              decode_et(bytes({0x00, 0x05, 0x08, 0x05, 0x1A, 0x01, 0x41}), "w.0.et");
          }) ==
          "w.0.et: node 5 (byte 5): field Node.type is a length-delimited field, et_def.proto "
          "makes it a varint");
    CHECK(error_of([] { decode_et("", "e.0.et"); }).find("the file is empty") != std::string::npos);
    // An empty metadata, then three zero bytes: three empty node messages, all of id 0. The
    // second is refused as it is read (issue 40: a file of zeros was decoded whole first).
    CHECK(error_of([] {
              decode_et(bytes({0x00, 0x00, 0x00, 0x00}), "z.0.et");
          }) ==
          "z.0.et: node message 2: node 0: a second node with this id (node ids must be unique "
          "in a file)");
    // Eleven continuation bytes: no varint is that long.
    CHECK(error_of([] {
              decode_et(bytes({0x00, 0x0C, 0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                               0x80, 0x80, 0x01}),
                        "v.0.et");
          }).find("varint") != std::string::npos);
}
