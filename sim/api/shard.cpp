#include "api/shard.hpp"

#include <cstdlib>

#ifdef CLUSTERSIM_WITH_MPI
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <thread>
#endif

namespace cs::api {

int launcher_rank() {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
        if (const char* value = std::getenv(name)) return std::atoi(value);
    return 0;
}

#ifdef CLUSTERSIM_WITH_MPI

namespace {

// A plain run must not start MPI: Open MPI's singleton MPI_Init takes about 0.6 s and forks a
// helper. Launchers announce themselves in the environment (Open MPI's mpirun, PMIx and PMI-1/2
// launchers such as srun or MPICH's mpiexec).
bool launched_by_mpi() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
        if (std::getenv(name) != nullptr) return true;
    return false;
}

constexpr int kTag = 7301;
// MPI counts are ints: longer buffers go in pieces.
constexpr std::size_t kPiece = std::size_t{1} << 30;

// Waits without spinning. Open MPI's blocking calls poll in a busy loop, so a rank that finished
// its share first burned a core until the last one was done (measured on the 2-core machine:
// twice the CPU time of the work, and where the other core was loaded, the spinning rank took
// time from the one still working). `ready` is polled every millisecond instead.
template <typename Ready>
void wait_politely(Ready ready) {
    while (!ready())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

SweepRanks::SweepRanks() {
    if (!launched_by_mpi()) return;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        MPI_Init(nullptr, nullptr);
        joined_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

SweepRanks::~SweepRanks() {
    if (!joined_) return;
    // Every rank meets here before MPI_Finalize (which synchronises the ranks too, spinning):
    // rank 0 prints while the others wait.
    MPI_Request barrier;
    MPI_Ibarrier(MPI_COMM_WORLD, &barrier);
    wait_politely([&] {
        int done = 0;
        MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
        return done != 0;
    });
    MPI_Finalize();
}

std::vector<std::vector<std::uint8_t>> SweepRanks::gather_to_root(
    std::vector<std::uint8_t> mine) const {
    if (size_ == 1) return {std::move(mine)};
    if (rank_ != 0) {
        // Non-blocking sends waited for politely: a rank that finished first would otherwise
        // spin in MPI_Send until rank 0 gets to it (above Open MPI's eager limit).
        const auto send = [](const void* data, int count, MPI_Datatype type) {
            MPI_Request request;
            MPI_Isend(data, count, type, 0, kTag, MPI_COMM_WORLD, &request);
            wait_politely([&] {
                int done = 0;
                MPI_Test(&request, &done, MPI_STATUS_IGNORE);
                return done != 0;
            });
        };
        const std::uint64_t length = mine.size();
        send(&length, 1, MPI_UINT64_T);
        for (std::size_t at = 0; at < mine.size(); at += kPiece)
            send(mine.data() + at, static_cast<int>(std::min(kPiece, mine.size() - at)), MPI_BYTE);
        return {};
    }
    std::vector<std::vector<std::uint8_t>> all;
    all.reserve(static_cast<std::size_t>(size_));
    all.push_back(std::move(mine));
    for (int from = 1; from < size_; ++from) {
        std::uint64_t length = 0;
        wait_politely([&] {  // the rank may still be simulating its share
            int arrived = 0;
            MPI_Iprobe(from, kTag, MPI_COMM_WORLD, &arrived, MPI_STATUS_IGNORE);
            return arrived != 0;
        });
        MPI_Recv(&length, 1, MPI_UINT64_T, from, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        auto& bytes = all.emplace_back(length);
        for (std::size_t at = 0; at < bytes.size(); at += kPiece)
            MPI_Recv(bytes.data() + at, static_cast<int>(std::min(kPiece, bytes.size() - at)),
                     MPI_BYTE, from, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    return all;
}

#else  // built without MPI: always a job of one

SweepRanks::SweepRanks() = default;
SweepRanks::~SweepRanks() = default;

std::vector<std::vector<std::uint8_t>> SweepRanks::gather_to_root(
    std::vector<std::uint8_t> mine) const {
    return {std::move(mine)};
}

#endif

}  // namespace cs::api
