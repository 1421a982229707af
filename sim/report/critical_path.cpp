#include "report/critical_path.hpp"

#include <algorithm>

namespace cs::report {

CriticalPath::CriticalPath(std::size_t workers) : passes_(1), last_(workers, 0) {}

void CriticalPath::on_transfer(const replay::TransferRecord& t) {
    // Pipeline transfers are reported when the receiving pass starts, before it ends.
    if (t.to_pass == 0 || t.src_worker == t.dst_worker) return;
    if (pending_input_.size() <= t.to_pass) {
        pending_input_.resize(t.to_pass + 1, 0);
        pending_end_.resize(t.to_pass + 1);
    }
    pending_input_[t.to_pass] = t.from_pass;
    pending_end_[t.to_pass] = t.end;
}

void CriticalPath::on_pass(const replay::PassRecord& r) {
    if (passes_.size() <= r.id) passes_.resize(r.id + 1);
    Pass& p = passes_[r.id];
    p.worker = r.worker;
    p.start = r.start;
    p.end = r.end;
    p.previous = last_[static_cast<std::size_t>(r.worker)];
    if (r.id < pending_input_.size() && pending_input_[r.id] != 0) {
        p.input = pending_input_[r.id];
        p.input_end = pending_end_[r.id];
    }
    last_[static_cast<std::size_t>(r.worker)] = r.id;
}

CriticalPath::Result CriticalPath::result() const {
    Result out;
    out.per_worker.assign(last_.size(), Time::zero());
    // The pass that ended last (the lowest id on a tie).
    std::uint64_t at = 0;
    for (std::uint64_t id = 1; id < passes_.size(); ++id)
        if (passes_[id].end > Time::zero() && (at == 0 || passes_[id].end > passes_[at].end))
            at = id;
    while (at != 0) {
        const Pass& p = passes_[at];
        out.per_worker[static_cast<std::size_t>(p.worker)] += p.end - p.start;
        out.passes += p.end - p.start;
        ++out.length;
        // It waited for whichever came later: its input's arrival or its worker's previous pass
        // (the input on a tie: the other worker's chain is what held it).
        const Time previous_end = p.previous ? passes_[p.previous].end : Time::zero();
        if (p.input != 0 && p.input_end >= previous_end)
            at = p.input;
        else
            at = p.previous;
    }
    for (std::size_t w = 0; w < out.per_worker.size(); ++w)
        if (out.per_worker[w] > Time::zero() &&
            (out.worker < 0 ||
             out.per_worker[w] > out.per_worker[static_cast<std::size_t>(out.worker)]))
            out.worker = static_cast<int>(w);
    return out;
}

}  // namespace cs::report
