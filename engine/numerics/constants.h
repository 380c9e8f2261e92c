#pragma once
// Constants of the models' math that both executors must share bit for bit:
// the CPU reference (engine/cpu/) and the GPU kernels (engine/cuda/) read
// them from here, so neither executor includes the other.

namespace tandem {

// RoPE base: Llama 2's 10000. Angles are t * kRopeTheta^(-2i/D).
inline constexpr double kRopeTheta = 10000.0;
// The epsilon under the square root of RMSNorm (Llama) and LayerNorm (GPT-2).
inline constexpr double kRmsNormEps = 1e-5;
inline constexpr double kLayerNormEps = 1e-5;

}  // namespace tandem
