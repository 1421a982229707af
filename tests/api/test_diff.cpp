// clustersim diff: hand-made simulated and measured traces whose per-kind and per-pass sums are
// derived below; a simulated step's kind and part are its "kernel" and "part" arguments.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../error_of.hpp"
#include "core/errors.hpp"
#include "fit/diff.hpp"

namespace fs = std::filesystem;

namespace {

// GPU 0's compute track (pid 2, tid 5): F0 from 0 to 100 us with qkv (100 us); B0 from 100 to
// 300 us with qkv dgrad (150 us) and norm bwd (50 us); then the optimizer step (40 us), outside
// any pass. A second track (GPU 1, tid 7) with a 1000 us qkv must not be counted.
const char* kSimulated = R"json({"traceEvents": [
  {"ph": "M", "pid": 2, "tid": 5, "name": "thread_name", "args": {"name": "GPU 0 compute"}},
  {"ph": "M", "pid": 2, "tid": 7, "name": "thread_name", "args": {"name": "GPU 1 compute"}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 0, "dur": 100, "name": "F0", "args": {"microbatch": 0, "pass": "forward", "layers": 1}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 0, "dur": 100, "name": "qkv", "args": {"kernel": "gemm", "part": "layers", "model_flops": 1}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 100, "dur": 200, "name": "B0", "args": {"microbatch": 0, "pass": "backward", "layers": 1}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 100, "dur": 150, "name": "qkv dgrad", "args": {"kernel": "gemm", "part": "layers", "model_flops": 1}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 250, "dur": 50, "name": "norm bwd", "args": {"kernel": "norm", "part": "layers", "model_flops": 0}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 300, "dur": 40, "name": "optimizer step", "args": {"kernel": "optimizer", "part": "model"}},
  {"ph": "X", "pid": 2, "tid": 7, "ts": 0, "dur": 1000, "name": "qkv", "args": {"kernel": "gemm", "part": "layers", "model_flops": 1}}
]})json";

// Two iterations of one forward GEMM (80 us, launched by aten::mm on the main thread 1) and one
// backward GEMM (120 us, aten::mm on thread 2, the autograd engine's: it runs an
// evaluate_function operator): per iteration 40 + 60 us.
const char* kMeasured = R"json({"traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5,
   "args": {"External id": 1}},
  {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0",
   "pid": 1, "tid": 2, "ts": 10, "dur": 5, "args": {"External id": 2}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 11, "dur": 3,
   "args": {"External id": 3}},
  {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7, "ts": 20,
   "dur": 80, "args": {"External id": 1, "stream": 7, "correlation": 1}},
  {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7, "ts": 100,
   "dur": 120, "args": {"External id": 3, "stream": 7, "correlation": 2}}
]})json";

}  // namespace

namespace {

// Options that diff `simulated` against `measured` (two iterations), both written into `dir`.
cs::api::DiffOptions write_traces(const fs::path& dir, const std::string& simulated,
                                  const char* measured) {
    fs::create_directories(dir);
    std::ofstream(dir / "sim.json") << simulated;
    std::ofstream(dir / "meas.json") << measured;
    cs::api::DiffOptions o;
    o.simulated = (dir / "sim.json").string();
    o.measured = (dir / "meas.json").string();
    o.iterations = 2;
    return o;
}

// The ConfigError diff_traces refuses `simulated` (written into `dir`) with, against kMeasured.
std::string refusal(const fs::path& dir, const std::string& simulated) {
    const cs::api::DiffOptions o = write_traces(dir, simulated, kMeasured);
    return cs::test::error_of([&] { cs::api::diff_traces(o); });
}

// `text` with the first `from` in it replaced by `to` (which must be there).
void replace_once(std::string& text, const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("diff: per kind and per pass, by hand") {
    const fs::path dir = fs::temp_directory_path() / "cs_diff_test";
    cs::api::DiffOptions o = write_traces(dir, kSimulated, kMeasured);
    const auto r = cs::api::diff_traces(o);
    CHECK(r.microbatches == 1);
    CHECK(r.layers == 1);
    // Simulated busy: 100 + 150 + 50 + 40 = 340 us; iteration 0 .. 340 us. Measured: 200 us of
    // kernels over 2 iterations = 0.1 ms.
    CHECK(r.simulated_busy_ms == doctest::Approx(0.34));
    CHECK(r.simulated_iteration_ms == doctest::Approx(0.34));
    CHECK(r.measured_busy_ms == doctest::Approx(0.1));
    // gemm: simulated 100 + 150 = 0.25 ms, measured 0.1 ms -> +0.15 ms, +150%.
    REQUIRE(r.kinds.size() == 3);  // gemm, norm, optimizer
    CHECK(r.kinds[0].name == "gemm");
    CHECK(r.kinds[0].simulated_ms == doctest::Approx(0.25));
    CHECK(r.kinds[0].measured_ms == doctest::Approx(0.1));
    CHECK(r.kinds[0].relative() == doctest::Approx(1.5));
    CHECK(r.kinds[1].name == "norm");
    CHECK(r.kinds[1].measured_kernels == 0);
    // Passes: forward 0.1 ms simulated against 0.04 measured, backward 0.2 against 0.06, the
    // optimizer 0.04 against none.
    REQUIRE(r.passes.size() == 3);
    CHECK(r.passes[0].name == "forward");
    CHECK(r.passes[0].simulated_ms == doctest::Approx(0.1));
    CHECK(r.passes[0].measured_ms == doctest::Approx(0.04));
    CHECK(r.passes[1].name == "backward");
    CHECK(r.passes[1].simulated_ms == doctest::Approx(0.2));
    CHECK(r.passes[1].measured_ms == doctest::Approx(0.06));
    CHECK(r.passes[2].name == "optimizer");
    CHECK(r.passes[2].simulated_ms == doctest::Approx(0.04));
    // The largest departure is the GEMMs' 0.15 ms, then norm's and the optimizer's.
    REQUIRE(r.largest.size() == 3);
    CHECK(r.largest[0].name == "gemm");
    CHECK(r.largest[1].name == "norm");
    // A rank the trace does not have, and a zero iteration count.
    o.rank = 3;
    CHECK_THROWS_WITH_AS(cs::api::diff_traces(o),
                         doctest::Contains("no \"GPU 3 compute\" track (it has GPU 0 compute, "
                                           "GPU 1 compute)"),
                         cs::ConfigError);
    o.rank = 0;
    o.iterations = 0;
    CHECK_THROWS_AS(cs::api::diff_traces(o), cs::ConfigError);
    fs::remove_all(dir);
}

namespace {

// Two layers, one microbatch. Simulated (GPU 0 compute): F0 0-100 us: embedding 10 us, norm and
// qkv repeated over the 2 layers (20 and 40 us: 10 + 20 us per layer), final norm 5 and logits
// 25 us (head); B0 100-300 us: logits dgrad 15 and final norm bwd 5 us (head), qkv dgrad and norm
// bwd repeated (60 and 40 us: 30 + 20 per layer), main grad accumulate 50 us, embedding wgrad
// 30 us; the optimizer step after. One norm per layer and a final one: 3 per pass.
const char* kSimulatedLayers = R"json({"traceEvents": [
  {"ph": "M", "pid": 2, "tid": 5, "name": "thread_name", "args": {"name": "GPU 0 compute"}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 0, "dur": 100, "name": "F0", "args": {"microbatch": 0, "pass": "forward", "first_layer": 0, "layers": 2}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 0, "dur": 10, "name": "embedding", "args": {"kernel": "elementwise", "part": "embedding"}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 10, "dur": 20, "name": "norm", "args": {"kernel": "norm", "part": "layers", "repeat": 2}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 30, "dur": 40, "name": "qkv", "args": {"kernel": "gemm", "part": "layers", "repeat": 2}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 70, "dur": 5, "name": "final norm", "args": {"kernel": "norm", "part": "head"}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 75, "dur": 25, "name": "logits", "args": {"kernel": "gemm", "part": "head"}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 100, "dur": 200, "name": "B0", "args": {"microbatch": 0, "pass": "backward", "first_layer": 0, "layers": 2}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 100, "dur": 15, "name": "logits dgrad", "args": {"kernel": "gemm", "part": "head"}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 115, "dur": 5, "name": "final norm bwd", "args": {"kernel": "norm", "part": "head"}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 120, "dur": 60, "name": "qkv dgrad", "args": {"kernel": "gemm", "part": "layers", "repeat": 2}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 180, "dur": 40, "name": "norm bwd", "args": {"kernel": "norm", "part": "layers", "repeat": 2}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 220, "dur": 50, "name": "main grad accumulate", "args": {"kernel": "mixed_accumulate", "part": "layers", "repeat": 2}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 270, "dur": 30, "name": "embedding wgrad", "args": {"kernel": "unpermute", "part": "embedding"}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 300, "dur": 40, "name": "optimizer step", "args": {"kernel": "optimizer", "part": "model"}}
]})json";

// One iteration of the same two-layer model, measured: forward on the main thread (tid 1), one
// LayerNorm per layer and a final one (3 norms: 1 per layer + 1 final); backward on the autograd
// thread (tid 2), the final norm's backward launching two kernels; a main-grad add (fp32 +=
// bf16) on the main thread, then the optimizer.
const char* kMeasuredLayers = R"json({"traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "aten::embedding", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "args": {"External id": 1}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::native_layer_norm", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"External id": 2}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"External id": 3}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::native_layer_norm", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "args": {"External id": 4}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 4, "dur": 1, "args": {"External id": 5}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::native_layer_norm", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"External id": 6}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 6, "dur": 1, "args": {"External id": 7}},
  {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0", "pid": 1, "tid": 2, "ts": 140, "dur": 1, "args": {"External id": 100}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 141, "dur": 1, "args": {"External id": 8}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::native_layer_norm_backward", "pid": 1, "tid": 2, "ts": 142, "dur": 1, "args": {"External id": 9}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 143, "dur": 1, "args": {"External id": 11}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::native_layer_norm_backward", "pid": 1, "tid": 2, "ts": 144, "dur": 1, "args": {"External id": 12}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 2, "ts": 145, "dur": 1, "args": {"External id": 13}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 146, "dur": 1, "args": {"External id": 14}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::native_layer_norm_backward", "pid": 1, "tid": 2, "ts": 147, "dur": 1, "args": {"External id": 15}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::embedding_dense_backward", "pid": 1, "tid": 2, "ts": 148, "dur": 1, "args": {"External id": 16}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 1, "tid": 1, "ts": 290, "dur": 1, "args": {"External id": 17, "Input Dims": [[4], [4]], "Input type": ["float", "c10::BFloat16"]}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::_fused_adamw_", "pid": 1, "tid": 1, "ts": 295, "dur": 1, "args": {"External id": 18}},
  {"ph": "X", "cat": "kernel", "name": "indexSelectLargeIndex", "pid": 0, "tid": 7, "ts": 0, "dur": 12, "args": {"External id": 1, "stream": 7, "correlation": 1}},
  {"ph": "X", "cat": "kernel", "name": "vectorized_layer_norm_kernel", "pid": 0, "tid": 7, "ts": 20, "dur": 8, "args": {"External id": 2, "stream": 7, "correlation": 2}},
  {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7, "ts": 30, "dur": 25, "args": {"External id": 3, "stream": 7, "correlation": 3}},
  {"ph": "X", "cat": "kernel", "name": "vectorized_layer_norm_kernel", "pid": 0, "tid": 7, "ts": 60, "dur": 8, "args": {"External id": 4, "stream": 7, "correlation": 4}},
  {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7, "ts": 70, "dur": 25, "args": {"External id": 5, "stream": 7, "correlation": 5}},
  {"ph": "X", "cat": "kernel", "name": "vectorized_layer_norm_kernel", "pid": 0, "tid": 7, "ts": 100, "dur": 5, "args": {"External id": 6, "stream": 7, "correlation": 6}},
  {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7, "ts": 110, "dur": 30, "args": {"External id": 7, "stream": 7, "correlation": 7}},
  {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7, "ts": 150, "dur": 20, "args": {"External id": 8, "stream": 7, "correlation": 8}},
  {"ph": "X", "cat": "kernel", "name": "layer_norm_grad_input_kernel", "pid": 0, "tid": 7, "ts": 175, "dur": 4, "args": {"External id": 9, "stream": 7, "correlation": 9}},
  {"ph": "X", "cat": "kernel", "name": "GammaBetaBackward", "pid": 0, "tid": 7, "ts": 180, "dur": 2, "args": {"External id": 9, "stream": 7, "correlation": 10}},
  {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7, "ts": 190, "dur": 30, "args": {"External id": 11, "stream": 7, "correlation": 11}},
  {"ph": "X", "cat": "kernel", "name": "layer_norm_grad_input_kernel", "pid": 0, "tid": 7, "ts": 225, "dur": 6, "args": {"External id": 12, "stream": 7, "correlation": 12}},
  {"ph": "X", "cat": "kernel", "name": "elementwise_kernel", "pid": 0, "tid": 7, "ts": 235, "dur": 3, "args": {"External id": 13, "stream": 7, "correlation": 13}},
  {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7, "ts": 240, "dur": 30, "args": {"External id": 14, "stream": 7, "correlation": 14}},
  {"ph": "X", "cat": "kernel", "name": "layer_norm_grad_input_kernel", "pid": 0, "tid": 7, "ts": 275, "dur": 6, "args": {"External id": 15, "stream": 7, "correlation": 15}},
  {"ph": "X", "cat": "kernel", "name": "embedding_backward_kernel", "pid": 0, "tid": 7, "ts": 285, "dur": 10, "args": {"External id": 16, "stream": 7, "correlation": 16}},
  {"ph": "X", "cat": "kernel", "name": "elementwise_kernel", "pid": 0, "tid": 7, "ts": 296, "dur": 4, "args": {"External id": 17, "stream": 7, "correlation": 17}},
  {"ph": "X", "cat": "kernel", "name": "multi_tensor_apply_kernel", "pid": 0, "tid": 7, "ts": 300, "dur": 20, "args": {"External id": 18, "stream": 7, "correlation": 18}}
]})json";

}  // namespace

TEST_CASE("diff: per layer pass, by hand") {
    const fs::path dir = fs::temp_directory_path() / "cs_diff_layers_test";
    fs::create_directories(dir);
    std::ofstream(dir / "sim.json") << kSimulatedLayers;
    std::ofstream(dir / "meas.json") << kMeasuredLayers;
    cs::api::DiffOptions o;
    o.simulated = (dir / "sim.json").string();
    o.measured = (dir / "meas.json").string();
    const auto r = cs::api::diff_traces(o);
    CHECK(r.layers == 2);
    // 2 x 2 layers + 5 rows outside them.
    REQUIRE(r.layer_passes.size() == 9);
    const auto row = [&](const std::string& name) {
        for (const auto& l : r.layer_passes)
            if (l.name == name) return l;
        FAIL("no row " << name);
        return cs::api::LayerPassLine{};
    };
    const std::vector<std::string> order{
        "embedding forward", "layer 0 forward",    "layer 1 forward",
        "head forward",      "head backward",      "layer 1 backward",
        "layer 0 backward",  "embedding backward", "grad accumulate"};
    for (std::size_t i = 0; i < order.size(); ++i)
        CHECK(r.layer_passes[i].name == order[i]);
    // Simulated, in ms: embedding 10 us; a layer's forward norm 20/2 + qkv 40/2 = 30 us; head
    // (final norm + logits) 5 + 25 = 30; head backward 15 + 5 = 20; a layer's backward 60/2 +
    // 40/2 = 50;
    // embedding wgrad 30; accumulation 50.
    CHECK(row("embedding forward").simulated_ms == doctest::Approx(0.010));
    CHECK(row("layer 0 forward").simulated_ms == doctest::Approx(0.030));
    CHECK(row("layer 1 forward").simulated_ms == doctest::Approx(0.030));
    CHECK(row("head forward").simulated_ms == doctest::Approx(0.030));
    CHECK(row("head backward").simulated_ms == doctest::Approx(0.020));
    CHECK(row("layer 1 backward").simulated_ms == doctest::Approx(0.050));
    CHECK(row("layer 0 backward").simulated_ms == doctest::Approx(0.050));
    CHECK(row("embedding backward").simulated_ms == doctest::Approx(0.030));
    CHECK(row("grad accumulate").simulated_ms == doctest::Approx(0.050));
    // Measured: 3 norms per pass = 1 per layer + 1 final. Forward: the embedding's 12 us before
    // the first norm; layer 0 = its norm 8 + GEMM 25 = 33; layer 1 the same 33; head = final norm
    // 5 + logits 30 = 35. Backward: head = logits dgrad 20 + the final norm's two kernels 4 + 2 =
    // 26 (one operator: counted once); layer 1 = GEMM 30 + norm bwd 6 = 36; layer 0 = the
    // residual add after layer 1's norm (3) + GEMM 30 + norm bwd 6 = 39; embedding = 10; the
    // main-grad add 4 us (main thread, its own row).
    CHECK(row("embedding forward").measured_ms == doctest::Approx(0.012));
    CHECK(row("layer 0 forward").measured_ms == doctest::Approx(0.033));
    CHECK(row("layer 1 forward").measured_ms == doctest::Approx(0.033));
    CHECK(row("head forward").measured_ms == doctest::Approx(0.035));
    CHECK(row("head backward").measured_ms == doctest::Approx(0.026));
    CHECK(row("head backward").measured_kernels == 3);
    CHECK(row("layer 1 backward").measured_ms == doctest::Approx(0.036));
    CHECK(row("layer 0 backward").measured_ms == doctest::Approx(0.039));
    CHECK(row("embedding backward").measured_ms == doctest::Approx(0.010));
    CHECK(row("grad accumulate").measured_ms == doctest::Approx(0.004));
    CHECK(row("layer 1 forward").layer == 1);
    CHECK(row("head forward").layer == -1);
    CHECK(row("layer 0 backward").measured_passes == 1);
    CHECK(row("layer 0 backward").simulated_passes == 1);
    // Largest departures: accumulation +46 us, embedding backward +20, layer 1 backward +14.
    REQUIRE(r.largest_layer_passes.size() == 5);
    CHECK(r.largest_layer_passes[0].name == "grad accumulate");
    CHECK(r.largest_layer_passes[1].name == "embedding backward");
    CHECK(r.largest_layer_passes[2].name == "layer 1 backward");
    // The JSON carries the rows.
    const auto j = cs::api::diff_json(r);
    REQUIRE(j["layer_passes"].size() == 9);
    CHECK(j["layer_passes"][1]["layer"] == 0);
    CHECK(j["layer_passes"][0]["layer"].is_null());
    CHECK(j["layer_passes"][6]["measured_ms"].get<double>() == doctest::Approx(0.039));

    // A simulated trace of 4 layers against this profile: the model has 1 norm per layer x 4 + 1
    // final = 5 per pass, the profile 3, so there are no layer rows, and a warning says why.
    std::string four = kSimulatedLayers;
    // (every "layers": 2 and "repeat": 2 made 4)
    for (const std::string from : {"\"layers\": 2", "\"repeat\": 2"})
        for (auto at = four.find(from); at != std::string::npos; at = four.find(from, at + 1))
            four[at + from.size() - 1] = '4';
    // The same simulated passes with each layer's step as its own slice (as a trace holds them
    // when it does not fold them into `repeat` slices): the same rows.
    std::string expanded = kSimulatedLayers;
    const std::string norm = R"("args": {"kernel": "norm", "part": "layers")";
    replace_once(expanded, R"("ts": 10, "dur": 20, "name": "norm", )" + norm + R"(, "repeat": 2})",
                 R"("ts": 10, "dur": 10, "name": "norm", )" + norm + R"(}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 20, "dur": 10, "name": "norm", )" +
                     norm + "}");
    replace_once(expanded,
                 R"("ts": 180, "dur": 40, "name": "norm bwd", )" + norm + R"(, "repeat": 2})",
                 R"("ts": 180, "dur": 20, "name": "norm bwd", )" + norm + R"(}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 200, "dur": 20, "name": "norm bwd", )" +
                     norm + "}");
    std::ofstream(dir / "sim-expanded.json") << expanded;
    o.simulated = (dir / "sim-expanded.json").string();
    const auto re = cs::api::diff_traces(o);
    REQUIRE(re.layer_passes.size() == 9);
    for (std::size_t i = 0; i < re.layer_passes.size(); ++i)
        CHECK(re.layer_passes[i].simulated_ms == doctest::Approx(r.layer_passes[i].simulated_ms));

    std::ofstream(dir / "sim4.json") << four;
    o.simulated = (dir / "sim4.json").string();
    const auto r4 = cs::api::diff_traces(o);
    CHECK(r4.layer_passes.empty());
    bool warned = false;
    for (const auto& w : r4.warnings)
        warned |= w.find(
                      "3 norm operator(s), the simulated one 1 per layer x 4 layers + 1 = 5: "
                      "not the same model") != std::string::npos;
    CHECK(warned);
    fs::remove_all(dir);
}

TEST_CASE("diff: a pass slice's pass is its \"pass\" argument, never its name") {
    // kSimulated with the two pass slices' names swapped: the forward slice (0-100 us) named
    // "B0", the backward one (100-300 us) named "F0", their "pass" arguments right. Read from the
    // arguments: forward = the qkv inside 0-100 us = 0.1 ms, backward = qkv dgrad 150 + norm bwd
    // 50 us = 0.2 ms, one microbatch (one forward slice) of one layer. Read from the names, the
    // two would swap (forward 0.2, backward 0.1).
    std::string swapped = kSimulated;
    replace_once(swapped, R"("name": "F0", "args": {"microbatch": 0, "pass": "forward")",
                 R"("name": "B0", "args": {"microbatch": 0, "pass": "forward")");
    replace_once(swapped, R"("name": "B0", "args": {"microbatch": 0, "pass": "backward")",
                 R"("name": "F0", "args": {"microbatch": 0, "pass": "backward")");
    const fs::path dir = fs::temp_directory_path() / "cs_diff_pass_arg_test";
    cs::api::DiffOptions o = write_traces(dir, swapped, kMeasured);
    const auto r = cs::api::diff_traces(o);
    CHECK(r.microbatches == 1);
    CHECK(r.layers == 1);
    REQUIRE(r.passes.size() == 3);
    CHECK(r.passes[0].name == "forward");
    CHECK(r.passes[0].simulated_ms == doctest::Approx(0.1));
    CHECK(r.passes[1].name == "backward");
    CHECK(r.passes[1].simulated_ms == doctest::Approx(0.2));

    // A pass slice without a known "pass" argument is refused, naming what is accepted.
    std::string unknown = kSimulated;
    replace_once(unknown, R"("pass": "forward")", R"("pass": "F")");
    std::ofstream(dir / "sim-unknown.json") << unknown;
    o.simulated = (dir / "sim-unknown.json").string();
    CHECK_THROWS_WITH_AS(cs::api::diff_traces(o),
                         doctest::Contains("traceEvents entry 2: \"pass\" is not one of forward, "
                                           "backward, backward_input, backward_weight"),
                         cs::ConfigError);
    fs::remove_all(dir);
}

TEST_CASE("diff: a step's kind and part are its arguments, never its name") {
    // kSimulated with the forward GEMM named "norm bwd" and the backward norm named "qkv": read
    // from the arguments the sums are those of the hand-made case above (gemm 0.25 ms, norm 0.05).
    std::string renamed = kSimulated;
    replace_once(renamed, R"("name": "qkv", "args": {"kernel": "gemm")",
                 R"("name": "norm bwd", "args": {"kernel": "gemm")");
    replace_once(renamed, R"("name": "norm bwd", "args": {"kernel": "norm")",
                 R"("name": "qkv", "args": {"kernel": "norm")");
    const fs::path dir = fs::temp_directory_path() / "cs_diff_kind_arg_test";
    cs::api::DiffOptions o = write_traces(dir, renamed, kMeasured);
    const auto r = cs::api::diff_traces(o);
    REQUIRE(r.kinds.size() == 3);
    CHECK(r.kinds[0].name == "gemm");
    CHECK(r.kinds[0].simulated_ms == doctest::Approx(0.25));
    CHECK(r.kinds[1].name == "norm");
    CHECK(r.kinds[1].simulated_ms == doctest::Approx(0.05));

    // A step without the arguments (a trace of a clustersim from before it wrote them) is refused
    // with what to do, never mapped by its name.
    std::string old = kSimulated;
    replace_once(old, R"("kernel": "norm", "part": "layers", )", "");
    CHECK(refusal(dir, old) ==
          (dir / "sim.json").string() +
              ": traceEvents entry 6: step \"norm bwd\" has no \"kernel\" argument (a trace of "
              "an older clustersim); re-run `clustersim run --trace F.json` to write it anew");
    // An unknown kind or part is refused, naming what is accepted.
    std::string unknown = kSimulated;
    replace_once(unknown, R"("kernel": "norm")", R"("kernel": "layernorm")");
    CHECK(refusal(dir, unknown)
              .find("traceEvents entry 6: \"kernel\" is not one of gemm, "
                    "grouped_gemm, attention, elementwise, ") != std::string::npos);
    std::string part = kSimulated;
    replace_once(part, R"("part": "layers", "model_flops": 0)",
                 R"("part": "layer 0", "model_flops": 0)");
    CHECK(refusal(dir, part).find("\"part\" is not one of embedding, layers, head, model; give "
                                  "the file `clustersim run --trace F.json` wrote") !=
          std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("diff: a pid or tid beyond int64 is refused, never wrapped or cast") {
    // pid and tid take whole numbers from 0 to INT64_MAX = 9223372036854775807. Above it: the
    // unsigned 2^64 - 1 (nlohmann reads it as unsigned) and the float 2^63 (INT64_MAX as a double
    // rounds up to 2^63, so a check against that double lets 2^63 through to a cast no int64
    // holds). The fuzz session S13 under UBSan found the first (docs/robustness.md).
    const std::string expected =
        "traceEvents entry 0: \"pid\" is not a whole number from 0 to 9223372036854775807";
    const fs::path dir = fs::temp_directory_path() / "cs_diff_id_range_test";
    for (const char* pid : {"18446744073709551615", "9223372036854775808.0", "1e19", "-1"}) {
        std::string bad = kSimulated;
        replace_once(bad, R"("pid": 2)", std::string(R"("pid": )") + pid);
        CAPTURE(pid);
        CHECK(refusal(dir, bad).find(expected) != std::string::npos);
    }
    // The largest whole float below 2^63 (2^63 - 1024) is in range: read, not refused as a pid.
    std::string top = kSimulated;
    replace_once(top, R"("pid": 2)", R"("pid": 9223372036854774784.0)");
    CHECK(refusal(dir, top).find("\"pid\" is not") == std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("diff: a measured kernel carries its launch gap, and the optimizer's range is its pass") {
    // Stream 7, events listed in reverse time order (the reading sorts them): a memset at 5-7 us
    // and a GEMM at 10-30 us, both of aten::mm #1 (the memset counts as gemm: the simulated
    // GEMM step carries its launch); a GEMM at 32-52 us; an add at 55-65 us launched inside a
    // range the program named "optimizer" (2.5-4 us); a multiply at 90-100 us launched at 80
    // us, after the add ended, inside torch.optim's "Optimizer.step#AdamW.step" range (79-81
    // us). Neither is an optimizer kernel by itself: only the ranges make them so. Every other
    // launch is queued before the previous kernel ends. Launch gaps: none for the memset (first on
    // its stream), 3 us before the first GEMM, 2 before the second, 3 before the add; none before
    // the multiply (the GPU waited for the host). So gemm = 2 + (3 + 20) + (2 + 20) = 47 us in 3
    // kernels (forward, main thread); the optimizer kind and pass 13 + 10 = 23 us in 2 kernels (the
    // add counts as the simulated optimizer step's kind). One iteration: 0.070 ms busy.
    const char* measured = R"json({"traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#AdamW.step", "pid": 1, "tid": 1, "ts": 79, "dur": 2},
  {"ph": "X", "cat": "user_annotation", "name": "optimizer", "pid": 1, "tid": 1, "ts": 2.5, "dur": 1.5},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mul_", "pid": 1, "tid": 1, "ts": 79.5, "dur": 1, "args": {"External id": 4}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 2.6, "dur": 0.8, "args": {"External id": 3}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, "dur": 0.8, "args": {"External id": 2}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.2, "dur": 1.2, "args": {"External id": 1}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 80, "dur": 0.1, "args": {"correlation": 4}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 3, "dur": 0.1, "args": {"correlation": 3}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 0.1, "args": {"correlation": 2}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 0.1, "args": {"correlation": 1}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemsetAsync", "pid": 1, "tid": 1, "ts": 0.5, "dur": 0.1, "args": {"correlation": 0}},
  {"ph": "X", "cat": "kernel", "name": "elementwise_kernel", "pid": 0, "tid": 7, "ts": 90, "dur": 10, "args": {"External id": 4, "stream": 7, "correlation": 4}},
  {"ph": "X", "cat": "kernel", "name": "elementwise_kernel", "pid": 0, "tid": 7, "ts": 55, "dur": 10, "args": {"External id": 3, "stream": 7, "correlation": 3}},
  {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7, "ts": 32, "dur": 20, "args": {"External id": 2, "stream": 7, "correlation": 2}},
  {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7, "ts": 10, "dur": 20, "args": {"External id": 1, "stream": 7, "correlation": 1}},
  {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 5, "dur": 2, "args": {"External id": 1, "stream": 7, "correlation": 0}}
]})json";
    const fs::path dir = fs::temp_directory_path() / "cs_diff_gaps";
    cs::api::DiffOptions o = write_traces(dir, kSimulated, measured);
    o.iterations = 1;
    const auto r = cs::api::diff_traces(o);
    CHECK(r.measured_busy_ms == doctest::Approx(0.070));
    const auto kind = [&](const std::string& name) {
        for (const auto& k : r.kinds)
            if (k.name == name) return k;
        FAIL("no kind " << name);
        return cs::api::DiffLine{};
    };
    CHECK(kind("gemm").measured_ms == doctest::Approx(0.047));
    CHECK(kind("gemm").measured_kernels == 3);
    CHECK(kind("optimizer").measured_ms == doctest::Approx(0.023));
    CHECK(kind("optimizer").measured_kernels == 2);
    for (const auto& k : r.kinds)
        CHECK(k.name != "memset");
    REQUIRE(r.passes.size() == 3);
    CHECK(r.passes[0].measured_ms == doctest::Approx(0.047));
    CHECK(r.passes[2].name == "optimizer");
    CHECK(r.passes[2].measured_ms == doctest::Approx(0.023));
    fs::remove_all(dir);
}
