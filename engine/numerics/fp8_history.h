#pragma once
// FP8 delayed scaling's bookkeeping, shared by the CPU reference
// (engine/cpu/fp8_scales.h) and the GPU executor: which scale a writer
// uses, and the state a checkpoint keeps.
//
// Each scale belongs to the task that writes an FP8 tensor (a cast, or a
// norm or activation writing FP8 itself), named by its cast key: the task's
// name without the micro-batch, a recompute sharing its forward's. Delayed
// scaling takes a step's scale from the largest amax the key saw over the
// last kFp8History steps, not counting this one (Transformer Engine's
// DelayedScaling defaults: a history of 1024, "max"), and 1 before any
// history; where that amax says nothing (0, not finite) the key's last
// scale stays. This step's amax (the largest over its writes) joins the
// history when the step ends.
#include <deque>
#include <map>
#include <string>

#include "engine/numerics/fp8.h"

namespace tandem {

inline constexpr int kFp8History = 1024;

// "layer0.ln1.fwd" for "layer0.ln1.recompute.mb3".
std::string fp8CastKey(const std::string& task_name);

// A step's scale from the key's history (1 while it is empty) and the scale
// its last writes used.
float fp8DelayedScale(const std::deque<float>& history, Fp8Format f, float last_scale);

// What a checkpoint keeps between steps, per cast key: the scale its last
// writes used and its amax history (oldest first).
struct Fp8History {
  std::map<std::string, float> last_scale;
  std::map<std::string, std::deque<float>> amax;
};

// The GPU executor keeps a key's history as a ring of kFp8History amaxes,
// step n's at n % kFp8History (fp8DelayedEndStep): the history, oldest
// first, of a ring that has seen `steps` steps; and a ring holding a
// history (of at most kFp8History steps) as steps = its length would.
std::deque<float> fp8HistoryFromRing(const float* ring, int steps);
void fp8HistoryToRing(const std::deque<float>& history, float* ring);

// As text, floats by their bits so that a resume is exact: a header line,
// then one line per key (key, last scale, history; tab-separated hex).
std::string encodeFp8History(const Fp8History& h);
// Throws std::runtime_error on text encodeFp8History did not write.
Fp8History decodeFp8History(const std::string& text);

}  // namespace tandem
