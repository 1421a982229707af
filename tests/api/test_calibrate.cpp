// clustersim calibrate's pieces: the streaming trace reader, kernel classification, the fits on a
// small hand-made trace whose expected values are derived below, bad traces, and the calibration
// file (schema, round trip, use from an experiment).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/errors.hpp"
#include "fit/calibrate.hpp"
#include "fit/kernel_table.hpp"
#include "ingest/torch_trace.hpp"
#include "topology/topology_yaml.hpp"
#include "workload/calibration.hpp"
#include "workload/experiment.hpp"

namespace fs = std::filesystem;
using cs::api::KernelKind;

namespace {

const std::string kRoot = CLUSTERSIM_SOURCE_DIR;

// Two 4096^3 bf16 GEMMs (aten::mm), one in-place bf16 add of 8192 x 8192, a memset, and a kernel
// no operator launched, on stream 7 of one GPU. Launch calls (cudaLaunchKernel, by correlation)
// are all issued before the previous kernel ends, so every gap is a launch gap.
//
// GEMM: flops = 2 x 4096^3 = 1.37439e11. On H200-SXM (989 TFLOP/s bf16, curve x0 = 600,
// p = 2.5): f(4096) = 1 / (1 + (600/4096)^2.5) = 1 / (1 + 0.0082126) = 0.991854, F = f^3 =
// 0.975765. A cap of 0.8 gives t = 1.37439e11 / (989e12 x 0.8 x 0.975765) = 178.024 us: both
// kernels take that, so the least-squares cap on log time is 0.8.
// Add: reads 2 x 8192^2 x 2 B and writes 8192^2 x 2 B = 402,653,184 B; 335.544 us is
// 402653184 / (4.8e12 x 0.25): an HBM fraction of 0.25.
// Duty: tensor-core time 356.05 of 356.05 + 335.54 + 1 + 5 = 697.6 us (u = 0.51), below the
// H200's from_duty 0.65: sustained factor 1, the GEMM samples are taken as they are.
// Gaps: 2 us between each pair of back-to-back events -> launch_overhead 2000 ns.
const char* kHandTrace = R"json({
  "schemaVersion": 1, "record_shapes": 1,
  "traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100, "dur": 20,
     "args": {"External id": 1, "Input Dims": [[4096, 4096], [4096, 4096]],
              "Input type": ["c10::BFloat16", "c10::BFloat16"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110,
     "dur": 5, "args": {"External id": 1, "correlation": 11}},
    {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7,
     "ts": 1000, "dur": 178.024, "args": {"External id": 1, "stream": 7, "correlation": 11}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 130, "dur": 20,
     "args": {"External id": 2, "Input Dims": [[4096, 4096], [4096, 4096]],
              "Input type": ["c10::BFloat16", "c10::BFloat16"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 140,
     "dur": 5, "args": {"External id": 2, "correlation": 12}},
    {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7,
     "ts": 1180.024, "dur": 178.024, "args": {"External id": 2, "stream": 7, "correlation": 12}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 1, "tid": 1, "ts": 160, "dur": 20,
     "args": {"External id": 3, "Input Dims": [[8192, 8192], [8192, 8192], []],
              "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 170,
     "dur": 5, "args": {"External id": 3, "correlation": 13}},
    {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel<8, CUDAFunctor_add>",
     "pid": 0, "tid": 7, "ts": 1360.048, "dur": 335.544,
     "args": {"External id": 3, "stream": 7, "correlation": 13}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemsetAsync", "pid": 1, "tid": 1, "ts": 180,
     "dur": 2, "args": {"External id": 4, "correlation": 14}},
    {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7,
     "ts": 1697.592, "dur": 1, "args": {"External id": 4, "stream": 7, "correlation": 14}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 190,
     "dur": 2, "args": {"correlation": 15}},
    {"ph": "X", "cat": "kernel", "name": "my_custom_kernel", "pid": 0, "tid": 7,
     "ts": 1700.592, "dur": 5, "args": {"stream": 7, "correlation": 15}},
    {"ph": "i", "name": "marker", "pid": 1, "tid": 1, "ts": 1}
  ]
})json";

const cs::topology::GpuModel& h200() {
    return *cs::topology::find_catalog_model("H200");
}

std::string error_of(const std::string& text, const std::string& name = "t.json") {
    try {
        cs::api::parse_torch_trace(text, name);
    } catch (const cs::ConfigError& e) {
        return e.what();
    }
    return "";
}

bool has(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("torch trace reader: kernels, operators with shapes, runtime calls") {
    const auto t = cs::api::parse_torch_trace(kHandTrace, "hand.json");
    CHECK(t.events == 14);
    CHECK(t.gpu.size() == 5);  // 4 kernels + 1 memset
    CHECK(t.cpu_ops.size() == 3);
    CHECK(t.runtime.size() == 5);
    CHECK(t.gpu[1].ts_us == doctest::Approx(1180.024));
    CHECK(t.gpu[1].stream == 7);
    CHECK(t.gpu[1].correlation == 12);
    const auto& add = t.cpu_ops[2];
    REQUIRE(add.args.size() == 3);
    CHECK(add.args[0].shapes.size() == 1);
    CHECK(add.args[0].numel() == 8192LL * 8192);
    CHECK(add.args[2].type == "Scalar");
    // read 2 x 8192^2 x 2 B, write 8192^2 x 2 B
    CHECK(cs::api::op_hbm_bytes(add, KernelKind::Elementwise) == 3LL * 8192 * 8192 * 2);
}

TEST_CASE("the kernel table: every kernel to one of the model's kinds") {
    using cs::api::classify_kernel;
    using cs::api::KernelSite;
    using cs::api::TraceArg;
    using cs::api::TraceCpuOp;
    using cs::api::TraceDims;
    using cs::api::TraceGpuEvent;
    // An operator with tensors of the given types and shapes (4 x 4 when none is given).
    const auto op = [](std::string name, std::vector<std::string> types = {},
                       std::vector<std::vector<std::int64_t>> shapes = {}) {
        TraceCpuOp o;
        o.name = std::move(name);
        for (std::size_t i = 0; i < types.size(); ++i) {
            TraceArg a;
            a.type = types[i];
            a.shapes = {i < shapes.size() ? shapes[i] : std::vector<std::int64_t>{4, 4}};
            o.args.push_back(a);
        }
        o.has_shapes = true;
        return o;
    };
    const auto site = [](const TraceCpuOp* o, std::vector<const TraceCpuOp*> enclosing = {}) {
        KernelSite s;
        s.op = o;
        s.enclosing = std::move(enclosing);
        return s;
    };
    // A Llama-like trace's sizes: MLP width 5632, vocabulary 32000, 8 experts, head_dim 128.
    TraceDims dims;
    dims.mlp_widths = {5632};
    dims.vocab = 32000;
    dims.experts = 8;
    dims.head_dim = 128;
    const std::string bf16 = "c10::BFloat16";
    TraceGpuEvent k;
    k.name = "void at::native::vectorized_elementwise_kernel<8, ...>";
    TraceGpuEvent strided;
    strided.name = "void at::native::elementwise_kernel<128, 4, gpu_kernel_impl_nocast<...>>";

    auto add = op("aten::add_", {"float", bf16});
    CHECK(classify_kernel(k, site(&add), dims) == KernelKind::MixedAccumulate);
    auto add16 = op("aten::add_", {bf16, bf16});
    CHECK(classify_kernel(k, site(&add16), dims) == KernelKind::Elementwise);
    auto ln = op("aten::native_layer_norm_backward");
    CHECK(classify_kernel(k, site(&ln), dims) == KernelKind::Norm);
    auto rms = op("aten::_fused_rms_norm_backward");
    CHECK(classify_kernel(k, site(&rms), dims) == KernelKind::RmsNorm);
    auto sdpa = op("aten::_cudnn_attention_backward");
    CHECK(classify_kernel(k, site(&sdpa), dims) == KernelKind::Attention);
    auto copy = op("aten::copy_", {bf16, bf16});
    CHECK(classify_kernel(strided, site(&copy), dims) == KernelKind::StridedCopy);
    CHECK(classify_kernel(k, site(&copy), dims) == KernelKind::Elementwise);  // a plain copy
    TraceGpuEvent gemm;
    gemm.name = "nvjet_sm90_tst_192x192";
    CHECK(classify_kernel(gemm, site(nullptr), dims) == KernelKind::Gemm);
    auto grouped = op("aten::_grouped_mm");
    CHECK(classify_kernel(gemm, site(&grouped), dims) == KernelKind::GroupedGemm);
    auto adam = op("aten::_fused_adamw_");
    CHECK(classify_kernel(k, site(&adam), dims) == KernelKind::Optimizer);
    TraceGpuEvent memset;
    memset.cat = TraceGpuEvent::Cat::Memset;
    CHECK(classify_kernel(memset, site(nullptr), dims) == KernelKind::Memset);
    TraceGpuEvent custom;
    custom.name = "my_custom_kernel";
    std::size_t rule = 0;
    CHECK(classify_kernel(custom, site(nullptr), dims, &rule) == KernelKind::Unmapped);
    CHECK(rule == cs::api::kernel_rules().size());

    // Rotary: neg and cat of halves (head_dim / 2 = 64) on head-major 4-D tensors, mul by a
    // (sequence, head_dim) table; the q, k, v gradients' cat (sequence before heads) is concat.
    auto neg = op("aten::neg", {bf16}, {{2, 16, 2048, 64}});
    CHECK(classify_kernel(strided, site(&neg), dims) == KernelKind::Rotary);
    auto mul_cos = op("aten::mul", {bf16, bf16}, {{2, 16, 2048, 128}, {2048, 128}});
    CHECK(classify_kernel(strided, site(&mul_cos), dims) == KernelKind::Rotary);
    auto cat_qkv = op("aten::cat", {"TensorList"}, {{2, 2048, 16, 128}});
    CHECK(classify_kernel(k, site(&cat_qkv), dims) == KernelKind::Concat);
    // SwiGLU: silu, and the strided product whose last dimension is silu's input's (5632); the
    // contiguous product of the backward is plain elementwise.
    auto silu = op("aten::silu", {bf16}, {{2, 2048, 5632}});
    CHECK(classify_kernel(strided, site(&silu), dims) == KernelKind::Swiglu);
    auto mul_up = op("aten::mul", {bf16, bf16}, {{2, 2048, 5632}, {2, 2048, 5632}});
    CHECK(classify_kernel(strided, site(&mul_up), dims) == KernelKind::Swiglu);
    CHECK(classify_kernel(k, site(&mul_up), dims) == KernelKind::Elementwise);
    // The loss: the cast of the logits (last dimension the vocabulary) to fp32 and the
    // log-softmax; the cast back is elementwise.
    auto to32 = op("aten::copy_", {"float", bf16}, {{2, 2048, 32000}, {2, 2048, 32000}});
    CHECK(classify_kernel(k, site(&to32), dims) == KernelKind::Softmax);
    auto to16 = op("aten::copy_", {bf16, "float"}, {{2, 2048, 32000}, {2, 2048, 32000}});
    CHECK(classify_kernel(k, site(&to16), dims) == KernelKind::Elementwise);
    // The MoE router (top-k, a softmax over the 8 experts, integer index arithmetic), the sort
    // (everything inside argsort, its copies too), the permutation and the scatter-add back.
    auto topk = op("aten::topk", {bf16}, {{2048, 8}});
    CHECK(classify_kernel(k, site(&topk), dims) == KernelKind::Routing);
    auto softmax = op("aten::_softmax", {"float"}, {{2048, 8}});
    CHECK(classify_kernel(k, site(&softmax), dims) == KernelKind::Routing);
    auto div = op("aten::div", {"long int"}, {{4096}});
    CHECK(classify_kernel(k, site(&div), dims) == KernelKind::Routing);
    auto argsort = op("aten::argsort");
    auto copy_in_sort = op("aten::copy_", {"long int", "long int"}, {{4096}, {4096}});
    TraceGpuEvent memcpy;
    memcpy.cat = TraceGpuEvent::Cat::Memcpy;
    CHECK(classify_kernel(memcpy, site(&copy_in_sort, {&argsort}), dims) == KernelKind::Sort);
    auto index_select = op("aten::index_select");
    auto gather = op("aten::gather");
    CHECK(classify_kernel(k, site(&gather, {&index_select}), dims) == KernelKind::Permute);
    CHECK(classify_kernel(k, site(&gather), dims) == KernelKind::Routing);  // the router's
    auto index_add = op("aten::index_add_");
    CHECK(classify_kernel(k, site(&index_add), dims) == KernelKind::Unpermute);
    // Every rule has a description (docs/calibrate.md prints the table).
    for (const auto& r : cs::api::kernel_rules())
        CHECK(!r.description.empty());
}

TEST_CASE("calibrate on the hand-made trace: the values derived at kHandTrace") {
    const auto t = cs::api::parse_torch_trace(kHandTrace, "hand.json");
    const auto r = cs::api::calibrate_traces({t}, h200());
    CHECK(r.sustained_factor == doctest::Approx(1.0));
    REQUIRE(r.file.gemm.has_value());
    CHECK(r.file.gemm->peak_fraction == doctest::Approx(0.8).epsilon(1e-4));
    CHECK(r.file.gemm->half_dim == 600);  // 4096 > 2 x 600: the knee is kept
    const auto elementwise =
        r.file.hbm_fractions[static_cast<std::size_t>(cs::workload::MemKind::Elementwise)];
    REQUIRE(elementwise.has_value());
    CHECK(*elementwise == doctest::Approx(0.25).epsilon(1e-3));
    REQUIRE(r.file.launch_overhead.has_value());
    CHECK(r.file.launch_overhead->count_ps() == 2'000'000);
    CHECK_FALSE(r.file.host_launch.has_value());  // no kernel waited for the host
    // The custom kernel has no op in the model: the residual, 5 us over the 692.592 us the
    // table maps (2 x 178.024 + 335.544 + the 1 us memset), one iteration.
    REQUIRE(r.unmapped.size() == 1);
    CHECK(r.unmapped[0].name == "my_custom_kernel");
    CHECK(r.unmapped_ms == doctest::Approx(0.005));
    CHECK(r.mapped_ms == doctest::Approx(0.692592));
    REQUIRE(r.file.residual.has_value());
    CHECK(*r.file.residual == doctest::Approx(0.007219));
    bool host_reason = false;
    for (const auto& u : r.unfitted)
        host_reason |= u.what == "compute.host.launch";
    CHECK(host_reason);
    // The same input gives the same bytes.
    CHECK(cs::api::calibration_file_text(r) ==
          cs::api::calibration_file_text(cs::api::calibrate_traces({t}, h200())));
}

TEST_CASE("bad traces: located errors") {
    const std::string full = kHandTrace;
    // Truncated in the middle of the events.
    const auto cut = error_of(full.substr(0, full.size() / 2));
    CHECK(has(cut, "t.json: byte "));
    CHECK(has(cut, "truncated"));
    CHECK(has(error_of("hello"), "not valid JSON"));
    CHECK(has(error_of(R"({"a": 1})"), "no \"traceEvents\" array"));
    CHECK(has(error_of(R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1,
        "dur": 1}]})"),
              "no GPU kernels"));
    const auto no_dur = error_of(
        R"({"traceEvents": [{"ph": "i"}, {"ph": "X", "cat": "kernel", "name": "k", "ts": 1}]})");
    CHECK(has(no_dur, "traceEvents entry 1"));
    CHECK(has(no_dur, "\"dur\""));
    // A gzip header followed by garbage.
    const std::string gz = std::string("\x1f\x8b\x08\x00", 4) + "not deflate data at all";
    CHECK(has(error_of(gz, "t.json.gz"), "gzip"));
    CHECK_THROWS_AS(cs::api::read_torch_trace("/nonexistent/trace.json"), cs::ConfigError);
}

TEST_CASE("calibration file: round trip, version and strict keys") {
    cs::workload::CalibrationFile cal;
    cal.gpu_model = "H200-SXM";
    cal.sources = {"a.json.gz"};
    cal.gemm = cs::topology::GemmCurve{0.81, 600, 2.5, ""};
    cal.hbm_fractions[static_cast<std::size_t>(cs::workload::MemKind::Norm)] = 0.46;
    cal.launch_overhead = cs::Time::ns(1504);
    cal.host_launch = cs::Time::ns(30000);
    const std::string text = cs::workload::calibration_yaml(cal, {"header"});
    const auto back = cs::workload::parse_calibration(cs::config::parse_document(text, "cal.yaml"));
    CHECK(back.gpu_model == "H200-SXM");
    REQUIRE(back.gemm.has_value());
    CHECK(back.gemm->peak_fraction == 0.81);
    CHECK(back.hbm_fractions[static_cast<std::size_t>(cs::workload::MemKind::Norm)] == 0.46);
    CHECK(back.launch_overhead == cs::Time::ns(1504));
    CHECK(back.host_launch == cs::Time::ns(30000));
    CHECK(cs::workload::calibration_yaml(back, {"header"}) == text);

    const auto err = [](const std::string& yaml) {
        try {
            cs::workload::parse_calibration(cs::config::parse_document(yaml, "cal.yaml"));
        } catch (const cs::ConfigError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(has(err("clustersim_calibration: 3\ngpu_model: H200\n"), "cal.yaml:1:"));
    CHECK(has(err("clustersim_calibration: 3\ngpu_model: H200\n"), "version 3 is not supported"));
    CHECK(has(err("gpu_model: H200\n"), "not a clustersim calibration file"));
    CHECK(has(err("clustersim_calibration: 1\ngpu_model: H200\ncompute: {hbm_fractions: "
                  "{norms: 0.4}}\n"),
              "norms"));
    CHECK(has(err("clustersim_calibration: 1\ngpu_model: H200\ncompute: {hbm_fractions: "
                  "{norm: 1.4}}\n"),
              "cal.yaml:3:"));
}

TEST_CASE("compute.calibration in an experiment: applied, the experiment's own keys win") {
    const fs::path dir = fs::temp_directory_path() / "clustersim-calibration-test";
    fs::create_directories(dir);
    {
        std::ofstream(dir / "cal.yaml") << "clustersim_calibration: 1\ngpu_model: H200\n"
                                           "compute:\n  gemm: {peak_fraction: 0.5, half_dim: 700, "
                                           "exponent: 2}\n  hbm_fractions: {norm: 0.3}\n"
                                           "  launch_overhead: 3us\n  host: {launch: 40us}\n";
        std::ofstream(dir / "exp.yaml")
            << "topology: " << kRoot << "/topologies/h200-2gpu-nvlink.yaml\n"
            << "model: {layers: 2, hidden_size: 1024, attention_heads: 8, vocab_size: 1000}\n"
               "parallelism: {tp: 1, pp: 1, dp: 2}\n"
               "training: {micro_batch_size: 1, global_batch_size: 2, seq_length: 512}\n"
               "compute: {model: roofline, framework: pytorch, calibration: cal.yaml}\n";
    }
    const auto spec = cs::workload::load_experiment(dir / "exp.yaml", {});
    const auto& rc = spec.compute.roofline;
    REQUIRE(rc.gemm_curve.has_value());
    CHECK(rc.gemm_curve->peak_fraction == 0.5);
    CHECK(rc.hbm_fractions[static_cast<std::size_t>(cs::workload::MemKind::Norm)] == 0.3);
    CHECK(rc.hbm_fractions[static_cast<std::size_t>(cs::workload::MemKind::Reduce)] == 0);
    CHECK(rc.launch_overhead == cs::Time::us(3));
    CHECK(spec.compute.host.launch == cs::Time::us(40));
    CHECK(spec.warnings.empty());  // H200 and the cluster's H200 agree

    const auto own = cs::workload::load_experiment(
        dir / "exp.yaml", {"compute.launch_overhead=1us", "compute.host.launch=10us"});
    CHECK(own.compute.roofline.launch_overhead == cs::Time::us(1));
    CHECK(own.compute.host.launch == cs::Time::us(10));

    std::string missing;
    try {
        cs::workload::load_experiment(dir / "exp.yaml", {"compute.calibration=nope.yaml"});
    } catch (const cs::ConfigError& e) {
        missing = e.what();
    }
    CHECK(has(missing, "'calibration': cannot load \"nope.yaml\""));
    fs::remove_all(dir);
}

TEST_CASE("calibrate: the host's launch cost where the GPU waited for it") {
    // 30 kernels of 5 us on one stream, each launched 30 us after the previous launch: every
    // kernel is queued after its predecessor ended (launch i at 30 i, kernel i runs from 30 i + 10
    // to 30 i + 15), so the GPU waits for the host 29 times and each interval between launch
    // calls is 30 us: host.launch = 30 us. No kernel is queued while another runs: no launch gap.
    std::string json = R"({"traceEvents": [)";
    for (int i = 0; i < 30; ++i) {
        const int t = 30 * i;
        if (i > 0) json += ",";
        json +=
            R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1, "ts": )" +
            std::to_string(t) + R"(, "dur": 4, "args": {"correlation": )" + std::to_string(i) +
            "}},";
        json += R"({"ph": "X", "cat": "kernel", "name": "k", "tid": 7, "ts": )" +
                std::to_string(t + 10) + R"(, "dur": 5, "args": {"stream": 7, "correlation": )" +
                std::to_string(i) + "}}";
    }
    json += "]}";
    const auto trace = cs::api::parse_torch_trace(json, "host.json");
    const auto r = cs::api::calibrate_traces({trace}, h200());
    CHECK(r.host_samples == 29);
    REQUIRE(r.file.host_launch.has_value());
    CHECK(*r.file.host_launch == cs::Time::us(30));
    CHECK_FALSE(r.file.launch_overhead.has_value());
    // No operator launched them: unmapped, counted in the residual.
    REQUIRE(r.unmapped.size() == 1);
    CHECK(r.unmapped[0].count == 30);
    // Without the iteration measured without the profiler, a warning says the cost includes it.
    bool warned = false;
    for (const auto& w : r.warnings)
        warned |= has(w, "includes the profiler's own overhead");
    CHECK(warned);

    // With it: the GPU's own time is 30 x 5 = 150 us (no launch gaps), the profiled iteration
    // spans 10 to 29 x 30 + 15 = 885 us: 875 us; measured without the profiler 512.5 us, the
    // host-bound part shrinks from 875 - 150 = 725 to 512.5 - 150 = 362.5 us, half: the host's
    // cost per launch is 30 x 0.5 = 15 us.
    cs::api::CalibrateContext context;
    context.iteration_time_s = 512.5e-6;
    const auto corrected = cs::api::calibrate_traces({trace}, h200(), context);
    CHECK(corrected.busy_ms == doctest::Approx(0.150));
    CHECK(corrected.profiled_iteration_ms == doctest::Approx(0.875));
    REQUIRE(corrected.file.host_launch.has_value());
    CHECK(*corrected.file.host_launch == cs::Time::us(15));
    // Measured no longer than the GPU's own time: GPU-bound without the profiler, unfitted.
    context.iteration_time_s = 150e-6;
    const auto hidden = cs::api::calibrate_traces({trace}, h200(), context);
    CHECK_FALSE(hidden.file.host_launch.has_value());
}

TEST_CASE("calibrate: the launch gap is the gaps' mean, which gives back their total") {
    // Eleven kernels of 10 us on one stream, all launched at t = 0 (each queued before its
    // predecessor ends), started after gaps of 1 us six times and 2 us four times, the two modes
    // of a real trace (elementwise kernels against GEMMs and memsets). Median of the ten gaps:
    // 1 us (the sixth and fifth are both 1); mean: (6 x 1 + 4 x 2) / 10 = 1.4 us. The model
    // charges the constant once per kernel, so only the mean, ten times over, gives back the
    // 14 us the ten gaps took.
    const int gaps[] = {1, 2, 1, 1, 2, 1, 2, 1, 2, 1};
    std::string json = R"({"traceEvents": [)";
    int ts = 100;
    for (int i = 0; i < 11; ++i) {
        if (i > 0) {
            json += ",";
            ts += 10 + gaps[i - 1];
        }
        json += R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1, )"
                R"("ts": 0, "dur": 1, "args": {"correlation": )" +
                std::to_string(i) + "}},";
        json += R"({"ph": "X", "cat": "kernel", "name": "k", "tid": 7, "ts": )" +
                std::to_string(ts) + R"(, "dur": 10, "args": {"stream": 7, "correlation": )" +
                std::to_string(i) + "}}";
    }
    json += "]}";
    const auto r =
        cs::api::calibrate_traces({cs::api::parse_torch_trace(json, "gaps.json")}, h200());
    CHECK(r.gap_samples == 10);
    REQUIRE(r.file.launch_overhead.has_value());
    CHECK(*r.file.launch_overhead == cs::Time::ns(1400));
    // The GPU's own time: 11 kernels of 10 us and a gap before each at 1.4 us = 125.4 us.
    CHECK(r.busy_ms == doctest::Approx(0.1254));
}

TEST_CASE("calibrate: a gap in which another stream's event ended is no launch gap") {
    // Stream 7: five 10 us kernels, all launched at t = 0, starting at 100, 111, 122, 183 and
    // 194: gaps of 1, 1, 51 and 1 us. Stream 20: one 82 us kernel from 100 to 182, which ends
    // inside the 51 us gap (132 to 183): the third kernel waited for it (an NCCL kernel, say),
    // so that gap is left out and the launch gap is the mean of 1, 1, 1: 1 us (with it, 54 / 4
    // = 13.5 us).
    const int starts[] = {100, 111, 122, 183, 194};
    std::string json = R"({"traceEvents": [)";
    for (int i = 0; i < 5; ++i) {
        json += R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1, )"
                R"("ts": 0, "dur": 1, "args": {"correlation": )" +
                std::to_string(i) + "}},";
        json += R"({"ph": "X", "cat": "kernel", "name": "k", "tid": 7, "ts": )" +
                std::to_string(starts[i]) +
                R"(, "dur": 10, "args": {"stream": 7, "correlation": )" + std::to_string(i) + "}},";
    }
    json += R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1, "ts": 0, )"
            R"("dur": 1, "args": {"correlation": 9}},)"
            R"({"ph": "X", "cat": "kernel", "name": "ncclKernel", "tid": 20, "ts": 100, )"
            R"("dur": 82, "args": {"stream": 20, "correlation": 9}}]})";
    const auto r =
        cs::api::calibrate_traces({cs::api::parse_torch_trace(json, "streams.json")}, h200());
    CHECK(r.gap_samples == 3);
    REQUIRE(r.file.launch_overhead.has_value());
    CHECK(*r.file.launch_overhead == cs::Time::us(1));
}

TEST_CASE("torch trace reader: the JSON Array Format (a bare list of events)") {
    const auto t = cs::api::parse_torch_trace(
        R"([{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "args": {"stream": 7,
             "device": 1, "grid": [1, 2, 3]}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 3}])",
        "array.json");
    REQUIRE(t.gpu.size() == 1);
    CHECK(t.gpu[0].stream == 7);
    CHECK(t.gpu[0].device == 1);
    CHECK(t.gpu[0].dur_us == 2);
    CHECK(t.cpu_ops.size() == 1);
    CHECK_FALSE(t.cpu_ops[0].has_shapes);
}

TEST_CASE("calibrate: what it writes, its reader takes back (issue 40)") {
    // The hand trace's fit, written and read back as an experiment's compute.calibration would:
    // the constants derived at kHandTrace come back unchanged.
    const auto t = cs::api::parse_torch_trace(kHandTrace, "hand.json");
    const auto r = cs::api::calibrate_traces({t}, h200());
    const auto back = cs::workload::parse_calibration(
        cs::config::parse_document(cs::api::calibration_file_text(r), "cal.yaml"));
    REQUIRE(back.launch_overhead.has_value());
    CHECK(back.launch_overhead->count_ps() == 2'000'000);  // the 2 us gap, as fitted above
    REQUIRE(back.residual.has_value());
    CHECK(*back.residual == *r.file.residual);

    // A trace whose unmapped kernel runs 1,000 us against 178 us of GEMM: a residual of 5.6,
    // which the file cannot hold (below 1): left unfitted, and the file still reads back.
    const std::string heavy = R"({"traceEvents": [
      {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100, "dur": 20,
       "args": {"External id": 1, "Input Dims": [[4096, 4096], [4096, 4096]],
                "Input type": ["c10::BFloat16", "c10::BFloat16"]}},
      {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "pid": 0, "tid": 7,
       "ts": 1000, "dur": 178, "args": {"External id": 1, "stream": 7}},
      {"ph": "X", "cat": "kernel", "name": "my_custom_kernel", "pid": 0, "tid": 7,
       "ts": 2000, "dur": 1000, "args": {"stream": 7}}]})";
    const auto rh =
        cs::api::calibrate_traces({cs::api::parse_torch_trace(heavy, "heavy.json")}, h200());
    CHECK_FALSE(rh.file.residual.has_value());
    bool residual_reason = false;
    for (const auto& u : rh.unfitted)
        residual_reason |= u.what == "compute.residual";
    CHECK(residual_reason);
    CHECK_NOTHROW(cs::workload::parse_calibration(
        cs::config::parse_document(cs::api::calibration_file_text(rh), "heavy-cal.yaml")));
}

TEST_CASE("torch trace reader: a text that is not JSON has nlohmann's message") {
    // The pull parser refuses the comma before ']'; nlohmann then reads the text again and
    // stops at the ']' (byte 79 read, column 79 of line 1), having last read "1},]" since the
    // number 1 began; the message is the one this reader gave before the pull parser.
    const std::string comma =
        R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1},]})";
    CHECK(error_of(comma) ==
          "t.json: byte 79: not valid JSON near '1},]' (in or after traceEvents entry 1); "
          "expected a PyTorch profiler Chrome trace ([json.exception.parse_error.101] parse "
          "error at line 1, column 79: syntax error while parsing value - unexpected ']'; "
          "expected '[', '{', or a literal)");
    // A text nlohmann accepts but a lax reader might not: a byte order mark before it, a NUL
    // after it (nlohmann reads it as the end), whole floats as ids.
    const std::string kernel =
        R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1,
            "args": {"stream": 7.0}}]})";
    CHECK(cs::api::parse_torch_trace("\xEF\xBB\xBF" + kernel, "bom.json").gpu.size() == 1);
    const auto nul = cs::api::parse_torch_trace(kernel + std::string("\0 not read", 10), "n.json");
    CHECK(nul.gpu.at(0).stream == 7);
    CHECK(nul.bytes == static_cast<std::int64_t>(kernel.size()) + 1);  // up to the NUL
}

TEST_CASE("torch trace reader: bounds and numbers checked before use (issue 40)") {
    const auto kernel = [](const std::string& fields) {
        return R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1,
                   "args": {"stream": 7)" +
               fields + "}}]})";
    };
    // 16 MiB + 1 bytes of one string: the reader stops at the limit (the JSON lexer would hold
    // the whole string first).
    const std::string endless = R"({"traceEvents": [{"name": ")" + std::string((16 << 20) + 1, 'a');
    CHECK(has(error_of(endless), "a string longer than 16 MiB"));
    // The string's quote is byte 26 (after `{"traceEvents": [{"name": `), so its 16 MiB + 1st
    // byte is 26 + 16,777,216: the pull parser's bound (TraceStreamBuf::resume_tokens) finds the
    // byte a scan of every byte finds.
    CHECK(has(error_of(endless), "t.json: byte 16777242: a string longer"));
    // 16 MiB + 1 blanks (or brackets, or literals): the lexer keeps them with the token that
    // follows, so a gzip of GBs of blanks held GBs (4.1 GB for 4.6 GB of blanks, issue 40).
    const std::string blanks = R"({"traceEvents": [)" + std::string((16 << 20) + 1, ' ');
    CHECK(has(error_of(blanks),
              "blanks, brackets or literals without a string or number for more than 16 MiB"));
    // Counted from the last string's quote, byte 1 ("traceEvents"): byte 1 + 16,777,216.
    CHECK(has(error_of(blanks), "t.json: byte 16777217: blanks"));
    const std::string literals = R"({"traceEvents": [], "x": [)" + [] {
        std::string t;
        while (t.size() <= (16 << 20))
            t += "true,[],";
        return t;
    }();
    CHECK(has(error_of(literals), "without a string or number for more than 16 MiB"));
    // Many short numbers and strings are no token of 16 MiB: 17 MiB of them read to the end.
    std::string numbers = R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1,
        "dur": 1, "args": {"stream": 7}}], "x": [)";
    while (numbers.size() <= (17 << 20))
        numbers += R"(1.5e3, "ab", -2, )";
    numbers += "0]}";
    CHECK(cs::api::parse_torch_trace(numbers, "n.json").events == 1);
    // 101 nested arrays: one past the limit of 100.
    CHECK(has(error_of(R"({"traceEvents": )" + std::string(101, '[')), "nested more than 100"));
    // A float id beyond int64 (cast unchecked before: undefined behaviour).
    CHECK(has(error_of(kernel(R"(, "correlation": 1e300)")),
              "args \"correlation\" is not a whole number within int64"));
    // A duration beyond the clock: 9.2e12 us is 2^63 ps, rounded down.
    const std::string beyond = R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k",
        "ts": 1, "dur": 1e13}]})";
    CHECK(has(error_of(beyond), "\"dur\" is more than the 9.2e12 microseconds"));
    // Shapes: 2^26 x 2^25 = 2^51 elements, above the 2^50 limit; each dimension within 2^40.
    const std::string big = R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm",
        "ts": 1, "dur": 1, "args": {"Input Dims": [[67108864, 33554432]]}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}]})";
    CHECK(has(error_of(big), "more than 2^50 elements"));
    // Kept events against the memory limit: 1,000 kernels of a 100-byte name keep more than
    // 100 kB, twice over above a 64 kB limit (hold() counts what each event keeps).
    std::string many = R"({"traceEvents": [)";
    for (int i = 0; i < 1000; ++i)
        many += std::string(i ? "," : "") + R"({"ph": "X", "cat": "kernel", "name": ")" +
                std::string(100, 'k') + R"(", "ts": 1, "dur": 1})";
    many += "]}";
    try {
        cs::api::parse_torch_trace(many, "many.json", 64 << 10);
        FAIL("expected the memory limit");
    } catch (const cs::ConfigError& e) {
        CHECK(has(e.what(), "--max-memory (65536 bytes)"));
    }
    CHECK(cs::api::parse_torch_trace(many, "many.json").gpu.size() == 1000);
}
