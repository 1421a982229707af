// clustersim topology TOPOLOGY.yaml [--set k=v]... [--json FILE] [--dot FILE]
//
// Builds the cluster a topology file describes (every check included) and describes it
// (ingest/topology.hpp). --dot writes the graph for Graphviz (small graphs).
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/tables.hpp"
#include "cli/text.hpp"
#include "core/atomic_file.hpp"
#include "ingest/inputs.hpp"
#include "ingest/topology.hpp"

namespace cs::cli {

namespace {

struct TopologyArgs {
    std::string topology;
    std::vector<std::string> sets;
    std::string json;
    std::string dot;
    std::string max_memory;
};

void run(const TopologyArgs& a) {
    OutputSet outputs;
    outputs.declare("--json", a.json);
    outputs.declare("--dot", a.dot);
    outputs.guard_input("the topology", a.topology);
    const auto loaded = api::load_topology(a.topology, a.sets, api::parse_max_memory(a.max_memory));
    // Checked before anything is printed or written.
    const std::string dot =
        a.dot.empty() ? "" : api::topology_dot(loaded.cluster, "--dot " + a.dot);
    const auto s = topology::summarize(loaded.cluster);
    print_topology(std::cout, loaded.display_path, s);
    if (!a.json.empty())
        write_file_atomically(
            a.json, [&](std::ostream& out) { out << json_text(api::topology_json(s)); }, &outputs);
    if (!a.dot.empty())
        write_file_atomically(
            a.dot, [&](std::ostream& out) { out << dot; }, &outputs);
    outputs.commit();
}

}  // namespace

void register_topology(CLI::App& app) {
    auto args = std::make_shared<TopologyArgs>();
    auto* cmd = app.add_subcommand(
        "topology", "Build a topology, check it and describe it (GPUs, links, bandwidth, hops)");
    cmd->add_option("topology", args->topology, "Topology YAML")->required();
    cmd->add_option("--set", args->sets, "Override a key of the topology file: nodes=64")
        ->type_name("KEY=VALUE");
    cmd->add_option("--json", args->json, "Write the description as JSON");
    cmd->add_option("--dot", args->dot, "Write the graph in Graphviz format (small graphs)");
    cmd->add_option("--max-memory", args->max_memory,
                    "The memory building the topology may take (default 16GiB)")
        ->type_name("SIZE");
    cmd->callback([args] { run(*args); });
}

}  // namespace cs::cli
