#pragma once
// Deterministic parameter initialisation and learning-rate schedule shared by
// every executor, so the CPU reference and the GPU executor start from the
// same weights for the same seed.

#include <cstdint>
#include <vector>

#include "engine/plan.h"

namespace tandem {

// GPT-2 initialisation: weights ~ N(0, 0.02), the two residual projections of
// each block scaled by 1/sqrt(2 * layers), biases 0, LayerNorm weight 1 and
// bias 0. Values depend only on the seed and the parameter's name.
std::vector<float> initialParameterValues(const JobSpec& job, const RankPlan& program,
                                          const ParamInfo& param);

// Linear warm-up to training.lr, then cosine decay to training.min_lr at the
// last step. `step` counts from 0.
double learningRate(const TrainingSpec& training, int step);

// 64-bit FNV-1a, used for content hashes and per-name seeds.
uint64_t fnv1a64(const void* data, size_t size, uint64_t seed = 14695981039346656037ull);

}  // namespace tandem
