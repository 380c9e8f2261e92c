#include "engine/memory/memory_fit.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/memory/gpu_footprint.h"
#include "engine/plan/planner.h"

namespace tandem {
namespace {

// The most groups up to kMaxSuggestedLmHeadChunks that split a
// micro-batch's tokens evenly into multiples of 8 (job validation's rule),
// or 1.
int mostLmHeadChunks(const JobSpec& job, int micro_batch) {
  const int64_t tokens = int64_t(micro_batch) * job.rankSeqLen();
  for (int chunks = kMaxSuggestedLmHeadChunks; chunks > 1; chunks /= 2)
    if (tokens % chunks == 0 && (tokens / chunks) % 8 == 0) return chunks;
  return 1;
}

}  // namespace

int accumulationKeepingBatch(const JobSpec& job, int micro_batch) {
  const int64_t sequences = int64_t(job.training.micro_batch) * job.training.grad_accum;
  return int((sequences + micro_batch - 1) / micro_batch);
}

int accumulationForPeak(const JobSpec& job) {
  const int stages = job.parallel.pipeline_parallel;
  const int steady = stages > 1 ? 4 * stages : 4;
  return std::min(job.training.grad_accum, steady);
}

std::string FittingChoice::text(const JobSpec& job) const {
  std::string s = fmt::format("recompute.policy={} training.micro_batch={}", toString(policy), micro_batch);
  if (grad_accum != job.training.grad_accum) s += fmt::format(" training.grad_accum={}", grad_accum);
  if (int64_t(micro_batch) * grad_accum != int64_t(job.training.micro_batch) * job.training.grad_accum)
    s += fmt::format(" [global batch {} sequences per replica, the job's {}]", int64_t(micro_batch) * grad_accum,
                     int64_t(job.training.micro_batch) * job.training.grad_accum);
  if (lm_head_chunks != job.schedule.lm_head_chunks) s += fmt::format(" schedule.lm_head_chunks={}", lm_head_chunks);
  if (shard_parameters != job.parallel.shard_parameters)
    s += fmt::format(" parallel.shard_parameters={}", shard_parameters ? "true" : "false");
  return s + fmt::format(" ({:.1f} GiB)", double(bytes) / double(int64_t(1) << 30));
}

JobSpec FittingChoice::appliedTo(const JobSpec& job) const {
  JobSpec j = job;
  j.recompute.policy = policy;
  j.recompute.per_layer.clear();
  j.training.micro_batch = micro_batch;
  j.training.grad_accum = grad_accum;
  j.schedule.lm_head_chunks = lm_head_chunks;
  j.parallel.shard_parameters = shard_parameters;
  return j;
}

std::vector<FittingChoice> choicesThatFit(const JobSpec& job, int64_t budget,
                                          const std::function<int64_t(const Plan&)>& overhead) {
  // The choice of one policy and sharding with the largest micro-batch above
  // `above` (halving from the job's) that fits, with the job's LM-head
  // groups or else the most that split its tokens; false when none does.
  auto largestFitting = [&](RecomputePolicy policy, bool shard, int above, FittingChoice& out) {
    for (int mb = job.training.micro_batch; mb > above; mb /= 2) {
      const int most = mostLmHeadChunks(job, mb);
      for (int chunks : {job.schedule.lm_head_chunks, most}) {
        const bool the_job = policy == job.recompute.policy && job.recompute.per_layer.empty() &&
                             mb == job.training.micro_batch && chunks == job.schedule.lm_head_chunks &&
                             shard == job.parallel.shard_parameters;
        if (!the_job) {
          FittingChoice choice{policy, mb, accumulationKeepingBatch(job, mb), chunks, shard, 0};
          try {
            JobSpec planned = choice.appliedTo(job);
            planned.training.grad_accum = accumulationForPeak(planned);
            const Plan p = buildPlan(planned);
            choice.bytes = gpu_footprint::largestProgram(p).memory.arena_bytes + overhead(p);
            if (choice.bytes <= budget) {
              out = choice;
              return true;
            }
          } catch (const std::exception&) {
            // Not plannable (the job's groups may not split this micro-batch's
            // tokens): not a choice.
          }
        }
        if (most == job.schedule.lm_head_chunks) break;
      }
    }
    return false;
  };
  std::vector<bool> shardings{job.parallel.shard_parameters};
  if (job.replicas() > 1 && !job.parallel.shard_parameters) shardings.push_back(true);
  std::vector<FittingChoice> fits;
  for (RecomputePolicy policy : {RecomputePolicy::None, RecomputePolicy::Selective, RecomputePolicy::Full}) {
    int largest = 0;  // a sharded choice is offered only above the unsharded one
    for (bool shard : shardings) {
      FittingChoice choice;
      if (!largestFitting(policy, shard, largest, choice)) continue;
      fits.push_back(choice);
      largest = choice.micro_batch;
    }
  }
  return fits;
}

}  // namespace tandem
