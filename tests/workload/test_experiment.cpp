// Experiment loading: the defaults of DESIGN.md ("Experiment keys and defaults"), `--set`
// overrides (topology.* reaching into the topology file), paths relative to the YAML's folder, and
// the errors a user sees for bad input (file:line:column and the accepted alternatives).
#include <doctest/doctest.h>

#include "../error_of.hpp"
#include "scratch.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "workload/experiment.hpp"

using namespace cs;
using namespace cs::workload;
using cs::test::error_of;

namespace {

namespace fs = std::filesystem;
using cs::test::kFourGpus;
using cs::test::Scratch;

// The smallest experiment: everything not written here takes its default.
const char* const kMinimal =
    "topology: four-gpus.yaml\n"  // line 1
    "model:\n"                    // line 2
    "  layers: 4\n"               // line 3
    "  hidden_size: 1024\n"       // line 4
    "  attention_heads: 16\n"     // line 5
    "parallelism:\n"              // line 6
    "  pp: 2\n"                   // line 7
    "training:\n"                 // line 8
    "  global_batch_size: 8\n";   // line 9

}  // namespace

TEST_CASE("no compute: section is compute: {model: roofline}: Megatron-LM's kernels and host") {
    // docs/yaml/experiment.md: `framework` defaults to megatron with model: roofline, and the host
    // is on whenever there is a framework. Leaving `compute:` out must mean the same, not a
    // roofline without a host (it did before: 4.998 s against 5.095 s on the default experiment).
    Scratch s("no-compute");
    s.write("four-gpus.yaml", kFourGpus);
    const auto absent = load_experiment(s.write("a.yaml", kMinimal), {});
    const auto written = load_experiment(
        s.write("w.yaml", std::string(kMinimal) + "compute: {model: roofline}\n"), {});
    CHECK(absent.compute.kind == ComputeSpec::Kind::Roofline);
    CHECK(absent.compute.framework == Framework::Megatron);
    CHECK(absent.compute.host.enabled);
    CHECK(written.compute.host.enabled);
    // Megatron-LM's host (experiment.cpp, default_host): the pytorch costs, sync after p2p, no
    // runtime_pass.
    CHECK(absent.compute.host.launch == Time::ns(25'000));
    CHECK(absent.compute.host.p2p == Time::ns(200'000));
    CHECK(absent.compute.host.sync_after_p2p);
    CHECK(absent.compute.host.runtime_pass == Time::zero());
    for (const auto* spec : {&absent, &written}) {
        CHECK(spec->compute.host.launch == written.compute.host.launch);
        CHECK(spec->compute.host.pass == written.compute.host.pass);
        CHECK(spec->compute.host.backward == written.compute.host.backward);
        CHECK(spec->compute.host.p2p == written.compute.host.p2p);
        CHECK(spec->compute.host.sync_after_p2p == written.compute.host.sync_after_p2p);
        CHECK(spec->compute.roofline.framework == written.compute.roofline.framework);
    }
}

TEST_CASE("defaults: gpt, 4h MLP, kv heads = heads, cp = ep = vpp = 1, 1f1b, flow network") {
    Scratch s("defaults");
    s.write("four-gpus.yaml", kFourGpus);
    const auto spec = load_experiment(s.write("e.yaml", kMinimal), {});

    const auto& m = spec.model;
    CHECK(m.family == "gpt");
    CHECK(m.name == "custom");
    CHECK(m.layers == 4);
    CHECK(m.hidden_size == 1024);
    CHECK(m.attention_heads == 16);
    // gpt: ffn_hidden_size = 4h = 4096, kv_heads = attention_heads, head_dim = h / a = 64, no
    // vocabulary (no embedding or output layer), LayerNorm, GELU, biases, tied embeddings.
    CHECK(m.ffn_hidden_size == 4096);
    CHECK(m.kv_heads == 16);
    CHECK(m.head_dim == 64);
    CHECK(m.vocab_size == 0);
    CHECK(m.norm == Norm::LayerNorm);
    CHECK(m.activation == Activation::Gelu);
    CHECK(m.bias);
    CHECK(m.tied_embeddings);
    CHECK(m.experts == 0);

    const auto& l = spec.layout;
    CHECK(l.tp == 1);
    CHECK(l.pp == 2);
    // dp not given: the GPUs left over, 4 / (tp 1 x pp 2 x cp 1) = 2.
    CHECK(l.dp == 2);
    CHECK(l.cp == 1);
    CHECK(l.ep == 1);
    CHECK(l.vpp == 1);
    CHECK_FALSE(l.sequence_parallel);
    CHECK_FALSE(l.distributed_optimizer);
    CHECK_FALSE(l.overlap_grad_reduce);
    CHECK(l.order == RankOrder::TpCpDpPp);
    CHECK(l.world_size() == 4);
    // Megatron-LM's bucket: max(40M, 1M x dp) = 40M parameters.
    CHECK(l.bucket_parameters() == 40'000'000);

    const auto& t = spec.training;
    CHECK(t.micro_batch_size == 1);
    CHECK(t.global_batch_size == 8);
    CHECK(t.seq_length == 2048);
    CHECK(t.recompute == Recompute::None);
    CHECK(t.precision == Precision::Bf16);
    CHECK(t.attention == Attention::Flash);
    // 8 sequences / (micro-batch 1 x dp 2) = 4 microbatches.
    CHECK(t.microbatches(l) == 4);

    CHECK(spec.schedule == "1f1b");
    CHECK(spec.compute.kind == ComputeSpec::Kind::Roofline);
    CHECK(spec.compute.roofline.efficiency_scale == 1.0);
    CHECK(spec.network.fidelity == network::Fidelity::Flow);
    // `calibration: measured` is the default: the fitted link efficiencies, not the nominal 1s.
    const auto calibrated = network::NetworkConfig::calibrated(network::Fidelity::Flow);
    for (int k = 0; k < network::kLinkKinds; ++k)
        CHECK(spec.network.link_efficiency[k] == calibrated.link_efficiency[k]);
    CHECK(spec.network.step_overhead == calibrated.step_overhead);

    REQUIRE(spec.cluster);
    CHECK(spec.cluster->gpu_count() == 4);
    CHECK(spec.cluster->gpu_model(0).name == "H100-SXM");
    CHECK(spec.warnings.empty());
}

TEST_CASE("defaults of the llama family differ from gpt where DESIGN.md says gpt") {
    Scratch s("llama");
    s.write("four-gpus.yaml", kFourGpus);
    // llama: RMSNorm, SwiGLU, no biases, untied embeddings; its MLP width has no default.
    const auto spec =
        load_experiment(s.write("e.yaml", kMinimal),
                        {"model.family=llama", "model.ffn_hidden_size=2816", "model.kv_heads=4"});
    CHECK(spec.model.family == "llama");
    CHECK(spec.model.norm == Norm::RmsNorm);
    CHECK(spec.model.activation == Activation::SwiGlu);
    CHECK_FALSE(spec.model.bias);
    CHECK_FALSE(spec.model.tied_embeddings);
    CHECK(spec.model.ffn_hidden_size == 2816);
    CHECK(spec.model.kv_heads == 4);
    // Without ffn_hidden_size the error names the key and the gpt default it lacks. The location
    // is the model mapping (its first key, line 3 column 3), since the key is not written.
    const auto e = s.dir() / "e.yaml";
    CHECK(error_of([&] { load_experiment(e, {"model.family=llama"}); }) ==
          e.string() +
              ":3:3: 'model': family llama needs 'ffn_hidden_size' (the MLP width; gpt defaults "
              "to 4 x hidden_size)");
}

TEST_CASE("--set overrides: experiment keys, new keys, and topology.nodes in the topology file") {
    Scratch s("overrides");
    const auto topo = s.write("four-gpus.yaml", kFourGpus);
    const auto e = s.write("e.yaml", kMinimal);

    const auto spec = load_experiment(
        e, {"parallelism.tp=2", "training.recompute=selective", "training.seq_length=4096",
            "schedule=zb-h1", "network.model=analytical", "model.vocab_size=50304"});
    CHECK(spec.layout.tp == 2);
    // dp follows the overridden tp: 4 GPUs / (tp 2 x pp 2) = 1.
    CHECK(spec.layout.dp == 1);
    CHECK(spec.training.recompute == Recompute::Selective);
    CHECK(spec.training.seq_length == 4096);
    CHECK(spec.schedule == "zb-h1");
    // `network` was not in the file: the override creates the mapping.
    CHECK(spec.network.fidelity == network::Fidelity::Analytical);
    CHECK(spec.model.vocab_size == 50304);

    // topology.nodes=3 sets `nodes` in four-gpus.yaml: 3 x 4 = 12 GPUs, so dp = 12 / 2 = 6 and
    // 8 sequences do not split over micro-batch 1 x dp 6; global batch 12 gives 12 / 6 = 2
    // microbatches.
    const auto bigger = load_experiment(e, {"topology.nodes=3", "training.global_batch_size=12"});
    CHECK(bigger.cluster->gpu_count() == 12);
    CHECK(bigger.layout.dp == 6);
    CHECK(bigger.training.microbatches(bigger.layout) == 2);
    CHECK(bigger.topology_source == topo.string());
    CHECK(bigger.source == e.string());

    // Overrides change the loaded document, never the file: loading again gives the defaults.
    const auto again = load_experiment(e, {});
    CHECK(again.cluster->gpu_count() == 4);
    CHECK(again.layout.tp == 1);
    CHECK(again.schedule == "1f1b");
}

// `run --set parallelism.tp=4` on the default (tp 8, pp 8, dp 4 pinned in the file) once failed:
// tp 4 x pp 8 x dp 4 = 128 of 256 GPUs. Megatron-LM derives dp from the world size, and so do we
// whenever --set resizes the layout or the topology without giving dp.
TEST_CASE("--set that resizes the layout lets a file's dp follow the GPU count") {
    Scratch s("dp_follows");
    s.write("four-gpus.yaml", kFourGpus);
    const auto pinned = s.write("pinned-dp.yaml",
                                "topology: four-gpus.yaml\n"
                                "model: {layers: 4, hidden_size: 1024, attention_heads: 16}\n"
                                "parallelism: {pp: 2, dp: 2}\n"
                                "training: {global_batch_size: 8}\n");
    // The file as written: pp 2 x dp 2 = 4 GPUs.
    CHECK(load_experiment(pinned, {}).layout.dp == 2);
    // tp 2 x pp 2 leaves 4 / 4 = 1 replica, not the file's 2 (which would need 8 GPUs).
    CHECK(load_experiment(pinned, {"parallelism.tp=2"}).layout.dp == 1);
    // pp 1: 4 / (tp 1 x pp 1) = 4 replicas.
    CHECK(load_experiment(pinned, {"parallelism.pp=1"}).layout.dp == 4);
    // topology.nodes=2: 2 x 4 = 8 GPUs, 8 / pp 2 = 4 replicas.
    CHECK(load_experiment(pinned, {"topology.nodes=2"}).layout.dp == 4);
    // dp given on the command line wins, and is checked as before: tp 2 x pp 2 x dp 2 = 8 > 4.
    CHECK(error_of([&] {
              load_experiment(pinned, {"parallelism.tp=2", "parallelism.dp=2"});
          })
              .find("--set parallelism.dp=2: 'parallelism.dp': tp x pp x dp x cp = 2 x 2 x 2 x 1 "
                    "= 8 GPUs, but the topology has 4") == 0);
    // A --set that does not resize keeps the file's dp.
    CHECK(load_experiment(pinned, {"training.seq_length=4096"}).layout.dp == 2);
    // A size that does not divide the GPUs is still refused: tp 3 x pp 2 = 6 does not divide 4.
    CHECK(error_of([&] { load_experiment(pinned, {"parallelism.tp=3"}); }).find("6 GPUs") !=
          std::string::npos);
}

TEST_CASE("parallelism.sharding: ZeRO stages, Megatron-FSDP names and HSDP groups") {
    Scratch s("sharding");
    s.write("four-gpus.yaml", kFourGpus);
    const auto e = s.write("e.yaml", kMinimal);
    // kMinimal: 4 GPUs, pp 2, so dp = 2.
    const auto plain = load_experiment(e, {});
    CHECK(plain.layout.sharding == Sharding::None);
    CHECK_FALSE(plain.layout.distributed_optimizer);
    // The distributed optimizer is ZeRO-1, and ZeRO-1 turns it on.
    auto spec = load_experiment(e, {"parallelism.distributed_optimizer=true"});
    CHECK(spec.layout.sharding == Sharding::Optimizer);
    spec = load_experiment(e, {"parallelism.sharding=zero1"});
    CHECK(spec.layout.distributed_optimizer);
    // An explicit sharding decides over distributed_optimizer.
    spec =
        load_experiment(e, {"parallelism.distributed_optimizer=true", "parallelism.sharding=none"});
    CHECK(spec.layout.sharding == Sharding::None);
    CHECK_FALSE(spec.layout.distributed_optimizer);
    spec = load_experiment(e, {"parallelism.sharding=optim_grads"});
    CHECK(spec.layout.sharding == Sharding::Gradients);
    spec = load_experiment(e, {"parallelism.sharding=optim_grads_params"});
    CHECK(spec.layout.sharding == Sharding::Parameters);
    CHECK(spec.layout.reshard_after_forward);
    CHECK(spec.layout.shard_prefetch);
    // One shard group of dp = 2 unless HSDP: 8 GPUs, pp 2, dp 4, shard_replicas 2 -> groups of 2.
    CHECK(spec.layout.shard_group_size() == 2);
    CHECK_FALSE(spec.layout.hsdp());
    spec = load_experiment(
        e, {"topology.nodes=2", "parallelism.sharding=zero3", "parallelism.shard_replicas=2",
            "parallelism.shard_prefetch=false", "parallelism.reshard_after_forward=false"});
    CHECK(spec.layout.dp == 4);
    CHECK(spec.layout.shard_size == 2);
    CHECK(spec.layout.hsdp());
    CHECK_FALSE(spec.layout.shard_prefetch);
    CHECK_FALSE(spec.layout.reshard_after_forward);
}

// An inline topology once failed to load ("'model': missing"): load_experiment assigned
// tdoc.root = doc.root["topology"], and assigning one yaml-cpp node to another rewrites the node
// both copies share, so the experiment's root became the topology.
TEST_CASE("--set topology.nodes on an inline topology") {
    Scratch s("inline");
    // The topology written inline; topology.nodes then addresses the experiment itself.
    const auto e = s.write("e.yaml",
                           "topology:\n"
                           "  node: {gpus: 2, gpu_model: H200-SXM, intra: {kind: nvswitch, "
                           "bandwidth: 450GB/s},\n"
                           "         nics: {count: 2, kind: infiniband, bandwidth: 400Gbps}}\n"
                           "  nodes: 1\n"
                           "  fabric: {kind: single_switch}\n"
                           "model: {layers: 4, hidden_size: 1024, attention_heads: 16}\n"
                           "parallelism: {pp: 2}\n"
                           "training: {global_batch_size: 8}\n");
    CHECK(load_experiment(e, {}).cluster->gpu_count() == 2);
    // 4 nodes x 2 GPUs = 8 GPUs; dp = 8 / pp 2 = 4.
    const auto spec = load_experiment(e, {"topology.nodes=4"});
    CHECK(spec.cluster->gpu_count() == 8);
    CHECK(spec.layout.dp == 4);
    CHECK(spec.cluster->gpu_model(0).name == "H200-SXM");
}

TEST_CASE("relative paths resolve against the folder of the YAML that names them") {
    Scratch s("relative");
    // dir/topologies/four-gpus.yaml, dir/experiments/e.yaml naming ../topologies/four-gpus.yaml
    // and a model file models/small.yaml next to it (dir/experiments/models/small.yaml). The
    // process's working folder (the test's build folder) holds none of these.
    s.write("topologies/four-gpus.yaml", kFourGpus);
    s.write("experiments/models/small.yaml",
            "name: small\nlayers: 8\nhidden_size: 2048\nattention_heads: 16\nvocab_size: 32000\n");
    const auto e = s.write("experiments/e.yaml",
                           "topology: ../topologies/four-gpus.yaml\n"
                           "model: {from: models/small.yaml, layers: 4}\n"
                           "parallelism: {pp: 4}\n"
                           "training: {global_batch_size: 8}\n");
    REQUIRE(fs::current_path() != e.parent_path());
    const auto spec = load_experiment(e, {});
    CHECK(spec.cluster->gpu_count() == 4);
    CHECK(spec.topology_source == (s.dir() / "topologies" / "four-gpus.yaml").string());
    CHECK(spec.model.name == "small");
    CHECK(spec.model.hidden_size == 2048);
    CHECK(spec.model.vocab_size == 32000);
    // The inline key overrides the model file's.
    CHECK(spec.model.layers == 4);

    // A topology path that only exists relative to the working folder is not found: the error
    // names the path as written and as resolved against experiments/ (line 1, column 11).
    const auto missing = s.write("experiments/m.yaml",
                                 "topology: four-gpus.yaml\n"
                                 "model: {layers: 4, hidden_size: 1024, attention_heads: 16}\n"
                                 "parallelism: {pp: 4}\n"
                                 "training: {global_batch_size: 8}\n");
    const auto resolved = (s.dir() / "experiments" / "four-gpus.yaml").string();
    CHECK(error_of([&] { load_experiment(missing, {}); }) ==
          missing.string() + ":1:11: 'topology': cannot load \"four-gpus.yaml\" (" + resolved +
              "): no such file");
}

TEST_CASE("errors in the file name file:line:column and what would be accepted") {
    Scratch s("errors");
    s.write("four-gpus.yaml", kFourGpus);
    // Each case is kMinimal with line 7 ("  pp: 2") replaced, or a line added.
    const std::string head =
        "topology: four-gpus.yaml\n"
        "model:\n"
        "  layers: 4\n"
        "  hidden_size: 1024\n"
        "  attention_heads: 16\n"
        "parallelism:\n";
    const std::string tail =
        "training:\n"
        "  global_batch_size: 8\n";
    auto error_with = [&](const std::string& line7, const std::string& more = "") {
        const auto e = s.write("e.yaml", head + line7 + tail + more);
        return error_of([&] { load_experiment(e, {}); });
    };
    const std::string e = (s.dir() / "e.yaml").string();

    SUBCASE("unknown key: at the key (column 3), listing the keys of that mapping") {
        CHECK(
            error_with("  tpp: 2\n") ==
            e + ":7:3: unknown key 'parallelism.tpp'; accepted keys here: tp, pp, cp, ep, vpp, "
                "sequence_parallel, distributed_optimizer, overlap_grad_reduce, "
                "grad_reduce_after_backward, ddp_bucket_size, overlap_p2p_comm, tp_comm_overlap, "
                "overlap_param_gather, cp_comm_type, cp_a2a_size, order, dp, sharding, shard_size, "
                "shard_replicas, "
                "reshard_after_forward, shard_prefetch, "
                "first_stage_layers, last_stage_layers, account_for_embedding, "
                "account_for_loss or stage_layers");
    }
    SUBCASE("unknown top-level key: line 10, after the 9 lines of kMinimal") {
        CHECK(error_with("  pp: 2\n", "schedul: zb-h1\n") ==
              e + ":10:1: unknown key 'schedul'; accepted keys here: topology, model, "
                  "parallelism, training, schedule, compute, network, seed, goodput, variability, "
                  "faults, name or description");
    }
    SUBCASE("wrong type: at the value, after '  tp: ' (column 7)") {
        CHECK(error_with("  tp: two\n") ==
              e + ":7:7: 'parallelism.tp': expected a whole number, found \"two\"");
    }
    SUBCASE("missing unit: the value of layer_forward starts at column 42") {
        // "compute: {model: profile, layer_forward: 1.3, ..." : 41 characters precede "1.3".
        CHECK(error_with("  pp: 2\n",
                         "compute: {model: profile, layer_forward: 1.3, layer_backward: 2ms}\n") ==
              e + ":10:42: 'compute.layer_forward': missing unit in \"1.3\" as a duration; "
                  "accepted units: ps, ns, us, ms, s (e.g. \"1.5us\")");
    }
    SUBCASE("a unit of the wrong kind is not read as a duration") {
        CHECK(error_with("  pp: 2\n",
                         "compute: {model: profile, layer_forward: 1GB, layer_backward: 2ms}\n") ==
              e + ":10:42: 'compute.layer_forward': cannot read \"1GB\" as a duration; "
                  "accepted units: ps, ns, us, ms, s (e.g. \"1.5us\")");
    }
    SUBCASE("unknown choice: the accepted values") {
        CHECK(error_with("  pp: 2\n", "network: {model: packet}\n") ==
              e + ":10:18: 'network.model': unknown value \"packet\"; expected flow, analytical "
                  "or ideal");
    }
    SUBCASE("impossible layout: dp that does not fill the topology suggests the one that does") {
        // tp 1 x pp 1 x dp 3 x cp 1 = 3 GPUs of 4; dp = 4 / (1 x 1 x 1) = 4 would.
        CHECK(error_with("  dp: 3\n") ==
              e + ":7:7: 'parallelism.dp': tp x pp x dp x cp = 1 x 1 x 3 x 1 = 3 GPUs, but the "
                  "topology has 4; use dp: 4");
    }
    SUBCASE("impossible layout: pp that does not divide the GPUs, at the parallelism mapping") {
        // A block mapping's location is its first key (line 7, column 3).
        CHECK(error_with("  pp: 3\n") ==
              e + ":7:3: 'parallelism': tp x pp x cp = 3 does not divide the topology's 4 GPUs; "
                  "choose tp, pp and cp whose product divides 4");
    }
    SUBCASE("impossible layout: tp must divide the attention heads") {
        // tp 4 x pp 1 x dp 1 fills the 4 GPUs, but 6 heads do not split over 4 ranks.
        const auto path = s.write("h.yaml",
                                  "topology: four-gpus.yaml\n"
                                  "model: {layers: 4, hidden_size: 1536, attention_heads: 6}\n"
                                  "parallelism: {tp: 4}\n"
                                  "training: {global_batch_size: 8}\n");
        // Reported at tp (line 3, column 19: "parallelism: {tp: " is 18 characters).
        CHECK(error_of([&] { load_experiment(path, {}); }) ==
              path.string() +
                  ":3:19: 'parallelism.tp': attention_heads (6) must be divisible by tp (4)");
    }
    SUBCASE("impossible batch: global batch not a multiple of micro-batch x dp") {
        // pp 2 leaves dp 2; 7 sequences over micro-batch 1 x dp 2. Line 9, after
        // "  global_batch_size: " (21 characters).
        const auto path = s.write("b.yaml", head + "  pp: 2\ntraining:\n  global_batch_size: 7\n");
        CHECK(error_of([&] { load_experiment(path, {}); }) ==
              path.string() +
                  ":9:22: 'training.global_batch_size': global_batch_size (7) must be a multiple "
                  "of micro_batch_size x dp = 1 x 2 = 2");
    }
    SUBCASE("missing file") {
        const auto none = s.dir() / "none.yaml";
        CHECK(error_of([&] { load_experiment(none, {}); }) == none.string() + ": no such file");
    }
}

TEST_CASE("errors in --set values name the argument instead of a line") {
    Scratch s("set_errors");
    s.write("four-gpus.yaml", kFourGpus);
    const auto e = s.write("e.yaml", kMinimal);
    auto error_with = [&](const std::vector<std::string>& overrides) {
        return error_of([&] { load_experiment(e, overrides); });
    };
    CHECK(error_with({"parallelism.tp=two"}) ==
          "--set parallelism.tp=two: 'parallelism.tp': expected a whole number, found \"two\"");
    CHECK(error_with({"parallelism.tpp=2"}) ==
          "--set parallelism.tpp=2: unknown key 'parallelism.tpp'; accepted keys here: tp, pp, "
          "cp, ep, vpp, sequence_parallel, distributed_optimizer, overlap_grad_reduce, "
          "grad_reduce_after_backward, "
          "ddp_bucket_size, overlap_p2p_comm, tp_comm_overlap, overlap_param_gather, "
          "cp_comm_type, cp_a2a_size, order, dp, sharding, shard_size, shard_replicas, "
          "reshard_after_forward, shard_prefetch, "
          "first_stage_layers, last_stage_layers, account_for_embedding, "
          "account_for_loss or stage_layers");
    CHECK(error_with({"training.recompute=partial"}) ==
          "--set training.recompute=partial: 'training.recompute': unknown value \"partial\"; "
          "expected none, selective or full");
    CHECK(error_with({"parallelism.tp"}) ==
          "--set parallelism.tp: expected key=value, for example parallelism.tp=4");
    // The value lands in the topology file, whose reader lists the topology's keys.
    const auto nodez = error_with({"topology.nodez=2"});
    CHECK(nodez.find("unknown key 'nodez'; accepted keys here: name, description, gpu_models, "
                     "devices, links, node, nodes, fabric or routing") != std::string::npos);
    const auto nodes = error_with({"topology.nodes=two"});
    CHECK(nodes.find("expected a whole number, found \"two\"") != std::string::npos);
}

// A topology override was once reported under the key it has inside the topology file
// ("--set nodes=two"), not as the user typed it.
TEST_CASE("an error in a topology.* override names the --set argument as given") {
    Scratch s("set_topology_error");
    s.write("four-gpus.yaml", kFourGpus);
    const auto e = s.write("e.yaml", kMinimal);
    const auto message = error_of([&] { load_experiment(e, {"topology.nodes=two"}); });
    CHECK(message.rfind("--set topology.nodes=two: ", 0) == 0);
}

TEST_CASE("ClusterCache: one build per distinct topology settings, reused across loads") {
    // A sweep loads its experiment once per combination; the cluster is built once per distinct
    // (topology source, topology overrides, memory limit) and shared.
    const std::string path = std::string(CLUSTERSIM_SOURCE_DIR) + "/workloads/default.yaml";
    ClusterCache cache;
    const auto a = load_experiment(path, {"parallelism.tp=4", "parallelism.dp=8"},
                                   topology::kDefaultMaxMemory, &cache);
    const auto b = load_experiment(path, {"parallelism.tp=8"}, topology::kDefaultMaxMemory, &cache);
    CHECK(cache.builds() == 1);
    CHECK(a.cluster == b.cluster);  // the same object
    // The second load took the cluster without reading the topology file: it still names it.
    CHECK(b.topology_source == a.topology_source);
    const auto c = load_experiment(path, {"topology.nodes=16", "parallelism.dp=2"},
                                   topology::kDefaultMaxMemory, &cache);
    CHECK(cache.builds() == 2);
    CHECK(c.cluster->gpu_count() == 128);
    CHECK(a.cluster->gpu_count() == 256);
    // Without a cache every load builds its own.
    const auto d = load_experiment(path, {"parallelism.tp=8"});
    CHECK(d.cluster != b.cluster);
    CHECK(d.cluster->links().size() == b.cluster->links().size());
    CHECK(d.topology_source == b.topology_source);
    CHECK(d.topology_source.find("topologies/") != std::string::npos);
    // A topology that fails to load caches nothing and fails again the same way.
    const auto bad = [&] {
        return error_of([&] {
            load_experiment(path, {"topology.nodes=0"}, topology::kDefaultMaxMemory, &cache);
        });
    };
    const std::string first = bad();
    CHECK_FALSE(first.empty());
    CHECK(bad() == first);
    CHECK(cache.builds() == 2);
}

TEST_CASE("DocumentCache: a sweep's loads through it give what fresh loads give") {
    // A sweep loads its experiment once per combination with one ClusterCache and one
    // DocumentCache: the experiment, topology and model files are parsed once, and every load
    // must give the spec, or the message, a load without the caches gives.
    Scratch s("document_cache");
    s.write("four-gpus.yaml", kFourGpus);
    s.write("models/m.yaml",
            "layers: 4\n"
            "hidden_size: 1024\n"
            "attention_heads: 16\n");
    const auto e = s.write("e.yaml",
                           "topology: four-gpus.yaml\n"      // line 1
                           "model: {from: models/m.yaml}\n"  // line 2
                           "parallelism:\n"                  // line 3
                           "  pp: 2\n"                       // line 4
                           "training:\n"                     // line 5
                           "  global_batch_size: 8\n");      // line 6
    ClusterCache clusters;
    config::DocumentCache documents;
    const auto cached = [&](const std::vector<std::string>& overrides) {
        return load_experiment(e, overrides, topology::kDefaultMaxMemory, &clusters, &documents);
    };
    const auto same = [](const ExperimentSpec& a, const ExperimentSpec& b) {
        CHECK(a.source == b.source);
        CHECK(a.topology_source == b.topology_source);
        CHECK(a.model_file == b.model_file);
        CHECK(a.model.name == b.model.name);
        CHECK(a.model.layers == b.model.layers);
        CHECK(a.model.hidden_size == b.model.hidden_size);
        CHECK(a.layout.pp == b.layout.pp);
        CHECK(a.layout.dp == b.layout.dp);
        CHECK(a.training.global_batch_size == b.training.global_batch_size);
        CHECK(a.training.micro_batch_size == b.training.micro_batch_size);
        CHECK(a.cluster->gpu_count() == b.cluster->gpu_count());
        CHECK(a.schedule_where.line == b.schedule_where.line);
        CHECK(a.layout_where.line == b.layout_where.line);
        CHECK(a.layout_where.column == b.layout_where.column);
    };

    // The first load's override reaches its own copy only: the second sees the file's pp 2.
    const auto pp4 = cached({"parallelism.pp=4"});
    CHECK(pp4.layout.pp == 4);
    same(pp4, load_experiment(e, {"parallelism.pp=4"}));
    const auto plain = cached({});
    CHECK(plain.layout.pp == 2);
    CHECK(plain.model.name == "m");  // the model file's stem
    same(plain, load_experiment(e, {}));
    CHECK(plain.layout_where.line == 4);  // parallelism's mapping starts at `pp`, line 4

    // An error at a position in the experiment file: micro batches of 3 do not divide 8, named
    // at global_batch_size's value (line 6; 2 spaces and "global_batch_size: " put the 8 at
    // column 22).
    const std::string gbs = error_of([&] { cached({"training.micro_batch_size=3"}); });
    CHECK(gbs.rfind(e.string() + ":6:22: 'training.global_batch_size': ", 0) == 0);
    CHECK(gbs == error_of([&] { load_experiment(e, {"training.micro_batch_size=3"}); }));
    CHECK(error_of([&] { cached({"training.micro_batch_size=3"}); }) == gbs);

    // The topology's overrides reach the copy the load built its cluster from: a load with
    // another ClusterCache (so the topology file is read again) sees the file's one node.
    CHECK(cached({"topology.nodes=2", "parallelism.dp=4"}).cluster->gpu_count() == 8);
    ClusterCache other;
    const auto again = load_experiment(e, {}, topology::kDefaultMaxMemory, &other, &documents);
    CHECK(again.cluster->gpu_count() == 4);
    same(again, plain);
    // Three files, each parsed once over all these loads.
    CHECK(documents.parses() == 3);

    // A model file with an error: the message names its line and column through the cache,
    // every time, as without it (`width` is line 4's key).
    s.write("models/bad.yaml",
            "layers: 4\n"
            "hidden_size: 1024\n"
            "attention_heads: 16\n"
            "width: 3\n");
    const auto bad = s.write("bad.yaml",
                             "topology: four-gpus.yaml\n"
                             "model: {from: models/bad.yaml}\n"
                             "parallelism: {pp: 2}\n"
                             "training: {global_batch_size: 8}\n");
    const std::string fresh_error = error_of([&] { load_experiment(bad, {}); });
    CHECK(fresh_error.rfind((s.dir() / "models/bad.yaml").string() + ":4:1: unknown key 'width'",
                            0) == 0);
    for (int i = 0; i < 2; ++i)
        CHECK(error_of([&] {
                  load_experiment(bad, {}, topology::kDefaultMaxMemory, &clusters, &documents);
              }) == fresh_error);

    // An experiment given as text is parsed once too.
    const ExperimentText text{
        "topology: four-gpus.yaml\n"
        "model: {from: models/m.yaml}\n"
        "parallelism: {pp: 2}\n"
        "training: {global_batch_size: 8}\n",
        "<text>", s.dir()};
    const std::size_t before = documents.parses();
    CHECK(load_experiment(text, {"parallelism.pp=4"}, topology::kDefaultMaxMemory, &clusters,
                          &documents)
              .layout.pp == 4);
    CHECK(load_experiment(text, {}, topology::kDefaultMaxMemory, &clusters, &documents).layout.pp ==
          2);
    CHECK(documents.parses() == before + 1);
}
