// Chrome JSON traces: well-formed events, nesting without overlap, complete flows, filters,
// byte-identical output; the writer's expansion of a pass into its steps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "../replay/test_support.hpp"
#include "core/errors.hpp"
#include "report/chrome_trace.hpp"
#include "report/trace_writer.hpp"
#include "trace_test_support.hpp"
#include "workload/experiment.hpp"

using namespace cs;
using nlohmann::json;

namespace {

std::int64_t ps_of(const json& us) {
    return std::llround(us.get<double>() * 1e6);
}

json load(const std::filesystem::path& p) {
    return json::parse(test::read_bytes(p));
}

struct Span {
    std::int64_t start, end;
    std::string name;
};

// Per (pid, tid): the complete events, checked to nest without partial overlap.
std::map<std::pair<int, int>, std::vector<Span>> check_slices(const json& events) {
    std::map<std::pair<int, int>, std::vector<Span>> tracks;
    for (const auto& e : events) {
        REQUIRE(e.contains("ph"));
        REQUIRE(e.contains("pid"));
        if (e["ph"] != "X") continue;
        REQUIRE(e["tid"].is_number_integer());
        REQUIRE(e["ts"].is_number());
        REQUIRE(e["dur"].is_number());
        REQUIRE(e["name"].is_string());
        REQUIRE(e["args"].is_object());
        const auto start = ps_of(e["ts"]);
        CHECK(ps_of(e["dur"]) >= 0);
        tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
            {start, start + ps_of(e["dur"]), e["name"].get<std::string>()});
    }
    for (auto& [key, spans] : tracks) {
        auto sorted = spans;
        std::stable_sort(sorted.begin(), sorted.end(), [](const Span& a, const Span& b) {
            return a.start != b.start ? a.start < b.start : a.end > b.end;
        });
        std::vector<Span> stack;
        for (const auto& s : sorted) {
            while (!stack.empty() && stack.back().end <= s.start)
                stack.pop_back();
            // Either disjoint from everything open, or inside the innermost open slice.
            if (!stack.empty())
                CHECK_MESSAGE(s.end <= stack.back().end, "slice " << s.name << " at " << s.start
                                                                  << " overlaps "
                                                                  << stack.back().name);
            stack.push_back(s);
        }
    }
    return tracks;
}

// Every flow id (v2: "bind_id" on complete events): one slice with only "flow_out" (its start),
// one with only "flow_in" (its end), any number with both, in time order. No v1 flow events.
// Returns the number of arrows: a flow through n slices draws n - 1.
bool flag(const json& e, const char* key) {
    const auto it = e.find(key);
    return it != e.end() && *it == true;
}

std::size_t check_flows(const json& events) {
    struct Point {
        std::int64_t ts;
        bool in, out;
    };
    std::map<std::uint64_t, std::vector<Point>> flows;
    for (const auto& e : events) {
        const std::string ph = e["ph"];
        CHECK_MESSAGE((ph != "s" && ph != "t" && ph != "f"), "v1 flow event " << e.dump());
        if (ph != "X" || !e.contains("bind_id")) continue;
        const bool in = flag(e, "flow_in"), out = flag(e, "flow_out");
        CHECK((in || out));
        flows[e["bind_id"].get<std::uint64_t>()].push_back({ps_of(e["ts"]), in, out});
    }
    std::size_t arrows = 0;
    for (auto& [id, points] : flows) {
        std::stable_sort(points.begin(), points.end(),
                         [](const Point& a, const Point& b) { return a.ts < b.ts; });
        REQUIRE(points.size() >= 2);
        CHECK_MESSAGE((points.front().out && !points.front().in), "flow " << id);
        CHECK_MESSAGE((points.back().in && !points.back().out), "flow " << id);
        for (std::size_t i = 1; i + 1 < points.size(); ++i)
            CHECK_MESSAGE((points[i].in && points[i].out), "flow " << id);
        arrows += points.size() - 1;
    }
    return arrows;
}

// Nanoseconds as Perfetto's JSON importer computes them: the number parsed as a double,
// times 1000, truncated (json_utils CoerceToTs).
std::int64_t perfetto_ns(const json& us) {
    return static_cast<std::int64_t>(us.get<double>() * 1000.0);
}

// Replays Perfetto's slice stack per thread on the importer's nanoseconds: events sorted by
// start (longer first on ties), a slice closes when an event starts at or after its end, and a
// slice that ends after the innermost open one is dropped. Every X event must fit; every one
// carrying a flow must be a pipeline pass or transfer, outside any other slice, so that the
// flow binds to it. Returns the number of X events checked.
std::size_t check_perfetto_import(const json& events) {
    struct Event {
        std::int64_t start, end;
        std::string name;
        bool flow;
    };
    std::map<std::pair<int, int>, std::vector<Event>> threads;
    std::size_t n = 0;
    for (const auto& e : events) {
        if (e["ph"] != "X") continue;
        const auto start = perfetto_ns(e["ts"]);
        threads[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
            {start, start + perfetto_ns(e["dur"]), e["name"].get<std::string>(),
             e.contains("bind_id")});
        ++n;
    }
    for (auto& [key, evs] : threads) {
        std::stable_sort(evs.begin(), evs.end(), [](const Event& a, const Event& b) {
            return a.start != b.start ? a.start < b.start : a.end > b.end;
        });
        std::vector<Event> stack;
        for (const auto& s : evs) {
            while (!stack.empty() && stack.back().end <= s.start)
                stack.pop_back();
            if (!stack.empty())
                CHECK_MESSAGE(s.end <= stack.back().end,
                              s.name << " [" << s.start << ", " << s.end << "] ns ends after "
                                     << stack.back().name << " [" << stack.back().start << ", "
                                     << stack.back().end << "] ns");
            if (s.flow) {
                const bool pass = s.name.size() > 1 &&
                                  std::string("FBW").find(s.name[0]) != std::string::npos &&
                                  s.name.find_first_not_of("0123456789", 1) == std::string::npos;
                const bool transfer =
                    s.name.rfind("send ", 0) == 0 || s.name.rfind("recv ", 0) == 0;
                CHECK_MESSAGE((pass || transfer), "flow bound to " << s.name);
                CHECK_MESSAGE(stack.empty(),
                              "flow on " << s.name << " inside " << stack.back().name);
            }
            stack.push_back(s);
        }
    }
    return n;
}

std::size_t count_named(const json& events, const std::string& ph, const std::string& prefix,
                        bool digits_after = true) {
    std::size_t n = 0;
    for (const auto& e : events) {
        if (e["ph"] != ph || !e.contains("name")) continue;
        const std::string name = e["name"];
        if (name.rfind(prefix, 0) != 0) continue;
        if (digits_after &&
            (name.size() == prefix.size() ||
             name.find_first_not_of("0123456789", prefix.size()) != std::string::npos))
            continue;
        ++n;
    }
    return n;
}

}  // namespace

TEST_CASE("JSON trace of 16 GPUs: processes, passes, steps, flows, counters, metadata") {
    const auto path = test::trace_dir() / "sixteen.json";
    const auto summary = test::run_fixture(path);
    const json doc = load(path);
    REQUIRE(doc["traceEvents"].is_array());
    const json& ev = doc["traceEvents"];
    check_slices(ev);

    // 16 GPUs x 4 microbatches: 64 forward and 64 backward slices; each pass runs the stage's
    // 2 layers (8 layers / 4 stages), one nested "layer" slice per layer: (64 + 64) x 2 = 256.
    CHECK(count_named(ev, "X", "F") == 64);
    CHECK(count_named(ev, "X", "B") == 64);
    CHECK(count_named(ev, "X", "layer", false) == 256);
    // One optimizer step per GPU, of the optimizer's kind and the whole model's.
    CHECK(count_named(ev, "X", "optimizer step", false) == 16);
    for (const auto& e : ev)
        if (e["ph"] == "X" && e["name"] == "optimizer step") {
            CHECK(e["args"]["kernel"] == "optimizer");
            CHECK(e["args"]["part"] == "model");
        }
    // Pipeline transfers: per replica 3 stage boundaries x 4 microbatches, both directions = 24,
    // x 2 replicas = 48; each is sent by both TP ranks: 96 send and 96 receive slices.
    CHECK(count_named(ev, "X", "send act ") == 48);
    CHECK(count_named(ev, "X", "send grad ") == 48);
    CHECK(count_named(ev, "X", "recv act ") + count_named(ev, "X", "recv grad ") == 96);
    // Arrows: per transfer and TP rank, pass -> send -> receive -> pass: 96 x 3 = 288. A flow
    // follows a microbatch through the 4 stages (per replica, TP rank and direction: 4 x 2 x 2 x
    // 2 = 32 flows of 10 slices), so 8 slices of each flow are steps: 32 x 8 = 256.
    CHECK(check_flows(ev) == 288);
    std::size_t steps = 0;
    for (const auto& e : ev)
        if (flag(e, "flow_in") && flag(e, "flow_out")) ++steps;
    CHECK(steps == 256);
    // DP gradient sync on every GPU (one chunk per stage).
    CHECK(count_named(ev, "X", "dp gradient sync", false) == 16);

    // Processes: cluster (pid 1) and the two nodes (pids 2, 3).
    std::set<std::string> processes;
    for (const auto& e : ev)
        if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"]);
    CHECK(processes == std::set<std::string>{"cluster", "node 0", "node 1"});

    // Pass arguments.
    bool checked_args = false;
    for (const auto& e : ev) {
        if (e["ph"] != "X" || e["name"] != "F0" || e["pid"] != 2) continue;
        const auto& a = e["args"];
        CHECK(a["layers"] == 2);
        CHECK(a["microbatch"] == 0);
        CHECK(a["pass"] == "forward");
        CHECK(a["model_flops"].get<double>() > 0);
        // 2 layers x 100 us of forward compute.
        CHECK(a["compute_us"].get<double>() == doctest::Approx(200.0));
        checked_args = true;
    }
    CHECK(checked_args);
    // Every pass slice says its pass (what `diff` reads): this 1F1B run's 64 F slices forward,
    // its 64 B slices backward (counted above by name).
    std::size_t forwards = 0, backwards = 0;
    for (const auto& e : ev) {
        if (e["ph"] != "X" || !e.contains("args") || !e["args"].contains("dp_replica")) continue;
        const std::string name = e["name"];
        const bool forward = e["args"]["pass"] == "forward";
        CHECK(forward == (name[0] == 'F'));
        CHECK((forward || e["args"]["pass"] == "backward"));
        (forward ? forwards : backwards) += 1;
    }
    CHECK(forwards == 64);
    CHECK(backwards == 64);

    // Counters: inter-node links by default on a multi-node cluster; one value per time per
    // counter, percentages.
    std::map<std::string, std::int64_t> last;
    std::size_t counters = 0;
    for (const auto& e : ev) {
        if (e["ph"] != "C" || !e["args"].contains("%")) continue;  // links; memory is in GiB
        ++counters;
        const std::string key = std::to_string(e["pid"].get<int>()) + e["name"].get<std::string>();
        const auto ts = ps_of(e["ts"]);
        if (last.count(key)) CHECK(ts > last[key]);
        last[key] = ts;
        const double v = e["args"]["%"];
        CHECK(v >= 0.0);
        CHECK(v <= 100.0 + 1e-9);
    }
    CHECK(counters > 0);

    CHECK(count_named(ev, "i", "iteration start", false) == 1);
    CHECK(count_named(ev, "i", "iteration end", false) == 1);
    CHECK(doc["metadata"]["iteration_time_s"].get<double>() == summary.iteration_time_s);
    CHECK(doc["metadata"]["schedule"] == "1f1b");
    CHECK_FALSE(doc["metadata"].contains("wall_time_s"));
}

TEST_CASE("memory counters: per traced GPU, activations held as the schedule counts") {
    // Each GPU gets "GPU g memory: total / parameters / gradients / optimizer states /
    // activations" (GiB). Activations rise at each forward pass's start and fall at the end of the
    // backward that frees them, so their peak is the memory model's figure for the stage
    // (the summary's peak_activation_bytes: in-flight chunks x activation memory per chunk), and
    // none is held at the end. total = parameters + gradients + optimizer states + activations,
    // at most the worst GPU's memory (summary memory_per_gpu_bytes.total).
    const auto path = test::trace_dir() / "memory.json";
    const auto summary = test::run_fixture(path);
    const json doc = load(path);
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    std::map<std::string, std::vector<double>> values;
    for (const auto& e : doc["traceEvents"])
        if (e["ph"] == "C" && e["args"].contains("GiB"))
            values[e["name"].get<std::string>()].push_back(e["args"]["GiB"].get<double>());
    // Stage 0 holds GPU 0 (tp-cp-dp-pp order: GPU = tp + 2 dp + 4 stage).
    const auto& acts = values["GPU 0 memory: activations"];
    REQUIRE(!acts.empty());
    CHECK(*std::max_element(acts.begin(), acts.end()) * kGiB ==
          doctest::Approx(static_cast<double>(summary.stages[0].peak_activation_bytes)));
    CHECK(acts.back() == 0.0);
    const auto& total = values["GPU 0 memory: total"];
    const double fixed = values["GPU 0 memory: parameters"].at(0) +
                         values["GPU 0 memory: gradients"].at(0) +
                         values["GPU 0 memory: optimizer states"].at(0);
    CHECK(fixed > 0);
    REQUIRE(total.size() == acts.size());
    for (std::size_t i = 0; i < total.size(); ++i)
        CHECK(total[i] == doctest::Approx(fixed + acts[i]));
    CHECK(*std::max_element(total.begin(), total.end()) * kGiB <=
          static_cast<double>(summary.memory.total.value) * (1 + 1e-12));
    // Every GPU of the 16 is traced: 5 tracks each.
    std::size_t tracks = 0;
    for (const auto& [name, v] : values)
        tracks += name.find(" memory: ") != std::string::npos;
    CHECK(tracks == 16 * 5);
}

TEST_CASE("traces are byte-identical across runs and do not depend on the output path") {
    for (const char* ext : {".json", ".pftrace"}) {
        const auto a = test::trace_dir() / (std::string("first") + ext);
        std::filesystem::create_directories(test::trace_dir() / "elsewhere");
        const auto b = test::trace_dir() / "elsewhere" / (std::string("second-name") + ext);
        test::run_fixture(a);
        test::run_fixture(b);
        const auto x = test::read_bytes(a), y = test::read_bytes(b);
        CHECK(!x.empty());
        CHECK_MESSAGE(x == y, ext);
    }
}

TEST_CASE("--trace-ranks keeps the chosen GPUs, their node's links and their arrows") {
    const auto path = test::trace_dir() / "ranks.json";
    report::TraceOptions opt;
    opt.ranks = {0, 1};  // stage 0 of replica 0 (tp-cp-dp-pp: GPU = tp + 2 dp + 4 stage)
    test::run_fixture(path, opt);
    const json doc = load(path);
    const json& ev = doc["traceEvents"];
    check_slices(ev);
    std::set<std::string> threads;
    for (const auto& e : ev) {
        if (e["ph"] == "M" && e["name"] == "thread_name") threads.insert(e["args"]["name"]);
        if (e["ph"] == "X" || e["ph"] == "C") CHECK(e["pid"].get<int>() <= 2);  // cluster, node 0
    }
    for (const auto& t : threads)
        CHECK_MESSAGE((t == "iteration" || t.rfind("GPU 0 ", 0) == 0 || t.rfind("GPU 1 ", 0) == 0),
                      t);
    // Each traced GPU: 4 forwards whose activation leaves (pass -> send), 4 backwards whose
    // gradient arrives (receive -> pass); the other ends are not traced.
    CHECK(check_flows(ev) == 2 * (4 + 4));
    CHECK(count_named(ev, "X", "F") == 8);
}

TEST_CASE("--trace-links none / all") {
    const auto none = test::trace_dir() / "links-none.json";
    const auto all = test::trace_dir() / "links-all.json";
    const auto inter = test::trace_dir() / "links-inter.json";
    report::TraceOptions opt;
    opt.links = report::TraceLinks::None;
    test::run_fixture(none, opt);
    opt.links = report::TraceLinks::All;
    test::run_fixture(all, opt);
    opt.links = report::TraceLinks::InterNode;
    test::run_fixture(inter, opt);
    const auto names = [](const std::filesystem::path& p) {
        std::set<std::string> s;
        const json doc = load(p);
        for (const auto& e : doc["traceEvents"])
            if (e["ph"] == "C" && e["args"].contains("%")) s.insert(e["name"].get<std::string>());
        return s;
    };
    CHECK(names(none).empty());
    const auto a = names(all), i = names(inter);
    CHECK(!i.empty());
    // The intra-node (NVSwitch) links carry the TP-rank pipeline and DP traffic inside a node:
    // "all" shows strictly more links than "inter-node", and every inter-node one.
    CHECK(a.size() > i.size());
    for (const auto& n : i)
        CHECK(a.count(n) == 1);
}

TEST_CASE("an unknown trace extension is a ConfigError and leaves no file") {
    const auto path = test::trace_dir() / "trace.txt";
    CHECK_THROWS_AS(test::run_fixture(path), ConfigError);
    CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a pass expands into its steps; blocking collectives also go on the TP track") {
    using workload::Step;
    auto cluster = test::chain_cluster(2);
    workload::PassPlan plan;
    Step qkv;
    qkv.label = "qkv";
    qkv.kernel = workload::KernelKind::Gemm;
    qkv.part = workload::ModelPart::Head;
    qkv.duration = Time::us(10);
    Step ar;
    ar.kind = Step::Kind::Collective;
    ar.label = "all-reduce tp";
    ar.collective = network::CollectiveKind::AllReduce;
    ar.group = workload::GroupKind::Tp;
    ar.size = Bytes{1 << 20};
    Step mlp;
    mlp.label = "mlp";
    mlp.duration = Time::us(20);
    mlp.repeat = 2;
    plan.steps = {qkv, ar, mlp};

    {
        report::TraceContext ctx;
        ctx.cluster = cluster.get();
        ctx.workers = {replay::Worker{0, 0, {0, 1}}};
        workload::ParallelLayout layout;
        layout.tp = 2;
        ctx.ranks = workload::RankLayout(layout);
        ctx.first_layer = {0};
        ctx.layers = {1};
        const auto path = test::trace_dir() / "steps.json";
        report::TraceWriter w(path, ctx, {});
        // The replay's times of one execution of each step: qkv 10, all-reduce 5, mlp 20 us.
        const std::vector<Time> step_times{Time::us(10), Time::us(5), Time::us(20)};
        replay::PassRecord p;
        p.worker = 0;
        p.start = Time::us(100);
        p.compute = Time::us(50);    // 10 + 2 x 20
        p.collective = Time::us(5);  // the all-reduce
        p.end = Time::us(155);
        p.plan = &plan;
        p.step_times = step_times;
        p.id = 1;
        w.on_pass(p);
        w.on_iteration_end(p.end);
        w.finish(json::object());

        const json ev = load(path)["traceEvents"];
        check_slices(ev);
        // Expected tiling of [100, 155] us: qkv [100, 110], all-reduce [110, 115],
        // mlp [115, 135], mlp [135, 155]; the all-reduce again on GPU 0's and GPU 1's TP track.
        std::map<std::string, std::vector<std::pair<double, double>>> got;
        std::map<int, std::string> thread_names;
        for (const auto& e : ev)
            if (e["ph"] == "M" && e["name"] == "thread_name")
                thread_names[e["tid"].get<int>()] = e["args"]["name"];
        for (const auto& e : ev)
            if (e["ph"] == "X")
                got[thread_names[e["tid"].get<int>()] + "/" + e["name"].get<std::string>()]
                    .push_back({e["ts"].get<double>(), e["dur"].get<double>()});
        using V = std::vector<std::pair<double, double>>;
        CHECK(got["GPU 0 compute/F0"] == V{{100, 55}});
        CHECK(got["GPU 0 compute/qkv"] == V{{100, 10}});
        CHECK(got["GPU 0 compute/all-reduce tp"] == V{{110, 5}});
        CHECK(got["GPU 0 compute/mlp"] == V{{115, 20}, {135, 20}});
        CHECK(got["GPU 0 tp comm/all-reduce tp"] == V{{110, 5}});
        CHECK(got["GPU 1 tp comm/all-reduce tp"] == V{{110, 5}});
        for (const auto& e : ev)
            if (e["ph"] == "X" && e["name"] == "all-reduce tp" && e["args"].contains("peers"))
                CHECK(e["args"]["peers"] == "0,1");
        // A compute step says its kernel class and part of the model (what `diff` reads; the
        // label is for people): qkv as set above, mlp Step's defaults. The collective says
        // neither.
        std::map<std::string, std::string> kinds;
        for (const auto& e : ev)
            if (e["ph"] == "X" && thread_names[e["tid"].get<int>()] == "GPU 0 compute" &&
                !e["args"].contains("microbatch"))
                kinds[e["name"].get<std::string>()] =
                    e["args"].value("kernel", "-") + "/" + e["args"].value("part", "-");
        CHECK(kinds == std::map<std::string, std::string>{{"qkv", "gemm/head"},
                                                          {"all-reduce tp", "-/-"},
                                                          {"mlp", "unmapped/layers"}});
    }
}

TEST_CASE("V-shaped placement: chunks handed over on one GPU get pass-to-pass arrows") {
    const auto spec = workload::load_experiment(
        std::filesystem::path(CLUSTERSIM_SOURCE_DIR) / "tests/report/sixteen-gpus-v.yaml",
        {"topology.nodes=2"});
    const auto path = test::trace_dir() / "zbv.json";
    api::RunOptions opt;
    opt.trace = path;
    api::run(spec, opt).summary;
    const json doc = load(path);
    const json& ev = doc["traceEvents"];
    check_slices(ev);
    // 8 virtual stages (4 GPUs x 2 chunks) per replica: 7 boundaries x 8 microbatches in each
    // direction = 112 dependencies, x 2 replicas x 2 TP ranks = 448 arrows. ZB-V places virtual
    // stages 3 and 4 on the last GPU, so 8 activations + 8 gradients per replica stay on the GPU:
    // 16 x 2 x 2 = 64 dependencies go straight from pass to pass (1 arrow), the other 384 pass
    // through send and receive (3 arrows): 64 + 3 x 384 = 1216 arrows.
    CHECK(check_flows(ev) == 1216);
    check_perfetto_import(ev);
    CHECK(count_named(ev, "X", "W") == 16 * 2 * 8);  // a weight pass per GPU, chunk, microbatch
}

TEST_CASE("JSON trace as Perfetto imports it: nested in whole nanoseconds, flows on the passes") {
    // The default experiment, traced for GPU 224 (tensor rank 0 of the last stage of the first
    // replica): with times written in picoseconds, which Perfetto truncates to nanoseconds
    // separately for ts and dur, 8 of its 6724 slices (blocking "all-reduce tp" steps at the
    // end of a forward) ended 1 ns after their pass and were dropped; on the whole trace, 256
    // of 1.57 M slices on the 32 GPUs of that stage.
    const auto spec = workload::load_experiment(
        std::filesystem::path(CLUSTERSIM_SOURCE_DIR) / "workloads/default.yaml", {});
    const auto path = test::trace_dir() / "default.json";
    api::RunOptions opt;
    opt.trace = path;
    opt.trace_options.ranks = {224};
    api::run(spec, opt);
    const json doc = load(path);
    const json& ev = doc["traceEvents"];
    // The GPU's streams hold 6724 slices; its host track (the default runs Megatron's host) the
    // rest: an issue slice per pass and the optimizer step, p2p and sync slices.
    const std::size_t host_slices = count_named(ev, "X", "issue ", false) +
                                    count_named(ev, "X", "p2p", false) +
                                    count_named(ev, "X", "sync", false);
    CHECK(count_named(ev, "X", "issue ", false) == 2 * 2 * 64 + 1);  // F, B x 2 chunks x 64 + opt
    CHECK(check_perfetto_import(ev) == 6724 + host_slices);
    CHECK(check_flows(ev) > 0);
    // Times are whole nanoseconds: ts x 1000 is an integer to within a double's rounding.
    for (const auto& e : ev) {
        if (!e.contains("ts")) continue;
        const double ns = e["ts"].get<double>() * 1000.0;
        CHECK(std::abs(ns - std::round(ns)) < 1e-3);
    }
}

TEST_CASE("JSON times read back to the same nanoseconds, truncated or rounded") {
    // 1.005 us: the nearest double to 1.005 is 1.00499999999999989..., and x 1000 gives
    // 1004.9999999999999, which truncates to 1004 ns; the writer moves to the next double up.
    // Three readers: Perfetto's number path (double x 1000, truncated), a rounding reader, and
    // Perfetto's string path for "ts" (the decimal read exactly, digits past the nanosecond
    // dropped).
    const auto check = [](std::int64_t ns) {
        const std::string text = report::trace_timestamp(Time::ns(ns));
        const double us = std::stod(text);
        CHECK_MESSAGE(static_cast<std::int64_t>(us * 1000.0) == ns, text);
        CHECK_MESSAGE(std::llround(us * 1000.0) == ns, text);
        const auto dot = text.find('.');
        REQUIRE(dot != std::string::npos);
        const std::string frac = (text.substr(dot + 1) + "000").substr(0, 3);
        CHECK_MESSAGE(std::stoll(text.substr(0, dot)) * 1000 + std::stoll(frac) == ns, text);
    };
    CHECK(report::trace_timestamp(Time::ns(1005)) != "1.005");
    CHECK(report::trace_timestamp(Time::ns(12345)) == "12.345");
    CHECK(report::trace_timestamp(Time::ps(12345678)) == "12.345");  // rounded down to ns
    CHECK(report::trace_timestamp(Time::zero()) == "0.000");
    for (std::int64_t ns = 0; ns < 200000; ++ns)
        check(ns);
    for (std::int64_t ns = 1'000'000'000'000; ns < 1'000'000'050'000; ++ns)
        check(ns);
}

TEST_CASE("JSON sink: a slice's first flow goes on its X event, further ones as v1 events") {
    const auto path = test::trace_dir() / "two-flows.json";
    report::ChromeJsonSink sink(path);
    sink.process(1, 2, "node 0");
    sink.track(2, 1, "host", 0);
    // 1.5 ns to 2.5 ns: written as [1, 2] ns, "ts":0.001, "dur":0.001.
    report::TraceSlice s{2, Time::ps(1500), Time::ps(2500), "launch", {}, {}};
    s.flows = {{7, report::FlowRef::Role::Step}, {8, report::FlowRef::Role::Begin}};
    sink.slice(s, {});
    sink.finish({});
    const json ev = load(path)["traceEvents"];
    std::size_t x = 0, v1 = 0;
    for (const auto& e : ev) {
        if (e["ph"] == "X") {
            ++x;
            CHECK(e["bind_id"] == 7);
            CHECK(flag(e, "flow_in"));
            CHECK(flag(e, "flow_out"));
            CHECK(perfetto_ns(e["ts"]) == 1);
            CHECK(perfetto_ns(e["dur"]) == 1);
        }
        if (e["ph"] == "s") {
            ++v1;
            CHECK(e["id"] == 8);
        }
    }
    CHECK(x == 1);
    CHECK(v1 == 1);
}

TEST_CASE("host tracks: the host thread of each traced GPU, issue / p2p / sync slices") {
    // The 16-GPU fixture with Megatron's host (compute.framework: megatron turns on its default
    // compute.host: sync_after_p2p, launch, pass and p2p costs). Each GPU's host issues its
    // 4 forward and 4 backward passes ("issue F0" ... one slice per pass) and its optimizer step.
    const auto root = std::filesystem::path(CLUSTERSIM_SOURCE_DIR);
    for (const bool host : {true, false}) {
        CAPTURE(host);
        auto spec = workload::load_experiment(
            root / "tests/report/sixteen-gpus.yaml",
            // A 1 us launch keeps the passes GPU-bound (Megatron's 25 us x its kernels per
            // profiled layer would outrun these short profiled passes and leave nothing to sync).
            host ? std::vector<std::string>{"topology.nodes=2", "compute.framework=megatron",
                                            "compute.host.launch=1us"}
                 : std::vector<std::string>{"topology.nodes=2"});
        const auto path = test::trace_dir() / (host ? "host.json" : "nohost.json");
        api::RunOptions opt;
        opt.trace = path;
        api::run(spec, opt);
        const json doc = load(path);
        const json& ev = doc["traceEvents"];
        check_slices(ev);  // host slices of a track nest or are disjoint, like every other
        std::size_t host_tracks = 0;
        for (const auto& e : ev)
            if (e["ph"] == "M" && e["name"] == "thread_name" &&
                e["args"]["name"].get<std::string>().ends_with(" host"))
                ++host_tracks;
        if (!host) {
            // A profile run without a framework has no host.
            CHECK(host_tracks == 0);
            CHECK(count_named(ev, "X", "issue ", false) == 0);
            continue;
        }
        CHECK(host_tracks == 16);
        CHECK(count_named(ev, "X", "issue F") == 64);
        CHECK(count_named(ev, "X", "issue B") == 64);
        CHECK(count_named(ev, "X", "issue optimizer step", false) == 16);
        // Every pass that sends (F on stages 0-2, B on stages 1-3: 2 x 3 x 4 per replica and
        // TP rank, x 4) posts a p2p send; every pass that receives, a receive: 96 + 96.
        CHECK(count_named(ev, "X", "p2p", false) == 192);
        // sync_after_p2p: the host waits for a sending pass on the GPU unless it ended already.
        CHECK(count_named(ev, "X", "sync", false) > 0);
        CHECK(doc["metadata"]["host_fraction"].get<double>() > 0.0);

        // The protobuf trace holds the same host tracks.
        if (!test::have_protoc()) {
            MESSAGE("SKIPPED: protoc not found; the .pftrace host-track check needs it");
            continue;
        }
        const auto pf = test::trace_dir() / "host.pftrace";
        opt.trace = pf;
        api::run(spec, opt);
        std::size_t pf_host_tracks = 0;
        for (const auto& packet : test::decode_pftrace(pf))
            if (const auto* d = packet.message("track_descriptor"))
                if (d->field("name") == "host") ++pf_host_tracks;
        CHECK(pf_host_tracks == 16);
    }
}

TEST_CASE("ZeRO-3: the units' all-gathers and reduce-scatters on the dp track, waits on passes") {
    // Two H200s, one stage of 8 layers, dp = 2 (4 microbatches of 1 per replica), sharding zero3:
    // per microbatch the forward gathers the 8 units and the backward gathers them again and
    // reduce-scatters their gradients: 4 x 16 = 64 all-gathers and 4 x 8 = 32 reduce-scatters
    // of the one shard group {0, 1}, each drawn on both GPUs' dp track.
    const auto spec = workload::load_experiment(
        std::filesystem::path(CLUSTERSIM_SOURCE_DIR) / "workloads/h200-2gpu-pipeline.yaml",
        {"parallelism.pp=1", "parallelism.dp=2", "parallelism.vpp=1", "schedule=1f1b",
         "parallelism.sharding=zero3"});
    const auto path = test::trace_dir() / "zero3.json";
    api::RunOptions opt;
    opt.trace = path;
    api::run(spec, opt);
    const json doc = load(path);
    const json& ev = doc["traceEvents"];
    check_slices(ev);
    check_perfetto_import(ev);
    CHECK(count_named(ev, "X", "fsdp all-gather", false) == 2 * 64);
    CHECK(count_named(ev, "X", "fsdp reduce-scatter", false) == 2 * 32);
    for (const auto& e : ev)
        if (e["ph"] == "X" && e["name"] == "fsdp all-gather") {
            CHECK(e["args"]["peers"] == "0,1");
            // A unit of h = 4096 with biases: 12h^2 + 13h = 201,379,840 parameters, 2 bytes each;
            // the last one also holds the final LayerNorm, 2h = 8192 more.
            CHECK((e["args"]["bytes"] == 402'759'680 || e["args"]["bytes"] == 402'776'064));
        }
    // Every pass waits for its first unit's all-gather, which nothing before it hides.
    int waiting = 0;
    for (const auto& e : ev)
        if (e["ph"] == "X" && (e["name"] == "F0" || e["name"] == "B3") &&
            e["args"].contains("gather_wait_us") && e["args"]["gather_wait_us"] > 0)
            ++waiting;
    CHECK(waiting == 4);  // F0 and B3 on each of the 2 GPUs
}
