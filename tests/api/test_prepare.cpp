// replay::prepare, the one place an experiment meets its schedule, and the contract that every
// way of running an iteration starts from it: `run`, a one-job jobs file, and the Chakra export
// run again (`chakra run`) give the same iteration time, to the picosecond, for every registered
// schedule.
#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../error_of.hpp"
#include "core/atomic_file.hpp"
#include "ingest/inputs.hpp"
#include "replay/prepare.hpp"
#include "schedule/schedule.hpp"
#include "session/chakra.hpp"
#include "session/jobs.hpp"
#include "session/run.hpp"

using namespace cs;
using cs::test::error_of;

namespace {

const std::string kData = std::string(CLUSTERSIM_SOURCE_DIR) + "/tests/api/data/";
const std::string kEverySchedule = kData + "every-schedule.yaml";

workload::ExperimentSpec every_schedule(const std::vector<std::string>& sets = {}) {
    return api::load_experiment({kEverySchedule, sets, ""});
}

std::string file_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// every-schedule.yaml as the only job of a jobs file, its schedule replaced by `schedule`: the
// file's own text, indented under the job's `experiment` key.
api::JobsSpec one_job(const std::string& schedule) {
    std::string experiment = file_text(kEverySchedule);
    const std::string own = "\nschedule: 1f1b\n";
    const auto at = experiment.find(own);
    REQUIRE(at != std::string::npos);
    experiment.replace(at, own.size(), "\nschedule: " + schedule + "\n");
    std::string indented;
    std::istringstream lines(experiment);
    for (std::string line; std::getline(lines, line);)
        if (!line.empty() && line[0] != '#') indented += "      " + line + "\n";
    return api::load_jobs(
        workload::ExperimentText{"topology: ../../../topologies/h100-4node-oversubscribed.yaml\n"
                                 "jobs:\n"
                                 "  - name: only\n"
                                 "    experiment:\n" +
                                     indented,
                                 "<jobs>", kData});
}

}  // namespace

TEST_CASE("prepare: chunks, model copies, orders and passes per schedule") {
    // every-schedule.yaml: p = 4, m = 8, vpp = 2, 8 layers.
    const auto spec = every_schedule();
    SUBCASE("1f1b ignores vpp: one chunk of two layers per device, F and B per microbatch") {
        const auto it = replay::prepare(spec, "1f1b");
        CHECK(it.spec.schedule == "1f1b");
        CHECK(it.shape.chunks == 1);
        CHECK(it.copies == 1);
        REQUIRE(it.warnings.size() == 1);
        CHECK(it.warnings[0] == "schedule 1f1b has no virtual stages: vpp = 2 is ignored");
        CHECK(it.plan.virtual_stages.size() == 4);
        // 4 devices x 8 microbatches x (F, B) = 64 per replica, x dp 2.
        CHECK(it.passes_per_replica() == 64);
        CHECK(it.passes() == 128);
    }
    SUBCASE("interleaved: two chunks of one layer each, every microbatch through both") {
        const auto it = replay::prepare(spec, "interleaved");
        CHECK(it.warnings.empty());
        CHECK(it.plan.virtual_stages.size() == 8);
        // 4 devices x 2 chunks x 8 microbatches x 2 passes.
        CHECK(it.passes_per_replica() == 128);
    }
    SUBCASE("dualpipe: one copy's 4 stages of 2 layers, each device holding two of them") {
        const auto it = replay::prepare(spec, "dualpipe");
        CHECK(it.shape.chunks == 2);
        CHECK(it.copies == 2);
        // The bug this seam fixed: a jobs file planned 2 chunks per copy (8 virtual stages of one
        // layer), simulating half the model. One copy is p = 4 virtual stages of 8 / 4 layers.
        CHECK(it.plan.virtual_stages.size() == 4);
        CHECK(it.plan.chunks == 2);
        // Each device runs m / 2 = 4 microbatches on each of its 2 chunks, as F, Bi and Bw:
        // 4 devices x 2 x 4 x 3 = 96 passes per replica.
        CHECK(it.passes_per_replica() == 96);
        // Device 0 holds stage 0 of copy 0 and stage 3 of copy 1: the plan counts both copies'
        // parameters (the embedding and the output layer), so its model states exceed those of
        // device 1 (stages 1 and 2, no vocabulary).
        CHECK(it.plan.devices[0].memory.parameters > it.plan.devices[1].memory.parameters);
        CHECK(it.device_of(3) == 3);
    }
}

TEST_CASE("prepare: admit sees the shape and plan before the orders are built, and may refuse") {
    const auto spec = every_schedule();
    replay::PrepareOptions how;
    bool called = false;
    how.admit = [&](const replay::PreparedIteration& it) {
        called = true;
        CHECK(it.shape.microbatches == 8);
        CHECK(it.plan.virtual_stages.size() == 8);
        CHECK(it.orders.empty());
        CHECK(it.peak_inflight.empty());
    };
    const auto it = replay::prepare(spec, "zb-v", how);
    CHECK(called);
    CHECK(it.orders.size() == 4);
    how.admit = [](const replay::PreparedIteration&) {
        throw ConfigError(SourceLocation{"test"}, "too large");
    };
    CHECK(error_of([&] { replay::prepare(spec, "zb-v", how); }) == "test: too large");
    // A schedule that cannot run the shape is refused before the plan.
    CHECK(error_of([&] {
              replay::prepare(every_schedule({"training.global_batch_size=14"}), "dualpipe", how);
          }).find("dualpipe needs an even number of microbatches") != std::string::npos);
}

TEST_CASE("every schedule: run, a one-job jobs file and Chakra export + run agree") {
    // every-schedule.yaml under each registered schedule. The jobs file places the job
    // contiguously (GPUs 0-15 in order, the standalone run's own), and the export is written
    // with the host model (--host), so all three replay the same iteration: equal to the
    // picosecond. The iteration is longer than its compute alone (checked against a trivial
    // agreement of zeros).
    const auto spec = every_schedule();
    const auto dir = std::filesystem::temp_directory_path() /
                     ("clustersim-every-schedule-" + std::to_string(::getpid()));
    for (const auto& entry : schedule::ScheduleRegistry::builtin().entries()) {
        const std::string& name = entry.name;
        CAPTURE(name);
        api::RunOptions options;
        options.schedule = name;
        const auto run = api::run(spec, options).summary;
        CHECK(run.iteration_time_s > 0.01);

        const auto jobs = api::run_jobs(one_job(name));
        REQUIRE(jobs.jobs.size() == 1);
        CHECK(jobs.jobs[0].shared.schedule == name);
        CHECK(jobs.jobs[0].alone.iteration_time_s == run.iteration_time_s);
        CHECK(jobs.jobs[0].shared.iteration_time_s == run.iteration_time_s);
        CHECK(jobs.jobs[0].shared.mfu == run.mfu);

        std::filesystem::remove_all(dir);
        OutputSet outputs;
        const auto exported = api::chakra_export(spec, name, dir, "et", outputs, true);
        outputs.commit();
        CHECK(exported.ranks == 16);
        CHECK(exported.warnings.empty());
        api::ChakraRunRequest request;
        request.folder = dir;
        request.experiment = kEverySchedule;
        const auto chakra = api::chakra_run(request);
        CHECK(chakra.result.iteration_time.seconds() == run.iteration_time_s);
    }
    std::filesystem::remove_all(dir);
}
