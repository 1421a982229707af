#include "workload/groups.hpp"

#include <string>

#include "core/errors.hpp"

namespace cs::workload {

RankLayout::RankLayout(const ParallelLayout& layout)
    : tp_(layout.tp),
      cp_(layout.cp),
      dp_(layout.dp),
      pp_(layout.pp),
      ep_(layout.ep),
      layout_(layout) {
    if (tp_ < 1 || cp_ < 1 || dp_ < 1 || pp_ < 1 || ep_ < 1)
        throw ConfigError("parallelism: tp, cp, dp, pp and ep must be at least 1");
    if ((dp_ * cp_) % ep_ != 0)
        throw ConfigError("parallelism: ep (" + std::to_string(ep_) + ") must divide dp x cp (" +
                          std::to_string(dp_ * cp_) + ")");
    // dp numbered inside cp: tp-dp-cp-pp, and tp-pp-dp, which has no cp.
    dp_inside_cp_ = layout.order == RankOrder::TpDpCpPp || layout.order == RankOrder::TpPpDp;
}

void RankLayout::place(std::vector<int> gpus) {
    if (static_cast<int>(gpus.size()) != layout_.world_size())
        throw ConfigError("placement: " + std::to_string(gpus.size()) + " GPUs for a layout of " +
                          std::to_string(layout_.world_size()));
    placement_ = std::move(gpus);
}

int RankLayout::gpu(int t, int c, int d, int s) const {
    int rank = 0;
    switch (layout_.order) {
        case RankOrder::TpDpCpPp:
            rank = t + tp_ * (d + dp_ * (c + cp_ * s));
            break;
        case RankOrder::TpPpDp:
            rank = t + tp_ * (s + pp_ * (d + dp_ * c));
            break;
        case RankOrder::TpCpPpDp:
            rank = t + tp_ * (c + cp_ * (s + pp_ * d));
            break;
        case RankOrder::TpCpDpPp:
            rank = t + tp_ * (c + cp_ * (d + dp_ * s));
            break;
    }
    return placement_.empty() ? rank : placement_[static_cast<std::size_t>(rank)];
}

int RankLayout::member_gpu(int worker, int member) const {
    return gpu(member % tp_, member / tp_, replica_of(worker), stage_of(worker));
}

std::vector<int> RankLayout::worker_gpus(int worker) const {
    std::vector<int> gpus;
    gpus.reserve(static_cast<std::size_t>(members()));
    for (int m = 0; m < members(); ++m)
        gpus.push_back(member_gpu(worker, m));
    return gpus;
}

CollectiveGroup RankLayout::dp_cp_group(int worker, int member) const {
    const int t = member % tp_, c = member / tp_;
    const int d = replica_of(worker), s = stage_of(worker);
    CollectiveGroup g;
    // Rank order: the inner of the two dimensions varies fastest.
    for (int outer = 0; outer < (dp_inside_cp_ ? cp_ : dp_); ++outer)
        for (int inner = 0; inner < (dp_inside_cp_ ? dp_ : cp_); ++inner) {
            const int ci = dp_inside_cp_ ? outer : inner, di = dp_inside_cp_ ? inner : outer;
            if (ci == c && di == d) g.index = static_cast<int>(g.gpus.size());
            g.gpus.push_back(gpu(t, ci, di, s));
        }
    return g;
}

CollectiveGroup RankLayout::group(GroupKind kind, int worker, int member) const {
    const int t = member % tp_, c = member / tp_;
    const int d = replica_of(worker), s = stage_of(worker);
    CollectiveGroup g;
    switch (kind) {
        case GroupKind::Tp:
            for (int i = 0; i < tp_; ++i)
                g.gpus.push_back(gpu(i, c, d, s));
            g.index = t;
            break;
        case GroupKind::Cp:
            for (int i = 0; i < cp_; ++i)
                g.gpus.push_back(gpu(t, i, d, s));
            g.index = c;
            break;
        case GroupKind::Dp:
            for (int i = 0; i < dp_; ++i)
                g.gpus.push_back(gpu(t, c, i, s));
            g.index = d;
            break;
        case GroupKind::CpInner:
        case GroupKind::CpOuter: {
            // cp_comm_type a2a+p2p: blocks of a = cp_a2a_size consecutive context ranks.
            const int a = layout_.cp_a2a_size > 0 ? layout_.cp_a2a_size : cp_;
            if (kind == GroupKind::CpInner) {
                for (int i = c / a * a; i < c / a * a + a; ++i)
                    g.gpus.push_back(gpu(t, i, d, s));
                g.index = c % a;
            } else {
                for (int i = c % a; i < cp_; i += a)
                    g.gpus.push_back(gpu(t, i, d, s));
                g.index = c / a;
            }
            break;
        }
        case GroupKind::Ep: {
            // Position among the stage's dp x cp GPUs of tensor rank t, in rank order.
            const int j = dp_inside_cp_ ? d + dp_ * c : c + cp_ * d;
            const int first = j / ep_ * ep_;
            for (int i = first; i < first + ep_; ++i) {
                const int ci = dp_inside_cp_ ? i / dp_ : i % cp_;
                const int di = dp_inside_cp_ ? i % dp_ : i / cp_;
                g.gpus.push_back(gpu(t, ci, di, s));
            }
            g.index = j - first;
            break;
        }
    }
    return g;
}

}  // namespace cs::workload
