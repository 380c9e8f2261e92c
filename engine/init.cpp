#include "engine/init.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "engine/rng.h"

namespace tandem {
namespace {

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::vector<float> initialParameterValues(const JobSpec& job, const RankPlan& program,
                                          const ParamInfo& param) {
  const int64_t n = program.buffers.at(param.param).elementCount();
  std::vector<float> values(n, 0.0f);
  const std::string& name = param.name;
  const bool is_norm = name.find(".ln") != std::string::npos || name.rfind("final.ln", 0) == 0;
  if (endsWith(name, ".bias")) return values;
  if (is_norm && endsWith(name, ".weight")) {
    values.assign(n, 1.0f);
    return values;
  }
  double stddev = 0.02;
  if (endsWith(name, "attn.proj.weight") || endsWith(name, "mlp.proj.weight"))
    stddev /= std::sqrt(2.0 * job.model.layers);
  SplitMix64 rng(fnv1a64(name.data(), name.size(), job.training.seed ^ 0x5EEDull));
  for (auto& v : values) v = float(stddev * rng.normal());
  return values;
}

double learningRate(const TrainingSpec& t, int step) {
  if (step < t.warmup_steps) return t.lr * double(step + 1) / double(t.warmup_steps);
  const int decay_steps = std::max(1, t.steps - t.warmup_steps - 1);
  const double ratio = std::min(1.0, double(step - t.warmup_steps) / decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return t.min_lr + cosine * (t.lr - t.min_lr);
}

ShardRange shardOf(int rank, int64_t shards, int64_t bucket_elements) {
  if (shards <= 1) return {0, bucket_elements};
  const int64_t size = bucket_elements / shards;
  const int64_t place = rank % shards;  // shard groups are blocks of consecutive ranks
  return {place * size, (place + 1) * size};
}

ShardSegment segmentInShard(const RankPlan& program, const ParamInfo& param, ShardRange shard) {
  const Buffer& grad = program.buffers.at(param.grad);
  const int64_t at = grad.parent_offset / dtypeSize(grad.dtype);  // the parameter's start in the bucket
  ShardSegment s;
  s.from = std::max<int64_t>(0, shard.begin - at);
  s.to = std::min<int64_t>(program.buffers.at(param.param).elementCount(), shard.end - at);
  s.shard_offset = at + s.from - shard.begin;
  return s;
}

const GradBucket* bucketOfGradientShard(const RankPlan& program, int buffer) {
  if (buffer < 0) return nullptr;
  for (const GradBucket& b : program.buckets)
    if (b.grad_shard == buffer) return &b;
  return nullptr;
}

std::vector<float> initialMasterShard(const JobSpec& job, const RankPlan& program, const GradBucket& bucket,
                                      int rank, int world) {
  const ShardRange shard = shardOf(rank, world, program.buffers.at(bucket.buffer).elementCount());
  std::vector<float> out(size_t(shard.end - shard.begin), 0.0f);
  for (int pi : bucket.params) {
    const ParamInfo& p = program.params.at(size_t(pi));
    const ShardSegment seg = segmentInShard(program, p, shard);
    if (seg.to <= seg.from) continue;
    const std::vector<float> v = initialParameterValues(job, program, p);
    std::copy(v.begin() + seg.from, v.begin() + seg.to, out.begin() + seg.shard_offset);
  }
  return out;
}

}  // namespace tandem
