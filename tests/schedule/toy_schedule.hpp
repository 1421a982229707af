// A schedule that exists only in tests: every forward, then every backward in reverse microbatch
// order. Registered by tests/schedule/test_schedule_registry.cpp and replayed by
// tests/replay/test_pipeline_contract.cpp, the way a new schedule would be.
#pragma once

#include <string>
#include <vector>

#include "core/errors.hpp"
#include "schedule/schedule.hpp"

namespace cs::schedule::test {

class GpipeLifo final : public Schedule {
  public:
    std::string name() const override { return "gpipe-lifo"; }
    int chunks_for(int /*requested_vpp*/) const override { return 1; }
    std::string check(const PipelineShape& shape) const override {
        if (shape.devices < 1 || shape.microbatches < 1) return name() + " needs p >= 1 and m >= 1";
        if (shape.chunks != 1) return name() + " runs one model chunk per device; use v=1";
        return {};
    }
    std::vector<PipelineOp> order(const PipelineShape& shape, int device) const override {
        if (!check(shape).empty() || device < 0 || device >= shape.devices)
            throw cs::SimulationError("schedule " + name(), "invalid shape or device");
        std::vector<PipelineOp> ops;
        for (int i = 0; i < shape.microbatches; ++i)
            ops.push_back({Pass::Forward, i, 0});
        for (int i = shape.microbatches - 1; i >= 0; --i)
            ops.push_back({Pass::Backward, i, 0});
        return ops;
    }
};

}  // namespace cs::schedule::test
