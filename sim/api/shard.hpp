// The processes a sweep is sharded over: the ranks of an MPI job under `mpirun -n N`, else this
// process alone. The only place clustersim talks to MPI; callers see ranks and byte buffers.
#pragma once

#include <cstdint>
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
    int rank_ = 0;
    int size_ = 1;
    bool joined_ = false;
};

}  // namespace cs::api
