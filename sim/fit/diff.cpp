#include "fit/diff.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.hpp"
#include "core/input_file.hpp"
#include "fit/kernel_table.hpp"
#include "ingest/torch_trace.hpp"

namespace cs::api {
namespace {

bool has(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}
bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
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

// Where a roofline step label belongs: -1 the embedding ("embedding*", "position*"), 1 the head
// (the final norm, the logits, the loss and a profile-timed output layer, forward or backward), 0 a
// layer.
int simulated_part(const std::string& label) {
    if (label.rfind("embedding", 0) == 0 || label.rfind("position", 0) == 0) return -1;
    for (const char* head :
         {"final norm", "logits", "log softmax", "cross entropy", "loss", "output"})
        if (label.rfind(head, 0) == 0) return 1;
    return 0;
}

struct Slice {
    double ts = 0, end = 0;
    std::string name;
    bool microbatch = false;  // a pass slice (args.microbatch)
    int first_layer = 0, layers = 0, repeat = 1;
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
            const auto v = it->is_number_unsigned() && it->get<std::uint64_t>() > INT64_MAX
                               ? hi + 1
                               : it->get<std::int64_t>();
            if (v < lo || v > hi) fail(key, range);
            return v;
        }
        if (it->is_number_float()) {
            const double v = it->get<double>();
            if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi)) ||
                v != std::floor(v))
                fail(key, range);
            return static_cast<std::int64_t>(v);
        }
        fail(key, range);
    }
    const nlohmann::json& args() const {
        static const nlohmann::json none = nlohmann::json::object();
        const auto it = e_.find("args");
        if (it == e_.end()) return none;
        if (!it->is_object()) fail("args", "an object");
        return *it;
    }

  private:
    [[noreturn]] void fail(const char* key, const std::string& expected) const {
        throw ConfigError(SourceLocation{file_},
                          "traceEvents entry " + std::to_string(index_) + ": \"" + key +
                              "\" is not " + expected +
                              "; give the file `clustersim run --trace F.json` wrote");
    }

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

}  // namespace

std::string simulated_kind(const std::string& label) {
    const auto name = [](KernelKind k) { return std::string(kernel_kind_name(k)); };
    // The roofline's step labels (sim/workload/roofline.cpp), recomputed ones included, and the
    // kinds their kernels have in kernel_table.hpp. "norm" stands for LayerNorm and RMSNorm
    // alike and expert GEMMs for grouped ones: diff_traces settles both from the measured trace.
    const std::string l = label.rfind("recompute ", 0) == 0 ? label.substr(10) : label;
    if (l == "unmapped (calibration residual)") return name(KernelKind::Unmapped);
    if (has(l, "optimizer")) return name(KernelKind::Optimizer);
    if (has(l, "attention dropout")) return name(KernelKind::Elementwise);
    if (has(l, "attention scores") || has(l, "attention context")) return name(KernelKind::Gemm);
    if (has(l, "attention")) return name(KernelKind::Attention);
    if (has(l, "rotary")) return name(KernelKind::Rotary);
    if (l == "swiglu bwd product" || l == "swiglu bwd concat") return name(KernelKind::Elementwise);
    if (has(l, "swiglu")) return name(KernelKind::Swiglu);
    if (l == "routing sort") return name(KernelKind::Sort);
    if (has(l, "routing") || l == "expert counts") return name(KernelKind::Routing);
    if (l == "permute" || l == "unpermute bwd") return name(KernelKind::Permute);
    if (l == "unpermute" || l == "permute bwd" || l == "embedding wgrad")
        return name(KernelKind::Unpermute);
    if (l == "combine weights" || l == "combine weights bwd") return name(KernelKind::StridedCopy);
    if (l == "combine weights sum") return name(KernelKind::Reduce);
    if (has(l, "grad concat")) return name(KernelKind::Concat);
    if (has(l, "grad copy")) return name(KernelKind::StridedCopy);
    if (has(l, "main grad accumulate")) return name(KernelKind::MixedAccumulate);
    if (has(l, "bias grad")) return name(KernelKind::Reduce);
    if (has(l, "norm")) return name(KernelKind::Norm);
    if (has(l, "softmax") || l == "cross entropy") return name(KernelKind::Softmax);
    if (has(l, "activation")) return name(KernelKind::Activation);
    if (l.rfind("expert fc", 0) == 0) return name(KernelKind::GroupedGemm);
    for (const char* g :
         {"qkv", "proj", "fc1", "fc2", "logits", "router", "shared fc1", "shared fc2"})
        if (l == g) return name(KernelKind::Gemm);
    if (ends_with(l, "dgrad") || ends_with(l, "wgrad")) return name(KernelKind::Gemm);
    // Embedding, position add, residual adds, casts, zeroing, the NLL gradient, joins.
    for (const char* e :
         {"embedding", "position add", "nll bwd", "shared add", "shared join", "expert cat",
          "combine weights grad", "logits to fp32", "logits grad to bf16"})
        if (l == e) return name(KernelKind::Elementwise);
    if (l.rfind("residual", 0) == 0 || ends_with(l, " zero")) return name(KernelKind::Elementwise);
    return name(KernelKind::Unmapped);
}

namespace {

// Fills r.layer_passes (see diff.hpp): the simulated passes' steps spread over their layers, the
// measured passes cut at their norm operators.
// The forward pass's norm operators, measured (the commonest count per pass) and as the simulated
// model has them, when they differ: a sign of another model (mismatch_warning).
struct NormCounts {
    std::int64_t measured = -1, simulated = -1, per_layer = 0, layers = 0, after = 0;
};

void layer_passes(DiffResult& r, const std::vector<Slice>& pass_slices,
                  const std::vector<Slice>& steps, std::vector<MeasuredKernel> measured,
                  NormCounts& norms) {
    const int L = r.layers;
    int first_layer = -1;
    bool chunks = false;
    for (const auto& p : pass_slices) {
        if (p.name.rfind('F', 0) != 0) continue;
        const int fl = p.first_layer;
        if (first_layer >= 0 && fl != first_layer) chunks = true;
        if (first_layer < 0) first_layer = fl;
    }
    if (L < 1 || first_layer < 0) return;  // no forward passes: nothing to cut
    if (chunks) {
        r.warnings.push_back(
            "no per-layer-pass comparison: the simulated rank runs several model chunks "
            "(interleaved stages), which the profile's passes cannot be matched to");
        return;
    }
    LayerRows rows(L, first_layer);

    // Simulated: per pass slice, its steps. A trace holds a layer's step either once per layer
    // or folded into one slice with a `repeat` count: either way the layers' share is the
    // label's total over the layer count. Steps are the embedding's or the head's by label, the
    // rest the layers'. The first forward also says how many norms a layer has (its layer norm
    // steps, counted with their repeats, over the layers) and how many follow the layers.
    std::int64_t sim_f = 0, sim_b = 0;
    std::int64_t sim_norm_steps = 0;
    int sim_post = 0;
    for (const auto& p : pass_slices) {
        const bool fwd = p.name.rfind('F', 0) == 0;
        if (fwd)
            ++sim_f;
        else if (p.name.rfind('B', 0) == 0)
            ++sim_b;
        for (const auto& st : steps) {
            if (!(st.ts >= p.ts && st.ts < p.end)) continue;
            const double ms = (st.end - st.ts) / 1000;
            const std::string kind = simulated_kind(st.name);
            if (kind == "mixed_accumulate") {
                rows.accumulate().simulated_ms += ms;
                continue;
            }
            const int part = simulated_part(st.name);  // -1 embedding, 0 layers, 1 head
            if (fwd && sim_f == 1 && kind == "norm") {
                if (part == 0)
                    sim_norm_steps += st.repeat;
                else
                    ++sim_post;
            }
            if (part == 0) {
                for (int i = 0; i < L; ++i)
                    (fwd ? rows.forward(i) : rows.backward(i)).simulated_ms += ms / L;
            } else if (fwd) {
                rows.forward(part < 0 ? -1 : L).simulated_ms += ms;
            } else {
                rows.backward(part < 0 ? -1 : L).simulated_ms += ms;
            }
        }
    }
    const std::int64_t sim_k = sim_norm_steps % L == 0 ? sim_norm_steps / L : 0;

    // Measured: runs of forward (pass 0) or backward (1) kernels in time order, broken by the
    // optimizer's and unattributed kernels; gradient accumulation is set apart.
    std::stable_sort(measured.begin(), measured.end(),
                     [](const auto& a, const auto& b) { return a.ts < b.ts; });
    struct Instance {
        int pass = 0, norms = 0;
        std::vector<std::size_t> kernels;
    };
    std::vector<Instance> instances;
    bool open = false;
    double accumulate_ms = 0;
    std::int64_t accumulate_kernels = 0;
    for (std::size_t i = 0; i < measured.size(); ++i) {
        const auto& k = measured[i];
        if (k.kind == KernelKind::MixedAccumulate) {
            accumulate_ms += k.ms;
            ++accumulate_kernels;
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
    // A norm operator may launch several kernels (LayerNorm's backward: two): count operators.
    const auto norm_step = [&](const MeasuredKernel& k, std::int64_t& last) {
        if (!is_norm(k.kind)) return false;
        const bool fresh = k.op_id < 0 || k.op_id != last;
        last = k.op_id;
        return fresh;
    };
    for (auto& in : instances) {
        std::int64_t last = -2;
        for (const auto i : in.kernels)
            in.norms += norm_step(measured[i], last) ? 1 : 0;
    }
    int common[2] = {0, 0};
    for (int pass = 0; pass < 2; ++pass) {
        std::map<int, int> counts;
        for (const auto& in : instances)
            if (in.pass == pass && in.norms > 0) ++counts[in.norms];
        int best = 0;
        for (const auto& [n, c] : counts)
            if (c >= best) {
                best = c;
                common[pass] = n;
            }
    }
    // Norms per layer and after the layers: the simulated model's when its passes have norm
    // steps (then the profile must hold as many), else inferred from the profile.
    const auto k_of = [&](int pass) { return sim_k > 0 ? sim_k : common[pass] / L; };
    const auto post_of = [&](int pass) {
        return sim_k > 0 ? sim_post : common[pass] - k_of(pass) * L;
    };
    for (int pass = 0; pass < 2; ++pass) {
        if (sim_k > 0 && common[pass] != sim_k * L + sim_post) {
            norms = {common[pass], sim_k * L + sim_post, sim_k, L, sim_post};
            r.warnings.push_back(std::string("no per-layer-pass comparison: the measured ") +
                                 kPasses[pass] + " passes hold " + std::to_string(common[pass]) +
                                 " norm operator(s), the simulated one " + std::to_string(sim_k) +
                                 " per layer x " + std::to_string(L) + " layers + " +
                                 std::to_string(sim_post) + " = " +
                                 std::to_string(sim_k * L + sim_post) +
                                 ": not the same model (or not the same pipeline stage)");
            return;
        }
        if (common[pass] == 0 || k_of(pass) < 1 || post_of(pass) >= L) {
            r.warnings.push_back(std::string("no per-layer-pass comparison: the measured ") +
                                 kPasses[pass] + " passes hold " + std::to_string(common[pass]) +
                                 " norm operator(s), which do not cut into the simulated trace's " +
                                 std::to_string(L) +
                                 " layers (at least one norm per layer is needed)");
            return;
        }
    }
    std::int64_t meas_passes[2] = {0, 0}, left_out = 0;
    for (const auto& in : instances) {
        if (in.norms != common[in.pass]) {
            left_out += static_cast<std::int64_t>(in.kernels.size());
            continue;
        }
        ++meas_passes[in.pass];
        // Both fit an int: past the checks above they are at most the passes' norm count.
        const int k = static_cast<int>(k_of(in.pass)), post = static_cast<int>(post_of(in.pass));
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
    rows.accumulate().measured_ms = accumulate_ms;
    rows.accumulate().measured_kernels = accumulate_kernels;
    if (left_out > 0)
        r.warnings.push_back("per layer pass: " + std::to_string(left_out) +
                             " measured kernel(s) in forward or backward runs whose norm count "
                             "is not the passes' common one (" +
                             std::to_string(common[0]) + " forward, " + std::to_string(common[1]) +
                             " backward) are left out of the layer rows");
    for (auto& row : rows.rows) {
        const bool fwd = row.pass == "forward";
        const bool acc = &row == &rows.rows.back();
        row.simulated_passes = fwd ? sim_f : sim_b;
        row.measured_passes = fwd ? meas_passes[0] : meas_passes[1];
        if (row.simulated_passes > 0) row.simulated_ms /= static_cast<double>(row.simulated_passes);
        if (row.measured_passes > 0 && !acc)
            row.measured_ms /= static_cast<double>(row.measured_passes);
        // The accumulation is counted over every backward instance of the profile.
        if (acc) {
            std::int64_t all_b = 0;
            for (const auto& in : instances)
                all_b += in.pass == 1 && in.norms > 0 ? 1 : 0;
            row.measured_passes = all_b;
            if (all_b > 0) row.measured_ms /= static_cast<double>(all_b);
        }
    }
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
//   matched pairs only `memset` and `routing` are one-sided, at most 0.3%): another operator
//   (GELU against SwiGLU, no rotary embedding, no MoE routing) is another model;
// - a different number of norm operators per forward pass than the simulated layers hold:
//   another layer count or pipeline stage;
// - compute time off by more than 2x either way: the uncalibrated roofline's compute time is
//   within 6% of each bundled profile's kernel time (GPT +0.3%, Llama +3.1%, MoE +6.0%), and a
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
                          " per iteration, " + ratio + " the measured kernels' " +
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

DiffResult diff_traces(const DiffOptions& options) {
    if (options.iterations < 1)
        throw ConfigError(SourceLocation{"--iterations " + std::to_string(options.iterations)},
                          "the measured profile holds at least one iteration");
    DiffResult r;
    r.simulated = options.simulated;
    r.measured = options.measured;
    r.rank = options.rank;
    r.iterations = options.iterations;
    std::vector<DiffLine> kinds(kKinds), passes(4);
    for (int k = 0; k < kKinds; ++k)
        kinds[static_cast<std::size_t>(k)].name = kernel_kind_name(static_cast<KernelKind>(k));
    for (int p = 0; p < 4; ++p)
        passes[static_cast<std::size_t>(p)].name = kPasses[p];

    // The simulated rank: its compute track's pass slices and steps.
    nlohmann::json sim;
    try {
        // Parsed whole: nlohmann's tree of a trace takes about 9.4 times its bytes (measured:
        // a 40.8 MB trace of 32 GPUs peaks at 383 MB); 12 times is counted against --max-memory.
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
        sim = nlohmann::json::parse(
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
    const nlohmann::json* events = sim.is_object() && sim.contains("traceEvents")
                                       ? &sim["traceEvents"]
                                       : (sim.is_array() ? &sim : nullptr);
    if (!events || !events->is_array())
        throw ConfigError(SourceLocation{options.simulated},
                          "no traceEvents: not a Chrome JSON trace of clustersim");
    const std::string track = "GPU " + std::to_string(options.rank) + " compute";
    long long pid = -1, tid = -1;
    std::vector<std::string> tracks;
    constexpr std::int64_t kIdMax = INT64_MAX;
    std::size_t index = 0;
    for (const auto& e : *events) {
        const EntryFields f(e, options.simulated, index++);
        if (!e.is_object() || f.text(e, "ph") != "M" || f.text(e, "name") != "thread_name")
            continue;
        const std::string n = f.text(f.args(), "name");
        if (has(n, "compute")) tracks.push_back(n);
        if (n == track) {
            pid = f.whole(e, "pid", -1, 0, kIdMax);
            tid = f.whole(e, "tid", -1, 0, kIdMax);
        }
    }
    if (pid < 0) {
        std::string list;
        for (const auto& t : tracks)
            list += (list.empty() ? "" : ", ") + t;
        throw ConfigError(SourceLocation{"--rank " + std::to_string(options.rank)},
                          "the simulated trace has no \"" + track + "\" track" +
                              (list.empty() ? std::string(" (no compute tracks at all)")
                                            : " (it has " + list + ")"));
    }
    std::vector<Slice> pass_slices, steps;
    index = 0;
    for (const auto& e : *events) {
        const EntryFields f(e, options.simulated, index++);
        if (!e.is_object() || f.text(e, "ph") != "X") continue;
        if (f.whole(e, "pid", -2, -2, kIdMax) != pid || f.whole(e, "tid", -2, -2, kIdMax) != tid)
            continue;
        const double ts = f.real(e, "ts"), dur = f.real(e, "dur");
        const auto& args = f.args();
        Slice s{ts, ts + dur, f.text(e, "name"), args.contains("microbatch")};
        s.first_layer = static_cast<int>(f.whole(args, "first_layer", 0, 0, kMaxTraceLayers));
        s.layers = static_cast<int>(f.whole(args, "layers", 0, 0, kMaxTraceLayers));
        s.repeat = static_cast<int>(f.whole(args, "repeat", 1, 1, kMaxTraceLayers));
        if (s.microbatch)
            pass_slices.push_back(s);
        else
            steps.push_back(s);
    }
    // The measured profile.
    const TorchTrace t = read_torch_trace(options.measured, options.max_memory);
    std::unordered_map<std::int64_t, const TraceCpuOp*> ops;
    std::unordered_set<std::int64_t> autograd_threads;
    for (const auto& op : t.cpu_ops) {
        if (op.external_id >= 0) ops.emplace(op.external_id, &op);
        if (op.name.rfind("autograd::engine::evaluate_function", 0) == 0)
            autograd_threads.insert(op.tid);
    }
    if (autograd_threads.empty())
        r.warnings.push_back(
            "no autograd engine thread in the measured trace: its backward "
            "kernels cannot be told from the forward's");
    // The kernel table's view of the measured trace; which norm and which expert GEMMs the
    // simulated labels stand for follows from the kernels it holds.
    const OpNesting nesting(t);
    const TraceDims dims = trace_dims(t);
    std::vector<KernelKind> measured_kind;
    measured_kind.reserve(t.gpu.size());
    bool layer_norm = false, grouped = false;
    for (const auto& g : t.gpu) {
        measured_kind.push_back(classify_kernel(g, nesting.site(g), dims));
        layer_norm |= measured_kind.back() == KernelKind::Norm;
        grouped |= measured_kind.back() == KernelKind::GroupedGemm;
    }
    const auto settle = [&](std::string kind) {
        if (kind == "norm" && !layer_norm && dims.hidden > 0) return std::string("rms_norm");
        if (kind == "grouped_gemm" && !grouped) return std::string("gemm");
        return kind;
    };
    double first = HUGE_VAL, last = 0;
    for (const auto& p : pass_slices) {
        if (p.name.rfind('F', 0) == 0) {
            ++r.microbatches;
            r.layers = std::max(r.layers, p.layers);
        }
    }
    for (const auto& s : steps) {
        first = std::min(first, s.ts);
        last = std::max(last, s.end);
        const double ms = (s.end - s.ts) / 1000;
        int pass = 3;
        for (const auto& p : pass_slices)
            if (s.ts >= p.ts && s.ts < p.end) pass = p.name.rfind('F', 0) == 0 ? 0 : 1;
        const std::string kind = settle(simulated_kind(s.name));
        if (pass == 3 && kind == "optimizer") pass = 2;
        auto& k = kinds[static_cast<std::size_t>(kind_index(kind))];
        k.simulated_ms += ms;
        ++k.simulated_ops;
        passes[static_cast<std::size_t>(pass)].simulated_ms += ms;
        ++passes[static_cast<std::size_t>(pass)].simulated_ops;
        r.simulated_busy_ms += ms;
    }
    if (steps.empty()) r.warnings.push_back("the simulated track \"" + track + "\" has no steps");
    r.simulated_iteration_ms = steps.empty() ? 0 : (last - first) / 1000;

    const double per = 1.0 / options.iterations;
    std::vector<MeasuredKernel> measured;
    measured.reserve(t.gpu.size());
    for (std::size_t gi = 0; gi < t.gpu.size(); ++gi) {
        const auto& g = t.gpu[gi];
        const auto it = ops.find(g.external_id);
        const TraceCpuOp* op = it == ops.end() ? nullptr : it->second;
        const KernelKind kind = measured_kind[gi];
        const double ms = g.dur_us / 1000 * per;
        auto& k = kinds[static_cast<std::size_t>(kind)];
        k.measured_ms += ms;
        ++k.measured_kernels;
        int pass = op ? (autograd_threads.count(op->tid) ? 1 : 0) : 3;
        if (kind == KernelKind::Optimizer) pass = 2;
        // Gradient accumulation into the main gradients belongs to the backward (the model puts
        // it there), whichever thread launched it (Megatron-style hooks run on the main one).
        if (kind == KernelKind::MixedAccumulate) pass = 1;
        passes[static_cast<std::size_t>(pass)].measured_ms += ms;
        ++passes[static_cast<std::size_t>(pass)].measured_kernels;
        r.measured_busy_ms += ms;
        measured.push_back({g.ts_us, g.dur_us / 1000, pass, kind, op ? g.external_id : -1});
    }
    NormCounts norms;
    layer_passes(r, pass_slices, steps, measured, norms);
    for (const auto& k : kinds)
        if (k.simulated_ops > 0 || k.measured_kernels > 0) r.kinds.push_back(k);
    for (const auto& p : passes)
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
