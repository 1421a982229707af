#include "network/fold_check.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace cs::network::detail {

FoldCheck::FoldCheck(int copies, std::size_t real_links, const double* capacity)
    : real_links_(real_links), capacity_(capacity) {
    maps_.image.resize(static_cast<std::size_t>(copies));
}

namespace {
// Records `value` for link l unless it has another (`none`: nothing yet); whether l's is `value`.
// The table is dense over solver links, grown as links are met (rate-cap links come after the
// cluster's `real` ones).
template <typename T>
bool record(std::vector<T>& table, LinkId l, T value, T none, std::size_t real) {
    if (l >= table.size())
        table.resize(std::max<std::size_t>({std::size_t{l} + 1, 2 * table.size(), real}), none);
    T& at = table[l];
    if (at == none) at = value;
    return at == value;
}
}  // namespace

bool FoldCheck::preimage(LinkId image, LinkId of) {
    return record(preimage_, image, of, LinkMaps::kNone, real_links_);
}

bool FoldCheck::claim(LinkId l, int m) {
    return record(owner_, l, std::int32_t{m}, std::int32_t{-1}, real_links_);
}

std::string FoldCheck::match_classes(PlanBook& book, const std::vector<FoldClass>& classes) {
    const std::size_t copies = maps_.image.size();
    for (const FoldClass& c : classes) {
        const std::size_t n = c.collective ? c.groups.size() : c.src.size();
        if (n != copies || (!c.collective && c.dst.size() != n))
            return "a class without one transfer per member";
        const auto plan = [&](std::size_t m) -> const Plan& {
            return c.collective ? book.collective_plan(c.kind, c.groups[m], c.size, Algorithm::Auto)
                                : book.p2p_plan(c.src[m], c.dst[m]);
        };
        const Plan& a = plan(0);  // plans are never erased while the book lives
        (void)match(a, a, 0);
        for (std::size_t m = 1; m < copies; ++m) {
            const Plan& b = plan(m);
            if (a.algorithm != b.algorithm) return "members run different algorithms";
            if (auto problem = match(a, b, static_cast<int>(m)); !problem.empty()) return problem;
        }
    }
    // Member 0's own links must be claimed by member 0 alone (checked by claim, in both orders),
    // and a link one member shares with member 0 shared by all. Observers get every member's
    // real links.
    return shared_by_all();
}

std::string FoldCheck::match(const Plan& a, const Plan& b, int m) {
    if (a.fixed_latency != b.fixed_latency || a.phases.size() != b.phases.size() ||
        a.protocol != b.protocol || a.protocol_step != b.protocol_step)
        return "plans of different shape";
    for (std::size_t p = 0; p < a.phases.size(); ++p) {
        const Phase& pa = a.phases[p];
        const Phase& pb = b.phases[p];
        if (pa.steps != pb.steps || pa.latency != pb.latency || pa.flows.size() != pb.flows.size())
            return "phases of different shape";
        for (std::size_t f = 0; f < pa.flows.size(); ++f) {
            const FlowTemplate& fa = pa.flows[f];
            const FlowTemplate& fb = pb.flows[f];
            if (fa.bytes_per_size != fb.bytes_per_size || fa.rate_cap != fb.rate_cap ||
                fa.path.size() != fb.path.size())
                return "flows of different size, rate cap or route length";
            for (std::size_t h = 0; h < fa.path.size(); ++h) {
                const LinkId la = fa.path[h], lb = fb.path[h];
                if (capacity_[la] != capacity_[lb]) return "links of different capacity";
                if (m > 0 && la == lb && claim(la, 0)) {
                    maps_.share(la);
                } else if (!claim(la, 0) || !claim(lb, m)) {
                    return "members share link " + std::to_string(la < real_links_ ? la : lb);
                }
                if (!maps_.set(la, lb, static_cast<std::size_t>(m)))
                    return "routes that no link map carries onto each other (ECMP)";
                // One to one: two of member 0's links carried onto one of member m's would let
                // member m's flows meet where member 0's do not.
                if (!preimage(lb, la))
                    return "routes that no link map carries one to one (link " +
                           std::to_string(lb) + " is the image of two)";
            }
        }
    }
    return {};
}

std::string FoldCheck::shared_by_all() const {
    for (LinkId l = 0; l < maps_.shared.size(); ++l) {
        if (maps_.shared[l] == 0) continue;
        for (std::size_t m = 1; m < maps_.size(); ++m)
            if (maps_.find(l, m) != l)
                return "link " + std::to_string(l) + " shared by some members, not all";
    }
    return {};
}

}  // namespace cs::network::detail
