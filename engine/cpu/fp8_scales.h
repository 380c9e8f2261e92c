#pragma once
// The per-tensor FP8 scales of one rank of the CPU reference
// (training.precision fp8; engine/numerics/fp8.h for the casts). An FP8
// buffer holds E4M3 or E5M2 codes of value x scale; whoever reads it gets x
// back (the code's value over the scale its writer used), which is what an
// FP8 GEMM computes with (cuBLASLt's A/B scales undo the casts' scales).
//
// The format follows Transformer Engine's HYBRID recipe: gradients (what
// the backward writes) in E5M2, everything else in E4M3.
//
// Each scale belongs to the task that writes (its cast key,
// engine/numerics/fp8_history.h):
//   - current scaling (training.fp8_scaling current): from the tensor's own
//     amax, as it is written;
//   - delayed scaling: from the key's amax history (fp8_history.h).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/numerics/fp8.h"
#include "engine/numerics/fp8_history.h"
#include "engine/plan/plan.h"

namespace tandem::cpu {

class Fp8Scales {
 public:
  Fp8Scales(const RankPlan& rp, bool current_scaling);

  // The scale and format for what `task` writes into `buffer`, whose values'
  // largest magnitude is amax; remembers them for the buffer's readers and
  // the amax for the history.
  float scaleForWrite(const Task& task, int buffer, float amax);
  // The scale and format of what the buffer holds now (1 and E4M3 before
  // any write).
  float scaleOf(int buffer) const { return buffer_scale_[size_t(buffer)]; }
  Fp8Format formatOf(int buffer) const { return buffer_format_[size_t(buffer)]; }
  // This step's amaxes into the histories (delayed scaling).
  void endStep();

  // What a checkpoint keeps between steps (encodeFp8History's text). Empty
  // under current scaling, which keeps nothing that changes its bits.
  std::string save() const;
  // Restores what save() wrote; throws std::runtime_error on text it did not.
  void load(const std::string& text);

 private:
  bool current_;
  std::vector<float> buffer_scale_;
  std::vector<Fp8Format> buffer_format_;
  Fp8History state_;  // each key's last scale and amax history
  std::map<std::string, float> step_amax_;
};

}  // namespace tandem::cpu
