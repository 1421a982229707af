// Events per second of the bare engine: the classic "hold" model. The queue is filled to a given
// depth; each processed event schedules one successor a pseudo-random delay later, so the depth
// stays constant while `events` events are processed. Prints a table.
//   build/bin/bench_engine [events_per_depth]
#include <chrono>
#include <cstdio>
#include <cstdlib>

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
}  // namespace

int main(int argc, char** argv) {
    const std::uint64_t events = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20'000'000;
    std::printf("%-12s %-14s %-10s %-14s\n", "queue depth", "events", "seconds", "events/s");
    for (std::uint64_t depth : {1'000ULL, 10'000ULL, 100'000ULL, 1'000'000ULL}) {
        cs::Simulation sim;
        Hold hold;
        const auto h = sim.add_handler(hold);
        sim.reserve(depth + 1);
        for (std::uint64_t i = 0; i < depth; ++i)
            sim.schedule_at(cs::Time::ps(static_cast<std::int64_t>(i * 997 % 1'000'000)), h, 0, i);
        hold.remaining = events;
        const auto t0 = std::chrono::steady_clock::now();
        while (hold.remaining > 0 && sim.step()) {
        }
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double processed = static_cast<double>(sim.events_processed());
        std::printf("%-12llu %-14.0f %-10.3f %-14.3g\n", static_cast<unsigned long long>(depth),
                    processed, s, processed / s);
    }
    return 0;
}
