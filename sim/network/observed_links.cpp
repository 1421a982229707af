#include "network/observed_links.hpp"

namespace cs::network::detail {

void RealLinksOnly::on_link_rate(Time at, LinkId link, double bytes_per_s, int flows) {
    if (link >= links) return;
    if (twins) {
        const LinkRate r{link, bytes_per_s, flows};
        on_link_rates(at, std::span<const LinkRate>(&r, 1));
        return;
    }
    for (NetworkObserver* o : targets)
        o->on_link_rate(at, link, bytes_per_s, flows);
    if (maps.is_shared(link)) return;  // every member's: told once
    for (std::size_t m = 1; m < maps.size(); ++m)
        for (NetworkObserver* o : repeated)
            o->on_link_rate(at, image(link, m), bytes_per_s, flows);
}

void RealLinksOnly::on_link_rates(Time at, std::span<const LinkRate> rates) {
    const std::size_t room = rates.size() * (twins ? longest_chain : 1);
    if (rate_room_size < room) {
        rate_room = std::make_unique_for_overwrite<LinkRate[]>(room);
        rate_room_size = room;
    }
    LinkRate* const first = rate_room.get();
    LinkRate* out = first;
    for (const LinkRate& r : rates)
        if (r.link < links) *out++ = r;
    if (out == first) return;
    if (twins) {
        // The other links of each rate's chain carry the same flows at the same rate.
        const LinkId* twin = twins->data();
        LinkRate* const reals = out;
        for (const LinkRate* r = first; r != reals; ++r)
            for (LinkId t = twin[r->link]; t != r->link; t = twin[t])
                *out++ = {t, r->bytes_per_s, r->flows};
        if (out != reals && wants_ordered_link_rates())
            std::sort(first, out,
                      [](const LinkRate& a, const LinkRate& b) { return a.link < b.link; });
    }
    const std::span<const LinkRate> told(first, out);
    for (SummingObserver* o : copiers)
        o->on_link_rates(at, told);
    if (repeated.empty()) return;
    real_rates.assign(first, out);
    if (maps.size() > 1) {
        const std::size_t n = real_rates.size();
        for (std::size_t m = 1; m < maps.size(); ++m)
            for (std::size_t i = 0; i < n; ++i) {
                LinkRate r = real_rates[i];
                if (maps.is_shared(r.link)) continue;  // every member's: told once
                r.link = image(r.link, m);
                real_rates.push_back(r);
            }
        if (std::any_of(repeated.begin(), repeated.end(),
                        [](const NetworkObserver* o) { return o->wants_ordered_link_rates(); }))
            std::sort(real_rates.begin(), real_rates.end(),
                      [](const LinkRate& a, const LinkRate& b) { return a.link < b.link; });
    }
    for (NetworkObserver* o : repeated)
        o->on_link_rates(at, real_rates);
}

void RealLinksOnly::add(NetworkObserver* target, SummingObserver* summer, bool tallied) {
    targets.push_back(target);
    const bool copier = summer && summer->copies_link_images();
    if (copier)
        copiers.push_back(summer);
    else
        repeated.push_back(target);
    if (tallied) {
        tallied_targets.push_back(summer);
    } else {
        flow_targets.push_back(target);
        if (copier) flow_copiers.push_back(summer);
    }
    summing.push_back(summer);
    if (summer) (summer->sketch_keys() ? sketches : tables).push_back(summer);
    if (summer && summer->sketch_keys()) keys = summer->sketch_keys();
}

void RealLinksOnly::tell_tallies(FlowSolver& solver, const std::vector<LinkId>& chain_of) {
    if (tallied_targets.empty()) return;
    std::vector<SummingObserver::LinkTally> told;
    for (LinkId l = 0; l < links; ++l) {
        const auto t = solver.tally(l < chain_of.size() ? chain_of[l] : l);
        if (!t.counted) continue;
        told.push_back(
            {l, t.bytes, t.busy, t.shared, static_cast<int>(t.peak), static_cast<int>(t.flows)});
    }
    solver.take_tallies();
    if (told.empty()) return;
    for (SummingObserver* o : tallied_targets)
        o->on_link_tallies(told);
}

void RealLinksOnly::tell_images() {
    if (maps.size() < 2 || copiers.empty()) return;
    std::vector<SummingObserver::LinkImage> images;
    const auto& own = maps.image[0];
    for (std::size_t m = 1; m < maps.size(); ++m)
        for (std::size_t k = 0; k < own.size(); ++k)
            if (own[k] < links && k < maps.image[m].size() && maps.image[m][k] != LinkMaps::kNone &&
                maps.image[m][k] != own[k])
                images.push_back({own[k], maps.image[m][k]});
    std::sort(images.begin(), images.end(),
              [](const SummingObserver::LinkImage& a, const SummingObserver::LinkImage& b) {
                  return a.image < b.image;
              });
    for (SummingObserver* o : copiers)
        o->on_link_images(images);
}

bool RealLinksOnly::wants_ordered_link_rates() const {
    return std::any_of(targets.begin(), targets.end(),
                       [](const NetworkObserver* o) { return o->wants_ordered_link_rates(); });
}

void RealLinksOnly::tell_sends(Time at, const Routes& r, double bytes, std::int64_t count,
                               bool timed) {
    // A flow's holding time, as start() times it (the last one reused for equal arguments).
    double last_fb = -1, last_rate = -1;
    Time last_t = Time::zero();
    const auto holds = [&](double fb, double rate) {
        if (!timed) return Time::zero();
        if (fb != last_fb || rate != last_rate) {
            last_fb = fb;
            last_rate = rate;
            last_t = transfer_time(fb, Bandwidth{rate});
        }
        return last_t;
    };
    if (!tables.empty())
        for (const Routes::Flow& f : r.flows) {
            const double fb = f.bytes_per_size * bytes;
            if (fb <= 0 || f.links == 0) continue;
            const Time t = holds(fb, f.rate);
            const NetworkObserver::FlowStart flow{
                at, std::span<const LinkId>(r.path.data() + f.first, f.links),
                whole_bytes(fb) * static_cast<double>(count), false, t * count};
            for (SummingObserver* o : tables)
                o->on_flow_start(flow);
        }
    if (sketches.empty()) return;
    // The sketch is linear: a group's flows add their summed keys times the group's whole
    // bytes and holding time, as each flow would add its own.
    if (!r.grouped) {
        for (const Routes::Flow& f : r.flows) {
            if (f.links == 0) continue;
            const PathKeys k =
                path_keys(*keys, std::span<const LinkId>(r.path.data() + f.first, f.links));
            auto g = std::find_if(r.groups.begin(), r.groups.end(), [&](const auto& x) {
                return x.bytes_per_size == f.bytes_per_size && x.rate == f.rate;
            });
            if (g == r.groups.end())
                g = r.groups.insert(r.groups.end(), {f.bytes_per_size, f.rate, {}});
            g->keys = {modp::add(g->keys.bytes, k.bytes), modp::add(g->keys.holds, k.holds)};
        }
        r.grouped = true;
    }
    std::uint64_t term = 0;
    for (const Routes::Group& g : r.groups) {
        const double fb = g.bytes_per_size * bytes;
        if (fb <= 0) continue;
        term =
            modp::add(term, link_sketch_term(g.keys, whole_bytes(fb) * static_cast<double>(count),
                                             holds(fb, g.rate) * count));
    }
    for (SummingObserver* o : sketches)
        o->on_link_sketch(term);
}

}  // namespace cs::network::detail
