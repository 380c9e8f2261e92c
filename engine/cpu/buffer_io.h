#pragma once
// Typed access to the buffers of one rank's arena for the CPU executor.
// fp32 buffers are used in place; bf16 buffers are widened to float scratch
// on access and rounded back (ties to even) when the task commits, which is
// exactly the storage precision a bf16 job has on the GPU.

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/plan/plan.h"

namespace tandem::cpu {

class TaskBuffers {
 public:
  TaskBuffers(std::byte* arena, const RankPlan& rp) : arena_(arena), rp_(rp) {}
  ~TaskBuffers() = default;

  // Read-only float view of a buffer.
  const float* in(int buffer);
  // Writable float view holding the buffer's current contents (so
  // accumulating and in-place ops see what is there).
  float* out(int buffer);
  const int32_t* ints(int buffer) const;
  int32_t* mutableInts(int buffer);
  // A byte buffer (DType::U8: dropout masks), in place.
  uint8_t* bytes(int buffer);
  int64_t elements(int buffer) const { return rp_.buffers[buffer].elementCount(); }
  // Rounds what the task wrote to a bf16 buffer so far to bf16 now (commit
  // would), so that a sum over it sees the stored values.
  void settle(int buffer);
  // Writes every bf16 scratch back to the arena.
  void commit();

 private:
  struct Scratch {
    int buffer;
    bool dirty;
    std::vector<float> values;
  };
  std::byte* address(int buffer) const { return arena_ + rp_.buffers[buffer].offset; }
  Scratch& scratchFor(int buffer);

  std::byte* arena_;
  const RankPlan& rp_;
  std::vector<Scratch> scratch_;
};

// Whole-buffer conversions used outside tasks (initialisation, inspection).
std::vector<float> loadAsFloat(const std::byte* arena, const Buffer& b);
void storeFromFloat(std::byte* arena, const Buffer& b, const float* values);

}  // namespace tandem::cpu
