// `clustersim plan`'s text: the search's counts, the top k, the best layout's Megatron-LM flags,
// why the runners-up lost and the reasons layouts were invalid.
#include <algorithm>
#include <cstdio>

#include "cli/tables.hpp"
#include "cli/text.hpp"

namespace cs::cli {

namespace {

std::string objective_text(const api::PlanResult& r, double value) {
    switch (r.objective) {
        case api::PlanObjective::Mfu:
            return percent(-value, 2);
        case api::PlanObjective::Cost:
            return fmt("%.4f", value);
        case api::PlanObjective::Energy:
            return fmt("%.4f J", value);
        default:
            return fmt("%.4f s", value);
    }
}

const char* objective_title(const api::PlanResult& r) {
    switch (r.objective) {
        case api::PlanObjective::Mfu:
            return "MFU";
        case api::PlanObjective::Cost:
            return "cost per 1M tokens";
        case api::PlanObjective::Energy:
            return "energy per token";
        default:
            // Over several global batches (--global-batch) the time of 1M tokens is ranked.
            return r.global_batches.size() > 1 ? "time per 1M tokens" : "iteration time";
    }
}

// The headline: what was searched and ranked, the counts of each step, and the warning or note
// when the top k is not proven.
void print_plan_header(std::ostream& out, const api::PlanResult& r) {
    out << "plan " << r.source << ": ";
    if (r.gpu_counts.empty()) {
        out << r.gpus;
    } else {
        for (std::size_t i = 0; i < r.gpu_counts.size(); ++i)
            out << (i == 0 ? "" : i + 1 == r.gpu_counts.size() ? " or " : ", ") << r.gpu_counts[i];
    }
    out << " GPUs";
    if (!r.global_batches.empty()) {
        out << ", global batch ";
        for (std::size_t i = 0; i < r.global_batches.size(); ++i)
            out << (i == 0                             ? ""
                    : i + 1 == r.global_batches.size() ? " or "
                                                       : ", ")
                << r.global_batches[i];
    }
    out << ", " << format_bytes(Bytes{r.hbm_bytes}) << " HBM each; ranked by " << objective_title(r)
        << " under the " << r.network << " network\n";
    out << r.layouts << " layouts: " << r.invalid << " invalid, " << r.pruned_memory
        << " above the memory limit, " << r.pruned_bound << " pruned by the lower bound, ";
    if (r.left_by_limit > 0) out << r.left_by_limit << " left by the confirmation limit, ";
    out << r.simulated << " simulated (analytical network), " << r.confirmed << " simulated again ("
        << r.network << " network)\n";
    if (r.faster_than_analytical > 0)
        out << "warning: " << r.faster_than_analytical << " layout(s) ran faster under the "
            << r.network
            << " network than under the analytical one; the search stops confirming where no "
               "layout left could enter the top "
            << r.top.size() << " assuming none does, so the ranking may miss one\n";
    if (r.contenders > 0 || r.left_by_limit > 0) {
        out << "note: the top " << r.top.size() << " is not proven under the " << r.network
            << " network: confirming stopped at " << r.confirm_limit
            << " layouts (--confirm), and ";
        if (r.contenders > 0)
            out << r.contenders << " more could still enter it (their analytical result beats the "
                << r.top.size() << "-th confirmed one; the best "
                << objective_text(r, r.best_contender) << ")"
                << (r.left_by_limit > 0 ? ", as could " : "");
        if (r.left_by_limit > 0)
            out << r.left_by_limit << " not simulated"
                << (r.contenders > 0 ? "" : " could still enter it")
                << " (their lower bound is no worse than the " << r.top.size()
                << "-th confirmed one)";
        out << "; --confirm all makes it exact\n";
    }
}

// The top k as a table: each layout's figures and where its iteration goes.
void print_plan_top(std::ostream& out, const api::PlanResult& r) {
    std::size_t width = 6;
    for (const auto& c : r.top)
        width = std::max(width, c.layout.text().size());
    const int w = static_cast<int>(width);
    char line[640];
    std::snprintf(line, sizeof line,
                  "%-3s %-*s %10s %10s %7s %10s %6s %7s %7s %7s %6s %6s %6s %6s %6s %6s  %s\n", "#",
                  w, "layout", "iter (s)", "tokens/s", "MFU", "mem/GPU", "of HBM", "compute",
                  "bubble", "exposed", "tp", "cp", "ep", "dp", "pipe", "host", objective_title(r));
    out << line;
    for (std::size_t i = 0; i < r.top.size(); ++i) {
        const auto& c = r.top[i];
        const auto& f = c.figures;
        const auto kind = [&f](std::size_t k) { return percent(f.exposed_by_kind[k], 1); };
        std::snprintf(
            line, sizeof line,
            "%-3zu %-*s %10.4f %10.0f %7s %10s %6s %7s %7s %7s %6s %6s %6s %6s %6s %6s  %s\n",
            i + 1, w, c.layout.text().c_str(), f.iteration_time_s, f.tokens_per_s,
            percent(f.mfu, 1).c_str(), format_bytes(Bytes{f.memory_bytes}).c_str(),
            r.hbm_bytes > 0
                ? percent(static_cast<double>(f.memory_bytes) / static_cast<double>(r.hbm_bytes), 0)
                      .c_str()
                : "-",
            percent(1 - f.idle_fraction, 1).c_str(), percent(f.bubble_fraction, 1).c_str(),
            percent(f.exposed_comm_fraction, 1).c_str(), kind(0).c_str(), kind(1).c_str(),
            kind(2).c_str(), kind(3).c_str(), kind(4).c_str(), percent(f.host_fraction, 1).c_str(),
            objective_text(r, f.objective).c_str());
        out << line;
    }
    out << "(compute: the GPU computing; bubble, exposed communication (by kind: tp, cp, ep, dp, "
           "pipeline) and host: the GPU idle waiting on each; all as fractions of the "
           "iteration)\n";
}

// --guide: how its rules applied, and each of its layouts against the top k.
void print_plan_guide(std::ostream& out, const api::PlanResult& r) {
    out << "\nthe parallelism guide (NVIDIA Megatron-Bridge, \"Parallelism Strategy "
           "Selection\"; docs/plan.md):\n";
    for (const auto& rule : r.guide_reasoning)
        out << "  " << rule << "\n";
    for (const auto& g : r.guide) {
        out << "  " << g.layout.text() << ": ";
        if (!g.figures) {
            out << "not valid: " << g.reason << "\n";
            continue;
        }
        out << fmt("%.4f s", g.figures->iteration_time_s) << ", MFU " << percent(g.figures->mfu, 1)
            << ", " << format_bytes(Bytes{g.figures->memory_bytes}) << " per GPU; ";
        if (g.rank <= r.top.size())
            out << "would rank #" << g.rank << " of the top " << r.top.size();
        else
            out << "below the top " << r.top.size();
        if (!g.versus.empty()) out << "; against #1: " << g.versus;
        out << "\n";
    }
    for (const auto& n : r.guide_not_dividing)
        out << "  " << n << ": not a layout of this cluster\n";
}

// The five most common reasons layouts were invalid.
void print_invalid_reasons(std::ostream& out, const api::PlanResult& r) {
    std::vector<std::pair<std::string, std::size_t>> reasons(r.invalid_reasons.begin(),
                                                             r.invalid_reasons.end());
    std::stable_sort(reasons.begin(), reasons.end(),
                     [](const auto& x, const auto& y) { return x.second > y.second; });
    out << "\ninvalid layouts, the most common reasons:\n";
    for (std::size_t i = 0; i < reasons.size() && i < 5; ++i)
        out << "  " << reasons[i].second << " x: " << reasons[i].first << "\n";
    if (reasons.size() > 5)
        out << "  (" << reasons.size() - 5 << " more reasons; --json lists every layout)\n";
}

}  // namespace

void print_plan(std::ostream& out, const api::PlanResult& r) {
    print_plan_header(out, r);
    out << "\n";
    print_plan_top(out, r);
    if (!r.top.empty()) {
        out << "\nMegatron-LM flags for #1:\n  " << r.top.front().megatron_args << "\n";
        for (const auto& note : r.top.front().notes)
            out << "  (" << note << ")\n";
    }
    if (r.top.size() > 1) out << "\nwhy the others rank lower than #1:\n";
    for (std::size_t i = 1; i < r.top.size(); ++i)
        out << "  #" << i + 1 << ": " << r.top[i].why_lost << "\n";
    if (!r.guide_reasoning.empty()) print_plan_guide(out, r);
    if (!r.invalid_reasons.empty()) print_invalid_reasons(out, r);
}

}  // namespace cs::cli
