#include "engine/passes/buckets.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "engine/passes/embedding_gather.h"

namespace tandem {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int64_t kShardAlignElements = 128;  // 256 bytes of bf16

int64_t roundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Sharding the optimizer makes every parameter of a bucket a view into one
// flat parameter tensor laid out like the bucket's gradients, so that one
// all-gather returns the updated parameters of every rank's shard. With the
// parameters sharded too, that flat tensor is only the forward's gathered
// copy for micro-batch 0 (pass_shard_parameters.h), no longer persistent,
// and the rank's shard of it is the persistent parameter.
void addParameterBucket(Graph& g, BucketTensors& bucket, int b, int64_t elements, int world,
                        bool shard_parameters) {
  const Tensor& first = g.tensor(g.params[bucket.params.front()].param);
  const DType dt = first.dtype;
  const TensorCategory category = first.category;
  Tensor flat;
  flat.name = shard_parameters ? fmt::format("param.bucket{}.fwd.mb0", b) : fmt::format("param.bucket{}", b);
  flat.dtype = dt;
  flat.shape = {elements};
  flat.category = category;
  flat.persistent = !shard_parameters;
  const int flat_id = g.addTensor(std::move(flat));
  int64_t offset = 0;
  for (int p : bucket.params) {
    Tensor& param = g.tensor(g.params[p].param);
    if (param.dtype != dt)
      throw std::logic_error(fmt::format("sharded optimizer: {} is {} in a bucket of {}", param.name,
                                         toString(param.dtype), toString(dt)));
    param.parent = flat_id;
    param.parent_offset_bytes = offset;
    if (shard_parameters) param.persistent = false;
    offset += param.bytes();
  }
  bucket.param_flat = flat_id;
  if (!shard_parameters) return;
  Tensor shard;
  shard.name = fmt::format("param.bucket{}.shard", b);
  shard.dtype = dt;
  shard.shape = {elements / world};
  shard.category = category;
  shard.persistent = true;
  bucket.param_shard = g.addTensor(std::move(shard));
}

// Index of the last node writing each parameter gradient.
std::vector<size_t> gradientCompletion(const Graph& g) {
  std::vector<int> param_of_grad(g.tensors.size(), -1);
  for (size_t p = 0; p < g.params.size(); ++p) param_of_grad[g.params[p].grad] = int(p);
  std::vector<size_t> done(g.params.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int out : g.nodes[i].outputs)
      if (out < int(param_of_grad.size()) && param_of_grad[out] >= 0) done[param_of_grad[out]] = i;
  return done;
}

}  // namespace

void applyGradientBuckets(Graph& g, const JobSpec& job) {
  const std::vector<size_t> done = gradientCompletion(g);
  std::vector<int> order(g.params.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return done[a] < done[b]; });

  // Partition into buckets by byte size. Gradients completed by the same
  // node stay in one bucket even past the cap: a second bucket could not
  // start any earlier and would only add a collective's latency (GPT-2's
  // wpe gradient, 1.5 MiB, cost 30 us alone after the 73.7 MiB wte bucket,
  // both finished by the embedding backward).
  // With the embedding gradient gathered (pass_embedding_gather.h), the
  // gradients the final embedding backward completes get a bucket of their
  // own, so that nothing else delays or joins its early reduce-scatter.
  const int gathered = embeddingBackwardToGather(g, job);
  const size_t own_bucket_node = gathered >= 0 ? size_t(gathered) : g.nodes.size();
  std::vector<std::vector<int>> groups;
  double cap = job.comm.first_bucket_mib * kMiB;
  double filled = 0;
  for (int p : order) {
    const double bytes = double(g.tensor(g.params[p].grad).bytes());
    const bool same_node = !groups.empty() && !groups.back().empty() && done[groups.back().back()] == done[p];
    const bool own_bucket = done[p] == own_bucket_node && !same_node;
    if (!groups.empty() && !groups.back().empty() && (filled + bytes > cap || own_bucket) && !same_node) {
      groups.emplace_back();
      filled = 0;
      cap = job.comm.bucket_mib * kMiB;
    }
    if (groups.empty()) groups.emplace_back();
    groups.back().push_back(p);
    filled += bytes;
  }

  const int world = job.replicas();
  const int shards = shardCount(job);
  const bool sharded = shardsOptimizer(job);
  std::vector<std::pair<size_t, Node>> inserts;  // (insert after node index, node)
  for (size_t b = 0; b < groups.size(); ++b) {
    const DType dt = g.tensor(g.params[groups[b].front()].grad).dtype;
    int64_t elements = 0;
    for (int p : groups[b]) elements += g.tensor(g.params[p].grad).elements();
    // Sharded buckets are padded so that every rank's shard has the same
    // size and starts on a 256-byte boundary (vector loads in the optimizer,
    // NCCL's in-place reduce-scatter and all-gather). The padding is never
    // written, so in persistent buckets it stays zero and adds nothing to
    // the norm; the transient buckets of sharded parameters hold whatever
    // their memory held, and the norm reads their shards by segments.
    if (sharded) elements = roundUp(elements, int64_t(shards) * kShardAlignElements);
    Tensor flat;
    flat.name = fmt::format("grad.bucket{}", b);
    flat.dtype = dt;
    flat.shape = {elements};
    flat.category = TensorCategory::Gradient;
    // Sharded gradients (ZeRO-2, and ZeRO-3's): the whole bucket lives from
    // its first gradient to its reduce-scatter, which writes this rank's
    // average into a shard that lives until the optimizer.
    const bool shard_gradients = shardsGradients(job);
    flat.persistent = !shard_gradients;
    const int flat_id = g.addTensor(std::move(flat));
    BucketTensors bucket;
    bucket.flat = flat_id;
    int64_t offset = 0;
    size_t completes_at = 0;
    for (int p : groups[b]) {
      Tensor& grad = g.tensor(g.params[p].grad);
      grad.parent = flat_id;
      grad.parent_offset_bytes = offset;
      offset += grad.bytes();
      g.params[p].bucket = int(b);
      bucket.params.push_back(p);
      completes_at = std::max(completes_at, done[p]);
    }
    if (sharded) addParameterBucket(g, bucket, int(b), elements, shards, shardsParameters(job));
    if (shard_gradients) {
      Tensor shard;
      shard.name = fmt::format("grad.bucket{}.shard", b);
      shard.dtype = dt;
      shard.shape = {elements / shards};
      shard.category = TensorCategory::Gradient;
      bucket.grad_shard = g.addTensor(std::move(shard));
    }
    g.buckets.push_back(bucket);
    // One rank has nothing to reduce, except into the gradient shard that
    // sharded gradients are read from (a reduce-scatter over one rank: a copy).
    if (world <= 1 && !shard_gradients) continue;
    Node ar;
    ar.op = sharded ? OpKind::ReduceScatter : OpKind::AllReduce;
    ar.name = fmt::format("comm.{}.bucket{}", sharded ? "reducescatter" : "allreduce", b);
    ar.phase = Phase::Comm;
    ar.stream = StreamKind::Comm;
    ar.micro_batch = job.training.grad_accum - 1;
    ar.inputs = {flat_id};
    ar.outputs = {bucket.grad_shard >= 0 ? bucket.grad_shard : flat_id};
    ar.attrs.elements = elements;
    if (sharded) ar.attrs.shards = shards;
    ar.collective = dataParallelCollective(sharded ? CollectiveOp::ReduceScatter : CollectiveOp::AllReduce,
                                           ReduceOp::Avg, elements, dt, sharded ? shardGroup(job) : "dp");
    inserts.emplace_back(completes_at, std::move(ar));
  }
  g.insertNodes(std::move(inserts));
}

CollectiveInfo dataParallelCollective(CollectiveOp op, ReduceOp reduce, int64_t count, DType dt,
                                      std::string group) {
  CollectiveInfo info;
  info.op = op;
  info.reduce = reduce;
  info.group = std::move(group);
  info.count = count;
  info.dtype = dt;
  info.bytes = count * dtypeSize(dt);
  return info;
}

Node inPlaceAllReduce(const Graph& g, int t, std::string name, ReduceOp reduce, std::string group, Phase phase,
                      StreamKind stream, int micro_batch) {
  const Tensor& x = g.tensor(t);
  Node n;
  n.op = OpKind::AllReduce;
  n.name = std::move(name);
  n.phase = phase;
  n.stream = stream;
  n.micro_batch = micro_batch;
  n.inputs = {t};
  n.outputs = {t};
  n.attrs.elements = x.elements();
  n.collective = dataParallelCollective(CollectiveOp::AllReduce, reduce, x.elements(), x.dtype, std::move(group));
  return n;
}

bool shardsOptimizer(const JobSpec& job) {
  return (job.parallel.shard_optimizer && job.replicas() > 1) || shardsGradients(job);
}

// As sharded parameters, sharded gradients are planned for one rank too.
bool shardsGradients(const JobSpec& job) { return job.parallel.shard_gradients || shardsParameters(job); }

// Unlike the optimizer's, parameter sharding is planned for one rank too:
// one shard of everything (as FSDP with a world of one), which saves no
// memory but runs the sharded schedule on one GPU.
bool shardsParameters(const JobSpec& job) { return job.parallel.shard_parameters; }

bool hybridSharding(const JobSpec& job) {
  const int s = job.parallel.shard_group_size;
  return shardsParameters(job) && s > 1 && s < job.replicas();
}

int shardCount(const JobSpec& job) {
  return hybridSharding(job) ? job.parallel.shard_group_size : job.replicas();
}

std::string shardGroup(const JobSpec& job) { return hybridSharding(job) ? "shard" : "dp"; }

namespace {

// The gradient norm the optimizer clips by: its tensor, and whether it
// holds the sum of squares rather than the norm.
struct GradientNorm {
  int tensor;
  bool squared;
};

// The norm's tensor, the GradNorm task over every bucket, and the
// all-reduces that sum it over the ranks that hold parts of the gradients.
GradientNorm addGradientNorm(Graph& g, const JobSpec& job) {
  Tensor norm;
  norm.name = "optimizer.grad_norm";
  norm.dtype = DType::F32;
  norm.shape = {1};
  norm.category = TensorCategory::Workspace;
  norm.persistent = true;
  const int norm_id = g.addTensor(std::move(norm));

  Node gn;
  gn.op = OpKind::GradNorm;
  gn.name = "optimizer.grad_norm";
  gn.phase = Phase::Optimizer;
  int64_t total = 0;
  for (const auto& b : g.buckets) {
    gn.inputs.push_back(b.grad_shard >= 0 ? b.grad_shard : b.flat);
    total += g.tensor(b.flat).elements();
  }
  gn.outputs = {norm_id};
  gn.attrs.elements = total;
  gn.attrs.params.resize(g.params.size());
  std::iota(gn.attrs.params.begin(), gn.attrs.params.end(), 0);
  const bool sharded = shardsOptimizer(job);
  const int world = shardCount(job);  // ranks a bucket is sharded over
  if (sharded) {
    gn.attrs.shards = world;
    gn.attrs.elements = total / world;
  }
  // Tensor and pipeline parallelism: each rank sums the squares of what
  // it holds (gradients other ranks of its replica hold too counted
  // 1/ParamInfo::copies), summed over the tensor-parallel group and the
  // pipeline's stages.
  const int tp = job.parallel.tensor_parallel, pp = job.parallel.pipeline_parallel;
  // (Sharded plans say so by their shards.)
  const bool squared = tp > 1 || pp > 1;
  gn.attrs.norm_squared = squared;
  g.addNode(std::move(gn));
  auto sumNorm = [&](const char* name, const std::string& group) {
    g.addNode(inPlaceAllReduce(g, norm_id, name, ReduceOp::Sum, group, Phase::Optimizer, StreamKind::Compute, -1));
  };
  if (tp > 1) sumNorm("comm.allreduce.grad_norm.tp", "tp");
  if (pp > 1) sumNorm("comm.allreduce.grad_norm.pipe", "pipe");

  if (sharded) {
    // Each rank summed the squares of its shards; the global norm needs
    // every rank's sum. 4 bytes, on the compute stream: nothing else can run
    // while the optimizer waits for it. Within a shard group: with hybrid
    // sharding the other groups hold the same (all-reduced) shards.
    sumNorm("comm.allreduce.grad_norm", shardGroup(job));
  }
  return {norm_id, squared};
}

// Bucket b's AdamW task as an unsharded optimizer runs it, on every
// parameter's own master weight and moments; shardAdamW turns it into the
// sharded one.
Node adamwTask(const Graph& g, size_t b, int norm_id, bool sharded, bool separate_master, bool squared) {
  Node n;
  n.op = OpKind::AdamW;
  n.name = fmt::format("optimizer.adamw.bucket{}", b);
  n.phase = Phase::Optimizer;
  n.inputs = {g.buckets[b].flat, norm_id};
  int64_t elements = 0;
  for (int p : g.buckets[b].params) {
    const auto& pt = g.params[p];
    elements += g.tensor(pt.param).elements();
    if (sharded) continue;  // the bucket's shards (shardAdamW)
    n.inputs.push_back(pt.master);
    n.inputs.push_back(pt.adam_m);
    n.inputs.push_back(pt.adam_v);
    n.outputs.push_back(pt.param);
    if (separate_master) n.outputs.push_back(pt.master);
    n.outputs.push_back(pt.adam_m);
    n.outputs.push_back(pt.adam_v);
  }
  n.attrs.elements = elements;
  n.attrs.params = g.buckets[b].params;
  n.attrs.norm_squared = squared;
  return n;
}

// Sharded: adds this rank's shards of bucket b's optimizer state and points
// the AdamW task `n` at them, updating the rank's shard of the parameters.
void shardAdamW(Graph& g, size_t b, Node& n, int norm_id, int world, bool separate_master) {
  const int param_flat = g.buckets[b].param_flat;
  const int64_t padded = g.tensor(param_flat).elements();
  BucketTensors& bt = g.buckets[b];
  auto shardTensor = [&](const char* what, TensorCategory cat) {
    Tensor t;
    t.name = fmt::format("optimizer.{}.bucket{}.shard", what, b);
    t.dtype = DType::F32;
    t.shape = {padded / world};
    t.category = cat;
    t.persistent = true;
    return g.addTensor(std::move(t));
  };
  if (separate_master) bt.master_shard = shardTensor("master", TensorCategory::MasterWeight);
  bt.adam_m_shard = shardTensor("adam_m", TensorCategory::OptimizerState);
  bt.adam_v_shard = shardTensor("adam_v", TensorCategory::OptimizerState);
  // fp32 jobs update the parameter shard in place (it is the master):
  // the rank's part of the flat parameters, or with the parameters
  // sharded the persistent shard, which the next step gathers from.
  const int updated = bt.param_shard >= 0 ? bt.param_shard : param_flat;
  const int master = separate_master ? bt.master_shard : updated;
  n.inputs = {bt.grad_shard >= 0 ? bt.grad_shard : bt.flat, norm_id, master, bt.adam_m_shard, bt.adam_v_shard};
  n.outputs = {updated};
  if (separate_master) n.outputs.push_back(bt.master_shard);
  n.outputs.push_back(bt.adam_m_shard);
  n.outputs.push_back(bt.adam_v_shard);
  n.attrs.shards = world;
  n.attrs.elements = padded / world;
}

// The in-place all-gather of bucket b's flat parameters that brings every
// rank's updated shard to every rank.
Node parameterAllGather(const Graph& g, size_t b, int world) {
  const int param_flat = g.buckets[b].param_flat;
  const int64_t padded = g.tensor(param_flat).elements();
  Node ag;
  ag.op = OpKind::AllGather;
  ag.name = fmt::format("comm.allgather.bucket{}", b);
  ag.phase = Phase::Comm;
  ag.stream = StreamKind::Comm;
  ag.inputs = {param_flat};
  ag.outputs = {param_flat};
  ag.attrs.elements = padded;
  ag.attrs.shards = world;
  ag.collective = dataParallelCollective(CollectiveOp::AllGather, ReduceOp::Sum, padded, g.tensor(param_flat).dtype);
  return ag;
}

}  // namespace

void applyGradientReduceInFp32(Graph& g, const JobSpec& job) {
  if (!job.comm.grad_reduce_fp32) return;
  for (Node& n : g.nodes) {
    if (!n.collective || n.inputs.empty()) continue;
    if (n.collective->op != CollectiveOp::AllReduce && n.collective->op != CollectiveOp::ReduceScatter) continue;
    const Tensor& x = g.tensor(n.inputs[0]);
    const bool gradient = x.category == TensorCategory::Gradient ||
                          (x.parent >= 0 && g.tensor(x.parent).category == TensorCategory::Gradient);
    if (!gradient || n.collective->dtype != DType::BF16) continue;
    n.collective->dtype = DType::F32;
    n.collective->bytes = n.collective->count * dtypeSize(DType::F32);
  }
}

std::optional<std::string> gradReduceFp32Refusal(const JobSpec& job, std::string_view runner) {
  if (!job.comm.grad_reduce_fp32 || job.training.precision == Precision::FP32 || job.worldSize() <= 1)
    return std::nullopt;
  return fmt::format("comm.grad_reduce_fp32 reduces the bf16 gradients in fp32, which `{}` does not (its "
                     "collectives reduce them as bf16); set it false, or `tandem simulate` plans and times it",
                     runner);
}

void appendOptimizer(Graph& g, const JobSpec& job) {
  const GradientNorm norm = addGradientNorm(g, job);
  const bool sharded = shardsOptimizer(job);
  const int world = shardCount(job);  // ranks a bucket is sharded over

  // Sharded, the buckets are updated last-completed first. The bucket the
  // backward completes last is the one the forward needs first (GPT-2: the
  // tied embedding, also the largest): it is gathered at the end of the
  // step, while the other buckets update. The other buckets are gathered at
  // the start of the next step, in the order the forward needs them, each
  // layer waiting only for its own bucket: an all-gather there runs beside
  // the forward instead of after the optimizer (measured on 2 x H200 with
  // every all-gather at the end: 0.45 ms per step of all-gathers after the
  // last AdamW). A step therefore begins by gathering what the previous
  // step updated; gatherParameters() on the executors completes the
  // parameters after the last step.
  std::vector<size_t> bucket_order(g.buckets.size());
  std::iota(bucket_order.begin(), bucket_order.end(), size_t(0));
  if (sharded) std::reverse(bucket_order.begin(), bucket_order.end());
  std::vector<Node> gathers_at_start;
  // schedule.optimizer_beside_forward: the updates of the previous step's
  // gradients open the step, in the order the forward needs the buckets.
  const bool updates_at_start = job.schedule.optimizer_beside_forward && !sharded;
  std::vector<Node> updates_at_start_nodes;

  const bool separate_master = job.training.precision != Precision::FP32;
  for (size_t b : bucket_order) {
    Node n = adamwTask(g, b, norm.tensor, sharded, separate_master, norm.squared);
    if (!sharded) {
      if (updates_at_start) {
        n.attrs.from_previous_step = true;
        updates_at_start_nodes.push_back(std::move(n));
      } else {
        g.addNode(std::move(n));
      }
      continue;
    }
    shardAdamW(g, b, n, norm.tensor, world, separate_master);
    g.addNode(std::move(n));
    if (g.buckets[b].param_shard >= 0) continue;  // gathered where used (pass_shard_parameters.h)

    Node ag = parameterAllGather(g, b, world);
    if (b + 1 == g.buckets.size())
      g.addNode(std::move(ag));
    else
      gathers_at_start.push_back(std::move(ag));
  }
  g.nodes.insert(g.nodes.begin(), std::make_move_iterator(gathers_at_start.begin()),
                 std::make_move_iterator(gathers_at_start.end()));
  // Buckets fill in the backward's completion order, so the forward needs
  // the last one first.
  std::reverse(updates_at_start_nodes.begin(), updates_at_start_nodes.end());
  g.nodes.insert(g.nodes.begin(), std::make_move_iterator(updates_at_start_nodes.begin()),
                 std::make_move_iterator(updates_at_start_nodes.end()));
}

}  // namespace tandem
