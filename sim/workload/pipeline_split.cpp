#include "workload/pipeline_split.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/checked.hpp"
#include "core/errors.hpp"

namespace cs::workload {
namespace {

std::string str(std::int64_t v) {
    return std::to_string(v);
}

// "the 2 model chunks per stage of schedule 'interleaved'", for divisibility errors.
std::string chunks_text(const ExperimentSpec& spec, int chunks) {
    return "the " + str(chunks) + " model chunks per pipeline stage of schedule '" + spec.schedule +
           "'";
}

// Layers per virtual stage from layers per device, each device's split evenly over its chunks.
std::vector<int> from_devices(const std::vector<int>& per_device, int vstages, int chunks,
                              const std::function<int(int)>& device_of) {
    std::vector<int> out(static_cast<std::size_t>(vstages));
    for (int vs = 0; vs < vstages; ++vs)
        out[static_cast<std::size_t>(vs)] =
            per_device[static_cast<std::size_t>(device_of(vs))] / chunks;
    return out;
}

std::vector<int> split_explicit(const ExperimentSpec& spec, int chunks, int vstages,
                                const std::function<int(int)>& device_of) {
    const auto& ps = spec.pipeline_split;
    const auto& list = ps.stage_layers;
    const int p = spec.layout.pp;
    const auto n = static_cast<std::int64_t>(list.size());
    const std::string key = "'parallelism.stage_layers': ";
    std::int64_t total = 0;
    for (int v : list)
        total += v;
    if (total != spec.model.layers)
        throw ConfigError(ps.list_where, key + "the entries sum to " + str(total) +
                                             " layers, but the model has " +
                                             str(spec.model.layers));
    if (n == vstages) return list;
    if (n == p) {
        for (int d = 0; d < p; ++d)
            if (list[static_cast<std::size_t>(d)] % chunks != 0)
                throw ConfigError(
                    ps.list_where,
                    key + "stage " + str(d) + " has " + str(list[static_cast<std::size_t>(d)]) +
                        " layers, which do not divide evenly over " + chunks_text(spec, chunks) +
                        "; give one entry per virtual stage (" + str(vstages) +
                        " entries, in model order) to choose each chunk's layers");
        return from_devices(list, vstages, chunks, device_of);
    }
    // Written per virtual stage for vpp chunks, run by a schedule without virtual stages (vpp is
    // then ignored): each device holds all of its chunks' layers as one.
    if (chunks == 1 && spec.layout.vpp > 1 && n == std::int64_t{p} * spec.layout.vpp) {
        std::vector<int> per_device(static_cast<std::size_t>(p), 0);
        for (std::int64_t i = 0; i < n; ++i)
            per_device[static_cast<std::size_t>(i % p)] += list[static_cast<std::size_t>(i)];
        return per_device;
    }
    throw ConfigError(
        ps.list_where,
        key + "has " + str(n) + " entries; expected " + str(p) + " (one per pipeline stage)" +
            (vstages != p ? " or pp x chunks = " + str(p) + " x " + str(chunks) + " = " +
                                str(vstages) + " (one per virtual stage, in model order, for " +
                                chunks_text(spec, chunks) + ")"
                          : std::string()));
}

std::vector<int> split_first_last(const ExperimentSpec& spec, int chunks, int vstages,
                                  const std::function<int(int)>& device_of) {
    const auto& ps = spec.pipeline_split;
    const int p = spec.layout.pp;
    const int L = spec.model.layers;
    const bool has_first = ps.first_stage_layers.has_value();
    const bool has_last = ps.last_stage_layers.has_value();
    const SourceLocation& where = has_first ? ps.first_where : ps.last_where;
    const std::string key =
        has_first ? "'parallelism.first_stage_layers': " : "'parallelism.last_stage_layers': ";
    const std::int64_t first = ps.first_stage_layers.value_or(0);
    const std::int64_t last = ps.last_stage_layers.value_or(0);
    const int given = (has_first ? 1 : 0) + (has_last ? 1 : 0);
    std::string what = has_first && has_last
                           ? "first_stage_layers + last_stage_layers = " + str(first) + " + " +
                                 str(last) + " = " + str(first + last)
                       : has_first ? "first_stage_layers = " + str(first)
                                   : "last_stage_layers = " + str(last);
    if (p < 2)
        throw ConfigError(where, key +
                                     "an uneven first or last stage needs pipeline "
                                     "parallelism (pp >= 2); pp is " +
                                     str(p));
    const std::int64_t middle_layers = L - first - last;
    const int middle_stages = p - given;
    if (middle_layers < 0)
        throw ConfigError(where, key + what + " is more than the model's " + str(L) + " layers");
    if (middle_stages == 0 && middle_layers != 0)
        throw ConfigError(where, key + "with pp = " + str(p) +
                                     " there is no middle stage, so the layers given must add "
                                     "up to the model's " +
                                     str(L) + "; " + what);
    if (middle_stages > 0 && middle_layers == 0)
        throw ConfigError(where, key + what + " leaves no layer for the " + str(middle_stages) +
                                     " middle stage" + (middle_stages == 1 ? "" : "s") +
                                     " (Megatron-LM refuses empty middle stages)");
    if (middle_stages > 0 && middle_layers % middle_stages != 0)
        throw ConfigError(where, key + "the " + str(L) + " - " + str(first + last) + " = " +
                                     str(middle_layers) +
                                     " remaining layers do not divide over the " +
                                     str(middle_stages) + " middle stages");
    const std::int64_t middle = middle_stages > 0 ? middle_layers / middle_stages : 0;
    const auto check_chunks = [&](std::int64_t count, const std::string& which,
                                  const SourceLocation& at, const std::string& at_key) {
        if (count % chunks != 0)
            throw ConfigError(at, at_key + which + " (" + str(count) +
                                      " layers) must be divisible by " + chunks_text(spec, chunks) +
                                      ", as Megatron-LM splits every stage evenly over its chunks");
    };
    if (has_first)
        check_chunks(first, "the first stage", ps.first_where,
                     "'parallelism.first_stage_layers': ");
    if (has_last)
        check_chunks(last, "the last stage", ps.last_where, "'parallelism.last_stage_layers': ");
    if (middle_stages > 0) check_chunks(middle, "each middle stage", where, key);
    std::vector<int> per_device(static_cast<std::size_t>(p), static_cast<int>(middle));
    if (has_first) per_device[0] = static_cast<int>(first);
    if (has_last) per_device[static_cast<std::size_t>(p - 1)] = static_cast<int>(last);
    return from_devices(per_device, vstages, chunks, device_of);
}

std::vector<int> split_accounted(const ExperimentSpec& spec, int chunks, int vstages) {
    const auto& ps = spec.pipeline_split;
    const int p = spec.layout.pp;
    const std::int64_t e = ps.account_for_embedding ? 1 : 0;
    const std::int64_t lo = ps.account_for_loss ? 1 : 0;
    const SourceLocation& where = e ? ps.embedding_where : ps.loss_where;
    const std::string key =
        e ? "'parallelism.account_for_embedding': " : "'parallelism.account_for_loss': ";
    const std::int64_t n = spec.model.layers + e + lo;
    const std::string counted = "layers" + std::string(e ? " + embedding" : "") +
                                (lo ? " + loss" : "") + " = " + str(spec.model.layers) +
                                (e ? " + 1" : "") + (lo ? " + 1" : "") + " = " + str(n);
    if (n % p != 0)
        throw ConfigError(where, key + counted + " must be divisible by pp = " + str(p));
    const std::int64_t per_stage = n / p;
    if (per_stage % chunks != 0)
        throw ConfigError(where, key + counted + " over pp = " + str(p) + " is " + str(per_stage) +
                                     " per stage, which must be divisible by " +
                                     chunks_text(spec, chunks));
    // Megatron-LM builds one transformer layer fewer where the embedding or the loss stands in
    // for one (never below zero: every virtual stage holds at least one counted layer).
    std::vector<int> out;
    for (int vs = 0; vs < vstages; ++vs)
        out.push_back(static_cast<int>(per_stage / chunks - (vs == 0 ? e : 0) -
                                       (vs == vstages - 1 ? lo : 0)));
    return out;
}

}  // namespace

std::vector<int> split_layers(const ExperimentSpec& spec, int chunks,
                              const std::function<int(int)>& device_of) {
    const auto& m = spec.model;
    const auto& l = spec.layout;
    const auto& ps = spec.pipeline_split;
    // Checked in 64 bits: pp x vpp can exceed an int (and then no layer count divides it).
    const auto product = checked_product({l.pp, chunks});
    if (ps.even()) {
        if (!product || *product > m.layers || m.layers % *product != 0)
            throw ConfigError(
                spec.layout_where,
                "'parallelism': layers (" + str(m.layers) +
                    ") must be divisible by pp x chunks = " + str(l.pp) + " x " + str(chunks) +
                    " = " + (product ? str(*product) : "more than 2^63") +
                    " so that every pipeline chunk gets the same number of layers; for an uneven "
                    "split give parallelism.first_stage_layers / last_stage_layers, "
                    "account_for_embedding / account_for_loss, or stage_layers");
        return std::vector<int>(static_cast<std::size_t>(*product),
                                m.layers / static_cast<int>(*product));
    }
    // Every rule below leaves at least one layer (or the embedding or loss counted as one) per
    // virtual stage, except an explicit list, which names each virtual stage.
    const std::int64_t limit =
        ps.stage_layers.empty()
            ? std::int64_t{m.layers} + 2
            : std::max<std::int64_t>(m.layers + 2,
                                     static_cast<std::int64_t>(ps.stage_layers.size()));
    if (!product || *product > limit)
        throw ConfigError(spec.layout_where, "'parallelism': pp x chunks = " + str(l.pp) + " x " +
                                                 str(chunks) + " = " +
                                                 (product ? str(*product) : "more than 2^63") +
                                                 " virtual stages, more than the model's " +
                                                 str(m.layers) + " layers can fill");
    const int vstages = static_cast<int>(*product);
    if (!ps.stage_layers.empty()) return split_explicit(spec, chunks, vstages, device_of);
    if (ps.first_stage_layers || ps.last_stage_layers)
        return split_first_last(spec, chunks, vstages, device_of);
    return split_accounted(spec, chunks, vstages);
}

}  // namespace cs::workload
