// What plan's search (steps 1-3) hands to its simulations, and how the ranks of an mpirun
// gather it: the survivors with what their bounds need, the counts and the entries of --json.
// Private to plan.cpp and plan_share.cpp.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "session/plan.hpp"
#include "session/sweep.hpp"

namespace cs::api::plan_search {

// A layout that passed the memory check, with what its bound needs. Small, so that holding
// every survivor stays cheap; its settings are made again from `layout` when simulated.
struct Survivor {
    PlanLayout layout;
    std::size_t index = 0;
    // The bound: replay::iteration_floor from step 3, iteration_lower_bound once
    // Simulations::at has worked it out (when the survivor could still be simulated).
    double bound_s = 0;
    double bound_score = 0;
    // The score of the floor (bound_score before Simulations::at bounds the survivor in full):
    // what a survivor not bounded in order is reported and counted by.
    double floor_score = 0;
    double flops = 0, peak = 0, tokens = 0;
    std::int64_t memory = 0;
};

// What one process (or one chunk of its share) found in the search.
struct Search {
    std::size_t layouts = 0, invalid = 0, pruned_memory = 0;
    std::map<std::string, std::size_t> invalid_reasons;
    std::vector<Survivor> survivors;
    std::vector<PlanEntries::Record> entries;  // with keep_entries
    // The invalid layouts' messages that `entries` share (one copy per message in a chunk).
    std::map<std::string, std::shared_ptr<const std::string>, std::less<>> messages;

    // `why`, shared with the entries that hold the same message.
    std::shared_ptr<const std::string> shared_message(std::string why) {
        auto& shared = messages[why];
        if (!shared) shared = std::make_shared<const std::string>(std::move(why));
        return shared;
    }
    // Counts an invalid layout and returns its message, shared with the others that gave it.
    std::shared_ptr<const std::string> invalid_for(
        std::string why, const std::shared_ptr<const std::string>& given) {
        ++invalid;
        ++invalid_reasons[why];
        if (given && *given == why) return given;
        return shared_message(std::move(why));
    }

    // Appends `part` (a later chunk: the order of survivors and entries stays the enumeration's).
    void absorb(Search&& part) {
        layouts += part.layouts;
        invalid += part.invalid;
        pruned_memory += part.pruned_memory;
        for (auto& [reason, count] : part.invalid_reasons)
            invalid_reasons[reason] += count;
        survivors.insert(survivors.end(), std::make_move_iterator(part.survivors.begin()),
                         std::make_move_iterator(part.survivors.end()));
        entries.insert(entries.end(), std::make_move_iterator(part.entries.begin()),
                       std::make_move_iterator(part.entries.end()));
    }
};

// Under mpirun, rank 0 gathers the other ranks' shares into `search` (after its own: plan sorts
// what it ranks and lists); false on the other ranks, whose part is done.
bool gather_shares(Search& search, const SweepRanks& ranks);

}  // namespace cs::api::plan_search
