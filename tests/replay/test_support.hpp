// Experiments built in code for replay tests: p GPUs in a ring of NVLinks.
#pragma once

#include <memory>

#include "topology/cluster.hpp"
#include "workload/experiment.hpp"

namespace cs::test {

inline std::shared_ptr<topology::Cluster> chain_cluster(int gpus, Bandwidth bw = Bandwidth{100e9},
                                                        Time latency = Time::us(1)) {
    topology::ClusterBuilder b;
    topology::GpuModel h200{"H200",
                            FlopRate{67e12},
                            FlopRate{989e12},
                            FlopRate{989e12},
                            FlopRate{1979e12},
                            Bytes{141'000'000'000},
                            Bandwidth{4.8e12},
                            {},
                            {}};
    const int model = b.add_gpu_model(h200);
    std::vector<topology::DeviceIndex> ids;
    for (int g = 0; g < gpus; ++g) {
        topology::Device d;
        d.id = "gpu" + std::to_string(g);
        d.kind = topology::DeviceKind::Gpu;
        d.node = g;
        d.model = model;
        ids.push_back(b.add_device(d));
    }
    for (int g = 0; g + 1 < gpus; ++g)
        b.add_link(ids[g], ids[g + 1], topology::LinkKind::NvLink, bw, latency);
    // Close the ring so that the last stage reaches the first (interleaved, V schedules).
    if (gpus > 2) b.add_link(ids[gpus - 1], ids[0], topology::LinkKind::NvLink, bw, latency);
    return std::make_shared<topology::Cluster>(b.build());
}

// `gpus` GPUs with one NVLink between every pair (routes never pass through a GPU), of
// bandwidth bandwidth(i, j) and 1 us latency, the GPU model `gpu` (gpu0, gpu1, ...).
template <typename PairBandwidth>
std::shared_ptr<topology::Cluster> mesh_cluster(int gpus, const topology::GpuModel& gpu,
                                                PairBandwidth&& bandwidth) {
    topology::ClusterBuilder b;
    const int model = b.add_gpu_model(gpu);
    std::vector<topology::DeviceIndex> ids;
    for (int g = 0; g < gpus; ++g) {
        topology::Device d;
        d.id = "gpu" + std::to_string(g);
        d.kind = topology::DeviceKind::Gpu;
        d.model = model;
        ids.push_back(b.add_device(d));
    }
    for (int i = 0; i < gpus; ++i)
        for (int j = i + 1; j < gpus; ++j)
            b.add_link(ids[static_cast<std::size_t>(i)], ids[static_cast<std::size_t>(j)],
                       topology::LinkKind::NvLink, bandwidth(i, j), Time::us(1));
    return std::make_shared<topology::Cluster>(b.build());
}

// A GPT-shaped model with `layers` layers; profile compute with the given per-layer times.
inline workload::ExperimentSpec profile_experiment(int pp, int microbatches, int layers,
                                                   Time layer_forward, Time layer_backward,
                                                   network::Fidelity fidelity) {
    workload::ExperimentSpec spec;
    spec.source = "test";
    spec.cluster = chain_cluster(pp);
    spec.model.layers = layers;
    spec.model.hidden_size = 1024;
    spec.model.attention_heads = 8;
    spec.model.kv_heads = 8;
    spec.model.ffn_hidden_size = 4096;
    spec.layout.pp = pp;
    spec.training.micro_batch_size = 1;
    spec.training.global_batch_size = microbatches;
    spec.training.seq_length = 1024;
    spec.compute.kind = workload::ComputeSpec::Kind::Profile;
    // As load_experiment reads `model: profile` without `framework:`: measured times, nothing
    // added.
    spec.compute.framework = workload::Framework::None;
    spec.compute.profile.layer_forward = layer_forward;
    spec.compute.profile.layer_backward = layer_backward;
    spec.network.fidelity = fidelity;
    return spec;
}

}  // namespace cs::test
