#include "fit/diff.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.hpp"
#include "core/input_file.hpp"
#include "fit/kernel_table.hpp"
#include "fit/stream_gaps.hpp"
#include "ingest/torch_trace.hpp"
#include "schedule/schedule.hpp"
#include "workload/plan.hpp"

namespace cs::api {
namespace {

using workload::KernelKind;
using workload::ModelPart;

bool has(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}

constexpr int kKinds = static_cast<int>(kKernelKinds);
const char* const kPasses[] = {"forward", "backward", "optimizer", "other"};

int kind_index(const std::string& name) {
    for (int k = 0; k < kKinds; ++k)
        if (kernel_kind_name(static_cast<KernelKind>(k)) == name) return k;
    return static_cast<int>(KernelKind::Unmapped);
}

bool is_norm(KernelKind k) {
    return k == KernelKind::Norm || k == KernelKind::RmsNorm;
}

// The layer-pass rows of L layers, in the order the table prints them: embedding forward,
// layers 0..L-1 forward, head forward, head backward, layers L-1..0 backward, embedding backward,
// gradient accumulation.
struct LayerRows {
    int layers = 0, first_layer = 0;
    std::vector<LayerPassLine> rows;
    LayerRows(int l, int first) : layers(l), first_layer(first) {
        const auto add = [&](const std::string& name, int layer, const char* pass) {
            LayerPassLine line;
            line.name = name;
            line.layer = layer;
            line.pass = pass;
            rows.push_back(line);
        };
        add("embedding forward", -1, "forward");
        for (int i = 0; i < l; ++i)
            add("layer " + std::to_string(first + i) + " forward", first + i, "forward");
        add("head forward", -1, "forward");
        add("head backward", -1, "backward");
        for (int i = l - 1; i >= 0; --i)
            add("layer " + std::to_string(first + i) + " backward", first + i, "backward");
        add("embedding backward", -1, "backward");
        add("grad accumulate", -1, "backward");
    }
    // i: -1 embedding, 0..L-1 the stage's layers (0-based), L head.
    LayerPassLine& forward(int i) { return rows[static_cast<std::size_t>(i + 1)]; }
    LayerPassLine& backward(int i) {
        if (i >= layers) return rows[static_cast<std::size_t>(layers + 2)];  // head
        if (i < 0) return rows[static_cast<std::size_t>(2 * layers + 3)];    // embedding
        return rows[static_cast<std::size_t>(layers + 3 + (layers - 1 - i))];
    }
    LayerPassLine& accumulate() { return rows.back(); }
};

struct Slice {
    double ts = 0, end = 0;
    std::string name;
    bool microbatch = false;  // a pass slice (args.microbatch)
    // A pass slice's pass, from its "pass" argument (never from its name, "F3").
    schedule::Pass pass = schedule::Pass::Forward;
    int first_layer = 0, layers = 0, repeat = 1;
    // A step slice's kernel class and piece of the model, from its "kernel" and "part"
    // arguments (never from its name, "qkv dgrad"). A collective the compute stream waits for
    // has neither: no kernel of the profile's kinds, counted with the layers.
    KernelKind kernel = KernelKind::Unmapped;
    ModelPart part = ModelPart::Layers;
    bool forward() const { return pass == schedule::Pass::Forward; }
};

// The layers a simulated trace may name: the model's limit (docs/robustness.md).
constexpr std::int64_t kMaxTraceLayers = 1'000'000;

// The fields of one traceEvents entry of the simulated trace, read with their types checked: the
// file is clustersim's, but a user may hand any JSON, and nlohmann's value() throws (or casts a
// float beyond int64, undefined behaviour) on what it does not expect.
class EntryFields {
  public:
    EntryFields(const nlohmann::json& e, const std::string& file, std::size_t index)
        : e_(e), file_(file), index_(index) {}

    std::string text(const nlohmann::json& in, const char* key) const {
        const auto it = in.find(key);
        if (it == in.end()) return {};
        if (!it->is_string()) fail(key, "a string");
        return it->get<std::string>();
    }
    double real(const nlohmann::json& in, const char* key) const {
        const auto it = in.find(key);
        if (it == in.end()) return 0;
        if (!it->is_number() || !std::isfinite(it->get<double>()) ||
            std::abs(it->get<double>()) > 1e18)
            fail(key, "a finite number of microseconds");
        return it->get<double>();
    }
    std::int64_t whole(const nlohmann::json& in, const char* key, std::int64_t fallback,
                       std::int64_t lo, std::int64_t hi) const {
        const auto it = in.find(key);
        if (it == in.end()) return fallback;
        const std::string range =
            "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
        if (it->is_number_integer()) {
            // An unsigned number above hi is refused before it is read as int64 (hi may be
            // INT64_MAX, so hi + 1 is no sentinel).
            if (it->is_number_unsigned() &&
                it->get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
                fail(key, range);
            const auto v = it->get<std::int64_t>();
            if (v < lo || v > hi) fail(key, range);
            return v;
        }
        if (it->is_number_float()) {
            // Cast only below 2^63 (INT64_MAX as a double rounds up to 2^63, which no int64
            // holds), then check the whole number itself against the range.
            const double v = it->get<double>();
            if (!(v >= static_cast<double>(lo) && v < 0x1p63) || v != std::floor(v))
                fail(key, range);
            const auto w = static_cast<std::int64_t>(v);
            if (w < lo || w > hi) fail(key, range);
            return w;
        }
        fail(key, range);
    }
    // The row of `table` named by `key`; refused, listing the names, when it names none.
    template <class E, std::size_t N>
    E named(const nlohmann::json& in, const char* key, const std::array<Named<E>, N>& table) const {
        if (const auto v = find_named(table, text(in, key))) return *v;
        std::string names;
        for (const auto& n : names_of(table))
            names += (names.empty() ? "" : ", ") + n;
        fail(key, "one of " + names);
    }
    // The pass a pass slice stands for: its "pass" argument, as TraceWriter writes it.
    schedule::Pass pass(const nlohmann::json& in) const {
        return named(in, "pass", schedule::kPassNames);
    }
    // A compute step slice's "kernel" and "part" arguments, as TraceWriter writes them. A trace
    // without them was written by a clustersim from before it wrote them: it is refused, never
    // guessed from the step names.
    void step_kind(const nlohmann::json& in, Slice& s) const {
        for (const char* key : {"kernel", "part"})
            if (!in.contains(key))
                throw ConfigError(SourceLocation{file_},
                                  "traceEvents entry " + std::to_string(index_) + ": step \"" +
                                      s.name + "\" has no \"" + key +
                                      "\" argument (a trace of an older clustersim); re-run "
                                      "`clustersim run --trace F.json` to write it anew");
        s.kernel = named(in, "kernel", workload::kKernelKindNames);
        s.part = named(in, "part", workload::kModelPartNames);
    }
    const nlohmann::json& args() const {
        static const nlohmann::json none = nlohmann::json::object();
        const auto it = e_.find("args");
        if (it == e_.end()) return none;
        if (!it->is_object()) fail("args", "an object");
        return *it;
    }

    [[noreturn]] void fail(const char* key, const std::string& expected) const {
        throw ConfigError(SourceLocation{file_},
                          "traceEvents entry " + std::to_string(index_) + ": \"" + key +
                              "\" is not " + expected +
                              "; give the file `clustersim run --trace F.json` wrote");
    }

  private:
    const nlohmann::json& e_;
    const std::string& file_;
    std::size_t index_;
};

struct MeasuredKernel {
    double ts = 0, ms = 0;
    int pass = 3;
    KernelKind kind = KernelKind::Unmapped;
    std::int64_t op_id = -1;
};

// The forward pass's norm operators, measured (the commonest count per pass) and as the simulated
// model has them, when they differ: a sign of another model (mismatch_warning).
struct NormCounts {
    std::int64_t measured = -1, simulated = -1, per_layer = 0, layers = 0, after = 0;
};

// The first layer of the simulated forward passes, or -1 when there are none or (with a warning)
// when they run several model chunks.
int single_chunk_first_layer(DiffResult& r, const std::vector<Slice>& pass_slices) {
    int first_layer = -1;
    bool chunks = false;
    for (const auto& p : pass_slices) {
        if (!p.forward()) continue;
        const int fl = p.first_layer;
        if (first_layer >= 0 && fl != first_layer) chunks = true;
        if (first_layer < 0) first_layer = fl;
    }
    if (first_layer >= 0 && chunks) {
        r.warnings.push_back(
            "no per-layer-pass comparison: the simulated rank runs several model chunks "
            "(interleaved stages), which the profile's passes cannot be matched to");
        return -1;
    }
    return first_layer;
}

// The simulated side of the layer rows: the passes counted, and the norms the model has.
struct SimulatedLayers {
    std::int64_t forwards = 0, backwards = 0;  // pass slices (backwards: full or input halves)
    std::int64_t norm_steps = 0;               // the first forward's layer norms, with repeats
    int post = 0;                              // the first forward's norms after the layers
};

// Simulated: per pass slice, its steps. A trace holds a layer's step either once per layer or
// folded into one slice with a `repeat` count: either way the layers' share is the step's total
// over the layer count. Steps are the embedding's, the head's or the layers' by their part.
// The first forward also says how many norms a layer has (its layer norm steps, counted with
// their repeats, over the layers) and how many follow the layers.
SimulatedLayers add_simulated_layers(LayerRows& rows, const std::vector<Slice>& pass_slices,
                                     const std::vector<Slice>& steps) {
    const int L = rows.layers;
    SimulatedLayers sim;
    for (const auto& p : pass_slices) {
        const bool fwd = p.forward();
        if (fwd)
            ++sim.forwards;
        else if (p.pass == schedule::Pass::Backward || p.pass == schedule::Pass::BackwardInput)
            ++sim.backwards;
        for (const auto& st : steps) {
            if (!(st.ts >= p.ts && st.ts < p.end)) continue;
            const double ms = (st.end - st.ts) / 1000;
            if (st.kernel == KernelKind::MixedAccumulate) {
                rows.accumulate().simulated_ms += ms;
                continue;
            }
            // The optimizer step (ModelPart::Model) runs outside every pass.
            const bool layer = st.part == ModelPart::Layers || st.part == ModelPart::Model;
            if (fwd && sim.forwards == 1 && st.kernel == KernelKind::Norm) {
                if (layer)
                    sim.norm_steps += st.repeat;
                else
                    ++sim.post;
            }
            const int outside = st.part == ModelPart::Embedding ? -1 : L;
            if (layer) {
                for (int i = 0; i < L; ++i)
                    (fwd ? rows.forward(i) : rows.backward(i)).simulated_ms += ms / L;
            } else if (fwd) {
                rows.forward(outside).simulated_ms += ms;
            } else {
                rows.backward(outside).simulated_ms += ms;
            }
        }
    }
    return sim;
}

// A run of measured forward (pass 0) or backward (1) kernels and the norm operators in it.
struct Instance {
    int pass = 0, norms = 0;
    std::vector<std::size_t> kernels;  // indices into the measured kernels
};

// A norm operator may launch several kernels (LayerNorm's backward: two): true for the first
// kernel of each norm operator. `last` carries the previous norm kernel's operator.
bool norm_step(const MeasuredKernel& k, std::int64_t& last) {
    if (!is_norm(k.kind)) return false;
    const bool fresh = k.op_id < 0 || k.op_id != last;
    last = k.op_id;
    return fresh;
}

// Measured: runs of forward or backward kernels in time order (`measured` sorted by time), broken
// by the optimizer's and unattributed kernels, each with its norm operators counted; gradient
// accumulation is set apart in `rows`.
std::vector<Instance> measured_instances(const std::vector<MeasuredKernel>& measured,
                                         LayerRows& rows) {
    std::vector<Instance> instances;
    bool open = false;
    auto& accumulate = rows.accumulate();
    for (std::size_t i = 0; i < measured.size(); ++i) {
        const auto& k = measured[i];
        if (k.kind == KernelKind::MixedAccumulate) {
            accumulate.measured_ms += k.ms;
            ++accumulate.measured_kernels;
            continue;
        }
        if (k.pass > 1) {
            open = false;
            continue;
        }
        if (!open || instances.back().pass != k.pass) instances.push_back({k.pass, 0, {}});
        open = true;
        instances.back().kernels.push_back(i);
    }
    for (auto& in : instances) {
        std::int64_t last = -2;
        for (const auto i : in.kernels)
            in.norms += norm_step(measured[i], last) ? 1 : 0;
    }
    return instances;
}

// Per pass (forward, backward): the commonest norm count of its instances that have norms (the
// larger on a tie), 0 when none has.
std::array<int, 2> common_norms(const std::vector<Instance>& instances) {
    std::array<int, 2> common{0, 0};
    for (int pass = 0; pass < 2; ++pass) {
        std::map<int, int> counts;
        for (const auto& in : instances)
            if (in.pass == pass && in.norms > 0) ++counts[in.norms];
        int best = 0;
        for (const auto& [n, c] : counts)
            if (c >= best) {
                best = c;
                common[static_cast<std::size_t>(pass)] = n;
            }
    }
    return common;
}

// How the measured passes are cut into layers: norms per layer and after the layers, per pass.
// The simulated model's when its passes have norm steps (then the profile must hold as many),
// else inferred from the profile.
struct NormCut {
    std::array<int, 2> common{0, 0};  // per pass: norms of a whole instance
    std::int64_t sim_k = 0;           // the simulated model's norms per layer; 0: none
    int sim_post = 0, layers = 0;
    std::int64_t k_of(int pass) const {
        return sim_k > 0 ? sim_k : common[static_cast<std::size_t>(pass)] / layers;
    }
    std::int64_t post_of(int pass) const {
        return sim_k > 0 ? sim_post : common[static_cast<std::size_t>(pass)] - k_of(pass) * layers;
    }
};

// True when both passes cut into the layers; else false with a warning (and `norms` filled when
// the profile holds another model's norm count).
bool cut_fits(DiffResult& r, const NormCut& cut, NormCounts& norms) {
    const int L = cut.layers;
    const std::int64_t sim_k = cut.sim_k;
    const int sim_post = cut.sim_post;
    for (int pass = 0; pass < 2; ++pass) {
        const int common = cut.common[static_cast<std::size_t>(pass)];
        if (sim_k > 0 && common != sim_k * L + sim_post) {
            norms = {common, sim_k * L + sim_post, sim_k, L, sim_post};
            r.warnings.push_back(
                std::string("no per-layer-pass comparison: the measured ") + kPasses[pass] +
                " passes hold " + std::to_string(common) + " norm operator(s), the simulated one " +
                std::to_string(sim_k) + " per layer x " + std::to_string(L) + " layers + " +
                std::to_string(sim_post) + " = " + std::to_string(sim_k * L + sim_post) +
                ": not the same model (or not the same pipeline stage)");
            return false;
        }
        if (common == 0 || cut.k_of(pass) < 1 || cut.post_of(pass) >= L) {
            r.warnings.push_back(std::string("no per-layer-pass comparison: the measured ") +
                                 kPasses[pass] + " passes hold " + std::to_string(common) +
                                 " norm operator(s), which do not cut into the simulated trace's " +
                                 std::to_string(L) +
                                 " layers (at least one norm per layer is needed)");
            return false;
        }
    }
    return true;
}

// Adds the kernels of the instances whose norm count is their pass's common one to the layer
// rows; returns the instances added per pass and (with a warning) leaves out the rest.
std::array<std::int64_t, 2> add_measured_layers(DiffResult& r, LayerRows& rows,
                                                const std::vector<Instance>& instances,
                                                const std::vector<MeasuredKernel>& measured,
                                                const NormCut& cut) {
    const int L = cut.layers;
    std::array<std::int64_t, 2> meas_passes{0, 0};
    std::int64_t left_out = 0;
    for (const auto& in : instances) {
        if (in.norms != cut.common[static_cast<std::size_t>(in.pass)]) {
            left_out += static_cast<std::int64_t>(in.kernels.size());
            continue;
        }
        ++meas_passes[static_cast<std::size_t>(in.pass)];
        // Both fit an int: past cut_fits they are at most the passes' norm count.
        const int k = static_cast<int>(cut.k_of(in.pass));
        const int post = static_cast<int>(cut.post_of(in.pass));
        std::int64_t last = -2;
        int f = 0;
        for (const auto i : in.kernels) {
            const auto& mk = measured[i];
            const bool norm = norm_step(mk, last);
            f += norm ? 1 : 0;
            const bool norm_kernel = is_norm(mk.kind);
            LayerPassLine* row = nullptr;
            if (in.pass == 0) {
                row = f == 0 ? &rows.forward(-1) : &rows.forward(std::min((f - 1) / k, L));
            } else if (norm_kernel) {
                row = f <= post ? &rows.backward(L) : &rows.backward(L - 1 - (f - post - 1) / k);
            } else {
                row = f < post ? &rows.backward(L) : &rows.backward(L - 1 - (f - post) / k);
            }
            row->measured_ms += mk.ms;
            ++row->measured_kernels;
        }
    }
    if (left_out > 0)
        r.warnings.push_back("per layer pass: " + std::to_string(left_out) +
                             " measured kernel(s) in forward or backward runs whose norm count "
                             "is not the passes' common one (" +
                             std::to_string(cut.common[0]) + " forward, " +
                             std::to_string(cut.common[1]) +
                             " backward) are left out of the layer rows");
    return meas_passes;
}

// The rows' totals made means per pass instance; the accumulation over every measured backward
// instance of the profile.
void average_rows(LayerRows& rows, const SimulatedLayers& sim,
                  const std::array<std::int64_t, 2>& meas_passes,
                  const std::vector<Instance>& instances) {
    for (auto& row : rows.rows) {
        const bool fwd = row.pass == "forward";
        const bool acc = &row == &rows.rows.back();
        row.simulated_passes = fwd ? sim.forwards : sim.backwards;
        row.measured_passes = fwd ? meas_passes[0] : meas_passes[1];
        if (row.simulated_passes > 0) row.simulated_ms /= static_cast<double>(row.simulated_passes);
        if (row.measured_passes > 0 && !acc)
            row.measured_ms /= static_cast<double>(row.measured_passes);
        if (acc) {
            std::int64_t all_b = 0;
            for (const auto& in : instances)
                all_b += in.pass == 1 && in.norms > 0 ? 1 : 0;
            row.measured_passes = all_b;
            if (all_b > 0) row.measured_ms /= static_cast<double>(all_b);
        }
    }
}

// Fills r.layer_passes (see diff.hpp): the simulated passes' steps spread over their layers, the
// measured passes cut at their norm operators.
void layer_passes(DiffResult& r, const std::vector<Slice>& pass_slices,
                  const std::vector<Slice>& steps, std::vector<MeasuredKernel> measured,
                  NormCounts& norms) {
    const int L = r.layers;
    if (L < 1) return;
    const int first_layer = single_chunk_first_layer(r, pass_slices);
    if (first_layer < 0) return;  // no forward passes, or several chunks: nothing to cut
    LayerRows rows(L, first_layer);
    const SimulatedLayers sim = add_simulated_layers(rows, pass_slices, steps);

    std::stable_sort(measured.begin(), measured.end(),
                     [](const auto& a, const auto& b) { return a.ts < b.ts; });
    const std::vector<Instance> instances = measured_instances(measured, rows);
    NormCut cut;
    cut.common = common_norms(instances);
    cut.sim_k = sim.norm_steps % L == 0 ? sim.norm_steps / L : 0;
    cut.sim_post = sim.post;
    cut.layers = L;
    if (!cut_fits(r, cut, norms)) return;
    const auto meas_passes = add_measured_layers(r, rows, instances, measured, cut);
    average_rows(rows, sim, meas_passes, instances);
    r.layer_passes = rows.rows;
    r.largest_layer_passes = r.layer_passes;
    std::stable_sort(r.largest_layer_passes.begin(), r.largest_layer_passes.end(),
                     [](const auto& a, const auto& b) {
                         return std::abs(a.difference_ms()) > std::abs(b.difference_ms());
                     });
    if (r.largest_layer_passes.size() > 5) r.largest_layer_passes.resize(5);
}

}  // namespace

namespace {

std::string ms_text(double ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f ms", ms);
    return buf;
}

// The warning that the two sides are not the same configuration, saying what differs; "" when
// nothing does. A profile of another model or layout gives a table of +-100% rows (kinds on one
// side only) and large departures everywhere, which read as a model error unless said. Three
// signs, none of which the bundled profiles (tests/validation/data) trip against traces of their
// own configurations:
// - kinds of kernels on one side only, worth at least 2% of that side's kernel time (in the
//   matched pairs only `routing` is one-sided, at most 0.04%): another operator
//   (GELU against SwiGLU, no rotary embedding, no MoE routing) is another model;
// - a different number of norm operators per forward pass than the simulated layers hold:
//   another layer count or pipeline stage;
// - compute time off by more than 2x either way: the uncalibrated roofline's compute time is
//   within 4% of each bundled profile's kernel and launch-gap time (GPT -1.4%, Llama -0.3%, MoE
//   +3.6%), and a
//   model error of 2x would be out of all proportion with that, so it is other work (another
//   hidden size, sequence length or micro-batch size).
std::string mismatch_warning(const DiffResult& r, const NormCounts& norms) {
    std::vector<std::string> differs;
    constexpr double kOneSidedShare = 0.02;
    std::string sim_only, meas_only;
    double sim_only_ms = 0, meas_only_ms = 0;
    for (const auto& k : r.kinds) {
        if (k.measured_kernels == 0 && k.simulated_ms >= kOneSidedShare * r.simulated_busy_ms &&
            k.simulated_ms > 0) {
            sim_only += (sim_only.empty() ? "" : ", ") + k.name;
            sim_only_ms += k.simulated_ms;
        }
        if (k.simulated_ops == 0 && k.measured_ms >= kOneSidedShare * r.measured_busy_ms &&
            k.measured_ms > 0) {
            meas_only += (meas_only.empty() ? "" : ", ") + k.name;
            meas_only_ms += k.measured_ms;
        }
    }
    if (!sim_only.empty())
        differs.push_back("the simulated rank runs " + sim_only + " (" + ms_text(sim_only_ms) +
                          ") that the profile has no kernel of");
    if (!meas_only.empty())
        differs.push_back("the profile runs " + meas_only + " (" + ms_text(meas_only_ms) +
                          ") that the simulated rank has no step of");
    if (norms.measured >= 0)
        differs.push_back("a measured forward pass holds " + std::to_string(norms.measured) +
                          " norm operators, a simulated one " + std::to_string(norms.simulated) +
                          " (" + std::to_string(norms.per_layer) + " per layer x " +
                          std::to_string(norms.layers) + " layers + " +
                          std::to_string(norms.after) + ")");
    constexpr double kBusyFactor = 2;
    if (r.simulated_busy_ms > 0 && r.measured_busy_ms > 0 &&
        (r.simulated_busy_ms > kBusyFactor * r.measured_busy_ms ||
         r.measured_busy_ms > kBusyFactor * r.simulated_busy_ms)) {
        char ratio[32];
        std::snprintf(ratio, sizeof ratio, "%.2fx", r.simulated_busy_ms / r.measured_busy_ms);
        differs.push_back("the simulated compute takes " + ms_text(r.simulated_busy_ms) +
                          " per iteration, " + ratio +
                          " the measured kernels' (with their launch gaps) " +
                          ms_text(r.measured_busy_ms));
    }
    if (differs.empty()) return "";
    std::string text =
        "the simulated trace and the measured profile look like different configurations, so "
        "the differences below compare different work: ";
    for (std::size_t i = 0; i < differs.size(); ++i)
        text += (i == 0 ? "" : "; ") + differs[i];
    return text +
           " (simulate the profiled configuration: its model, layout, micro-batch size and "
           "sequence length, and the rank the profile was taken on, --rank)";
}

}  // namespace

namespace {

// The simulated trace, parsed whole: nlohmann's tree of a trace takes about 9.4 times its bytes
// (measured: a 40.8 MB trace of 32 GPUs peaks at 383 MB); 12 times is counted against
// --max-memory.
nlohmann::json read_simulated(const DiffOptions& options) {
    try {
        const std::int64_t bytes = require_regular_file(options.simulated, options.simulated,
                                                        "a clustersim trace", kMaxInputBytes);
        if (static_cast<double>(bytes) * 12 > static_cast<double>(options.max_memory))
            throw ConfigError(SourceLocation{options.simulated},
                              "a trace of " + std::to_string(bytes) +
                                  " bytes takes about 12 times that to read, more than "
                                  "--max-memory (" +
                                  std::to_string(options.max_memory) +
                                  " bytes); raise --max-memory or trace fewer ranks "
                                  "(--trace-ranks)");
        return nlohmann::json::parse(
            read_regular_file(options.simulated, options.simulated, "a clustersim trace"));
    } catch (const nlohmann::json::parse_error& e) {
        throw ConfigError(SourceLocation{options.simulated},
                          "not a JSON trace (byte " + std::to_string(e.byte) +
                              "): give the file `clustersim run --trace F.json` wrote");
    } catch (const nlohmann::json::exception& e) {
        // A number beyond a double (1e999): out_of_range, not a parse error (found by fuzzing).
        throw ConfigError(SourceLocation{options.simulated},
                          std::string("not a JSON trace clustersim reads (") + e.what() +
                              "): give the file `clustersim run --trace F.json` wrote");
    }
}

// The trace's events: its traceEvents array, or the whole file when that is an array.
const nlohmann::json& trace_events(const nlohmann::json& sim, const std::string& file) {
    const nlohmann::json* events = nullptr;
    if (sim.is_object() && sim.contains("traceEvents"))
        events = &*sim.find("traceEvents");
    else if (sim.is_array())
        events = &sim;
    if (!events || !events->is_array())
        throw ConfigError(SourceLocation{file},
                          "no traceEvents: not a Chrome JSON trace of clustersim");
    return *events;
}

constexpr std::int64_t kIdMax = INT64_MAX;

struct TrackId {
    long long pid = -1, tid = -1;
};

// The simulated rank's compute track ("GPU r compute"); throws, listing the compute tracks
// there are, when the trace lacks it.
TrackId compute_track(const nlohmann::json& events, const DiffOptions& options) {
    const std::string track = "GPU " + std::to_string(options.rank) + " compute";
    TrackId id;
    std::vector<std::string> tracks;
    std::size_t index = 0;
    for (const auto& e : events) {
        const EntryFields f(e, options.simulated, index++);
        if (!e.is_object() || f.text(e, "ph") != "M" || f.text(e, "name") != "thread_name")
            continue;
        const std::string n = f.text(f.args(), "name");
        if (has(n, "compute")) tracks.push_back(n);
        if (n == track) {
            id.pid = f.whole(e, "pid", -1, 0, kIdMax);
            id.tid = f.whole(e, "tid", -1, 0, kIdMax);
        }
    }
    if (id.pid < 0) {
        std::string list;
        for (const auto& t : tracks)
            list += (list.empty() ? "" : ", ") + t;
        throw ConfigError(SourceLocation{"--rank " + std::to_string(options.rank)},
                          "the simulated trace has no \"" + track + "\" track" +
                              (list.empty() ? std::string(" (no compute tracks at all)")
                                            : " (it has " + list + ")"));
    }
    return id;
}

// The compute track's slices: its pass slices (with a microbatch) and its steps.
struct SimulatedTrack {
    std::vector<Slice> passes, steps;
};

SimulatedTrack read_track(const nlohmann::json& events, const std::string& file, TrackId id) {
    SimulatedTrack track;
    std::size_t index = 0;
    for (const auto& e : events) {
        const EntryFields f(e, file, index++);
        if (!e.is_object() || f.text(e, "ph") != "X") continue;
        if (f.whole(e, "pid", -2, -2, kIdMax) != id.pid ||
            f.whole(e, "tid", -2, -2, kIdMax) != id.tid)
            continue;
        const double ts = f.real(e, "ts"), dur = f.real(e, "dur");
        if (dur < 0) f.fail("dur", "a duration of 0 microseconds or more");
        const auto& args = f.args();
        Slice s{ts, ts + dur, f.text(e, "name"), args.contains("microbatch")};
        s.first_layer = static_cast<int>(f.whole(args, "first_layer", 0, 0, kMaxTraceLayers));
        s.layers = static_cast<int>(f.whole(args, "layers", 0, 0, kMaxTraceLayers));
        s.repeat = static_cast<int>(f.whole(args, "repeat", 1, 1, kMaxTraceLayers));
        if (s.microbatch) {
            s.pass = f.pass(args);
            track.passes.push_back(s);
        } else {
            if (!args.contains("collective")) f.step_kind(args, s);
            track.steps.push_back(s);
        }
    }
    return track;
}

// Per kind and per pass: the rows diff_traces fills, in KernelKind and kPasses order.
struct Tally {
    std::vector<DiffLine> kinds, passes;
    Tally() : kinds(kKinds), passes(4) {
        for (int k = 0; k < kKinds; ++k)
            kinds[static_cast<std::size_t>(k)].name = kernel_kind_name(static_cast<KernelKind>(k));
        for (int p = 0; p < 4; ++p)
            passes[static_cast<std::size_t>(p)].name = kPasses[p];
    }
};

// The measured profile as the kernel table sees it: each kernel's kind, and which norm and which
// expert GEMMs the simulated steps' kernel classes stand for, which follows from the kernels it
// holds.
struct MeasuredKinds {
    std::vector<KernelKind> of_kernel;  // per GPU event
    bool layer_norm = false, grouped = false;
    std::int64_t hidden = 0;
    explicit MeasuredKinds(const TorchTrace& t) {
        const OpNesting nesting(t);
        const TraceDims dims = trace_dims(t);
        hidden = dims.hidden;
        of_kernel.reserve(t.gpu.size());
        for (const auto& g : t.gpu) {
            of_kernel.push_back(classify_kernel(g, nesting.site(g), dims));
            layer_norm |= of_kernel.back() == KernelKind::Norm;
            grouped |= of_kernel.back() == KernelKind::GroupedGemm;
        }
    }
    // A simulated step's kind settled against the profile: "norm" is RMSNorm when the profile has
    // no LayerNorm, expert GEMMs dense ones when it has no grouped GEMM.
    std::string settle(std::string kind) const {
        if (kind == "norm" && !layer_norm && hidden > 0) return "rms_norm";
        if (kind == "grouped_gemm" && !grouped) return "gemm";
        return kind;
    }
};

// Adds the simulated steps to the kinds and passes: a step belongs to the pass slice it starts
// in, or to the optimizer when it is the optimizer's, else to "other". Also the rank's busy
// time, iteration time, microbatches and layers.
void add_simulated(DiffResult& r, Tally& tally, const SimulatedTrack& sim,
                   const MeasuredKinds& measured, const std::string& track) {
    double first = HUGE_VAL, last = 0;
    for (const auto& p : sim.passes) {
        if (p.forward()) {
            ++r.microbatches;
            r.layers = std::max(r.layers, p.layers);
        }
    }
    for (const auto& s : sim.steps) {
        first = std::min(first, s.ts);
        last = std::max(last, s.end);
        const double ms = (s.end - s.ts) / 1000;
        int pass = 3;
        for (const auto& p : sim.passes)
            if (s.ts >= p.ts && s.ts < p.end) pass = p.forward() ? 0 : 1;
        const std::string kind =
            measured.settle(std::string(name_of(workload::kKernelKindNames, s.kernel)));
        if (pass == 3 && kind == "optimizer") pass = 2;
        auto& k = tally.kinds[static_cast<std::size_t>(kind_index(kind))];
        k.simulated_ms += ms;
        ++k.simulated_ops;
        tally.passes[static_cast<std::size_t>(pass)].simulated_ms += ms;
        ++tally.passes[static_cast<std::size_t>(pass)].simulated_ops;
        r.simulated_busy_ms += ms;
    }
    if (sim.steps.empty())
        r.warnings.push_back("the simulated track \"" + track + "\" has no steps");
    r.simulated_iteration_ms = sim.steps.empty() ? 0 : (last - first) / 1000;
}

// The profile's operators by External id, and the autograd engine's threads (warned about when
// there are none: then the backward's kernels count as the forward's).
struct MeasuredOps {
    std::unordered_map<std::int64_t, const TraceCpuOp*> by_id;
    std::unordered_set<std::int64_t> autograd_threads;
};

MeasuredOps measured_ops(DiffResult& r, const TorchTrace& t) {
    MeasuredOps ops;
    for (const auto& op : t.cpu_ops) {
        if (op.external_id >= 0) ops.by_id.emplace(op.external_id, &op);
        if (op.name.rfind("autograd::engine::evaluate_function", 0) == 0)
            ops.autograd_threads.insert(op.tid);
    }
    if (ops.autograd_threads.empty())
        r.warnings.push_back(
            "no autograd engine thread in the measured trace: its backward "
            "kernels cannot be told from the forward's");
    return ops;
}

// The optimizer step's ranges on the host, sorted and merged: torch.optim's "Optimizer.step#..."
// and a range the program named "optimizer" (record_function), which also holds what the
// simulated optimizer step holds beyond the update (the 16-bit copy of the master weights, the
// gradients zeroed).
std::vector<std::pair<double, double>> optimizer_ranges(const TorchTrace& t) {
    std::vector<std::pair<double, double>> ranges;
    for (const auto& a : t.annotations)
        if (a.name == "optimizer" || a.name.rfind("Optimizer.step#", 0) == 0)
            ranges.emplace_back(a.ts_us, a.ts_us + a.dur_us);
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<double, double>> merged;
    for (const auto& r : ranges) {
        if (!merged.empty() && r.first <= merged.back().second)
            merged.back().second = std::max(merged.back().second, r.second);
        else
            merged.push_back(r);
    }
    return merged;
}

// Whether `at` lies in one of the sorted, disjoint `ranges` (NaN, no time, in none).
bool in_ranges(const std::vector<std::pair<double, double>>& ranges, double at) {
    if (std::isnan(at)) return false;
    auto it = std::upper_bound(ranges.begin(), ranges.end(),
                               std::make_pair(at, std::numeric_limits<double>::infinity()));
    return it != ranges.begin() && at <= std::prev(it)->second;
}

// A measured kernel's kind as the simulation books it: a memset counts as its operator's other
// kernels (the workspace a cuBLAS or cuDNN call clears, whose launch the simulated step of that
// call carries), and a kernel launched in the optimizer's ranges as the optimizer (the simulated
// step is one op of that kind); communication and other unmapped kernels stay unmapped.
std::vector<KernelKind> booked_kinds(const TorchTrace& t, const MeasuredKinds& kinds,
                                     const StreamGaps& gaps) {
    std::unordered_map<std::int64_t, KernelKind> op_kind;  // an operator's first other kind
    for (std::size_t gi = 0; gi < t.gpu.size(); ++gi) {
        const KernelKind k = kinds.of_kernel[gi];
        if (t.gpu[gi].external_id >= 0 && k != KernelKind::Memset && k != KernelKind::Unmapped)
            op_kind.emplace(t.gpu[gi].external_id, k);
    }
    const auto ranges = optimizer_ranges(t);
    std::vector<KernelKind> out(t.gpu.size());
    for (std::size_t gi = 0; gi < t.gpu.size(); ++gi) {
        const auto& g = t.gpu[gi];
        KernelKind k = kinds.of_kernel[gi];
        if (k == KernelKind::Memset) {
            const auto op = op_kind.find(g.external_id);
            if (g.external_id >= 0 && op != op_kind.end()) k = op->second;
        }
        if (k != KernelKind::Unmapped && in_ranges(ranges, gaps.launched_us[gi]))
            k = KernelKind::Optimizer;
        out[gi] = k;
    }
    return out;
}

// Adds the measured kernels to the kinds and passes, per iteration (see diff.hpp for the
// passes), and returns them for the layer rows.
std::vector<MeasuredKernel> add_measured(DiffResult& r, Tally& tally, const TorchTrace& t,
                                         const MeasuredOps& ops, const MeasuredKinds& kinds,
                                         int iterations) {
    const double per = 1.0 / iterations;
    // Each kernel with the launch gap before it (fit/stream_gaps.hpp), as a simulated step
    // carries one per launch.
    const StreamGaps gaps = stream_gaps(t);
    const std::vector<KernelKind> booked = booked_kinds(t, kinds, gaps);
    std::vector<MeasuredKernel> measured;
    measured.reserve(t.gpu.size());
    for (std::size_t gi = 0; gi < t.gpu.size(); ++gi) {
        const auto& g = t.gpu[gi];
        const auto it = ops.by_id.find(g.external_id);
        const TraceCpuOp* op = it == ops.by_id.end() ? nullptr : it->second;
        const KernelKind kind = booked[gi];
        const bool optimizer = kind == KernelKind::Optimizer;
        const double gap_us = std::max(0.0, gaps.launch_gap_us[gi]);
        const double ms = (g.dur_us + gap_us) / 1000 * per;
        auto& k = tally.kinds[static_cast<std::size_t>(kind)];
        k.measured_ms += ms;
        ++k.measured_kernels;
        int pass = op ? (ops.autograd_threads.count(op->tid) ? 1 : 0) : 3;
        if (optimizer) pass = 2;
        // Gradient accumulation into the main gradients belongs to the backward (the model puts
        // it there), whichever thread launched it (Megatron-style hooks run on the main one).
        if (kind == KernelKind::MixedAccumulate) pass = 1;
        tally.passes[static_cast<std::size_t>(pass)].measured_ms += ms;
        ++tally.passes[static_cast<std::size_t>(pass)].measured_kernels;
        r.measured_busy_ms += ms;
        measured.push_back(
            {g.ts_us, (g.dur_us + gap_us) / 1000, pass, kind, op ? g.external_id : -1});
    }
    return measured;
}

}  // namespace

DiffResult diff_traces(const DiffOptions& options) {
    if (options.iterations < 1)
        throw ConfigError(SourceLocation{"--iterations " + std::to_string(options.iterations)},
                          "the measured profile holds at least one iteration");
    DiffResult r;
    r.simulated = options.simulated;
    r.measured = options.measured;
    r.rank = options.rank;
    r.iterations = options.iterations;
    Tally tally;

    // The simulated rank: its compute track's pass slices and steps.
    const nlohmann::json sim = read_simulated(options);
    const nlohmann::json& events = trace_events(sim, options.simulated);
    const TrackId id = compute_track(events, options);
    const SimulatedTrack track = read_track(events, options.simulated, id);
    // The measured profile.
    const TorchTrace t = read_torch_trace(options.measured, options.max_memory);
    const MeasuredOps ops = measured_ops(r, t);
    const MeasuredKinds measured_kinds(t);
    add_simulated(r, tally, track, measured_kinds,
                  "GPU " + std::to_string(options.rank) + " compute");
    const auto measured = add_measured(r, tally, t, ops, measured_kinds, options.iterations);

    NormCounts norms;
    layer_passes(r, track.passes, track.steps, measured, norms);
    for (const auto& k : tally.kinds)
        if (k.simulated_ops > 0 || k.measured_kernels > 0) r.kinds.push_back(k);
    for (const auto& p : tally.passes)
        if (p.simulated_ops > 0 || p.measured_kernels > 0) r.passes.push_back(p);
    r.largest = r.kinds;
    std::stable_sort(r.largest.begin(), r.largest.end(), [](const auto& a, const auto& b) {
        return std::abs(a.difference_ms()) > std::abs(b.difference_ms());
    });
    if (r.largest.size() > 5) r.largest.resize(5);
    r.mismatch = mismatch_warning(r, norms);
    if (!r.mismatch.empty()) r.warnings.insert(r.warnings.begin(), r.mismatch);
    return r;
}

nlohmann::json diff_json(const DiffResult& r) {
    const auto lines = [](const std::vector<DiffLine>& v) {
        nlohmann::json a = nlohmann::json::array();
        for (const auto& d : v)
            a.push_back({{"name", d.name},
                         {"simulated_ms", d.simulated_ms},
                         {"measured_ms", d.measured_ms},
                         {"simulated_ops", d.simulated_ops},
                         {"measured_kernels", d.measured_kernels},
                         {"difference_ms", d.difference_ms()},
                         {"relative",
                          d.measured_ms > 0 ? nlohmann::json(d.relative()) : nlohmann::json()}});
        return a;
    };
    const auto layer_lines = [](const std::vector<LayerPassLine>& v) {
        nlohmann::json a = nlohmann::json::array();
        for (const auto& d : v)
            a.push_back({{"name", d.name},
                         {"layer", d.layer >= 0 ? nlohmann::json(d.layer) : nlohmann::json()},
                         {"pass", d.pass},
                         {"simulated_ms", d.simulated_ms},
                         {"measured_ms", d.measured_ms},
                         {"simulated_passes", d.simulated_passes},
                         {"measured_passes", d.measured_passes},
                         {"measured_kernels", d.measured_kernels},
                         {"difference_ms", d.difference_ms()},
                         {"relative",
                          d.measured_ms > 0 ? nlohmann::json(d.relative()) : nlohmann::json()}});
        return a;
    };
    return {{"simulated", r.simulated},
            {"measured", r.measured},
            {"rank", r.rank},
            {"iterations", r.iterations},
            {"microbatches", r.microbatches},
            {"layers", r.layers},
            {"simulated_iteration_ms", r.simulated_iteration_ms},
            {"simulated_busy_ms", r.simulated_busy_ms},
            {"measured_busy_ms", r.measured_busy_ms},
            {"kinds", lines(r.kinds)},
            {"passes", lines(r.passes)},
            {"largest", lines(r.largest)},
            {"layer_passes", layer_lines(r.layer_passes)},
            {"largest_layer_passes", layer_lines(r.largest_layer_passes)},
            {"warnings", r.warnings}};
}

}  // namespace cs::api
