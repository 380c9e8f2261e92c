#pragma once
// A calibration for a GPU nobody swept, derived from one that was: the
// H100 SXM from the H200 (the same GH100 chip: 132 SMs, the same clocks
// and 700 W power limit, so the same FLOP/s; HBM3 at 3.35 TB/s in place
// of HBM3e at 4.8 TB/s, 80 GB in place of 141 GB).
//
// What is scaled: each measured shape's time beyond its kind's fixed cost
// (the fit's constant) by the ratio of its ideal times on the two GPUs,
// max(FLOPs / peak, bytes / bandwidth): a kernel bound by memory on both
// takes 4.8 / 3.35 = 1.43 times as long on the H100, one bound by its
// FLOPs the same time, one between by its own ratio; the fits' per-MB
// terms by the bandwidth ratio. What is kept: launch and step overheads,
// how kernels share the GPU, and the multi-rank keys (collectives over
// NVLink 4 and NCCL, the same on a DGX H100 as on the H200 they were
// measured on). The written file says all of this in its header.

#include <string>

#include "simulator/calibrate/calibrate.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

// `source` read from `source_yaml` (its header is kept as provenance);
// `from` and `to` the two GPUs' figures (topology_presets.h's models).
// Throws std::runtime_error when a shape has no recorded work (a
// calibration written before shapes recorded it cannot be rescaled) or a
// GPU lacks its peaks.
CalibrationResult deriveCalibration(const std::string& source_yaml, const std::string& source_name,
                                    const DeviceSpec& from, const DeviceSpec& to, const std::string& gpu_name);

}  // namespace tandem::sim
