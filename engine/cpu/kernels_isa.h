#pragma once
// Which instruction set the CPU matmul kernel runs with. Every path performs
// the same multiplies and adds in the same order (no fused multiply-add), so
// results are bitwise identical and only the speed differs. The fastest
// supported path is chosen at start-up; tests switch paths to prove equality.

namespace tandem::cpu {

enum class MatmulIsa { Baseline, Avx2 };

bool matmulIsaSupported(MatmulIsa isa);
MatmulIsa matmulIsa();
// Throws std::runtime_error when the CPU or the build lacks `isa`.
void setMatmulIsa(MatmulIsa isa);

}  // namespace tandem::cpu
