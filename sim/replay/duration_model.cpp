#include "replay/duration_model.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "replay/durations/builtin.hpp"

namespace cs::replay {

void DurationModelRegistry::add(std::string name, DurationModelFactory factory) {
    if (name.empty()) throw ConfigError("a duration model needs a name");
    if (!factory) throw ConfigError("duration model '" + name + "' has no factory");
    if (contains(name)) throw ConfigError("duration model '" + name + "' is registered twice");
    entries_.emplace_back(std::move(name), std::move(factory));
}

bool DurationModelRegistry::contains(const std::string& name) const {
    return std::any_of(entries_.begin(), entries_.end(),
                       [&](const auto& e) { return e.first == name; });
}

std::vector<std::string> DurationModelRegistry::names() const {
    std::vector<std::string> out;
    for (const auto& e : entries_)
        out.push_back(e.first);
    return out;
}

std::unique_ptr<DurationModel> DurationModelRegistry::make(
    const std::string& name, const DurationModelParams& params) const {
    for (const auto& e : entries_)
        if (e.first == name) {
            auto model = e.second(params);
            if (!model)
                throw ConfigError("duration model '" + name + "': its factory made nothing");
            return model;
        }
    std::string known;
    for (const auto& e : entries_)
        known += (known.empty() ? "" : ", ") + e.first;
    throw ConfigError("unknown duration model '" + name + "'; expected one of: " + known);
}

DurationModelRegistry builtin_duration_models() {
    DurationModelRegistry r;
    r.add("uniform", detail::make_uniform);
    return r;
}

}  // namespace cs::replay
