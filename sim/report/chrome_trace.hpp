// A Chrome JSON trace (the format ui.perfetto.dev and chrome://tracing open), written as the
// replay runs: a process per node, a thread (track) per GPU stream, a slice per pass, flow arrows
// from each pass to the transfer and to the pass that waited for it.
//
// The writer streams into an AtomicFile; finish() closes the document (so an aborted run leaves
// no file). Timestamps are microseconds with picosecond digits, printed from integers, so the
// output is byte-identical across runs.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"
#include "replay/replay.hpp"

namespace cs::report {

class ChromeTraceWriter final : public replay::ReplayObserver {
public:
    ChromeTraceWriter(const std::filesystem::path& path, const replay::Replay& replay,
                      const topology::Cluster& cluster);
    void on_pass(const replay::PassRecord& pass) override;
    void on_optimizer(int worker, Time start, Time end) override;
    void on_transfer(const replay::TransferRecord& transfer) override;
    void on_iteration_end(Time end) override;
    // Appends `metadata` (a JSON object text) and commits the file.
    void finish(const std::string& metadata_json);

private:
    void begin_event();
    void slice(int gpu, int stream, const std::string& name, Time start, Time end,
               const std::string& args);

    AtomicFile file_;
    std::ostream& out_;
    const replay::Replay& replay_;
    const topology::Cluster& cluster_;
    bool first_ = true;
    std::uint64_t next_flow_ = 1;
};

// "12.345678" (microseconds) from picoseconds, exactly.
std::string trace_timestamp(Time t);

}  // namespace cs::report
