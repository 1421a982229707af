#include "network/accelerator.hpp"

namespace cs::network {

KeptState::KeptState(const topology::Cluster& cluster) : cluster_(cluster) {}

KeptState::~KeptState() = default;

std::shared_ptr<const KeptState::ScaledCapacities> KeptState::make_scaled_capacities(
    const topology::Cluster& cluster, const std::array<double, 5>& per_kind, double nvls,
    const std::function<void(unsigned kinds)>& check) {
    const auto& links = cluster.links();
    auto made = std::make_shared<ScaledCapacities>();
    made->per_kind = per_kind;
    made->nvls = nvls;
    made->capacity.resize(2 * links.size());
    for (std::size_t l = 0; l < links.size(); ++l) {
        const auto k = static_cast<std::size_t>(links[l].kind);
        made->kinds |= 1u << k;
        made->capacity[l] = links[l].bandwidth.bytes_per_s * per_kind.at(k);
        made->capacity[links.size() + l] = links[l].bandwidth.bytes_per_s * nvls;
    }
    if (check) check(made->kinds);
    return made;
}

std::shared_ptr<const KeptState::ScaledCapacities> KeptState::scaled_capacities(
    const std::array<double, 5>& per_kind, double nvls,
    const std::function<void(unsigned kinds)>& check) {
    for (std::size_t i = 0; i < capacities_.size(); ++i) {
        const auto kept = capacities_[i];
        if (kept->per_kind == per_kind && kept->nvls == nvls) {
            capacities_.erase(capacities_.begin() + static_cast<std::ptrdiff_t>(i));
            capacities_.push_back(kept);
            return kept;
        }
    }
    auto made = make_scaled_capacities(cluster_, per_kind, nvls, check);
    if (capacities_.size() >= kKeptCapacities) capacities_.erase(capacities_.begin());
    capacities_.push_back(made);
    return made;
}

}  // namespace cs::network
