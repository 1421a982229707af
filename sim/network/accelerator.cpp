#include "network/accelerator.hpp"

#include <algorithm>
#include <iterator>
#include <string>

#include "core/errors.hpp"

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

std::shared_ptr<const KeptState::ScaledCapacities> KeptState::network_capacities(
    KeptState* kept, const topology::Cluster& cluster, const NetworkConfig& config) {
    std::array<double, kLinkKinds> per_kind{};
    std::copy(std::begin(config.link_efficiency), std::end(config.link_efficiency),
              per_kind.begin());
    for (const auto& row : config.op_efficiency)
        for (double eff : row)
            if (!(eff > 0 && eff <= 1))
                throw ConfigError("network: operation efficiency must be in (0, 1], got " +
                                  std::to_string(eff));
    if (!(config.nvls_efficiency > 0 && config.nvls_efficiency <= 1))
        throw ConfigError("network: NVLS efficiency must be in (0, 1], got " +
                          std::to_string(config.nvls_efficiency));
    const auto check = [&per_kind](unsigned kinds) {
        for (int k = 0; k < kLinkKinds; ++k) {
            const double eff = per_kind[static_cast<std::size_t>(k)];
            if ((kinds >> k & 1u) != 0 && !(eff > 0 && eff <= 1))
                throw ConfigError("network: link efficiency must be in (0, 1], got " +
                                  std::to_string(eff));
        }
    };
    return kept ? kept->scaled_capacities(per_kind, config.nvls_efficiency, check)
                : make_scaled_capacities(cluster, per_kind, config.nvls_efficiency, check);
}

}  // namespace cs::network
