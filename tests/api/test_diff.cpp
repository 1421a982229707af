// clustersim diff: the label -> kind mapping, and a hand-made simulated and measured trace whose
// per-kind and per-pass sums are derived below.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "api/diff.hpp"
#include "core/errors.hpp"

namespace fs = std::filesystem;

namespace {

// GPU 0's compute track (pid 2, tid 5): F0 from 0 to 100 us with qkv (100 us); B0 from 100 to
// 300 us with qkv dgrad (150 us) and norm bwd (50 us); then the optimizer step (40 us), outside
// any pass. A second track (GPU 1, tid 7) with a 1000 us qkv must not be counted.
const char* kSimulated = R"json({"traceEvents": [
  {"ph": "M", "pid": 2, "tid": 5, "name": "thread_name", "args": {"name": "GPU 0 compute"}},
  {"ph": "M", "pid": 2, "tid": 7, "name": "thread_name", "args": {"name": "GPU 1 compute"}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 0, "dur": 100, "name": "F0", "args": {"microbatch": 0, "layers": 1}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 0, "dur": 100, "name": "qkv", "args": {"model_flops": 1}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 100, "dur": 200, "name": "B0", "args": {"microbatch": 0, "layers": 1}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 100, "dur": 150, "name": "qkv dgrad", "args": {"model_flops": 1}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 250, "dur": 50, "name": "norm bwd", "args": {"model_flops": 0}},
  {"ph": "X", "pid": 2, "tid": 5, "ts": 300, "dur": 40, "name": "optimizer step", "args": {}},
  {"ph": "X", "pid": 2, "tid": 7, "ts": 0, "dur": 1000, "name": "qkv", "args": {"model_flops": 1}}
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

TEST_CASE("diff: the roofline's labels map to the calibration's kinds") {
    using cs::api::simulated_kind;
    CHECK(simulated_kind("qkv") == "gemm");
    CHECK(simulated_kind("fc2 wgrad") == "gemm");
    CHECK(simulated_kind("attention") == "attention");
    CHECK(simulated_kind("attention bwd") == "attention");
    CHECK(simulated_kind("attention scores bwd") == "gemm");
    CHECK(simulated_kind("final norm bwd") == "norm");
    CHECK(simulated_kind("log softmax") == "softmax");
    CHECK(simulated_kind("qkv grad concat") == "concat");
    CHECK(simulated_kind("qkv grad copy") == "strided_copy");
    CHECK(simulated_kind("main grad accumulate") == "mixed_accumulate");
    CHECK(simulated_kind("bias grad") == "reduce");
    CHECK(simulated_kind("logits to fp32") == "elementwise");
    CHECK(simulated_kind("embedding grad zero") == "memset");
    CHECK(simulated_kind("embedding wgrad") == "other");
    CHECK(simulated_kind("optimizer step") == "optimizer");
    CHECK(simulated_kind("something new") == "other");
}

TEST_CASE("diff: per kind and per pass, by hand") {
    const fs::path dir = fs::temp_directory_path() / "cs_diff_test";
    fs::create_directories(dir);
    std::ofstream(dir / "sim.json") << kSimulated;
    std::ofstream(dir / "meas.json") << kMeasured;
    cs::api::DiffOptions o;
    o.simulated = (dir / "sim.json").string();
    o.measured = (dir / "meas.json").string();
    o.iterations = 2;
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
