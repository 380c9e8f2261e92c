#pragma once
// The Plan: contract 1 of tandem (see docs/plan-format.md).
//
// A Plan is what the engine produces for one job: per rank, an ordered list of
// tasks on streams joined by events, the buffers they read and write (with
// offsets in one memory arena), the cost facts of every task, the recompute
// decisions and the memory plan. The CPU and CUDA executors run it, the
// simulator replays it, the profiler tags real kernels with its task ids.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/ir/op_attrs.h"
#include "engine/ir/types.h"
#include "engine/spec/job.h"

namespace tandem {

inline constexpr int kPlanFormatVersion = 1;

// A named piece of memory. Parameter gradients are views into their bucket's
// flat buffer (parent >= 0) so one collective covers the whole bucket.
struct Buffer {
  int id = -1;
  std::string name;  // "layer3.qkv.out.mb0"
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  TensorCategory category = TensorCategory::Activation;
  int layer = -1;          // -1 outside transformer blocks
  int parent = -1;         // view of this buffer ...
  int64_t parent_offset = 0;  // ... at this byte offset
  int64_t offset = -1;     // byte offset in the arena (filled by the memory plan)
  // Live range as task indices in the rank's task list, inclusive; persistent
  // buffers span the whole step.
  int first_use = -1;
  int last_use = -1;
  bool persistent = false;

  int64_t elementCount() const;
  bool operator==(const Buffer&) const = default;
};

enum class CollectiveOp { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Send, Recv };
enum class ReduceOp { Sum, Avg, Max };
std::string_view toString(CollectiveOp v);
std::string_view toString(ReduceOp v);
std::optional<CollectiveOp> parseCollectiveOp(std::string_view s);
std::optional<ReduceOp> parseReduceOp(std::string_view s);

struct CollectiveInfo {
  CollectiveOp op = CollectiveOp::AllReduce;
  ReduceOp reduce = ReduceOp::Avg;
  std::string group;  // name of a ProcessGroup in Plan::groups
  int64_t bytes = 0;  // payload per rank (all-reduce: the buffer size)
  int64_t count = 0;  // elements
  DType dtype = DType::F32;
  bool operator==(const CollectiveInfo&) const = default;
};

struct ProcessGroup {
  std::string name;  // "dp"
  std::vector<int> ranks;
  bool operator==(const ProcessGroup&) const = default;
};

struct Task {
  int id = -1;      // unique within the rank; the join key with traces
  int stream = 0;   // index into RankPlan::streams
  TaskKind kind = TaskKind::Kernel;
  OpKind op = OpKind::Add;
  std::string name;  // "layer3.attn.qkv.fwd.mb0"
  Phase phase = Phase::Forward;
  int layer = -1;
  int micro_batch = -1;
  // Cost facts used by the simulator and MFU reporting.
  double flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  std::vector<int> reads;   // buffer ids, in the op's input order
  std::vector<int> writes;  // buffer ids, in the op's output order
  std::vector<int> wait_events;  // events to wait for before starting
  int record_event = -1;         // event recorded when the task completes
  OpAttrs attrs;
  std::optional<CollectiveInfo> collective;
  // Epilogue fusion (pass_fusion.h). The task that launches the fused GEMM
  // names its epilogue and the task whose work it takes over
  // (`epilogue_partner`, a task id); that task issues no kernel and names
  // the launching task in `fused_into`. The launching task is the GEMM,
  // except for a DGELU that memory forces to run at the GELU backward's
  // place (then the GELU backward launches it, and the GEMM is fused_into it).
  Epilogue epilogue = Epilogue::None;
  int epilogue_partner = -1;
  int fused_into = -1;
  bool operator==(const Task&) const = default;
};

struct StreamInfo {
  int id = 0;
  StreamKind kind = StreamKind::Compute;
  std::string name;
  bool operator==(const StreamInfo&) const = default;
};

// Everything AdamW needs to know about one parameter tensor.
struct ParamInfo {
  std::string name;   // "layer3.attn.qkv.weight"
  int param = -1;     // buffer used by the forward
  int grad = -1;      // gradient view inside a bucket
  int master = -1;    // fp32 master weight (== param in fp32 jobs)
  int adam_m = -1;
  int adam_v = -1;
  bool weight_decay = true;  // matrices decay; biases, norms and wpe do not
  int bucket = -1;
  // Tensor parallelism: the dimension of the whole parameter of which this
  // rank holds a slice (0: rows, the column-parallel layers' weights and
  // biases; 1: columns, the row-parallel layers' weights), -1 when every
  // rank holds the whole parameter. The whole parameter is split into
  // `split_blocks` equal blocks along that dimension and each block sliced
  // on its own (the QKV weight's query, key and value rows: 3), rank t of
  // a group of p holding part t of p of every block (engine/numerics/init.h).
  int split_dim = -1;
  int split_blocks = 1;
  // Ranks of one model replica (a tensor-parallel group in each pipeline
  // stage) holding this parameter's gradient with the same values: the
  // whole parameters under tensor parallelism (tensor_parallel), the tied
  // embedding on the first and the last pipeline stage (twice that). The
  // gradient norm counts each holder's 1/copies.
  int copies = 1;
  bool operator==(const ParamInfo&) const = default;
};

struct GradBucket {
  int id = 0;
  int buffer = -1;  // the flat gradient buffer of the bucket
  int64_t bytes = 0;
  std::vector<int> params;  // indices into RankPlan::params, in completion order
  // Sharded optimizer (job.parallel.shard_optimizer), else -1: the flat
  // parameter buffer (every parameter of the bucket is a view into it, laid
  // out like the gradients), and this rank's shard of the fp32 master
  // weights (bf16 jobs only) and of the two moments. The parameters'
  // ParamInfo::master (bf16), adam_m and adam_v are then -1.
  int param_buffer = -1;
  // Sharded parameters (job.parallel.shard_parameters), else -1: the
  // persistent shard of the parameters this rank keeps between steps;
  // param_buffer is then the forward's gathered copy for micro-batch 0,
  // whose views are the parameters' buffers (ParamInfo::param), and other
  // micro-batches and the backward read copies of their own
  // (engine/passes/shard_parameters.h).
  int param_shard = -1;
  // Sharded parameters, else -1: this rank's shard of the averaged
  // gradients, which the reduce-scatter writes (out of place) and the norm
  // and the optimizer read; the bucket's whole `buffer` is then transient,
  // from its first gradient to the reduce-scatter.
  int grad_shard = -1;
  int master_shard = -1;
  int adam_m_shard = -1;
  int adam_v_shard = -1;
  bool operator==(const GradBucket&) const = default;
};

struct RecomputeDecision {
  int layer = 0;
  RecomputePolicy policy = RecomputePolicy::None;
  int64_t bytes_kept = 0;   // activations of the layer kept from forward to backward (per micro-batch)
  int64_t bytes_saved = 0;  // versus policy none
  double extra_flops = 0;   // recompute work per step
  bool operator==(const RecomputeDecision&) const = default;
};

struct MemoryPlan {
  int64_t arena_bytes = 0;        // size of the one allocation the executor makes
  int64_t peak_bytes = 0;         // highest end offset of buffers live at once (== arena)
  int64_t lower_bound_bytes = 0;  // max over time of the sum of live buffer sizes
  int peak_task = -1;             // task index where the live sum is highest
  int64_t activation_peak_bytes = 0;  // live activations (and inputs) at their highest
  std::map<std::string, int64_t> by_category;  // live bytes per category at peak_task
  bool operator==(const MemoryPlan&) const = default;
};

// One rank's program. For pure data parallelism every rank runs the same
// program, so one RankPlan serves many ranks (`ranks`); the simulator can
// exploit that symmetry and the JSON stays small at large scale.
struct RankPlan {
  std::vector<int> ranks;
  std::vector<StreamInfo> streams;
  std::vector<Buffer> buffers;
  std::vector<Task> tasks;
  int num_events = 0;
  std::vector<ParamInfo> params;
  std::vector<GradBucket> buckets;
  MemoryPlan memory;
  bool operator==(const RankPlan&) const = default;
};

struct PlanSummary {
  int64_t parameters = 0;
  double flops_per_step = 0;           // all tasks of one rank, times world size
  double model_flops_per_token = 0;    // PaLM: 6N + 12 L H Q T
  int64_t tokens_per_step = 0;         // global batch in tokens
  bool operator==(const PlanSummary&) const = default;
};

struct Plan {
  int version = kPlanFormatVersion;
  JobSpec job;
  int world_size = 1;
  std::vector<ProcessGroup> groups;
  std::vector<RankPlan> programs;
  std::vector<RecomputeDecision> recompute;
  PlanSummary summary;

  // The program a rank runs. Throws std::out_of_range for a rank outside the world.
  const RankPlan& forRank(int rank) const;
  bool operator==(const Plan&) const = default;
};

}  // namespace tandem
