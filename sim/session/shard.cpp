#include "session/shard.hpp"

#include <algorithm>
#include <cstdlib>
#include <utility>

#ifdef CLUSTERSIM_WITH_MPI
#include <mpi.h>

#include <array>
#include <chrono>
#include <mutex>
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

constexpr int kTag = 7301;      // gather_to_root
constexpr int kAskTag = 7302;   // WorkQueue: a rank's request for its next chunk
constexpr int kDealTag = 7303;  // WorkQueue: rank 0's answer
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

// Under Open MPI's launcher, a quicker start: MPI_Init opens every point-to-point layer (pml)
// it may use and probes its transports before picking one. On the 2-core machine (Debian's Open
// MPI 4.1, whose site file already leaves out UCX) the cm layer's probe of its PSM and PSM2
// transports took most of MPI_Init: 0.29-0.35 s against 0.08-0.15 s with only ob1, Open MPI's
// layer over its own shared-memory and TCP transports (`mpirun -n 2` of MPI_Init and
// MPI_Finalize: 0.45-0.6 s against 0.24-0.4 s); where UCX is enabled, its probe is of the same
// kind. A sweep exchanges a few kilobytes per rank, which the faster transports do not speed up,
// and ob1's include TCP, so a job still spans hosts. A value the user set wins (setenv does not
// overwrite it): OMPI_MCA_pml=cm or ucx brings the others back. The transports (btl) are left
// alone: an OMPI_MCA_btl of ours would replace the site file's list (Debian's leaves out uct,
// openib and ofi; with `^openib` alone, ofi's probe made MPI_Init 0.5 s and MPI_Finalize 1 s).
void prefer_quick_start() {
    if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) return;  // not Open MPI's launcher
    setenv("OMPI_MCA_pml", "ob1", 0);
}

}  // namespace

SweepRanks::SweepRanks() {
    if (!launched_by_mpi()) return;
    prefer_quick_start();
    int initialized = 0;
    MPI_Initialized(&initialized);
    // WorkQueue's rank 0 answers from a second thread while the first simulates; all of its MPI
    // calls are made under one lock, which MPI_THREAD_SERIALIZED allows (Open MPI takes no locks
    // of its own at that level).
    int threads = MPI_THREAD_SINGLE;
    if (!initialized) {
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &threads);
        joined_ = true;
    } else {
        MPI_Query_thread(&threads);
    }
    threads_ = threads >= MPI_THREAD_SERIALIZED;
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

// What is in flight between rank 0 and the others. Each rank other than 0 has at most one
// request out (it asks again only once answered), so rank 0 keeps one answer buffer per rank.
struct WorkQueue::Messages {
    // Ranks other than 0: the request in flight (this rank's earliest failure) and its answer
    // (rank 0's cutoff, then the chunk's begin and end).
    std::uint64_t request = kNoCutoff;
    std::array<std::uint64_t, 3> answer{};
    MPI_Request sent = MPI_REQUEST_NULL;
    MPI_Request received = MPI_REQUEST_NULL;
    // Rank 0: per rank, the answer being sent; how many ranks other than 0 were told the work is
    // out (they ask no more).
    std::vector<std::array<std::uint64_t, 3>> answers;
    std::vector<MPI_Request> answering;
    int told_out = 0;
    // Rank 0: the main thread and `server` take turns under `lock` for every MPI call, the deal
    // and the cutoff.
    std::mutex lock;
    std::thread server;
    std::atomic<bool> stop = false;

    Messages(int size, int out_at_start)
        : answers(static_cast<std::size_t>(size)),
          answering(static_cast<std::size_t>(size), MPI_REQUEST_NULL),
          told_out(out_at_start) {}
    ~Messages() { stop_server(); }
    void stop_server() {
        stop = true;
        if (server.joinable()) server.join();
    }
    // Rank 0, under `lock`: answers every request that has arrived.
    void answer_requests(WorkQueue& queue);
};

namespace {

void complete(MPI_Request& request) {  // MPI_REQUEST_NULL completes at once
    wait_politely([&] {
        int done = 0;
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        return done != 0;
    });
}

}  // namespace

void WorkQueue::Messages::answer_requests(WorkQueue& queue) {
    for (;;) {
        int arrived = 0;
        MPI_Status status;
        MPI_Iprobe(MPI_ANY_SOURCE, kAskTag, MPI_COMM_WORLD, &arrived, &status);
        if (arrived == 0) return;
        const int from = status.MPI_SOURCE;
        std::uint64_t failure = kNoCutoff;
        MPI_Recv(&failure, 1, MPI_UINT64_T, from, kAskTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const std::uint64_t cutoff = std::min(queue.cutoff(), failure);
        queue.cutoff_ = cutoff;
        const Chunk chunk = queue.deal_(from, cutoff);
        if (chunk.empty()) ++told_out;
        const auto at = static_cast<std::size_t>(from);
        complete(answering[at]);  // the previous answer, received before `from` asked again
        answers[at] = {cutoff, chunk.begin, chunk.end};
        MPI_Isend(answers[at].data(), 3, MPI_UINT64_T, from, kDealTag, MPI_COMM_WORLD,
                  &answering[at]);
    }
}

WorkQueue::WorkQueue(const SweepRanks& ranks, Deal deal) : ranks_(ranks), deal_(std::move(deal)) {
    int out = 0;  // ranks other than 0 given nothing: they never ask
    for (int r = 0; r < ranks_.size(); ++r) {
        const Chunk chunk = deal_(r, kNoCutoff);
        if (r == ranks_.rank()) first_ = chunk;
        if (r != 0 && chunk.empty()) ++out;
    }
    if (ranks_.size() == 1) return;
    messages_ = std::make_unique<Messages>(ranks_.size(), out);
    if (ranks_.rank() != 0 || !ranks_.threads_) return;
    // Answers come within about a millisecond, not after rank 0's current row (a shape's first
    // row can take a quarter of a second, and more with the flow network), so that a rank never
    // finishes its chunk before the next one is dealt.
    Messages* m = messages_.get();
    m->server = std::thread([this, m] {
        while (!m->stop) {
            {
                const std::lock_guard guard(m->lock);
                m->answer_requests(*this);
                if (m->told_out == ranks_.size() - 1) return;  // nobody will ask again
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    });
}

WorkQueue::Chunk WorkQueue::next() {
    if (out_) return {};
    Messages* m = messages_.get();
    const bool root = ranks_.rank() == 0;
    Chunk chunk = first_;
    if (started_ && root) {
        std::unique_lock<std::mutex> guard;
        if (m != nullptr) {
            guard = std::unique_lock(m->lock);
            m->answer_requests(*this);
        }
        chunk = deal_(0, cutoff());
    } else if (started_) {
        complete(m->received);  // asked for with the previous chunk
        complete(m->sent);
        cutoff_ = std::min(cutoff(), m->answer[0]);
        chunk = Chunk{m->answer[1], m->answer[2]};
    }
    started_ = true;
    if (chunk.empty()) {
        out_ = true;
        if (m != nullptr && root) {
            // The others still simulate their last chunks and ask again: each is told the work is
            // out before rank 0 goes on to the gather, so no request is left unanswered.
            wait_politely([&] {
                const std::lock_guard guard(m->lock);
                m->answer_requests(*this);
                return m->told_out == ranks_.size() - 1;
            });
            m->stop_server();
            for (auto& request : m->answering)
                complete(request);
        }
        return {};
    }
    if (m != nullptr && !root) {
        // One chunk ahead: the answer comes while this chunk is simulated.
        m->request = failure_;
        MPI_Irecv(m->answer.data(), 3, MPI_UINT64_T, 0, kDealTag, MPI_COMM_WORLD, &m->received);
        MPI_Isend(&m->request, 1, MPI_UINT64_T, 0, kAskTag, MPI_COMM_WORLD, &m->sent);
    }
    return chunk;
}

void WorkQueue::serve() {
    Messages* m = messages_.get();
    if (m == nullptr || ranks_.rank() != 0) return;
    const std::lock_guard guard(m->lock);
    m->answer_requests(*this);
}

void WorkQueue::failed(std::uint64_t index) {
    failure_ = std::min(failure_, index);
    std::unique_lock<std::mutex> guard;
    if (messages_ != nullptr && ranks_.rank() == 0) guard = std::unique_lock(messages_->lock);
    cutoff_ = std::min(cutoff(), index);
}

#else  // built without MPI: always a job of one

SweepRanks::SweepRanks() = default;
SweepRanks::~SweepRanks() = default;

std::vector<std::vector<std::uint8_t>> SweepRanks::gather_to_root(
    std::vector<std::uint8_t> mine) const {
    return {std::move(mine)};
}

struct WorkQueue::Messages {};

WorkQueue::WorkQueue(const SweepRanks& ranks, Deal deal)
    : ranks_(ranks), deal_(std::move(deal)), first_(deal_(0, kNoCutoff)) {}

WorkQueue::Chunk WorkQueue::next() {
    if (out_) return {};
    const Chunk chunk = started_ ? deal_(0, cutoff()) : first_;
    started_ = true;
    out_ = chunk.empty();
    return chunk;
}

void WorkQueue::serve() {}

void WorkQueue::failed(std::uint64_t index) {
    failure_ = std::min(failure_, index);
    cutoff_ = std::min(cutoff(), index);
}

#endif

WorkQueue::~WorkQueue() = default;

}  // namespace cs::api
