#include "fit/stream_gaps.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>

namespace cs::api {

namespace {

// Whether an event of another stream of the device ends in (from, to]. `ends` holds the device's
// (end, stream) pairs, sorted.
bool other_stream_ends_in(const std::vector<std::pair<double, std::int64_t>>& ends,
                          std::int64_t stream, double from, double to) {
    auto it = std::upper_bound(ends.begin(), ends.end(),
                               std::make_pair(from, std::numeric_limits<std::int64_t>::max()));
    for (; it != ends.end() && it->first <= to; ++it)
        if (it->second != stream) return true;
    return false;
}

}  // namespace

StreamGaps stream_gaps(const TorchTrace& t) {
    StreamGaps out;
    out.launch_gap_us.assign(t.gpu.size(), -1.0);
    std::unordered_map<std::int64_t, const TraceRuntimeCall*> calls;
    for (const auto& c : t.runtime)
        if (c.correlation >= 0) calls.emplace(c.correlation, &c);
    out.launched_us.assign(t.gpu.size(), std::numeric_limits<double>::quiet_NaN());
    for (std::size_t i = 0; i < t.gpu.size(); ++i)
        if (const auto c = calls.find(t.gpu[i].correlation); c != calls.end())
            out.launched_us[i] = c->second->ts_us;
    // Keyed by (device, stream): a trace may hold several GPUs with the same stream numbers.
    std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::size_t>> streams;
    std::map<std::int64_t, std::vector<std::pair<double, std::int64_t>>> ends;  // per device
    for (std::size_t i = 0; i < t.gpu.size(); ++i) {
        const auto& g = t.gpu[i];
        streams[{g.device, g.stream}].push_back(i);
        ends[g.device].emplace_back(g.end_us(), g.stream);
    }
    for (auto& [device, e] : ends)
        std::sort(e.begin(), e.end());
    for (auto& [stream, evs] : streams) {
        std::stable_sort(evs.begin(), evs.end(), [&](std::size_t a, std::size_t b) {
            return t.gpu[a].ts_us < t.gpu[b].ts_us;
        });
        const auto& device_ends = ends[stream.first];
        for (std::size_t i = 1; i < evs.size(); ++i) {
            const auto& a = t.gpu[evs[i - 1]];
            const auto& b = t.gpu[evs[i]];
            const auto ca = calls.find(a.correlation);
            const auto cb = calls.find(b.correlation);
            if (cb == calls.end()) continue;
            const double gap = b.ts_us - a.end_us();
            if (gap < 0) continue;
            if (cb->second->ts_us < a.end_us()) {
                if (!other_stream_ends_in(device_ends, stream.second, a.end_us(), b.ts_us))
                    out.launch_gap_us[evs[i]] = gap;
            } else if (ca != calls.end() && ca->second->tid == cb->second->tid &&
                       cb->second->ts_us >= ca->second->ts_us) {
                // Launch calls out of order (a hand-edited trace) give no interval.
                out.host_us.push_back(cb->second->ts_us - ca->second->ts_us);
            }
        }
    }
    return out;
}

}  // namespace cs::api
