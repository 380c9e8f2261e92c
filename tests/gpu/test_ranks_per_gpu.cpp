// Multi-rank plans with every rank on one GPU in one process (the
// in-process communicator, engine/cuda/local_comm.h): tensor parallelism
// (with sequence parallelism, the Llama family with grouped heads), data
// parallelism beside it with ZeRO-3, hybrid sharding, pipeline stages
// (1F1B, interleaved) and tensor x pipeline parallelism, against the CPU
// reference running the same ranks: every rank's gradients after one pass,
// then the losses over 20 steps. Then CUDA Graph steps against eager ones
// (tensor + sequence parallelism, interleaved pipeline stages): the same
// losses and gradient norms, bit for bit, over 20 steps.
//
// `--nccl`: the same checks on the production path instead, a GPU and an
// NCCL communicator per rank (one process, a thread each); the cases whose
// world exceeds the visible GPUs are skipped and say so.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>

#include "engine/cpu/executor.h"
#include "engine/cuda/executor.h"
#include "engine/cuda/local_comm.h"
#include "engine/memory/gpu_footprint.h"
#include "engine/numerics/init.h"
#include "engine/passes/buckets.h"
#include "engine/plan/planner.h"
#include "tests/gpu/gpu_test.h"

using namespace tandem;
using namespace tandem::gputest;

namespace {

bool g_nccl = false;  // --nccl
int g_gpus = 1;

struct Ranks {
  std::shared_ptr<cuda::LocalWorld> world;  // null on the NCCL path
  std::vector<std::unique_ptr<cuda::CudaExecutor>> gpu;
  int device(int rank) const { return world ? 0 : rank; }
};

// fn(rank) on a thread per rank; a rank that fails aborts the in-process
// communicators (waking the others), and the first failure is rethrown.
template <class F>
void onEveryRank(Ranks& ranks, int world, F fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        cudaSetDevice(ranks.device(r));
        fn(r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = std::current_exception();
        if (ranks.world) ranks.world->abort(fmt::format("rank {} failed: {}", r, e.what()));
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

Ranks makeRanks(const Plan& plan, bool use_graph = false) {
  Ranks ranks;
  if (!g_nccl) ranks.world = std::make_shared<cuda::LocalWorld>(plan, 0, 60);
  ranks.gpu.resize(size_t(plan.world_size));
  const cuda::NcclId id = g_nccl ? cuda::makeNcclId() : cuda::NcclId{};
  // NCCL's communicators are made by every rank at once.
  onEveryRank(ranks, plan.world_size, [&](int r) {
    cuda::ExecutorOptions o;
    o.rank = r;
    o.world = plan.world_size;
    o.device = ranks.device(r);
    o.use_graph = use_graph;
    o.tune_gemms = false;  // cuBLASLt's first choice: the same on every rank
    o.local_world = ranks.world;
    o.nccl_id = id;
    ranks.gpu[size_t(r)] = std::make_unique<cuda::CudaExecutor>(plan, o);
  });
  return ranks;
}

// A rank's values of gradient buffer `grad`: all, or of a gradient shard
// only its parameters' segments (a shard's padding is not compared).
std::vector<float> shardSegments(const Plan& plan, int rank, int grad, const std::vector<float>& values) {
  const RankPlan& program = plan.forRank(rank);
  const GradBucket* bucket = bucketOfGradientShard(program, grad);
  if (!bucket) return values;
  std::vector<float> out;
  const ShardRange shard = shardOf(plan.job.dataParallelRank(rank), shardCount(plan.job),
                                   program.buffers.at(size_t(bucket->buffer)).elementCount());
  for (int pi : bucket->params) {
    const ShardSegment seg = segmentInShard(program, program.params.at(size_t(pi)), shard);
    if (seg.to > seg.from)
      out.insert(out.end(), values.begin() + seg.shard_offset, values.begin() + seg.shard_offset + (seg.to - seg.from));
  }
  return out;
}

void run(const std::string& label, const JobSpec& job, double tol) {
  const Plan plan = buildPlan(job);
  const int world = plan.world_size;
  if (g_nccl && world > g_gpus) {
    fmt::print("SKIP {}: {} ranks, {} GPUs visible\n", label, world, g_gpus);
    return;
  }
  Ranks ranks = makeRanks(plan);
  cpu::CpuExecutor ref(plan);
  const cpu::StepResult rc = ref.computeGradients();
  std::vector<cuda::GpuStepResult> rg(static_cast<size_t>(world));
  onEveryRank(ranks, world, [&](int r) { rg[size_t(r)] = ranks.gpu[size_t(r)]->computeGradients(); });

  // Every rank's gradients: its parameters' (tensor-parallel slices), or
  // with sharded parameters its shard of every bucket.
  double worst = 0;
  std::string worst_name;
  int tensors = 0;
  for (int r = 0; r < world; ++r) {
    const RankPlan& program = plan.forRank(r);
    std::vector<std::pair<int, std::string>> grads;
    if (!program.buckets.empty() && program.buckets.front().grad_shard >= 0)
      for (const GradBucket& b : program.buckets) grads.emplace_back(b.grad_shard, fmt::format("bucket {}", b.buffer));
    else
      for (const ParamInfo& p : program.params) grads.emplace_back(p.grad, p.name);
    for (const auto& [grad, name] : grads) {
      const auto got = shardSegments(plan, r, grad, ranks.gpu[size_t(r)]->readBuffer(grad));
      const auto want = shardSegments(plan, r, grad, ref.readBuffer(r, grad));
      const double e = relError(got, want);
      ++tensors;
      if (e > worst) worst = e, worst_name = fmt::format("rank {} {}", r, name);
    }
  }
  fmt::print("     {}: {} ranks, {} gradient tensors, loss cpu {:.6f} gpu {:.6f}; worst {:.3e} ({})\n", label, world,
             tensors, rc.loss, rg[0].loss, worst, worst_name);
  expectBelow(label + ": worst per-tensor gradient error (every rank)", worst, tol);
  expectBelow(label + ": loss against the CPU", std::abs(rg[0].loss - rc.loss) / rc.loss, tol);
  bool same_loss = true;
  for (int r = 1; r < world; ++r) same_loss = same_loss && rg[size_t(r)].loss == rg[0].loss;
  expectTrue(label + ": every rank reports the same loss", same_loss);

  // Twenty steps: the losses track the CPU's.
  double worst_loss = 0;
  for (int s = 0; s < 20; ++s) {
    const double lc = ref.step().loss;
    onEveryRank(ranks, world, [&](int r) { rg[size_t(r)] = ranks.gpu[size_t(r)]->step(); });
    worst_loss = std::max(worst_loss, std::abs(rg[0].loss - lc) / lc);
    if (s == 0 || s == 19) fmt::print("     {} step {:>2}: loss cpu {:.6f} gpu {:.6f}\n", label, s + 1, lc, rg[0].loss);
  }
  expectBelow(label + ": worst loss deviation over 20 steps", worst_loss, tol);

  // Each rank's arena is its program's, and what it allocates beyond it is
  // what the footprint counts for that program without a GPU (GEMM
  // workspaces, scratch, batch staging, optimizer tables), within 1 MiB.
  bool arenas = true;
  double worst_mib = 0;
  for (int r = 0; r < world; ++r) {
    const cuda::GpuMemoryReport m = ranks.gpu[size_t(r)]->memory();
    arenas = arenas && m.planned_arena_bytes == plan.forRank(r).memory.arena_bytes;
    const int64_t counted = gpu_footprint::executorFootprint(plan.forRank(r)).total();
    worst_mib = std::max(worst_mib, std::abs(double(m.allocated_bytes - m.planned_arena_bytes - counted)) / (1 << 20));
  }
  expectTrue(label + ": every rank's arena is its planned size", arenas);
  expectBelow(label + ": |allocated beyond the arena - counted footprint|, worst rank, MiB", worst_mib, 1.0);
}

// Twenty steps with every rank's step in a CUDA Graph (on this path one
// graph for all ranks, local_comm.h) against twenty eager steps of fresh
// executors: the same loss and gradient norm at every step, bit for bit.
void graphVsEager(const std::string& label, const JobSpec& job) {
  const Plan plan = buildPlan(job);
  const int world = plan.world_size;
  if (g_nccl && world > g_gpus) {
    fmt::print("SKIP {} graph vs eager: {} ranks, {} GPUs visible\n", label, world, g_gpus);
    return;
  }
  constexpr int kSteps = 20;
  std::vector<std::vector<cuda::GpuStepResult>> by_mode[2];
  for (int graph = 0; graph < 2; ++graph) {
    Ranks ranks = makeRanks(plan, graph == 1);
    auto& results = by_mode[graph];
    results.assign(size_t(world), {});
    onEveryRank(ranks, world, [&](int r) { results[size_t(r)] = ranks.gpu[size_t(r)]->run(kSteps); });
  }
  int same = 0;
  std::string first_diff;
  for (int s = 0; s < kSteps; ++s) {
    bool equal = true;
    for (int r = 0; r < world; ++r) {
      const cuda::GpuStepResult& e = by_mode[0][size_t(r)].at(size_t(s));
      const cuda::GpuStepResult& g = by_mode[1][size_t(r)].at(size_t(s));
      if (e.loss != g.loss || e.grad_norm != g.grad_norm) {
        equal = false;
        if (first_diff.empty())
          first_diff = fmt::format("step {} rank {}: eager loss {:.9g} norm {:.9g}, graph loss {:.9g} norm {:.9g}",
                                   s + 1, r, e.loss, e.grad_norm, g.loss, g.grad_norm);
      }
    }
    same += equal;
  }
  const auto& last_e = by_mode[0][0].back();
  const auto& last_g = by_mode[1][0].back();
  fmt::print("     {} graph vs eager: {} of {} steps equal on every rank; step {} loss eager {:.9g} graph {:.9g}, "
             "{:.3f} against {:.3f} ms{}\n",
             label, same, kSteps, kSteps, last_e.loss, last_g.loss, last_e.ms, last_g.ms,
             first_diff.empty() ? "" : "; first difference: " + first_diff);
  expectTrue(label + ": CUDA Graph steps == eager steps (loss, gradient norm) over 20 steps, every rank",
             same == kSteps);
}

}  // namespace

int main(int argc, char** argv) {
  requireGpus(1);
  g_nccl = argc > 1 && std::string(argv[1]) == "--nccl";
  if (g_nccl) {
    g_gpus = cuda::usableGpuCount(nullptr);
    requireGpus(2);
  }
  try {
    run("tp2 fp32", tiny({"training.precision=fp32", "parallel.tensor_parallel=2"}), 1e-4);
    run("tp2 bf16", tiny({"training.precision=bf16", "parallel.tensor_parallel=2"}), 1e-2);
    run("tp2 + sp fp32",
        tiny({"training.precision=fp32", "parallel.tensor_parallel=2", "parallel.sequence_parallel=true"}), 1e-4);
    run("tp2 + sp bf16",
        tiny({"training.precision=bf16", "parallel.tensor_parallel=2", "parallel.sequence_parallel=true"}), 1e-2);
    run("dp2 fp32 (in-process all-reduce)", tiny({"training.precision=fp32", "parallel.data_parallel=2"}), 1e-4);
    run("dp2 x tp2 fp32, ZeRO-3",
        tiny({"training.precision=fp32", "parallel.data_parallel=2", "parallel.tensor_parallel=2",
              "parallel.shard_parameters=true"}),
        1e-4);
    run("dp4 x tp2 fp32, ZeRO-3 in groups of 2 (hybrid)",
        tiny({"training.precision=fp32", "parallel.data_parallel=4", "parallel.tensor_parallel=2",
              "parallel.shard_parameters=true", "parallel.shard_group_size=2"}),
        1e-4);
    run("dp4 fp32, ZeRO-3 in groups of 2 (hybrid)",
        tiny({"training.precision=fp32", "parallel.data_parallel=4", "parallel.shard_parameters=true",
              "parallel.shard_group_size=2"}),
        1e-4);
    // Pipeline stages: a program per stage, sends and receives on streams
    // of their own through the in-process channels.
    run("pp2 1F1B fp32", tiny({"training.precision=fp32", "parallel.pipeline_parallel=2", "training.grad_accum=4"}),
        1e-4);
    run("pp2 1F1B bf16", tiny({"training.precision=bf16", "parallel.pipeline_parallel=2", "training.grad_accum=4"}),
        1e-2);
    run("pp2 interleaved (2 chunks) fp32",
        tiny({"training.precision=fp32", "model.layers=4", "parallel.pipeline_parallel=2", "parallel.pipeline_chunks=2",
              "training.grad_accum=4"}),
        1e-4);
    run("tp2 x pp2 fp32",
        tiny({"training.precision=fp32", "parallel.tensor_parallel=2", "parallel.pipeline_parallel=2",
              "training.grad_accum=2"}),
        1e-4);
    const std::vector<std::string> llama = {"model.family=llama", "model.kv_heads=2", "model.mlp_ratio=2.75",
                                            "model.tied_embeddings=false", "parallel.tensor_parallel=2"};
    auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
      a.insert(a.end(), b.begin(), b.end());
      return a;
    };
    run("llama gqa tp2 fp32", tiny(with(llama, {"training.precision=fp32"})), 1e-4);
    run("llama gqa tp2 bf16", tiny(with(llama, {"training.precision=bf16"})), 1e-2);
    graphVsEager("tp2 + sp bf16",
                 tiny({"training.precision=bf16", "parallel.tensor_parallel=2", "parallel.sequence_parallel=true"}));
    graphVsEager("pp2 interleaved (2 chunks) bf16",
                 tiny({"training.precision=bf16", "model.layers=4", "parallel.pipeline_parallel=2",
                       "parallel.pipeline_chunks=2", "training.grad_accum=4"}));
    graphVsEager("tp2 x pp2 fp32", tiny({"training.precision=fp32", "parallel.tensor_parallel=2",
                                         "parallel.pipeline_parallel=2", "training.grad_accum=2"}));
  } catch (const std::exception& e) {
    fmt::print("FAIL exception: {}\n", e.what());
    return 1;
  }
  return finish();
}
