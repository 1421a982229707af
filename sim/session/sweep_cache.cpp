#include "session/sweep_cache.hpp"

#include <algorithm>

namespace cs::api {

report::LinkSketch& SweepCache::Cluster::sketched() {
    if (!sketch) sketch.emplace(*cluster);
    return *sketch;
}

report::LinkAccounting& SweepCache::Cluster::accounted() {
    if (!accounting) {
        accounting.emplace(cluster->links().size());
        record_start.assign(cluster->links().size(), 0);
    }
    return *accounting;
}

SweepCache::Cluster& SweepCache::of(const std::shared_ptr<const topology::Cluster>& cluster) {
    for (std::size_t i = 0; i < entries_.size(); ++i)
        if (entries_[i]->cluster == cluster) {
            std::rotate(entries_.begin() + static_cast<std::ptrdiff_t>(i),
                        entries_.begin() + static_cast<std::ptrdiff_t>(i) + 1, entries_.end());
            return *entries_.back();
        }
    if (entries_.size() >= kMaxClusters) entries_.erase(entries_.begin());
    entries_.push_back(std::make_unique<Cluster>(cluster));
    return *entries_.back();
}

}  // namespace cs::api
