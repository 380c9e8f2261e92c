#pragma once
// `tandem calibrate --gemm-census`, and the census a `--sweep` ends with:
// the executor's GEMM kernels over the census grid
// (simulator/calibrate/gemm_census.h), measured on this machine's GPU or
// read from a census trace measured before.

#include <string>

#include "simulator/calibrate/gemm_census.h"

namespace tandem::cli {

struct CensusOptions {
  std::string grid = "full";
  std::string trace;      // where the census's trace is (to be) written
  bool measure = true;    // false: read `trace`, measured before
  double time_limit_s = 0;  // > 0: tune no shape after this many seconds (the rest left out)
};

// The census: measured on this GPU into options.trace (a progress line now
// and then on stderr), or read from it. Throws std::runtime_error when this
// tandem cannot measure one (built without the CUDA executor) or the trace
// holds none.
sim::GemmCensus takeGemmCensus(const CensusOptions& options);

// The calibration's `gemm_kernels:` section for it, its comment naming the
// GPU and how many shapes the census found.
std::string gemmCensusSection(const sim::GemmCensus& census);

}  // namespace tandem::cli
