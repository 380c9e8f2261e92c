#include "engine/cpu/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "engine/cpu/buffer_io.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/kernels_context_parallel.h"
#include "engine/cpu/kernels_vocab_parallel.h"
#include "engine/cpu/op_dispatch.h"
#include "engine/numerics/bf16.h"
#include "engine/numerics/init.h"
#include "engine/passes/buckets.h"
#include "engine/passes/fp8_gemms.h"

namespace tandem::cpu {

// In-process collectives for the ranks of one executor: every rank publishes
// its buffer, each rank sums all contributions in rank order (so the result
// is bit-identical on every rank and run), and a second barrier keeps the
// buffers alive until everyone has read them.
class InProcessCollectives {
 public:
  explicit InProcessCollectives(int world) : world_(world), sync_(world), slots_(world) {}

  void allReduce(int rank, std::vector<float>& data, bool average) {
    reduceRange(rank, data, 0, int64_t(data.size()), average);
  }

  // Rank r's shard [r, r + 1) * size / world becomes the average (or sum)
  // over the ranks; the rest of `data` keeps this rank's values, as NCCL's
  // in-place reduce-scatter leaves them.
  void reduceScatter(int rank, std::vector<float>& data, bool average) {
    const int64_t shard = int64_t(data.size()) / world_;
    reduceRange(rank, data, rank * shard, (rank + 1) * shard, average);
  }

  // Every rank's `mine`, in rank order (an out-of-place all-gather).
  std::vector<float> allGatherConcat(int rank, std::vector<float>& mine) {
    slots_[rank] = &mine;
    sync_.arrive_and_wait();
    std::vector<float> result;
    result.reserve(mine.size() * size_t(world_));
    for (int r = 0; r < world_; ++r) result.insert(result.end(), slots_[r]->begin(), slots_[r]->end());
    sync_.arrive_and_wait();
    return result;
  }

  // Every rank's shard of `data` replaces the same range here.
  void allGather(int rank, std::vector<float>& data) {
    const int64_t shard = int64_t(data.size()) / world_;
    slots_[rank] = &data;
    sync_.arrive_and_wait();
    std::vector<float> result(data);
    for (int r = 0; r < world_; ++r)
      std::copy(slots_[r]->begin() + r * shard, slots_[r]->begin() + (r + 1) * shard, result.begin() + r * shard);
    sync_.arrive_and_wait();
    data.swap(result);
  }

  // Point to point, in a group of two (pipeline stages): a send never
  // waits (its data is queued for the peer), a receive waits for the
  // peer's next send. So a rank's sends and receives, issued in its plan's
  // order, cannot wait on each other as rendezvous transfers could.
  void send(int place, std::vector<float> data) {
    {
      std::lock_guard<std::mutex> lock(mail_mutex_);
      mail_[1 - place].push_back(std::move(data));
    }
    mail_ready_.notify_all();
  }
  std::vector<float> recv(int place) {
    std::unique_lock<std::mutex> lock(mail_mutex_);
    mail_ready_.wait(lock, [&] { return !mail_[place].empty(); });
    std::vector<float> data = std::move(mail_[place].front());
    mail_[place].pop_front();
    return data;
  }

 private:
  void reduceRange(int rank, std::vector<float>& data, int64_t begin, int64_t end, bool average) {
    slots_[rank] = &data;
    sync_.arrive_and_wait();
    std::vector<float> result(data);
    for (int64_t i = begin; i < end; ++i) {
      double s = 0;
      for (int r = 0; r < world_; ++r) s += (*slots_[r])[size_t(i)];
      result[size_t(i)] = float(average ? s / world_ : s);
    }
    sync_.arrive_and_wait();
    data.swap(result);
  }

 private:
  int world_;
  std::barrier<> sync_;
  std::vector<std::vector<float>*> slots_;
  std::mutex mail_mutex_;
  std::condition_variable mail_ready_;
  std::deque<std::vector<float>> mail_[2];  // per receiving place
};

struct CpuExecutor::Impl {
  Plan plan;
  std::vector<const RankPlan*> program_of;     // per rank (pipeline stages run programs of their own)
  std::vector<std::vector<std::byte>> arenas;  // one per rank
  std::unique_ptr<TokenSource> data;
  int steps_done = 0;
  // schedule.optimizer_beside_forward: the step whose gradients the next
  // step's first tasks (AdamW, attrs.from_previous_step) apply, or -1.
  int pending_update = -1;
  bool updates_at_start = false;  // the plan has such tasks
  std::vector<double> loss_sums;  // per rank, this step
  // training.precision fp8: each rank's FP8 scales (empty otherwise).
  std::vector<std::unique_ptr<Fp8Scales>> fp8;
  // One in-process backend per process group; a rank's collective on a
  // group name runs in the group of that name that contains it, where the
  // rank has a place (its index in the group's ranks).
  std::vector<std::unique_ptr<InProcessCollectives>> group_backends;
  std::map<std::pair<std::string, int>, std::pair<InProcessCollectives*, int>> member;  // (group, rank) -> backend, place

  std::pair<InProcessCollectives*, int> backendFor(const std::string& group, int rank) const {
    const auto it = member.find({group, rank});
    if (it == member.end())
      throw std::logic_error(fmt::format("rank {} is in no process group named '{}'", rank, group));
    return it->second;
  }

  const RankPlan& programOf(int rank) const { return *program_of.at(size_t(rank)); }

  explicit Impl(const Plan& p) : plan(p) {
    for (const auto& why :
         {fp8ParamGatherRefusal(plan.job, "tandem train"), gradReduceFp32Refusal(plan.job, "tandem train")})
      if (why) throw std::runtime_error("cpu executor: " + *why);
    program_of.assign(size_t(plan.world_size), nullptr);
    for (const RankPlan& rp : plan.programs) {
      for (int r : rp.ranks) {
        if (r < 0 || r >= plan.world_size || program_of[size_t(r)])
          throw std::runtime_error(fmt::format("cpu executor: rank {} is outside the world or in two programs", r));
        program_of[size_t(r)] = &rp;
      }
      updates_at_start = updates_at_start || std::any_of(rp.tasks.begin(), rp.tasks.end(), [](const Task& t) {
                           return t.op == OpKind::AdamW && t.attrs.from_previous_step;
                         });
    }
    for (int r = 0; r < plan.world_size; ++r)
      if (!program_of[size_t(r)]) throw std::runtime_error(fmt::format("cpu executor: no program for rank {}", r));
    data = makeTokenSource(plan.job);
    if (plan.job.training.precision == Precision::FP8) {
      // FP8 copies gathered over a group would need the group's common scale
      // (Transformer Engine reduces the amax over it first): not run here yet.
      for (const RankPlan& rp : plan.programs)
        for (const Task& t : rp.tasks)
          if (t.collective && std::any_of(t.writes.begin(), t.writes.end(), [&](int b) {
                return rp.buffers[size_t(b)].dtype == DType::F8;
              }))
            throw std::runtime_error(fmt::format(
                "cpu executor: {} moves FP8 copies between ranks (sequence parallelism with training.precision "
                "fp8); the CPU reference does not run FP8 collectives yet",
                t.name));
      const bool current = plan.job.training.fp8_scaling == Fp8Scaling::Current;
      for (int r = 0; r < plan.world_size; ++r) fp8.push_back(std::make_unique<Fp8Scales>(programOf(r), current));
    }
    arenas.resize(size_t(plan.world_size));
    for (int r = 0; r < plan.world_size; ++r) arenas[size_t(r)].assign(size_t(programOf(r).memory.arena_bytes), {});
    for (const ProcessGroup& g : plan.groups) {
      group_backends.push_back(std::make_unique<InProcessCollectives>(int(g.ranks.size())));
      for (size_t i = 0; i < g.ranks.size(); ++i)
        if (!member.emplace(std::pair{g.name, g.ranks[i]}, std::pair{group_backends.back().get(), int(i)}).second)
          throw std::runtime_error(fmt::format("cpu executor: rank {} is in two process groups named '{}'",
                                               g.ranks[i], g.name));
    }
    const int shards = shardCount(plan.job);
    // Large parameters' values are drawn on every core (the same values).
    const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
    for (int r = 0; r < plan.world_size; ++r) {
      const RankPlan* program = &programOf(r);
      for (const ParamInfo& pi : program->params) {
        // Sharded parameters live in their bucket's shard (below); their
        // own buffers are gathered copies.
        if (program->buckets.at(size_t(pi.bucket)).param_shard >= 0) continue;
        const std::vector<float> v = initialParameterValues(plan.job, *program, pi, r, threads);
        storeFromFloat(arenas[r].data(), program->buffers[pi.param], v.data());
        if (pi.master >= 0 && pi.master != pi.param)
          storeFromFloat(arenas[r].data(), program->buffers[pi.master], v.data());
      }
      // Sharded optimizer, bf16: each rank's fp32 master shard; sharded
      // parameters: each rank's shard of them.
      for (const GradBucket& b : program->buckets)
        for (int shard : {b.master_shard, b.param_shard})
          if (shard >= 0) {
            const std::vector<float> v = initialMasterShard(plan.job, *program, b, r, shards, threads);
            storeFromFloat(arenas[r].data(), program->buffers[shard], v.data());
          }
    }
  }

  void runTask(int rank, const Task& t, int step, TaskBuffers& io);
  void runTaskWork(int rank, const Task& t, int step, TaskBuffers& io);
  void writeTransposedCopy(int rank, const Task& t, TaskBuffers& io);
  void runCollective(int rank, const Task& t, TaskBuffers& io);
  void runGradNorm(int rank, const Task& t, TaskBuffers& io);
  void runAdamW(int rank, const Task& t, int step, TaskBuffers& io);
  bool vocabularyParallel(int rank, const Task& t, TaskBuffers& io);
  bool contextParallel(int rank, const Task& t, TaskBuffers& io);
  void gatheredEmbeddingBackward(int rank, const Task& t, int step, TaskBuffers& io);
  // only_updates: the previous step's updates alone (finishOptimizer).
  void runRank(int rank, int step, bool with_optimizer, bool only_gathers = false, bool only_updates = false);
  void onEveryRank(const std::function<void(int rank)>& fn);
  StepResult runStep(bool with_optimizer);
};

// Adapts TaskBuffers to the storage interface of runMathOp.
struct FloatStorage {
  TaskBuffers& io;
  uint64_t random_key;
  const float* in(int b) { return io.in(b); }
  float* out(int b) { return io.out(b); }
  const int32_t* ints(int b) { return io.ints(b); }
  uint8_t* bytes(int b) { return io.bytes(b); }
  int64_t elements(int b) const { return io.elements(b); }
  void settle(int b) { io.settle(b); }
  uint64_t randomKey() const { return random_key; }
};

// The draws (attention dropout) of a step on a rank: the job's seed, the
// step and the rank, mixed so that neighbouring values share no bits.
uint64_t stepRandomKey(uint64_t seed, int step, int rank) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t(step) + 1) + 0xC2B2AE3D27D4EB4Full * (uint64_t(rank) + 1);
  z = (z ^ (z >> 33)) * 0xFF51AFD7ED558CCDull;
  return z ^ (z >> 33);
}

void CpuExecutor::Impl::runTask(int rank, const Task& t, int step, TaskBuffers& io) {
  runTaskWork(rank, t, step, io);
  if (t.attrs.fp8_transposed_out) writeTransposedCopy(rank, t, io);
}

// attrs.fp8_transposed_out: the last output holds the first's values
// transposed ([columns, rows]); the commit casts both with the task's scale
// (the same amax, so the same scale and codes).
void CpuExecutor::Impl::writeTransposedCopy(int rank, const Task& t, TaskBuffers& io) {
  const int from = t.writes.front(), to = t.writes.back();
  const int64_t rows = programOf(rank).buffers.at(size_t(to)).shape.back();
  const int64_t columns = rows > 0 ? io.elements(from) / rows : 0;
  if (t.writes.size() < 2 || rows * columns != io.elements(to) || io.elements(from) != io.elements(to))
    throw std::logic_error(fmt::format("{}: no transposed copy of its output to write", t.name));
  const float* x = io.in(from);
  float* xt = io.out(to);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < columns; ++c) xt[c * rows + r] = x[r * columns + c];
}

void CpuExecutor::Impl::runTaskWork(int rank, const Task& t, int step, TaskBuffers& io) {
  const auto& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  FloatStorage storage{io, stepRandomKey(plan.job.training.seed, step, rank)};
  if (a.context_parallel > 1 && contextParallel(rank, t, io)) return;
  if (a.tensor_parallel > 1 && vocabularyParallel(rank, t, io)) return;
  if (t.op == OpKind::Matmul && a.tensor_parallel > 1 && a.has_bias && plan.job.tensorParallelPlace(rank) != 0) {
    // A row-parallel layer's bias is added once, by the group's first rank
    // (the all-reduce after it sums the ranks' partial products).
    Task without_bias = t;
    without_bias.attrs.has_bias = false;
    runMathOp<float>(without_bias, storage);
    return;
  }
  if (runMathOp<float>(t, storage)) {
    if (t.op == OpKind::CrossEntropy) {
      const float* losses = io.in(W[0]);
      double s = 0;
      for (int64_t i = 0; i < a.m; ++i) s += losses[i];
      loss_sums[rank] += s;
    }
    return;
  }
  switch (t.op) {
    case OpKind::LoadBatch:
      fillMicroBatch(*data, plan.job, step, int(a.micro_batch), rank, io.mutableInts(W[0]),
                     io.mutableInts(W[1]));
      break;
    case OpKind::EmbeddingBwd:  // a.shards > 1 (runMathOp has the others)
      gatheredEmbeddingBackward(rank, t, step, io);
      break;
    case OpKind::AllGather:
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
      runCollective(rank, t, io);
      break;
    case OpKind::Send: {
      // Split over the tensor-parallel group (comm.pipeline_scatter_gather):
      // the slice of the rank's place.
      const auto [group, place] = backendFor(t.collective.value().group, rank);
      const ShardRange s = shardOf(plan.job.tensorParallelPlace(rank), a.shards, io.elements(R[0]));
      group->send(place, std::vector<float>(io.in(R[0]) + s.begin, io.in(R[0]) + s.end));
      break;
    }
    case OpKind::Recv: {
      const auto [group, place] = backendFor(t.collective.value().group, rank);
      const std::vector<float> v = group->recv(place);
      const ShardRange s = shardOf(plan.job.tensorParallelPlace(rank), a.shards, io.elements(W[0]));
      if (int64_t(v.size()) != s.end - s.begin)
        throw std::logic_error(fmt::format("{}: received {} elements into {}", t.name, v.size(), s.end - s.begin));
      std::memcpy(io.out(W[0]) + s.begin, v.data(), v.size() * sizeof(float));
      break;
    }
    case OpKind::GradNorm:
      runGradNorm(rank, t, io);
      break;
    case OpKind::CastFp8:  // the commit casts with the task's scale (Fp8Scales); runTask the transposed copy
      std::memcpy(io.out(W[0]), io.in(R[0]), size_t(io.elements(R[0])) * sizeof(float));
      break;
    case OpKind::AdamW:
      runAdamW(rank, t, step, io);
      break;
    default:
      throw std::logic_error(fmt::format("cpu executor: no implementation of {}", toString(t.op)));
  }
}

// All-reduce, reduce-scatter and all-gather in the task's process group: in
// place, or out of place (an all-gather of every rank's buffer, a
// reduce-scatter into the rank's shard alone).
void CpuExecutor::Impl::runCollective(int rank, const Task& t, TaskBuffers& io) {
  const auto& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  if (t.op == OpKind::AllGather && R[0] != W[0]) {  // out of place: every rank's buffer, in rank order
    const auto [group, place] = backendFor(t.collective.value().group, rank);
    std::vector<float> mine(io.in(R[0]), io.in(R[0]) + io.elements(R[0]));
    const std::vector<float> all = group->allGatherConcat(place, mine);
    if (int64_t(all.size()) != io.elements(W[0]))
      throw std::logic_error(fmt::format("{}: gathers {} elements into {}", t.name, all.size(), io.elements(W[0])));
    std::memcpy(io.out(W[0]), all.data(), all.size() * sizeof(float));
    return;
  }
  const auto [group, place] = backendFor(t.collective.value().group, rank);
  std::vector<float> v(io.in(R[0]), io.in(R[0]) + io.elements(R[0]));
  if (t.op == OpKind::AllReduce)
    group->allReduce(place, v, t.collective.value().reduce == ReduceOp::Avg);
  else if (t.op == OpKind::ReduceScatter)
    group->reduceScatter(place, v, t.collective.value().reduce == ReduceOp::Avg);
  else
    group->allGather(place, v);
  if (t.op == OpKind::ReduceScatter && R[0] != W[0]) {  // out of place: the rank's shard alone
    const ShardRange s = shardOf(place, a.shards, int64_t(v.size()));
    if (s.end - s.begin != io.elements(W[0]))
      throw std::logic_error(fmt::format("{}: a shard of {} elements into {}", t.name, s.end - s.begin,
                                         io.elements(W[0])));
    std::memcpy(io.out(W[0]), v.data() + s.begin, size_t(s.end - s.begin) * sizeof(float));
    return;
  }
  std::memcpy(io.out(W[0]), v.data(), v.size() * sizeof(float));
}

// The gradient norm, or this rank's share of its sum of squares when
// all-reduces over the rank's groups complete it.
void CpuExecutor::Impl::runGradNorm(int rank, const Task& t, TaskBuffers& io) {
  const auto& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  const RankPlan* program = &programOf(rank);
  // The rank's place in its data-parallel group, which places its shards.
  const int dp_rank = plan.job.dataParallelRank(rank);
  if (a.shards == 0 && !a.norm_squared) {  // the whole model's gradients: the norm
    double ss = 0;
    for (int b : R) ss += sumOfSquares(io.in(b), io.elements(b));
    io.out(W[0])[0] = float(std::sqrt(ss));
    return;
  }
  // This rank's share of the sum of squares (summing all-reduces over
  // its groups follow): with a sharded optimizer its parameters'
  // segments of its shard of each bucket (of the whole bucket, or of the
  // gradient shard, whose padding is not zero), each gradient that other
  // ranks of the replica hold as well counted 1/copies.
  double ss = 0;
  for (int pi : a.params) {
    const ParamInfo& p = program->params[size_t(pi)];
    const double weight = 1.0 / double(p.copies);
    if (a.shards == 0) {
      ss += weight * sumOfSquares(io.in(p.grad), io.elements(p.grad));
      continue;
    }
    const GradBucket& bucket = program->buckets.at(size_t(p.bucket));
    const ShardRange shard =
        shardOf(dp_rank, a.shards, program->buffers.at(size_t(bucket.buffer)).elementCount());
    const ShardSegment seg = segmentInShard(*program, p, shard);
    if (seg.to <= seg.from) continue;
    const float* grad = bucket.grad_shard >= 0 ? io.in(bucket.grad_shard) + seg.shard_offset
                                               : io.in(bucket.buffer) + shard.begin + seg.shard_offset;
    ss += weight * sumOfSquares(grad, seg.to - seg.from);
  }
  io.out(W[0])[0] = float(ss);
}

// AdamW on the task's parameters, clipped by the gradient norm: on whole
// parameters, or sharded on each parameter's part of the rank's shard.
void CpuExecutor::Impl::runAdamW(int rank, const Task& t, int step, TaskBuffers& io) {
  const auto& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  const RankPlan* program = &programOf(rank);
  // The rank's place in its data-parallel group, which places its shards.
  const int dp_rank = plan.job.dataParallelRank(rank);
  const auto& tr = plan.job.training;
  const bool squared = a.shards > 0 || a.norm_squared;  // the norm buffer holds a sum of squares
  const float norm = squared ? std::sqrt(io.in(R[1])[0]) : io.in(R[1])[0];
  const float scale = (tr.grad_clip > 0 && norm > tr.grad_clip) ? float(tr.grad_clip / (norm + 1e-6)) : 1.0f;
  const float lr = float(learningRate(tr, step));
  if (a.shards > 0) {
    // Sharded: reads are {grads, norm, master shard (fp32 jobs: the
    // parameter bucket), m shard, v shard}; each parameter's part of
    // the rank's shard is updated.
    // The updated parameters go to W[0]: the flat parameters (this
    // rank's part of them), or with sharded parameters the rank's shard;
    // the gradients come from R[0], the whole bucket or its shard.
    const bool separate_master = R[2] != W[0];
    for (int pi : a.params) {
      const ParamInfo& p = program->params[pi];
      const GradBucket& bucket = program->buckets.at(size_t(p.bucket));
      const ShardRange shard =
          shardOf(dp_rank, a.shards, program->buffers.at(size_t(bucket.buffer)).elementCount());
      const ShardSegment seg = segmentInShard(*program, p, shard);
      if (seg.to <= seg.from) continue;
      const int64_t n = seg.to - seg.from;
      const bool shard_out = bucket.param_shard >= 0;
      float* param = shard_out ? io.out(W[0]) + seg.shard_offset : io.out(p.param) + seg.from;
      float* master = separate_master ? io.out(R[2]) + seg.shard_offset : param;
      const float* grad = bucket.grad_shard >= 0 ? io.in(R[0]) + seg.shard_offset : io.in(p.grad) + seg.from;
      adamwStep(master, io.out(R[3]) + seg.shard_offset, io.out(R[4]) + seg.shard_offset,
                grad, n, lr, float(tr.beta1), float(tr.beta2), float(tr.eps),
                p.weight_decay ? float(tr.weight_decay) : 0.0f, step + 1, scale);
      if (separate_master) std::memcpy(param, master, n * sizeof(float));
    }
    return;
  }
  for (int pi : a.params) {
    const ParamInfo& p = program->params[pi];
    const int64_t n = io.elements(p.param);
    float* master = io.out(p.master);
    adamwStep(master, io.out(p.adam_m), io.out(p.adam_v), io.in(p.grad), n, lr, float(tr.beta1),
              float(tr.beta2), float(tr.eps), p.weight_decay ? float(tr.weight_decay) : 0.0f, step + 1, scale);
    if (p.master != p.param) std::memcpy(io.out(p.param), master, n * sizeof(float));
  }
}

// The embedding and the loss with the vocabulary split over the rank's
// tensor-parallel group (engine/cpu/kernels_vocab_parallel.h); false for
// every other task.
bool CpuExecutor::Impl::vocabularyParallel(int rank, const Task& t, TaskBuffers& io) {
  const auto& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  const int64_t place = plan.job.tensorParallelPlace(rank), ranks = a.tensor_parallel;
  switch (t.op) {
    case OpKind::Embedding: {
      const int64_t rows = a.v / ranks;
      vocabParallelEmbedding(io.out(W[0]), io.ints(R[0]), io.in(R[1]), R.size() > 2 ? io.in(R[2]) : nullptr, a.b, a.t,
                             a.c, place * rows, rows, /*add_position=*/place == 0);
      return true;
    }
    case OpKind::EmbeddingBwd: {
      const int64_t rows = a.v / ranks;
      vocabParallelEmbeddingBackward(io.out(W[0]), W.size() > 1 ? io.out(W[1]) : nullptr, io.in(R[0]), io.ints(R[1]),
                                     a.b, a.t, a.c, place * rows, rows, a.accumulate, a.accumulate_params);
      return true;
    }
    case OpKind::CrossEntropyStats:
      crossEntropyStats(io.out(W[0]), io.in(R[0]), io.ints(R[1]), a.m, place * a.v, a.v);
      return true;
    case OpKind::CrossEntropy: {
      float* losses = io.out(W[0]);
      vocabParallelCrossEntropy(losses, io.in(R[2]), a.m, ranks);
      double s = 0;
      for (int64_t i = 0; i < a.m; ++i) s += losses[i];
      loss_sums[size_t(rank)] += s;
      return true;
    }
    case OpKind::CrossEntropyBwd:
      vocabParallelCrossEntropyBackward(io.out(W[0]), io.ints(R[1]), io.in(R[2]), a.m, place * a.v, a.v, ranks,
                                        a.loss_scale);
      return true;
    default: return false;
  }
}

// The tasks whose work depends on where the rank's tokens sit in the
// sequence (engine/cpu/kernels_context_parallel.h): the attention over the
// gathered keys and values, and the position table's rows of the embedding
// (taken out into a table of the rank's positions, and its gradient's rows
// added back to theirs). False for every other task.
bool CpuExecutor::Impl::contextParallel(int rank, const Task& t, TaskBuffers& io) {
  const auto& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  const int cp = int(a.context_parallel), place = plan.job.contextParallelPlace(rank);
  const AttentionLayout layout{a.c, a.h, a.kv_heads};
  const int64_t tp_place = plan.job.tensorParallelPlace(rank), rows = a.tensor_parallel > 1 ? a.v / a.tensor_parallel : 0;
  auto positionRows = [&](int64_t t_) { return contextParallelPosition(t_, a.t, place, cp) * a.c; };
  switch (t.op) {
    case OpKind::Attention:
      contextParallelAttentionForward<float>(io.out(W[0]), io.out(W[1]), io.in(R[0]), io.in(R[1]), a.b, a.t, layout,
                                             place, cp);
      return true;
    case OpKind::AttentionBwd:
      contextParallelAttentionBackward<float>(io.out(W[0]), io.out(W[1]), io.in(R[0]), io.in(R[1]), io.in(R[2]),
                                              io.in(R[3]), io.in(R[4]), a.b, a.t, layout, place, cp, a.accumulate);
      return true;
    case OpKind::Embedding: {
      std::vector<float> positions;  // the position table's rows of the rank's tokens (none: Llama)
      if (R.size() > 2) {
        const float* wpe = io.in(R[2]);
        for (int64_t i = 0; i < a.t; ++i)
          positions.insert(positions.end(), wpe + positionRows(i), wpe + positionRows(i) + a.c);
      }
      const float* wpe_rows = positions.empty() ? nullptr : positions.data();
      if (a.tensor_parallel > 1)
        vocabParallelEmbedding(io.out(W[0]), io.ints(R[0]), io.in(R[1]), wpe_rows, a.b, a.t, a.c, tp_place * rows, rows,
                               /*add_position=*/tp_place == 0);
      else
        embeddingForward<float>(io.out(W[0]), io.ints(R[0]), io.in(R[1]), wpe_rows, a.b, a.t, a.c);
      return true;
    }
    case OpKind::EmbeddingBwd: {
      if (a.shards > 1) return false;  // refused by the job's validation
      float* dwte = io.out(W[0]);
      std::vector<float> dpositions(W.size() > 1 ? size_t(a.t * a.c) : 0, 0.0f);
      float* dpos = dpositions.empty() ? nullptr : dpositions.data();
      if (a.tensor_parallel > 1) {
        vocabParallelEmbeddingBackward(dwte, dpos, io.in(R[0]), io.ints(R[1]), a.b, a.t, a.c, tp_place * rows, rows,
                                       a.accumulate, true);
      } else {
        if (!a.accumulate) std::fill(dwte, dwte + io.elements(W[0]), 0.0f);
        embeddingBackward<float>(dwte, dpos, io.in(R[0]), io.ints(R[1]), a.b, a.t, a.c, a.v, true);
      }
      if (!dpos) return true;
      float* dwpe = io.out(W[1]);
      if (!a.accumulate_params) std::fill(dwpe, dwpe + io.elements(W[1]), 0.0f);
      for (int64_t i = 0; i < a.t; ++i)
        for (int64_t c = 0; c < a.c; ++c) dwpe[positionRows(i) + c] += dpos[i * a.c + c];
      return true;
    }
    default: return false;
  }
}

// The embedding backward over every rank's input gradient (gathered in rank
// order, [ranks * B * T, C]) into this rank's shard of the bucket:
// engine/passes/embedding_gather.h. Each rank's tokens come from the global
// sample addressing.
void CpuExecutor::Impl::gatheredEmbeddingBackward(int rank, const Task& t, int step, TaskBuffers& io) {
  const auto& a = t.attrs;
  const RankPlan* program = &programOf(rank);
  const JobSpec& job = plan.job;
  const int world = int(a.shards);
  const int64_t n = a.b * a.t, C = a.c;
  std::vector<int32_t> tokens(static_cast<size_t>(world * n)), targets(static_cast<size_t>(n));
  for (int r = 0; r < world; ++r)  // the data-parallel peers' samples
    fillMicroBatch(*data, job, step, t.micro_batch, job.rankAt(job.pipelineStage(rank), r, job.tensorParallelPlace(rank)),
                   tokens.data() + r * n, targets.data());
  // Llama's embedding has no position table: wte alone.
  const bool positions = t.writes.size() > 1;
  const Buffer& wte = program->buffers[t.writes[0]];
  const Buffer& wpe = program->buffers[t.writes[positions ? 1 : 0]];
  if (wte.parent < 0 || wte.parent != wpe.parent)
    throw std::logic_error(t.name + ": gathered embedding gradients must share one bucket");
  const ShardRange shard = shardOf(job.dataParallelRank(rank), world, program->buffers[wte.parent].elementCount());
  const int64_t wte_at = wte.parent_offset / dtypeSize(wte.dtype);
  const int64_t wpe_at = wpe.parent_offset / dtypeSize(wpe.dtype);
  auto mine = [&](int64_t element) { return element >= shard.begin && element < shard.end; };
  const float inv = 1.0f / float(world);
  const float* dy = io.in(t.reads[0]);
  float* dwte = io.out(t.writes[0]);
  for (int64_t p = 0; p < world * n; ++p) {
    const int64_t row = int64_t(tokens[size_t(p)]) * C;
    for (int64_t c = 0; c < C; ++c)
      if (mine(wte_at + row + c)) dwte[row + c] += dy[p * C + c] * inv;
  }
  if (!positions) return;
  float* dwpe = io.out(t.writes[1]);
  for (int64_t i = 0; i < a.t * C; ++i) {
    if (!mine(wpe_at + i)) continue;
    float s = 0.f;
    for (int64_t q = 0; q < world * a.b; ++q) s += dy[q * a.t * C + i];
    dwpe[i] = (a.accumulate_params ? dwpe[i] : 0.f) + s * inv;
  }
}

void CpuExecutor::Impl::runRank(int rank, int step, bool with_optimizer, bool only_gathers, bool only_updates) {
  const RankPlan* program = &programOf(rank);
  TaskBuffers io(arenas[rank].data(), *program, fp8.empty() ? nullptr : fp8[size_t(rank)].get());
  for (const Task& t : program->tasks) {
    // The previous step's update belongs to that step: it runs whenever one
    // is pending (also before gradients computed without an optimizer), with
    // that step's learning rate and bias corrections.
    const bool previous = t.op == OpKind::AdamW && t.attrs.from_previous_step;
    if (previous && pending_update < 0) continue;
    if (only_updates && !previous) continue;
    if (!with_optimizer && t.op == OpKind::AdamW && !previous) continue;
    // Only the parameter all-gathers (in place), not the embedding gradient's.
    if (only_gathers && (t.op != OpKind::AllGather || t.reads[0] != t.writes[0])) continue;
    try {
      io.setTask(&t);
      runTask(rank, t, previous ? pending_update : step, io);
      io.commit();
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("rank {} task {} ({}): {}", rank, t.id, t.name, e.what()));
    }
  }
}

// Runs fn on one thread per rank (the collectives need every rank at once).
void CpuExecutor::Impl::onEveryRank(const std::function<void(int rank)>& fn) {
  if (plan.world_size == 1) return fn(0);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(plan.world_size);
  for (int r = 0; r < plan.world_size; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& th : threads) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

StepResult CpuExecutor::Impl::runStep(bool with_optimizer) {
  const auto start = std::chrono::steady_clock::now();
  const int step = steps_done;
  loss_sums.assign(plan.world_size, 0.0);
  onEveryRank([&](int r) { runRank(r, step, with_optimizer); });
  for (auto& scales : fp8) scales->endStep();
  StepResult res;
  res.step = step;
  // The ranks of a tensor-parallel group compute the same loss: one counts
  // (only the last pipeline stage computes it).
  double total = 0;
  for (int r = 0; r < plan.world_size; r += plan.job.parallel.tensor_parallel) total += loss_sums[size_t(r)];
  const RankPlan* program = &programOf(0);
  res.loss = total / double(plan.job.tokensPerStep());
  for (const Task& t : program->tasks)
    if (t.op == OpKind::GradNorm) {
      const float v = loadAsFloat(arenas[0].data(), program->buffers[t.writes[0]])[0];
      res.grad_norm = t.attrs.shards > 0 || t.attrs.norm_squared ? std::sqrt(v) : v;
    }
  res.lr = learningRate(plan.job.training, step);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  pending_update = with_optimizer && updates_at_start ? step : -1;
  if (with_optimizer) ++steps_done;
  return res;
}

CpuExecutor::CpuExecutor(const Plan& plan) : impl_(std::make_unique<Impl>(plan)) {}
CpuExecutor::~CpuExecutor() = default;

StepResult CpuExecutor::step() { return impl_->runStep(true); }
StepResult CpuExecutor::computeGradients() { return impl_->runStep(false); }

void CpuExecutor::finishOptimizer() {
  if (impl_->pending_update < 0) return;
  impl_->onEveryRank([&](int r) { impl_->runRank(r, impl_->steps_done, false, false, /*only_updates=*/true); });
  impl_->pending_update = -1;
}

void CpuExecutor::gatherParameters() {
  impl_->onEveryRank([&](int r) { impl_->runRank(r, impl_->steps_done, false, /*only_gathers=*/true); });
}

std::vector<float> CpuExecutor::parameterValues(int rank, int param) const {
  const RankPlan& program = impl_->programOf(rank);
  const JobSpec& job = impl_->plan.job;
  const ParamInfo& p = program.params.at(size_t(param));
  const GradBucket& bucket = program.buckets.at(size_t(p.bucket));
  if (bucket.param_shard < 0) return readBuffer(rank, p.param);
  // Sharded parameters: every part of the parameter (of rank's slice, with
  // tensor parallelism), from the shards of the first shard group's ranks
  // at rank's tensor-parallel place (hybrid sharding: every group holds
  // them all).
  std::vector<float> out(size_t(program.buffers.at(size_t(p.param)).elementCount()));
  const int world = shardCount(job);
  for (int r = 0; r < world; ++r) {
    const ShardSegment seg =
        segmentInShard(program, p, shardOf(r, world, program.buffers.at(size_t(bucket.buffer)).elementCount()));
    if (seg.to <= seg.from) continue;
    const std::vector<float> shard =
        readBuffer(job.rankAt(job.pipelineStage(rank), r, job.tensorParallelPlace(rank)), bucket.param_shard);
    std::copy(shard.begin() + seg.shard_offset, shard.begin() + seg.shard_offset + (seg.to - seg.from),
              out.begin() + seg.from);
  }
  return out;
}

std::vector<float> CpuExecutor::readBuffer(int rank, int buffer) const {
  return loadAsFloat(impl_->arenas.at(rank).data(), impl_->programOf(rank).buffers.at(buffer));
}

void CpuExecutor::writeBuffer(int rank, int buffer, const std::vector<float>& values) {
  const Buffer& b = impl_->programOf(rank).buffers.at(buffer);
  if (int64_t(values.size()) != b.elementCount())
    throw std::invalid_argument(fmt::format("writeBuffer: {} expects {} values, got {}", b.name,
                                            b.elementCount(), values.size()));
  storeFromFloat(impl_->arenas.at(rank).data(), b, values.data());
}

const Plan& CpuExecutor::plan() const { return impl_->plan; }
int CpuExecutor::stepsDone() const { return impl_->steps_done; }

checkpoint::Snapshot CpuExecutor::snapshot() const {
  checkpoint::Snapshot s;
  // FP8 delayed scaling's amax histories: state outside the buffers.
  for (const auto& scales : impl_->fp8) s.rank_state.push_back(scales->save());
  s.step = impl_->steps_done;
  s.update_pending = impl_->pending_update >= 0;
  s.ranks.resize(size_t(impl_->plan.world_size));
  for (int r = 0; r < impl_->plan.world_size; ++r) {
    const RankPlan& program = impl_->programOf(r);
    for (int id : checkpoint::savedBuffers(program, s.update_pending)) {
      const Buffer& b = program.buffers[size_t(id)];
      const std::byte* at = impl_->arenas[size_t(r)].data() + b.offset;
      s.ranks[size_t(r)].push_back({id, std::vector<std::byte>(at, at + b.bytes)});
    }
  }
  return s;
}

std::vector<std::byte> CpuExecutor::bufferBytes(int rank, int buffer) const {
  const Buffer& b = impl_->programOf(rank).buffers.at(size_t(buffer));
  const std::byte* at = impl_->arenas.at(size_t(rank)).data() + b.offset;
  return std::vector<std::byte>(at, at + b.bytes);
}

void CpuExecutor::flipBit(int rank, int buffer, int64_t bit) {
  const Buffer& b = impl_->programOf(rank).buffers.at(size_t(buffer));
  if (bit < 0 || bit >= b.bytes * 8) throw std::out_of_range("flipBit: bit outside the buffer");
  std::byte& at = impl_->arenas.at(size_t(rank))[size_t(b.offset + bit / 8)];
  at ^= std::byte(1u << (bit % 8));
}

void CpuExecutor::restore(const checkpoint::Snapshot& snap) {
  if (snap.ranks.size() != size_t(impl_->plan.world_size))
    throw checkpoint::CheckpointError(fmt::format("the checkpoint has {} ranks, the plan {}", snap.ranks.size(),
                                                  impl_->plan.world_size));
  for (int r = 0; r < impl_->plan.world_size; ++r) {
    const RankPlan& program = impl_->programOf(r);
    checkpoint::checkSavedBuffers(program, snap.update_pending, snap.ranks[size_t(r)], fmt::format("rank {}", r));
    for (const checkpoint::BufferBytes& bb : snap.ranks[size_t(r)]) {
      const Buffer& b = program.buffers.at(size_t(bb.buffer));
      if (size_t(b.bytes) != bb.bytes.size())
        throw checkpoint::CheckpointError(fmt::format("rank {} buffer {}: {} bytes, the plan has {}", r, b.name,
                                                      bb.bytes.size(), b.bytes));
      std::memcpy(impl_->arenas[size_t(r)].data() + b.offset, bb.bytes.data(), bb.bytes.size());
    }
  }
  // FP8 delayed scaling: each rank's scales and amax histories.
  for (size_t r = 0; r < impl_->fp8.size(); ++r) {
    const std::string state = r < snap.rank_state.size() ? snap.rank_state[r] : std::string();
    if (state.empty() && impl_->plan.job.training.fp8_scaling == Fp8Scaling::Delayed)
      throw checkpoint::CheckpointError(fmt::format(
          "rank {}: the checkpoint has no FP8 scale state, which this FP8 job with delayed scaling needs", r));
    try {
      if (!state.empty()) impl_->fp8[r]->load(state);
    } catch (const std::runtime_error& e) {
      throw checkpoint::CheckpointError(fmt::format("rank {}: {}", r, e.what()));
    }
  }
  impl_->steps_done = int(snap.step);
  // The step whose AdamW the next step's first tasks apply.
  impl_->pending_update = snap.update_pending ? int(snap.step) - 1 : -1;
}

}  // namespace tandem::cpu
