// The GPU's sustained rates and GEMM curve: from the catalogue, inherited by a topology file's
// gpu_models entry of the same name, or given in the file (docs/yaml-reference.md).
#include <doctest/doctest.h>

#include <string>

#include "config/document.hpp"
#include "topology/topology_yaml.hpp"

using namespace cs;
using namespace cs::topology;

namespace {
const char* kModel =
    "gpu_models:\n"
    "  %s:\n"
    "    peak: {bf16: 989TFLOPS}\n"
    "    hbm: 141GB\n"
    "    hbm_bandwidth: 4.8TB/s\n"
    "%s"
    "devices:\n"
    "  - {id: gpu0, type: gpu, model: %s}\n";

std::string topology_text(const std::string& name, const std::string& extra = "") {
    std::string t = kModel;
    for (const std::string& v : {name, extra, name})
        t.replace(t.find("%s"), 2, v);
    return t;
}

GpuModel model_of(const std::string& text) {
    const Cluster c = load_cluster(config::parse_document(text, "t.yaml"));
    return c.gpu_model(0);
}

std::string error_of(const std::string& text) {
    try {
        load_cluster(config::parse_document(text, "bad.yaml"));
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}
}  // namespace

TEST_CASE("the sustained factor: burst below the duty cycle where the cap binds, linear above") {
    const SustainedRates r{0.88, 0.65, ""};
    CHECK(r.factor(0.0) == 1.0);
    CHECK(r.factor(0.65) == 1.0);
    // Halfway from 0.65 to 1: half of the 12% loss.
    CHECK(r.factor(0.825) == doctest::Approx(0.94));
    CHECK(r.factor(1.0) == doctest::Approx(0.88));
    CHECK(SustainedRates{}.factor(1.0) == 1.0);  // no figures: burst rates
}

TEST_CASE("a gpu_models entry named like a catalogue GPU inherits its sustained rates and curve") {
    const GpuModel* h200 = find_catalog_model("H200");
    REQUIRE(h200 != nullptr);
    CHECK(h200->sustained.tensor_throughput == doctest::Approx(0.88));
    CHECK(h200->sustained.from_duty == doctest::Approx(0.65));
    CHECK(h200->gemm.peak_fraction == doctest::Approx(0.825));
    const GpuModel m = model_of(topology_text("H200"));
    CHECK(m.sustained.tensor_throughput == doctest::Approx(0.88));
    CHECK(m.gemm.half_dim == doctest::Approx(600));
    // An A100 has no sustained measurement and keeps the generic curve.
    const GpuModel a100 = model_of(topology_text("A100"));
    CHECK(a100.sustained.factor(1.0) == 1.0);
    CHECK(a100.gemm.peak_fraction == doctest::Approx(0.803));
    // A name the catalogue does not know: burst rates and the generic curve.
    const GpuModel mine = model_of(topology_text("MyGPU"));
    CHECK(mine.sustained.factor(1.0) == 1.0);
    CHECK(mine.gemm.half_dim == doctest::Approx(650));
}

TEST_CASE("sustained and gemm figures given in the file override the catalogue") {
    const GpuModel m = model_of(
        topology_text("H200",
                      "    sustained: {tensor_throughput: 0.9, from_duty: 0.5, source: lab}\n"
                      "    gemm: {peak_fraction: 0.7, half_dim: 500, exponent: 3}\n"));
    CHECK(m.sustained.tensor_throughput == doctest::Approx(0.9));
    CHECK(m.sustained.from_duty == doctest::Approx(0.5));
    CHECK(m.sustained.source == "lab");
    CHECK(m.gemm.peak_fraction == doctest::Approx(0.7));
    CHECK(m.gemm.half_dim == doctest::Approx(500));
    CHECK(m.gemm.exponent == doctest::Approx(3));
}

TEST_CASE("out-of-range sustained and gemm figures are located errors") {
    // The value of 'tensor_throughput' sits on line 6, column 36 (4 + 12 + 19 characters before).
    CHECK(error_of(topology_text("H200", "    sustained: {tensor_throughput: 1.5}\n")) ==
          "bad.yaml:6:36: 'gpu_models.H200.sustained.tensor_throughput': must be in (0, 1]: the "
          "tensor-core rate under continuous load relative to the burst rate (H200: 0.88)");
    CHECK(error_of(topology_text("H200", "    gemm: {peak_fraction: 0}\n"))
              .find("'gpu_models.H200.gemm.peak_fraction': must be in (0, 1]") !=
          std::string::npos);
    CHECK(error_of(topology_text("H200", "    sustained: {tensor_throughput: 0.9, from_duty: 1}\n"))
              .find("from_duty': must be in [0, 1)") != std::string::npos);
}
