#include <nlohmann/json.hpp>

#include "session/plan_search.hpp"

namespace cs::api::plan_search {

namespace {

nlohmann::json survivor_cbor(const Survivor& s) {
    const auto& l = s.layout;
    return {l.tp,
            l.pp,
            l.dp,
            l.cp,
            l.ep,
            l.vpp,
            l.micro_batch_size,
            static_cast<int>(l.recompute),
            static_cast<int>(l.sharding),
            l.schedule,
            l.shard_size,
            l.recompute_layers,
            l.nodes,
            l.first_stage_layers,
            l.last_stage_layers,
            s.index,
            s.bound_s,
            s.bound_score,
            s.flops,
            s.peak,
            s.tokens,
            s.memory};
}
Survivor survivor_from(const nlohmann::json& j) {
    Survivor s;
    auto& l = s.layout;
    l.tp = j.at(0);
    l.pp = j.at(1);
    l.dp = j.at(2);
    l.cp = j.at(3);
    l.ep = j.at(4);
    l.vpp = j.at(5);
    l.micro_batch_size = j.at(6);
    l.recompute = static_cast<workload::Recompute>(j.at(7).get<int>());
    l.sharding = static_cast<workload::Sharding>(j.at(8).get<int>());
    l.schedule = j.at(9);
    l.shard_size = j.at(10);
    l.recompute_layers = j.at(11);
    l.nodes = j.at(12);
    l.first_stage_layers = j.at(13);
    l.last_stage_layers = j.at(14);
    s.index = j.at(15);
    s.bound_s = j.at(16);
    s.bound_score = j.at(17);
    s.floor_score = s.bound_score;
    s.flops = j.at(18);
    s.peak = j.at(19);
    s.tokens = j.at(20);
    s.memory = j.at(21);
    return s;
}

}  // namespace

bool gather_shares(Search& search, const SweepRanks& ranks) {
    if (ranks.size() <= 1) return true;
    nlohmann::json mine;
    if (ranks.rank() != 0) {
        nlohmann::json survivors = nlohmann::json::array();
        for (const auto& s : search.survivors)
            survivors.push_back(survivor_cbor(s));
        nlohmann::json entries = nlohmann::json::array();
        for (const auto& e : search.entries)
            entries.push_back({survivor_cbor(Survivor{e.layout, e.index, e.lower_bound_s, 0, 0, 0,
                                                      0, 0, e.memory_bytes}),
                               static_cast<int>(e.status), e.invalid ? *e.invalid : std::string(),
                               e.floor_only});
        mine = {search.layouts,         search.invalid, search.pruned_memory,
                search.invalid_reasons, survivors,      entries};
    }
    auto parts = ranks.gather_to_root(ranks.rank() == 0 ? std::vector<std::uint8_t>{}
                                                        : nlohmann::json::to_cbor(mine));
    if (ranks.rank() != 0) return false;
    for (std::size_t from = 1; from < parts.size(); ++from) {
        const auto j = nlohmann::json::from_cbor(parts[from]);
        search.layouts += j.at(0).get<std::size_t>();
        search.invalid += j.at(1).get<std::size_t>();
        search.pruned_memory += j.at(2).get<std::size_t>();
        for (const auto& [reason, count] : j.at(3).get<std::map<std::string, std::size_t>>())
            search.invalid_reasons[reason] += count;
        for (const auto& s : j.at(4))
            search.survivors.push_back(survivor_from(s));
        for (const auto& e : j.at(5)) {
            PlanEntries::Record entry;
            const auto s = survivor_from(e.at(0));
            entry.layout = s.layout;
            entry.index = s.index;
            entry.lower_bound_s = s.bound_s;
            entry.memory_bytes = s.memory;
            entry.status = static_cast<PlanEntry::Status>(e.at(1).get<int>());
            if (entry.status == PlanEntry::Status::Invalid)
                entry.invalid = search.shared_message(e.at(2).get<std::string>());
            entry.floor_only = e.at(3).get<bool>();
            search.entries.push_back(std::move(entry));
        }
    }
    return true;
}

}  // namespace cs::api::plan_search
