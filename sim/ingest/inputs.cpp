#include "ingest/inputs.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "config/document.hpp"
#include "core/errors.hpp"
#include "core/input_file.hpp"
#include "core/quantity.hpp"
#include "workload/megatron_args.hpp"

#ifndef CLUSTERSIM_SOURCE_DIR
#define CLUSTERSIM_SOURCE_DIR ""
#endif

namespace cs::api {

std::filesystem::path data_root() {
    namespace fs = std::filesystem;
    const auto has_default = [](const fs::path& p) {
        std::error_code ec;
        return fs::is_regular_file(p / "workloads" / "default.yaml", ec);
    };
    if (const char* env = std::getenv("CLUSTERSIM_DATA"); env && *env) {
        if (has_default(env)) return fs::path(env);
        throw ConfigError("CLUSTERSIM_DATA=" + std::string(env) +
                          " does not contain workloads/default.yaml");
    }
    char exe[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (fs::path p = fs::path(exe).parent_path(); !p.empty(); p = p.parent_path()) {
            if (has_default(p)) return p;
            if (has_default(p / "share" / "clustersim")) return p / "share" / "clustersim";
            if (p == p.root_path()) break;
        }
    }
    if (has_default(CLUSTERSIM_SOURCE_DIR)) return CLUSTERSIM_SOURCE_DIR;
    throw ConfigError(
        "cannot find the bundled workloads/default.yaml next to the executable or in the source "
        "tree; set CLUSTERSIM_DATA to the clustersim folder or name an experiment file");
}

std::filesystem::path default_experiment() {
    return data_root() / "workloads" / "default.yaml";
}

std::vector<int> parse_rank_list(const std::string& text, const std::string& option) {
    const SourceLocation where{option + " " + text};
    // Ranges are counted before they are expanded, so that 0-999999999 costs nothing.
    std::vector<std::pair<int, int>> ranges;
    std::int64_t total = 0;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        const std::size_t comma = text.find(',', pos);
        const std::string part =
            text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        const std::size_t dash = part.find('-');
        auto to_int = [&](const std::string& s) {
            if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 9)
                throw ConfigError(where,
                                  "expected GPU numbers like 0-7 or 0,2,4 or 0-3,8-11; "
                                  "cannot read \"" +
                                      s + "\"");
            return std::stoi(s);
        };
        if (dash == std::string::npos) {
            const int r = to_int(part);
            ranges.emplace_back(r, r);
        } else {
            const int a = to_int(part.substr(0, dash)), b = to_int(part.substr(dash + 1));
            if (b < a) throw ConfigError(where, "range " + part + " runs backwards");
            ranges.emplace_back(a, b);
        }
        total += ranges.back().second - ranges.back().first + 1;
        if (total > kMaxRankList)
            throw ConfigError(where, "more than " + std::to_string(kMaxRankList) +
                                         " GPUs; GPU numbers run from 0 to the topology's GPU "
                                         "count - 1");
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    std::vector<int> out;
    out.reserve(static_cast<std::size_t>(total));
    for (const auto& [a, b] : ranges)
        for (int r = a; r <= b; ++r)
            out.push_back(r);
    std::vector<int> sorted = out;
    std::sort(sorted.begin(), sorted.end());
    if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end())
        throw ConfigError(where,
                          "GPU " + std::to_string(*twice) + " is listed twice; list each GPU once");
    return out;
}

std::int64_t parse_max_memory(const std::string& text) {
    if (text.empty()) return topology::kDefaultMaxMemory;
    const auto b = parse_bytes(text);
    if (!b || b->value <= 0)
        throw ConfigError(SourceLocation{"--max-memory " + text},
                          std::string("expected a positive size with a unit: ") + kBytesUnits);
    return b->value;
}

namespace {

// collect_overrides, and in `derived_from` for each override a Megatron-LM flag gave one-to-one,
// the --set text a message would name and the flag ("--megatron-args --num-layers 3000000"), so
// that errors name what the user typed.
std::vector<std::string> overrides_from(const std::string& megatron_args,
                                        const std::vector<std::string>& sets,
                                        std::vector<std::string>& warnings,
                                        std::map<std::string, std::string>* derived_from) {
    std::vector<std::string> out;
    if (!megatron_args.empty()) {
        std::string text = megatron_args;
        if (text.front() == '@')
            text = read_input_file(text.substr(1), "--megatron-args " + text,
                                   "a file of Megatron-LM arguments");
        std::vector<std::string> unused;
        auto derived = workload::megatron_args_to_overrides(text, unused);
        for (const auto& w : unused)
            warnings.push_back("--megatron-args: " + w);
        bool layout_changed = false;
        for (const auto& d : derived)
            if (d.rfind("parallelism.", 0) == 0) layout_changed = true;
        if (layout_changed) out.push_back("parallelism.dp=~");
        out.insert(out.end(), derived.begin(), derived.end());
        if (derived_from)
            for (const auto& d : derived) {
                const auto eq = d.find('=');
                const std::string flag = workload::megatron_flag_of(d.substr(0, eq));
                if (!flag.empty())
                    (*derived_from)["--set " + d] =
                        "--megatron-args " + flag + " " + d.substr(eq + 1);
            }
    }
    out.insert(out.end(), sets.begin(), sets.end());
    return out;
}

}  // namespace

std::vector<std::string> collect_overrides(const std::string& megatron_args,
                                           const std::vector<std::string>& sets,
                                           std::vector<std::string>& warnings) {
    return overrides_from(megatron_args, sets, warnings, nullptr);
}

workload::ExperimentSpec load_experiment(const ExperimentRequest& request) {
    std::vector<std::string> warnings;
    std::map<std::string, std::string> derived_from;
    const auto overrides =
        overrides_from(request.megatron_args, request.sets, warnings, &derived_from);
    workload::ExperimentSpec spec;
    try {
        spec = request.text
                   ? workload::load_experiment(*request.text, overrides, request.max_memory)
                   : workload::load_experiment(
                         request.path.empty() ? default_experiment() : request.path, overrides,
                         request.max_memory);
    } catch (const ConfigError& e) {
        // A value a Megatron-LM flag gave (and no --set replaced): name the flag.
        const auto it = derived_from.find(e.where().file);
        if (it == derived_from.end() || std::find(request.sets.begin(), request.sets.end(),
                                                  e.where().file.substr(6)) != request.sets.end())
            throw;
        SourceLocation where = e.where();
        where.file = it->second;
        throw ConfigError(where, e.message());
    }
    spec.warnings.insert(spec.warnings.begin(), warnings.begin(), warnings.end());
    return spec;
}

std::optional<workload::ExperimentText> read_streamed_input(const std::filesystem::path& path) {
    if (path.empty()) return std::nullopt;
    std::error_code ec;
    const auto type = std::filesystem::status(path, ec).type();
    if (ec || type == std::filesystem::file_type::not_found ||
        type == std::filesystem::file_type::regular ||
        type == std::filesystem::file_type::directory)
        return std::nullopt;
    workload::ExperimentText streamed;
    streamed.display_path = path.string();
    streamed.text = read_input_file(path, streamed.display_path, "a YAML file");
    streamed.folder = config::document_folder(path);
    return streamed;
}

workload::ExperimentSpec load_experiment(const workload::ExperimentText& text,
                                         const std::vector<std::string>& sets) {
    return workload::load_experiment(text, sets);
}

void guard_experiment_inputs(const OutputSet& outputs, const workload::ExperimentSpec& spec,
                             const std::string& megatron_args) {
    outputs.guard_input("the experiment", spec.source);
    if (spec.topology_source != spec.source)
        outputs.guard_input("the topology", spec.topology_source);
    if (!megatron_args.empty() && megatron_args.front() == '@')
        outputs.guard_input("--megatron-args", megatron_args.substr(1));
    // The files the loader read, as it resolved them (guard_input skips an empty path).
    outputs.guard_input("the compute calibration", spec.compute.calibration_path);
    outputs.guard_input("the model file", spec.model_file);
    outputs.guard_input("the network calibration", spec.network_calibration_file);
}

}  // namespace cs::api
