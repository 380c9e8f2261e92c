#pragma once
// `tandem run --placement auto|FILE`: which CUDA device each rank opens.
//
// FILE is a map `tandem place --out` wrote (simulator/placement/
// placement_file.h): rank r opens the GPU the map gives it on its host
// (`local`). auto asks this machine's `nvidia-smi topo -m` (and `nvidia-smi
// nvlink -s`, and the GPU's name from `nvidia-smi --query-gpu=name`),
// imports it as `tandem topo import` does and places the job on it as
// `tandem place` does (simulator/placement/place_job.h); the whole world must
// then sit on this host. TANDEM_NVIDIA_SMI names another nvidia-smi binary.
// Resolving needs no GPU, so a bad map is refused before any rank starts.

#include <string>
#include <vector>

#include "engine/plan/plan.h"

namespace tandem::cli {

struct ResolvedPlacement {
  std::vector<int> device_of_rank;  // CUDA device index on the rank's host
  std::string source;               // the map file, or "auto (...)" with the simulated steps
};

// Throws std::runtime_error (a map's errors carry FILE:LINE).
ResolvedPlacement resolveRunPlacement(const std::string& what, const Plan& plan);

// "0,2,1,3": how `tandem run` hands the resolved map to the ranks it starts.
std::string devicesText(const std::vector<int>& devices);
std::vector<int> parseDevicesText(const std::string& text, int world_size);

// "rank 0 -> GPU 0, rank 1 -> GPU 2, ..." (the first 16 ranks).
std::string placementLine(const std::vector<int>& devices);

}  // namespace tandem::cli
