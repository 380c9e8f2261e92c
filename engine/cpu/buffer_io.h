#pragma once
// Typed access to the buffers of one rank's arena for the CPU executor.
// fp32 buffers are used in place; bf16 buffers are widened to float scratch
// on access and rounded back (ties to even) when the task commits, which is
// exactly the storage precision a bf16 job has on the GPU. FP8 buffers
// (training.precision fp8) likewise: read as their codes' values over the
// scale they were written with, and cast on commit with the scale the
// rank's Fp8Scales gives the writing task (engine/cpu/fp8_scales.h).

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/cpu/fp8_scales.h"
#include "engine/plan/plan.h"

namespace tandem::cpu {

class TaskBuffers {
 public:
  TaskBuffers(std::byte* arena, const RankPlan& rp, Fp8Scales* fp8 = nullptr) : arena_(arena), rp_(rp), fp8_(fp8) {}
  ~TaskBuffers() = default;
  // The task whose writes the next commit casts (FP8 buffers take their
  // scale and format from it).
  void setTask(const Task* task) { task_ = task; }

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

  std::vector<float> loadFp8(int buffer) const;
  void storeFp8(int buffer, const std::vector<float>& values);

  std::byte* arena_;
  const RankPlan& rp_;
  Fp8Scales* fp8_ = nullptr;
  const Task* task_ = nullptr;
  std::vector<Scratch> scratch_;
};

// Whole-buffer conversions used outside tasks (initialisation, inspection).
std::vector<float> loadAsFloat(const std::byte* arena, const Buffer& b);
void storeFromFloat(std::byte* arena, const Buffer& b, const float* values);

}  // namespace tandem::cpu
