// nccl-tests conventions: sizes as its -b/-e/-f/-i take them, its per-operation counts, the output
// layout (read back by a small parser written here from nccl-tests' published layout, independent
// of the library's), and the library's reader on composed and simulated files.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/tables.hpp"
#include "core/errors.hpp"
#include "fit/calibrate_network.hpp"
#include "ingest/nccl_tests.hpp"
#include "ingest/topology.hpp"
#include "network/network.hpp"
#include "session/collective.hpp"
#include "workload/calibration.hpp"
#include "workload/experiment.hpp"

namespace {

const std::string kRoot = CLUSTERSIM_SOURCE_DIR;
const std::string kTwoGpus = kRoot + "/topologies/h200-2gpu-nvlink.yaml";
const std::string kSuperpod = kRoot + "/topologies/dgx-h100-superpod.yaml";
const std::string kData = kRoot + "/tests/api/data/";

// What a script written for nccl-tests output does (the usual awk/Python approach, written here
// from nccl-tests' published layout, independent of the library): drop an mpirun
// "[1,0]<stdout>:" prefix; a line whose first field is a whole number and that has at least 11
// fields is a row, read from the right: time algbw busbw #wrong out of place, the same in place,
// and before them size count type, then redop and root where the layout has them (13 fields:
// both; 12: redop; 11: neither). "# Avg bus bandwidth : X" is the footer, "#  Rank N" lines the
// devices. A digit-led line with fewer fields is counted as cut.
struct ScriptRow {
    long long size = 0, count = 0;
    std::string type, redop;
    int root = -1;
    double time_us = 0, algbw = 0, busbw = 0, ip_time_us = 0, ip_algbw = 0, ip_busbw = 0;
    std::string wrong, ip_wrong;
};
struct ScriptParse {
    std::vector<ScriptRow> rows;
    double avg_busbw = -1;
    bool out_of_bounds_ok = false;
    int device_lines = 0;
    int cut_rows = 0;
};
ScriptParse script_parse(const std::string& text) {
    ScriptParse p;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind('[', 0) == 0 && line.find("]<stdout>:") != std::string::npos)
            line = line.substr(line.find("]<stdout>:") + 10);
        std::istringstream f(line);
        std::vector<std::string> v;
        for (std::string field; f >> field;)
            v.push_back(field);
        if (v.empty()) continue;
        if (line.rfind("# Avg bus bandwidth", 0) == 0 && line.find(':') != std::string::npos)
            p.avg_busbw = std::stod(line.substr(line.find(':') + 1));
        if (line.rfind("# Out of bounds values : 0 OK", 0) == 0) p.out_of_bounds_ok = true;
        if (v.size() >= 3 && v[0] == "#" && v[1] == "Rank" &&
            v[2].find_first_not_of("0123456789") == std::string::npos)
            ++p.device_lines;
        if (v[0].find_first_not_of("0123456789") != std::string::npos) continue;
        if (v.size() < 11) {
            ++p.cut_rows;
            continue;
        }
        const std::size_t n = v.size();
        ScriptRow r;
        r.size = std::stoll(v[0]);
        r.count = std::stoll(v[1]);
        r.type = v[2];
        if (n >= 12) r.redop = v[3];
        if (n >= 13) r.root = std::stoi(v[4]);
        r.time_us = std::stod(v[n - 8]);
        r.algbw = std::stod(v[n - 7]);
        r.busbw = std::stod(v[n - 6]);
        r.wrong = v[n - 5];
        r.ip_time_us = std::stod(v[n - 4]);
        r.ip_algbw = std::stod(v[n - 3]);
        r.ip_busbw = std::stod(v[n - 2]);
        r.ip_wrong = v[n - 1];
        p.rows.push_back(r);
    }
    return p;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

std::string simulate_nccl_tests(cs::network::CollectiveKind kind, const std::string& topology,
                                std::vector<std::string> sets, std::vector<int> ranks,
                                const std::vector<cs::Bytes>& sizes) {
    cs::api::CollectiveRequest request;
    request.topology = topology;
    request.sets = std::move(sets);
    request.kind = kind;
    request.ranks = std::move(ranks);
    request.sizes = sizes;
    const auto report = cs::api::run_collective(request);
    std::ostringstream out;
    cs::cli::print_collective_nccl_tests(out, request, report, "2(factor)");
    return out.str();
}

}  // namespace

TEST_CASE("nccl-tests sizes: K, M, G are powers of two; -f multiplies, -i adds") {
    using cs::api::parse_nccl_size;
    CHECK(parse_nccl_size("8")->value == 8);
    CHECK(parse_nccl_size("64K")->value == 65536);
    CHECK(parse_nccl_size("64k")->value == 65536);
    CHECK(parse_nccl_size("1.5M")->value == 1572864);  // 1.5 x 2^20
    CHECK(parse_nccl_size("8G")->value == 8589934592LL);
    // clustersim's own units keep their meaning: GB is 10^9.
    CHECK(parse_nccl_size("8GB")->value == 8000000000LL);
    CHECK(parse_nccl_size("1GiB")->value == 1073741824LL);
    CHECK_FALSE(parse_nccl_size("8X"));
    CHECK_FALSE(parse_nccl_size("G"));
    CHECK_FALSE(parse_nccl_size("1e99G"));
    // -b 8 -e 8G -f 2: 8 = 2^3 .. 2^33, 31 sizes.
    const auto doubling =
        cs::api::nccl_size_sweep(cs::Bytes{8}, cs::Bytes{8589934592LL}, 2, 0, "x");
    REQUIRE(doubling.size() == 31);
    CHECK(doubling.back().value == 8589934592LL);
    // --sizes 8:8G is the same sweep.
    CHECK(cs::api::parse_size_range("8:8G", 2).size() == 31);
    // -b 1M -e 4M -i 1M: 1, 2, 3, 4 MiB; -i 1500000 stops before passing 4 MiB: 1048576,
    // 2548576, 4048576 (the next, 5548576, is past 4194304).
    const auto inc =
        cs::api::nccl_size_sweep(cs::Bytes{1048576}, cs::Bytes{4194304}, 1, 1048576, "x");
    REQUIRE(inc.size() == 4);
    CHECK(inc[2].value == 3 * 1048576);
    CHECK(
        cs::api::nccl_size_sweep(cs::Bytes{1048576}, cs::Bytes{4194304}, 1, 1500000, "x").size() ==
        3);
    CHECK_THROWS_WITH_AS(
        cs::api::nccl_size_sweep(cs::Bytes{1}, cs::Bytes{1LL << 40}, 1, 1, "-b 1 -e 1T"),
        doctest::Contains("-b 1 -e 1T: more than 10000 sizes"), cs::ConfigError);
    CHECK_THROWS_WITH_AS(cs::api::parse_size_range("8:2", 2),
                         doctest::Contains("the last at least the first"), cs::ConfigError);
}

TEST_CASE("nccl-tests counts per operation") {
    using cs::network::CollectiveKind;
    // all_reduce, 1000 B of float on 3 ranks: 250 elements, size 1000.
    auto c = cs::api::nccl_counts(CollectiveKind::AllReduce, 1000, 3, 4);
    CHECK(c.size_column == 1000);
    CHECK(c.count_column == 250);
    // all_gather / reduce_scatter / alltoall split the 250 elements over 3 ranks: 83 each, so the
    // size column is 83 x 3 x 4 = 996 and the count column the per-rank 83.
    for (auto k :
         {CollectiveKind::AllGather, CollectiveKind::ReduceScatter, CollectiveKind::AllToAll}) {
        c = cs::api::nccl_counts(k, 1000, 3, 4);
        CHECK(c.size_column == 996);
        CHECK(c.count_column == 83);
    }
    // sendrecv: the whole buffer each way; bf16 elements are 2 bytes.
    c = cs::api::nccl_counts(CollectiveKind::SendRecv, 1000, 3, 2);
    CHECK(c.count_column == 500);
    CHECK(cs::api::find_nccl_data_type("bfloat16")->bytes == 2);
    CHECK_FALSE(cs::api::find_nccl_data_type("complex"));
    CHECK(std::string(cs::api::nccl_redop(CollectiveKind::AllGather)) == "none");
    CHECK(std::string(cs::api::nccl_redop(CollectiveKind::ReduceScatter)) == "sum");
}

TEST_CASE("--format nccl-tests: a script written for nccl-tests reads it; busbw = algbw x factor") {
    using cs::network::CollectiveKind;
    // One DGX H100 node, 8 ranks. Factors (nccl-tests doc/PERFORMANCE.md): all_reduce 2(n-1)/n =
    // 1.75, all_gather / reduce_scatter / alltoall (n-1)/n = 0.875, sendrecv 1.
    const std::map<CollectiveKind, double> factors{{CollectiveKind::AllReduce, 1.75},
                                                   {CollectiveKind::AllGather, 0.875},
                                                   {CollectiveKind::ReduceScatter, 0.875},
                                                   {CollectiveKind::AllToAll, 0.875},
                                                   {CollectiveKind::SendRecv, 1.0}};
    const auto sizes = cs::api::parse_size_range("1M:1G", 8);  // 1M, 8M, 64M, 512M
    for (const auto& [kind, factor] : factors) {
        CAPTURE(cs::network::collective_name(kind));
        const std::string text =
            simulate_nccl_tests(kind, kSuperpod, {"nodes=1"}, {0, 1, 2, 3, 4, 5, 6, 7}, sizes);
        const auto p = script_parse(text);
        CHECK(p.device_lines == 8);
        CHECK(p.out_of_bounds_ok);
        REQUIRE(p.rows.size() == 4);
        double sum = 0;
        for (const auto& r : p.rows) {
            // 2^20 .. 2^29 bytes are multiples of 8 ranks x 4 bytes: no rounding of the size.
            CHECK(r.count == (factor == 0.875 ? r.size / 32 : r.size / 4));
            CHECK(r.type == "float");
            CHECK(r.redop == (kind == CollectiveKind::AllGather || kind == CollectiveKind::AllToAll
                                  ? "none"
                                  : "sum"));
            CHECK(r.root == -1);
            // algbw = size / time: bytes / (us x 1e3) is GB/s; the time is printed to 4 digits
            // or more, the bandwidths to 0.01.
            CHECK(r.algbw == doctest::Approx(r.size / (r.time_us * 1e3)).epsilon(2e-3));
            CHECK(r.busbw == doctest::Approx(r.algbw * factor).epsilon(1e-3));
            CHECK(r.ip_busbw == r.busbw);
            CHECK(r.wrong == "0");
            CHECK(r.ip_wrong ==
                  (kind == CollectiveKind::AllToAll || kind == CollectiveKind::SendRecv ? "N/A"
                                                                                        : "0"));
            sum += r.busbw;
        }
        // The footer averages the busbw of both column groups (equal here) over the rows.
        CHECK(p.avg_busbw == doctest::Approx(sum / 4).epsilon(1e-3));
        // The library's reader reads it too, and finds the operation from the header.
        std::istringstream in(text);
        const auto f = cs::api::parse_nccl_tests(in, "sim.txt");
        CHECK(f.kind == kind);
        CHECK(f.ranks == 8);
        CHECK(f.rows.size() == 4);
        CHECK(f.warnings.empty());
    }
}

TEST_CASE("the script parser and the library read the composed nccl-tests files") {
    const std::string text = read_text(kData + "all_reduce_perf-8xH100-composed.txt");
    const auto p = script_parse(text);
    // -b 8 -e 8G -f 2: 31 rows; the 8 GiB row: 41779 us -> 8589934592 / 41779e3 = 205.60 GB/s,
    // x 1.75 = 359.81.
    REQUIRE(p.rows.size() == 31);
    CHECK(p.rows.back().algbw == doctest::Approx(205.60));
    CHECK(p.rows.back().busbw == doctest::Approx(359.81));
    CHECK(p.avg_busbw == doctest::Approx(132.717));
    std::istringstream again(text);
    const auto f = cs::api::parse_nccl_tests(again, "all_reduce_perf-8xH100-composed.txt");
    CHECK(f.binary == "all_reduce_perf");
    CHECK(f.ranks == 8);
    CHECK(f.devices[3] == "NVIDIA H100 80GB HBM3");
    REQUIRE(f.rows.size() == 31);
    CHECK(f.rows.back().time_us[0] == 41779);
    CHECK(f.rows.back().time_us[1] == 20785 * 2 - 22);  // 41548
    CHECK(*f.avg_busbw == doctest::Approx(132.717));
    // The older layout (no root column, "error" for "#wrong", 4 GPUs in one process, NCCL log
    // lines in between): the operation comes from the file name.
    const auto old =
        cs::api::read_nccl_tests(kData + "all_gather_perf-4xA100-old-layout-composed.txt");
    CHECK(old.kind == cs::network::CollectiveKind::AllGather);
    CHECK(old.ranks == 4);
    REQUIRE(old.rows.size() == 10);  // 1K .. 256M, x4
    CHECK(old.rows[0].size == 1024);
    CHECK(old.rows[0].count == 64);  // 1024 B / 4 B / 4 ranks
    REQUIRE(old.warnings.size() == 1);
    CHECK(old.warnings[0].find("skipped 2 line(s)") != std::string::npos);
}

TEST_CASE("real nccl-tests output pasted in public issues: both parsers read it") {
    // tests/api/data/nccl-tests-public/README.md says where each file came from. The expected
    // values below are read off the files by eye.
    const std::string dir = kData + "nccl-tests-public/";
    const auto error_of = [](const std::string& spec) {
        try {
            cs::api::read_nccl_tests(spec);
        } catch (const cs::ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const auto has = [](const std::vector<std::string>& warnings, const std::string& what) {
        for (const auto& w : warnings)
            if (w.find(what) != std::string::npos) return true;
        return false;
    };

    SUBCASE("2 x GB10, all_reduce_perf, nccl-tests 2.20 banner, cut before the footer") {
        const std::string path = dir + "all_reduce_perf-2xGB10-dgx-spark-playbooks-pr103.txt";
        const auto f = cs::api::read_nccl_tests(path);
        CHECK(f.binary == "all_reduce_perf");  // from "# Collective test starting"
        CHECK(f.kind == cs::network::CollectiveKind::AllReduce);
        CHECK(f.ranks == 2);  // two hosts, one GPU each
        CHECK(f.devices[1] == "NVIDIA GB10");
        REQUIRE(f.rows.size() == 4);  // 8192 .. 65536
        CHECK(f.rows[0].size == 8192);
        CHECK(f.rows[0].count == 2048);  // 8192 B / 4 B
        CHECK(f.rows[0].time_us[0] == 27.82);
        CHECK(f.rows[0].time_us[1] == 28.54);
        CHECK(f.rows[3].busbw[0] == 0.97);
        CHECK(f.rows[3].busbw[1] == 1.01);
        CHECK_FALSE(f.avg_busbw);
        REQUIRE(f.warnings.size() == 1);
        CHECK(has(f.warnings, "no \"# Avg bus bandwidth\" footer"));
        const auto p = script_parse(read_text(path));
        CHECK(p.device_lines == 2);
        REQUIRE(p.rows.size() == 4);
        // algbw = size / time: 65536 B / 67.30 us = 0.974 GB/s, printed 0.97; on 2 ranks busbw =
        // algbw x 2(n-1)/n = algbw.
        CHECK(p.rows[3].algbw == doctest::Approx(65536 / 67.30e3).epsilon(0.01));
        CHECK(p.rows[3].busbw == p.rows[3].algbw);
    }
    SUBCASE("2 x GB10, all_gather_perf, one 16 GiB row, the excerpt ends at '# Avg'") {
        const std::string path = dir + "all_gather_perf-2xGB10-dgx-spark-playbooks-25.txt";
        const auto f = cs::api::read_nccl_tests(path);
        CHECK(f.kind == cs::network::CollectiveKind::AllGather);
        CHECK(f.ranks == 2);
        REQUIRE(f.rows.size() == 1);
        // size = count x 4 B x 2 ranks = 2147483648 x 8 = 17179869184.
        CHECK(f.rows[0].size == 17179869184LL);
        CHECK(f.rows[0].count == 2147483648LL);
        CHECK(f.rows[0].redop == "none");
        CHECK(f.rows[0].time_us[0] == 453650);
        CHECK(f.rows[0].time_us[1] == 410049);
        // algbw 16 GiB / 453650 us = 37.87 GB/s; busbw x (n-1)/n = 18.94.
        CHECK(f.rows[0].algbw[0] == doctest::Approx(17179869184.0 / 453650e3).epsilon(1e-3));
        CHECK(f.rows[0].busbw[0] == 18.94);
        CHECK_FALSE(f.avg_busbw);
        CHECK(has(f.warnings, "no \"# Avg bus bandwidth\" footer"));
        const auto p = script_parse(read_text(path));
        REQUIRE(p.rows.size() == 1);
        CHECK(p.out_of_bounds_ok);
        CHECK(p.avg_busbw == -1);  // the footer line has no value
    }
    SUBCASE("2 x RTX 2080 Ti, the 2020 layout: no root column, 'error' as 0e+00") {
        const std::string path = dir + "all_reduce_perf-2x2080Ti-nccl-tests-44-head.txt";
        const auto f = cs::api::read_nccl_tests(path);
        CHECK(f.kind == cs::network::CollectiveKind::AllReduce);  // from the file name
        CHECK(f.binary == "all_reduce_perf");
        CHECK(f.ranks == 2);
        CHECK(f.devices[0] == "GeForce RTX 2080 Ti");
        REQUIRE(f.rows.size() == 1);
        CHECK(f.rows[0].size == 8);
        CHECK(f.rows[0].count == 2);
        CHECK(f.rows[0].redop == "sum");
        CHECK(f.rows[0].root == -1);
        CHECK(f.rows[0].time_us[0] == 7.18);
        CHECK(f.rows[0].wrong[0] == "0e+00");
        CHECK_FALSE(f.rows[0].wrong_elements());
        const auto p = script_parse(read_text(path));
        CHECK(p.device_lines == 2);
        REQUIRE(p.rows.size() == 1);
        CHECK(p.rows[0].redop == "sum");
        CHECK(p.rows[0].ip_time_us == 7.02);
    }
    SUBCASE("rows without their header (a file cut at the top): refused, located") {
        const std::string path = dir + "2x2080Ti-nccl-tests-44-tail-no-header.txt";
        // 13 rows and 2 footer lines: the error points at the last line.
        CHECK(error_of("all_gather=" + path).find(path + ":15:1: no nccl-tests column header") !=
              std::string::npos);
        // The script reads the rows (11 fields: no redop, no root) and the footer.
        const auto p = script_parse(read_text(path));
        REQUIRE(p.rows.size() == 13);
        CHECK(p.rows.back().size == 134217728);
        CHECK(p.rows.back().time_us == 3298.6);
        CHECK(p.rows.back().busbw == 20.34);
        CHECK(p.avg_busbw == 6.6);
    }
    SUBCASE("8 x RTX 4090, the first row cut after its out-of-place group: refused, located") {
        const std::string path = dir + "all_reduce_perf-8xRTX4090-nccl-1530.txt";
        // Line 17 holds 9 of the 13 columns; the 9th ("0", #wrong) is the line's 84th character.
        const auto e = error_of(path);
        CHECK(e.find(path + ":17:84:") != std::string::npos);
        CHECK(e.find("a result row with 9 columns; the column header (line 15) has 13") !=
              std::string::npos);
        const auto p = script_parse(read_text(path));
        CHECK(p.device_lines == 8);
        CHECK(p.rows.empty());
        CHECK(p.cut_rows == 1);
    }
    SUBCASE("a table pasted without its device lines: OP:RANKS=FILE gives the rank count") {
        const std::string path = dir + "all_reduce_perf-nccl-tests-252-table-only.txt";
        CHECK(error_of(path).find(path + ":1:1: no \"# Using devices\" rank lines") !=
              std::string::npos);
        CHECK(error_of("all_reduce:8=" + path).find("no error") != std::string::npos);
        CHECK(error_of("all_reduce:x=" + path).find("must be a whole number") != std::string::npos);
        // 8 ranks: busbw / algbw = 93.46 / 53.41 = 1.750 = 2(n-1)/n.
        const auto f = cs::api::read_nccl_tests("all_reduce:8=" + path);
        CHECK(f.ranks == 8);
        CHECK(f.devices.empty());
        REQUIRE(f.rows.size() == 5);  // 512 MiB .. 8 GiB
        CHECK(f.rows[4].size == 8589934592LL);
        CHECK(f.rows[4].time_us[0] == 158070);
        CHECK(f.rows[4].busbw[1] == 94.80);
        REQUIRE(f.avg_busbw);
        CHECK(*f.avg_busbw == 95.3009);
        // The footer is the mean busbw of both column groups over the rows: (93.46 + 97.09 +
        // 93.58 + 97.54 + 94.26 + 95.49 + 97.37 + 94.32 + 95.10 + 94.80) / 10 = 95.301.
        double sum = 0;
        for (const auto& r : f.rows)
            sum += r.busbw[0] + r.busbw[1];
        CHECK(sum / 10 == doctest::Approx(*f.avg_busbw).epsilon(1e-4));
        CHECK(has(f.warnings, "skipped 1 line(s)"));  // the "in-place" fragment on line 1
        const auto p = script_parse(read_text(path));
        REQUIRE(p.rows.size() == 5);
        CHECK(p.avg_busbw == 95.3009);
    }
    SUBCASE("the old alltoall layout: a redop header over blank redop cells") {
        const std::string path = dir + "alltoall_perf-64xV100-nccl-tests-78-table-only.txt";
        // 64 ranks (8 nodes x 8 V100, and size / count / 4 B = 268435456 / 1048576 / 4 = 64).
        const auto f = cs::api::read_nccl_tests("alltoall:64=" + path);
        CHECK(f.kind == cs::network::CollectiveKind::AllToAll);
        REQUIRE(f.rows.size() == 2);
        CHECK(f.rows[0].redop.empty());
        CHECK(f.rows[0].time_us[0] == 520935);
        CHECK(f.rows[1].time_us[1] == 1041299);
        // The in-place check printed 1e+00: the rows count as having wrong elements.
        CHECK(f.rows[0].wrong_elements());
        CHECK(*f.avg_busbw == 0.507636);
        // 63 ranks would not fit the size column: count x 4 x 63 != 268435456.
        CHECK(error_of("alltoall:63=" + path).find("do not fit alltoall_perf on 63 ranks") !=
              std::string::npos);
        const auto p = script_parse(read_text(path));
        REQUIRE(p.rows.size() == 2);
        CHECK(p.rows[0].ip_wrong == "1e+00");
    }
    SUBCASE("sendrecv_perf, 2 x A40 on two hosts: in-place #wrong is N/A") {
        const std::string path = dir + "sendrecv_perf-2xA40-nccl-tests-214.txt";
        const auto f = cs::api::read_nccl_tests(path);
        CHECK(f.kind == cs::network::CollectiveKind::SendRecv);  // from the file name
        CHECK(f.ranks == 2);
        CHECK(f.devices[1] == "NVIDIA A40");
        REQUIRE(f.rows.size() == 5);  // 256 .. 4096
        CHECK(f.rows[4].size == 4096);
        CHECK(f.rows[4].count == 1024);  // sendrecv: size / 4 B, not split over the ranks
        CHECK(f.rows[4].time_us[0] == 30.74);
        CHECK(f.rows[4].wrong[1] == "N/A");
        CHECK_FALSE(f.rows[4].wrong_elements());
        const auto p = script_parse(read_text(path));
        REQUIRE(p.rows.size() == 5);
        CHECK(p.rows[0].ip_time_us == 33.65);
    }
    SUBCASE("broadcast_perf, 2 x V100 over TCP: a root column but no redop, NCCL log lines") {
        const std::string path = dir + "broadcast_perf-2xV100-nccl-tests-82.txt";
        const auto f = cs::api::read_nccl_tests(path);
        CHECK(f.kind == cs::network::CollectiveKind::Broadcast);
        CHECK(f.ranks == 2);
        CHECK(f.devices[0] == "Tesla V100-PCIE-16GB");
        REQUIRE(f.rows.size() == 1);
        CHECK(f.rows[0].root == 0);
        CHECK(f.rows[0].redop.empty());
        CHECK(f.rows[0].time_us[0] == 45.82);
        CHECK(f.rows[0].time_us[1] == 38.17);
        CHECK(f.rows[0].wrong[0] == "N/A");
        // The mpirun command, two NCCL WARN lines and "NCCL version ...".
        CHECK(has(f.warnings, "skipped 4 line(s)"));
        const auto p = script_parse(read_text(path));
        REQUIRE(p.rows.size() == 1);
        CHECK(p.rows[0].time_us == 45.82);
    }
    SUBCASE("sendrecv_perf, 2 x GTX 1080, the 2020 layout without redop or root, uint8") {
        const std::string path = dir + "sendrecv_perf-2xGTX1080-nccl-tests-104-table-only.txt";
        const auto f = cs::api::read_nccl_tests("sendrecv:2=" + path);  // -g 2: two GPUs
        REQUIRE(f.rows.size() == 1);
        CHECK(f.rows[0].type == "uint8");
        CHECK(f.rows[0].size == 37748744);
        CHECK(f.rows[0].count == 37748744);  // 1-byte elements
        CHECK(f.rows[0].time_us[0] == 11732);
        // The in-place check printed 3e+02: wrong elements, left out of a fit.
        CHECK(f.rows[0].wrong[1] == "3e+02");
        CHECK(f.rows[0].wrong_elements());
        const auto p = script_parse(read_text(path));
        REQUIRE(p.rows.size() == 1);
        CHECK(p.rows[0].ip_busbw == 3.23);
    }
    SUBCASE("all_gather_perf, bfloat16 on 2 GPUs, a linear sweep (-i 16M)") {
        const std::string path = dir + "all_gather_perf-2GPU-bf16-nccl-1435-table-only.txt";
        const auto f = cs::api::read_nccl_tests("all_gather:2=" + path);
        REQUIRE(f.rows.size() == 7);
        for (std::size_t i = 0; i < f.rows.size(); ++i) {
            // 16, 32, .. 112 MiB; count = size / (2 B x 2 ranks).
            CHECK(f.rows[i].size == static_cast<std::int64_t>(i + 1) * 16777216);
            CHECK(f.rows[i].count == f.rows[i].size / 4);
            CHECK(f.rows[i].type == "bfloat16");
            // On 2 ranks busbw = algbw x (n-1)/n = algbw / 2, to the printed 0.01.
            CHECK(f.rows[i].busbw[0] == doctest::Approx(f.rows[i].algbw[0] / 2).epsilon(1e-3));
        }
        CHECK(f.rows[0].time_us[0] == 108.8);
        CHECK(f.rows[6].busbw[1] == 140.24);
        // 3 ranks would not fit: 4194304 x 2 B x 3 != 16777216.
        CHECK(error_of("all_gather:3=" + path).find("do not fit all_gather_perf on 3 ranks") !=
              std::string::npos);
    }
    SUBCASE("reduce_scatter_perf, 8 ranks on 2 nodes: zero-size rows, a table without devices") {
        const std::string path =
            dir + "reduce_scatter_perf-8GPU-2nodes-nccl-tests-128-table-only.txt";
        // Two nodes of 4 GPUs (the comment says so): 8 ranks, named since the table has no
        // device lines.
        CHECK(error_of(path).find("no \"# Using devices\" rank lines") != std::string::npos);
        const auto f = cs::api::read_nccl_tests("reduce_scatter:8=" + path);
        CHECK(f.kind == cs::network::CollectiveKind::ReduceScatter);
        REQUIRE(f.rows.size() == 7);
        // -b below 8 ranks x 4 B: nccl-tests prints five rows of size and count 0.
        for (int i = 0; i < 5; ++i) {
            CHECK(f.rows[i].size == 0);
            CHECK(f.rows[i].count == 0);
        }
        CHECK(f.rows[0].time_us[0] == 5.70);
        CHECK(f.rows[4].time_us[1] == 5.52);
        // size = count x 4 B x 8 ranks: 4 x 32 = 128, 8 x 32 = 256.
        CHECK(f.rows[5].size == 128);
        CHECK(f.rows[5].count == 4);
        CHECK(f.rows[5].time_us[0] == 32.31);
        CHECK(f.rows[6].size == 256);
        CHECK(f.rows[6].busbw[1] == 0.01);
        CHECK_FALSE(f.avg_busbw);
        CHECK(has(f.warnings, "no \"# Avg bus bandwidth\" footer"));
        // 4 ranks would not fit the 128-byte row: 4 x 4 B x 4 != 128.
        CHECK(error_of("reduce_scatter:4=" + path)
                  .find("do not fit reduce_scatter_perf on 4 ranks") != std::string::npos);
        const auto p = script_parse(read_text(path));
        REQUIRE(p.rows.size() == 7);
        CHECK(p.rows[6].ip_time_us == 23.18);
        CHECK(p.cut_rows == 0);
    }
    SUBCASE("sendrecv_perf, 8 x A100 NVLink in one process, 128 MiB .. 1 GiB") {
        const std::string path = dir + "sendrecv_perf-8xA100-NVLink-li-plus-playground.txt";
        // The command echoed without '#' is skipped; no device lines: -g 8 gives 8 ranks.
        const auto f = cs::api::read_nccl_tests("sendrecv:8=" + path);
        CHECK(f.kind == cs::network::CollectiveKind::SendRecv);
        REQUIRE(f.rows.size() == 4);
        CHECK(f.rows[0].size == 134217728);
        CHECK(f.rows[0].count == 33554432);  // sendrecv: size / 4 B, not split over the ranks
        CHECK(f.rows[3].time_us[0] == 5503.4);
        CHECK(f.rows[3].busbw[0] == 195.10);
        CHECK(f.rows[3].wrong[1] == "N/A");
        // busbw = algbw for sendrecv: 1073741824 B / 5503.4 us = 195.10 GB/s.
        CHECK(f.rows[3].algbw[0] == doctest::Approx(1073741824.0 / 5503.4e3).epsilon(1e-4));
        CHECK_FALSE(f.avg_busbw);
        const auto p = script_parse(read_text(path));
        REQUIRE(p.rows.size() == 4);
        CHECK(p.rows[1].busbw == 188.60);
    }
    SUBCASE("all_reduce_perf, 8 x A100-SXM4-40GB (DGX A100), 1 MiB .. 1 GiB, complete") {
        const std::string path = dir + "all_reduce_perf-8xA100-SXM4-40GB-galvatron.txt";
        const auto f = cs::api::read_nccl_tests(path);
        CHECK(f.kind == cs::network::CollectiveKind::AllReduce);  // from the file name
        CHECK(f.ranks == 8);  // eight device lines, one process (nGpus 8)
        CHECK(f.devices[7] == "NVIDIA A100-SXM4-40GB");
        REQUIRE(f.rows.size() == 11);
        CHECK(f.rows[0].size == 1048576);
        CHECK(f.rows[10].size == 1073741824);
        CHECK(f.rows[10].count == 268435456);
        CHECK(f.rows[10].time_us[0] == 8139.9);
        // busbw = algbw x 2(n-1)/n = 131.91 x 1.75 = 230.84.
        CHECK(f.rows[10].busbw[0] == doctest::Approx(f.rows[10].algbw[0] * 1.75).epsilon(1e-4));
        REQUIRE(f.avg_busbw);
        CHECK(*f.avg_busbw == 130.613);
        CHECK(f.warnings.empty());
        const auto p = script_parse(read_text(path));
        CHECK(p.device_lines == 8);
        REQUIRE(p.rows.size() == 11);
        // The footer is the mean busbw over both column groups: (1433.58 + 1439.89) / 22 =
        // 130.612 against 130.613 printed (the columns are rounded to 0.01).
        double sum = 0;
        for (const auto& r : p.rows)
            sum += r.busbw + r.ip_busbw;
        CHECK(sum / 22 == doctest::Approx(p.avg_busbw).epsilon(1e-5));
    }
    SUBCASE("mpirun --tag-output prefixes on every line") {
        const std::string path = dir + "all_reduce_perf-p5-aws-k8s-tester-503-mpi-prefix.txt";
        CHECK(error_of(path).find("no \"# Using devices\" rank lines") != std::string::npos);
        // The rank count does not change an all_reduce row's size check: any count reads it.
        const auto f = cs::api::read_nccl_tests("all_reduce:16=" + path);
        REQUIRE(f.rows.size() == 3);  // 8, 16, 32 B
        CHECK(f.rows[2].size == 32);
        CHECK(f.rows[2].time_us[0] == 22.25);
        CHECK(f.rows[2].time_us[1] == 13.34);
        const auto p = script_parse(read_text(path));
        REQUIRE(p.rows.size() == 3);
        CHECK(p.rows[1].time_us == 12.88);
    }
}

TEST_CASE("bad nccl-tests files: located errors") {
    const auto error_of = [](const std::string& text, const std::string& path = "f.txt") {
        std::istringstream in(text);
        try {
            cs::api::parse_nccl_tests(in, path);
        } catch (const cs::ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const std::string head =
        "# Collective test starting: all_reduce_perf\n"
        "#  Rank  0 Group  0 Pid 1 on h device  0 [0x00] GPU\n"
        "#  Rank  1 Group  0 Pid 1 on h device  1 [0x00] GPU\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
        "time   algbw   busbw #wrong\n";
    // Line 5, a row cut after the in-place time: 10 columns; the 10th starts at column 103.
    CHECK(error_of(head +
                   "        1024           256     float     sum      -1    10.00    0.10    "
                   "0.10      0    10.00\n")
              .find("f.txt:5:") != std::string::npos);
    // A time that is not a number, at its column.
    const std::string bad_time =
        "        1024           256     float     sum      -1    1x.00    0.10    0.10      0    "
        "10.00    0.10    0.10      0\n";
    CHECK(error_of(head + bad_time)
              .find("f.txt:5:57: the out-of-place time must be a number from 0 to 1e12, got "
                    "'1x.00'") != std::string::npos);
    // Absurd values: a time of 10^300 us, a root past any rank count.
    const std::string row_tail = "    0.10    0.10      0    10.00    0.10    0.10      0\n";
    CHECK(
        error_of(head + "        1024           256     float     sum      -1    1e300" + row_tail)
            .find("f.txt:5:57: the out-of-place time must be a number from 0 to 1e12") !=
        std::string::npos);
    CHECK(
        error_of(head + "        1024           256     float     sum   1e300    10.00" + row_tail)
            .find("f.txt:5:48: the root column must be a rank number") != std::string::npos);
    // Truncated before any row.
    CHECK(error_of(head).find("f.txt:4:1: no result rows") != std::string::npos);
    // Not nccl-tests output at all.
    CHECK(error_of("hello\nworld\n").find("f.txt:2:1: no nccl-tests column header") !=
          std::string::npos);
    // Size and count that contradict the operation: 1024 B of float is 256 elements.
    CHECK(error_of(head +
                   "        1024           128     float     sum      -1    10.00    0.10    "
                   "0.10      0    10.00    0.10    0.10      0\n")
              .find("f.txt:5:1: size 1024 and count 128 float do not fit all_reduce_perf") !=
          std::string::npos);
    // No operation line and no binary in the name.
    std::string no_op = head.substr(head.find('\n') + 1);
    CHECK(error_of(no_op + bad_time.substr(0, 0) +
                   "        1024           256     float     sum      -1    10.00    0.10    0.10"
                   "      0    10.00    0.10    0.10      0\n")
              .find("f.txt:1:1: cannot tell which operation") != std::string::npos);
}

namespace {

std::filesystem::path scratch_dir(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / ("cs_nccl_tests_" + name);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

}  // namespace

TEST_CASE("calibrate --nccl-tests: a file made from known constants fits back to them") {
    using cs::network::CollectiveKind;
    const auto dir = scratch_dir("roundtrip");
    // Known constants, away from the measured defaults (all_gather on nvlink: 0.590, 18 us;
    // reduce_scatter: 0.563, 16.5 us): all_gather 0.45 and 30 us, reduce_scatter 0.8 and 5 us.
    std::ofstream(dir / "truth.yaml")
        << "clustersim_calibration: 2\n"
           "network:\n"
           "  all_gather: {nvlink: {efficiency: 0.45, latency: 30us}}\n"
           "  reduce_scatter: {nvlink: {efficiency: 0.8, latency: 5us}}\n";
    std::vector<cs::api::NcclTestsFile> files;
    for (auto kind : {CollectiveKind::AllGather, CollectiveKind::ReduceScatter}) {
        cs::api::CollectiveRequest request;
        request.topology = kTwoGpus;
        request.kind = kind;
        request.ranks = {0, 1};
        request.sizes = cs::api::parse_size_range("1M:1G", 2);
        request.calibration = dir / "truth.yaml";
        const auto report = cs::api::run_collective(request);
        std::ostringstream out;
        cs::cli::print_collective_nccl_tests(out, request, report, "2(factor)");
        std::istringstream in(out.str());
        files.push_back(
            cs::api::parse_nccl_tests(in, std::string(cs::api::nccl_binary(kind)) + ".txt"));
    }
    const auto topo = cs::api::load_topology(kTwoGpus, {});
    const auto fit = cs::api::fit_network(files, topo.cluster, "two-gpus", std::nullopt);
    REQUIRE(fit.constants.size() == 2);
    // The times were printed to at least 4 significant digits (2 decimals below 100 us, 1 below
    // 10 ms): relative rounding at most 0.005 / 29 us = 2e-4 per row, so the efficiency comes back
    // within 0.2% and the fixed cost within a fraction of a microsecond.
    const auto& ag = fit.constants[0];
    CHECK(ag.op == CollectiveKind::AllGather);
    CHECK(ag.link == cs::topology::LinkKind::NvLink);
    CHECK(ag.efficiency == doctest::Approx(0.45).epsilon(2e-3));
    CHECK(ag.latency.seconds() * 1e6 == doctest::Approx(30).epsilon(0.02));
    const auto& rs = fit.constants[1];
    CHECK(rs.op == CollectiveKind::ReduceScatter);
    CHECK(rs.efficiency == doctest::Approx(0.8).epsilon(2e-3));
    CHECK(rs.latency.seconds() * 1e6 == doctest::Approx(5).epsilon(0.1));
    for (const auto& op : fit.ops) {
        CHECK(op.samples == 11);  // 1 MiB .. 1 GiB
        CHECK(op.rms_residual < 1e-3);
    }
    // The operations without files are reported unfitted, with the reason.
    bool all_reduce_unfitted = false;
    for (const auto& u : fit.unfitted)
        all_reduce_unfitted |= u.what == "all_reduce" && u.why == "no nccl-tests file of it given";
    CHECK(all_reduce_unfitted);

    // Written, read back and referenced from an experiment: network: {calibration: FILE} puts the
    // fitted constants on top of the measured defaults.
    cs::workload::CalibrationFile file;
    file.network = fit.constants;
    std::ofstream(dir / "fitted.yaml") << cs::workload::calibration_yaml(file, {"test"});
    std::ofstream(dir / "exp.yaml")
        << "topology: " << kTwoGpus << "\n"
        << "model: {layers: 2, hidden_size: 1024, attention_heads: 8, vocab_size: 1000}\n"
           "parallelism: {tp: 1, pp: 1, dp: 2}\n"
           "training: {micro_batch_size: 1, global_batch_size: 2, seq_length: 512}\n"
           "network: {calibration: fitted.yaml}\n";
    const auto spec = cs::workload::load_experiment(dir / "exp.yaml", {});
    const int nvlink = static_cast<int>(cs::topology::LinkKind::NvLink);
    CHECK(spec.network.op_efficiency[static_cast<int>(CollectiveKind::AllGather)][nvlink] ==
          doctest::Approx(0.45).epsilon(2e-3));
    // all_reduce keeps the measured default; nominal and measured keep their meaning.
    CHECK(spec.network.op_efficiency[static_cast<int>(CollectiveKind::AllReduce)][nvlink] ==
          cs::network::kCalibratedNvLinkAllReduce);
    const auto measured =
        cs::workload::load_experiment(dir / "exp.yaml", {"network.calibration=measured"});
    CHECK(measured.network.op_efficiency[static_cast<int>(CollectiveKind::AllGather)][nvlink] ==
          cs::network::kCalibratedNvLinkAllGather);
    const auto nominal =
        cs::workload::load_experiment(dir / "exp.yaml", {"network.calibration=nominal"});
    CHECK(nominal.network.op_efficiency[static_cast<int>(CollectiveKind::AllGather)][nvlink] == 1);
    // A file without network constants, and a missing one, are located errors.
    std::ofstream(dir / "compute-only.yaml") << "clustersim_calibration: 1\ngpu_model: H200\n";
    const auto error_of = [&](const std::string& set) {
        try {
            cs::workload::load_experiment(dir / "exp.yaml", {set});
        } catch (const cs::ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(error_of("network.calibration=compute-only.yaml").find("holds no network constants") !=
          std::string::npos);
    CHECK(error_of("network.calibration=mesured")
              .find("expected measured, nominal or a calibration file; cannot load \"mesured\"") !=
          std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE(
    "calibrate --nccl-tests on files made from the public 2-GPU NCCL data: the direct "
    "NVLink efficiencies of docs/network.md within 5%") {
    using cs::network::CollectiveKind;
    // tools/nccl_tests_from_h200.py wrote these from h200-calibration.json (minus its 50 us
    // launch).
    const std::string dir = kRoot + "/tests/validation/data/nccl-tests/";
    std::vector<cs::api::NcclTestsFile> files;
    for (const char* f :
         {"all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "sendrecv_perf"})
        files.push_back(cs::api::read_nccl_tests(dir + f + "-h200x2.txt"));
    const auto topo = cs::api::load_topology(kTwoGpus, {});
    // The sizes network.md's fit used: 16 MiB .. 1 GiB per rank (all_gather's and
    // reduce_scatter's size column is twice that on two ranks).
    const auto fit =
        cs::api::fit_network(files, topo.cluster, "two-gpus",
                             std::pair<std::int64_t, std::int64_t>{16LL << 20, 2LL << 30});
    REQUIRE(fit.constants.size() == 4);
    const std::map<CollectiveKind, double> expected{
        {CollectiveKind::AllReduce, cs::network::kCalibratedNvLinkAllReduce},
        {CollectiveKind::AllGather, cs::network::kCalibratedNvLinkAllGather},
        {CollectiveKind::ReduceScatter, cs::network::kCalibratedNvLinkReduceScatter},
        {CollectiveKind::SendRecv, cs::network::kCalibratedNvLinkSendRecv}};
    for (const auto& c : fit.constants) {
        CAPTURE(cs::network::collective_name(c.op));
        CHECK(c.link == cs::topology::LinkKind::NvLink);
        CHECK(c.efficiency == doctest::Approx(expected.at(c.op)).epsilon(0.05));
    }
    for (const auto& op : fit.ops)
        CHECK(op.samples == 4);  // 16, 64, 256 MiB and 1 GiB (per rank)
}

TEST_CASE(
    "calibrate --nccl-tests on a real run: 8 x A100 all_reduce (DGX A100), fitted and predicted "
    "back") {
    using cs::network::CollectiveKind;
    // tests/api/data/nccl-tests-public/README.md: a complete all_reduce_perf run on one DGX A100
    // (40 GB), 1 MiB .. 1 GiB; tests/api/data/dgx-a100-40gb-1node.yaml describes the machine.
    const std::string topology = kData + "dgx-a100-40gb-1node.yaml";
    const auto files = std::vector<cs::api::NcclTestsFile>{cs::api::read_nccl_tests(
        kData + "nccl-tests-public/all_reduce_perf-8xA100-SXM4-40GB-galvatron.txt")};
    const auto topo = cs::api::load_topology(topology, {});

    // All eleven rows. Under Simple alone the 1 .. 8 MiB rows were faster than the model's fixed
    // part (14 ring steps x 8.6 us of step overhead plus hop latencies, about 140 us, against 79
    // us measured at 1 MiB) and the fit warned; with NCCL's LL and LL128 (docs/network.md,
    // "Protocols") a 1 MiB all_reduce costs LL's 6.6 us + 14 x 0.6 us plus its transfer, below
    // the measurement, so every row can be fitted and no such warning is given.
    const auto all = cs::api::fit_network(files, topo.cluster, "dgx-a100", std::nullopt);
    REQUIRE(all.ops.size() == 1);
    CHECK(all.ops[0].algorithm == "ring");  // an A100 node has no NVLink SHARP
    for (const auto& w : all.warnings)
        CHECK(w.find("faster than the model can be") == std::string::npos);

    // Asked for, NVLS is refused on A100s with the reason.
    {
        cs::api::CollectiveRequest nvls;
        nvls.topology = topology;
        nvls.kind = CollectiveKind::AllReduce;
        nvls.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
        nvls.sizes = {cs::Bytes{1LL << 30}};
        nvls.algorithm = cs::network::Algorithm::Nvls;
        CHECK_THROWS_WITH_AS(cs::api::run_collective(nvls),
                             doctest::Contains("support NVLink SHARP"), cs::ConfigError);
    }

    // 16 MiB .. 1 GiB, where bandwidth dominates.
    const auto fit =
        cs::api::fit_network(files, topo.cluster, "dgx-a100",
                             std::pair<std::int64_t, std::int64_t>{16LL << 20, 1LL << 30});
    REQUIRE(fit.constants.size() == 1);
    const auto& op = fit.ops[0];
    CHECK(op.algorithm == "ring");
    CHECK(op.link == "nvswitch");
    REQUIRE(op.samples == 7);
    CHECK(op.left_out == 4);
    for (const auto& w : fit.warnings)
        CHECK(w.find("faster than the model can be") == std::string::npos);
    // The tolerance, from the run itself: its busbw jumps from 202.00 to 230.84 GB/s between
    // 512 MiB and 1 GiB (+14.3%) while the modelled rate rises smoothly towards its plateau, so
    // a fit splits that step between the two rows, about 7% each way (the default fit, which
    // makes the largest residual least, gives -5.7% and +5.7% there; least squares -5.4% and
    // +6.1%): the worst residual cannot be much below 6-7%, and we allow 8%; the rms over 7 rows
    // with two of them near 6-7% is at least sqrt(2 x 0.06^2 / 7) = 3.2%, and we allow 5%.
    CHECK(std::abs(op.worst_residual) < 0.08);
    CHECK(op.rms_residual < 0.05);
    CHECK(op.points.back().fitted_us > op.points.back().measured_us);  // 1 GiB: over
    CHECK(op.points[5].fitted_us < op.points[5].measured_us);          // 512 MiB: under

    // Predicted back: `collective --calibration` with the written file gives the fit's times,
    // within the rounding of the written efficiency (4 decimals: 5e-5 / 0.74 = 7e-5 relative)
    // and fixed cost (1 ns).
    const auto dir = scratch_dir("a100");
    cs::workload::CalibrationFile file;
    file.network = fit.constants;
    std::ofstream(dir / "fitted.yaml") << cs::workload::calibration_yaml(file, {"test"});
    cs::api::CollectiveRequest request;
    request.topology = topology;
    request.kind = CollectiveKind::AllReduce;
    request.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
    request.sizes = cs::api::parse_size_range("16M:1G", 2);
    request.calibration = dir / "fitted.yaml";
    const auto back = cs::api::run_collective(request);
    REQUIRE(back.rows.size() == 7);
    for (std::size_t i = 0; i < 7; ++i)
        CHECK(back.rows[i].time.seconds() * 1e6 ==
              doctest::Approx(op.points[i].fitted_us).epsilon(1e-4));
    std::filesystem::remove_all(dir);
}

namespace {

// The fitted residuals of a calibrate --nccl-tests run on `files` over `topology`, per operation:
// the worst |fitted / measured - 1| over the rows of 1 KiB and up.
std::map<std::string, double> worst_from_1kib(const std::vector<std::string>& files,
                                              const std::string& topology) {
    cs::api::NetworkFitOptions options;
    options.files = files;
    options.topology = topology;
    const auto fit = cs::api::calibrate_network(options);
    std::map<std::string, double> worst;
    for (const auto& op : fit.ops) {
        double w = 0;
        for (const auto& p : op.points)
            if (p.size >= 1024) w = std::max(w, std::abs(p.fitted_us / p.measured_us - 1));
        worst[std::string(cs::network::collective_name(op.op))] = w;
    }
    return worst;
}

}  // namespace

TEST_CASE(
    "issue 37's bar: public nccl-tests fixtures fitted within 15% at every size from 1 KiB up, "
    "where a topology describes the hardware and the data admit it") {
    // The bar (issue 37, "Done when"): every row of 1 KiB and up within 15% after
    // `calibrate --nccl-tests` on the fixture itself, all sizes fitted (no --nccl-sizes).
    const double bar = 0.15;
    const std::string pub = kData + "nccl-tests-public/";

    // One DGX A100 (40 GB), all_reduce 1 MiB .. 1 GiB (dgx-a100-40gb-1node.yaml). It can hold:
    // the run's worst feature, a busbw step from 202.0 to 230.8 GB/s between 512 MiB and 1 GiB
    // (+14.3%), costs a smooth rate about 7% each way, half the bar. Fitted: worst 11.5% (13.6%
    // with least squares).
    const auto a100 = worst_from_1kib({pub + "all_reduce_perf-8xA100-SXM4-40GB-galvatron.txt"},
                                      kData + "dgx-a100-40gb-1node.yaml");
    CHECK(a100.at("all_reduce") < bar);

    // Two DGX Spark (GB10) over one 200G cable, all_reduce 8 KiB .. 64 KiB
    // (dgx-spark-2x-200g.yaml). Its four rows rise monotonically (27.8, 31.9, 39.5, 67.3 us), so
    // nothing in the data stops an increasing cost from following them. Fitted: worst 7.8%.
    // (The same hosts' all_gather file has one row, which two fitted constants always match: not
    // a check, so not counted here.)
    const auto spark =
        worst_from_1kib({pub + "all_reduce_perf-2xGB10-dgx-spark-playbooks-pr103.txt"},
                        kData + "dgx-spark-2x-200g.yaml");
    CHECK(spark.at("all_reduce") < bar);

    // 8 x A100 on NVSwitch (the same DGX A100 topology), sendrecv 128 MiB .. 1 GiB, a table
    // without device lines (8 ranks given). See the next test: 12.35% at best, and fitted so.
    const auto sendrecv = worst_from_1kib(
        {"sendrecv:8=" + pub + "sendrecv_perf-8xA100-NVLink-li-plus-playground.txt"},
        kData + "dgx-a100-40gb-1node.yaml");
    CHECK(sendrecv.at("sendrecv") < bar);
}

TEST_CASE(
    "calibrate --nccl-tests --nccl-fit worst makes the largest residual least: the 8 x A100 "
    "sendrecv by hand") {
    // sendrecv_perf-8xA100-NVLink-li-plus-playground.txt, out of place: 128 MiB 1211.2 us,
    // 256 MiB 1423.3, 512 MiB 2785.4, 1 GiB 5503.4 us. At these sizes NCCL runs Simple and the
    // model's time is affine in the size, t = L + k S (L every fixed part, k = 1 / (efficiency x
    // 300 GB/s), the NVSwitch port). The least largest relative error of an affine cost has equal
    // errors of alternating sign on three rows (Chebyshev's alternation); here the 128 MiB,
    // 256 MiB and 1 GiB rows at -e, +e, -e. With x = k x 128 MiB:
    //   L + x = 1211.2 (1 - e),  L + 2x = 1423.3 (1 + e),  L + 8x = 5503.4 (1 - e).
    // The first and third give 7x = (5503.4 - 1211.2)(1 - e), so x = 613.17 (1 - e); the first and
    // second x = 1423.3 (1 + e) - 1211.2 (1 - e). Equal: (613.17 + 1211.2)(1 - e) = 1423.3 (1 + e),
    // e = (1824.37 - 1423.3) / (1824.37 + 1423.3) = 0.12350. Then x = 537.45 us (128 MiB at 249.7
    // GB/s: efficiency 249.7 / 300 = 0.8324) and L = 1061.6 - 537.4 = 524.2 us, which puts the
    // 512 MiB row at 524.2 + 4 x 537.44 = 2674.0 us, -4.0%, inside. No affine cost does better,
    // and the fitted model is one: its worst residual is 12.35% (the grid and golden search on
    // the efficiency land within a hundredth of that), where least squares leaves +15.4%.
    const std::string topology = kData + "dgx-a100-40gb-1node.yaml";
    const auto files = std::vector<cs::api::NcclTestsFile>{cs::api::read_nccl_tests(
        "sendrecv:8=" + kData +
        "nccl-tests-public/sendrecv_perf-8xA100-NVLink-li-plus-playground.txt")};
    const auto topo = cs::api::load_topology(topology, {});
    const auto worst = cs::api::fit_network(files, topo.cluster, "dgx-a100", std::nullopt,
                                            cs::api::NetworkFitObjective::Worst);
    REQUIRE(worst.ops.size() == 1);
    const auto& w = worst.ops[0];
    REQUIRE(w.points.size() == 4);
    // To the rounding of the hand computation: e = 401.0714 / 3247.6714 = 0.123495, the 512 MiB
    // row at 2673.96 / 2785.4 - 1 = -0.04001; the efficiency search converges far below 5e-4.
    const double e = 0.123495;
    const auto near = [](double value, double expected) {
        return std::abs(value - expected) < 5e-4;
    };
    const auto residual = [](const cs::api::NetworkOpFit::Point& p) {
        return p.fitted_us / p.measured_us - 1;
    };
    CHECK(near(std::abs(w.worst_residual), e));
    CHECK(near(residual(w.points[0]), -e));
    CHECK(near(residual(w.points[1]), e));
    CHECK(near(residual(w.points[2]), -0.04001));
    CHECK(near(residual(w.points[3]), -e));
    // 128 MiB in x = 537.45 us: 249.73 GB/s of the port's 300.
    CHECK(std::abs(w.efficiency - 0.83244) < 1e-3);

    // Least squares on the same rows: a smaller rms, a larger worst residual (+15.4%, the 256 MiB
    // row), so over the bar of issue 37.
    const auto rms = cs::api::fit_network(files, topo.cluster, "dgx-a100", std::nullopt,
                                          cs::api::NetworkFitObjective::Rms);
    const auto& r = rms.ops[0];
    CHECK(r.rms_residual <= w.rms_residual);
    CHECK(std::abs(r.worst_residual) > std::abs(w.worst_residual));
    CHECK(std::abs(r.worst_residual) > 0.15);

    // The measure is parsed from --nccl-fit, and anything else is refused at the option.
    CHECK(cs::api::parse_network_fit_objective("rms") == cs::api::NetworkFitObjective::Rms);
    CHECK(cs::api::parse_network_fit_objective("worst") == cs::api::NetworkFitObjective::Worst);
    CHECK_THROWS_WITH_AS(cs::api::parse_network_fit_objective("max"),
                         doctest::Contains("--nccl-fit"), cs::ConfigError);
    CHECK(cs::api::network_fit_json(worst)["objective"] == "worst");
}

TEST_CASE(
    "issue 37's bar cannot hold on the 2 x H200 all_reduce and all_gather fixtures: their "
    "times fall as the size grows") {
    // tests/validation/data/nccl-tests/*-h200x2.txt are Python-timed measurements (50 us of launch
    // subtracted) in nccl-tests' layout. Where a larger size was measured faster than a smaller
    // one (t_small > t_large), a cost that does not fall with size has f(small) <= f(large), and
    // its worse relative error on the two rows is at least (t_small - t_large) / (t_small +
    // t_large) (equal errors of opposite sign). all_reduce: 1 KiB 26.72 us, 4 KiB 16.58 us:
    // 10.14 / 43.30 = 23.4%. all_gather: 2 MiB 26.00 us, 8 MiB 19.63 us: 6.37 / 45.63 = 14.0%,
    // and with the NVLink bond's 450 GB/s the 8 MiB row must take at least 3 MiB / 450 GB/s =
    // 7.0 us more than the 2 MiB one (each of the two GPUs receives 3 MiB more), so
    // (26.00 - 19.63 + 7.0) / 45.63 = 29.3%. Both above the bar, for any model.
    const std::string dir = kRoot + "/tests/validation/data/nccl-tests/";
    const auto lower_bound = [](const cs::api::NcclTestsFile& f, std::int64_t small,
                                std::int64_t large, double extra_us) {
        double ts = 0, tl = 0;
        for (const auto& r : f.rows) {
            if (r.size == small) ts = r.time_us[0];  // out of place, as the fit reads
            if (r.size == large) tl = r.time_us[0];
        }
        REQUIRE(ts > 0);
        REQUIRE(tl > 0);
        return (ts - tl + extra_us) / (ts + tl);
    };
    const auto ar = cs::api::read_nccl_tests(dir + "all_reduce_perf-h200x2.txt");
    CHECK(lower_bound(ar, 1024, 4096, 0) == doctest::Approx(0.234).epsilon(0.01));
    const auto ag = cs::api::read_nccl_tests(dir + "all_gather_perf-h200x2.txt");
    const double extra_us = 3.0 * (1 << 20) / 450e9 * 1e6;  // 6.99 us
    CHECK(lower_bound(ag, 2 << 20, 8 << 20, extra_us) == doctest::Approx(0.293).epsilon(0.01));
    // And the fit indeed misses there (at least the bound).
    const auto fitted = worst_from_1kib({dir + "all_reduce_perf-h200x2.txt"}, kTwoGpus);
    CHECK(fitted.at("all_reduce") >= 0.234);
}
