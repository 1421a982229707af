// Member folding's check (Accelerator::fold): each member's plans against member 0's, flow by
// flow and link by link, building the link maps that carry member 0's links onto each member's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "network/collectives.hpp"
#include "network/observed_links.hpp"
#include "network/plan_book.hpp"

namespace cs::network::detail {

class FoldCheck {
  public:
    // `copies` members; the network's `real_links` cluster links and its current capacity per
    // solver link (outliving the check).
    FoldCheck(int copies, std::size_t real_links, const double* capacity);
    // Whether member m's plan `b` is member 0's plan `a` carried onto links of member m's own
    // (same shape, sizes, rate caps and capacities; the link maps extended): empty if so, else
    // why not. A hop where b crosses a's own link is a link the members share (a bundle of
    // routing: adaptive's tiers that every rail's flows spread over), accepted if every member
    // crosses it there (shared_by_all). Member 0's own plans are matched against themselves
    // first (m = 0), so that its links are claimed.
    std::string match(const Plan& a, const Plan& b, int m);
    // After every match: empty if each shared link is every member's image of itself (then
    // member 0's flow on it stands for all members' flows there, counted `copies` times), else
    // why not.
    std::string shared_by_all() const;
    // Every class's members' plans (from `book`) matched as match() does, then
    // shared_by_all(): empty if the classes fold, else why not.
    std::string match_classes(PlanBook& book, const std::vector<FoldClass>& classes);
    // The link maps built: member 0's solver links -> member m's, the shared links marked.
    LinkMaps take_maps() { return std::move(maps_); }

  private:
    // Whether link l belongs to member m: claimed for it if no member had it.
    bool claim(topology::LinkId l, int m);
    // Whether `image` is the image of member 0's link `of` alone: recorded if it had none.
    bool preimage(topology::LinkId image, topology::LinkId of);

    LinkMaps maps_;
    // Which member each solver link belongs to (dense: the classes' plans may add rate-cap
    // links as they are made), -1 for none yet.
    std::vector<std::int32_t> owner_;
    // Per solver link, the link of member 0's it is the image of (kNone: none yet).
    std::vector<topology::LinkId> preimage_;
    std::size_t real_links_;
    const double* capacity_;
};

}  // namespace cs::network::detail
