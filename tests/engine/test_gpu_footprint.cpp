// The CUDA executor's buffers beyond the arena, counted without a GPU
// (engine/memory/gpu_footprint.h): the sizes follow the kernels' launch shapes and
// the plan's tasks and streams. gpu_test_memory checks on the GPU that the
// executor allocates no more than this.
#include <catch2/catch.hpp>

#include <algorithm>

#include "engine/memory/gpu_footprint.h"
#include "engine/memory/memory_fit.h"
#include "engine/plan/gpu_support.h"
#include "engine/plan/planner.h"

using namespace tandem;

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

JobSpec gpt2OneRank() {
  JobSpec job = defaultJob();
  job.parallel.data_parallel = 1;
  job.training.micro_batch = 16;
  return job;
}

JobSpec llama124m() { return parseJob(std::string(builtinJobText("llama-124m")), "llama-124m"); }

int64_t computeStreams(const RankPlan& rp) {
  return std::count_if(rp.streams.begin(), rp.streams.end(),
                       [](const StreamInfo& s) { return s.kind == StreamKind::Compute; });
}

}  // namespace

TEST_CASE("GPU footprint of GPT-2 124M: workspaces, scratch, staging, tables", "[gpu_footprint]") {
  const Plan plan = buildPlan(gpt2OneRank());
  const RankPlan& rp = plan.programs.at(0);
  const gpu_footprint::Footprint f = gpu_footprint::executorFootprint(plan);
  // One cuBLASLt workspace per compute stream: the main one and the
  // weight-gradient stream.
  REQUIRE(computeStreams(rp) == 2);
  CHECK(f.gemm_workspaces == 64 * kMiB);
  // The compute stream's largest scratch is the layernorm backward's dw and
  // db partial rows, one per warp of its fixed grid (264 blocks x 8 warps x
  // 768 columns x 2 x 4 bytes); the weight-gradient stream's is the MLP bias
  // gradient's 256 slices of 3072 columns.
  const std::vector<int64_t> scratch = gpu_footprint::scratchBytesPerStream(rp);
  REQUIRE(scratch.size() == rp.streams.size());
  CHECK(scratch[0] == 264 * 8 * 768 * 2 * 4);
  CHECK(scratch[1] == 256 * 3072 * 4);
  CHECK(f.scratch == scratch[0] + scratch[1]);  // both are multiples of 256
  // Tokens and targets of a micro-batch (16 x 1024), 4 bytes each, staged.
  CHECK(f.batch_staging >= 2 * 16 * 1024 * 4);
  CHECK(f.batch_staging < 2 * 16 * 1024 * 4 + 1024);
  // Grad norm and AdamW tables: a 72-byte slot per tensor plus the grad
  // norm's partial per 16384-element chunk (124.5M parameters: 7.6k chunks).
  CHECK(f.optimizer_tables > (124475904 / 16384) * 4);
  CHECK(f.optimizer_tables < 128 * 1024);
  CHECK(gpu_footprint::runOverheadBytes(plan) == f.total() + 512 * kMiB);
}

TEST_CASE("GPU footprint follows the plan's choices", "[gpu_footprint]") {
  JobSpec job = gpt2OneRank();
  const gpu_footprint::Footprint base = gpu_footprint::executorFootprint(buildPlan(job));
  // The bias gradients summed by the layernorm backward add a third partial row.
  job.schedule.fuse_bias_gradients = true;
  const std::vector<int64_t> fused = gpu_footprint::scratchBytesPerStream(buildPlan(job).programs.at(0));
  CHECK(fused[0] == 264 * 8 * 768 * 3 * 4);
  // Twice the micro-batch stages twice the tokens; workspaces stay.
  job = gpt2OneRank();
  job.training.micro_batch = 32;
  const gpu_footprint::Footprint big = gpu_footprint::executorFootprint(buildPlan(job));
  CHECK(big.gemm_workspaces == base.gemm_workspaces);
  CHECK(big.batch_staging >= 2 * base.batch_staging - 1024);
  // A data-parallel plan adds a comm stream, which runs no GEMMs.
  job = gpt2OneRank();
  job.parallel.data_parallel = 8;
  const Plan dp8 = buildPlan(job);
  CHECK(dp8.programs.at(0).streams.size() == 3);
  CHECK(gpu_footprint::executorFootprint(dp8).gemm_workspaces == 64 * kMiB);
}

TEST_CASE("Choices that fit a GPU count the executor's buffers and the reserve", "[gpu_footprint][memory_fit]") {
  const JobSpec job = gpt2OneRank();
  const Plan plan = buildPlan(job);
  const int64_t arena = plan.programs.at(0).memory.arena_bytes;
  const int64_t needed = arena + gpu_footprint::runOverheadBytes(plan);
  // A budget between the arena and what a run needs: by arenas alone the
  // job would fit, with the executor counted it does not, so the choices
  // are smaller plans.
  const int64_t budget = arena + 256 * kMiB;
  REQUIRE(budget < needed);
  const std::vector<FittingChoice> fits = choicesThatFit(job, budget, gpu_footprint::runOverheadBytes);
  REQUIRE_FALSE(fits.empty());
  for (const FittingChoice& f : fits) {
    INFO(f.text(job));
    CHECK(f.bytes <= budget);
    const Plan p = buildPlan(f.appliedTo(job));
    CHECK(f.bytes == p.programs.at(0).memory.arena_bytes + gpu_footprint::runOverheadBytes(p));
  }
}

TEST_CASE("GPU footprint of a Llama: the grouped attention's copies and the RMSNorm sums", "[gpu_footprint][llama]") {
  const Plan plan = buildPlan(llama124m());
  const RankPlan& rp = plan.programs.at(0);
  // bf16 heads 64 wide go to the tensor-core kernels as they are laid out:
  // the forward rotates the 12 query and 4 key heads of a micro-batch (16 x
  // 1024 tokens, 16 x 64 wide, bf16) into scratch beside the rotary angles
  // (1024 x 32 pairs of floats); the backward does the same and keeps the
  // kernels' rowsum(dO * O) (16 x 12 x 1024 floats): the compute stream's
  // largest scratch (the expanded copies it replaced took 4.4 times as much).
  const int64_t forward = 16 * 1024 * 16 * 64 * 2 + 1024 * 32 * 8;
  const int64_t backward = forward + 16 * 12 * 1024 * 4;
  int64_t attention_fwd = 0, attention_bwd = 0, rms_bwd = 0;
  for (const Task& t : rp.tasks) {
    const int64_t b = gpu_footprint::taskScratchBytes(rp, t);
    if (t.op == OpKind::Attention) attention_fwd = std::max(attention_fwd, b);
    if (t.op == OpKind::AttentionBwd) attention_bwd = std::max(attention_bwd, b);
    if (t.op == OpKind::RmsNormBwd) rms_bwd = std::max(rms_bwd, b);
  }
  CHECK(attention_fwd == forward);
  CHECK(attention_bwd == backward);
  // One partial row of 768 floats per block of the layernorm kernel it runs on.
  CHECK(rms_bwd == 264 * 768 * 4);
  CHECK(gpu_footprint::scratchBytesPerStream(rp).at(0) == backward);
  // fp32 activations run on the CUDA-core kernels through the expanded
  // multi-head copy of [q | k | v] (3 x 768 wide) and its gradient.
  const int64_t copy = 16 * 1024 * 3 * 768 * 2;
  JobSpec fp32 = llama124m();
  fp32.training.precision = Precision::FP32;
  const Plan plan32 = buildPlan(fp32);
  CHECK(gpu_footprint::scratchBytesPerStream(plan32.programs.at(0)).at(0) == 4 * copy + 16 * 12 * 1024 * 4);
}

TEST_CASE("What the GPU executor would refuse, judged from the plan", "[gpu_footprint][gpu_support]") {
  // Runs: GPT-2 and llama-124m on one rank or in data parallel, sharded or not.
  CHECK_FALSE(gpuRunRefusal(buildPlan(gpt2OneRank())).has_value());
  CHECK_FALSE(gpuRunRefusal(buildPlan(llama124m())).has_value());
  JobSpec dp = llama124m();
  dp.parallel.data_parallel = 4;
  dp.parallel.shard_parameters = true;
  CHECK_FALSE(gpuRunRefusal(buildPlan(dp)).has_value());
  // Heads 128 wide run in bf16 (the tensor-core kernels).
  JobSpec wide = llama124m();
  wide.model.heads = 6;
  wide.model.kv_heads = 2;
  CHECK_FALSE(gpuRunRefusal(buildPlan(wide)).has_value());
  // Refused, each with the job field that decides it.
  wide.training.precision = Precision::FP32;
  const auto wide32 = gpuRunRefusal(buildPlan(wide));
  REQUIRE(wide32.has_value());
  CHECK_THAT(*wide32, Catch::Contains("heads 128 wide") && Catch::Contains("training.precision is fp32"));
  JobSpec odd = llama124m();
  odd.model.heads = 8;  // heads 96 wide
  odd.model.kv_heads = 2;
  const auto heads = gpuRunRefusal(buildPlan(odd));
  REQUIRE(heads.has_value());
  CHECK_THAT(*heads, Catch::Contains("heads 96 wide") && Catch::Contains("model.heads 8"));
  // Tensor parallelism (with sequence parallelism, and beside data
  // parallelism) runs: each process group has a communicator of its own.
  JobSpec tp = gpt2OneRank();
  tp.parallel.tensor_parallel = 2;
  CHECK_FALSE(gpuRunRefusal(buildPlan(tp)).has_value());
  tp.parallel.sequence_parallel = true;
  tp.parallel.data_parallel = 2;
  CHECK_FALSE(gpuRunRefusal(buildPlan(tp)).has_value());
  // Pipeline stages run too (a program per stage, sends and receives).
  JobSpec pp = gpt2OneRank();
  pp.parallel.pipeline_parallel = 2;
  pp.training.grad_accum = 2;
  CHECK_FALSE(gpuRunRefusal(buildPlan(pp)).has_value());
  JobSpec cp = gpt2OneRank();
  cp.parallel.context_parallel = 2;
  const auto context = gpuRunRefusal(buildPlan(cp));
  REQUIRE(context.has_value());
  CHECK_THAT(*context, Catch::Contains("parallel.context_parallel 2"));
  // A tied Llama whose embedding gradient is gathered (it pays at
  // micro-batch 1 over 8 ranks): no position table, which the GPU's
  // gathered kernel does not take yet.
  JobSpec gathered = llama124m();
  gathered.model.tied_embeddings = true;
  gathered.training.micro_batch = 1;
  gathered.parallel.data_parallel = 8;
  gathered.parallel.shard_optimizer = true;
  gathered.comm.gather_embedding_gradient = true;
  const auto embedding = gpuRunRefusal(buildPlan(gathered));
  REQUIRE(embedding.has_value());
  CHECK_THAT(*embedding, Catch::Contains("comm.gather_embedding_gradient"));
  gathered.comm.gather_embedding_gradient = false;
  CHECK_FALSE(gpuRunRefusal(buildPlan(gathered)).has_value());
  JobSpec hybrid = gpt2OneRank();
  hybrid.parallel.data_parallel = 4;
  hybrid.parallel.shard_parameters = true;
  hybrid.parallel.shard_group_size = 2;
  CHECK_FALSE(gpuRunRefusal(buildPlan(hybrid)).has_value());
}
