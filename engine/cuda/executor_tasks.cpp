// One Plan task -> the launches that implement it, on the task's stream,
// after the task's events and before the event it records.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "engine/cuda/executor_impl.h"
#include "engine/cuda/vocab_parallel.h"
#include "engine/numerics/init.h"
#include "engine/passes/fusion.h"

namespace tandem::cuda {

void CudaExecutor::Impl::enqueueTask(int index) {
  const Task& t = program->tasks[index];
  cudaStream_t s = streams.at(t.stream);
  // Tasks issued alone (tuneGemms, replayTasks): no events, no observer.
  if (!issue_alone)
    for (int e : t.wait_events) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(s, events.at(e), 0));
  if (opt.observer && !issue_alone) opt.observer->onTaskBegin(t, s);
  if (timing_now) TANDEM_CUDA_CHECK(cudaEventRecord(task_start[index], s));

  // A task fused into a GEMM epilogue (fusion.h) issues nothing of its own.
  if (!skip[index] && !fusion.tasks[size_t(index)].issues_nothing) issueTask(index, s);

  if (timing_now) TANDEM_CUDA_CHECK(cudaEventRecord(task_end[index], s));
  if (t.collective) {
    const size_t k = size_t(std::find(collective_tasks.begin(), collective_tasks.end(), index) -
                            collective_tasks.begin());
    // Inside a capture only an "external" record stays queryable after replay.
    if (capturing)
      TANDEM_CUDA_CHECK(cudaEventRecordWithFlags(collective_done.at(k), s, cudaEventRecordExternal));
    else
      TANDEM_CUDA_CHECK(cudaEventRecord(collective_done.at(k), s));
  }
  if (issue_alone) return;
  if (t.record_event >= 0) TANDEM_CUDA_CHECK(cudaEventRecord(events.at(t.record_event), s));
  if (opt.observer) opt.observer->onTaskEnd(t, s);
}

// One task's launches, by its kind; the kinds that take more than a launch
// or two have functions of their own below.
void CudaExecutor::Impl::issueTask(int index, cudaStream_t s) {
  const Task& t = program->tasks[index];
  const OpAttrs& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  float* scr = scratch.at(t.stream);
  auto dt = [&](int buffer) { return program->buffers.at(buffer).dtype; };
  auto i32 = [&](int buffer) { return static_cast<const int32_t*>(ptr(buffer)); };
  if (a.tensor_parallel > 1 && issueVocabularyParallel(index, s)) return;
  switch (t.op) {
    case OpKind::LoadBatch:
      issueLoadBatch(index, s);
      break;
    case OpKind::Embedding:  // Llama's has no position table (R[2])
      embeddingForward(ptr(W[0]), i32(R[0]), ptr(R[1]), R.size() > 2 ? ptr(R[2]) : nullptr, a.b, a.t, a.c, dt(W[0]),
                       s);
      break;
    case OpKind::EmbeddingBwd:
      issueEmbeddingBackward(index, s);
      break;
    case OpKind::LayerNorm:
      if (dt(W[0]) == DType::F8)  // delayed scaling: the norm writes its GEMM's FP8 operand
        layernormForwardFp8(ptr(W[0]), a.fp8_transposed_out ? ptr(W[3]) : nullptr, ptr(W[1]), dt(W[1]), ptr(W[2]),
                            dt(W[2]), ptr(R[0]), ptr(R[1]), ptr(R[2]), a.m, a.c, dt(R[0]),
                            fp8Write(index, W[0], a.fp8_transposed_out ? W[3] : -1), s);
      else
        layernormForward(ptr(W[0]), ptr(W[1]), dt(W[1]), ptr(W[2]), dt(W[2]), ptr(R[0]), ptr(R[1]), ptr(R[2]), a.m,
                         a.c, dt(W[0]), s);
      break;
    case OpKind::LayerNormBwd:
      layernormBackward(ptr(W[0]), ptr(W[1]), ptr(W[2]), a.bias_grad ? ptr(W[3]) : nullptr, ptr(R[0]), ptr(R[1]),
                        ptr(R[2]), ptr(R[3]),
                        dt(R[3]), ptr(R[4]), dt(R[4]), a.m, a.c, a.accumulate, a.accumulate_params,
                        dt(W[0]), scr, s);
      break;
    case OpKind::Matmul:
    case OpKind::MatmulBwdData:
    case OpKind::MatmulBwdWeight:
    case OpKind::GeluBwd:
    case OpKind::Add:
      issueFusable(index, s);
      break;
    case OpKind::Attention:
    case OpKind::AttentionBwd:
      issueAttention(index, s);
      break;
    case OpKind::Gelu:
      if (dt(W[0]) == DType::F8) {
        const int64_t cols = program->buffers.at(size_t(W[0])).shape.back();
        geluForwardFp8(ptr(W[0]), a.fp8_transposed_out ? ptr(W[1]) : nullptr, ptr(R[0]), a.elements / cols, cols,
                       dt(R[0]), fp8Write(index, W[0], a.fp8_transposed_out ? W[1] : -1), s);
      } else {
        geluForward(ptr(W[0]), ptr(R[0]), a.elements, dt(W[0]), s);
      }
      break;
    case OpKind::CrossEntropy: {
      const bool fused = fused_scale[index] != 0.0;
      crossEntropy(ptr(W[0]), dt(W[0]), fused ? ptr(R[0]) : nullptr, ptr(R[0]), i32(R[1]), a.m, a.v,
                   float(fused_scale[index]), dt(R[0]), &scalars->loss_sum, scr, s);
      break;
    }
    case OpKind::CrossEntropyBwd:
      crossEntropy(nullptr, DType::F32, ptr(W[0]), ptr(W[0]), i32(R[1]), a.m, a.v, float(a.loss_scale),
                   dt(W[0]), nullptr, scr, s);
      break;
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
    case OpKind::AllGather:
      issueCollective(index, s);
      break;
    case OpKind::RmsNorm:
      if (dt(W[0]) == DType::F8)  // delayed scaling: the norm writes its GEMM's FP8 operand
        rmsnormForwardFp8(ptr(W[0]), a.fp8_transposed_out ? ptr(W[2]) : nullptr, ptr(W[1]), dt(W[1]), ptr(R[0]),
                          ptr(R[1]), a.m, a.c, dt(R[0]), fp8Write(index, W[0], a.fp8_transposed_out ? W[2] : -1), s);
      else
        rmsnormForward(ptr(W[0]), ptr(W[1]), dt(W[1]), ptr(R[0]), ptr(R[1]), a.m, a.c, dt(W[0]), s);
      break;
    case OpKind::RmsNormBwd:
      rmsnormBackward(ptr(W[0]), ptr(W[1]), ptr(R[0]), ptr(R[1]), ptr(R[2]), ptr(R[3]), dt(R[3]), a.m, a.c,
                      a.accumulate, a.accumulate_params, dt(W[0]), scr, s);
      break;
    case OpKind::SwiGlu:
      if (dt(W[0]) == DType::F8)
        swigluForwardFp8(ptr(W[0]), a.fp8_transposed_out ? ptr(W[1]) : nullptr, ptr(R[0]), a.m, a.c, dt(R[0]),
                         fp8Write(index, W[0], a.fp8_transposed_out ? W[1] : -1), s);
      else swigluForward(ptr(W[0]), ptr(R[0]), a.m, a.c, dt(W[0]), s, fp8AmaxPartials(index));
      break;
    case OpKind::SwiGluBwd:
      if (dt(W[0]) == DType::F8) {
        if (a.accumulate) throw CudaError(fmt::format("cuda executor: {}: cannot accumulate into FP8 codes", t.name));
        swigluBackwardFp8(ptr(W[0]), a.fp8_transposed_out ? ptr(W[1]) : nullptr, ptr(R[0]), ptr(R[1]), a.m, a.c,
                          dt(R[1]), fp8Write(index, W[0], a.fp8_transposed_out ? W[1] : -1), s);
      } else {
        swigluBackward(ptr(W[0]), ptr(R[0]), ptr(R[1]), a.m, a.c, a.accumulate, dt(W[0]), s, fp8AmaxPartials(index));
      }
      break;
    case OpKind::PackKv:
    case OpKind::PackKvBwd:  // refused with the plan (context parallelism)
      throw CudaError(fmt::format("cuda executor: {}: context parallelism is not run on GPUs", t.name));
    case OpKind::SquaredRelu:
    case OpKind::SquaredReluBwd:  // refused with the plan (model.mlp_activation squared_relu)
      throw CudaError(fmt::format("cuda executor: {}: the squared-ReLU MLP is not run on GPUs", t.name));
    case OpKind::CastFp8: issueCastFp8(index, s); break;
    case OpKind::CrossEntropyStats:  // issueVocabularyParallel's
      throw CudaError(fmt::format("cuda executor: {}: statistics of a loss without a tensor-parallel group", t.name));
    case OpKind::Send:
    case OpKind::Recv:
      issuePointToPoint(index, s);
      break;
    case OpKind::GradNorm:
    case OpKind::AdamW:
      issueOptimizer(index, s);
      break;
  }
}

// The embedding and the loss with the vocabulary split over the rank's
// tensor-parallel group (vocab_parallel.h); false for every other task.
bool CudaExecutor::Impl::issueVocabularyParallel(int index, cudaStream_t s) {
  const Task& t = program->tasks[index];
  const OpAttrs& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  auto dt = [&](int buffer) { return program->buffers.at(buffer).dtype; };
  auto i32 = [&](int buffer) { return static_cast<const int32_t*>(ptr(buffer)); };
  const int64_t place = plan.job.tensorParallelPlace(opt.rank), ranks = a.tensor_parallel;
  float* scr = scratch.at(t.stream);
  switch (t.op) {
    case OpKind::Embedding: {
      const int64_t rows = a.v / ranks;
      vocabParallelEmbedding(ptr(W[0]), i32(R[0]), ptr(R[1]), R.size() > 2 ? ptr(R[2]) : nullptr, a.b, a.t, a.c,
                             place * rows, rows, /*add_position=*/place == 0, dt(W[0]), s);
      return true;
    }
    case OpKind::EmbeddingBwd: {
      if (a.shards > 1)
        throw CudaError(fmt::format("cuda executor: {}: a gathered embedding gradient with the vocabulary split",
                                    t.name));
      const int64_t rows = a.v / ranks;
      vocabParallelEmbeddingBackward(ptr(W[0]), W.size() > 1 ? ptr(W[1]) : nullptr, ptr(R[0]), i32(R[1]),
                                     tokenIndexOf(index), a.b,
                                     a.t, a.c, place * rows, rows, a.accumulate, a.accumulate_params, dt(R[0]), s);
      return true;
    }
    case OpKind::CrossEntropyStats:
      crossEntropyStats(static_cast<float*>(ptr(W[0])), ptr(R[0]), i32(R[1]), a.m, place * a.v, a.v, dt(R[0]), s);
      return true;
    case OpKind::CrossEntropy:
      vocabParallelCrossEntropy(ptr(W[0]), dt(W[0]), static_cast<const float*>(ptr(R[2])), a.m, ranks,
                                &scalars->loss_sum, scr, s);
      return true;
    case OpKind::CrossEntropyBwd:
      if (R[0] != W[0])
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(ptr(W[0]), ptr(R[0]), program->buffers.at(W[0]).bytes,
                                          cudaMemcpyDeviceToDevice, s));
      vocabParallelCrossEntropyBackward(ptr(W[0]), i32(R[1]), static_cast<const float*>(ptr(R[2])), a.m, place * a.v,
                                        a.v, ranks, float(a.loss_scale), dt(W[0]), s);
      return true;
    default: return false;
  }
}

// Copies the staged tokens, targets and token index of one micro-batch to the
// device.
void CudaExecutor::Impl::issueLoadBatch(int index, cudaStream_t s) {
  const Task& t = program->tasks[index];
  const auto& W = t.writes;
  const LoadSlot& slot = loads.at(size_t(std::find_if(loads.begin(), loads.end(),
                                                      [&](const LoadSlot& l) { return l.task == index; }) -
                                         loads.begin()));
  const int64_t n = slot.count;
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(ptr(W[0]), slot.host, n * 4, cudaMemcpyHostToDevice, s));
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(ptr(W[1]), slot.host + n, n * 4, cudaMemcpyHostToDevice, s));
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(slot.device_index, slot.host + 2 * n, size_t(slot.indexWords()) * 4,
                                    cudaMemcpyHostToDevice, s));
  // The host stages the next batch once this has run. Inside a capture
  // only an "external" record is recorded by the graph's replays.
  if (index == last_load_task) {
    if (capturing)
      TANDEM_CUDA_CHECK(cudaEventRecordWithFlags(loads_done, s, cudaEventRecordExternal));
    else
      TANDEM_CUDA_CHECK(cudaEventRecord(loads_done, s));
  }
}

// The sorted token index of the micro-batch an EmbeddingBwd task reads
// (LoadSlot: order[N] seg_start[N+1] seg_count[1]).
TokenIndex CudaExecutor::Impl::tokenIndexOf(int index) const {
  const LoadSlot& slot = loads.at(load_of_task[index]);
  const int64_t N = slot.ranks * slot.count;
  return TokenIndex{slot.device_index, slot.device_index + N, slot.device_index + 2 * N + 1};
}

// The embedding backward over this rank's tokens, or over every rank's
// gradient into this rank's shard of the bucket.
void CudaExecutor::Impl::issueEmbeddingBackward(int index, cudaStream_t s) {
  const Task& t = program->tasks[index];
  const OpAttrs& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  auto dt = [&](int buffer) { return program->buffers.at(buffer).dtype; };
  auto i32 = [&](int buffer) { return static_cast<const int32_t*>(ptr(buffer)); };
  const LoadSlot& slot = loads.at(load_of_task[index]);
  const int64_t N = slot.ranks * slot.count;
  const TokenIndex idx = tokenIndexOf(index);
  if (a.shards > 1) {  // over every rank's gradient, into this rank's shard (pass_embedding_gather.h)
    const Buffer& wte = program->buffers.at(W[0]);
    const Buffer& wpe = program->buffers.at(W[1]);
    if (wte.parent < 0 || wte.parent != wpe.parent || slot.ranks != int(a.shards))
      throw CudaError(fmt::format("cuda executor: task {} ({}) is not a gathered embedding backward the "
                                  "executor can run",
                                  t.id, t.name));
    const Buffer& bucket = program->buffers.at(wte.parent);
    const ShardRange shard = shardOf(opt.rank, a.shards, bucket.elementCount());
    const int64_t el = int64_t(dtypeSize(wte.dtype));
    embeddingBackwardGathered(ptr(bucket.id), wte.parent_offset / el, wpe.parent_offset / el, shard.begin,
                              shard.end, ptr(R[0]), slot.device_index + 2 * N + 2, idx, int(a.shards), a.b,
                              a.t, a.c, a.accumulate_params, wte.dtype, s);
  } else {
    embeddingBackward(ptr(W[0]), W.size() > 1 ? ptr(W[1]) : nullptr, ptr(R[0]), i32(R[1]), idx, a.b, a.t, a.c,
                      a.v, a.accumulate,
                      a.accumulate_params, dt(R[0]), s);
  }
}

// The tasks that a cuBLASLt epilogue (fusion.h) may join with a partner task:
// each issues the fused launch where it is planned, else its own.
void CudaExecutor::Impl::issueFusable(int index, cudaStream_t s) {
  const Task& t = program->tasks[index];
  const OpAttrs& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  float* scr = scratch.at(t.stream);
  Gemm* gemm = gemms.at(t.stream).get();  // null on a comm stream, which issues no GEMM
  const TaskFusion& fu = fusion.tasks[size_t(index)];
  auto dt = [&](int buffer) { return program->buffers.at(buffer).dtype; };
  // A row-parallel layer's bias is added once, by the group's first rank
  // (the all-reduce after it sums the ranks' partial products).
  const bool bias = a.has_bias && !(t.op == OpKind::Matmul && a.tensor_parallel > 1 &&
                                    plan.job.tensorParallelPlace(opt.rank) != 0);
  if (a.fp8 && (t.op == OpKind::Matmul || t.op == OpKind::MatmulBwdData || t.op == OpKind::MatmulBwdWeight))
    return issueFp8Gemm(index, s);
  switch (t.op) {
    case OpKind::Matmul:
      if (fu.kind == FusionKind::MatmulGelu) {  // D = the Gelu task's output, aux = this task's output
        gemm->forwardGelu(ptr(program->tasks[size_t(fu.partner)].writes[0]), ptr(W[0]), ptr(R[0]), ptr(R[1]),
                          bias ? ptr(R[2]) : nullptr, a.m, a.n, a.k, dt(W[0]), s);
      } else if (fu.kind == FusionKind::MatmulResidual) {  // D = the Add's output, C = its other input
        const Task& add = program->tasks[size_t(fu.partner)];
        const int residual = residualInput(add, W[0]);
        gemm->forwardResidual(ptr(add.writes[0]), ptr(R[0]), ptr(R[1]), bias ? ptr(R[2]) : nullptr,
                              ptr(residual), a.m, a.n, a.k, dt(W[0]), s);
      } else {
        gemm->forward(ptr(W[0]), ptr(R[0]), ptr(R[1]), bias ? ptr(R[2]) : nullptr, a.m, a.n, a.k,
                      dt(W[0]), s);
      }
      break;
    case OpKind::MatmulBwdData:
      if (fu.kind == FusionKind::MatmulBwdDataGelu) {  // D = the GeluBwd task's output, aux = its x
        const Task& g = program->tasks[size_t(fu.partner)];
        gemm->backwardDataGelu(ptr(g.writes[0]), ptr(R[0]), ptr(R[1]), ptr(g.reads[1]), a.m, a.n, a.k, dt(W[0]), s);
      } else {
        gemm->backwardData(ptr(W[0]), ptr(R[0]), ptr(R[1]), a.m, a.n, a.k, a.accumulate, dt(W[0]), s);
      }
      break;
    case OpKind::MatmulBwdWeight:
      if (fu.kind == FusionKind::MatmulBwdWeightBias) {
        gemm->backwardWeightBias(ptr(W[0]), ptr(W[1]), ptr(R[0]), ptr(R[1]), a.m, a.n, a.k, dt(W[0]), s);
        break;
      }
      gemm->backwardWeight(ptr(W[0]), ptr(R[0]), ptr(R[1]), a.m, a.n, a.k, a.accumulate_params,
                           dt(W[0]), s);
      if (a.has_bias)
        biasGradient(ptr(W[1]), ptr(R[0]), a.m, a.n, a.accumulate_params, dt(W[1]), scr, s);
      break;
    case OpKind::GeluBwd:
      if (fu.kind == FusionKind::MatmulBwdDataGelu) {  // the DGELU GEMM of the MatmulBwdData placed here
        const Task& m = program->tasks[size_t(fu.partner)];
        gemm->backwardDataGelu(ptr(W[0]), ptr(m.reads[0]), ptr(m.reads[1]), ptr(R[1]), m.attrs.m, m.attrs.n,
                               m.attrs.k, dt(W[0]), s);
      } else if (dt(W[0]) == DType::F8) {  // delayed scaling: its GEMMs' FP8 operand (one writer, no accumulation)
        const int64_t cols = program->buffers.at(size_t(W[0])).shape.back();
        if (a.accumulate) throw CudaError(fmt::format("cuda executor: {} accumulates into FP8 codes", t.name));
        geluBackwardFp8(ptr(W[0]), a.fp8_transposed_out ? ptr(W[1]) : nullptr, ptr(R[0]), ptr(R[1]),
                        a.elements / cols, cols, dt(R[1]), fp8Write(index, W[0], a.fp8_transposed_out ? W[1] : -1), s);
      } else {
        geluBackward(ptr(W[0]), ptr(R[0]), ptr(R[1]), a.elements, a.accumulate, dt(W[0]), s);
      }
      break;
    case OpKind::Add:
      if (fu.kind == FusionKind::AddLayerNorm) {  // the sum, then the LayerNorm task's outputs from it
        const Task& ln = program->tasks[size_t(fu.partner)];
        const std::vector<int>& LW = ln.writes;
        addLayernormForward(ptr(W[0]), ptr(LW[0]), ptr(LW[1]), dt(LW[1]), ptr(LW[2]), dt(LW[2]), ptr(R[0]), ptr(R[1]),
                            ptr(ln.reads[1]), ptr(ln.reads[2]), ln.attrs.m, ln.attrs.c, dt(W[0]), s);
      } else {
        addForward(ptr(W[0]), ptr(R[0]), ptr(R[1]), a.elements, dt(W[0]), s);
      }
      break;
    default: break;
  }
}

Gemm::Fp8Operand CudaExecutor::Impl::fp8Operand(int buffer) const {
  return Gemm::Fp8Operand{ptr(buffer), fp8_format.at(size_t(buffer)), fp8ScaleInv(buffer)};
}

// The FP8 GEMM's operand in `slot`, stored [rows, cols], K-major ([cols,
// rows]): the transposed copy its cast wrote, or a transpose into `at`.
Gemm::Fp8Operand CudaExecutor::Impl::kMajor(const Task& t, int slot, int64_t rows, int64_t cols, uint8_t* at,
                                            cudaStream_t s) const {
  Gemm::Fp8Operand o = fp8Operand(t.reads.at(size_t(slot)));
  if (t.attrs.fp8_transposed & (1 << slot)) return o;
  transposeBytes(at, o.codes, rows, cols, s);
  o.codes = at;
  return o;
}

// Current scaling (Transformer Engine's Float8CurrentScaling): the scale
// from this tensor's own largest magnitude. Delayed scaling: the cast key's
// scale from earlier steps, one pass that takes the amax on the way.
void CudaExecutor::Impl::issueCastFp8(int index, cudaStream_t s) {
  const Task& t = program->tasks[index];
  const Buffer& in = program->buffers.at(size_t(t.reads.at(0)));
  const Buffer& out = program->buffers.at(size_t(t.writes.at(0)));
  for (int w : t.writes)
    if (program->buffers.at(size_t(w)).elementCount() != in.elementCount())
      throw CudaError(fmt::format("cuda executor: {}: casts {} elements into {}", t.name, in.elementCount(),
                                  program->buffers.at(size_t(w)).elementCount()));
  if (!t.attrs.current_scaling) {
    if (t.writes.size() == 1)
      return fp8CastDelayed(ptr(out.id), ptr(in.id), in.dtype, out.elementCount(), fp8Write(index, out.id), s);
    const Buffer& transposed = program->buffers.at(size_t(t.writes[1]));  // [columns, rows]
    const int64_t rows = transposed.shape.back();
    return fp8CastTransposeDelayed(ptr(out.id), ptr(transposed.id), ptr(in.id), in.dtype, rows,
                                   in.elementCount() / rows, fp8Write(index, out.id, transposed.id), s);
  }
  // The amax: the partial maxima the input's writer took, or a pass of its own into the scratch.
  float* partials = fp8AmaxPartials(index);
  const bool measured = partials != nullptr;
  if (!measured) partials = scratch.at(t.stream);
  if (t.writes.size() == 1) {
    fp8CastCurrentScaling(ptr(out.id), ptr(in.id), in.dtype, out.elementCount(), fp8_format.at(size_t(out.id)),
                          fp8ScaleInv(out.id), partials, measured, s);
    return;
  }
  const Buffer& transposed = program->buffers.at(size_t(t.writes[1]));  // [columns, rows]
  const int64_t rows = transposed.shape.back();
  fp8CastTransposeCurrentScaling(ptr(out.id), ptr(transposed.id), ptr(in.id), in.dtype, rows,
                                 in.elementCount() / rows, fp8_format.at(size_t(out.id)), fp8ScaleInv(out.id),
                                 fp8ScaleInv(transposed.id), partials, measured, s);
}

// A linear layer's GEMM on FP8 copies of its operands. The forward reads
// them as stored; the backward reads the transposed copies their casts wrote
// (attrs.fp8_transposed), since Hopper's FP8 GEMMs read both operands
// K-major, and transposes into the stream's scratch an operand that has none
// (gpu_footprint::fp8TransposeBytes).
void CudaExecutor::Impl::issueFp8Gemm(int index, cudaStream_t s) {
  const Task& t = program->tasks[index];
  const OpAttrs& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  Gemm* gemm = gemms.at(t.stream).get();
  if (!gemm) throw CudaError(fmt::format("cuda executor: {}: a GEMM on a stream without one", t.name));
  auto* scr = reinterpret_cast<uint8_t*>(scratch.at(t.stream));
  const TaskFusion& fu = fusion.tasks[size_t(index)];
  const DType out = program->buffers.at(size_t(W[0])).dtype;
  switch (t.op) {
    case OpKind::Matmul: {
      const bool bias = a.has_bias && !(a.tensor_parallel > 1 && plan.job.tensorParallelPlace(opt.rank) != 0);
      void* y = ptr(W[0]);
      const void* residual = nullptr;
      if (fu.kind == FusionKind::MatmulResidual) {  // D = the Add's output, C = its other input
        const Task& add = program->tasks[size_t(fu.partner)];
        y = ptr(add.writes[0]);
        residual = ptr(residualInput(add, W[0]));
      } else if (fu.kind != FusionKind::None) {
        throw CudaError(fmt::format("cuda executor: {}: an epilogue fusion of an FP8 GEMM", t.name));
      }
      gemm->forwardFp8(y, fp8Operand(R[0]), fp8Operand(R[1]), bias ? ptr(R[2]) : nullptr, residual, a.m, a.n, a.k,
                       out, s);
      break;
    }
    case OpKind::MatmulBwdData: {
      Gemm::Fp8Operand wt = kMajor(t, 1, a.n, a.k, scr, s);  // W[N,K] -> [K,N]
      gemm->backwardDataFp8(ptr(W[0]), fp8Operand(R[0]), wt, a.m, a.n, a.k, a.accumulate, out, s);
      break;
    }
    case OpKind::MatmulBwdWeight: {
      const Gemm::Fp8Operand dyt = kMajor(t, 0, a.m, a.n, scr, s);  // dy[M,N] -> [N,M]
      const Gemm::Fp8Operand xt = kMajor(t, 1, a.m, a.k, scr + gpu_footprint::fp8TransposeSecondOffset(t), s);
      gemm->backwardWeightFp8(ptr(W[0]), dyt, xt, a.m, a.n, a.k, a.accumulate_params, out, s);
      if (a.has_bias) {  // from the row-major codes (or the transposed ones), once the GEMM has read the scratch
        const bool transposed = a.fp8_transposed & 1;
        const Gemm::Fp8Operand dy = fp8Operand(R[0]);
        biasGradientFp8(ptr(W[1]), dy.codes, dy.format, dy.scale_inv, a.m, a.n, transposed, a.accumulate_params,
                        program->buffers.at(size_t(W[1])).dtype, scratch.at(t.stream), s);
      }
      break;
    }
    default: break;
  }
}

// Causal attention forward or backward: GPT-2's, or with grouped heads and
// rotary embeddings the Llama family's.
void CudaExecutor::Impl::issueAttention(int index, cudaStream_t s) {
  const Task& t = program->tasks[index];
  const OpAttrs& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  float* scr = scratch.at(t.stream);
  auto dt = [&](int buffer) { return program->buffers.at(buffer).dtype; };
  switch (t.op) {
    case OpKind::Attention:
      if (a.kv_heads > 0)  // the Llama family: grouped heads, rotary embeddings
        groupedAttentionForward(ptr(W[0]), ptr(W[1]), dt(W[1]), ptr(R[0]), a.b, a.t, a.c, a.h, a.kv_heads, dt(W[0]),
                                scr, s);
      else
        attentionForward(ptr(W[0]), ptr(W[1]), dt(W[1]), ptr(R[0]), a.b, a.t, a.c, a.h, dt(W[0]), s);
      break;
    case OpKind::AttentionBwd:
      if (a.kv_heads > 0) {
        if (a.bias_grad) throw CudaError(fmt::format("cuda executor: {}: grouped attention has no bias", t.name));
        if (a.fp8_out) {  // training.fp8_attention_grad: the gradient as FP8 codes, both layouts
          const int copy = a.fp8_transposed_out ? W.back() : -1;
          groupedAttentionBackwardFp8(ptr(W[0]), copy >= 0 ? ptr(copy) : nullptr, ptr(R[0]), ptr(R[1]), ptr(R[2]),
                                      ptr(R[3]), dt(R[3]), a.b, a.t, a.c, a.h, a.kv_heads, dt(R[1]),
                                      fp8Write(index, W[0], copy), scr, s);
          break;
        }
        groupedAttentionBackward(ptr(W[0]), ptr(R[0]), ptr(R[1]), ptr(R[2]), ptr(R[3]), dt(R[3]), a.b, a.t, a.c, a.h,
                                 a.kv_heads, a.accumulate, dt(W[0]), scr, s);
        break;
      }
      attentionBackward(ptr(W[0]), a.bias_grad ? ptr(W[1]) : nullptr, ptr(R[0]), ptr(R[1]), ptr(R[2]), ptr(R[3]),
                        dt(R[3]), a.b, a.t, a.c, a.h, a.accumulate, a.accumulate_params, dt(W[0]), scr, s);
      break;
    default: break;
  }
}

// All-reduce, reduce-scatter and all-gather through the communicator (one
// rank without one: an all-reduce is a copy, or nothing in place).
void CudaExecutor::Impl::issueCollective(int index, cudaStream_t s) {
  const Task& t = program->tasks[index];
  const auto& R = t.reads;
  const auto& W = t.writes;
  auto dt = [&](int buffer) { return program->buffers.at(buffer).dtype; };
  switch (t.op) {
    case OpKind::AllReduce: {
      const CollectiveInfo& c = t.collective.value();
      const int64_t count = program->buffers.at(R[0]).elementCount();
      if (comm || !group_comms.empty())
        commFor(t).allReduce(ptr(R[0]), ptr(W[0]), count, dt(R[0]), c.reduce == ReduceOp::Avg, s,
                             "'" + t.name + "'");
      else if (R[0] != W[0])
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(ptr(W[0]), ptr(R[0]), program->buffers.at(R[0]).bytes,
                                          cudaMemcpyDeviceToDevice, s));
      break;
    }
    case OpKind::ReduceScatter:
    case OpKind::AllGather: {
      // Only planned with more than one rank (pass_buckets.h), so a
      // communicator exists; in place on a bucket, except the embedding
      // gradient's all-gather (pass_embedding_gather.h) and, with sharded
      // parameters, the gathers of parameter copies and the reduce-scatters
      // into gradient shards (pass_shard_parameters.h).
      Communicator& comm = commFor(t);
      const bool average = t.collective.value().reduce == ReduceOp::Avg;
      if (t.op == OpKind::AllGather && R[0] != W[0]) {
        comm.allGather(ptr(R[0]), ptr(W[0]), program->buffers.at(R[0]).elementCount(), dt(R[0]), s,
                        "'" + t.name + "'");
        break;
      }
      if (t.op == OpKind::ReduceScatter && R[0] != W[0]) {
        comm.reduceScatter(ptr(R[0]), ptr(W[0]), program->buffers.at(W[0]).elementCount(), dt(R[0]), average, s,
                           "'" + t.name + "'");
        break;
      }
      const int64_t shard = program->buffers.at(R[0]).elementCount() / comm.world();
      if (t.op == OpKind::ReduceScatter)
        comm.reduceScatterInPlace(ptr(R[0]), shard, dt(R[0]), average, s, "'" + t.name + "'");
      else
        comm.allGatherInPlace(ptr(R[0]), shard, dt(R[0]), s, "'" + t.name + "'");
      break;
    }
    default: break;
  }
}

// Send and receive between two pipeline stages (a group of two): the whole
// buffer, or split over the tensor-parallel group
// (comm.pipeline_scatter_gather) the slice of the rank's place.
void CudaExecutor::Impl::issuePointToPoint(int index, cudaStream_t s) {
  const Task& t = program->tasks[index];
  const bool sending = t.op == OpKind::Send;
  const int buffer = sending ? t.reads.at(0) : t.writes.at(0);
  const Buffer& b = program->buffers.at(size_t(buffer));
  const ShardRange part = shardOf(plan.job.tensorParallelPlace(opt.rank), t.attrs.shards, b.elementCount());
  char* at = static_cast<char*>(ptr(buffer)) + part.begin * int64_t(dtypeSize(b.dtype));
  const std::string what = "'" + t.name + "'";
  Communicator& pair = commFor(t);
  if (pair.world() != 2)
    throw CudaError(fmt::format("cuda executor: {}: point to point in a group of {} ranks (pipeline stages are "
                                "pairs)",
                                t.name, pair.world()));
  const int place = pair.rank(), peer = 1 - place;
  // NCCL: a communicator per direction (makeCommunicators), named by the sender's place.
  Communicator& c = p2pComm(t, sending ? place : peer);
  if (sending)
    c.send(at, part.end - part.begin, b.dtype, peer, s, what);
  else
    c.recv(at, part.end - part.begin, b.dtype, peer, s, what);
}

// The multi-tensor launches over the task's table: the gradient norm, and
// AdamW on every parameter the table lists.
void CudaExecutor::Impl::issueOptimizer(int index, cudaStream_t s) {
  const Task& t = program->tasks[index];
  const OpAttrs& a = t.attrs;
  const auto& R = t.reads;
  const auto& W = t.writes;
  switch (t.op) {
    case OpKind::GradNorm: {
      const Table& tb = tables.at(index);
      gradNorm(static_cast<float*>(ptr(W[0])), tb.slots, tb.num_slots, tb.chunks, tb.partials,
               /*squared=*/a.shards > 0 || a.norm_squared, s);
      break;
    }
    case OpKind::AdamW: {
      const Table& tb = tables.at(index);
      const TrainingSpec& tr = plan.job.training;
      const float* norm = R.size() > 1 ? static_cast<const float*>(ptr(R[1])) : nullptr;
      if (tb.chunks > 0)
        adamw(tb.slots, tb.num_slots, tb.chunks, scalars, a.from_previous_step, norm, /*norm_squared=*/a.shards > 0 || a.norm_squared,
              float(tr.grad_clip), float(tr.beta1), float(tr.beta2), float(tr.eps), s);
      break;
    }
    default: break;
  }
}

// Asked once per candidate while the tasks are prepared (outside any capture):
// the pointers must have the alignment the fused algorithms are chosen for.
bool CudaExecutor::Impl::fusionSupported(int index, int partner, FusionKind kind) {
  const Task& t = program->tasks[size_t(index)];
  const OpAttrs& a = t.attrs;
  auto aligned = [&](int buffer) {
    return reinterpret_cast<uintptr_t>(ptr(buffer)) % Gemm::kEpilogueAlignment == 0;
  };
  const DType d = program->buffers.at(size_t(t.writes[0])).dtype;
  Gemm* gemm = &mainGemm();  // support depends on the shape only
  // An FP8 GEMM takes the residual as its C operand; its other epilogues
  // (GELU, the bias gradient) are not run in FP8: separate kernels.
  if (a.fp8 && kind != FusionKind::MatmulResidual) return false;
  switch (kind) {
    case FusionKind::MatmulGelu: {
      const Task& g = program->tasks[size_t(partner)];
      return aligned(t.writes[0]) && aligned(g.writes[0]) && (!a.has_bias || aligned(t.reads[2])) &&
             gemm->forwardGeluSupported(a.m, a.n, a.k, a.has_bias, d);
    }
    case FusionKind::MatmulBwdDataGelu: {
      const Task& g = program->tasks[size_t(partner)];
      return aligned(g.reads[1]) && aligned(g.writes[0]) && gemm->backwardDataGeluSupported(a.m, a.n, a.k, d);
    }
    case FusionKind::MatmulBwdWeightBias:
      return aligned(t.writes[1]) && gemm->backwardWeightBiasSupported(a.m, a.n, a.k, d);
    case FusionKind::AddLayerNorm:
      return true;  // our kernel: any alignment (unaligned rows take its scalar path)
    case FusionKind::MatmulResidual: {
      // C and D are read and written like the plain GEMM's D, for which the
      // algorithms are chosen at the arena's alignment.
      const Task& add = program->tasks[size_t(partner)];
      const int residual = residualInput(add, t.writes[0]);
      if (a.fp8)
        return aligned(residual) && aligned(add.writes[0]) && (!a.has_bias || aligned(t.reads[2])) &&
               gemm->forwardFp8Supported(a.m, a.n, a.k, fp8_format.at(size_t(t.reads[0])),
                                         fp8_format.at(size_t(t.reads[1])), a.has_bias, true, d);
      return aligned(residual) && aligned(add.writes[0]) &&
             (!a.has_bias || aligned(t.reads[2])) && gemm->forwardResidualSupported(a.m, a.n, a.k, a.has_bias, d);
    }
    case FusionKind::None: break;
  }
  return false;
}

}  // namespace tandem::cuda
