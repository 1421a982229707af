// The measured numbers cases.yaml copies from tests/validation/data/ must equal the data files',
// so that the two cannot drift: every case whose source names H200-CAL (h200-calibration.json) or
// H200-KERN (h200-kernels.json) is mapped, from its id's inputs, to the number it restates.
#include <doctest/doctest.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

const std::string kDir = std::string(CLUSTERSIM_SOURCE_DIR) + "/tests/validation/";

// "16MiB", "1GiB" (the sizes cases.yaml uses for these rows).
std::int64_t size_bytes(const std::string& s) {
    const std::int64_t n = std::stoll(s);
    if (s.ends_with("MiB")) return n << 20;
    if (s.ends_with("GiB")) return n << 30;
    FAIL("unexpected size " << s);
    return 0;
}

std::map<std::string, std::string> overrides(const YAML::Node& c) {
    std::map<std::string, std::string> out;
    for (const auto& s : c["set"]) {
        const auto text = s.as<std::string>();
        const auto eq = text.find('=');
        out[text.substr(0, eq)] = text.substr(eq + 1);
    }
    return out;
}

// The first row whose integer keys all match, else a null node (not a map).
YAML::Node row_where(const YAML::Node& rows, const std::map<std::string, std::int64_t>& keys) {
    for (const auto& row : rows) {
        const bool match = std::all_of(keys.begin(), keys.end(), [&](const auto& kv) {
            return row[kv.first].template as<std::int64_t>() == kv.second;
        });
        if (match) return row;
    }
    return YAML::Node();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The data files' value for case `c`, or nothing when no row matches its inputs.
std::optional<double> measured(const YAML::Node& c, const YAML::Node& cal, const YAML::Node& kern) {
    const auto source = c["source"].as<std::string>();
    const auto kind = c["kind"].as<std::string>();
    YAML::Node row;
    if (source.starts_with("H200-CAL gemm_bf16")) {
        const auto& g = c["gemm"];
        row = row_where(cal["gemm_bf16"]["rows"], {{"m", g["m"].as<std::int64_t>()},
                                                   {"n", g["n"].as<std::int64_t>()},
                                                   {"k", g["k"].as<std::int64_t>()}});
        if (row.IsMap()) return row["ms"].as<double>();
    } else if (source.starts_with("H200-CAL transformer_layer_bf16")) {
        const auto set = overrides(c);
        row = row_where(cal["transformer_layer_bf16"]["rows"],
                        {{"h", std::stoll(set.at("model.hidden_size"))},
                         {"heads", std::stoll(set.at("model.attention_heads"))},
                         {"s", std::stoll(set.at("training.seq_length"))},
                         {"mbs", std::stoll(set.at("training.micro_batch_size"))}});
        const bool forward = c["layer_pass"].as<std::string>() == "forward";
        if (row.IsMap()) return row[forward ? "fwd_ms" : "bwd_ms"].as<double>();
    } else if (source.starts_with("H200-CAL nccl_two_gpus") && kind == "collective") {
        const auto& nccl = cal["nccl_two_gpus"];
        const auto op = c["op"].as<std::string>();
        const std::int64_t size = size_bytes(c["size"].as<std::string>());
        // all_gather / reduce_scatter cases give nccl-tests' whole buffer: 2 x the per-rank bytes.
        if (op == "all_reduce") {
            row = row_where(nccl["all_reduce"], {{"bytes", size}});
            if (row.IsMap()) return row["busbw_GBps"].as<double>();
        } else if (op == "all_gather") {
            row = row_where(nccl["all_gather"], {{"bytes_per_rank", size / 2}});
            if (row.IsMap()) return row["busbw_GBps"].as<double>();
        } else if (op == "reduce_scatter") {
            row = row_where(nccl["reduce_scatter"], {{"bytes_per_rank_out", size / 2}});
            if (row.IsMap()) return row["busbw_GBps"].as<double>();
        } else if (op == "sendrecv") {
            row = row_where(nccl["send_recv"], {{"bytes", size}});
            if (row.IsMap()) return row["GBps_each_way"].as<double>();
        } else if (op == "send") {
            // A single send: GB/s one way = bytes / one_way_ms.
            row = row_where(nccl["send_recv"], {{"bytes", size}});
            if (row.IsMap())
                return static_cast<double>(size) / (row["one_way_ms"].as<double>() * 1e-3) * 1e-9;
        }
    } else if (source.starts_with("H200-KERN profiled_training_iteration")) {
        return kern["profiled_training_iteration"]["iteration_ms_without_profiler"].as<double>() /
               1e3;  // the case is in seconds
    } else if (source.starts_with("H200-KERN transformer_layer_kernels")) {
        const auto set = overrides(c);
        row = row_where(kern["transformer_layer_kernels"]["rows"],
                        {{"h", std::stoll(set.at("model.hidden_size"))},
                         {"heads", std::stoll(set.at("model.attention_heads"))},
                         {"s", std::stoll(set.at("training.seq_length"))},
                         {"mbs", std::stoll(set.at("training.micro_batch_size"))}});
        const bool forward = c["layer_pass"].as<std::string>() == "forward";
        if (row.IsMap())
            return row["kernel_sum_ms"][forward ? "forward" : "forward_backward_accumulate"]
                .as<double>();
    } else if (source.starts_with("H200-KERN sustained_throughput.")) {
        // The rate under sustained load: the median of the windows after the first.
        const auto rest = source.substr(std::string("H200-KERN sustained_throughput.").size());
        const auto key = rest.substr(0, rest.find(' '));
        const auto& series = kern["sustained_throughput"][key];
        if (series && series.IsSequence() && series.size() > 1) {
            std::vector<double> after_first;
            for (std::size_t i = 1; i < series.size(); ++i)
                after_first.push_back(series[i].as<double>());
            return median(after_first);
        }
    }
    return std::nullopt;
}

struct Drift {
    int checked = 0;
    std::vector<std::string> problems;  // one line per case that does not match its data
};

Drift drift(const YAML::Node& cases, const YAML::Node& cal, const YAML::Node& kern) {
    Drift d;
    for (const auto& c : cases["cases"]) {
        const auto source = c["source"].as<std::string>();
        if (!source.starts_with("H200-CAL") && !source.starts_with("H200-KERN")) continue;
        const auto id = c["id"].as<std::string>();
        const auto value = measured(c, cal, kern);
        if (!value) {
            d.problems.push_back(id + ": no row of the data files matches its inputs");
            continue;
        }
        ++d.checked;
        const double published = c["published"].as<double>();
        if (std::fabs(published / *value - 1) > 1e-6)
            d.problems.push_back(id + ": published " + std::to_string(published) + ", data file " +
                                 std::to_string(*value));
    }
    return d;
}

struct Files {
    YAML::Node cases = YAML::LoadFile(kDir + "cases.yaml");
    YAML::Node cal = YAML::LoadFile(kDir + "data/h200-calibration.json");
    YAML::Node kern = YAML::LoadFile(kDir + "data/h200-kernels.json");
};

int count_source(const YAML::Node& cases, const std::string& prefix) {
    int n = 0;
    for (const auto& c : cases["cases"])
        n += c["source"].as<std::string>().starts_with(prefix);
    return n;
}

}  // namespace

TEST_CASE("yaml-cpp reads the JSON data files") {
    const Files f;
    // h200-calibration.json's first GEMM row: 8192^3 in 1.4547680020332336 ms.
    CHECK(f.cal["gemm_bf16"]["rows"][0]["ms"].as<double>() == 1.4547680020332336);
    CHECK(f.kern["sustained_throughput"]["window_s"].as<double>() == 0.25);
    CHECK(f.kern["sustained_throughput"]["gemm_8192_cubed_tflops_per_window"].size() == 47);
}

TEST_CASE("every H200 number in cases.yaml equals the data file's, to 1e-6 relative") {
    const Files f;
    const Drift d = drift(f.cases, f.cal, f.kern);
    for (const auto& p : d.problems)
        FAIL_CHECK(p);
    // Every case naming the data is checked: 13 GEMMs, 10 layer passes, 20 NCCL rows and the
    // sustained family at least.
    CHECK(d.checked == count_source(f.cases, "H200-CAL") + count_source(f.cases, "H200-KERN"));
    CHECK(count_source(f.cases, "H200-CAL gemm_bf16") >= 13);
    CHECK(count_source(f.cases, "H200-CAL transformer_layer_bf16") >= 10);
    CHECK(count_source(f.cases, "H200-CAL nccl_two_gpus") >= 20);
    CHECK(count_source(f.cases, "H200-KERN sustained_throughput") >= 3);
}

TEST_CASE("a published value moved by 1e-5 relative, or a row with no data, is caught") {
    const Files f;
    for (const char* id : {"gemm-1024x1024x1024", "layer-h8192-s2048-b1-bac", "nccl2-send-64MiB",
                           "sustained-add-inplace-1GiB"}) {
        CAPTURE(id);
        YAML::Node cases = YAML::Clone(f.cases);
        for (auto c : cases["cases"])
            if (c["id"].as<std::string>() == id)
                c["published"] = c["published"].as<double>() * (1 + 1e-5);
        const Drift d = drift(cases, f.cal, f.kern);
        REQUIRE(d.problems.size() == 1);
        CHECK(d.problems[0].starts_with(std::string(id) + ": published"));
    }
    YAML::Node cases = YAML::Clone(f.cases);
    for (auto c : cases["cases"])
        if (c["id"].as<std::string>() == "gemm-512x512x512") c["gemm"]["m"] = 513;
    const Drift d = drift(cases, f.cal, f.kern);
    REQUIRE(d.problems.size() == 1);
    CHECK(d.problems[0] == "gemm-512x512x512: no row of the data files matches its inputs");
}

namespace {

// The FA22 cases (family attention-a100) against tests/validation/data/a100-attention.json: the
// case id "attn-a100-<impl>-<fwd|bwd>-s<seq>" names the row; the cases are the dropout tables.
std::vector<std::string> fa22_drift(const YAML::Node& cases, const YAML::Node& data) {
    std::vector<std::string> problems;
    const auto& seqs = data["seq_lengths"];
    for (const auto& c : cases["cases"]) {
        if (!c["source"].as<std::string>().starts_with("FA22")) continue;
        const auto id = c["id"].as<std::string>();
        // attn-a100-megatron-fwd-s2048 -> megatron, fwd, 2048
        const auto rest = id.substr(std::string("attn-a100-").size());
        const auto dash = rest.find('-');
        const auto impl = rest.substr(0, dash);
        const auto pass = rest.substr(dash + 1, 3) == "fwd" ? "forward" : "backward";
        const auto seq = std::stoll(rest.substr(rest.rfind("-s") + 2));
        std::optional<double> value;
        for (std::size_t i = 0; i < seqs.size(); ++i) {
            const auto& v = data["ms"]["dropout"][pass][impl][i];
            if (seqs[i].as<std::int64_t>() == seq && v && !v.IsNull()) value = v.as<double>();
        }
        if (!value) {
            problems.push_back(id + ": no row of a100-attention.json matches");
            continue;
        }
        if (std::fabs(c["published"].as<double>() / *value - 1) > 1e-9)
            problems.push_back(id + ": published differs from a100-attention.json");
        if (c["set"][0].as<std::string>() != "training.seq_length=" + std::to_string(seq))
            problems.push_back(id + ": runs another sequence length than its id");
    }
    return problems;
}

}  // namespace

TEST_CASE("every FA22 attention number in cases.yaml equals a100-attention.json's") {
    const YAML::Node cases = YAML::LoadFile(kDir + "cases.yaml");
    const YAML::Node data = YAML::LoadFile(kDir + "data/a100-attention.json");
    // The fit row: Megatron's forward at s = 2048 with dropout, 6.56 ms (Table 15).
    CHECK(data["ms"]["dropout"]["forward"]["megatron"][4].as<double>() == 6.56);
    for (const auto& p : fa22_drift(cases, data))
        FAIL_CHECK(p);
    CHECK(count_source(cases, "FA22") >= 14);
    // A moved value is caught.
    YAML::Node moved = YAML::Clone(cases);
    for (auto c : moved["cases"])
        if (c["id"].as<std::string>() == "attn-a100-pytorch-bwd-s4096") c["published"] = 41.68;
    const auto problems = fa22_drift(moved, data);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "attn-a100-pytorch-bwd-s4096: published differs from a100-attention.json");
}
