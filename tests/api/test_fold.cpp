// Member folding (docs/performance-history.md, "Folding"): a run that carries only member 0's
// transfers on the network, each standing for the tp x cp members of a worker, gives the same
// summary as the run that carries them all; folding is refused where it would not be exact.
#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "ingest/inputs.hpp"
#include "replay/replay.hpp"
#include "report/summary.hpp"
#include "session/run.hpp"
#include "session/sweep_cache.hpp"
#include "workload/experiment.hpp"

namespace {

const std::string kDefault = std::string(CLUSTERSIM_SOURCE_DIR) + "/workloads/default.yaml";

cs::api::RunResult run(const std::vector<std::string>& sets, bool fold,
                       std::function<void(cs::replay::Replay&)> attach = {}) {
    const auto spec = cs::api::load_experiment({kDefault, sets, ""});
    cs::api::RunOptions options;
    options.fold = fold;
    options.attach = std::move(attach);
    return cs::api::run(spec, options);
}

// The summary JSON without the fields that describe the run rather than its results: the
// folding itself, engine events (a folded run has fewer) and the host's wall time.
std::string results_json(const cs::report::Summary& s) {
    auto j = cs::report::to_json(s);
    j.erase("fold");
    j.erase("events");
    j.erase("wall_time_s");
    return j.dump(1);
}

// The whole summary JSON but the host's wall time (runs that must agree in every result,
// folding and events included).
std::string text(const cs::report::Summary& s) {
    auto j = cs::report::to_json(s);
    j.erase("wall_time_s");
    return j.dump(1);
}

// GPT-3 175B (tp 8, pp 8, interleaved) on `nodes` DGX H100 nodes with dp filling them.
std::vector<std::string> layout(int nodes, int tp, std::vector<std::string> more = {}) {
    const int dp = nodes * 8 / (tp * 8);
    std::vector<std::string> sets = {"topology.nodes=" + std::to_string(nodes),
                                     "parallelism.tp=" + std::to_string(tp),
                                     "parallelism.dp=" + std::to_string(dp),
                                     "training.global_batch_size=" + std::to_string(8 * dp)};
    sets.insert(sets.end(), more.begin(), more.end());
    return sets;
}

// The 64 nodes above routed adaptively in two pods of 8 leaves (32 nodes each), where the
// rails share their pod's bundle to the cores.
std::vector<std::string> adaptive_two_pods() {
    return layout(64, 8, {"topology.routing=adaptive", "topology.fabric.spine.down=8"});
}

}  // namespace

TEST_CASE("fold: 16 nodes on one leaf per rail fold by 8 members and give the same summary") {
    // 16 DGX H100 nodes sit under one leaf per rail (32 ports down), so member g of every node
    // reaches member g of every other over rail g's leaf alone: the eight members' routes are
    // images of each other and share no link. tp 8: a worker is a node; pipeline messages and
    // the DP reduce-scatter and all-gather cross the rails.
    const auto folded = run(layout(16, 8), true);
    const auto full = run(layout(16, 8), false);
    CHECK(folded.summary.fold_copies == 8);
    CHECK(folded.summary.fold_refused.empty());
    CHECK(full.summary.fold_copies == 1);
    CHECK(full.summary.fold_refused.empty());  // not asked for: no reason
    CHECK(folded.summary.events < full.summary.events);
    CHECK(results_json(folded.summary) == results_json(full.summary));
    // Link accounting still sees every member's links: the busiest links and the total bytes
    // are part of the equal JSON above; check one is not empty.
    CHECK_FALSE(folded.summary.links.empty());
}

TEST_CASE("fold: tp 4 with in-node pipeline messages and overlapped gradient buckets") {
    // tp 4: two workers per node, stages 2k and 2k + 1 in one node, so half of the pipeline
    // messages go GPU -> NVSwitch -> GPU; with --overlap-grad-reduce the DP reduce-scatters run
    // in buckets during the last backward passes, contending with the pipeline messages.
    const auto sets = layout(16, 4, {"parallelism.overlap_grad_reduce=true"});
    const auto folded = run(sets, true);
    const auto full = run(sets, false);
    CHECK(folded.summary.fold_copies == 4);
    CHECK(results_json(folded.summary) == results_json(full.summary));
}

TEST_CASE("fold: a straggler leaves member folding exact (a worker's members stay in lockstep)") {
    // variability slows a GPU's passes; a worker runs at its slowest GPU, so its members still
    // start every transfer together and the fold still applies, with the same results.
    const auto sets = layout(16, 8, {"variability.gpus=[{gpus: [9], factor: 1.3}]"});
    const auto folded = run(sets, true);
    const auto full = run(sets, false);
    CHECK(folded.summary.fold_copies == 8);
    CHECK(folded.summary.variability.present);
    CHECK(folded.summary.variability.cost_s > 0);
    CHECK(results_json(folded.summary) == results_json(full.summary));
}

TEST_CASE("fold: a changed link capacity turns folding off, and the run is the unfolded one") {
    // A degraded link (link 0, a GPU's) breaks the members' symmetry: the network refuses the fold
    // and every member's transfers are simulated.
    const auto degrade = [](cs::replay::Replay& r) {
        r.network().set_link_capacity(0, cs::Bandwidth{10e9});
    };
    const auto folded = run(layout(16, 8), true, degrade);
    const auto full = run(layout(16, 8), false, degrade);
    CHECK(folded.summary.fold_copies == 1);
    CHECK(folded.summary.fold_refused == "a link capacity was changed");
    CHECK(results_json(folded.summary) == results_json(full.summary));
}

TEST_CASE("fold: ECMP routes that differ between members refuse folding") {
    // 64 nodes need two leaves per rail and spines between them; each member's flows pick their
    // spine by a hash of their own GPUs, so no link map carries member 0's routes onto member
    // 1's (or members meet on a link): refused, with the reason in the summary.
    const auto r = run(layout(64, 8), true);
    CHECK(r.summary.fold_copies == 1);
    CHECK_FALSE(r.summary.fold_refused.empty());
    const auto j = cs::report::to_json(r.summary);
    CHECK(j["fold"]["copies"] == 1);
    CHECK(j["fold"]["refused"] == r.summary.fold_refused);
}

// ---- Replica folding (analytical and ideal networks) ------------------------------------------

namespace {

std::vector<std::string> analytical(std::vector<std::string> sets,
                                    const std::string& model = "analytical") {
    sets.push_back("network.model=" + model);
    return sets;
}

// The folded and unfolded runs of `sets`, checked equal in everything but `fold`, `events` and
// `wall_time_s`; returns the folded summary.
cs::report::Summary folded_equals_unfolded(const std::vector<std::string>& sets) {
    const auto folded = run(sets, true);
    const auto full = run(sets, false);
    CHECK(full.summary.fold_replicas == full.summary.dp);
    CHECK(full.summary.fold_replicas_refused.empty());  // not asked for: no reason
    CHECK(results_json(folded.summary) == results_json(full.summary));
    CHECK_FALSE(folded.summary.links.empty());
    if (folded.summary.fold_replicas < folded.summary.dp)
        CHECK(folded.summary.events < full.summary.events);
    return folded.summary;
}

}  // namespace

TEST_CASE("fold: identical replicas fold to one under the analytical network, interleaved") {
    // 16 DGX H100 nodes under one leaf per rail, tp 4 pp 8 dp 4 interleaved (the default's
    // schedule and ZeRO-1): replica d's stage s is a half node; every pipeline message goes
    // GPU -> NVSwitch -> GPU or GPU -> rail leaf -> GPU, the same route shape for every replica,
    // so all four replicas form one class: one is simulated and the DP reduce-scatters and
    // all-gathers (over all four) start when it is ready, as in the full run.
    const auto s = folded_equals_unfolded(analytical(layout(16, 4)));
    CHECK(s.dp == 4);
    CHECK(s.fold_replicas == 1);
    CHECK(s.fold_replicas_refused.empty());
    CHECK(s.fold_copies == 1);  // member folding is for the flow network only
    CHECK(s.p2p_bytes > 0);     // every replica's messages counted
}

TEST_CASE("fold: replica folding with overlapped gradient buckets, 1f1b and all-reduce (DDP)") {
    // Buckets: a bucket is reduced once every replica has it; a representative stands for its
    // class's replicas in that count. Without the distributed optimizer the sync is an all-reduce.
    const auto s = folded_equals_unfolded(
        analytical(layout(16, 4,
                          {"parallelism.overlap_grad_reduce=true", "schedule=1f1b",
                           "parallelism.vpp=1", "parallelism.distributed_optimizer=false"})));
    CHECK(s.fold_replicas == 1);
}

TEST_CASE("fold: replica folding under the ideal network") {
    // Every transfer is free, so every replica is in one class.
    const auto s = folded_equals_unfolded(analytical(layout(16, 4), "ideal"));
    CHECK(s.fold_replicas == 1);
}

TEST_CASE("fold: replicas whose pipeline routes differ form classes, and stay exact") {
    // 40 DGX H100 nodes: nodes 0-31 under the first leaf of each rail, 32-39 under the second,
    // spines between them. tp 8, pp 8, dp 5, ranks tp-dp-pp: worker (stage s, replica d) is node
    // d + 5s. Stage pair (5, 6) goes from node 25 + d to 30 + d: it crosses a spine (two more
    // hops, more latency) for d = 2, 3, 4; pair (6, 7), from 30 + d to 35 + d, for d = 0, 1. So
    // replicas {0, 1} and {2, 3, 4} are two classes, two replicas are simulated, and the run
    // stays exact.
    const auto s = folded_equals_unfolded(analytical(layout(40, 8)));
    CHECK(s.dp == 5);
    CHECK(s.fold_replicas == 2);
    // 64 nodes, dp 8: worker (s, d) is node d + 8s, so stage pair (3, 4) crosses a spine in
    // every replica (nodes 24 + d -> 32 + d) and no other pair does: one class. ECMP hashes each
    // replica's messages onto other spines, of equal capacity and latency: the same cost.
    const auto t = folded_equals_unfolded(analytical(layout(64, 8)));
    CHECK(t.dp == 8);
    CHECK(t.fold_replicas == 1);
}

TEST_CASE("fold: a straggler turns replica folding off, and the run is the unfolded one") {
    // variability slows GPU 9's passes: its replica is no longer like the others.
    const auto sets = analytical(layout(16, 4, {"variability.gpus=[{gpus: [9], factor: 1.3}]"}));
    const auto folded = run(sets, true);
    const auto full = run(sets, false);
    CHECK(folded.summary.fold_replicas == 4);
    CHECK(folded.summary.fold_replicas_refused ==
          "variability (a per-worker duration or host model) makes replicas differ");
    CHECK(folded.summary.events == full.summary.events);
    CHECK(results_json(folded.summary) == results_json(full.summary));
    const auto j = cs::report::to_json(folded.summary);
    CHECK(j["fold"]["replicas"] == 4);
    CHECK(j["fold"]["replicas_refused"] == folded.summary.fold_replicas_refused);
}

TEST_CASE("fold: zero3 is not folded by replicas; --no-fold unfolds") {
    const auto z3 =
        run(analytical(layout(16, 4,
                              {"parallelism.sharding=zero3", "parallelism.pp=1",
                               "parallelism.vpp=1", "schedule=1f1b", "parallelism.dp=32"})),
            true);
    CHECK(z3.summary.fold_replicas == 32);
    CHECK_FALSE(z3.summary.fold_replicas_refused.empty());
    const auto off = run(analytical(layout(16, 4)), false);
    CHECK(off.summary.fold_replicas == 4);
    CHECK(off.summary.fold_replicas_refused.empty());
}

TEST_CASE(
    "fold: runs on a sweep's cached cluster (kept routes, plans, accounting) equal fresh runs") {
    // A sweep loads every combination onto one cached cluster (its SweepCache's ClusterCache,
    // with the networks' kept state: p2p and collective plans and resolved algorithms) and reuses
    // one link accounting; replica folding copies followers' metrics at the end. Each run in
    // this sequence, on a cluster that already ran other shapes and layouts, gives the summary of
    // the same layout loaded alone (every key but the host's wall time, links included). The
    // sequence revisits a shape with another batch, and the same tp/pp/dp in another rank order
    // (its DP groups and pipeline pairs are other GPUs: nothing of the first may be reused for it).
    cs::api::SweepCache cache;  // Links::Listed: the summaries list their links
    const std::vector<std::vector<std::string>> sequence = {
        analytical(layout(16, 4)),
        analytical(layout(16, 8)),
        analytical(layout(16, 4, {"training.global_batch_size=64"})),
        analytical(layout(16, 4, {"parallelism.order=tp-dp-cp-pp"})),
        analytical(layout(16, 4, {"parallelism.order=tp-pp-dp", "parallelism.cp=1"})),
        analytical(layout(
            16, 4, {"schedule=1f1b", "parallelism.vpp=1", "parallelism.overlap_grad_reduce=true"})),
        analytical(layout(16, 4)),
    };
    int folded = 0;
    for (const auto& sets : sequence) {
        CAPTURE(sets.size());
        const auto cached_spec = cs::workload::load_experiment(
            kDefault, sets, cs::topology::kDefaultMaxMemory, &cache.clusters);
        const auto cached = cs::api::run(cached_spec, {}, &cache);
        const auto fresh = run(sets, true);
        CHECK(text(cached.summary) == text(fresh.summary));
        CHECK_FALSE(cached.summary.links.empty());
        if (cached.summary.fold_replicas < cached.summary.dp) ++folded;
    }
    CHECK(cache.clusters.builds() == 1);  // one cluster for all
    CHECK(folded >= 5);                   // the comparison covers replica-folded runs
}

TEST_CASE("fold: a link sketch on a sweep's cached cluster is the sketch of the run's link sums") {
    // A table-only sweep outside `flow` keeps no per-link table: the run's link sketch
    // (report::LinkSketch, the SweepCache's for the cluster: Links::Sketched) is told kept
    // transfers' costs, held totals and followers' sends as precomputed terms. The sketch is
    // linear in the per-link sums, so it must equal the sketch computed from a link accounting
    // of the same run (LinkSketch::of), both on the cached cluster (one run with the cache's
    // accounting, Links::Listed, and a second sketch attached at once: the network tells each
    // its own way) and on a fresh one without fast paths (same topology, so the same link keys).
    cs::api::SweepCache cache;
    const std::vector<std::vector<std::string>> sequence = {
        analytical(layout(16, 4)),
        analytical(layout(16, 8)),
        analytical(layout(16, 4, {"training.global_batch_size=64"})),
        analytical(layout(16, 4, {"parallelism.order=tp-pp-dp", "parallelism.cp=1"})),
        analytical(layout(
            16, 4, {"schedule=1f1b", "parallelism.vpp=1", "parallelism.overlap_grad_reduce=true"})),
        analytical(layout(16, 4), "ideal"),
        analytical(layout(16, 4)),
    };
    std::vector<std::uint64_t> values;
    int folded = 0;
    for (const auto& sets : sequence) {
        CAPTURE(values.size());
        const auto cached_spec = cs::workload::load_experiment(
            kDefault, sets, cs::topology::kDefaultMaxMemory, &cache.clusters);
        cache.links = cs::api::SweepCache::Links::Sketched;
        const auto sketched = cs::api::run(cached_spec, {}, &cache);
        CHECK(sketched.summary.links.empty());
        auto& entry = cache.of(cached_spec.cluster);
        REQUIRE(entry.sketch.has_value());
        const std::uint64_t sketch = entry.sketch->value();

        cs::report::LinkSketch beside(*cached_spec.cluster);
        cs::api::RunOptions both;
        both.attach = [&](cs::replay::Replay& r) { r.add_network_observer(beside); };
        cache.links = cs::api::SweepCache::Links::Listed;
        const auto accounted = cs::api::run(cached_spec, both, &cache);
        CHECK(text(accounted.summary).size() > text(sketched.summary).size());  // its links
        REQUIRE(entry.accounting.has_value());
        const auto& accounting = *entry.accounting;

        const auto fresh_spec = cs::api::load_experiment({kDefault, sets, ""});
        cs::report::LinkAccounting fresh(fresh_spec.cluster->links().size());
        cs::api::RunOptions alone;  // without fast paths: every flow told as it starts
        alone.fast_paths = false;
        alone.attach = [&](cs::replay::Replay& r) { r.add_network_observer(fresh); };
        cs::api::run(fresh_spec, alone);

        const std::uint64_t want = cs::report::LinkSketch::of(fresh, *fresh_spec.cluster);
        CHECK(sketch == want);
        CHECK(beside.value() == want);
        CHECK(cs::report::LinkSketch::of(accounting, *cached_spec.cluster) == want);
        values.push_back(sketch);
        if (sketched.summary.fold_replicas < sketched.summary.dp) ++folded;
    }
    CHECK(folded >= 4);  // followers' sends told as terms
    // The same layout gives the same sketch (first and last); the others move bytes or holding
    // times on some link (the ideal network holds none: its sketch is of bytes alone), so each
    // differs from every other.
    CHECK(values.front() == values.back());
    for (std::size_t i = 0; i + 1 < values.size(); ++i)
        for (std::size_t j = i + 1; j + 1 < values.size(); ++j)
            CHECK_MESSAGE(values[i] != values[j], i, " ", j);
}

TEST_CASE("fold: runs that reuse one replay scratch give the summaries of runs without it") {
    // A sweep passes its SweepCache's replay::ReplayScratch to all its runs: a replay takes the
    // per-worker containers kept for its worker count and resets them. The sequence changes the
    // worker count (128 GPUs: tp 4 gives 32 workers of 4 GPUs, tp 8 16 workers), the arrival
    // keys (other pp, vpp, batch), turns the host model on (arrived_at is then filled) and off
    // again, runs ZeRO-3 unit by unit (unit_gather) and then a layout with the same worker count
    // again: every run must give the summary of the same layout run without a scratch (every key
    // but the host's wall time, links included), so no field of a previous run's state may leak
    // into the next.
    //
    // The scratch also keeps per placement (tp, cp, dp, pp, ep, order) the workers' GPUs, the DP
    // communicators and the replica fold of one cluster, network and set of stage pairs, which
    // the specs here share through a cluster cache as a sweep's do. The last runs change one of
    // those at a time on placement A (tp 4, pp 8, dp 4): another cluster (half the NICs'
    // bandwidth: the followers' sends cross other rates), another network (ideal), and the
    // first's again (its kept fold was replaced meanwhile): each must still give a fresh run's
    // summary, followers' link bytes and times included.
    cs::api::SweepCache cache;
    const cs::replay::ReplayScratch& scratch = cache.replay;
    const std::vector<std::vector<std::string>> sequence = {
        analytical(layout(16, 4)),
        analytical(layout(16, 8)),
        analytical(layout(16, 4, {"training.global_batch_size=64"})),
        analytical(layout(16, 4,
                          {"compute.framework=megatron", "compute.host.launch=1us",
                           "training.global_batch_size=64"})),
        analytical(layout(16, 4,
                          {"parallelism.sharding=zero3", "parallelism.pp=1", "parallelism.vpp=1",
                           "schedule=1f1b", "parallelism.dp=32"})),
        analytical(layout(16, 4, {"parallelism.order=tp-pp-dp", "parallelism.cp=1"})),
        analytical(layout(16, 8, {"schedule=1f1b", "parallelism.vpp=1"})),
        analytical(layout(16, 4)),
        analytical(layout(16, 4, {"topology.node.nics.bandwidth=200Gbps"})),
        analytical(layout(16, 4), "ideal"),
        analytical(layout(16, 4)),
    };
    for (std::size_t i = 0; i < sequence.size(); ++i) {
        CAPTURE(i);
        const auto& sets = sequence[i];
        const auto spec = cs::workload::load_experiment(
            kDefault, sets, cs::topology::kDefaultMaxMemory, &cache.clusters);
        const auto reused = cs::api::run(spec, {}, &cache);
        const auto fresh = run(sets, true);
        CHECK(text(reused.summary) == text(fresh.summary));
    }
    // Two worker counts were kept: 128 / 4 = 32 (tp 4, whatever pp and dp) and 128 / 8 = 16.
    CHECK(scratch.entries() == 2);
    // Four placements: A (tp 4, pp 8, dp 4), B (tp 8, pp 8, dp 2), ZeRO-3's (tp 4, pp 1, dp 32)
    // and A's GPUs in tp-pp-dp order. ZeRO-3 is not folded by replicas, so three hold a fold.
    CHECK(scratch.placements() == 4);
    CHECK(scratch.folds() == 3);
    // Runs 2, 3 and 7 took A's kept fold (same cluster, network and interleaved stage pairs
    // whatever the batch or host model). Run 6 (B under 1f1b) has no interleaved wrap-around
    // pair (stage 7 to 0), unlike run 1's; runs 8 and 9 differ in cluster and network; run 10
    // finds run 9's fold in A's place.
    CHECK(scratch.folds_taken() == 3);
}

TEST_CASE("fold: followers' metrics copied at the end equal the notifications repeated") {
    // The summary's metrics copy a representative's records to its followers at the end
    // (a replay::FollowerCopier); one more observer that does not copy makes the replay
    // repeat every notification for each follower instead. Both give the same summary, and the
    // extra observer hears of every follower's passes (4 replicas: the representative's passes x
    // 4).
    struct Passes final : cs::replay::ReplayObserver {
        std::size_t passes = 0;
        void on_pass(const cs::replay::PassRecord&) override { ++passes; }
    };
    const auto sets = analytical(layout(16, 4));
    const auto copied = run(sets, true);
    Passes counter;
    const auto repeated =
        run(sets, true, [&](cs::replay::Replay& replay) { replay.add_observer(counter); });
    CHECK(copied.summary.fold_replicas == 1);
    CHECK(repeated.summary.fold_replicas == 1);
    CHECK(results_json(copied.summary) == results_json(repeated.summary));
    Passes unfolded_counter;
    (void)run(sets, false,
              [&](cs::replay::Replay& replay) { replay.add_observer(unfolded_counter); });
    CHECK(counter.passes == unfolded_counter.passes);
    CHECK(counter.passes > 0);
}

TEST_CASE("fold: destination-mod-k and adaptive routing fold members across spines, exactly") {
    // The 64 nodes of the ECMP case above, routed d_mod_k (docs/network.md, "Routing"): a
    // route's spine is a function of its destination GPU, and GPUs of one node differ only in
    // their rail, so member m's routes are member 0's shifted by m spines and share no link
    // with them. Some link carries traffic over a spine: not the trivial one-leaf case.
    // The same 64 nodes under routing: adaptive (docs/yaml/topology.md, "Routing"), in two pods of
    // 8 leaves (spine.down 8): each pod's 32 spines are one switch (pod<p>.spines) and each rail's
    // leaf has one 32-link bundle up to it, so member m's routes are member 0's with rail m's
    // leaves, except for the pods' bundles to the cores, which every rail's flows cross at the
    // same hop: shared, counted once per member; they carry traffic.
    // Either way folding by 8 is accepted and gives the unfolded summary.
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {layout(64, 8, {"topology.routing=d_mod_k"}), "spine"},
        {adaptive_two_pods(), ".spines->cores"}};
    for (const auto& [sets, crossed] : cases) {
        const auto folded = run(sets, true);
        const auto full = run(sets, false);
        CHECK(folded.summary.fold_copies == 8);
        CHECK(folded.summary.fold_refused.empty());
        CHECK(full.summary.fold_copies == 1);
        CHECK(folded.summary.events < full.summary.events);
        CHECK(results_json(folded.summary) == results_json(full.summary));
        bool carried = false;
        for (const auto& l : folded.summary.links)
            carried = carried || (l.name.find(crossed) != std::string::npos && l.bytes > 0);
        CHECK(carried);
    }
}

TEST_CASE("fold: an observer that copies link images and one told every member agree") {
    // Under member folding the summary's link accounting (copies_link_images) hears of member
    // 0's flows alone and copies its records onto the other members' links at the end; a plain
    // observer is told every member's flows through the link maps. Both must see what the
    // unfolded run shows: here, the bytes per link of a plain observer in the folded run equal
    // those of one in the unfolded run, and the summaries (link table included) are equal.
    struct Bytes final : cs::network::NetworkObserver {
        std::map<cs::topology::LinkId, double> bytes;
        void on_flow_start(const FlowStart& f) override {
            for (auto l : f.path)
                bytes[l] += f.bytes;
        }
    };
    // Under adaptive routing in two pods, the links every member shares too (the pods' bundles
    // to the cores): the copying accounting hears member 0's flows counted once per member
    // there, the plain observer each member's flows.
    for (const auto& sets : {layout(64, 8, {"topology.routing=d_mod_k"}), adaptive_two_pods()}) {
        Bytes folded_bytes, full_bytes;
        const auto folded = run(sets, true, [&](cs::replay::Replay& replay) {
            replay.add_network_observer(folded_bytes);
        });
        const auto full = run(sets, false, [&](cs::replay::Replay& replay) {
            replay.add_network_observer(full_bytes);
        });
        CHECK(folded.summary.fold_copies == 8);
        CHECK(results_json(folded.summary) == results_json(full.summary));
        CHECK(folded_bytes.bytes.size() > 0);
        CHECK(folded_bytes.bytes == full_bytes.bytes);
    }
}

TEST_CASE("fold: a stop after the iteration's end changes nothing, even with replicas folded") {
    // RunOptions::stop_at (plan's confirmations): a stop that comes after the iteration ended
    // leaves the run as it was, replica folding included (the followers, copied at the end, do
    // not count as unfinished when the stop comes); one before the end stops the run there
    // and leaves the summary empty. The layout of the first replica-folding test: one class.
    const auto sets = analytical(layout(16, 4));
    const auto spec = cs::api::load_experiment({kDefault, sets, ""});
    const auto whole = cs::api::run(spec);
    REQUIRE_FALSE(whole.stopped);
    CHECK(whole.summary.fold_replicas == 1);
    const auto end = cs::Time::from_seconds_ceil(whole.summary.iteration_time_s);

    cs::api::RunOptions after;
    after.stop_at = end + cs::Time::ps(1);
    const auto late = cs::api::run(spec, after);
    CHECK_FALSE(late.stopped);
    CHECK(results_json(late.summary) == results_json(whole.summary));
    CHECK(late.summary.fold_replicas == 1);
    CHECK(late.summary.events == whole.summary.events + 1);  // the stop's own event

    cs::api::RunOptions before;
    before.stop_at = cs::Time::from_seconds_ceil(whole.summary.iteration_time_s / 2);
    const auto early = cs::api::run(spec, before);
    CHECK(early.stopped);
    CHECK(early.summary.iteration_time_s == 0);  // no summary

    // A trace or the report's detail would be left unfinished by a stop: refused.
    before.detail = true;
    CHECK_THROWS_AS(cs::api::run(spec, before), cs::SimulationError);
}

TEST_CASE("fold: a moving stop checks at whole periods and stops at the first check that says so") {
    // RunOptions::stop_when (plan's confirmations, whose k-th best improves while they run): the
    // replay asks stop_when(now) at the start and every `every` of simulated time while the
    // iteration is going. With every = T / 9.5 (T the iteration time, rounded up to a
    // picosecond) the checks fall at k * every: 9 * every < T < 10 * every, so a test that never
    // holds is asked at k = 0..9, the check at 10 * every finds the iteration ended and asks
    // nothing, and the run is the whole run with 11 more events (the checks). A test that holds
    // from T / 2 on is asked at k = 0..5 (5 * every = 0.526 T is the first multiple past T / 2)
    // and stops the run there; one that always holds stops it at the start.
    const auto sets = analytical(layout(16, 4));
    const auto spec = cs::api::load_experiment({kDefault, sets, ""});
    const auto whole = cs::api::run(spec);
    REQUIRE_FALSE(whole.stopped);
    const auto every = cs::Time::from_seconds_ceil(whole.summary.iteration_time_s / 9.5);
    const auto multiples = [&](int n) {
        std::vector<cs::Time> at;
        for (int k = 0; k <= n; ++k)
            at.push_back(every * k);
        return at;
    };

    std::vector<cs::Time> asked;
    cs::api::RunOptions never;
    never.stop_when = [&](cs::Time now) {
        asked.push_back(now);
        return false;
    };
    never.stop_check_every = every;
    const auto kept = cs::api::run(spec, never);
    CHECK_FALSE(kept.stopped);
    CHECK(asked == multiples(9));
    CHECK(results_json(kept.summary) == results_json(whole.summary));
    CHECK(kept.summary.events == whole.summary.events + 11);

    asked.clear();
    const auto half = cs::Time::from_seconds_ceil(whole.summary.iteration_time_s / 2);
    cs::api::RunOptions halfway = never;
    halfway.stop_when = [&](cs::Time now) {
        asked.push_back(now);
        return now >= half;
    };
    const auto stopped = cs::api::run(spec, halfway);
    CHECK(stopped.stopped);
    CHECK(asked == multiples(5));
    CHECK(stopped.summary.iteration_time_s == 0);  // no summary

    asked.clear();
    cs::api::RunOptions always = never;
    always.stop_when = [&](cs::Time now) {
        asked.push_back(now);
        return true;
    };
    CHECK(cs::api::run(spec, always).stopped);
    CHECK(asked == multiples(0));

    // As with stop_at: no trace or detail, and the replay refuses a period of zero.
    halfway.detail = true;
    CHECK_THROWS_AS(cs::api::run(spec, halfway), cs::SimulationError);
    halfway.detail = false;
    halfway.stop_check_every = cs::Time::zero();
    CHECK_THROWS_AS(cs::api::run(spec, halfway), cs::SimulationError);
}
