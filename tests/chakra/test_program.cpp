// The reader's checks and the executor's semantics on ET files built in memory: dependencies,
// matching of collectives and messages, one compute stream per rank, the roofline.
#include <doctest/doctest.h>

#include <string>

#include "../error_of.hpp"
#include "chakra/execute.hpp"
#include "chakra/program.hpp"
#include "ingest/inputs.hpp"

using namespace cs;
using namespace cs::chakra;
using cs::test::error_of;

namespace {

const std::string kNominal =
    std::string(CLUSTERSIM_SOURCE_DIR) + "/tests/chakra/data/two-gpus-nominal.yaml";

Node comp(std::uint64_t id, std::int64_t ps, std::vector<std::uint64_t> deps = {}) {
    Node n;
    n.id = id;
    n.type = static_cast<std::uint64_t>(NodeType::Comp);
    n.data_deps = std::move(deps);
    n.attrs = {Attribute::int64(kDurationPsAttr, ps)};
    return n;
}

Node coll(std::uint64_t id, CollectiveCommType type, std::int64_t size, std::string group = "") {
    Node n;
    n.id = id;
    n.type = static_cast<std::uint64_t>(NodeType::CommColl);
    n.attrs = {Attribute::int64("comm_type", static_cast<std::int64_t>(type)),
               Attribute::int64("comm_size", size)};
    if (!group.empty()) n.attrs.push_back(Attribute::string("pg_name", group));
    return n;
}

EtFile file(std::vector<Node> nodes) {
    EtFile f;
    f.nodes = std::move(nodes);
    return f;
}

Program two(std::vector<Node> a, std::vector<Node> b,
            std::map<std::string, std::vector<int>> groups = {}) {
    return build_program({file(std::move(a)), file(std::move(b))}, {"r.0.et", "r.1.et"},
                         std::move(groups), "r");
}

Time run(const Program& p) {
    const auto spec = api::load_experiment({kNominal, {}, ""});
    return execute(p, *spec.cluster, spec.network).iteration_time;
}

}  // namespace

TEST_CASE("execute: one compute stream per rank, the host and memory beside it") {
    // Rank 0: two independent compute nodes of 3 us and 5 us share the GPU: 8 us. A CPU node of
    // 6 us (is_cpu_op) and a memory node (4.8e6 B at 4.8 TB/s = 1 us) run beside them.
    Node cpu = comp(3, 6'000'000);
    cpu.attrs.push_back(Attribute::boolean("is_cpu_op", true));
    Node mem;
    mem.id = 4;
    mem.type = static_cast<std::uint64_t>(NodeType::MemLoad);
    mem.attrs = {Attribute::uint64("tensor_size", 4'800'000)};
    CHECK(run(two({comp(1, 3'000'000), comp(2, 5'000'000), cpu, mem}, {})) == Time::us(8));
    // The roofline: 989e6 FLOPs at 989 TFLOPS = 1 us; 9.6e6 bytes at 4.8 TB/s = 2 us: 2 us.
    Node roof;
    roof.id = 1;
    roof.type = static_cast<std::uint64_t>(NodeType::Comp);
    roof.attrs = {Attribute::int64("num_ops", 989'000'000),
                  Attribute::uint64("tensor_size", 9'600'000)};
    CHECK(run(two({roof}, {})) == Time::us(2));
    // duration_micros when there is no cs_duration_ps.
    Node micros;
    micros.id = 1;
    micros.type = static_cast<std::uint64_t>(NodeType::Comp);
    micros.duration_micros = 7;
    CHECK(run(two({micros}, {})) == Time::us(7));
}

TEST_CASE("execute: a collective starts when every member has reached it") {
    // Rank 0 reaches the barrier at 2 us, rank 1 at 5 us; both continue from 5 us with 1 us.
    Node a2 = comp(3, 1'000'000, {2});
    Node b2 = comp(3, 1'000'000, {2});
    Node ba = coll(2, CollectiveCommType::Barrier, 0);
    Node bb = coll(2, CollectiveCommType::Barrier, 0);
    ba.data_deps = {1};
    bb.data_deps = {1};
    CHECK(run(two({comp(1, 2'000'000), ba, a2}, {comp(1, 5'000'000), bb, b2})) == Time::us(6));
}

TEST_CASE("build_program: located errors") {
    CHECK(error_of([] {
              two({comp(1, 1), comp(1, 1)}, {});
          }) == "r.0.et: node 1: a second node with this id (node ids must be unique in a file)");
    CHECK(error_of([] { two({comp(1, 1, {1})}, {}); }) == "r.0.et: node 1: depends on itself");
    CHECK(error_of([] {
              two({comp(1, 1, {2}), comp(2, 1, {1})}, {});
          }) ==
          "r.0.et: node 1: dependency cycle: 1 -> 2 -> 1 (each node waits for the next; "
          "dependencies must form a DAG)");
    // The second all-reduce on all ranks has no partner on rank 1.
    CHECK(error_of([] {
              two({coll(1, CollectiveCommType::AllReduce, 8),
                   coll(2, CollectiveCommType::AllReduce, 8)},
                  {coll(1, CollectiveCommType::AllReduce, 8)});
          }) ==
          "r.0.et: node 2: the 2nd collective of rank 0 on all ranks has no match: rank 1 "
          "(r.1.et) issues 1 there (every member issues the same collectives in the same "
          "order)");
    CHECK(error_of([] {
              two({coll(1, CollectiveCommType::AllReduce, 8)},
                  {coll(5, CollectiveCommType::AllGather, 8)});
          }) ==
          "r.1.et: node 5: the 1st collective on all ranks is ALL_GATHER of 8 bytes here but "
          "ALL_REDUCE of 8 bytes on rank 0 (node 1 of r.0.et)");
    CHECK(error_of([] {
              two({coll(1, CollectiveCommType::AllReduce, 8, "tp")}, {}, {{"tp", {1}}});
          }) == "r.0.et: node 1: rank 0 is not a member of communicator \"tp\"");
    CHECK(error_of([] { two({coll(1, CollectiveCommType::AllReduce, 8, "dp")}, {}); }) ==
          "r.0.et: node 1: communicator \"dp\" is not in comm_groups.json of the folder (there is "
          "none)");
    CHECK(error_of([] {
              two({}, {}, {{"g", {0, 2}}});
          }) ==
          "r/comm_groups.json: communicator \"g\" lists rank 2, which has no ET file: the folder "
          "holds ranks 0-1 (r.0.et ... r.1.et)");
    Node send;
    send.id = 3;
    send.type = static_cast<std::uint64_t>(NodeType::CommSend);
    send.attrs = {Attribute::int32("comm_dst", 1), Attribute::int64("comm_size", 8)};
    CHECK(error_of([&] { two({send}, {}); }) ==
          "r.0.et: node 3: the 1st send from rank 0 to rank 1 with tag 0 has no receive: r.1.et "
          "has 0 COMM_RECV_NODEs with comm_src 0 and comm_tag 0");
    Node bad = coll(4, CollectiveCommType::AllReduce, 8);
    bad.attrs[0] = Attribute::int64("comm_type", 12);
    CHECK(error_of([&] { two({bad}, {}); }) ==
          "r.0.et: node 4: comm_type 12 is no CollectiveCommType; expected 0 (ALL_REDUCE) to 9 "
          "(BARRIER)");
    // 256 is no ALL_REDUCE (0) in disguise.
    bad.attrs[0] = Attribute::int64("comm_type", 256);
    CHECK(error_of([&] { two({bad}, {}); }).find("comm_type 256 is no CollectiveCommType") !=
          std::string::npos);
}

TEST_CASE("build_program: unknown types and attributes are reported once each") {
    Node odd;
    odd.id = 2;
    odd.type = 260;  // not COMP_NODE (4) modulo 256
    odd.attrs = {Attribute::string("shape", "x")};
    Node odd2 = odd;
    odd2.id = 3;
    Node c = comp(1, 1);
    c.attrs.push_back(Attribute::string("shape", "y"));
    const Program p = two({c, odd, odd2}, {});
    REQUIRE(p.warnings.size() == 2);
    CHECK(p.warnings[0] == "attribute \"shape\" (first seen on node 1 of r.0.et) is not used");
    CHECK(p.warnings[1].find("NodeType 260 nodes (first: node 2 of r.0.et) take no time") == 0);
}
