// `uniform`: every worker takes the plan's nominal time (the identity). A replay without a model
// behaves the same without calling one; this entry exists so that a user can name the default.
#include "core/errors.hpp"
#include "replay/durations/builtin.hpp"

namespace cs::replay::detail {
namespace {
class Uniform final : public DurationModel {
  public:
    Time pass_duration(const DurationContext&, Time nominal) override { return nominal; }
};
}  // namespace

std::unique_ptr<DurationModel> make_uniform(const DurationModelParams& params) {
    if (!params.empty())
        throw ConfigError("duration model 'uniform' takes no parameters, found '" +
                          params.begin()->first + "'");
    return std::make_unique<Uniform>();
}

}  // namespace cs::replay::detail
