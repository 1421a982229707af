// ASTRA-sim 2.x's meaning of an ET, checked on hand-written ETs that go through the wire format
// (encode_et, decode_et): comm_size per collective type (astra-sim/system/collective/Ring.cc)
// and involved_dim, the network dimensions a collective without a communicator spans
// (astra-sim/system/Sys.cc, generate_collective; topology/GeneralComplexTopology.cc).
#include <doctest/doctest.h>

#include <numeric>
#include <string>

#include "../error_of.hpp"
#include "chakra/execute.hpp"
#include "chakra/program.hpp"
#include "ingest/inputs.hpp"
#include "session/collective.hpp"

using namespace cs;
using namespace cs::chakra;
using cs::test::error_of;

namespace {

const std::string kData = std::string(CLUSTERSIM_SOURCE_DIR) + "/tests/chakra/data/";

Node coll(std::uint64_t id, CollectiveCommType type, std::int64_t size,
          std::vector<Attribute> extra = {}) {
    Node n;
    n.id = id;
    n.name = "coll";
    n.type = static_cast<std::uint64_t>(NodeType::CommColl);
    n.attrs = {Attribute::int64("comm_type", static_cast<std::int64_t>(type)),
               Attribute::int64("comm_size", size)};
    for (auto& a : extra)
        n.attrs.push_back(std::move(a));
    return n;
}

// `ranks` files of the given nodes, each encoded and decoded as a file on disk would be.
Program folder(int ranks, const std::vector<Node>& nodes, std::vector<int> dims = {},
               std::map<std::string, std::vector<int>> groups = {}) {
    std::vector<EtFile> files;
    std::vector<std::string> names;
    for (int r = 0; r < ranks; ++r) {
        EtFile f;
        f.version = "0.0.4";
        f.nodes = nodes;
        const std::string name = "a." + std::to_string(r) + ".et";
        files.push_back(decode_et(encode_et(f), name));
        names.push_back(name);
    }
    return build_program(std::move(files), names, std::move(groups), "a", dims);
}

Time run_on(const Program& p, const std::string& experiment, std::vector<std::string> sets = {}) {
    const auto spec = api::load_experiment({experiment, std::move(sets), ""});
    return execute(p, *spec.cluster, spec.network).iteration_time;
}

}  // namespace

TEST_CASE("bool_list attributes: encoded packed, read packed or not") {
    const Attribute a = Attribute::bool_list("involved_dim", {true, false, true});
    // BoolList: field 1 packed: tag (1 << 3 | 2) = 0x0A, length 3, values 1 0 1.
    CHECK(a.bytes == std::string("\x0A\x03\x01\x00\x01", 5));
    Node n;
    n.id = 1;
    n.attrs = {a};
    EtFile f;
    f.nodes = {n};
    // The decoded file is kept: attr() points into it.
    const EtFile decoded = decode_et(encode_et(f), "x.0.et");
    const auto back = decoded.nodes[0].attr("involved_dim");
    REQUIRE(back);
    CHECK(back->as_bool_list() == std::vector<bool>{true, false, true});
    // Unpacked: one tag 0x08 and varint per value.
    Attribute unpacked = a;
    unpacked.bytes = std::string("\x08\x00\x08\x01", 4);
    CHECK(unpacked.as_bool_list() == std::vector<bool>{false, true});
    CHECK_FALSE(Attribute::int64("x", 1).as_bool_list());
    unpacked.bytes = std::string("\x0A\x05\x01", 3);  // declares 5 bytes, holds 1
    CHECK_FALSE(unpacked.as_bool_list());
}

TEST_CASE("comm_size as ASTRA-sim means it: an all-gather's is each rank's input") {
    // Two ranks on one 100 GB/s NVLink with 1 us latency, nominal links (two-gpus-nominal.yaml).
    // ASTRA-sim's ring all-gather (Ring.cc) sends msg_size = comm_size per step over n - 1 steps
    // and ends with final_data_size = comm_size x n: comm_size is each rank's input. 100 MB per
    // rank on 2 ranks gathers 200 MB (nccl-tests' size); `clustersim collective` runs it as a
    // ring of one step with (n-1)/n x 200 MB = 100 MB per edge: 100e6 B / 100e9 B/s = 1000 us,
    // plus 1 step x 1 us of latency = 1001 us. (As the total output it would take 501 us.)
    const std::string nominal = kData + "two-gpus-nominal.yaml";
    const Program p = folder(2, {coll(1, CollectiveCommType::AllGather, 100'000'000)});
    REQUIRE(p.collectives.size() == 1);
    CHECK(p.collectives[0].size.value == 200'000'000);
    CHECK(run_on(p, nominal) == Time::us(1001));
    // The same by `clustersim collective --op all_gather --sizes 200MB` on the nominal links.
    api::CollectiveRequest req;
    req.topology = kData + "two-gpus.yaml";
    req.kind = network::CollectiveKind::AllGather;
    req.sizes = {Bytes{200'000'000}};
    req.nominal = true;
    const auto report = api::run_collective(req);
    REQUIRE(report.rows.size() == 1);
    CHECK(report.rows[0].time == Time::us(1001));
    // All-reduce, reduce-scatter and all-to-all: comm_size is each rank's whole buffer in both
    // (Ring.cc: all-reduce msg_size = comm_size / n over 2(n-1) steps, reduce-scatter
    // comm_size / n over n - 1, all-to-all final_data_size = comm_size), nccl-tests' size.
    for (const auto type : {CollectiveCommType::AllReduce, CollectiveCommType::ReduceScatter,
                            CollectiveCommType::AllToAll}) {
        const Program q = folder(2, {coll(1, type, 100'000'000)});
        CHECK(q.collectives[0].size.value == 100'000'000);
    }
    // A reduce-scatter of 200 MB on two ranks: one step of (n-1)/n x 200 MB = 100 MB per edge,
    // 1001 us as the all-gather above, which is its mirror image.
    CHECK(run_on(folder(2, {coll(1, CollectiveCommType::ReduceScatter, 200'000'000)}), nominal) ==
          Time::us(1001));
}

TEST_CASE("involved_dim: the collective spans the ranks of the dimensions it marks") {
    // 16 ranks on two DGX H100 nodes: ASTRA-sim's dimensions 8,2 (GeneralComplexTopology: the
    // ring of dimension d joins the ranks that differ in digit d only, stride = the product of
    // the sizes before d). Rank 11 = (3, 1): involved_dim [1,0] is node 1's ranks 8-15,
    // [0,1] ranks 3 and 11, [1,1] all 16.
    const std::vector<Node> nodes = {
        coll(1, CollectiveCommType::AllReduce, 64 << 20,
             {Attribute::bool_list("involved_dim", {true, false})}),
        coll(2, CollectiveCommType::AllReduce, 64 << 20,
             {Attribute::bool_list("involved_dim", {false, true})}),
        coll(3, CollectiveCommType::AllReduce, 64 << 20,
             {Attribute::bool_list("involved_dim", {true, true, true, true})}),
    };
    const Program p = folder(16, nodes, {8, 2});
    // Per rank, its 3 collectives; the instances: 2 of [1,0], 8 of [0,1], 1 of all.
    REQUIRE(p.collectives.size() == 11);
    const auto group_of = [&](int rank, std::size_t node) {
        return p
            .collectives[static_cast<std::size_t>(
                p.ranks[static_cast<std::size_t>(rank)].ops[node].instance)]
            .ranks;
    };
    std::vector<int> node1(8);
    std::iota(node1.begin(), node1.end(), 8);
    CHECK(group_of(11, 0) == node1);
    CHECK(group_of(11, 1) == std::vector<int>{3, 11});
    CHECK(group_of(11, 2).size() == 16);
    // A trailing 0 stands for the nodes the ranks fill: the same groups.
    CHECK(folder(16, nodes, {8, 0}).collectives.size() == 11);

    // Time: each collective alone, on the two-node cluster with nominal links, equals
    // `clustersim collective` of the subset (the other groups run at the same time on links of
    // their own: other nodes' NVSwitch ports, other rails).
    const std::string experiment = kData + "two-nodes-nominal.yaml";
    const auto subset_time = [&](std::vector<int> ranks) {
        api::CollectiveRequest req;
        req.topology = std::string(CLUSTERSIM_SOURCE_DIR) + "/topologies/dgx-h100-superpod.yaml";
        req.sets = {"nodes=2"};
        req.ranks = std::move(ranks);
        req.sizes = {Bytes{64 << 20}};
        req.nominal = true;
        return api::run_collective(req).rows.at(0).time;
    };
    const Time tp = run_on(folder(16, {nodes[0]}, {8, 2}), experiment, {"topology.nodes=2"});
    const Time dp = run_on(folder(16, {nodes[1]}, {8, 2}), experiment, {"topology.nodes=2"});
    const Time all = run_on(folder(16, {nodes[2]}, {8, 2}), experiment, {"topology.nodes=2"});
    CHECK(tp == subset_time(node1));
    CHECK(dp == subset_time({3, 11}));
    std::vector<int> world(16);
    std::iota(world.begin(), world.end(), 0);
    CHECK(all == subset_time(world));
    CHECK(tp != all);
    CHECK(dp != all);
}

TEST_CASE(
    "involved_dim: a communicator wins, \"0\" is all ranks, what cannot be mapped is refused") {
    const Attribute tp = Attribute::bool_list("involved_dim", {true, false});
    // pg_name names a communicator: ASTRA-sim uses its plan and ignores involved_dim.
    const Program named = folder(
        16, {coll(1, CollectiveCommType::AllReduce, 8, {tp, Attribute::string("pg_name", "g")})},
        {8, 2}, {{"g", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}});
    CHECK(named.collectives.size() == 1);
    // pg_name "0" is ASTRA-sim's default communicator: involved_dim decides.
    CHECK(
        folder(16,
               {coll(1, CollectiveCommType::AllReduce, 8, {tp, Attribute::string("pg_name", "0")})},
               {8, 2})
            .collectives.size() == 2);
    CHECK(error_of([&] { folder(2, {coll(1, CollectiveCommType::AllReduce, 8, {tp})}); }) ==
          "a.0.et: node 1: involved_dim names network dimensions, but the topology has no node "
          "structure to take them from: give ASTRA-sim's npus_count with --dims (e.g. --dims "
          "2 for one dimension), whose product is the rank count 2, or name a communicator with "
          "pg_name");
    CHECK(error_of([&] {
              folder(16, {coll(1, CollectiveCommType::AllReduce, 8, {tp})}, {8, 4});
          }) ==
          "a.0.et: node 1: involved_dim names network dimensions, but the dimensions 8,4 hold 32 "
          "ranks, not the folder's 16: give ASTRA-sim's npus_count with --dims (e.g. --dims 8,2 "
          "for nodes of 8 GPUs), whose product is the rank count 16, or name a communicator with "
          "pg_name");
    // Dimensions whose product passes an int64 are not multiplied out.
    CHECK(error_of([&] {
              folder(16, {coll(1, CollectiveCommType::AllReduce, 8, {tp})},
                     {1'000'000, 1'000'000, 1'000'000, 1'000'000});
          })
              .find("the dimensions 1000000,1000000,1000000,1000000 hold more than 16 ranks, not "
                    "the folder's 16") != std::string::npos);
    // Nodes of 8 GPUs that 12 ranks do not fill evenly.
    CHECK(error_of([&] {
              folder(12, {coll(1, CollectiveCommType::AllReduce, 8, {tp})}, {8, 0});
          }) ==
          "a.0.et: node 1: involved_dim names network dimensions, but the topology's nodes "
          "(dimensions 8,0, 0: as many as the ranks fill) do not divide the folder's 12 ranks: "
          "give ASTRA-sim's npus_count with --dims (e.g. --dims 12 for one dimension), whose "
          "product is the rank count 12, or name a communicator with pg_name");
    CHECK(error_of([&] {
              folder(16,
                     {coll(1, CollectiveCommType::AllReduce, 8,
                           {Attribute::bool_list("involved_dim", {true})})},
                     {8, 2});
          }) ==
          "a.0.et: node 1: involved_dim has 1 entries but the network has 2 dimensions (8,2): "
          "expected one bool per dimension");
    CHECK(error_of([&] {
              folder(16,
                     {coll(1, CollectiveCommType::AllReduce, 8,
                           {Attribute::int64("involved_dim", 1)})},
                     {8, 2});
          }) ==
          "a.0.et: node 1: attribute \"involved_dim\" holds int64_val; expected a bool_list (one "
          "bool per network dimension, as ASTRA-sim reads it)");
}
