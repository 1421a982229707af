// A fixed set of worker threads for the session's parallel loops (plan's search and
// simulations), and the loop that keeps a sequential algorithm's result while running ahead.
//
// Each task is given the number of the worker that runs it (0 .. size() - 1), so that it can use
// what belongs to that worker (a SweepCache, whose parts are not shared between threads) without
// a lock. A task's exception reaches whoever waits on its future.
#pragma once

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace cs::api {

class WorkerPool {
  public:
    // `workers` threads (at least one); as many as the system starts when it refuses more (a
    // pool's callers get the same results from any number), and the system's error when it
    // starts none.
    explicit WorkerPool(std::size_t workers) {
        if (workers == 0) workers = 1;
        threads_.reserve(workers);
        for (std::size_t w = 0; w < workers; ++w) {
            try {
                threads_.emplace_back([this, w] { work(w); });
            } catch (const std::system_error&) {
                if (threads_.empty()) throw;
                break;
            }
        }
    }
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;
    // Runs what is queued, then joins.
    ~WorkerPool() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        ready_.notify_all();
        for (auto& t : threads_)
            t.join();
    }

    std::size_t size() const { return threads_.size(); }

    // Queues f(worker); the future gives its result or rethrows its exception.
    template <typename F>
    auto submit(F f) -> std::future<std::invoke_result_t<F&, std::size_t>> {
        using R = std::invoke_result_t<F&, std::size_t>;
        auto task = std::make_shared<std::packaged_task<R(std::size_t)>>(std::move(f));
        auto result = task->get_future();
        {
            std::lock_guard<std::mutex> lock(mutex_);
            queue_.emplace_back([task](std::size_t worker) { (*task)(worker); });
        }
        ready_.notify_one();
        return result;
    }

  private:
    void work(std::size_t worker) {
        for (;;) {
            std::function<void(std::size_t)> task;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
                if (queue_.empty()) return;  // stopping, nothing left
                task = std::move(queue_.front());
                queue_.pop_front();
            }
            task(worker);  // a packaged_task: its exception is kept in its future
        }
    }

    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<std::function<void(std::size_t)>> queue_;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

// The sequential loop
//     for (i = first; i < end && go(i, 0); ++i) commit(i, eval(i));
// with up to `ahead` evaluations (at least pool.size()) running ahead of the commits: more than
// the workers keeps them busy while the oldest takes long, at the price of more evaluations
// dropped when the loop stops. go(i, in_flight) is asked when i would be launched, with the
// number of evaluations launched and not yet committed, and again with 0 when i's turn to commit
// comes, every earlier result committed; so the items committed (and the order of the commits)
// are the sequential loop's whenever go(i, 0) only turns from true to false as results are
// committed (plan's stop rules: a k-th best score only improves) and go(i, n) is no more
// willing than go(i, 0) (a go that counts the evaluations in flight against a limit launches
// none past it). An evaluation run ahead and then not committed is waited for and dropped.
// eval(i, worker) runs on a worker; go and commit on the calling thread, go(i, n) before eval(i)
// is submitted and go(i, 0) after it has ended. Returns the first item not committed.
template <typename Go, typename Eval, typename Commit>
std::size_t run_ahead(WorkerPool& pool, std::size_t ahead, std::size_t first, std::size_t end,
                      Go&& go, Eval&& eval, Commit&& commit) {
    ahead = std::max(ahead, pool.size());
    using R = std::invoke_result_t<Eval&, std::size_t, std::size_t>;
    std::deque<std::pair<std::size_t, std::future<R>>> running;
    // Whatever ends the loop, nothing still running may outlive the references its task holds.
    struct Drain {
        std::deque<std::pair<std::size_t, std::future<R>>>& running;
        ~Drain() {
            for (auto& r : running)
                if (r.second.valid()) r.second.wait();
        }
    } drain{running};
    std::size_t launched = first;
    for (;;) {
        while (running.size() < ahead && launched < end && go(launched, running.size())) {
            const std::size_t i = launched++;
            running.emplace_back(
                i, pool.submit([&eval, i](std::size_t worker) { return eval(i, worker); }));
        }
        if (running.empty()) return launched;  // at the end, or go refused the next
        const std::size_t i = running.front().first;
        R result = running.front().second.get();
        running.pop_front();
        if (!go(i, std::size_t{0})) return i;  // Drain waits for those run ahead
        commit(i, std::move(result));
    }
}

// What the runs in flight on every thread may hold between them: --max-memory, as each run's
// estimate_run_bytes (which one run may not pass, as `run` checks). A run waits to start until
// its estimate fits beside those running; the threads only change when a run starts, not what
// it gives, so the results stay those of one thread.
class MemoryBudget {
  public:
    explicit MemoryBudget(double bytes) : free_(bytes) {}
    class Hold {
      public:
        Hold(MemoryBudget& budget, double bytes) : budget_(budget), bytes_(bytes) {
            std::unique_lock lock(budget_.mutex_);
            // One alone always starts (what `run` refuses is refused before, by its estimate).
            budget_.released_.wait(
                lock, [&] { return budget_.holders_ == 0 || budget_.free_ >= bytes_; });
            budget_.free_ -= bytes_;
            ++budget_.holders_;
        }
        ~Hold() {
#ifdef __GLIBC__
            // A large run's memory goes back to the system, not to this thread's malloc arena,
            // where the run after it, on another thread, could not use it.
            if (bytes_ > kTrimAbove) malloc_trim(0);
#endif
            {
                std::lock_guard lock(budget_.mutex_);
                budget_.free_ += bytes_;
                --budget_.holders_;
            }
            budget_.released_.notify_all();
        }
        Hold(const Hold&) = delete;
        Hold& operator=(const Hold&) = delete;

      private:
        MemoryBudget& budget_;
        double bytes_;
    };

  private:
    static constexpr double kTrimAbove = 256.0 * (1 << 20);
    std::mutex mutex_;
    std::condition_variable released_;
    double free_;
    int holders_ = 0;
};

}  // namespace cs::api
