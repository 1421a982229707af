#include <doctest/doctest.h>

#include <string>

#include "config/document.hpp"
#include "topology/topology_yaml.hpp"

using namespace cs;
using namespace cs::topology;

namespace {
const std::string kSource = CLUSTERSIM_SOURCE_DIR;
}  // namespace

TEST_CASE("bundled h200-2gpu-nvlink: two H200 on 18 x 25 GB/s NVLink") {
    const auto doc = config::load_document(kSource + "/topologies/h200-2gpu-nvlink.yaml");
    const Cluster c = load_cluster(doc);
    CHECK(c.gpu_count() == 2);
    CHECK(c.node_count() == 1);
    // One physical link -> two directed links.
    REQUIRE(c.links().size() == 2);
    // 18 bonded links x 25 GB/s = 450 GB/s per direction.
    CHECK(c.links()[0].bandwidth.bytes_per_s == doctest::Approx(450e9));
    CHECK(c.links()[0].count == 18);
    CHECK(c.links()[0].kind == LinkKind::NvLink);
    const GpuModel& m = c.gpu_model(1);
    CHECK(m.peak_bf16.flops_per_s == doctest::Approx(989e12));
    CHECK(m.peak_fp8.flops_per_s == doctest::Approx(1979e12));
    CHECK(m.hbm.value == 141'000'000'000LL);
    CHECK(m.hbm_bandwidth.bytes_per_s == doctest::Approx(4.8e12));
    std::vector<LinkId> route;
    c.route(0, 1, 0, route);
    REQUIRE(route.size() == 1);
    CHECK(c.route_latency(route) == Time::us(1));
    CHECK(c.route_bandwidth(route).bytes_per_s == doctest::Approx(450e9));
}

TEST_CASE("catalogue: datasheet numbers and aliases") {
    const GpuModel* a100 = find_catalog_model("A100-SXM4-80GB");
    REQUIRE(a100 != nullptr);
    CHECK(a100->peak_bf16.flops_per_s == doctest::Approx(312e12));
    CHECK(a100->peak_fp32.flops_per_s == doctest::Approx(19.5e12));
    CHECK(a100->hbm_bandwidth.bytes_per_s == doctest::Approx(2039e9));
    const GpuModel* h100 = find_catalog_model("H100");  // alias of H100-SXM
    REQUIRE(h100 != nullptr);
    CHECK(h100->name == "H100-SXM");
    CHECK(h100->peak_fp8.flops_per_s == doctest::Approx(1979e12));
    CHECK(h100->hbm_bandwidth.bytes_per_s == doctest::Approx(3.35e12));
    CHECK(find_catalog_model("H200-SXM")->hbm.value == 141'000'000'000LL);
    CHECK(find_catalog_model("V100") == nullptr);
}
