#pragma once
// Deterministic parameter initialisation and learning-rate schedule shared by
// every executor, so the CPU reference and the GPU executor start from the
// same weights for the same seed.

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/plan/plan.h"

namespace tandem {

// GPT-2 initialisation: weights ~ N(0, 0.02), the two residual projections of
// each block scaled by 1/sqrt(2 * layers), biases 0, LayerNorm weight 1 and
// bias 0. Values depend only on the seed and the parameter's name: a
// tensor-parallel slice (ParamInfo::split_dim) is rank `rank`'s part of the
// whole parameter's values, so every layout starts from the same model.
std::vector<float> initialParameterValues(const JobSpec& job, const RankPlan& program,
                                          const ParamInfo& param, int rank, int threads = 1);

// The same into `values`, reusing its memory.
void initialParameterValuesInto(std::vector<float>& values, const JobSpec& job, const RankPlan& program,
                                const ParamInfo& param, int rank, int threads = 1);

// initialParameterValues of each of `params`, handed to `use` in their order
// on the calling thread, the next parameter's drawn meanwhile on
// `threads` threads. A 7B model draws 6.7 billion normal values: about five
// minutes on one core.
void forEachInitialParameter(const JobSpec& job, const RankPlan& program, const std::vector<const ParamInfo*>& params,
                             int rank, int threads,
                             const std::function<void(const ParamInfo&, const std::vector<float>&)>& use);

// How a parameter's whole values are made (GPT-2 initialisation, by name):
// every value `constant`, or value i = portable::scaledNormalAt(seed, i,
// stddev). The GPU executor draws them on the device from this (the same
// bits).
struct InitRule {
  bool normal = false;
  float constant = 0.0f;
  uint64_t seed = 0;
  double stddev = 0;
};
InitRule initRule(const JobSpec& job, const ParamInfo& param);

// out[i] = stddev * (the i-th normal of SplitMix64(seed)), for i < n, drawn
// in chunks on up to `threads` threads: the same values for any count.
void fillNormal(float* out, int64_t n, uint64_t seed, double stddev, int threads);
// The same sequence's values [begin, end) into out[0, end - begin).
void fillNormalRange(float* out, int64_t begin, int64_t end, uint64_t seed, double stddev, int threads);

// Rank `rank`'s slice of a whole parameter's values (row-major, `whole`
// elements of the parameter's full shape) under tensor parallelism: the
// slice the rank's buffer holds (ParamInfo::split_dim and split_blocks).
// Returns `whole` for parameters every rank holds whole.
std::vector<float> tensorParallelSlice(const JobSpec& job, const RankPlan& program, const ParamInfo& param,
                                       int rank, const std::vector<float>& whole);

// Sharded optimizer: rank `rank`'s part of a bucket's initial parameters, in
// the bucket's layout (padding 0), for its fp32 master shard (of its
// tensor-parallel slices; placed by its data-parallel rank,
// JobSpec::dataParallelRank). Whole parameters have only the shard's part
// of their values drawn, on `threads` threads; tensor-parallel slices are
// drawn whole and cut.
std::vector<float> initialMasterShard(const JobSpec& job, const RankPlan& program, const GradBucket& bucket,
                                      int rank, int world, int threads = 1);

// The elements [begin, end) of a bucket that rank `rank` owns when the
// optimizer is sharded `shards` ways (shards <= 1: all of them), and where a
// parameter of the bucket meets them. `rank` is the rank's place among its
// data-parallel peers (JobSpec::dataParallelRank). Shard groups are blocks
// of `shards` consecutive such places (hybrid sharding:
// parallel.shard_group_size), so a rank's shard is the one at its place in
// its block, rank % shards.
struct ShardRange {
  int64_t begin = 0, end = 0;
};
ShardRange shardOf(int rank, int64_t shards, int64_t bucket_elements);
struct ShardSegment {
  int64_t from = 0, to = 0;  // elements of the parameter, from its start; empty when to <= from
  int64_t shard_offset = 0;  // where `from` lies in the shard
};
ShardSegment segmentInShard(const RankPlan& program, const ParamInfo& param, ShardRange shard);
// The bucket whose shard of averaged gradients `buffer` is (sharded
// parameters: GradBucket::grad_shard), or nullptr. A sharded norm reads
// such a shard by its parameters' segments (its padding is not zero: the
// whole bucket it was reduced from is transient memory), AdamW by the
// segments it updates.
const GradBucket* bucketOfGradientShard(const RankPlan& program, int buffer);

// Linear warm-up to training.lr, then cosine decay to training.min_lr at the
// last step. `step` counts from 0.
double learningRate(const TrainingSpec& training, int step);

// 64-bit FNV-1a, used for content hashes and per-name seeds.
uint64_t fnv1a64(const void* data, size_t size, uint64_t seed = 14695981039346656037ull);

}  // namespace tandem
