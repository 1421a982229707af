#include "chakra/program.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/errors.hpp"
#include "core/input_file.hpp"

namespace cs::chakra {

namespace {

[[noreturn]] void node_error(const std::string& file, std::uint64_t id, const std::string& what) {
    throw ConfigError(SourceLocation{file, 0, 0}, "node " + std::to_string(id) + ": " + what);
}

// The longest time a node may give (11.6 days), far from Time's overflow.
constexpr std::int64_t kMaxPs = 1'000'000'000'000'000'000;

std::string ordinal(std::size_t k) {  // 1 -> "1st"
    const std::size_t n = k % 100;
    const char* suffix = (n >= 11 && n <= 13) ? "th"
                         : k % 10 == 1        ? "st"
                         : k % 10 == 2        ? "nd"
                         : k % 10 == 3        ? "rd"
                                              : "th";
    return std::to_string(k) + suffix;
}

// Attributes the reader interprets (or knowingly ignores), per the ASTRA-sim 2.x feeder.
const std::set<std::string, std::less<>>& known_attributes() {
    static const std::set<std::string, std::less<>> kKnown{
        "is_cpu_op",    "num_ops",    "tensor_size",   "comm_type",      "comm_size",
        "comm_src",     "comm_dst",   "comm_tag",      "pg_name",        "comm_priority",
        "involved_dim", "tensor_loc", kDurationPsAttr, kCostedAloneAttr, kDelayAttr};
    return kKnown;
}

struct Warnings {
    std::vector<std::string>& out;
    std::set<std::string> seen;
    void once(const std::string& key, const std::string& text) {
        if (seen.insert(key).second) out.push_back(text);
    }
};

std::int64_t int_attr(const std::string& file, const Node& n, const char* name, bool required,
                      std::int64_t fallback = 0) {
    const Attribute* a = n.attr(name);
    if (!a) {
        if (required)
            node_error(
                file, n.id,
                node_type_name(n.type) + " without the \"" + name + "\" attribute (an integer)");
        return fallback;
    }
    const auto v = a->as_int();
    if (!v)
        node_error(file, n.id,
                   std::string("attribute \"") + name + "\" holds " + a->field_name() +
                       "; expected an integer (int64_val, int32_val, uint64_val, ...)");
    return *v;
}

std::optional<network::CollectiveKind> collective_kind(std::int64_t type, bool& sync_only,
                                                       Warnings& warn) {
    using network::CollectiveKind;
    sync_only = false;
    if (type < 0 || type > static_cast<std::int64_t>(CollectiveCommType::Barrier))
        return std::nullopt;
    switch (static_cast<CollectiveCommType>(type)) {
        case CollectiveCommType::AllReduce:
            return CollectiveKind::AllReduce;
        case CollectiveCommType::AllGather:
            return CollectiveKind::AllGather;
        case CollectiveCommType::ReduceScatter:
            return CollectiveKind::ReduceScatter;
        case CollectiveCommType::AllToAll:
            return CollectiveKind::AllToAll;
        case CollectiveCommType::Broadcast:
            return CollectiveKind::Broadcast;
        case CollectiveCommType::ReduceScatterBlock:
            warn.once("REDUCE_SCATTER_BLOCK",
                      "REDUCE_SCATTER_BLOCK collectives run as REDUCE_SCATTER");
            return CollectiveKind::ReduceScatter;
        case CollectiveCommType::Reduce:
            warn.once("REDUCE",
                      "REDUCE collectives run as BROADCAST (the same tree, the other way)");
            return CollectiveKind::Broadcast;
        case CollectiveCommType::Gather:
            warn.once("GATHER", "GATHER collectives run as ALL_GATHER (an upper bound)");
            return CollectiveKind::AllGather;
        case CollectiveCommType::Scatter:
            warn.once("SCATTER", "SCATTER collectives run as BROADCAST (an upper bound)");
            return CollectiveKind::Broadcast;
        case CollectiveCommType::Barrier:
            sync_only = true;
            return CollectiveKind::AllReduce;
    }
    return std::nullopt;
}

std::string dims_text(const std::vector<int>& dims) {
    std::string out;
    for (const int d : dims) {
        if (!out.empty()) out.push_back(',');
        out.append(std::to_string(d));
    }
    return out;
}

// The communicator of rank r for a collective whose involved_dim is `attr`: ASTRA-sim's network
// dimensions `dims` (npus_count, dimension 0 the fastest-varying rank digit, RingTopology's
// offset) and the ranks that share r's coordinates on every dimension not involved, in rank
// order. Registered in `derived` under a name of its own (the bits and the first member).
std::string involved_group(const std::string& file, const Node& node, const Attribute& attr,
                           const std::vector<int>& dims, int r, int n,
                           std::map<std::string, std::vector<int>>& derived) {
    const auto bits = attr.as_bool_list();
    if (!bits)
        node_error(file, node.id,
                   std::string("attribute \"involved_dim\" holds ") + attr.field_name() +
                       "; expected a bool_list (one bool per network dimension, as ASTRA-sim "
                       "reads it)");
    // Stops past n: the product of many large entries must not overflow.
    std::int64_t product = 1;
    bool capped = false;
    for (const int d : dims) {
        capped |= product > n;
        if (!capped) product *= d;
    }
    const bool unfilled = std::find(dims.begin(), dims.end(), 0) != dims.end();
    if (dims.empty() || product != n)
        node_error(file, node.id,
                   "involved_dim names network dimensions, but " +
                       (dims.empty() ? std::string("the topology has no node structure to take "
                                                   "them from")
                        : unfilled   ? "the topology's nodes (dimensions " + dims_text(dims) +
                                         ", 0: as many as the ranks fill) do not divide the " +
                                         "folder's " + std::to_string(n) + " ranks"
                                   : "the dimensions " + dims_text(dims) + " hold " +
                                         (capped ? "more than " + std::to_string(n)
                                                 : std::to_string(product)) +
                                         " ranks, not the folder's " + std::to_string(n)) +
                       ": give ASTRA-sim's npus_count with --dims (e.g. --dims " +
                       (n > 8 && n % 8 == 0 ? "8," + std::to_string(n / 8) + " for nodes of 8 GPUs"
                                            : std::to_string(n) + " for one dimension") +
                       "), whose product is the rank count " + std::to_string(n) +
                       ", or name a communicator with pg_name");
    if (bits->size() < dims.size())
        node_error(file, node.id,
                   "involved_dim has " + std::to_string(bits->size()) + " entries but the " +
                       "network has " + std::to_string(dims.size()) + " dimensions (" +
                       dims_text(dims) + "): expected one bool per dimension");
    std::string label = "involved_dim [";
    for (std::size_t d = 0; d < dims.size(); ++d) {
        if (d) label.push_back(',');
        label.push_back((*bits)[d] ? '1' : '0');
    }
    label += "]";
    // Rank = sum of coordinate x stride; the group varies the involved coordinates only.
    std::vector<int> members{r};
    int stride = 1;
    for (std::size_t d = 0; d < dims.size(); ++d) {
        const int size = dims[d];
        if ((*bits)[d]) {
            const int coord = (r / stride) % size;
            std::vector<int> next;
            next.reserve(members.size() * static_cast<std::size_t>(size));
            for (const int m : members)
                for (int c = 0; c < size; ++c)
                    next.push_back(m + (c - coord) * stride);
            members = std::move(next);
        }
        stride *= size;
    }
    std::sort(members.begin(), members.end());
    const std::string name = label + " group of rank " + std::to_string(members.front());
    derived.emplace(name, std::move(members));
    return name;
}

std::string rank_files(const std::vector<std::string>& names) {
    if (names.empty()) return "none";
    if (names.size() == 1) return names.front();
    return names.front() + " ... " + names.back();
}

// Every rank a communicator of comm_groups.json lists has an ET file, and none is listed twice.
void check_groups(const Program& p, int n, const std::vector<std::string>& names) {
    for (const auto& [name, members] : p.groups) {
        std::set<int> seen;
        for (const int r : members) {
            if (r < 0 || r >= n)
                throw ConfigError(SourceLocation{p.folder + "/" + kCommGroupsFile, 0, 0},
                                  "communicator \"" + name + "\" lists rank " + std::to_string(r) +
                                      ", which has no ET file: the folder " + "holds ranks 0-" +
                                      std::to_string(n - 1) + " (" + rank_files(names) + ")");
            if (!seen.insert(r).second)
                throw ConfigError(
                    SourceLocation{p.folder + "/" + kCommGroupsFile, 0, 0},
                    "communicator \"" + name + "\" lists rank " + std::to_string(r) + " twice");
        }
    }
}

// A 0 among the dimensions: the rank count over the others (the nodes of a topology whose
// node size is known); left 0 (no match) if it does not divide.
std::vector<int> fill_zero_dim(std::vector<int> dims, int n) {
    if (const auto zero = std::find(dims.begin(), dims.end(), 0); zero != dims.end()) {
        std::int64_t others = 1;
        for (const int d : dims)
            others *= d == 0 ? 1 : d;
        if (others > 0 && n % others == 0) *zero = static_cast<int>(n / others);
    }
    return dims;
}

// Per node: the indices of its distinct parents, each checked to exist.
std::vector<std::vector<std::uint32_t>> node_parents(const std::string& file,
                                                     const std::vector<Node>& nodes) {
    std::unordered_map<std::uint64_t, std::uint32_t> index;
    index.reserve(nodes.size());
    for (std::uint32_t i = 0; i < nodes.size(); ++i)
        if (!index.emplace(nodes[i].id, i).second)
            node_error(file, nodes[i].id,
                       "a second node with this id (node ids must be unique in a file)");
    std::vector<std::vector<std::uint32_t>> parents(nodes.size());
    for (std::uint32_t i = 0; i < nodes.size(); ++i) {
        const Node& node = nodes[i];
        auto& ps = parents[i];
        for (const auto* deps : {&node.data_deps, &node.ctrl_deps})
            for (const auto d : *deps) {
                auto it = index.find(d);
                if (it == index.end())
                    node_error(file, node.id,
                               std::string(deps == &node.data_deps ? "data" : "control") +
                                   " dependency on node " + std::to_string(d) +
                                   ", which the file does not have");
                if (it->second == i) node_error(file, node.id, "depends on itself");
                ps.push_back(it->second);
            }
        std::sort(ps.begin(), ps.end());
        ps.erase(std::unique(ps.begin(), ps.end()), ps.end());
    }
    return parents;
}

// Sizes prog.ops and fills their dependency counts and children lists (CSR) from `parents`.
void link_children(RankProgram& prog, const std::vector<std::vector<std::uint32_t>>& parents) {
    const std::size_t count = parents.size();
    std::vector<std::uint32_t> child_count(count, 0);
    for (const auto& ps : parents)
        for (const auto q : ps)
            ++child_count[q];
    prog.ops.resize(count);
    std::uint32_t at = 0;
    for (std::uint32_t i = 0; i < count; ++i) {
        prog.ops[i].first_child = at;
        at += child_count[i];
    }
    prog.child_list.assign(at, 0);
    std::vector<std::uint32_t> fill(count, 0);
    for (std::uint32_t i = 0; i < count; ++i) {
        prog.ops[i].deps = static_cast<std::uint32_t>(parents[i].size());
        for (const auto q : parents[i])
            prog.child_list[prog.ops[q].first_child + fill[q]++] = i;
    }
    for (std::uint32_t i = 0; i < count; ++i)
        prog.ops[i].children = child_count[i];
}

// Kahn's algorithm over the linked ops; a node left over names the cycle it waits in.
void check_acyclic(const std::string& file, const std::vector<Node>& nodes, const RankProgram& prog,
                   const std::vector<std::vector<std::uint32_t>>& parents) {
    std::vector<std::uint32_t> left(nodes.size());
    std::vector<std::uint32_t> ready;
    for (std::uint32_t i = 0; i < nodes.size(); ++i) {
        left[i] = prog.ops[i].deps;
        if (left[i] == 0) ready.push_back(i);
    }
    std::size_t done = 0;
    while (!ready.empty()) {
        const auto i = ready.back();
        ready.pop_back();
        ++done;
        for (std::uint32_t c = 0; c < prog.ops[i].children; ++c) {
            const auto ch = prog.child_list[prog.ops[i].first_child + c];
            if (--left[ch] == 0) ready.push_back(ch);
        }
    }
    if (done == nodes.size()) return;
    // Walk back through unfinished parents until a node repeats: that is a cycle.
    std::uint32_t i = 0;
    while (left[i] == 0)
        ++i;
    std::vector<std::uint32_t> path;
    std::vector<int> pos(nodes.size(), -1);
    while (pos[i] < 0) {
        pos[i] = static_cast<int>(path.size());
        path.push_back(i);
        for (const auto q : parents[i])
            if (left[q] > 0) {
                i = q;
                break;
            }
    }
    // path[k] waits for path[k + 1]; path.back() waits for path[pos[i]] = i.
    std::string cycle;
    for (auto k = static_cast<std::size_t>(pos[i]); k < path.size(); ++k)
        cycle += std::to_string(nodes[path[k]].id) + " -> ";
    cycle += std::to_string(nodes[i].id);
    node_error(file, nodes[i].id,
               "dependency cycle: " + cycle +
                   " (each node waits for the next; dependencies must form a DAG)");
}

// The cost of a timed node: cs_duration_ps, else duration_micros, else num_ops and tensor_size
// for the roofline (neither: zero time).
void read_cost(const std::string& file, const Node& node, Op& op) {
    if (const Attribute* a = node.attr(kDurationPsAttr)) {
        const auto v = a->as_int();
        if (!v || *v < 0 || *v > kMaxPs)
            node_error(file, node.id,
                       std::string("attribute \"") + kDurationPsAttr +
                           "\" must be an integer from 0 to 1e18 (picoseconds)");
        op.duration = Time::ps(*v);
    } else if (node.duration_micros > 0) {
        if (node.duration_micros > static_cast<std::uint64_t>(kMaxPs / 1'000'000))
            node_error(file, node.id,
                       "duration_micros " + std::to_string(node.duration_micros) +
                           " is too large (at most 1e12 us)");
        op.duration = Time::us(static_cast<std::int64_t>(node.duration_micros));
    } else {
        const std::int64_t flops = int_attr(file, node, "num_ops", false);
        const std::int64_t bytes = int_attr(file, node, "tensor_size", false);
        if (flops < 0 || bytes < 0)
            node_error(file, node.id, "num_ops and tensor_size must be >= 0");
        op.flops = static_cast<double>(flops);
        op.bytes = bytes;
        if (flops == 0 && bytes == 0) op.duration = Time::zero();
    }
}

// What a collective node issues, kept per (rank, op) until the members are matched.
struct CollectiveInfo {
    network::CollectiveKind kind;
    bool sync_only;
    std::int64_t type;
    Bytes size;
    bool alone;
};

// Reads the ranks' nodes into ops (read_rank), then pairs the collectives and messages of
// different ranks (match_collectives, match_messages). Errors keep the order of reading.
class ProgramBuilder {
  public:
    ProgramBuilder(Program& p, const std::vector<std::string>& names, int n, std::vector<int> dims)
        : p_(p),
          names_(names),
          n_(n),
          dims_(std::move(dims)),
          warn_{p.warnings, {}},
          coll_info_(static_cast<std::size_t>(n_)),
          send_size_(static_cast<std::size_t>(n_)) {}

    void read_rank(int r, const EtFile& et);
    void match_collectives();
    void match_messages();

  private:
    void read_node(int r, const std::string& file, const Node& node, std::uint32_t i, Op& op);
    std::string communicator_of(int r, const std::string& file, const Node& node);
    void read_collective(int r, const std::string& file, const Node& node, std::uint32_t i);
    void read_message(int r, const std::string& file, const Node& node, std::uint32_t i, Op& op);
    std::size_t check_counts(const std::vector<std::vector<std::uint32_t>>& per_rank,
                             const std::vector<int>& members, const std::string& label) const;
    CollectiveInstance instance(const std::string& group, const std::vector<int>& members,
                                const std::vector<std::vector<std::uint32_t>>& per_rank,
                                std::size_t k, const std::string& label);

    Program& p_;
    const std::vector<std::string>& names_;
    int n_;
    std::vector<int> dims_;
    Warnings warn_;
    // Communicators of involved_dim collectives, by name (not comm_groups.json's).
    std::map<std::string, std::vector<int>> derived_;
    // Per (communicator, rank): its collective ops in file order. Per (src, dst, tag): sends
    // and receives in file order.
    std::map<std::string, std::vector<std::vector<std::uint32_t>>> colls_;
    std::map<std::tuple<int, int, std::int64_t>, std::vector<std::uint32_t>> sends_, recvs_;
    std::vector<std::unordered_map<std::uint32_t, CollectiveInfo>> coll_info_;
    std::vector<std::unordered_map<std::uint32_t, Bytes>> send_size_;
};

void ProgramBuilder::read_rank(int r, const EtFile& et) {
    const std::string& file = names_[static_cast<std::size_t>(r)];
    RankProgram& prog = p_.ranks[static_cast<std::size_t>(r)];
    prog.file = file;
    p_.nodes += et.nodes.size();
    const auto parents = node_parents(file, et.nodes);
    link_children(prog, parents);
    check_acyclic(file, et.nodes, prog, parents);
    for (std::uint32_t i = 0; i < et.nodes.size(); ++i)
        read_node(r, file, et.nodes[i], i, prog.ops[i]);
}

void ProgramBuilder::read_node(int r, const std::string& file, const Node& node, std::uint32_t i,
                               Op& op) {
    op.id = node.id;
    op.name = node.name;
    op.type = node.type;
    for (const auto& a : node.attrs)
        if (!known_attributes().contains(a.name))
            warn_.once("attr " + a.name, "attribute \"" + a.name + "\" (first seen on node " +
                                             std::to_string(node.id) + " of " + file +
                                             ") is not used");
    for (const int f : node.skipped_fields)
        warn_.once("field " + std::to_string(f),
                   "Node field " + std::to_string(f) + " (first seen on node " +
                       std::to_string(node.id) + " of " + file + ") is not used");
    // Values beyond the enum are unknown types (not truncated into known ones).
    const auto type = node.type <= static_cast<std::uint64_t>(NodeType::Checkpoint)
                          ? static_cast<NodeType>(node.type)
                          : NodeType::Invalid;
    switch (type) {
        case NodeType::Comp: {
            const Attribute* cpu = node.attr("is_cpu_op");
            const Attribute* delay = node.attr(kDelayAttr);
            op.kind = delay && delay->as_bool().value_or(false) ? OpKind::Delay
                      : cpu && cpu->as_bool().value_or(false)   ? OpKind::HostCompute
                                                                : OpKind::Compute;
            read_cost(file, node, op);
            break;
        }
        case NodeType::MemLoad:
        case NodeType::MemStore:
            op.kind = OpKind::Memory;
            if (node.duration_micros == 0 && !node.attr(kDurationPsAttr)) {
                op.bytes = int_attr(file, node, "tensor_size", false);
                if (op.bytes < 0) node_error(file, node.id, "tensor_size must be >= 0");
                op.flops = 0;
            } else {
                read_cost(file, node, op);
            }
            break;
        case NodeType::CommColl:
            op.kind = OpKind::Collective;
            read_collective(r, file, node, i);
            break;
        case NodeType::CommSend:
        case NodeType::CommRecv:
            read_message(r, file, node, i, op);
            break;
        default:
            op.kind = OpKind::Skip;
            warn_.once("type " + std::to_string(node.type),
                       node_type_name(node.type) + " nodes (first: node " +
                           std::to_string(node.id) + " of " + file +
                           ") take no time: clustersim runs COMP, MEM_LOAD, MEM_STORE, "
                           "COMM_SEND, COMM_RECV and COMM_COLL nodes");
    }
}

// The communicator a collective node runs on: pg_name's (checked against comm_groups.json and
// rank r's membership), an involved_dim group, or "" for all ranks.
std::string ProgramBuilder::communicator_of(int r, const std::string& file, const Node& node) {
    std::string group;
    if (const Attribute* pg = node.attr("pg_name")) {
        auto s = pg->as_string();
        if (!s) {
            // Some converters write the group number as an integer.
            if (auto v = pg->as_int()) s = std::to_string(*v);
        }
        if (!s)
            node_error(file, node.id,
                       std::string("attribute \"pg_name\" holds ") + pg->field_name() +
                           "; expected a string_val");
        group = *s;
        // ASTRA-sim (Workload::extract_comm_group): "" and "0" are the default
        // communicator, all ranks, unless comm_groups.json defines a "0".
        if (group == "0" && !p_.groups.contains(group)) group.clear();
    }
    if (!group.empty()) {
        auto it = p_.groups.find(group);
        if (it == p_.groups.end())
            node_error(
                file, node.id,
                "communicator \"" + group + "\" is not in " + kCommGroupsFile + " of the folder" +
                    (p_.groups.empty()
                         ? std::string(" (there is none)")
                         : " (it has " + std::to_string(p_.groups.size()) + " communicators)"));
        if (std::find(it->second.begin(), it->second.end(), r) == it->second.end())
            node_error(
                file, node.id,
                "rank " + std::to_string(r) + " is not a member of communicator \"" + group + "\"");
    } else if (const Attribute* dims_attr = node.attr("involved_dim")) {
        // Without a communicator ASTRA-sim runs the collective over the network
        // dimensions involved_dim marks (Sys::generate_collective).
        group = involved_group(file, node, *dims_attr, dims_, r, n_, derived_);
    }
    return group;
}

void ProgramBuilder::read_collective(int r, const std::string& file, const Node& node,
                                     std::uint32_t i) {
    const std::int64_t ct = int_attr(file, node, "comm_type", true);
    bool sync_only = false;
    const auto kind = collective_kind(ct, sync_only, warn_);
    if (!kind)
        node_error(file, node.id,
                   "comm_type " + std::to_string(ct) +
                       " is no CollectiveCommType; expected 0 (ALL_REDUCE) to 9 (BARRIER)");
    const std::int64_t size = int_attr(file, node, "comm_size", !sync_only);
    if (size < 0) node_error(file, node.id, "comm_size must be >= 0");
    const std::string group = communicator_of(r, file, node);
    const Attribute* alone = node.attr(kCostedAloneAttr);
    auto& per_rank = colls_[group];
    if (per_rank.empty()) per_rank.resize(static_cast<std::size_t>(n_));
    per_rank[static_cast<std::size_t>(r)].push_back(i);
    coll_info_[static_cast<std::size_t>(r)].emplace(
        i, CollectiveInfo{*kind, sync_only, ct, Bytes{size},
                          alone && alone->as_bool().value_or(false)});
}

void ProgramBuilder::read_message(int r, const std::string& file, const Node& node, std::uint32_t i,
                                  Op& op) {
    const bool send = node.type == static_cast<std::uint64_t>(NodeType::CommSend);
    op.kind = send ? OpKind::Send : OpKind::Recv;
    const char* peer_attr = send ? "comm_dst" : "comm_src";
    const std::int64_t peer = int_attr(file, node, peer_attr, true);
    if (peer < 0 || peer >= n_)
        node_error(file, node.id,
                   std::string(peer_attr) + " " + std::to_string(peer) +
                       " is not a rank of the folder: it holds ranks 0-" + std::to_string(n_ - 1) +
                       " (" + rank_files(names_) + ")");
    if (peer == r)
        node_error(file, node.id,
                   std::string(send ? "a send to" : "a receive from") + " its own rank");
    const std::int64_t tag = int_attr(file, node, "comm_tag", false);
    const std::int64_t size = int_attr(file, node, "comm_size", send);
    if (size < 0) node_error(file, node.id, "comm_size must be >= 0");
    const int src = send ? r : static_cast<int>(peer);
    const int dst = send ? static_cast<int>(peer) : r;
    (send ? sends_ : recvs_)[{src, dst, tag}].push_back(i);
    if (send) send_size_[static_cast<std::size_t>(r)].emplace(i, Bytes{size});
}

// The number of collectives each member issues on a communicator, which must be the same.
std::size_t ProgramBuilder::check_counts(const std::vector<std::vector<std::uint32_t>>& per_rank,
                                         const std::vector<int>& members,
                                         const std::string& label) const {
    std::size_t count = 0;
    int most = -1;
    for (const int m : members)
        if (most < 0 || per_rank[static_cast<std::size_t>(m)].size() > count) {
            count = per_rank[static_cast<std::size_t>(m)].size();
            most = m;
        }
    for (const int m : members) {
        const auto& mine = per_rank[static_cast<std::size_t>(m)];
        if (mine.size() == count) continue;
        const auto& theirs = per_rank[static_cast<std::size_t>(most)];
        const auto& other = p_.ranks[static_cast<std::size_t>(most)];
        node_error(other.file, other.ops[theirs[mine.size()]].id,
                   "the " + ordinal(mine.size() + 1) + " collective of rank " +
                       std::to_string(most) + " on " + label + " has no match: rank " +
                       std::to_string(m) + " (" + p_.ranks[static_cast<std::size_t>(m)].file +
                       ") issues " + std::to_string(mine.size()) +
                       " there (every member issues the same collectives in the same order)");
    }
    return count;
}

// The k-th collective on a communicator, its members' ops checked against the first member's
// and pointed at the instance (which is the next of p_.collectives).
CollectiveInstance ProgramBuilder::instance(const std::string& group,
                                            const std::vector<int>& members,
                                            const std::vector<std::vector<std::uint32_t>>& per_rank,
                                            std::size_t k, const std::string& label) {
    CollectiveInstance inst;
    inst.group = group;
    inst.ranks = members;
    const int first = members.front();
    const auto first_op = per_rank[static_cast<std::size_t>(first)][k];
    const CollectiveInfo& info = coll_info_[static_cast<std::size_t>(first)].at(first_op);
    inst.kind = info.kind;
    inst.sync_only = info.sync_only;
    inst.size = info.size;
    // comm_size is ASTRA-sim's (docs/chakra.md): each rank's input for an all-gather,
    // where clustersim's network takes the gathered output (nccl-tests' size).
    if (info.kind == network::CollectiveKind::AllGather && !info.sync_only) {
        const auto members_n = static_cast<std::int64_t>(members.size());
        if (info.size.value > std::numeric_limits<std::int64_t>::max() / members_n) {
            const auto& f = p_.ranks[static_cast<std::size_t>(first)];
            node_error(f.file, f.ops[first_op].id,
                       "an all-gather of comm_size " + std::to_string(info.size.value) +
                           " bytes per rank over " + std::to_string(members_n) +
                           " ranks gathers more than 2^63 bytes");
        }
        inst.size = Bytes{info.size.value * members_n};
    }
    inst.costed_alone = info.alone;
    const auto id = static_cast<std::int32_t>(p_.collectives.size());
    for (const int m : members) {
        const auto op = per_rank[static_cast<std::size_t>(m)][k];
        const CollectiveInfo& mi = coll_info_[static_cast<std::size_t>(m)].at(op);
        auto& prog = p_.ranks[static_cast<std::size_t>(m)];
        if (mi.type != info.type || mi.size.value != info.size.value)
            node_error(
                prog.file, prog.ops[op].id,
                "the " + ordinal(k + 1) + " collective on " + label + " is " +
                    comm_type_name(mi.type) + " of " + std::to_string(mi.size.value) +
                    " bytes here but " + comm_type_name(info.type) + " of " +
                    std::to_string(info.size.value) + " bytes on rank " + std::to_string(first) +
                    " (node " +
                    std::to_string(p_.ranks[static_cast<std::size_t>(first)].ops[first_op].id) +
                    " of " + p_.ranks[static_cast<std::size_t>(first)].file + ")");
        prog.ops[op].instance = id;
        inst.members.emplace_back(m, op);
    }
    return inst;
}

// Collectives: the k-th of each member on a communicator are one collective.
void ProgramBuilder::match_collectives() {
    std::vector<int> world(static_cast<std::size_t>(n_));
    for (int r = 0; r < n_; ++r)
        world[static_cast<std::size_t>(r)] = r;
    for (auto& [group, per_rank] : colls_) {
        const auto own = derived_.find(group);
        const std::vector<int>& members = group.empty()           ? world
                                          : own != derived_.end() ? own->second
                                                                  : p_.groups.at(group);
        const std::string label = group.empty()           ? "all ranks"
                                  : own != derived_.end() ? group
                                                          : "communicator \"" + group + "\"";
        const std::size_t count = check_counts(per_rank, members, label);
        for (std::size_t k = 0; k < count; ++k)
            p_.collectives.push_back(instance(group, members, per_rank, k, label));
    }
}

// Messages: the k-th send from s to d with a tag meets the k-th receive of it.
void ProgramBuilder::match_messages() {
    std::set<std::tuple<int, int, std::int64_t>> keys;
    for (const auto& [key, v] : sends_)
        keys.insert(key);
    for (const auto& [key, v] : recvs_)
        keys.insert(key);
    for (const auto& key : keys) {
        const auto& [src, dst, tag] = key;
        static const std::vector<std::uint32_t> kNone;
        const auto sit = sends_.find(key);
        const auto rit = recvs_.find(key);
        const auto& s = sit == sends_.end() ? kNone : sit->second;
        const auto& rv = rit == recvs_.end() ? kNone : rit->second;
        const auto what = "from rank " + std::to_string(src) + " to rank " + std::to_string(dst) +
                          " with tag " + std::to_string(tag);
        if (s.size() > rv.size()) {
            const auto& prog = p_.ranks[static_cast<std::size_t>(src)];
            node_error(prog.file, prog.ops[s[rv.size()]].id,
                       "the " + ordinal(rv.size() + 1) + " send " + what +
                           " has no receive: " + p_.ranks[static_cast<std::size_t>(dst)].file +
                           " has " + std::to_string(rv.size()) + " COMM_RECV_NODEs with comm_src " +
                           std::to_string(src) + " and comm_tag " + std::to_string(tag));
        }
        if (rv.size() > s.size()) {
            const auto& prog = p_.ranks[static_cast<std::size_t>(dst)];
            node_error(prog.file, prog.ops[rv[s.size()]].id,
                       "the " + ordinal(s.size() + 1) + " receive " + what +
                           " has no send: " + p_.ranks[static_cast<std::size_t>(src)].file +
                           " has " + std::to_string(s.size()) + " COMM_SEND_NODEs with comm_dst " +
                           std::to_string(dst) + " and comm_tag " + std::to_string(tag));
        }
        for (std::size_t k = 0; k < s.size(); ++k) {
            MessageInstance m;
            m.src = src;
            m.dst = dst;
            m.tag = tag;
            m.send_op = s[k];
            m.recv_op = rv[k];
            m.size = send_size_[static_cast<std::size_t>(src)].at(s[k]);
            const auto id = static_cast<std::int32_t>(p_.messages.size());
            p_.ranks[static_cast<std::size_t>(src)].ops[s[k]].instance = id;
            p_.ranks[static_cast<std::size_t>(dst)].ops[rv[k]].instance = id;
            p_.messages.push_back(m);
        }
    }
}

}  // namespace

Program build_program(std::vector<EtFile> files, const std::vector<std::string>& names,
                      std::map<std::string, std::vector<int>> groups, std::string folder,
                      const std::vector<int>& dims_given) {
    Program p;
    p.folder = std::move(folder);
    p.groups = std::move(groups);
    const int n = static_cast<int>(files.size());
    check_groups(p, n, names);
    p.ranks.resize(static_cast<std::size_t>(n));
    ProgramBuilder builder(p, names, n, fill_zero_dim(dims_given, n));
    for (int r = 0; r < n; ++r)
        builder.read_rank(r, files[static_cast<std::size_t>(r)]);
    builder.match_collectives();
    builder.match_messages();
    return p;
}

namespace {

// The ET files of `folder` by rank: <prefix>.<rank>.et, one prefix (returned in `prefix`), ranks 0
// to n - 1 without gaps. `shown` names the folder in errors.
std::map<int, std::filesystem::path> et_files_by_rank(const std::filesystem::path& folder,
                                                      const std::string& shown,
                                                      std::string& prefix) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(folder, ec))
        throw ConfigError(SourceLocation{shown, 0, 0},
                          "not a folder: expected a folder of Chakra ETs named "
                          "<prefix>.<rank>.et");
    std::map<int, fs::path> by_rank;
    bool any = false;
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(folder, ec))
        entries.push_back(e.path());
    std::sort(entries.begin(), entries.end());
    for (const auto& path : entries) {
        const std::string name = path.filename().string();
        if (name.size() < 4 || name.substr(name.size() - 3) != ".et") continue;
        const std::string stem = name.substr(0, name.size() - 3);
        const auto dot = stem.rfind('.');
        const std::string digits = dot == std::string::npos ? "" : stem.substr(dot + 1);
        if (digits.empty() || digits.size() > 7 ||
            !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
            throw ConfigError(SourceLocation{(folder / name).string(), 0, 0},
                              "an ET file name must be <prefix>.<rank>.et with a decimal rank "
                              "(workload.0.et, workload.1.et, ...)");
        const std::string pre = stem.substr(0, dot);
        if (any && pre != prefix)
            throw ConfigError(SourceLocation{(folder / name).string(), 0, 0},
                              "prefix \"" + pre + "\" differs from \"" + prefix +
                                  "\" of the other ET files: one workload per folder");
        prefix = pre;
        any = true;
        by_rank[std::stoi(digits)] = path;
    }
    if (!any)
        throw ConfigError(SourceLocation{shown, 0, 0},
                          "no Chakra ET files: expected <prefix>.<rank>.et for ranks 0, 1, ...");
    const int n = static_cast<int>(by_rank.size());
    for (int r = 0; r < n; ++r)
        if (!by_rank.contains(r))
            throw ConfigError(SourceLocation{shown, 0, 0},
                              "rank " + std::to_string(r) + " is missing (" + prefix + "." +
                                  std::to_string(r) + ".et): the ranks must be 0 to " +
                                  std::to_string(n - 1) + " without gaps (found up to " +
                                  std::to_string(by_rank.rbegin()->first) + ")");
    return by_rank;
}

// comm_groups.json: ASTRA-sim's communicators, each a list of rank numbers (a folder of
// `rank_count` ET files; the members are checked against it later, by build_program).
std::map<std::string, std::vector<int>> read_comm_groups(const std::filesystem::path& groups_file,
                                                         std::size_t rank_count) {
    std::map<std::string, std::vector<int>> groups;
    const std::string label = groups_file.string();
    const std::string text =
        read_regular_file(groups_file, label, "comm_groups.json", kMaxCommGroupsBytes);
    nlohmann::json j;
    // JSON keeps the last of a key given twice: a communicator named twice is an error here, as
    // a duplicated YAML key is.
    std::set<std::string> names;
    std::string twice;
    const auto note_key = [&](int depth, nlohmann::json::parse_event_t event,
                              nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::key && depth == 1 && twice.empty() &&
            !names.insert(parsed.get<std::string>()).second)
            twice = parsed.get<std::string>();
        return true;
    };
    try {
        j = nlohmann::json::parse(text, note_key);
    } catch (const nlohmann::json::exception& e) {
        // A syntax error, or a number beyond a double (out_of_range 406).
        throw ConfigError(SourceLocation{label, 0, 0}, std::string("not valid JSON: ") + e.what());
    }
    if (!twice.empty())
        throw ConfigError(SourceLocation{label, 0, 0},
                          "communicator \"" + twice + "\" is given twice; expected each once");
    const std::string expected =
        "expected {\"<pg_name>\": [rank, ...], ...} (ASTRA-sim's communicator groups)";
    if (!j.is_object()) throw ConfigError(SourceLocation{label, 0, 0}, expected);
    for (const auto& [name, members] : j.items()) {
        if (!members.is_array() || members.empty())
            throw ConfigError(SourceLocation{label, 0, 0},
                              "communicator \"" + name + "\": " + expected);
        std::vector<int> ranks;
        for (const auto& m : members) {
            if (!m.is_number_integer())
                throw ConfigError(SourceLocation{label, 0, 0},
                                  "communicator \"" + name + "\": " + expected);
            // A rank beyond int would wrap to another rank: out of range is an error.
            if (m.is_number_unsigned()
                    ? m.get<std::uint64_t>() > INT32_MAX
                    : m.get<std::int64_t>() < 0 || m.get<std::int64_t>() > INT32_MAX)
                throw ConfigError(SourceLocation{label, 0, 0},
                                  "communicator \"" + name + "\": rank " + m.dump() +
                                      " is not a rank number (0 to " +
                                      std::to_string(rank_count - 1) + ")");
            ranks.push_back(m.get<int>());
        }
        groups.emplace(name, std::move(ranks));
    }
    return groups;
}

}  // namespace

Program load_program(const std::filesystem::path& folder, std::int64_t max_memory,
                     const std::vector<int>& dims) {
    namespace fs = std::filesystem;
    const std::string shown = folder.string();
    std::string prefix;
    const std::map<int, fs::path> by_rank = et_files_by_rank(folder, shown, prefix);
    std::vector<EtFile> files;
    std::vector<std::string> names;
    // Half the memory for the decoded nodes, half for the program built from them.
    std::int64_t budget = max_memory / 2;
    for (const auto& [r, path] : by_rank) {
        const std::string label = path.string();
        const std::string bytes =
            read_regular_file(path, label, "a Chakra ET file", kMaxEtFileBytes);
        files.push_back(decode_et(bytes, label, &budget));
        names.push_back(label);
    }
    std::map<std::string, std::vector<int>> groups;
    const fs::path groups_file = folder / kCommGroupsFile;
    std::error_code ec;
    if (fs::exists(groups_file, ec)) groups = read_comm_groups(groups_file, by_rank.size());
    Program p = build_program(std::move(files), names, std::move(groups), shown, dims);
    p.prefix = prefix;
    return p;
}

}  // namespace cs::chakra
