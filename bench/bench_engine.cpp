// Events per second of the bare engine: the classic "hold" model. The queue is filled to a given
// depth; each processed event schedules one successor a pseudo-random delay later, so the depth
// stays constant while `events` events are processed. Prints a table with wall-clock and CPU
// time: on a shared machine the CPU-time rate is the steadier figure.
//   build/bin/bench_engine [events_per_depth [depth...]]
// Instruction counts of the hold phase alone (the fill is excluded):
//   valgrind --tool=callgrind --toggle-collect='*hold_phase*' build/bin/bench_engine 1000000 1000
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "engine/simulation.hpp"

namespace {
struct Hold final : cs::EventHandler {
    std::uint64_t state = 0x2545F4914F6CDD1DULL;
    std::uint64_t remaining = 0;
    void on_event(cs::Simulation& sim, const cs::Event& e) override {
        if (remaining == 0) return;
        --remaining;
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        sim.schedule_in(cs::Time::ps(static_cast<std::int64_t>(state % 1'000'000)), e.handler, 0,
                        e.a + 1);
    }
};

// Kept out of line so that callgrind can count this phase on its own.
[[gnu::noinline]] void hold_phase(cs::Simulation& sim, const Hold& hold) {
    while (hold.remaining > 0 && sim.step()) {
    }
}
}  // namespace

int main(int argc, char** argv) {
    const std::uint64_t events = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20'000'000;
    std::vector<std::uint64_t> depths;
    for (int i = 2; i < argc; ++i)
        depths.push_back(std::strtoull(argv[i], nullptr, 10));
    if (depths.empty()) depths = {1'000, 10'000, 100'000, 1'000'000};
    std::printf("%-12s %-10s %-10s %-10s %-12s %-12s\n", "queue depth", "events", "seconds",
                "cpu s", "events/s", "events/cpu s");
    for (const std::uint64_t depth : depths) {
        cs::Simulation sim;
        Hold hold;
        const auto h = sim.add_handler(hold);
        sim.reserve(depth + 1);
        for (std::uint64_t i = 0; i < depth; ++i)
            sim.schedule_at(cs::Time::ps(static_cast<std::int64_t>(i * 997 % 1'000'000)), h, 0, i);
        hold.remaining = events;
        const std::clock_t c0 = std::clock();
        const auto t0 = std::chrono::steady_clock::now();
        hold_phase(sim, hold);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
        const double processed = static_cast<double>(sim.events_processed());
        std::printf("%-12llu %-10.0f %-10.3f %-10.3f %-12.3g %-12.3g\n",
                    static_cast<unsigned long long>(depth), processed, s, cpu, processed / s,
                    processed / cpu);
    }
    return 0;
}
