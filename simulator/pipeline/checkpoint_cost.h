#pragma once
// What checkpointing every N steps adds to a simulated step (`tandem
// simulate --checkpoint-every N [--checkpoint-gbps G]`), the way the GPU
// executor checkpoints (docs/gpu-executor.md): between two runs of N steps
// each rank copies what a checkpoint holds (checkpoint::savedBuffers) over
// its GPU's host link while its steps wait, then writes it on a thread of
// its own while the next N steps run; the next copy-out waits for that
// write. So a checkpoint costs the copy plus whatever of the write the N
// steps do not cover:
//   per checkpoint = copy + max(0, write - N x step)
// where a rank's copy is its bytes over its GPU's PCIe link, and a host's
// write is its ranks' bytes at the host's storage rate, but no faster than
// one process's writer goes (measured: 4.5 GB/s into memory, 2.2 GB/s to
// an H100 machine's disk, docs/benchmarks.md). The first checkpoint of a
// run also allocates and page-locks its host memory (about 0.55 s per GB
// measured), once. Not modelled: the storage's own contention across hosts
// (give the rate each host gets), the file system's metadata, a copy-out
// overlapped with the next steps.
#include <cstdint>
#include <string>

#include "engine/plan/plan.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

struct CheckpointCostSettings {
  int every = 0;                   // steps between checkpoints (> 0)
  double host_write_gbps = 2.0;    // what one host's storage takes, GB/s
  double process_write_gbps = 4.5; // one rank's writer at most (four file threads, measured into memory)
  double fallback_copy_gbps = 25;  // a GPU's host link where the topology has no PCIe link for it
};

struct CheckpointCostEstimate {
  int every = 0;
  int64_t rank_bytes = 0;   // the largest rank's checkpoint part
  int64_t host_bytes = 0;   // the busiest host's ranks together
  double copy_gbps = 0;     // the slowest GPU host link among the ranks
  bool copy_gbps_assumed = false;  // no PCIe link in the topology: fallback_copy_gbps
  double copy_s = 0;        // the steps wait for it
  double write_s = 0;       // beside the next `every` steps
  double between_s = 0;     // `every` steps
  double wait_s = 0;        // max(0, write - between): the loop waits for the write
  double per_checkpoint_s = 0;
  double per_step_s = 0;
  double overhead_pct = 0;  // per_step_s over the step
  double first_setup_s = 0; // once per run: host memory allocated and page-locked
};

// Throws std::invalid_argument for every < 1 or a rate <= 0.
CheckpointCostEstimate estimateCheckpointCost(const Plan& plan, const Topology& topo, const SimResult& result,
                                              const CheckpointCostSettings& settings);

// One line for `tandem simulate`'s text output.
std::string describeCheckpointCost(const CheckpointCostEstimate& e);

}  // namespace tandem::sim
