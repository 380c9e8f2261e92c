#pragma once
// FP8 as Hopper's tensor cores read it (the OCP 8-bit formats NVIDIA ships
// as __nv_fp8_e4m3 and __nv_fp8_e5m2), emulated bit for bit on the CPU so
// that the CPU reference's FP8 casts give the GPU's bits:
//   E4M3: exponent bias 7, 3 mantissa bits, no infinities; largest finite
//         448, smallest subnormal 2^-9; NaN is S.1111.111. Transformer
//         Engine's format for activations and weights.
//   E5M2: exponent bias 15, 2 mantissa bits, IEEE-like (infinities and
//         NaNs at the top exponent); largest finite 57344, smallest
//         subnormal 2^-16. Transformer Engine's format for gradients.
// A float becomes FP8 by rounding to the nearest value, ties to even, and
// saturating: what lies beyond the largest finite value (infinities
// included) becomes that value, as CUDA's __NV_SATFINITE conversion does
// (the cast of every FP8 kernel of Transformer Engine). NaN stays NaN.
//
// Per-tensor scaling: a tensor is cast as x * scale and its GEMM undoes the
// scale on the way out (cuBLASLt's A/B scale pointers take 1 / scale). The
// scale comes from the tensor's largest magnitude (amax): scale =
// largest_finite / amax / 2^margin, kept as it was while amax is 0 or not
// finite (Transformer Engine's default scale computation; delayed scaling
// takes amax from a history of earlier steps, current scaling from the
// tensor itself).
#include <cstdint>

namespace tandem {

enum class Fp8Format { E4M3, E5M2 };

// The FP8 bits of x (round to nearest even, saturating, NaN kept).
uint8_t fp8FromFloat(float x, Fp8Format f);
// The value of FP8 bits: exact in a float.
float fp8ToFloat(uint8_t bits, Fp8Format f);
// x rounded through FP8: fp8ToFloat(fp8FromFloat(x, f), f).
float roundToFp8(float x, Fp8Format f);
// 448 (E4M3) or 57344 (E5M2).
float fp8LargestFinite(Fp8Format f);
// The scale for a tensor of largest magnitude amax, the previous scale kept
// where amax says nothing (0, infinite or NaN).
float fp8Scale(float amax, Fp8Format f, float previous_scale = 1.0f, int margin = 0);

}  // namespace tandem
