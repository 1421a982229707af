// clustersim's generated per-rank programs written as Chakra ETs: one file per GPU of the layout,
// whose nodes and dependencies reproduce what the replay (sim/replay) does for the experiment
// and schedule, so that running the files (execute.hpp) on the same topology and network gives
// the same iteration time.
//
// Per GPU, in the schedule's op order (docs/chakra.md has the tables):
//   a pass            its compute steps between two collectives folded into one COMP_NODE
//                     (cs_duration_ps exact, duration_micros rounded, num_ops = hardware FLOPs,
//                     tensor_size = HBM bytes), each execution of a TP/CP/EP collective step one
//                     COMM_COLL_NODE on the member's communicator with cs_costed_alone; the nodes
//                     of a pass form a chain, each pass's first node control-depends on the end of
//                     the previous pass
//   pipeline p2p      a COMM_SEND_NODE after the sending pass, a COMM_RECV_NODE the receiving
//                     pass data-depends on (tag: receiving virtual stage, microbatch, direction);
//                     between chunks on one GPU, a data dependency on the producing pass
//   DP gradients      per chunk, one all-reduce (reduce-scatter with the distributed optimizer)
//                     on the member's DP communicator after the chunk's last backward pass; with
//                     --overlap-grad-reduce one per bucket, each after the one before, ready at
//                     its share of the last backward pass (a cs_delay wait from its start), the
//                     pass slowed by the interference
//   optimizer step    a COMP_NODE after the last pass and every gradient collective
//   parameters        the distributed optimizer's all-gather on the DP communicator after it
//   overlapped group  DualPipe's F&B (PipelineOp::overlap): every input in before the first pass,
//                     per pass one COMP_NODE of its overlapped compute and a cs_delay of its
//                     exposed communication (replay::overlapped_time), outputs after the last
//   the host model    with --host only: per pass a CPU node for posting a receive from another
//                     GPU, two for issuing the kernels (up to the first, the rest), one for
//                     posting a send and a sync after it (sync_after_p2p); the GPU's first node
//                     waits for the first issue, a cs_delay wait after the issue and a closing
//                     zero-time node hold the pass's end to the closed form of replay/host.hpp
// What is not reproduced is listed in EtSet::warnings (the host model without --host; with it,
// the buckets' readiness inside a pass the host holds back).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "chakra/et.hpp"
#include "core/atomic_file.hpp"
#include "workload/experiment.hpp"

namespace cs::chakra {

struct EtSet {
    std::string prefix;
    std::vector<EtFile> files;                       // [rank = GPU number]
    std::map<std::string, std::vector<int>> groups;  // comm_groups.json
    std::vector<std::string> warnings;
};

// Receives each rank's finished file (the rank is its GPU number), in the order the export
// writes them (not rank order); the file may be moved from or cleared.
using RankSink = std::function<void(int rank, EtFile& file)>;

// `schedule` empty: the experiment's own. `with_host`: with the experiment's host model
// (compute.host), also its host work as CPU nodes (is_cpu_op) and the GPU's waits for it as
// cs_delay nodes, so that the run reproduces the replay's host model too. The iteration is
// replay::prepare's, as api::run's: it throws ConfigError as run does for layouts the schedule
// cannot run. With `sink`, each rank's file goes to it as soon as it is complete and the set
// comes back without files (its groups and warnings only): one rank's nodes in memory at a time.
EtSet export_experiment(const workload::ExperimentSpec& spec, const std::string& schedule,
                        const std::string& prefix = "clustersim", bool with_host = false,
                        const RankSink& sink = {});

// Writes `<prefix>.<rank>.et` for every rank and comm_groups.json into `folder` (created if
// missing), staged in `outputs` (committed by the caller). `option` names the folder in errors.
void write_et_set(const EtSet& set, const std::filesystem::path& folder, OutputSet& outputs,
                  const std::string& option = "--out");
// write_et_set in parts, for an export that streams its ranks: the folder checked, created and
// its files declared in `outputs`; one rank's file; comm_groups.json.
void prepare_et_folder(const std::filesystem::path& folder, const std::string& prefix, int ranks,
                       OutputSet& outputs, const std::string& option = "--out");
void write_et_file(const std::filesystem::path& folder, const std::string& prefix, int rank,
                   const EtFile& file, OutputSet& outputs, EtEncoder* encoder = nullptr);
void write_comm_groups(const std::filesystem::path& folder,
                       const std::map<std::string, std::vector<int>>& groups, OutputSet& outputs);

}  // namespace cs::chakra
