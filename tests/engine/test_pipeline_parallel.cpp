// Pipeline parallelism (engine/passes/pipeline.h) against the CPU reference
// executor as the oracle: the stages together must train as the whole
// model on one rank per replica.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "engine/cpu/executor.h"
#include "engine/plan/plan_json.h"
#include "engine/plan/planner.h"
#include "engine/spec/job.h"
#include "test_compare.h"
#include "test_jobs.h"

using namespace tandem;

namespace {

using test::relativeDifference;
using test::splittableJob;

// Four blocks, so that 2 and 4 stages split them.
JobSpec fourBlockJob(int dp, int accum) { return splittableJob(dp, accum, 4); }

struct PpCase {
  int pp = 2;
  int accum = 1;
  int dp = 1;
  int tp = 1;
  Precision prec = Precision::FP32;
  RecomputePolicy recompute = RecomputePolicy::None;
  bool shard_optimizer = false;
  bool shard_parameters = false;
  int shard_group_size = 0;
  bool optimizer_beside_forward = false;
  bool tied = true;
  bool fuse_bias_gradients = false;
  int lm_head_chunks = 1;
  bool weight_gradient_stream = true;
  std::vector<int> stage_layers = {};  // parallel.pipeline_layers
  bool sequence_parallel = false;
  int chunks = 1;   // parallel.pipeline_chunks
  int layers = 4;
  bool llama = false;  // test::llamaJob
  bool scatter_gather = false;  // comm.pipeline_scatter_gather (staged job only)

  std::string describe() const {
    return "pp " + std::to_string(pp) + " accumulation " + std::to_string(accum) + " dp " + std::to_string(dp) +
           " tp " + std::to_string(tp) + " " + std::string(toString(prec)) + " recompute " +
           std::string(toString(recompute)) + (shard_optimizer ? " ZeRO-1" : "") +
           (shard_parameters ? " ZeRO-3" : "") +
           (shard_group_size ? " in groups of " + std::to_string(shard_group_size) : "") + (optimizer_beside_forward ? " optimizer beside the forward" : "") +
           (tied ? "" : " untied") +
           (fuse_bias_gradients ? " bias gradients fused" : "") +
           (lm_head_chunks > 1 ? " LM head in groups" : "") + (weight_gradient_stream ? "" : " one compute stream") +
           (stage_layers.empty() ? "" : " uneven stages") + (sequence_parallel ? " sequence parallel" : "") +
           (chunks > 1 ? fmt::format(" {} chunks per stage of {} blocks", chunks, layers) : "") +
           (llama ? " llama" : "") + (scatter_gather ? " transfers split over tp" : "");
  }
};

// Every rank's value of every parameter it holds (or its gradient) by name,
// against the reference rank at the same replica and place.
void requireStagesMatch(const cpu::CpuExecutor& staged, const cpu::CpuExecutor& whole, bool grad, double tolerance,
                        const std::string& what) {
  const Plan& sp = staged.plan();
  const JobSpec& job = sp.job;
  for (int rank = 0; rank < sp.world_size; ++rank) {
    const RankPlan& mine = sp.forRank(rank);
    const int ref_rank = job.dataParallelRank(rank) * job.parallel.tensor_parallel + job.tensorParallelPlace(rank);
    const RankPlan& ref = whole.plan().forRank(ref_rank);
    for (size_t i = 0; i < mine.params.size(); ++i) {
      const ParamInfo& p = mine.params[i];
      const auto it = std::find_if(ref.params.begin(), ref.params.end(),
                                   [&](const ParamInfo& r) { return r.name == p.name; });
      REQUIRE(it != ref.params.end());
      const int ref_index = int(it - ref.params.begin());
      const std::vector<float> got = grad ? staged.readBuffer(rank, p.grad) : staged.parameterValues(rank, int(i));
      const std::vector<float> want =
          grad ? whole.readBuffer(ref_rank, it->grad) : whole.parameterValues(ref_rank, ref_index);
      INFO(what << (grad ? " gradient of " : " ") << p.name << " on rank " << rank << " (stage "
                << job.pipelineStage(rank) << ")");
      CHECK(relativeDifference(got, want) <= tolerance);
    }
  }
}

void requirePipelineMatches(const PpCase& c) {
  JobSpec whole = c.llama ? test::llamaJob(c.dp, c.accum, c.layers) : splittableJob(c.dp, c.accum, c.layers);
  whole.parallel.tensor_parallel = c.tp;
  whole.training.precision = c.prec;
  whole.recompute.policy = c.recompute;
  whole.parallel.shard_optimizer = c.shard_optimizer;
  whole.parallel.shard_parameters = c.shard_parameters;
  whole.parallel.shard_group_size = c.shard_group_size;
  whole.schedule.optimizer_beside_forward = c.optimizer_beside_forward;
  whole.model.tied_embeddings = c.tied;
  whole.schedule.fuse_bias_gradients = c.fuse_bias_gradients;
  whole.schedule.lm_head_chunks = c.lm_head_chunks;
  whole.schedule.weight_gradient_stream = c.weight_gradient_stream;
  whole.parallel.sequence_parallel = c.sequence_parallel;
  JobSpec staged = whole;
  staged.parallel.pipeline_parallel = c.pp;
  staged.parallel.pipeline_layers = c.stage_layers;
  staged.parallel.pipeline_chunks = c.chunks;
  staged.comm.pipeline_scatter_gather = c.scatter_gather;
  cpu::CpuExecutor a(buildPlan(whole));
  cpu::CpuExecutor b(buildPlan(staged));
  const std::string what = c.describe();
  INFO(what);
  REQUIRE(b.plan().programs.size() == size_t(c.pp));
  REQUIRE(b.plan().world_size == c.pp * c.dp * c.tp);
  // bf16: the tied embedding's two gradients are rounded before their sum.
  const bool bf16 = c.prec == Precision::BF16;
  if (!c.shard_optimizer && !c.shard_parameters) {  // sharded, no rank holds a whole reduced bucket
    a.computeGradients();
    b.computeGradients();
    requireStagesMatch(b, a, /*grad=*/true, bf16 ? 2e-2 : 1e-5, what);
  }
  for (int step = 0; step < 3; ++step) {
    const cpu::StepResult ra = a.step(), rb = b.step();
    INFO("step " << step);
    CHECK(rb.loss == Approx(ra.loss).epsilon(bf16 ? 2e-3 : 1e-6));
    CHECK(rb.grad_norm == Approx(ra.grad_norm).epsilon(bf16 ? 2e-2 : 1e-5));
  }
  a.finishOptimizer();
  b.finishOptimizer();
  a.gatherParameters();
  b.gatherParameters();
  // bf16: see test_tensor_parallel.cpp (Adam's first steps on biases).
  requireStagesMatch(b, a, /*grad=*/false, bf16 ? 8e-2 : 1e-5, what);
}

}  // namespace

TEST_CASE("Pipeline stages train as the whole model", "[executor][pp]") {
  // Fewer micro-batches than stages (all bubble), as many, more.
  for (int accum : {1, 2, 4}) requirePipelineMatches({2, accum});
  requirePipelineMatches({4, 3});
  requirePipelineMatches({4, 8, 1, 1, Precision::FP32, RecomputePolicy::Full});
  requirePipelineMatches({2, 2, 1, 1, Precision::FP32, RecomputePolicy::Selective});
  // With data and tensor parallelism, a sharded optimizer.
  requirePipelineMatches({2, 2, 2});
  requirePipelineMatches({2, 3, 1, 2});
  requirePipelineMatches({2, 2, 2, 2});
  PpCase zero1{2, 2, 2};
  zero1.shard_optimizer = true;
  requirePipelineMatches(zero1);
  PpCase zero3{2, 2, 2};
  zero3.shard_parameters = true;
  requirePipelineMatches(zero3);
  zero3.tp = 2;
  zero3.recompute = RecomputePolicy::Full;
  requirePipelineMatches(zero3);
  PpCase hybrid{2, 2, 4};  // 4 replicas in shard groups of 2
  hybrid.shard_parameters = true;
  hybrid.shard_group_size = 2;
  requirePipelineMatches(hybrid);
  PpCase beside{2, 3};
  beside.optimizer_beside_forward = true;
  requirePipelineMatches(beside);
  requirePipelineMatches({2, 2, 1, 1, Precision::BF16});
  // Untied embeddings: no copy; schedule options.
  PpCase untied{4, 4};
  untied.tied = false;
  requirePipelineMatches(untied);
  PpCase options{2, 2};
  options.fuse_bias_gradients = true;
  options.lm_head_chunks = 2;
  requirePipelineMatches(options);
  options.fuse_bias_gradients = false;
  options.lm_head_chunks = 1;
  options.weight_gradient_stream = false;
  requirePipelineMatches(options);
  // Uneven stages: the first with one block, the last with three, and back.
  PpCase uneven{2, 3};
  uneven.stage_layers = {1, 3};
  requirePipelineMatches(uneven);
  uneven.stage_layers = {3, 1};
  uneven.tp = 2;
  requirePipelineMatches(uneven);
}

TEST_CASE("Pipeline stages with sequence parallelism train as the whole model", "[executor][pp][sp]") {
  // The stages pass the rank's tokens of the residual stream.
  PpCase sp{2, 2, 1, 2};
  sp.sequence_parallel = true;
  requirePipelineMatches(sp);
  sp.pp = 4;
  sp.accum = 4;
  sp.recompute = RecomputePolicy::Full;
  requirePipelineMatches(sp);
  PpCase zero3{2, 3, 2, 2};
  zero3.sequence_parallel = true;
  zero3.shard_parameters = true;
  zero3.fuse_bias_gradients = true;
  zero3.stage_layers = {1, 3};
  requirePipelineMatches(zero3);
}

TEST_CASE("Interleaved pipeline stages train as the whole model", "[executor][pp][interleaved]") {
  // 2 stages of 2 chunks of one block: as many micro-batches as stages (all
  // forwards first), twice as many, four times.
  for (int accum : {2, 4, 8}) {
    PpCase c{2, accum};
    c.chunks = 2;
    requirePipelineMatches(c);
  }
  // 4 stages of 2 chunks (8 blocks), 3 chunks of 2 stages (6 blocks); with
  // data and tensor parallelism, recompute, uneven chunks.
  PpCase four{4, 8};
  four.chunks = 2;
  four.layers = 8;
  requirePipelineMatches(four);
  four.recompute = RecomputePolicy::Full;
  four.dp = 2;
  requirePipelineMatches(four);
  PpCase three{2, 4, 1, 2};
  three.chunks = 3;
  three.layers = 6;
  three.sequence_parallel = true;
  requirePipelineMatches(three);
  PpCase uneven{2, 4};
  uneven.chunks = 2;
  uneven.layers = 6;
  uneven.stage_layers = {2, 2, 1, 1};
  uneven.shard_parameters = true;
  uneven.dp = 2;
  requirePipelineMatches(uneven);
  PpCase options{2, 6};
  options.chunks = 2;
  options.tied = false;
  options.optimizer_beside_forward = true;
  options.prec = Precision::BF16;
  requirePipelineMatches(options);
}

TEST_CASE("Pipeline plans: one program per stage, 1F1B order, transfers on their own streams", "[planner][pp]") {
  JobSpec job = fourBlockJob(2, 8);
  job.parallel.pipeline_parallel = 4;
  const Plan plan = buildPlan(job);
  REQUIRE(plan.world_size == 8);
  REQUIRE(plan.programs.size() == 4);
  for (int s = 0; s < 4; ++s) {
    INFO("stage " << s);
    const RankPlan& rp = plan.programs[size_t(s)];
    CHECK(rp.ranks == std::vector<int>{2 * s, 2 * s + 1});
    // The stage's blocks only; the embedding on the first, the head on the last.
    std::set<int> layers;
    for (const Task& t : rp.tasks)
      if (t.layer >= 0) layers.insert(t.layer);
    CHECK(layers == std::set<int>{s});
    auto has = [&](OpKind op) {
      return std::any_of(rp.tasks.begin(), rp.tasks.end(), [&](const Task& t) { return t.op == op; });
    };
    CHECK(has(OpKind::Embedding) == (s == 0));
    CHECK(has(OpKind::CrossEntropy) == (s == 3));
    // Transfers: per micro-batch one forward receive and one backward send
    // after the first stage, one forward send and one backward receive
    // before the last; sends and receives on streams of their own.
    auto count = [&](OpKind op) {
      return std::count_if(rp.tasks.begin(), rp.tasks.end(), [&](const Task& t) { return t.op == op; });
    };
    CHECK(count(OpKind::Recv) == 8 * ((s > 0) + (s < 3)));
    CHECK(count(OpKind::Send) == 8 * ((s > 0) + (s < 3)));
    for (const Task& t : rp.tasks)
      if (t.op == OpKind::Send || t.op == OpKind::Recv) {
        INFO(t.name);
        CHECK(t.kind == TaskKind::SendRecv);
        CHECK(rp.streams.at(size_t(t.stream)).name == (t.op == OpKind::Send ? "comm.send" : "comm.recv"));
      }
    // 1F1B: 3 - s forwards before the first backward, then alternating.
    std::string order;
    for (const Task& t : rp.tasks)
      if (t.layer == s && (t.name.find(".ln1.fwd.") != std::string::npos ||
                           t.name.find(".ln1.bwd.") != std::string::npos))
        order += t.phase == Phase::Forward ? 'F' : 'B';
    const std::string expected[] = {"FFFFBFBFBFBFBBBB", "FFFBFBFBFBFBFBBB", "FFBFBFBFBFBFBFBB", "FBFBFBFBFBFBFBFB"};
    CHECK(order == expected[s]);
  }
  // Groups: each boundary's pairs, every stage's ranks at one place, the
  // tied embedding's two stages.
  std::map<std::string, std::vector<std::vector<int>>> groups;
  for (const ProcessGroup& g : plan.groups) groups[g.name].push_back(g.ranks);
  CHECK(groups["pp0"] == std::vector<std::vector<int>>{{0, 2}, {1, 3}});
  CHECK(groups["pp2"] == std::vector<std::vector<int>>{{4, 6}, {5, 7}});
  CHECK(groups["pipe"] == std::vector<std::vector<int>>{{0, 2, 4, 6}, {1, 3, 5, 7}});
  CHECK(groups["embed"] == std::vector<std::vector<int>>{{0, 6}, {1, 7}});
  CHECK(groups["dp"].size() == 4);
  // The first stage keeps the activations of more micro-batches at once.
  CHECK(plan.programs[0].memory.activation_peak_bytes > plan.programs[3].memory.activation_peak_bytes);
  // The model is counted once (the last stage's embedding copy is not another).
  JobSpec one = job;
  one.parallel.pipeline_parallel = 1;
  CHECK(plan.summary.parameters == buildPlan(one).summary.parameters);
  CHECK(planFromJson(planToJson(plan)) == plan);
}

TEST_CASE("Llama pipeline stages train as the whole model", "[executor][pp][llama]") {
  PpCase plain{2, 2};
  plain.llama = true;
  plain.tied = false;  // as Llama has it
  requirePipelineMatches(plain);
  PpCase mixed{2, 4, 1, 2};  // with 2-way tensor parallelism and interleaved chunks
  mixed.llama = true;
  mixed.chunks = 2;
  mixed.tied = true;
  requirePipelineMatches(mixed);
}

TEST_CASE("Interleaved pipeline plans: chunks dealt round-robin, Megatron-LM's interleaved order", "[planner][pp][interleaved]") {
  // 4 blocks in 2 stages of 2 chunks: stage 0 holds blocks 0 and 2, stage 1
  // blocks 1 and 3; 4 micro-batches.
  JobSpec job = fourBlockJob(1, 4);
  job.parallel.pipeline_parallel = 2;
  job.parallel.pipeline_chunks = 2;
  const Plan plan = buildPlan(job);
  REQUIRE(plan.programs.size() == 2);
  // Each (micro-batch, chunk) as "F<chunk>.<micro-batch>" or "B...", read
  // from its block's first LayerNorm.
  const std::string expected[] = {
      // 2(p - s - 1) + (v - 1)p = 4 forwards first, then alternating, the
      // backwards through the chunks in reverse.
      "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3 ",
      "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3 ",
  };
  for (int s = 0; s < 2; ++s) {
    INFO("stage " << s);
    const RankPlan& rp = plan.programs[size_t(s)];
    std::set<int> layers;
    for (const Task& t : rp.tasks)
      if (t.layer >= 0) layers.insert(t.layer);
    CHECK(layers == std::set<int>{s, s + 2});
    std::string order;
    for (const Task& t : rp.tasks)
      if (t.name.find(".ln1.fwd.") != std::string::npos || t.name.find(".ln1.bwd.") != std::string::npos)
        order += fmt::format("{}{}.{} ", t.phase == Phase::Forward ? 'F' : 'B', t.layer / 2, t.micro_batch);
    CHECK(order == expected[s]);
    // Per micro-batch and chunk a receive and a send each way, but the
    // model's ends: the embedding's chunk receives nothing forward, the
    // loss's sends nothing forward.
    auto count = [&](OpKind op) {
      return std::count_if(rp.tasks.begin(), rp.tasks.end(), [&](const Task& t) { return t.op == op; });
    };
    CHECK(count(OpKind::Recv) == 4 * 3);
    CHECK(count(OpKind::Send) == 4 * 3);
  }
  // The last stage's chunks send to the first stage's next chunk: a
  // boundary group from stage 1 back to stage 0.
  std::map<std::string, std::vector<std::vector<int>>> groups;
  for (const ProcessGroup& g : plan.groups) groups[g.name].push_back(g.ranks);
  CHECK(groups["pp0"] == std::vector<std::vector<int>>{{0, 1}});
  CHECK(groups["pp1"] == std::vector<std::vector<int>>{{1, 0}});
  // Less bubble: the simulated step is what tests/sim checks; here the
  // first stage holds more micro-batches' activations than without chunks.
  JobSpec plain = job;
  plain.parallel.pipeline_chunks = 1;
  const Plan one_chunk = buildPlan(plain);
  CHECK(plan.programs[0].memory.activation_peak_bytes > one_chunk.programs[0].memory.activation_peak_bytes);
  CHECK(plan.summary.parameters == one_chunk.summary.parameters);
  CHECK(planFromJson(planToJson(plan)) == plan);
}

TEST_CASE("Pipeline transfers split over the tensor-parallel group train as the whole model", "[executor][pp][tp]") {
  // Each rank sends its half (or quarter) of the activations and of their
  // gradients; the receiving group all-gathers them.
  auto split = [](PpCase c) {
    c.scatter_gather = true;
    return c;
  };
  requirePipelineMatches(split({2, 2, 1, 2}));
  requirePipelineMatches(split({4, 4, 2, 2, Precision::FP32, RecomputePolicy::Full}));
  requirePipelineMatches(split({2, 2, 1, 4, Precision::BF16}));
  PpCase interleaved = split({2, 4, 1, 2});
  interleaved.chunks = 2;
  requirePipelineMatches(interleaved);
  PpCase llama = split({2, 2, 1, 2});
  llama.llama = true;
  requirePipelineMatches(llama);
}

TEST_CASE("Split pipeline transfers move 1/tensor_parallel each and are gathered before use", "[planner][pp][tp]") {
  JobSpec job = fourBlockJob(1, 4);
  job.parallel.pipeline_parallel = 2;
  job.parallel.tensor_parallel = 4;
  JobSpec split = job;
  split.comm.pipeline_scatter_gather = true;
  const Plan whole_transfers = buildPlan(job), split_transfers = buildPlan(split);
  for (size_t s = 0; s < 2; ++s) {
    const RankPlan& a = whole_transfers.programs[s];
    const RankPlan& b = split_transfers.programs[s];
    int64_t bytes_a = 0, bytes_b = 0, recvs = 0, gathers = 0;
    for (const Task& t : a.tasks)
      if (t.op == OpKind::Send || t.op == OpKind::Recv) bytes_a += t.collective->bytes;
    for (size_t i = 0; i < b.tasks.size(); ++i) {
      const Task& t = b.tasks[i];
      if (t.op == OpKind::Send || t.op == OpKind::Recv) {
        bytes_b += t.collective->bytes;
        CHECK(t.attrs.shards == 4);
      }
      if (t.op != OpKind::Recv) continue;
      ++recvs;
      // The next task on the compute stream that touches the buffer gathers it.
      for (size_t j = i + 1; j < b.tasks.size(); ++j)
        if (std::find(b.tasks[j].reads.begin(), b.tasks[j].reads.end(), t.writes[0]) != b.tasks[j].reads.end()) {
          INFO(t.name << " first read by " << b.tasks[j].name);
          CHECK(b.tasks[j].op == OpKind::AllGather);
          CHECK(b.tasks[j].collective->group == "tp");
          gathers += b.tasks[j].op == OpKind::AllGather;
          break;
        }
    }
    INFO("stage " << s);
    CHECK(recvs == 4);  // activations into stage 1, gradients into stage 0, per micro-batch
    CHECK(gathers == recvs);
    CHECK(bytes_b * 4 == bytes_a);
  }
  CHECK(planFromJson(planToJson(split_transfers)) == split_transfers);
}


TEST_CASE("A stage's memory does not grow with the micro-batches it has sent", "[planner][pp][memory]") {
  // 1F1B keeps at most as many micro-batches in flight as there are stages;
  // what a stage sent is freed once the compute stream has joined the send
  // (at the next send), not at the end of the step.
  auto peak = [](int accum, int chunks) {
    JobSpec job = fourBlockJob(1, accum);
    job.parallel.pipeline_parallel = 2;
    job.parallel.pipeline_chunks = chunks;
    const Plan plan = buildPlan(job);
    int64_t most = 0;
    for (const RankPlan& rp : plan.programs) most = std::max(most, rp.memory.activation_peak_bytes);
    return most;
  };
  for (int chunks : {1, 2}) {
    INFO(chunks << " chunks per stage");
    CHECK(peak(16, chunks) == peak(8, chunks));
  }
}
