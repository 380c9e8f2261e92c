#pragma once
// Training data for executors: a synthetic token process with a known entropy
// (so "training works" is a number), or a file of little-endian uint16 ids.
//
// Sample addressing is global: sample s of step k is the same sequence for
// every parallel layout, so data parallel 2 x b sees exactly the samples of
// data parallel 1 x 2b. The sample index of (step, micro-batch, rank, i) is
//   k * global_batch + (micro_batch * dp + rank) * micro_batch_size + i.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/spec/job.h"

namespace tandem {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Fills tokens[Tn] and targets[Tn] (the next tokens) of one sample.
  virtual void sample(int64_t sample_index, int32_t* tokens, int32_t* targets) const = 0;
  // Lowest achievable mean cross-entropy (nats per token) on this data, when known.
  virtual double optimalLoss() const = 0;
  virtual std::string describe() const = 0;
};

// Creates the source the job names. Throws SpecError for a missing or too
// small token file.
std::unique_ptr<TokenSource> makeTokenSource(const JobSpec& job);

// Fills a micro-batch [B, T] for one rank, using the global sample addressing
// (the ranks of a tensor-parallel group read their replica's samples); with
// context parallelism [B, T / context_parallel], the rank's two chunks of
// each sample (contextParallelPosition).
void fillMicroBatch(const TokenSource& source, const JobSpec& job, int step, int micro_batch,
                    int rank, int32_t* tokens, int32_t* targets);

}  // namespace tandem
