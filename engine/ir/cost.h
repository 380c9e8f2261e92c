#pragma once
// Cost facts of a node: floating-point operations and bytes moved. These feed
// the simulator's roofline, MFU reporting and the trace analyses' achieved
// TFLOP/s and GB/s. Counted as a GPU kernel would do the work (e.g. causal
// attention does half the score matrix; the flash-style backward recomputes
// the scores, 2.5x the forward).

#include <cstdint>

#include "engine/ir/graph.h"

namespace tandem {

struct OpCost {
  double flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
};

OpCost costOf(const Graph& g, const Node& n);

}  // namespace tandem
