// A folder of Chakra ETs, one `<prefix>.<rank>.et` per rank, read, checked and turned into the
// programs the executor runs (execute.hpp): per rank its operations with their dependencies,
// collectives matched across the members of their communicators, sends matched with receives.
//
// Mapping (docs/chakra.md has the tables):
//   COMP_NODE                 compute on the rank's GPU (is_cpu_op: on its host), one at a time
//                             per rank in the order they become ready; time from the
//                             cs_duration_ps attribute, else duration_micros, else the roofline of
//                             num_ops (FLOPs) and tensor_size (HBM bytes) on the rank's GPU
//   MEM_LOAD/MEM_STORE_NODE   tensor_size bytes at the GPU's HBM bandwidth (or their duration),
//                             beside the compute stream
//   COMM_COLL_NODE            comm_type on the communicator pg_name (comm_groups.json; none or
//                             "0": the ranks of the dimensions involved_dim marks, else all
//                             ranks), comm_size bytes in ASTRA-sim's meaning (an all-gather's:
//                             each rank's input); the k-th collective of a rank on a
//                             communicator meets the k-th of every other member (file order) and
//                             starts when all have reached it
//   COMM_SEND/RECV_NODE       the k-th send from s to d with tag t meets the k-th receive on d
//                             from s with tag t; the send starts when it is ready (eager), the
//                             receive completes once it is ready and the message has arrived
//   other types               no time; reported once per type
// data_deps and ctrl_deps are both dependencies (a node starts when all have completed).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "chakra/et.hpp"
#include "core/units.hpp"
#include "network/collectives.hpp"

namespace cs::chakra {

// Attributes clustersim adds to what ASTRA-sim reads (ASTRA-sim keeps them as unused extras):
//   cs_duration_ps  (int64)  a compute node's time in picoseconds, exact where duration_micros
//                            rounds
//   cs_costed_alone (bool)   a collective costed as if it ran alone on the network (the replay's
//                            model of the TP/CP/EP collectives inside a pass), not on the shared
//                            network with the others
inline constexpr const char* kDurationPsAttr = "cs_duration_ps";
inline constexpr const char* kCostedAloneAttr = "cs_costed_alone";
//   cs_delay        (bool)   a compute node that is a wait: it takes its time without occupying
//                            the GPU or the host (`chakra export --host`: the GPU waiting for
//                            kernels the host has not issued yet)
inline constexpr const char* kDelayAttr = "cs_delay";
// The communicator file of a folder: {"<pg_name>": [ranks in ring order], ...}, the format of
// ASTRA-sim 2.x's --comm-group-configuration.
inline constexpr const char* kCommGroupsFile = "comm_groups.json";

enum class OpKind : std::uint8_t {
    Compute,
    HostCompute,
    Memory,
    Delay,
    Send,
    Recv,
    Collective,
    Skip
};

struct Op {
    OpKind kind = OpKind::Skip;
    std::uint64_t id = 0;  // the node's id in its file
    std::string name;
    std::uint64_t type = 0;  // the node's NodeType
    // Compute and memory: a fixed time, or FLOPs and bytes for the roofline of the rank's GPU.
    std::optional<Time> duration;
    double flops = 0;
    std::int64_t bytes = 0;
    std::int32_t instance = -1;  // Collective: index into collectives; Send/Recv: messages
    std::uint32_t deps = 0;      // number of distinct nodes it waits for
    std::uint32_t first_child = 0, children = 0;  // into RankProgram::child_list
};

struct RankProgram {
    std::string file;  // display name, for messages
    std::vector<Op> ops;
    std::vector<std::uint32_t> child_list;
};

struct CollectiveInstance {
    network::CollectiveKind kind = network::CollectiveKind::AllReduce;
    bool sync_only = false;  // BARRIER: the members wait for each other, nothing is sent
    std::string group;       // pg_name ("" for all ranks)
    std::vector<int> ranks;  // in ring order
    Bytes size;
    bool costed_alone = false;
    std::vector<std::pair<int, std::uint32_t>> members;  // (rank, op index), in `ranks` order
};

struct MessageInstance {
    int src = 0, dst = 0;
    std::int64_t tag = 0;
    Bytes size;
    std::uint32_t send_op = 0, recv_op = 0;
};

struct Program {
    std::string folder;  // display name
    std::string prefix;
    std::vector<RankProgram> ranks;
    std::vector<CollectiveInstance> collectives;
    std::vector<MessageInstance> messages;
    std::map<std::string, std::vector<int>> groups;  // comm_groups.json
    std::size_t nodes = 0;
    // Unknown node types and attributes, approximated collectives: one line each.
    std::vector<std::string> warnings;
};

// Reads every `<prefix>.<rank>.et` of `folder` (ranks 0..n-1, one prefix) and comm_groups.json
// if present. Throws ConfigError naming the file and node id: a file that is not a Chakra ET,
// missing ranks, duplicate node ids, dependencies on absent nodes, cycles, peers or communicator
// members that are not ranks of the folder, collectives or messages without a match.
// Bounds (docs/robustness.md): an ET file's size, and the memory the decoded nodes of all ranks
// take, estimated as they are decoded (twice over: the program built from them is about as
// large) against `max_memory`. Rank files and comm_groups.json must be regular files (a FIFO or
// a link to /dev/zero would block or never end).
inline constexpr std::int64_t kMaxEtFileBytes = std::int64_t{2} << 30;
inline constexpr std::int64_t kMaxCommGroupsBytes = std::int64_t{64} << 20;
inline constexpr std::int64_t kDefaultEtMemory = std::int64_t{16} << 30;
// `dims`: ASTRA-sim's network dimensions (its network config's npus_count, dimension 0 the
// fastest-varying digit of a rank number), which a collective's involved_dim refers to; empty:
// none known, and a collective with involved_dim and no communicator is an error. One 0 entry
// stands for the rank count over the other entries (8,0: nodes of 8 GPUs, as many as the ranks
// fill).
Program load_program(const std::filesystem::path& folder,
                     std::int64_t max_memory = kDefaultEtMemory, const std::vector<int>& dims = {});

// The same from ET files in memory (tests): `files[r]` is rank r, named `names[r]`.
Program build_program(std::vector<EtFile> files, const std::vector<std::string>& names,
                      std::map<std::string, std::vector<int>> groups, std::string folder,
                      const std::vector<int>& dims = {});

}  // namespace cs::chakra
