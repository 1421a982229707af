// The processes a sweep is sharded over: the ranks of an MPI job under `mpirun -n N`, else this
// process alone. The only place clustersim talks to MPI; callers see ranks and byte buffers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

namespace cs::api {

// The rank a launcher (mpirun, mpiexec, srun) gave this process, read from its environment; 0
// when none did. Needs no MPI: main() uses it to print a command-line error once, not once per
// process.
int launcher_rank();

class SweepRanks {
  public:
    // Joins the MPI job when a launcher (mpirun, mpiexec, srun) started this process and the build
    // has MPI; otherwise, and for a plain `clustersim sweep`, a job of one that never starts MPI.
    SweepRanks();
    // Leaves the MPI job (MPI_Finalize) if the constructor joined it. Every rank must get here, so
    // an error must not leave one rank inside gather_to_root while another unwinds.
    ~SweepRanks();
    SweepRanks(const SweepRanks&) = delete;
    SweepRanks& operator=(const SweepRanks&) = delete;

    int rank() const { return rank_; }  // 0 ..size()-1; rank 0 prints and writes files
    int size() const { return size_; }

    // Collective, called once by every rank with that rank's bytes. Rank 0 gets every rank's bytes
    // indexed by rank (its own first); the other ranks get an empty vector.
    std::vector<std::vector<std::uint8_t>> gather_to_root(std::vector<std::uint8_t> mine) const;

  private:
    friend class WorkQueue;
    int rank_ = 0;
    int size_ = 1;
    bool joined_ = false;
    bool threads_ = false;  // MPI lets a second thread call it, one call at a time
};

// Work handed out at run time by rank 0, which works too. The work is a list of positions
// 0..N-1 (what a position stands for is the caller's); a chunk is a range of them. Rank 0 deals
// each chunk when a rank asks for it (Deal), so a rank that finishes early takes more. The other
// ranks ask for their next chunk as soon as they get one; rank 0 answers from a thread of its
// own, within about a millisecond, while its main thread works (where the MPI library lets only
// one thread call it, between its own units of work: serve), and once its own work is out, until
// every rank has been told so.
//
// Which rank gets which chunk depends on timing; what the caller computes from the chunks must
// not. Every wait polls every millisecond (Open MPI's blocking calls spin and would take the core
// of a rank still working). A job of one (no launcher, or a build without MPI) sends nothing: it
// takes every chunk itself.
class WorkQueue {
  public:
    struct Chunk {
        std::uint64_t begin = 0;  // positions [begin, end)
        std::uint64_t end = 0;
        bool empty() const { return begin >= end; }
    };
    // No failure reported: every position is still needed.
    static constexpr std::uint64_t kNoCutoff = std::numeric_limits<std::uint64_t>::max();
    // The next chunk for `rank`, given `cutoff`, the earliest failure any rank reported so far
    // (an index in the caller's terms; later work is no longer needed). Called on rank 0 only,
    // except for the first round (below), which must be deterministic. An empty chunk tells the
    // rank there is no more work for it: it is not asked about again, and every rank must get
    // one in the end.
    using Deal = std::function<Chunk(int rank, std::uint64_t cutoff)>;

    // Sends nothing: every rank calls `deal` for ranks 0..size-1 in turn and keeps its own chunk,
    // so the first round costs no message and no rank waits for rank 0 to start. The other ranks'
    // `deal` is not called again.
    WorkQueue(const SweepRanks& ranks, Deal deal);
    // Every rank must call next() until it returns an empty chunk before this (rank 0 waits for
    // the other ranks' last requests there), so that no message is left in flight.
    ~WorkQueue();
    WorkQueue(const WorkQueue&) = delete;
    WorkQueue& operator=(const WorkQueue&) = delete;

    // This rank's next chunk; empty once the work is out. On a rank other than 0 it waits for the
    // answer to the request sent with the previous chunk, then asks for the one after. On rank 0,
    // once nothing is left, it first serves the other ranks until each has been told so.
    Chunk next();
    // Rank 0: answers the requests that have arrived (cheap when none has); call it between units
    // of work, for when no thread answers them. Elsewhere nothing.
    void serve();
    // This rank failed at `index`: rank 0 learns it with this rank's next request (rank 0 at
    // once), deals nothing after the earliest such index and passes it on with its answers.
    void failed(std::uint64_t index);
    // The earliest failure this rank knows of (its own, or one rank 0 passed on); kNoCutoff if
    // none. Work at a later index is not needed.
    std::uint64_t cutoff() const { return cutoff_.load(std::memory_order_relaxed); }

  private:
    struct Messages;  // the MPI requests in flight, their buffers, rank 0's thread (shard.cpp)

    const SweepRanks& ranks_;
    Deal deal_;
    Chunk first_;                                    // this rank's chunk of the first round
    bool started_ = false;                           // first_ was handed out
    bool out_ = false;                               // next() returned an empty chunk
    std::uint64_t failure_ = kNoCutoff;              // this rank's own earliest failure
    std::atomic<std::uint64_t> cutoff_ = kNoCutoff;  // on rank 0 written under Messages' lock
    std::unique_ptr<Messages> messages_;             // none in a job of one
};

}  // namespace cs::api
