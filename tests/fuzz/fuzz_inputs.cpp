// The fuzz driver of issue #20: feeds inputs to the experiment, topology and model loaders and to
// the --set and --megatron-args parsers, in process, and fails on anything but success or a clean
// located user error (ConfigError). Built with the normal build, so that ctest replays the
// committed corpus (tests/fuzz/corpus) on every run, sanitizer builds included.
//
//   fuzz_inputs replay DIR...              every input in the folders, sorted by name
//   fuzz_inputs mutate SEEDS OUT N SEED    N deterministic mutations of the inputs in SEEDS;
//                                          keeps in OUT each one whose outcome is new
//
// An input's target is its extension: .exp.yaml an experiment, .topo.yaml a topology, .model.yaml
// a model file (model: {from: FILE} in tests/fuzz/base.yaml), .set one --set assignment per line
// and .margs Megatron-LM flags, both applied to base.yaml; .nccl.txt nccl-tests output (read, and
// fitted on the two-GPU topology when it has at most two ranks and 40 rows); .jobs.yaml a jobs
// file (several jobs on one topology, run when small). Issue 40's readers: .torch.json a PyTorch
// profiler trace (read, fitted on the H200 when small, its calibration file read back); .sim.json
// a simulated trace given to diff against tests/fuzz/measured.json; .et a Chakra ET file (rank 0
// of a two-rank folder, run on two GPUs when small); .name.txt a name embedded in the HTML report
// (its script element must hold no '<', '>', '&' or raw U+2028/9, and parse as JSON).
// Variability, faults and goodput are experiment sections (.exp.yaml seeds). A valid experiment is
// also simulated when it is small (kMaxPasses). A crash ends the process: `mutate` writes the input
// it is about to try to OUT/current first, so that the crashing input is kept.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "chakra/program.hpp"
#include "config/document.hpp"
#include "core/errors.hpp"
#include "fit/calibrate.hpp"
#include "fit/calibrate_network.hpp"
#include "fit/diff.hpp"
#include "ingest/inputs.hpp"
#include "ingest/nccl_tests.hpp"
#include "ingest/topology.hpp"
#include "ingest/torch_trace.hpp"
#include "report/html_report.hpp"
#include "session/chakra.hpp"
#include "session/jobs.hpp"
#include "session/run.hpp"
#include "topology/summary.hpp"
#include "topology/topology_yaml.hpp"
#include "workload/calibration.hpp"

#ifndef CLUSTERSIM_SOURCE_DIR
#define CLUSTERSIM_SOURCE_DIR "."
#endif

namespace fs = std::filesystem;

namespace {

// Fuzzed runs must stay small: a memory limit far below the default (the estimate refuses
// what is larger, which is itself under test) and no simulation beyond this many passes.
constexpr std::int64_t kFuzzMaxMemory = std::int64_t{512} << 20;
constexpr double kMaxPasses = 20'000;

// The extensions that name an input's target.
constexpr const char* kTargets[] = {".exp.yaml", ".topo.yaml", ".model.yaml", ".set",
                                    ".margs",    ".nccl.txt",  ".jobs.yaml",  ".torch.json",
                                    ".sim.json", ".et",        ".name.txt"};

const fs::path kBase = fs::path(CLUSTERSIM_SOURCE_DIR) / "tests" / "fuzz" / "base.yaml";
const fs::path kTwoGpus = fs::path(CLUSTERSIM_SOURCE_DIR) / "topologies" / "h200-2gpu-nvlink.yaml";
const fs::path kFuzzDir = fs::path(CLUSTERSIM_SOURCE_DIR) / "tests" / "fuzz";
const fs::path kMeasured = kFuzzDir / "measured.json";

std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void run_if_small(const cs::workload::ExperimentSpec& spec) {
    const auto& l = spec.layout;
    const double passes =
        static_cast<double>(l.pp) * l.dp * spec.training.microbatches(l) * std::max(1, l.vpp) * 3;
    if (passes > kMaxPasses || spec.cluster->gpu_count() > 4096) return;
    cs::api::RunOptions options;
    options.max_memory = kFuzzMaxMemory;
    cs::api::run(spec, options);
}

// The HTML report with `name` as its experiment's name: its data element must hold none of the
// characters that end or confuse a script element, and parse as JSON (bytes that are not UTF-8
// become U+FFFD).
void check_html_name(const std::string& name) {
    cs::report::HtmlReport page;
    page.title = "fuzz";
    page.experiment = name;
    std::ostringstream out;
    cs::report::write_html_report(out, page);
    const std::string html = out.str();
    const std::string open = "<script type=\"application/json\" id=\"data\">";
    const auto start = html.find(open) + open.size();
    const std::string data = html.substr(start, html.find("</script>", start) - start);
    if (data.find_first_of("<>&") != std::string::npos ||
        data.find("\xe2\x80\xa8") != std::string::npos ||
        data.find("\xe2\x80\xa9") != std::string::npos ||
        !nlohmann::json::parse(data)["experiment"].is_string())
        throw std::runtime_error("the HTML report's data element does not hold the name safely");
}

// What happened: "ok", or the error message with its digits blanked (so that the same error on
// other numbers counts once); throws (after printing) on anything but a ConfigError.
std::string attempt(const fs::path& file) {
    const std::string name = file.filename().string();
    try {
        if (ends_with(name, ".exp.yaml")) {
            run_if_small(cs::workload::load_experiment(file, {}, kFuzzMaxMemory));
        } else if (ends_with(name, ".jobs.yaml")) {
            // A jobs file (api/jobs.hpp): loaded, and run when every job is small.
            const auto spec = cs::api::load_jobs(file, kFuzzMaxMemory);
            double passes = 0;
            for (const auto& job : spec.jobs) {
                const auto& l = job.experiment.layout;
                passes += static_cast<double>(l.pp) * l.dp *
                          job.experiment.training.microbatches(l) * std::max(1, l.vpp) * 3;
            }
            if (passes <= kMaxPasses && spec.cluster->gpu_count() <= 4096) {
                cs::api::JobsOptions options;
                options.max_memory = kFuzzMaxMemory;
                cs::api::run_jobs(spec, options);
            }
        } else if (ends_with(name, ".topo.yaml")) {
            const auto loaded = cs::api::load_topology(file, {}, kFuzzMaxMemory);
            if (loaded.cluster.gpu_count() <= 4096) cs::topology::summarize(loaded.cluster);
        } else if (ends_with(name, ".model.yaml")) {
            const std::string from = "model={from: \"" + fs::absolute(file).string() + "\"}";
            run_if_small(cs::workload::load_experiment(kBase, {from}, kFuzzMaxMemory));
        } else if (ends_with(name, ".set")) {
            std::vector<std::string> sets;
            std::istringstream lines(read(file));
            for (std::string line; std::getline(lines, line);)
                if (!line.empty()) sets.push_back(line);
            cs::api::ExperimentRequest request{kBase, sets, "", kFuzzMaxMemory};
            run_if_small(cs::api::load_experiment(request));
        } else if (ends_with(name, ".margs")) {
            cs::api::ExperimentRequest request{kBase, {}, read(file), kFuzzMaxMemory};
            if (request.megatron_args.empty()) return "empty";
            run_if_small(cs::api::load_experiment(request));
        } else if (ends_with(name, ".torch.json")) {
            // A profiler trace: read within the fuzz memory limit, fitted when small, and the
            // calibration file it gives read back (calibration_file_text checks that too).
            const auto t = cs::api::read_torch_trace(file, kFuzzMaxMemory);
            if (t.gpu.size() <= 20'000) {
                const auto r =
                    cs::api::calibrate_traces({t}, *cs::topology::find_catalog_model("H200"), {});
                cs::workload::parse_calibration(cs::config::parse_document(
                    cs::api::calibration_file_text(r), "fuzzed calibration"));
            }
        } else if (ends_with(name, ".sim.json")) {
            cs::api::DiffOptions options;
            options.simulated = file.string();
            options.measured = kMeasured.string();
            options.max_memory = kFuzzMaxMemory;
            cs::api::diff_json(cs::api::diff_traces(options));
        } else if (ends_with(name, ".et")) {
            // Rank 0 of a two-rank folder (in the temporary folder: replay must not write into
            // the corpus), rank 1 and the communicators the pipeline seed's
            // (tests/fuzz/et-rank1.et, et-comm_groups.json).
            const fs::path folder =
                fs::temp_directory_path() / ("clustersim-fuzz-et-" + std::to_string(::getpid()));
            fs::create_directories(folder);
            fs::copy_file(file, folder / "fuzz.0.et", fs::copy_options::overwrite_existing);
            fs::copy_file(kFuzzDir / "et-rank1.et", folder / "fuzz.1.et",
                          fs::copy_options::overwrite_existing);
            fs::copy_file(kFuzzDir / "et-comm_groups.json", folder / "comm_groups.json",
                          fs::copy_options::overwrite_existing);
            const auto program = cs::chakra::load_program(folder, kFuzzMaxMemory);
            if (program.nodes <= 20'000) {
                cs::api::ChakraRunRequest request;
                request.folder = folder;
                request.topology = kTwoGpus;
                request.max_memory = kFuzzMaxMemory;
                cs::api::chakra_run(request);
            }
        } else if (ends_with(name, ".name.txt")) {
            check_html_name(read(file));
        } else if (ends_with(name, ".nccl.txt")) {
            // nccl-tests output: read, and fitted on the two-GPU topology when it is small.
            const auto f = cs::api::read_nccl_tests(file.string());
            if (f.ranks <= 2 && f.rows.size() <= 40) {
                const auto topo = cs::api::load_topology(kTwoGpus, {}, kFuzzMaxMemory);
                cs::api::fit_network({f}, topo.cluster, "two-gpus", std::nullopt);
            }
        } else {
            return "skipped";
        }
        return "ok";
    } catch (const cs::ConfigError& e) {
        // A user error must say where: a file, an option or a --set argument.
        if (e.where().file.empty() || e.message().empty()) {
            std::fprintf(stderr, "%s: unlocated error: %s\n", file.string().c_str(), e.what());
            throw;
        }
        std::string shape = e.message().substr(0, 60);
        for (char& c : shape)
            if (c >= '0' && c <= '9') c = '#';
        return shape;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: not a user error: %s\n", file.string().c_str(), e.what());
        throw;
    }
}

std::vector<fs::path> inputs_in(const fs::path& dir) {
    std::vector<fs::path> out;
    for (const auto& entry : fs::directory_iterator(dir))
        if (entry.is_regular_file()) out.push_back(entry.path());
    std::sort(out.begin(), out.end());
    return out;
}

// ---- deterministic mutation ---------------------------------------------------------------

struct Rng {  // splitmix64
    std::uint64_t s;
    std::uint64_t next() {
        std::uint64_t z = (s += 0x9e3779b97f4a7c15);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
        z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
        return z ^ (z >> 31);
    }
    std::size_t below(std::size_t n) { return n == 0 ? 0 : next() % n; }
};

// Values a hostile user would try: limits of int32/int64, zero, negatives, non-finite numbers,
// huge and tiny quantities with units, YAML oddities.
const std::vector<std::string> kInteresting = {"0",
                                               "-1",
                                               "1",
                                               "2",
                                               "3",
                                               "7",
                                               "65536",
                                               "2147483647",
                                               "2147483648",
                                               "4294967297",
                                               "9223372036854775807",
                                               "9223372036854775808",
                                               "-9223372036854775808",
                                               "1e309",
                                               "1e-300",
                                               ".nan",
                                               ".inf",
                                               "-.inf",
                                               "0x10",
                                               "1.5",
                                               "~",
                                               "[]",
                                               "{}",
                                               "\"\"",
                                               "null",
                                               "true",
                                               "&a 1",
                                               "*a",
                                               "1e308TB/s",
                                               "0GB/s",
                                               "1e-30ns",
                                               "1e30s",
                                               "106d",
                                               "9e18B",
                                               "8000000TB",
                                               "1ps",
                                               "0ms",
                                               "1e300TFLOPS",
                                               "99999999",
                                               "100000000",
                                               "garbage",
                                               "fp8",
                                               "nvlink",
                                               "ring",
                                               "'",
                                               "\"",
                                               ":",
                                               "- ",
                                               "{a: 1, a: 2}",
                                               "--- 1",
                                               "!!binary AAAA",
                                               "<<: *a"};

// Megatron-LM flags, with and without values.
const std::vector<std::string> kFlags = {"--tensor-model-parallel-size",
                                         "--pipeline-model-parallel-size",
                                         "--num-layers",
                                         "--hidden-size",
                                         "--num-attention-heads",
                                         "--seq-length",
                                         "--micro-batch-size",
                                         "--global-batch-size",
                                         "--num-experts",
                                         "--moe-router-topk",
                                         "--recompute-method",
                                         "--position-embedding-type",
                                         "--fp8-format",
                                         "--normalization",
                                         "--attention-backend",
                                         "--num-layers-per-virtual-pipeline-stage",
                                         "--sequence-parallel",
                                         "--bf16",
                                         "--swiglu",
                                         "--context-parallel-size",
                                         "--expert-model-parallel-size",
                                         "--vocab-size",
                                         "--num-query-groups",
                                         "--group-query-attention",
                                         "--recompute-granularity",
                                         "--ffn-hidden-size"};

std::string mutate(std::string text, Rng& rng, bool megatron) {
    const int rounds = 1 + static_cast<int>(rng.below(3));
    for (int round = 0; round < rounds; ++round) {
        const std::size_t n = text.size();
        switch (rng.below(megatron ? 8 : 7)) {
            case 0: {  // replace a number or word by an interesting value
                std::vector<std::pair<std::size_t, std::size_t>> tokens;
                for (std::size_t i = 0; i < n;) {
                    if (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '.') {
                        std::size_t j = i;
                        while (j < n && (std::isalnum(static_cast<unsigned char>(text[j])) ||
                                         text[j] == '.' || text[j] == '/' || text[j] == '-'))
                            ++j;
                        tokens.emplace_back(i, j - i);
                        i = j;
                    } else {
                        ++i;
                    }
                }
                if (tokens.empty()) break;
                const auto [at, len] = tokens[rng.below(tokens.size())];
                text.replace(at, len, kInteresting[rng.below(kInteresting.size())]);
                break;
            }
            case 1:  // flip a byte
                if (n) text[rng.below(n)] = static_cast<char>(rng.next() & 0x7f);
                break;
            case 2: {  // delete a span
                if (!n) break;
                const std::size_t at = rng.below(n);
                text.erase(at, 1 + rng.below(std::min<std::size_t>(16, n - at)));
                break;
            }
            case 3: {  // duplicate a line
                std::vector<std::string> lines;
                std::istringstream in(text);
                for (std::string l; std::getline(in, l);)
                    lines.push_back(l);
                if (lines.empty()) break;
                const std::size_t i = rng.below(lines.size());
                lines.insert(lines.begin() + static_cast<long>(i), lines[i]);
                text.clear();
                for (const auto& l : lines)
                    text += l + "\n";
                break;
            }
            case 4:  // insert an interesting value anywhere
                text.insert(rng.below(n + 1), kInteresting[rng.below(kInteresting.size())]);
                break;
            case 5:  // insert a digit run (large numbers)
                text.insert(rng.below(n + 1), std::string(1 + rng.below(12), '9'));
                break;
            case 6: {  // swap two lines
                std::vector<std::string> lines;
                std::istringstream in(text);
                for (std::string l; std::getline(in, l);)
                    lines.push_back(l);
                if (lines.size() < 2) break;
                std::swap(lines[rng.below(lines.size())], lines[rng.below(lines.size())]);
                text.clear();
                for (const auto& l : lines)
                    text += l + "\n";
                break;
            }
            case 7:  // a Megatron-LM flag and a value
                text += " " + kFlags[rng.below(kFlags.size())] + " " +
                        kInteresting[rng.below(kInteresting.size())];
                break;
        }
    }
    return text;
}

int replay(const std::vector<fs::path>& dirs) {
    std::size_t count = 0, ok = 0;
    for (const auto& dir : dirs)
        for (const auto& file : inputs_in(dir)) {
            ++count;
            if (attempt(file) == "ok") ++ok;
        }
    std::printf("fuzz corpus: %zu inputs replayed, %zu valid, %zu clean user errors\n", count, ok,
                count - ok);
    return count == 0 ? 1 : 0;
}

int mutate_corpus(const fs::path& seeds, const fs::path& out, long iterations, std::uint64_t seed) {
    fs::create_directories(out);
    const auto inputs = inputs_in(seeds);
    if (inputs.empty()) return 1;
    std::set<std::string> seen;  // (target, outcome) pairs already kept
    Rng rng{seed};
    long kept = 0;
    for (long i = 0; i < iterations; ++i) {
        const fs::path& from = inputs[rng.below(inputs.size())];
        const std::string name = from.filename().string();
        std::string ext;
        for (const char* e : kTargets)
            if (ends_with(name, e)) ext = e;
        if (ext.empty()) continue;
        const std::string text = mutate(read(from), rng, ext == ".margs");
        // The candidate sits in OUT under its final name, so that relative paths in it resolve
        // as they would in the corpus folder, and a crash leaves it behind as `current`.
        const fs::path current = out / ("current" + ext);
        {
            std::ofstream f(current, std::ios::binary);
            f << text;
        }
        const std::string outcome = attempt(current);
        if (seen.insert(ext + " " + outcome).second) {
            char file[64];
            std::snprintf(file, sizeof file, "m%06ld", i);
            fs::rename(current, out / (file + ext));
            ++kept;
        }
    }
    for (const char* ext : kTargets)
        fs::remove(out / (std::string("current") + ext));
    std::printf("fuzz mutate: %ld executions, %ld kept (new outcomes), seed %llu\n", iterations,
                kept, static_cast<unsigned long long>(seed));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    spdlog::set_level(spdlog::level::off);
    const std::vector<std::string> args(argv + 1, argv + argc);
    // The .et target's folder (attempt), removed however the run ends but a crash.
    struct RemoveEtFolder {
        ~RemoveEtFolder() {
            std::error_code ec;
            fs::remove_all(
                fs::temp_directory_path(ec) / ("clustersim-fuzz-et-" + std::to_string(::getpid())),
                ec);
        }
    } remove_et_folder;
    try {
        if (args.size() >= 2 && args[0] == "replay")
            return replay(std::vector<fs::path>(args.begin() + 1, args.end()));
        if (args.size() == 5 && args[0] == "mutate")
            return mutate_corpus(args[1], args[2], std::stol(args[3]), std::stoull(args[4]));
    } catch (const std::exception&) {
        return 1;  // attempt() printed the input and the error
    }
    std::fprintf(stderr,
                 "usage: fuzz_inputs replay DIR... | fuzz_inputs mutate SEEDS OUT N SEED\n");
    return 2;
}
