// Pipeline timelines as an SVG picture: one panel per schedule, stacked, a row per pipeline stage,
// forward / backward / weight-gradient blocks coloured by microbatch (forward light, backward dark,
// weight gradient darker, all of the microbatch's hue), idle time grey, a shared time axis. In the
// manner of Figure 4 of Narayanan et al. 2021 (Megatron-LM), drawn from simulated pass times.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "replay/replay.hpp"

namespace cs::report {

struct TimelineBlock {
    int row = 0;  // pipeline stage
    int microbatch = 0;
    int chunk = 0;  // model chunk on the stage's device
    schedule::Pass pass = schedule::Pass::Forward;
    Time start, end;
};

struct TimelinePanel {
    std::string schedule;  // shown in the title
    int rows = 0;          // pipeline stages
    int chunks = 1;        // chunks per device; > 1 adds a chunk letter to the block labels
    Time iteration_time;   // the grey idle background runs from 0 to here
    double bubble_fraction = 0;
    std::vector<TimelineBlock> blocks;
};

// Records the passes of data-parallel replica 0 of a replay (its workers are the pipeline stages;
// other replicas run the same program). Register it on the replay before run().
class TimelineRecorder final : public replay::ReplayObserver {
  public:
    explicit TimelineRecorder(const replay::Replay& replay);
    void on_pass(const replay::PassRecord& pass) override;
    void on_iteration_end(Time end) override;

    // The recorded blocks in the order the passes ended (deterministic: the replay is), and the
    // iteration end (zero before on_iteration_end).
    const std::vector<TimelineBlock>& blocks() const { return blocks_; }
    Time end() const { return end_; }
    int rows() const { return rows_; }

  private:
    std::vector<int> row_of_worker_;  // -1 for workers of other replicas
    std::vector<TimelineBlock> blocks_;
    int rows_ = 0;
    Time end_ = Time::zero();
};

// Writes the panels one above the other on one time scale (the longest iteration spans the plot
// width). Each pass is one <rect class="pass ..."> (idle backgrounds are class "idle"). Output
// depends only on the panels: coordinates are printed with two decimals.
// `s` with &, <, > and " as entities, for text and attribute values of SVG and HTML.
std::string markup_escape(const std::string& s);

void write_svg_timelines(std::ostream& out, const std::vector<TimelinePanel>& panels);

}  // namespace cs::report
