#pragma once
// Keeping a calibration's multi-rank keys through a refit on one GPU.
//
// A calibration has two halves: what one-rank runs measure (per-op fits and
// shapes, launch and step overheads, the kernel overlap efficiency) and what
// only runs of several ranks measure (collectives by message size,
// comm_slowdown and its per-op factors, collective_start_wait,
// collective_beside, multi_rank_launch_ns). After the kernels change, runs
// on one GPU can refresh the first half while the second is kept from the
// calibration that measured it (`tandem calibrate --multi-rank-from FILE`,
// `bench_sim_vs_real --multi-rank-from FILE`). The written file says which
// keys came from where.

#include <string>

#include "simulator/calibrate/calibrate.h"

namespace tandem::sim {

// True when the fit has any multi-rank key of its own (its runs had more
// than one rank).
bool hasMultiRankKeys(const CalibrationResult& r);

// Copies the multi-rank keys of the calibration YAML `base_yaml` (read from
// `base_source`, named in errors as given and in `r` by its file name) into
// `r`, and the base's header comments into its provenance. Throws CalibrationError for a base that does not parse, and
// std::runtime_error when `r` has multi-rank keys of its own (keeping
// another file's would silently drop measured ones) or the base has none.
void keepMultiRankKeys(CalibrationResult& r, const std::string& base_yaml, const std::string& base_source);

}  // namespace tandem::sim
