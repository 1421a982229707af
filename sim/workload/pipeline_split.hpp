// Layers per pipeline chunk: the even split, or Megatron-LM's uneven ones (first and last stage
// layer counts, embedding and loss counted as layers) and explicit lists, as
// ExperimentSpec::pipeline_split describes them.
#pragma once

#include <functional>
#include <vector>

#include "workload/experiment.hpp"

namespace cs::workload {

// Transformer layers of every virtual stage in model order (virtual stage vs is the vs-th chunk a
// microbatch's forward pass runs through; the embedding is on virtual stage 0 and the output layer
// and loss on the last), for `chunks` model chunks per pipeline device placed by `device_of(vs)`.
// The rules are Megatron-LM's (get_num_layers_to_build, get_transformer_layer_offset and the
// TransformerConfig checks):
//  - even: layers / (pp x chunks) per virtual stage;
//  - first_stage_layers / last_stage_layers: device 0 / device pp-1 hold that many, the other
//    (middle) devices share the rest evenly; every device's count is split evenly over its chunks;
//  - account_for_embedding / account_for_loss: the embedding and the loss each count as one layer,
//    (layers + 1 + 1) / (pp x chunks) per virtual stage, and the first / last virtual stage build
//    one transformer layer fewer;
//  - stage_layers: pp counts (per device, each split evenly over its chunks) or pp x chunks
//    counts (per virtual stage, in model order); with one chunk per device, a list written per
//    virtual stage for vpp chunks gives each device the sum of its vpp entries.
// Throws ConfigError, located at the key that asked for the split, naming what does not fit.
std::vector<int> split_layers(const ExperimentSpec& spec, int chunks,
                              const std::function<int(int)>& device_of);

}  // namespace cs::workload
