#include "cli/plan_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "cli/text_format.h"
#include "engine/memory/gpu_footprint.h"
#include "engine/passes/buckets.h"
#include "engine/plan/gpu_support.h"

namespace tandem::cli {
namespace {

std::string shardingNote(const Plan& plan) {
  if (hybridSharding(plan.job))
    return fmt::format("; parameters and optimizer sharded (ZeRO-3) in groups of {} ranks, replicated {} times",
                       shardCount(plan.job), plan.job.parallel.data_parallel / shardCount(plan.job));
  if (shardsParameters(plan.job)) return "; parameters and optimizer sharded (ZeRO-3)";
  if (shardsGradients(plan.job)) return "; gradients and optimizer sharded (ZeRO-2)";
  if (shardsOptimizer(plan.job)) return "; optimizer sharded (ZeRO-1)";
  return "";
}

// "6" for an even split, "5, 6, 6, 7" otherwise (per chunk when stages
// hold several).
std::string stageBlocks(const JobSpec& job) {
  const auto& split = job.parallel.pipeline_layers;
  if (split.empty())
    return std::to_string(job.model.layers / (job.parallel.pipeline_parallel * job.parallel.pipeline_chunks));
  std::string s;
  for (int n : split) s += (s.empty() ? "" : ", ") + std::to_string(n);
  return s;
}

}  // namespace

std::optional<std::string> oneRankShardingNote(const Plan& plan) {
  const ParallelSpec& par = plan.job.parallel;
  if (!par.shard_parameters || par.data_parallel != 1) return std::nullopt;
  return "parameters sharded over one data-parallel rank (parallel.shard_parameters with data_parallel 1): every "
         "step gathers them from itself; --set parallel.shard_parameters=false runs the job without those "
         "collectives";
}

std::string planSummaryText(const Plan& plan) {
  const JobSpec& job = plan.job;
  const auto& m = job.model;
  const auto& t = job.training;
  // Pipeline stages differ: the lines below describe the stage that needs
  // the most memory (the one that decides whether the job fits).
  const RankPlan& rp = gpu_footprint::largestProgram(plan);
  std::string s;
  auto line = [&](const std::string& text) { s += text + "\n"; };

  line(fmt::format("job {} ({}; content hash {})", job.name, job.source, job.content_hash));
  line(fmt::format("model      {}: {} layers, hidden {}, {} heads, MLP {}, vocab {}, sequence {}{}",
                   toString(m.family), m.layers, m.hidden, m.heads, m.mlpHidden(), m.vocab, m.seq_len,
                   m.tied_embeddings ? ", tied embeddings" : ""));
  line(fmt::format("parameters {}", withThousands(plan.summary.parameters)));
  const int tp = job.parallel.tensor_parallel, pp = job.parallel.pipeline_parallel,
            cp = job.parallel.context_parallel;
  if (tp > 1 || pp > 1 || cp > 1)
    line(fmt::format("parallel   {} ranks = data parallel {}{} x tensor parallel {} x pipeline parallel {}{}{}{}",
                     plan.world_size, job.parallel.data_parallel,
                     cp > 1 ? fmt::format(" x context parallel {}", cp) : "", tp, pp,
                     cp > 1 ? fmt::format("; each sequence split over {} ranks ({} tokens each, two chunks), keys "
                                          "and values gathered for the attention",
                                          cp, job.rankSeqLen())
                            : "",
                     tp > 1 ? fmt::format("; each block's heads and MLP split over {} consecutive ranks{}", tp,
                                          job.parallel.sequence_parallel
                                              ? fmt::format(", the residual stream's tokens too (1/{} each)", tp)
                                              : "")
                            : "",
                     pp > 1 && job.parallel.pipeline_chunks > 1
                         ? fmt::format("; {} stages of {} chunks of {} blocks, interleaved 1F1B over {} micro-batches",
                                       pp, job.parallel.pipeline_chunks, stageBlocks(job), t.grad_accum)
                     : pp > 1 ? fmt::format("; {} stages of {} blocks, 1F1B over {} micro-batches", pp,
                                            stageBlocks(job), t.grad_accum)
                              : ""));
  if (pp > 1) {
    std::string stages;
    for (size_t i = 0; i < plan.programs.size(); ++i) {
      const RankPlan& stage = plan.programs[i];
      stages += fmt::format("{}{}: {} tasks, {}{}", stages.empty() ? "" : "; ", i, stage.tasks.size(),
                            humanBytes(double(stage.memory.arena_bytes)), &stage == &rp ? " (below)" : "");
    }
    line("stages     " + stages);
  }
  line(fmt::format("batch      {} tokens per step = micro-batch {} x accumulation {} x data parallel {} x "
                   "sequence {}; precision {}",
                   withThousands(plan.summary.tokens_per_step), t.micro_batch, t.grad_accum,
                   job.parallel.data_parallel, m.seq_len, toString(t.precision)));
  line(fmt::format("FLOPs      {}FLOP per step in plan tasks (all ranks); model {}FLOP per token (PaLM "
                   "6N + 12LHQT), {}FLOP per step",
                   humanCount(plan.summary.flops_per_step), humanCount(plan.summary.model_flops_per_token),
                   humanCount(plan.summary.model_flops_per_token * plan.summary.tokens_per_step)));

  std::map<std::string, int> per_phase;
  int collectives = 0;
  int64_t coll_bytes = 0;
  std::map<std::string, int> per_collective;
  for (const Task& task : rp.tasks) {
    per_phase[std::string(toString(task.phase))]++;
    if (task.collective) {
      ++collectives;
      coll_bytes += task.collective->bytes;
      per_collective[std::string(toString(task.collective->op))]++;
    }
  }
  std::string kinds;
  for (const auto& [op, n] : per_collective) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", n, op);
  const bool gathered = std::any_of(rp.tasks.begin(), rp.tasks.end(), [](const Task& t) {
    return t.op == OpKind::EmbeddingBwd && t.attrs.shards > 1;
  });
  std::string phases;
  for (const auto& [phase, n] : per_phase) phases += fmt::format("{}{} {}", phases.empty() ? "" : ", ", n, phase);
  // Streams by name, with their task counts: "compute 245, compute.wgrad 49, comm 10".
  std::vector<int> per_stream(rp.streams.size(), 0);
  for (const Task& task : rp.tasks)
    if (task.stream >= 0 && size_t(task.stream) < per_stream.size()) ++per_stream[size_t(task.stream)];
  std::string streams;
  for (size_t i = 0; i < rp.streams.size(); ++i)
    streams += fmt::format("{}{} {}", streams.empty() ? "" : ", ", rp.streams[i].name, per_stream[i]);
  line(fmt::format("tasks      {} per rank ({}), {} streams ({}), {} events", rp.tasks.size(), phases,
                   rp.streams.size(), streams, rp.num_events));
  line(fmt::format("comm       {} collectives per rank per step ({}) over {} buckets, {} per rank{}{}",
                   collectives, kinds.empty() ? "none" : kinds, rp.buckets.size(),
                   humanBytes(double(coll_bytes)),
                   shardingNote(plan),
                   gathered ? ", embedding gradient gathered" : ""));

  const MemoryPlan& mem = rp.memory;
  const double over = mem.lower_bound_bytes > 0 ? 100.0 * (double(mem.arena_bytes) / mem.lower_bound_bytes - 1) : 0;
  line(fmt::format("memory     peak {} per rank (arena), lower bound {} (+{:.1f}%), activation peak {}",
                   humanBytes(double(mem.arena_bytes)), humanBytes(double(mem.lower_bound_bytes)), over,
                   humanBytes(double(mem.activation_peak_bytes))));
  std::string cats;
  for (const auto& [cat, bytes] : mem.by_category)
    cats += fmt::format("{}{} {}", cats.empty() ? "" : ", ", cat, humanBytes(double(bytes)));
  line(fmt::format("           at the peak: {}", cats));
  // What `tandem run` checks against a GPU's free memory before it allocates.
  const gpu_footprint::Footprint fp = gpu_footprint::executorFootprint(plan);
  line(fmt::format("           a GPU run needs {} free per rank: arena + executor {} (GEMM workspaces {}, "
                   "scratch {}) + reserve {}",
                   humanBytes(double(mem.arena_bytes + fp.total() + gpu_footprint::kRunReserveBytes)),
                   humanBytes(double(fp.total())), humanBytes(double(fp.gemm_workspaces)),
                   humanBytes(double(fp.scratch)), humanBytes(double(gpu_footprint::kRunReserveBytes))));
  // What `tandem run` would refuse before it looks at a GPU.
  if (const std::optional<std::string> why = gpuRunRefusal(plan)) line("           tandem run refuses it: " + *why);
  if (const std::optional<std::string> note = oneRankShardingNote(plan)) line("           note: " + *note);

  // One row per run of consecutive layers with the same decision.
  line("recompute  layers  policy     kept/micro-batch  saved/micro-batch  extra FLOP/step (each)");
  for (size_t i = 0; i < plan.recompute.size();) {
    const auto& d = plan.recompute[i];
    size_t j = i + 1;
    while (j < plan.recompute.size() && plan.recompute[j].policy == d.policy &&
           plan.recompute[j].bytes_kept == d.bytes_kept && plan.recompute[j].bytes_saved == d.bytes_saved &&
           plan.recompute[j].extra_flops == d.extra_flops)
      ++j;
    const std::string layers =
        j - i == 1 ? fmt::format("{}", d.layer) : fmt::format("{}-{}", d.layer, plan.recompute[j - 1].layer);
    line(fmt::format("           {:>6}  {:<9}  {:>16}  {:>17}  {:>15}", layers, toString(d.policy),
                     humanBytes(double(d.bytes_kept)), humanBytes(double(d.bytes_saved)), humanCount(d.extra_flops)));
    i = j;
  }
  return s;
}

}  // namespace tandem::cli
