// The critical path of a simulated iteration, pass by pass: from the pass that ended last, back
// through what each pass waited for (its input's transfer from another worker, or the previous
// pass of its own worker), to the first pass. Each pass on the path is charged to its worker, so
// the worker charged the most is the one whose time the iteration waited on (a straggler, the
// slowest stage). Transfers on the path and the optimizer step after it are not charged.
#pragma once

#include <cstdint>
#include <vector>

#include "replay/replay.hpp"

namespace cs::report {

class CriticalPath final : public replay::ReplayObserver {
  public:
    explicit CriticalPath(std::size_t workers);
    void on_pass(const replay::PassRecord& pass) override;
    void on_transfer(const replay::TransferRecord& transfer) override;

    struct Result {
        int worker = -1;               // charged the most (lowest number on a tie); -1: no pass
        std::vector<Time> per_worker;  // pass time on the path, per worker
        Time passes;                   // all pass time on the path
        std::size_t length = 0;        // passes on the path
    };
    // Walks the path; call after the run.
    Result result() const;

  private:
    struct Pass {
        int worker = 0;
        Time start, end;
        std::uint64_t previous = 0;  // the pass before it on its worker (0: none)
        std::uint64_t input = 0;     // the pass whose output it received from another worker
        Time input_end;              // when that transfer ended
    };
    std::vector<Pass> passes_;                  // [id], ids from 1 (replay::PassRecord::id)
    std::vector<std::uint64_t> last_;           // per worker: the last pass that ended
    std::vector<std::uint64_t> pending_input_;  // [to_pass id]: from_pass, until the pass ends
    std::vector<Time> pending_end_;
};

}  // namespace cs::report
