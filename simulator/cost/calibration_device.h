#pragma once
// Whether a calibration describes the GPUs of a topology. A calibration's
// compute keys are one kind of GPU's measured kernel times (the fit stops
// when its runs name two kinds, calibrate.h); applied to a topology of
// another kind they silently replace that GPU's figures with the measured
// one's, so tandem simulate says so.
#include <optional>
#include <string>
#include <string_view>

#include "simulator/cost/cost_model.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

// The model a GPU name comes down to, upper case: "NVIDIA H100 80GB HBM3"
// and "H100" -> "H100", "NVIDIA A100-SXM4-80GB" and "A100-PCIE-80GB" ->
// "A100"; "" for an empty name.
std::string gpuModelToken(std::string_view name);

// One line naming both sides when the calibration names its GPU and no GPU
// of the topology is of that model; nullopt when they agree or either side
// does not say.
std::optional<std::string> calibrationGpuMismatch(const Calibration& cal, const Topology& topo);

}  // namespace tandem::sim
