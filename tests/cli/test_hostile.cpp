// The command line under hostile use (a new user's audit): outputs that name an input, options
// whose errors named the wrong source, options that were ignored without a word. Each case
// checks exit code 2, the message (which names the option or --set argument at fault) and that
// nothing was written or replaced.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support.hpp"

namespace fs = std::filesystem;
using cs::test::kPipeline;
using cs::test::kProfile;
using cs::test::kRoot;
using cs::test::kTwoGpus;
using cs::test::run_binary;
using cs::test::slurp;

namespace {

bool has(const cs::test::CliResult& r, const std::string& text) {
    return r.err.find(text) != std::string::npos;
}

// An experiment and its topology copied into `dir`, so that a defect cannot damage the bundled
// files; returns {experiment, topology}.
std::pair<std::string, std::string> private_copies(const fs::path& dir) {
    fs::copy_file(kTwoGpus, dir / "topo.yaml");
    std::string text = slurp(kProfile);
    const std::string from = "../topologies/h200-2gpu-nvlink.yaml";
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), "topo.yaml");
    std::ofstream(dir / "exp.yaml") << text;
    return {(dir / "exp.yaml").string(), (dir / "topo.yaml").string()};
}
}  // namespace

TEST_CASE("an output that is an input of the command is refused and the input kept") {
    const fs::path dir = cs::test::scratch("hostile_inputs");
    const auto paths = private_copies(dir);
    const std::string exp = paths.first, topo = paths.second;
    const std::string exp_text = slurp(exp), topo_text = slurp(topo);
    const auto refused = [&](const std::vector<std::string>& args, const std::string& message) {
        const auto r = run_binary(args);
        CHECK(r.status == 2);
        CHECK_MESSAGE(has(r, message), r.err);
        CHECK(slurp(exp) == exp_text);
        CHECK(slurp(topo) == topo_text);
    };
    refused({"run", exp, "--json", exp}, "--json " + exp + ": is the experiment " + exp);
    refused({"run", exp, "--json", topo}, "--json " + topo + ": is the topology");
    refused({"compare", exp, "--schedules", "gpipe,1f1b", "--svg", exp},
            "--svg " + exp + ": is the experiment");
    refused({"sweep", exp, "--vary", "schedule=gpipe,1f1b", "--json", topo},
            "--json " + topo + ": is the topology");
    refused({"sweep", exp, "--vary", "schedule=gpipe,1f1b", "--html", exp},
            "--html " + exp + ": is the experiment");
    refused({"topology", topo, "--dot", topo}, "--dot " + topo + ": is the topology");
    refused({"collective", "--topology", topo, "--ranks", "0-1", "--json", topo},
            "--json " + topo + ": is --topology");
    // A hard link or a symbolic link to the experiment is the same file.
    fs::create_hard_link(exp, dir / "hard.json");
    refused({"run", exp, "--json", (dir / "hard.json").string()}, "is the experiment " + exp);
    fs::create_symlink("exp.yaml", dir / "soft.json");
    refused({"run", exp, "--json", (dir / "soft.json").string()}, "is the experiment " + exp);
    // --megatron-args @FILE.
    std::ofstream(dir / "args.txt") << "--tensor-model-parallel-size 1\n";
    const std::string args = (dir / "args.txt").string();
    const auto m = run_binary({"run", exp, "--megatron-args", "@" + args, "--json", args});
    CHECK(m.status == 2);
    CHECK(has(m, "is --megatron-args " + args));
    CHECK(slurp(dir / "args.txt") == "--tensor-model-parallel-size 1\n");
}

TEST_CASE("chakra run, diff and calibrate refuse to write over the files they read") {
    const fs::path dir = cs::test::scratch("hostile_inputs2");
    const auto paths = private_copies(dir);
    const std::string exp = paths.first, topo = paths.second;
    // chakra export into a folder beside the experiment: writes ETs, not the experiment.
    const fs::path ets = dir / "ets";
    fs::create_directories(ets);
    REQUIRE(run_binary({"chakra", "export", exp, "--out", ets.string()}).status == 0);
    const std::string groups = (ets / "comm_groups.json").string();
    const std::string groups_text = slurp(groups);
    const auto c =
        run_binary({"chakra", "run", ets.string(), "--topology", topo, "--json", groups});
    CHECK(c.status == 2);
    CHECK(has(c, "--json " + groups + ": is the Chakra folder's file"));
    CHECK(slurp(groups) == groups_text);
    // diff: the simulated trace as its own --json.
    const std::string trace = (dir / "sim.json").string();
    REQUIRE(run_binary({"run", exp, "--trace", trace}).status == 0);
    const std::string trace_text = slurp(trace);
    const auto d = run_binary({"diff", trace, trace, "--json", trace});
    CHECK(d.status == 2);
    CHECK(has(d, "--json " + trace + ": is the simulated trace"));
    CHECK(slurp(trace) == trace_text);
    // calibrate: the nccl-tests file as --out, also in the OP=FILE form.
    const std::string nccl = (dir / "ar.txt").string();
    fs::copy_file(kRoot + "/tests/api/data/all_reduce_perf-8xH100-composed.txt", nccl);
    const std::string nccl_text = slurp(nccl);
    for (const std::string& given : {nccl, "all_reduce=" + nccl}) {
        const auto k =
            run_binary({"calibrate", "--nccl-tests", given, "--topology", topo, "--out", nccl});
        CHECK(k.status == 2);
        CHECK(has(k, "--out " + nccl + ": is --nccl-tests " + nccl));
        CHECK(slurp(nccl) == nccl_text);
    }
}

TEST_CASE("--set errors name the --set argument, also for keys and mappings it created") {
    // `traning` is created by the override (a typo of training): the message names the
    // argument, not the experiment file without a position.
    const auto r = run_binary({"run", kProfile, "--set", "traning.seq_length=10"});
    CHECK(r.status == 2);
    CHECK_MESSAGE(has(r, "error: --set traning.seq_length=10: unknown key 'traning'"), r.err);
    // A mapping given whole: its keys' positions are in the argument, not in the file.
    const auto m = run_binary({"run", kProfile, "--set", "model={a: 1}"});
    CHECK(m.status == 2);
    CHECK_MESSAGE(has(m, "error: --set model={a: 1}: unknown key 'model.a'"), m.err);
    const auto v = run_binary({"run", kProfile, "--set", "training={seq_length: x}"});
    CHECK(v.status == 2);
    CHECK_MESSAGE(has(v, "error: --set training={seq_length: x}: 'training."), v.err);
    // topology --set with the experiment's prefix: names the argument.
    const auto t = run_binary(
        {"topology", kRoot + "/topologies/dgx-h100-superpod.yaml", "--set", "topology.nodes=4"});
    CHECK(t.status == 2);
    CHECK_MESSAGE(has(t, "error: --set topology.nodes=4: unknown key 'topology'"), t.err);
}

TEST_CASE("--schedule: an unknown or unfit schedule names the option, not the file") {
    const auto r = run_binary({"run", kProfile, "--schedule", "1fib"});
    CHECK(r.status == 2);
    CHECK_MESSAGE(has(r, "error: --schedule 1fib: unknown schedule \"1fib\""), r.err);
    // DualPipe needs the microbatches to be even and at least 2 pp = 4: 3 are refused.
    const auto d = run_binary(
        {"run", kProfile, "--schedule", "dualpipe", "--set", "training.global_batch_size=3"});
    CHECK(d.status == 2);
    CHECK_MESSAGE(has(d, "error: --schedule dualpipe: schedule 'dualpipe'"), d.err);
    const fs::path dir = cs::test::scratch("hostile_schedule");
    const auto e =
        run_binary({"chakra", "export", kProfile, "--schedule", "1fib", "--out", dir.string()});
    CHECK(e.status == 2);
    CHECK_MESSAGE(has(e, "error: --schedule 1fib: unknown schedule"), e.err);
    CHECK(fs::is_empty(dir));
}

TEST_CASE("options that would be ignored are refused") {
    // The sweep applies --vary after --set: the --set value would never be used.
    const auto s = run_binary(
        {"sweep", kProfile, "--vary", "parallelism.tp=1,2", "--set", "parallelism.tp=2"});
    CHECK(s.status == 2);
    CHECK_MESSAGE(
        has(s, "error: --set parallelism.tp=2: 'parallelism.tp' is also varied by --vary"), s.err);
    CHECK(s.out.empty());
    // Trace options without a trace.
    const auto r = run_binary({"run", kProfile, "--trace-ranks", "0"});
    CHECK(r.status == 2);
    CHECK_MESSAGE(has(r, "error: --trace-ranks 0: chooses the GPUs of a trace"), r.err);
    const auto l = run_binary({"run", kProfile, "--trace-links", "all"});
    CHECK(l.status == 2);
    CHECK_MESSAGE(has(l, "error: --trace-links all: chooses the link counters of a trace"), l.err);
}

TEST_CASE("plan --global-batch: a bad list names the option and writes nothing") {
    const fs::path dir = cs::test::scratch("hostile_plan_batch");
    const std::string json = (dir / "plan.json").string();
    const auto r = run_binary({"plan", kRoot + "/tests/api/data/plan-small.yaml", "--global-batch",
                               "32..16", "--json", json});
    CHECK(r.status == 2);
    CHECK_MESSAGE(has(r,
                      "error: --global-batch 32..16: '32..16': the range ends below its start; "
                      "expected sizes N, ranges MIN..MAX"),
                  r.err);
    CHECK(r.out.empty());
    CHECK(fs::is_empty(dir));
}

TEST_CASE("collective: a bad -f is named as given; a folder given as a trace says so") {
    const auto f = run_binary({"collective", "--topology", kTwoGpus, "--ranks", "0-1", "-b", "8",
                               "-e", "8G", "-f", "0.5"});
    CHECK(f.status == 2);
    CHECK_MESSAGE(has(f, "error: -b 8 -e 8G -f 0.5: the step factor must be"), f.err);
    const fs::path dir = cs::test::scratch("hostile_folder");
    const auto c = run_binary({"calibrate", "--torch-trace", dir.string(), "--gpu-model", "H100",
                               "--out", (dir / "c.yaml").string()});
    CHECK(c.status == 2);
    const std::string folder = dir.string();
    CHECK_MESSAGE(has(c, "error: " + folder + ": is a directory, expected a PyTorch"), c.err);
    const auto missing = run_binary({"calibrate", "--torch-trace", (dir / "none.json").string(),
                                     "--gpu-model", "H100", "--out", (dir / "c.yaml").string()});
    CHECK(missing.status == 2);
    CHECK(has(missing, (dir / "none.json").string() + ": no such file"));
    CHECK(fs::is_empty(dir));
}

TEST_CASE("validate: --write-doc may not replace a validation input; --only must match a case") {
    // A copy of the validation folder: refused before any case runs, the copy untouched.
    const fs::path dir = cs::test::scratch("hostile_validate");
    fs::copy(kRoot + "/tests/validation", dir / "validation", fs::copy_options::recursive);
    const std::string cases = (dir / "validation" / "cases.yaml").string();
    const std::string text = slurp(cases);
    const auto w = run_binary({"validate", (dir / "validation").string(), "--write-doc", cases});
    CHECK(w.status == 2);
    CHECK_MESSAGE(has(w, "--write-doc " + cases + ": is the validation input " + cases), w.err);
    CHECK(w.out.empty());
    CHECK(slurp(cases) == text);
    // No case id contains the text: an error, not an empty table.
    const auto o = run_binary({"validate", "--only", "no-such-case-id"});
    CHECK(o.status == 2);
    CHECK_MESSAGE(has(o, "error: --only no-such-case-id: no case id contains"), o.err);
}

TEST_CASE("a jobs file: neither it nor a job's experiment or topology may be an output") {
    const fs::path dir = cs::test::scratch("hostile_jobs");
    fs::copy(kRoot + "/workloads", dir / "workloads", fs::copy_options::recursive);
    fs::copy(kRoot + "/topologies", dir / "topologies", fs::copy_options::recursive);
    const std::string jobs = (dir / "workloads" / "two-jobs.yaml").string();
    const std::string job = (dir / "workloads" / "jobs" / "dp-gpt-1b.yaml").string();
    const std::string jobs_text = slurp(jobs), job_text = slurp(job);
    const auto a = run_binary({"run", jobs, "--json", jobs});
    CHECK(a.status == 2);
    CHECK_MESSAGE(has(a, "--json " + jobs + ": is the jobs file"), a.err);
    const auto b = run_binary({"run", jobs, "--json", job});
    CHECK(b.status == 2);
    CHECK_MESSAGE(has(b, "--json " + job + ": is the experiment"), b.err);
    CHECK(slurp(jobs) == jobs_text);
    CHECK(slurp(job) == job_text);
}

TEST_CASE("run <(cat FILE): a jobs file through a pipe runs as a jobs file (issue 40)") {
    // The run reads a stream once and decides from its text (api::read_streamed_input); before,
    // is_jobs_file left streams unread and the experiment loader refused the jobs file's keys.
    // The paths inside are absolute: relative ones would resolve against /dev/fd.
    const fs::path dir = cs::test::scratch("jobs_pipe");
    const std::string jobs = (dir / "jobs.yaml").string();
    const std::string job = kRoot + "/workloads/jobs/dp-gpt-1b.yaml";
    std::ofstream(jobs) << "name: piped\ntopology: " << kRoot
                        << "/topologies/h100-4node-oversubscribed.yaml\njobs:\n"
                        << "  - {name: job-a, experiment: " << job
                        << ", placement: {nodes: \"0,2\"}}\n"
                        << "  - {name: job-b, experiment: " << job
                        << ", placement: {nodes: \"1,3\"}}\n";
    const auto piped = [](const std::string& file) {
        // bash for the process substitution; stderr joins stdout.
        const std::string cmd =
            "bash -c " +
            cs::test::shell_quote(cs::test::shell_quote(CLUSTERSIM_BIN) + " run <(cat " +
                                  cs::test::shell_quote(file) + ")") +
            " 2>&1";
        std::string out;
        FILE* pipe = ::popen(cmd.c_str(), "r");
        REQUIRE(pipe);
        char buf[4096];
        for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;)
            out.append(buf, n);
        const int raw = ::pclose(pipe);
        return std::make_pair(WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, out);
    };
    const auto [status, out] = piped(jobs);
    CHECK_MESSAGE(status == 0, out);
    // The jobs' table, as the file itself gives it, under the pipe's name.
    const auto direct = run_binary({"run", jobs});
    REQUIRE(direct.status == 0);
    CHECK(out.rfind("jobs file             /dev/fd/", 0) == 0);
    CHECK(out.substr(out.find('\n')) == direct.out.substr(direct.out.find('\n')));
    // An experiment through a pipe still runs as one (its topology absolute, for the same reason).
    const std::string experiment = (dir / "experiment.yaml").string();
    std::string text = cs::test::slurp(kPipeline);
    const std::string relative = "topology: ../topologies/h200-2gpu-nvlink.yaml";
    REQUIRE(text.find(relative) != std::string::npos);
    text.replace(text.find(relative), relative.size(), "topology: " + kTwoGpus);
    std::ofstream(experiment) << text;
    const auto e = piped(experiment);
    CHECK_MESSAGE(e.first == 0, e.second);
}

TEST_CASE("validate: a file given as the folder is named as such") {
    const auto r = run_binary({"validate", kProfile});
    CHECK(r.status == 2);
    CHECK_MESSAGE(
        has(r, "error: " + kProfile + ": not a folder: expected a folder holding cases.yaml"),
        r.err);
}

TEST_CASE("an output option given an empty path is refused, not skipped") {
    // `--json "$UNSET"` used to run and write nothing.
    for (const std::string option : {"--json", "--trace", "--html", "--summary"}) {
        const auto r = run_binary({"run", kProfile, option, ""});
        CHECK(r.status == 2);
        CHECK_MESSAGE(has(r, option + ": expected a file name, found an empty path"), r.err);
        CHECK(r.out.empty());
    }
    const auto t = run_binary({"topology", kTwoGpus, "--dot", ""});
    CHECK(t.status == 2);
    CHECK(has(t, "--dot: expected a file name, found an empty path"));
}

TEST_CASE("compare says once that schedules without virtual stages ignore vpp") {
    const auto r = run_binary({"compare", kProfile, "--schedules", "gpipe,1f1b,interleaved",
                               "--set", "parallelism.vpp=2"});
    REQUIRE(r.status == 0);
    CHECK(r.out.find("note: vpp=2 is ignored by schedules without virtual stages (gpipe, 1f1b)") !=
          std::string::npos);
    CHECK_MESSAGE(r.err.find("has no virtual stages") == std::string::npos, r.err);
}

TEST_CASE("an experiment in UTF-16 or with binary bytes is named as such") {
    const fs::path dir = cs::test::scratch("hostile_encoding");
    // "topology: x" in UTF-16 LE with its byte-order mark, as some Windows editors save it.
    std::string utf16 = "\xff\xfe";
    for (char c : std::string("topology: x\n"))
        utf16.append({c, '\0'});
    std::ofstream(dir / "utf16.yaml", std::ios::binary) << utf16;
    const auto u = run_binary({"run", (dir / "utf16.yaml").string()});
    CHECK(u.status == 2);
    CHECK_MESSAGE(has(u, "utf16.yaml:1:1: is UTF-16 text; expected a YAML text file in UTF-8"),
                  u.err);
    std::ofstream(dir / "nul.yaml", std::ios::binary) << std::string("topology: a\0b\n", 14);
    const auto n = run_binary({"run", (dir / "nul.yaml").string()});
    CHECK(n.status == 2);
    CHECK_MESSAGE(has(n, "nul.yaml:1:1: holds NUL bytes"), n.err);
}

TEST_CASE("an experiment given where a topology is expected is named as such") {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"topology", kProfile},
          std::vector<std::string>{"collective", "--topology", kProfile, "--ranks", "0-1"}}) {
        const auto r = run_binary(args);
        CHECK(r.status == 2);
        CHECK_MESSAGE(has(r,
                          "has a 'topology' key: this is an experiment or jobs file, not a "
                          "topology; give the topology file it names"),
                      r.err);
    }
}

TEST_CASE("the experiment's compute.calibration file is an input too") {
    const fs::path dir = cs::test::scratch("hostile_calibration");
    const std::string cal = (dir / "cal.yaml").string();
    fs::copy_file(kRoot + "/tests/validation/calibrations/h200-gpt-h3072.yaml", cal);
    const std::string text = slurp(cal);
    const auto r = run_binary({"run", kRoot + "/tests/validation/experiments/h200-gpt-h3072.yaml",
                               "--set", "compute.calibration=" + cal, "--json", cal});
    CHECK(r.status == 2);
    CHECK_MESSAGE(has(r, "--json " + cal + ": is the compute calibration"), r.err);
    CHECK(slurp(cal) == text);
}

TEST_CASE("compare: a schedule that does not fit names --schedules, not the file") {
    // DualPipe needs an even number of microbatches, at least 2 pp = 4: 3 are refused.
    const auto r = run_binary({"compare", kProfile, "--schedules", "1f1b,dualpipe", "--set",
                               "training.global_batch_size=3"});
    CHECK(r.status == 2);
    CHECK_MESSAGE(has(r, "error: --schedules 1f1b,dualpipe: schedule 'dualpipe'"), r.err);
}

namespace {

// A model file (`model: {from: FILE}`) and a network calibration (`network: {calibration:
// FILE}`, the layout `clustersim calibrate --nccl-tests` writes) in `dir`: model.yaml, net.yaml.
std::pair<std::string, std::string> model_and_network_calibration(const fs::path& dir) {
    const std::string model = (dir / "model.yaml").string();
    const std::string cal = (dir / "net.yaml").string();
    std::ofstream(model) << "layers: 8\nhidden_size: 2048\nattention_heads: 16\nvocab_size: "
                            "50304\n";
    std::ofstream(cal) << "clustersim_calibration: 2\nsources:\n  - \"test\"\nnetwork:\n"
                          "  all_reduce:\n    nvlink: {efficiency: 0.8, latency: 20us}\n";
    return {model, cal};
}

}  // namespace

TEST_CASE("the experiment's model file and network calibration file are inputs too") {
    const fs::path dir = cs::test::scratch("hostile_model_network");
    const auto paths = private_copies(dir);
    const std::string exp = paths.first;
    // A model file and a network calibration, both beside the experiment.
    const auto [model, cal] = model_and_network_calibration(dir);
    const std::string model_text = slurp(model), cal_text = slurp(cal);
    const std::vector<std::string> sets = {"--set", "model.from=model.yaml", "--set",
                                           "network.calibration=net.yaml"};
    auto args = [&](const std::string& out) {
        std::vector<std::string> a = {"run", exp, "--json", out};
        a.insert(a.end(), sets.begin(), sets.end());
        return a;
    };
    // The files are accepted as inputs: the run writes its summary elsewhere.
    const auto ok = run_binary(args((dir / "out.json").string()));
    REQUIRE_MESSAGE(ok.status == 0, ok.err);
    auto r = run_binary(args(model));
    CHECK(r.status == 2);
    CHECK_MESSAGE(has(r, "--json " + model + ": is the model file"), r.err);
    r = run_binary(args(cal));
    CHECK(r.status == 2);
    CHECK_MESSAGE(has(r, "--json " + cal + ": is the network calibration"), r.err);
    CHECK(slurp(model) == model_text);
    CHECK(slurp(cal) == cal_text);
}

TEST_CASE("sweep: a combination's model and calibration files are inputs too") {
    // The sweep checks each combination's own inputs as it is loaded (a varied key may change
    // them), so `--json` (or `--html`) naming the model file or the network calibration is
    // refused with exit 2 and the file left as it was; a path elsewhere is accepted.
    const fs::path dir = cs::test::scratch("hostile_sweep_inputs");
    const auto paths = private_copies(dir);
    const auto [model, cal] = model_and_network_calibration(dir);
    const std::string model_text = slurp(model), cal_text = slurp(cal);
    auto args = [&](const std::string& option, const std::string& out) {
        return std::vector<std::string>{"sweep",  paths.first,
                                        "--vary", "schedule=1f1b,gpipe",
                                        "--set",  "model.from=model.yaml",
                                        "--set",  "network.calibration=net.yaml",
                                        option,   out};
    };
    const auto ok = run_binary(args("--json", (dir / "out.json").string()));
    REQUIRE_MESSAGE(ok.status == 0, ok.err);
    for (const std::string option : {"--json", "--html"}) {
        CAPTURE(option);
        auto r = run_binary(args(option, model));
        CHECK(r.status == 2);
        CHECK_MESSAGE(has(r, option + " " + model + ": is the model file"), r.err);
        r = run_binary(args(option, cal));
        CHECK(r.status == 2);
        CHECK_MESSAGE(has(r, option + " " + cal + ": is the network calibration"), r.err);
    }
    CHECK(slurp(model) == model_text);
    CHECK(slurp(cal) == cal_text);
}
