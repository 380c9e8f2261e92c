#pragma once
// The CPU reference executor: runs a Plan for all ranks as threads, with an
// in-process collective backend, fp32 math and bf16 rounding emulated where the
// Plan stores bf16. Every buffer lives at its planned offset in one arena per
// rank, so a memory plan that overlaps two live buffers changes the numbers.

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/numerics/data.h"
#include "engine/plan/plan.h"

namespace tandem::cpu {

struct StepResult {
  int step = 0;
  double loss = 0;       // mean over the global batch
  double grad_norm = 0;  // before clipping
  double lr = 0;
  double seconds = 0;
};

class CpuExecutor {
 public:
  explicit CpuExecutor(const Plan& plan);
  ~CpuExecutor();

  // Runs one full training step (all micro-batches, collectives, optimizer).
  StepResult step();

  // Runs forward and backward of one step but not the optimizer (for gradient checks).
  StepResult computeGradients();
  // With the optimizer sharded, a step starts by gathering the parameters
  // the previous step updated (pass_buckets.h); this runs those all-gathers
  // now, so that every rank holds every parameter after the last step.
  // Nothing to do otherwise.
  void gatherParameters();
  // With schedule.optimizer_beside_forward a step's AdamW runs at the start
  // of the next step (pass_buckets.h); this applies the last step's now, so
  // that the parameters are those after every step run. Nothing to do
  // otherwise, or when already applied.
  void finishOptimizer();

  // The current values of parameter `param` (an index into the params of
  // rank `rank`'s program) as rank `rank` holds them: its buffer, or with
  // sharded parameters, the parts of its data-parallel peers' shards.
  std::vector<float> parameterValues(int rank, int param) const;

  // The values of a buffer of one rank, converted to float.
  std::vector<float> readBuffer(int rank, int buffer) const;
  void writeBuffer(int rank, int buffer, const std::vector<float>& values);

  const Plan& plan() const;
  int stepsDone() const;

  // The state a checkpoint holds (engine/checkpoint/checkpoint.h): every
  // rank's persistent buffers as they are between steps, the steps done and
  // whether the last step's AdamW is still to run. Restoring it makes the
  // next steps bit-identical to those of the executor it was taken from.
  checkpoint::Snapshot snapshot() const;
  void restore(const checkpoint::Snapshot& snap);
  // A buffer's bytes as rank `rank` holds them (for the replica check,
  // engine/checkpoint/consistency.h), and one bit of it flipped (for tests
  // of that check: a fault on one rank).
  std::vector<std::byte> bufferBytes(int rank, int buffer) const;
  void flipBit(int rank, int buffer, int64_t bit);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::cpu
