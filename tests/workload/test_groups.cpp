// Communicators of a layout against Megatron-LM's rank order, derived by hand.
#include <doctest/doctest.h>

#include "core/errors.hpp"
#include "workload/groups.hpp"

using namespace cs;
using workload::GroupKind;
using V = std::vector<int>;

TEST_CASE("groups follow Megatron's tp-cp-dp-pp rank order (tp 2, cp 2, dp 2, pp 2)") {
    workload::ParallelLayout l;
    l.tp = 2, l.cp = 2, l.dp = 2, l.pp = 2, l.ep = 2;
    const workload::RankLayout r(l);
    // rank = t + 2 (c + 2 (d + 2 s)), 16 GPUs. Megatron's groups for this layout:
    //   tp: [0,1] [2,3] ... [14,15]; cp: [0,2] [1,3] [4,6] [5,7] ...; dp: [0,4] [1,5] [2,6]
    //   [3,7] [8,12] ...; pp: [0,8] [1,9] ...
    CHECK(r.gpu(1, 1, 1, 1) == 15);
    CHECK(r.gpu(1, 0, 1, 0) == 5);
    REQUIRE(r.workers() == 4);
    REQUIRE(r.members() == 4);
    // Worker (stage 1, replica 0) = worker 2: base 8, members m = c x 2 + t -> 8, 9, 10, 11.
    CHECK(r.worker(1, 0) == 2);
    CHECK(r.worker_gpus(2) == V{8, 9, 10, 11});
    // Worker (stage 0, replica 1) = worker 1: d = 1 adds 4 -> 4, 5, 6, 7.
    CHECK(r.worker_gpus(1) == V{4, 5, 6, 7});

    // Member 3 of worker 2 is t = 1, c = 1: GPU 11.
    auto g = r.group(GroupKind::Tp, 2, 3);  // c = 1 of (d 0, s 1): [10, 11], GPU 11 second
    CHECK(g.gpus == V{10, 11});
    CHECK(g.index == 1);
    g = r.group(GroupKind::Cp, 2, 3);  // t = 1: [9, 11]
    CHECK(g.gpus == V{9, 11});
    CHECK(g.index == 1);
    g = r.group(GroupKind::Dp, 2, 3);  // d = 0, 1 at t = 1, c = 1, s = 1: [11, 15]
    CHECK(g.gpus == V{11, 15});
    CHECK(g.index == 0);
    g = r.group(GroupKind::Dp, r.worker(1, 1), 0);  // t = c = 0, s = 1: [8, 12], replica 1
    CHECK(g.gpus == V{8, 12});
    CHECK(g.index == 1);
    // Expert view (Megatron-core, expert tp = tp): rank = t + 2 (e + 2 (edp + 2 s)) with ep 2,
    // edp 2. GPU 11 is t = 1, e = 1, edp = 0, s = 1: its ep group is [9, 11].
    g = r.group(GroupKind::Ep, 2, 3);
    CHECK(g.gpus == V{9, 11});
    CHECK(g.index == 1);
    // GPU 13 (t 1, c 0, d 1, s 1: worker 3, member 1) is e = 0, edp = 1: [13, 15].
    g = r.group(GroupKind::Ep, 3, 1);
    CHECK(g.gpus == V{13, 15});
    CHECK(g.index == 0);

    // ep 4 spans all of dp x cp at one t and s: t = 1, s = 1 -> [9, 11, 13, 15].
    l.ep = 4;
    const workload::RankLayout r4(l);
    g = r4.group(GroupKind::Ep, 3, 1);
    CHECK(g.gpus == V{9, 11, 13, 15});
    CHECK(g.index == 2);
}

TEST_CASE("other rank orders") {
    workload::ParallelLayout l;
    l.tp = 2, l.cp = 2, l.dp = 2, l.pp = 2, l.ep = 2;
    l.order = workload::RankOrder::TpDpCpPp;  // rank = t + 2 (d + 2 (c + 2 s))
    const workload::RankLayout r(l);
    CHECK(r.worker_gpus(r.worker(0, 1)) == V{2, 3, 6, 7});  // d = 1: c = 0 -> 2, 3; c = 1 -> 6, 7
    CHECK(r.group(GroupKind::Dp, 0, 0).gpus == V{0, 2});
    CHECK(r.group(GroupKind::Cp, 0, 0).gpus == V{0, 4});
    // dp inside cp: the expert blocks run along d first: t 0, s 0 -> [0, 2] then [4, 6].
    CHECK(r.group(GroupKind::Ep, 0, 2).gpus == V{4, 6});  // member 2 = c 1, t 0

    l.order = workload::RankOrder::TpPpDp;  // cp = 1 here: rank = t + 2 (s + 2 d)
    l.cp = 1;
    const workload::RankLayout q(l);
    CHECK(q.worker_gpus(q.worker(1, 0)) == V{2, 3});
    CHECK(q.group(GroupKind::Dp, q.worker(1, 0), 1).gpus == V{3, 7});
    CHECK(q.group(GroupKind::Ep, q.worker(1, 1), 1).gpus == V{3, 7});
}

TEST_CASE("a group layout that cannot exist is a ConfigError") {
    workload::ParallelLayout l;
    l.dp = 3, l.ep = 2;
    CHECK_THROWS_AS(workload::RankLayout{l}, ConfigError);
}
