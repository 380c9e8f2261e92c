#pragma once
// Megatron-LM's scatter/gather across pipeline stages
// (comm.pipeline_scatter_gather; Narayanan et al., SC21, section 4.1):
// without sequence parallelism every rank of a tensor-parallel group holds
// the whole activation at a stage boundary, and sending it whole from each
// rank moves it tensor_parallel times over the links between hosts. Instead
// each rank sends and receives its 1/tensor_parallel slice (attrs.shards:
// the slice of its place in the "tp" group), and the receiving group
// all-gathers the slices in place over "tp", on its compute stream, before
// the first use. The arithmetic is the same.
#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// Returns the number of transfers it split (0 unless the job asks).
int applyPipelineScatterGather(Graph& g, const JobSpec& job);

}  // namespace tandem
