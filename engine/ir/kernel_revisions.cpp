#include "engine/ir/kernel_revisions.h"

namespace tandem {

int kernelRevision(OpKind op) {
  switch (op) {
    // 2: the warps' weight-gradient sums in shared memory without bank
    // conflicts (rows of more than 24 elements per lane: RMSNorm 1024-2048
    // wide; the layernorm takes a block per row there by default).
    case OpKind::RmsNormBwd: return 2;
    // 2: the cast-transposes read a tile's values before writing any code.
    case OpKind::CastFp8: return 2;
    default: return 1;
  }
}

}  // namespace tandem
