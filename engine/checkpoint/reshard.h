#pragma once
// Resuming a checkpoint under another data-parallel layout (issue 51):
// another number of replicas, or another sharding (none, ZeRO-1, -2, -3),
// with the same global batch. The state a step leaves that training needs
// again is, per parameter, its values, its fp32 master and its two Adam
// moments; every layout holds them whole on every replica or cut into its
// ranks' shards of the gradient buckets (engine/numerics/init.h, shardOf
// and segmentInShard). Resharding gathers each parameter whole from the
// ranks that hold its parts and cuts it again the way the new plan keeps
// it. Gradient accumulators and workspaces are left zero: every step writes
// them before it reads them.
//
// What is refused, and why (one line each):
// - tensor, pipeline or context parallelism changed: their slices and stages
//   would have to be split and joined across ranks, which is not done;
// - another model, other training settings (learning rate, schedule, seed,
//   precision) or another data source: another job;
// - another global batch (data_parallel x micro_batch x grad_accum): the
//   next steps would read other samples, so the losses could not continue;
// - an optimizer update pending (schedule.optimizer_beside_forward).

#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "engine/plan/plan.h"

namespace tandem::checkpoint {

// Empty when a checkpoint written by `saved` can be resharded into `plan`,
// else the reason.
std::string reshardRefusal(const JobSpec& saved, const Plan& plan);

// `snap`, a state of `saved_plan`, laid out as `plan` keeps it.
Snapshot reshard(const Plan& saved_plan, const Snapshot& snap, const Plan& plan);

}  // namespace tandem::checkpoint
