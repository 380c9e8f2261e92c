#pragma once
// Small job variants for engine tests, built from the embedded tiny job.

#include "engine/spec/job.h"

namespace tandem::test {

// A GPT small enough for finite differences and quick CPU steps.
inline JobSpec microJob(int micro_batch = 2, int dp = 1, int accum = 1) {
  JobSpec j = tinyJob();
  j.model.vocab = 16;
  j.model.seq_len = 8;
  j.model.layers = 2;
  j.model.hidden = 16;
  j.model.heads = 2;
  j.training.micro_batch = micro_batch;
  j.training.grad_accum = accum;
  j.parallel.data_parallel = dp;
  j.training.precision = Precision::FP32;
  j.comm.bucket_mib = 0.002;  // several buckets even for this model
  j.comm.first_bucket_mib = 0.001;
  j.data.markov_order = 1;
  j.data.branching = 3;
  return j;
}

// The micro job with 4 heads and `layers` blocks, so that groups of 2 and 4
// ranks split its heads (tensor parallelism) and 2 or 4 stages its blocks
// (pipeline parallelism); Adam's eps as in test_executor.cpp's weight
// comparisons.
inline JobSpec splittableJob(int dp, int accum, int layers = 2) {
  JobSpec j = microJob(2, dp, accum);
  j.model.layers = layers;
  j.model.heads = 4;
  j.model.vocab = 64;
  j.training.eps = 1e-6;
  return j;
}

// The splittable job as a Llama: RMSNorm, rotary grouped-query attention
// (4 query heads of width 4 sharing `kv_heads`), SwiGLU of width 40,
// untied embeddings.
inline JobSpec llamaJob(int dp, int accum, int layers = 2, int kv_heads = 2) {
  JobSpec j = splittableJob(dp, accum, layers);
  j.model.family = ModelFamily::Llama;
  j.model.kv_heads = kv_heads;
  j.model.mlp_ratio = 2.5;
  j.model.tied_embeddings = false;
  return j;
}

inline JobSpec gpt2Shape(int layers, int hidden, int heads) {
  JobSpec j = defaultJob();
  j.model.layers = layers;
  j.model.hidden = hidden;
  j.model.heads = heads;
  return j;
}

}  // namespace tandem::test
