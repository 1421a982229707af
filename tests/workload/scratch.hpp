// Scratch folders for the workload tests that load YAML files: a fresh folder per test case
// under the system's temporary folder, removed afterwards. The process id in the name keeps test
// runs of several build folders on one machine apart.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "workload/experiment.hpp"
#include "workload/plan.hpp"

namespace cs::test {

class Scratch {
  public:
    explicit Scratch(const std::string& name)
        : dir_(std::filesystem::temp_directory_path() /
               ("cs_workload_tests_" + std::to_string(::getpid()) + "_" + name)) {
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directories(dir_);
    }
    ~Scratch() {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;

    // Writes `text` to `relative` (creating folders) and returns its absolute path.
    std::filesystem::path write(const std::string& relative, const std::string& text) const {
        const std::filesystem::path p = dir_ / relative;
        std::filesystem::create_directories(p.parent_path());
        std::ofstream(p, std::ios::binary) << text;
        return p;
    }
    const std::filesystem::path& dir() const { return dir_; }

  private:
    std::filesystem::path dir_;
};

// One generated node of 4 H100 GPUs on an NVSwitch, one NIC per GPU into a single switch;
// `nodes` is settable, so n nodes have 4n GPUs.
inline const char* const kFourGpus =
    "node: {gpus: 4, gpu_model: H100-SXM, intra: {kind: nvswitch, bandwidth: 450GB/s},\n"
    "       nics: {count: 4, kind: infiniband, bandwidth: 400Gbps}}\n"
    "nodes: 1\n"
    "fabric: {kind: single_switch}\n";

// The iteration plan of `experiment` (YAML whose topology is four-gpus.yaml, kFourGpus) with
// `overrides`, each pipeline stage on the device of its number, in a scratch folder `name`.
inline workload::IterationPlan plan_on_four_gpus(const std::string& name, const char* experiment,
                                                 const std::vector<std::string>& overrides) {
    Scratch scratch(name);
    scratch.write("four-gpus.yaml", kFourGpus);
    const auto spec = workload::load_experiment(scratch.write("e.yaml", experiment), overrides);
    return workload::plan_iteration(spec, 1, false, [](int vs) { return vs; });
}

}  // namespace cs::test
